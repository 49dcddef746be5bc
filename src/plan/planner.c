/* planner.c — see planner.h. Owns the SLA mode (forecast, correction, sizing, dwell) and the
 * step both modes share; the reactive rule is reactive.c's. */
#include "plan/planner.h"
#include "plan/reactive.h"

#include <math.h>
#include <stdio.h>

/* How far one interval's latency ratio moves the correction (the rest is the old factor), and
 * the range a factor may take: one odd interval must not resize the fleet by itself. */
#define FACTOR_WEIGHT 0.5
#define FACTOR_MIN 0.5
#define FACTOR_MAX 4.0

const char *dy_planner_action_name(int action)
{
    static const char *const names[] = {"hold", "grow", "shrink", "reshape"};
    return action >= DY_PLAN_HOLD && action <= DY_PLAN_RESHAPE ? names[action] : "?";
}

static dy_planner_decision deployment(const dy_planner_config *c, bool split, int prefill,
                                      int decode)
{
    return (dy_planner_decision){.split = split, .prefill = split ? prefill : 0,
                                 .decode = decode,
                                 .units = ((split ? prefill : 0) + decode) *
                                          c->hw.units_per_worker,
                                 .ttft_factor = 1, .itl_factor = 1};
}

/* REACTIVE sizes from no model: its objectives and its budget are all it reads of slo and hw. */
static const char *check_reactive_model(const dy_planner_config *c)
{
    return !(isfinite(c->slo.ttft_s) && c->slo.ttft_s > 0)   ? "slo.ttft: must be > 0"
           : !(isfinite(c->slo.itl_s) && c->slo.itl_s > 0)   ? "slo.itl: must be > 0"
           : c->hw.units_per_worker < 1                      ? "hw.units_per_worker: must be >= 1"
           : c->hw.max_units < 0                             ? "hw.max_units: must be >= 0"
                                                             : NULL;
}

/* What each mode needs of the configuration: 0, or -1 with the field named in err. */
static int check_model(const dy_planner_config *c, char *err, size_t errlen)
{
    if (c->mode != DY_PLANNER_SLA && c->mode != DY_PLANNER_REACTIVE) {
        snprintf(err, errlen, "planner.mode: must be sla or reactive");
        return -1;
    }
    if (dy_reactive_check(&c->reactive, err, errlen) != 0)
        return -1;
    if (c->mode == DY_PLANNER_REACTIVE) {
        const char *bad = check_reactive_model(c);
        if (bad)
            snprintf(err, errlen, "%s", bad);
        return bad ? -1 : 0;
    }
    const dy_balance_traffic probe = {.rate = 1, .isl = 1, .osl = 1};
    return dy_predict_check(&c->predict, err, errlen) != 0 ||
                   dy_balance_check(&probe, &c->slo, &c->hw, err, errlen) != 0
               ? -1
               : 0;
}

int dy_planner_init(dy_planner *p, const dy_planner_config *c, bool split, int prefill,
                    int decode, char *err, size_t errlen)
{
    if (check_model(c, err, errlen) != 0)
        return -1;
    const char *bad = !(isfinite(c->interval_s) && c->interval_s > 0)
                          ? "planner.interval_s: must be > 0"
                      : !(isfinite(c->startup_s) && c->startup_s >= 0)
                          ? "planner.startup_s: must be >= 0"
                      : c->min_dwell < 1 ? "planner.min_dwell: must be >= 1"
                      : decode < 1 || (split && prefill < 1)
                          ? "planner.start: needs a decode (or aggregated) worker, and a prefill "
                            "worker when split"
                          : NULL;
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return -1;
    }
    *p = (dy_planner){.cfg = *c};
    dy_predict_init(&p->rate, &c->predict);
    dy_predict_init(&p->isl, &c->predict);
    dy_predict_init(&p->osl, &c->predict);
    p->current = deployment(c, split, prefill, decode);
    return 0;
}

static const char *check_obs(const dy_planner_obs *o)
{
    const double v[] = {o->requests, o->prompt_tokens, o->output_tokens, o->ttft_s,
                        o->itl_s,    o->ttft_p90_s,   o->itl_p90_s,     o->waiting};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!(isfinite(v[i]) && v[i] >= 0))
            return "planner observation: counts and latencies must be finite and >= 0";
    if (!(o->prefix_hit >= 0 && o->prefix_hit < 1))
        return "planner observation: prefix_hit must be in [0, 1)";
    if (!(o->kv_use >= 0 && o->kv_use <= 1))
        return "planner observation: kv_use must be in [0, 1]";
    if (o->requests > 0 && (o->prompt_tokens < o->requests || o->output_tokens < o->requests))
        return "planner observation: each request has at least one prompt and one output token";
    return NULL;
}

/* The interval's traffic; lengths of an interval without requests are the last forecast's
 * (REACTIVE, which forecasts nothing: the last observed). */
static dy_balance_traffic observed_traffic(const dy_planner *p, const dy_planner_obs *o)
{
    const dy_balance_traffic *last = p->cfg.mode == DY_PLANNER_REACTIVE
                                         ? &p->current.observed
                                         : &p->current.predicted;
    dy_balance_traffic t = {.rate = o->requests / p->cfg.interval_s,
                            .prefix_hit = o->prefix_hit};
    t.isl = o->requests > 0 ? o->prompt_tokens / o->requests : last->isl;
    t.osl = o->requests > 0 ? o->output_tokens / o->requests : last->osl;
    return t;
}

static double at_least(double x, double floor)
{
    return x > floor ? x : floor;
}

/* The criterion's latency for the deployed pools under traffic t. */
static dy_balance_choice deployed_under(const dy_planner *p, const dy_balance_traffic *t)
{
    const dy_planner_decision *d = &p->current;
    return d->split ? dy_balance_eval_disagg(t, &p->cfg.slo, &p->cfg.hw, d->prefill, d->decode)
                    : dy_balance_eval_agg(t, &p->cfg.slo, &p->cfg.hw, d->decode);
}

/* observed ÷ predicted, folded into the old factor and kept in range. */
static double corrected(double factor, double observed, double predicted)
{
    if (!(observed > 0 && predicted > 0))
        return factor;
    double r = observed / predicted;
    r = r < FACTOR_MIN ? FACTOR_MIN : r > FACTOR_MAX ? FACTOR_MAX : r;
    const double f = (1 - FACTOR_WEIGHT) * factor + FACTOR_WEIGHT * r;
    return f < FACTOR_MIN ? FACTOR_MIN : f > FACTOR_MAX ? FACTOR_MAX : f;
}

/* What the criterion asks for, for the forecast and the corrected objectives; when it cannot
 * meet them, the most aggregated workers the budget allows (or, with no budget, the current
 * pools). */
static dy_planner_decision target(const dy_planner *p, const dy_balance_traffic *t,
                                  double ttft_f, double itl_f)
{
    const dy_planner_config *c = &p->cfg;
    dy_balance_slo slo = {c->slo.ttft_s / ttft_f, c->slo.itl_s / itl_f};
    dy_balance b;
    char err[160];
    dy_planner_decision d = p->current;
    if (dy_balance_solve(t, &slo, &c->hw, &b, err, sizeof err) == 0 && (b.agg.ok || b.split)) {
        const dy_balance_choice *w = b.split ? &b.disagg : &b.agg;
        d = deployment(c, b.split, w->prefill, w->decode);
        d.reason = b.split ? "the criterion's cheapest split for the forecast"
                           : "the criterion's cheapest aggregated pool for the forecast";
        return d;
    }
    if (c->hw.max_units > 0) {
        d = deployment(c, false, 0, c->hw.max_units / c->hw.units_per_worker);
        d.reason = "the objectives cannot be met within the budget: the most workers it allows";
        d.unmet = true;
        return d;
    }
    d.reason = "the objectives cannot be met at any size: the pools are kept";
    d.unmet = true;
    return d;
}

/* The SLA mode's decision for the interval whose traffic was `seen`: forecast, correction,
 * sizing and dwell (planner.h). */
static dy_planner_decision sla_decision(dy_planner *p, const dy_planner_obs *o,
                                        const dy_balance_traffic *seen)
{
    const dy_planner_config *c = &p->cfg;
    double ttft_f = p->current.ttft_factor, itl_f = p->current.itl_factor;
    if (o->requests > 0) {
        dy_balance_choice now = deployed_under(p, seen);
        ttft_f = corrected(ttft_f, o->ttft_s, now.ttft_s);
        itl_f = corrected(itl_f, o->itl_s, now.itl_s);
        dy_predict_observe(&p->isl, seen->isl);
        dy_predict_observe(&p->osl, seen->osl);
    }
    dy_predict_observe(&p->rate, seen->rate);
    const int lead = 1 + (int)ceil(c->startup_s / c->interval_s);
    dy_balance_traffic next = {
        .rate = at_least(dy_predict_ahead(&p->rate, lead), 1e-9),
        .isl = at_least(p->isl.n ? dy_predict_ahead(&p->isl, lead) : 1, 1),
        .osl = at_least(p->osl.n ? dy_predict_ahead(&p->osl, lead) : 1, 1),
        .prefix_hit = seen->prefix_hit};
    dy_planner_decision d = target(p, &next, ttft_f, itl_f);
    const dy_planner_decision *cur = &p->current;
    const bool same_shape = d.split == cur->split && d.prefill == cur->prefill &&
                            d.decode == cur->decode;
    if (d.units > cur->units) {
        d.action = DY_PLAN_GROW;
        p->smaller_streak = 0;
    } else if (d.units < cur->units && ++p->smaller_streak < c->min_dwell) {
        d = *cur;
        d.action = DY_PLAN_HOLD;
        d.reason = "a smaller size is enough, held until it has been for min_dwell intervals";
        d.unmet = false;
    } else if (d.units < cur->units) {
        d.action = DY_PLAN_SHRINK;
        p->smaller_streak = 0;
    } else if (!same_shape) {
        d.action = DY_PLAN_RESHAPE; /* the same cost in other roles: switch workers' roles */
        p->smaller_streak = 0;
    } else {
        d.action = DY_PLAN_HOLD;
        d.reason = "the deployed pools are what the forecast needs";
        p->smaller_streak = 0;
    }
    d.predicted = next;
    d.ttft_factor = ttft_f;
    d.itl_factor = itl_f;
    return d;
}

int dy_planner_step(dy_planner *p, const dy_planner_obs *o, dy_planner_decision *out,
                    char *err, size_t errlen)
{
    const char *bad = check_obs(o);
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return -1;
    }
    const dy_balance_traffic seen = observed_traffic(p, o);
    dy_planner_decision d;
    if (p->cfg.mode == DY_PLANNER_REACTIVE)
        d = dy_reactive_decide(p, o);
    else {
        d = sla_decision(p, o, &seen);
        dy_reactive_net(p, o, &d);
    }
    d.interval = p->intervals++;
    d.observed = seen;
    dy_reactive_note(p, &d);
    p->current = d;
    *out = d;
    return 0;
}
