/* autoscale.c — see autoscale.h. One thread: it wakes every reconcile_s, runs the planner when
 * an interval is due, and reconciles the slots with the target. The lock guards the target,
 * the last decision and the counters, which HTTP threads read. */
#include "serve/front/autoscale.h"
#include "serve/front/json.h"
#include "serve/front/metrics.h"
#include "util/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS 64
/* Decisions kept for the status page's timeline (an hour at the default interval). */
#define HISTORY 360

/* One decision as the timeline draws it. */
typedef struct {
    double t;                      /* dy_now() when it was made */
    dy_planner_decision d;
} past_decision;

struct dy_autoscale {
    dy_autoscale_config cfg;
    dy_fleet *fleet;
    dy_loadwin *win;
    dy_planner planner;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stop;
    dy_pool_sizes target;
    const char *target_by;          /* "start", "hand", "planner" */
    bool decided;                   /* last holds a decision */
    dy_planner_decision last;
    uint64_t decisions[DY_PLAN_RESHAPE + 1];
    uint64_t moves[DY_ACT_RESUME + 1], move_failures, unmet;
    double last_osl;                /* the last interval's mean output, 0 before one ended */
    past_decision history[HISTORY]; /* a ring: the newest at (n_history - 1) % HISTORY */
    uint64_t n_history;
};

const char *dy_autoscale_mode_name(dy_autoscale_mode m)
{
    return m == DY_AUTOSCALE_SLA ? "sla" : m == DY_AUTOSCALE_REACTIVE ? "reactive" : "off";
}

const char *dy_autoscale_role_name(dy_route_pool p)
{
    return p == DY_POOL_PREFILL ? "prefill" : p == DY_POOL_DECODE ? "decode" : "aggregated";
}

/* ---------------------------------------------------------------- observing */

/* The interval that ended, as the planner reads it: arrivals for the rate and the prompt
 * lengths; the output the ended requests got for the output length (with none ended, the
 * last interval's, or before any what the arrivals asked for); the workers' own reports for
 * the queue and KV use. */
static dy_planner_obs observe(dy_autoscale *a)
{
    dy_loadwin_figures f = dy_loadwin_take(a->win);
    dy_planner_obs o = {.requests = f.arrived, .prompt_tokens = f.prompt_tokens,
                        .ttft_s = f.ttft_mean_s, .itl_s = f.itl_mean_s};
    if (f.ended > 0)
        a->last_osl = f.ended_output_tokens / f.ended;
    double osl = a->last_osl > 0 ? a->last_osl : f.arrived > 0 ? f.max_tokens / f.arrived : 1;
    o.output_tokens = f.arrived * (osl > 1 ? osl : 1);
    if (o.prompt_tokens < o.requests)
        o.prompt_tokens = o.requests;
    double hit = f.ended_prompt_tokens > 0 ? f.ended_cached_tokens / f.ended_prompt_tokens : 0;
    o.prefix_hit = hit < 0 ? 0 : hit > 0.99 ? 0.99 : hit;
    o.ttft_p90_s = f.ttft_p90_s;
    o.itl_p90_s = f.itl_p90_s;
    dy_worker_info w[MAX_SLOTS];
    int n = dy_fleet_info(a->fleet, w, MAX_SLOTS);
    for (int i = 0; i < n; i++) {
        if (!w[i].alive)
            continue;
        o.waiting += w[i].stats.waiting;
        const double total = w[i].stats.kv_blocks_total;
        const double use = total > 0 ? w[i].stats.kv_blocks_used / total : 0;
        if (w[i].role != DY_ROLE_PREFILL && use > o.kv_use)
            o.kv_use = use > 1 ? 1 : use;
    }
    return o;
}

/* ---------------------------------------------------------------- deciding */

static void log_decision(const dy_autoscale *a, const dy_planner_decision *d)
{
    char pools[64];
    if (d->split)
        snprintf(pools, sizeof pools, "%d prefill + %d decode", d->prefill, d->decode);
    else
        snprintf(pools, sizeof pools, "%d aggregated", d->decode);
    fprintf(stderr,
            "dyad serve: planner (%s) interval %ld: %s to %s; observed %.3g req/s ISL %.4g OSL "
            "%.4g hit %.2f; predicted %.3g req/s ISL %.4g OSL %.4g; factors TTFT %.2f ITL %.2f; "
            "%s\n",
            dy_autoscale_mode_name(a->cfg.mode), d->interval, dy_planner_action_name(d->action),
            pools, d->observed.rate, d->observed.isl, d->observed.osl, d->observed.prefix_hit,
            d->predicted.rate, d->predicted.isl, d->predicted.osl, d->ttft_factor, d->itl_factor,
            d->reason ? d->reason : "");
}

static void plan_interval(dy_autoscale *a)
{
    dy_planner_obs o = observe(a);
    dy_planner_decision d;
    char err[256];
    if (dy_planner_step(&a->planner, &o, &d, err, sizeof err) != 0) {
        fprintf(stderr, "dyad serve: planner: %s (interval skipped)\n", err);
        return;
    }
    log_decision(a, &d);
    pthread_mutex_lock(&a->mu);
    a->last = d;
    a->decided = true;
    a->history[a->n_history++ % HISTORY] = (past_decision){dy_now(), d};
    a->decisions[d.action]++;
    a->unmet += d.unmet;
    a->target = dy_plan_target_sizes(&d);
    a->target_by = "planner";
    pthread_mutex_unlock(&a->mu);
}

/* ---------------------------------------------------------------- moving */

static void reconcile(dy_autoscale *a)
{
    dy_plan_slot slots[MAX_SLOTS];
    int n = dy_fleet_slots(a->fleet, slots, MAX_SLOTS);
    pthread_mutex_lock(&a->mu);
    dy_pool_sizes target = a->target;
    pthread_mutex_unlock(&a->mu);
    dy_plan_action acts[MAX_SLOTS];
    int k = dy_plan_reconcile(slots, n, target, acts, MAX_SLOTS);
    for (int i = 0; i < k; i++) {
        char err[256] = "";
        int rc = dy_fleet_move(a->fleet, &acts[i], err, sizeof err);
        if (rc == 1)
            break; /* the picture moved on under us: look again next time */
        const char *what = dy_plan_action_name(acts[i].kind);
        pthread_mutex_lock(&a->mu);
        if (rc == 0)
            a->moves[acts[i].kind]++;
        else
            a->move_failures++;
        pthread_mutex_unlock(&a->mu);
        if (rc != 0) {
            fprintf(stderr, "dyad serve: planner: cannot %s worker %d: %s\n", what,
                    acts[i].slot, err);
            break;
        }
        fprintf(stderr, "dyad serve: planner: %s worker %d (%s)\n", what, acts[i].slot,
                dy_autoscale_role_name(acts[i].role));
    }
}

static void *loop(void *arg)
{
    dy_autoscale *a = arg;
    const bool planning = a->cfg.mode != DY_AUTOSCALE_OFF;
    double next = dy_now() + a->cfg.planner.interval_s;
    pthread_mutex_lock(&a->mu);
    while (!a->stop) {
        double wake = dy_now() + a->cfg.reconcile_s;
        if (planning && next < wake)
            wake = next;
        dy_cond_wait_until(&a->wake, &a->mu, wake);
        if (a->stop)
            break;
        bool due = planning && dy_now() >= next;
        pthread_mutex_unlock(&a->mu);
        if (due) {
            plan_interval(a);
            next += a->cfg.planner.interval_s;
            if (next < dy_now()) /* a stalled interval is not made up for */
                next = dy_now() + a->cfg.planner.interval_s;
        }
        reconcile(a);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* ---------------------------------------------------------------- the interface */

static dy_pool_sizes sizes_of(bool split, int prefill, int decode)
{
    dy_planner_decision d = {.split = split, .prefill = prefill, .decode = decode};
    return dy_plan_target_sizes(&d);
}

dy_autoscale *dy_autoscale_start(const dy_autoscale_config *c, dy_fleet *fleet,
                                 dy_loadwin *win, bool split, int prefill, int decode,
                                 char *err, size_t errlen)
{
    if (!(c->reconcile_s > 0)) {
        snprintf(err, errlen, "the reconcile period must be > 0");
        return NULL;
    }
    dy_autoscale *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *a = (dy_autoscale){.cfg = *c, .fleet = fleet, .win = win, .target_by = "start",
                        .target = sizes_of(split, prefill, decode)};
    if (c->mode != DY_AUTOSCALE_OFF &&
        dy_planner_init(&a->planner, &c->planner, split, prefill, decode, err, errlen) != 0) {
        free(a);
        return NULL;
    }
    pthread_mutex_init(&a->mu, NULL);
    dy_cond_init(&a->wake);
    if (pthread_create(&a->thread, NULL, loop, a) != 0) {
        snprintf(err, errlen, "cannot start the planner thread");
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->wake);
        free(a);
        return NULL;
    }
    return a;
}

void dy_autoscale_stop(dy_autoscale *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_broadcast(&a->wake);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->wake);
    free(a);
}

int dy_autoscale_set_target(dy_autoscale *a, const dy_pool_sizes *t, char *err, size_t errlen)
{
    dy_plan_slot slots[MAX_SLOTS];
    const int n = dy_fleet_slots(a->fleet, slots, MAX_SLOTS);
    const int agg = t->n[DY_POOL_AGG], pre = t->n[DY_POOL_PREFILL], dec = t->n[DY_POOL_DECODE];
    const char *bad = agg < 0 || pre < 0 || dec < 0 ? "pool sizes must be >= 0"
                      : agg + dec < 1 ? "at least one aggregated or decode worker is needed"
                      : pre > 0 && dec < 1 ? "prefill workers need decode workers"
                                           : NULL;
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return -1;
    }
    if ((long)agg + pre + dec > n) {
        snprintf(err, errlen, "%d workers asked for, but the budget (--cores) allows %d",
                 agg + pre + dec, n);
        return -1;
    }
    pthread_mutex_lock(&a->mu);
    a->target = *t;
    a->target_by = "hand";
    pthread_cond_broadcast(&a->wake);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

static json_t *sizes_json(dy_jb *b, const dy_pool_sizes *t)
{
    json_t *o = json_object();
    for (int r = DY_POOL_AGG; r <= DY_POOL_DECODE; r++)
        dy_jb_set(b, o, dy_autoscale_role_name(r), json_integer(t->n[r]));
    return o;
}

static json_t *traffic_json(dy_jb *b, const dy_balance_traffic *t)
{
    json_t *o = json_object();
    dy_jb_set(b, o, "rate", json_real(t->rate));
    dy_jb_set(b, o, "isl", json_real(t->isl));
    dy_jb_set(b, o, "osl", json_real(t->osl));
    dy_jb_set(b, o, "prefix_hit", json_real(t->prefix_hit));
    return o;
}

static json_t *decision_json(dy_jb *b, const dy_planner_decision *d)
{
    json_t *o = json_object();
    dy_jb_set(b, o, "interval", json_integer(d->interval));
    dy_jb_set(b, o, "action", json_string(dy_planner_action_name(d->action)));
    dy_jb_set(b, o, "split", json_boolean(d->split));
    dy_jb_set(b, o, "prefill", json_integer(d->prefill));
    dy_jb_set(b, o, "decode", json_integer(d->decode));
    dy_jb_set(b, o, "observed", traffic_json(b, &d->observed));
    dy_jb_set(b, o, "predicted", traffic_json(b, &d->predicted));
    dy_jb_set(b, o, "ttft_factor", json_real(d->ttft_factor));
    dy_jb_set(b, o, "itl_factor", json_real(d->itl_factor));
    dy_jb_set(b, o, "reason", dy_json_str(d->reason ? d->reason : ""));
    return o;
}

/* The demand the planner saw beside the pools it chose: prompt tokens to compute and tokens to
 * generate per second, and their ratio (what a prefill/decode split follows). */
static json_t *history_entry(dy_jb *b, const past_decision *p, double now)
{
    const dy_planner_decision *d = &p->d;
    const dy_balance_traffic *o = &d->observed;
    const double prefill_tps = o->rate * o->isl * (1 - o->prefix_hit);
    const double decode_tps = o->rate * o->osl;
    json_t *e = json_object();
    dy_jb_set(b, e, "age_s", json_real(now - p->t));
    dy_jb_set(b, e, "interval", json_integer(d->interval));
    dy_jb_set(b, e, "action", json_string(dy_planner_action_name(d->action)));
    dy_jb_set(b, e, "split", json_boolean(d->split));
    dy_jb_set(b, e, "prefill", json_integer(d->prefill));
    dy_jb_set(b, e, "decode", json_integer(d->decode));
    dy_jb_set(b, e, "observed_rate", json_real(o->rate));
    dy_jb_set(b, e, "predicted_rate", json_real(d->predicted.rate));
    dy_jb_set(b, e, "prefill_tokens_per_s", json_real(prefill_tps));
    dy_jb_set(b, e, "decode_tokens_per_s", json_real(decode_tps));
    dy_jb_set(b, e, "demand_ratio", decode_tps > 0 ? json_real(prefill_tps / decode_tps)
                                                   : json_null());
    dy_jb_set(b, e, "unmet", json_boolean(d->unmet));
    return e;
}

/* The last decisions, oldest first (mu held). */
static json_t *history_json(dy_jb *b, const dy_autoscale *a, double now)
{
    json_t *arr = json_array();
    const uint64_t first = a->n_history > HISTORY ? a->n_history - HISTORY : 0;
    for (uint64_t i = first; i < a->n_history; i++)
        dy_jb_append(b, arr, history_entry(b, &a->history[i % HISTORY], now));
    return arr;
}

char *dy_autoscale_json(dy_autoscale *a)
{
    dy_jb b = {0};
    return dy_jb_dump(&b, dy_autoscale_tree(a, dy_now()), JSON_COMPACT);
}

json_t *dy_autoscale_tree(dy_autoscale *a, double now)
{
    dy_plan_slot slots[MAX_SLOTS];
    const int n = dy_fleet_slots(a->fleet, slots, MAX_SLOTS);
    dy_jb b = {0};
    json_t *o = json_object(), *arr = json_array();
    for (int i = 0; i < n; i++) {
        json_t *s = json_object();
        dy_jb_set(&b, s, "id", json_integer(i));
        dy_jb_set(&b, s, "state", json_string(dy_plan_slot_state_name(slots[i].state)));
        if (slots[i].state != DY_SLOT_PARKED)
            dy_jb_set(&b, s, "role", json_string(dy_autoscale_role_name(slots[i].role)));
        if (slots[i].state == DY_SLOT_DRAINING) {
            const char *then = slots[i].to_stop ? "stop"
                                                : dy_autoscale_role_name(slots[i].next_role);
            dy_jb_set(&b, s, "then", json_string(then));
        }
        dy_jb_set(&b, s, "in_flight", json_integer(slots[i].in_flight));
        dy_jb_append(&b, arr, s);
    }
    dy_jb_set(&b, o, "slots", arr);
    pthread_mutex_lock(&a->mu);
    dy_jb_set(&b, o, "planner", json_string(dy_autoscale_mode_name(a->cfg.mode)));
    dy_jb_set(&b, o, "target", sizes_json(&b, &a->target));
    dy_jb_set(&b, o, "target_set_by", json_string(a->target_by));
    if (a->decided)
        dy_jb_set(&b, o, "last_decision", decision_json(&b, &a->last));
    if (a->cfg.mode != DY_AUTOSCALE_OFF)
        dy_jb_set(&b, o, "interval_s", json_real(a->cfg.planner.interval_s));
    dy_jb_set(&b, o, "history", history_json(&b, a, now));
    pthread_mutex_unlock(&a->mu);
    return dy_jb_tree(&b, o);
}

void dy_autoscale_render(dy_autoscale *a, dy_buf *t)
{
    dy_plan_slot slots[MAX_SLOTS];
    const int n = dy_fleet_slots(a->fleet, slots, MAX_SLOTS);
    static const dy_route_pool roles[] = {DY_POOL_AGG, DY_POOL_PREFILL, DY_POOL_DECODE};
    static const dy_slot_state states[] = {DY_SLOT_STARTING, DY_SLOT_ACTIVE, DY_SLOT_DRAINING};
    dy_metrics_header(t, "dyad_planner_workers", "gauge",
                      "Workers by role and state (parked slots are not counted).");
    for (int r = 0; r < 3; r++)
        for (int s = 0; s < 3; s++) {
            int k = 0;
            for (int i = 0; i < n; i++)
                k += slots[i].state == states[s] && slots[i].role == roles[r];
            dy_buf_printf(t, "dyad_planner_workers{role=\"%s\",state=\"%s\"} %d\n",
                          dy_autoscale_role_name(roles[r]), dy_plan_slot_state_name(states[s]), k);
        }
    dy_metrics_header(t, "dyad_planner_slots", "gauge", "Worker slots the core budget allows.");
    dy_buf_printf(t, "dyad_planner_slots %d\n", n);
    pthread_mutex_lock(&a->mu);
    dy_metrics_header(t, "dyad_planner_info", "gauge", "The planner's mode.");
    dy_buf_printf(t, "dyad_planner_info{mode=\"%s\"} 1\n", dy_autoscale_mode_name(a->cfg.mode));
    if (a->cfg.mode != DY_AUTOSCALE_OFF) {
        dy_metrics_header(t, "dyad_planner_objective_seconds", "gauge",
                          "The planner's objectives (--slo): a request's TTFT and mean ITL.");
        dy_buf_printf(t, "dyad_planner_objective_seconds{latency=\"ttft\"} %.6g\n"
                         "dyad_planner_objective_seconds{latency=\"itl\"} %.6g\n",
                      a->cfg.planner.slo.ttft_s, a->cfg.planner.slo.itl_s);
    }
    dy_metrics_header(t, "dyad_planner_target_workers", "gauge", "Workers the target asks for.");
    for (int r = 0; r < 3; r++)
        dy_buf_printf(t, "dyad_planner_target_workers{role=\"%s\"} %d\n",
                      dy_autoscale_role_name(roles[r]), a->target.n[roles[r]]);
    dy_metrics_header(t, "dyad_planner_decisions_total", "counter", "Planner decisions by action.");
    for (int k = DY_PLAN_HOLD; k <= DY_PLAN_RESHAPE; k++)
        dy_buf_printf(t, "dyad_planner_decisions_total{action=\"%s\"} %llu\n",
                      dy_planner_action_name(k), (unsigned long long)a->decisions[k]);
    dy_metrics_header(t, "dyad_planner_unmet_total", "counter",
                      "Decisions that could not meet the objectives within the budget.");
    dy_buf_printf(t, "dyad_planner_unmet_total %llu\n", (unsigned long long)a->unmet);
    dy_metrics_header(t, "dyad_planner_moves_total", "counter",
                      "Moves carried out on worker slots, by kind.");
    for (int k = DY_ACT_START; k <= DY_ACT_RESUME; k++)
        dy_buf_printf(t, "dyad_planner_moves_total{kind=\"%s\"} %llu\n", dy_plan_action_name(k),
                      (unsigned long long)a->moves[k]);
    dy_metrics_header(t, "dyad_planner_move_failures_total", "counter", "Moves that failed.");
    dy_buf_printf(t, "dyad_planner_move_failures_total %llu\n",
                  (unsigned long long)a->move_failures);
    if (a->decided) {
        const dy_planner_decision *d = &a->last;
        const struct {
            const char *name, *help;
            double observed, predicted;
        } load[] = {
            {"dyad_planner_request_rate", "Requests per second, in the last interval and as "
             "forecast.", d->observed.rate, d->predicted.rate},
            {"dyad_planner_prompt_tokens", "Mean prompt tokens per request.", d->observed.isl,
             d->predicted.isl},
            {"dyad_planner_output_tokens", "Mean output tokens per request.", d->observed.osl,
             d->predicted.osl},
        };
        for (size_t i = 0; i < sizeof load / sizeof load[0]; i++) {
            dy_metrics_header(t, load[i].name, "gauge", load[i].help);
            dy_buf_printf(t, "%s{kind=\"observed\"} %.6g\n%s{kind=\"predicted\"} %.6g\n",
                          load[i].name, load[i].observed, load[i].name, load[i].predicted);
        }
        dy_metrics_header(t, "dyad_planner_correction_factor", "gauge",
                          "Observed over predicted latency, as the planner applies it.");
        dy_buf_printf(t, "dyad_planner_correction_factor{latency=\"ttft\"} %.6g\n"
                         "dyad_planner_correction_factor{latency=\"itl\"} %.6g\n",
                      d->ttft_factor, d->itl_factor);
    }
    pthread_mutex_unlock(&a->mu);
}
