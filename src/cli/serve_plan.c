/* serve_plan.c — see serve_plan.h. */
#include "cli/serve_plan.h"
#include "cli/parse.h"
#include "plan/predict.h"
#include "sim/deploy.h"

#include <stdio.h>
#include <string.h>

enum { GIVEN_PLANNER, GIVEN_SLO, GIVEN_COST, GIVEN_STARTUP };

int serve_plan_table(serve_plan_opts *o, dy_opt *t)
{
    static const int mode_values[] = {DY_AUTOSCALE_OFF, DY_AUTOSCALE_SLA, DY_AUTOSCALE_REACTIVE};
    for (int i = 0; i < 3; i++)
        o->modes[i] = dy_autoscale_mode_name(mode_values[i]);
    o->modes[3] = NULL;
    /* The default: the best of `dyad plan predict` at 10 s intervals on the bundled traces. */
    dy_predict_parse("kalman", &o->predict, NULL, 0);
    const dy_opt own[SERVE_PLAN_OPTS] = {
        {.section = "Planner: resizing the pools while serving (docs/planner.md)",
         .name = "cores", .kind = DY_OPT_INT, .dst = &o->cores, .meta = "N",
         .help = "the core budget: at most N / --threads-per-worker workers run at once, and "
                 "the pools may be resized (by the planner, or by hand with POST "
                 "/v1/admin/pools) without a restart; the workers given by --workers or "
                 "--prefill-workers/--decode-workers are the start", .min = 1, .max = 4096,
         .shown_default = "fixed pools"},
        {.name = "planner", .kind = DY_OPT_ENUM, .dst = &o->mode, .meta = "MODE",
         .help = "sla: size the pools for the forecast traffic through the cost model and the "
                 "objectives; reactive: grow or shrink a pool by one when observed latency, "
                 "queue or KV use cross their thresholds; off: by hand only",
         .names = o->modes, .values = mode_values, .def = DY_AUTOSCALE_OFF,
         .given = &o->given[GIVEN_PLANNER]},
        {.name = "slo", .kind = DY_OPT_CALL, .call = cli_opt_slo, .ctx = &o->slo, .meta = "LIST",
         .help = "the objectives: ttft_ms=X,itl_ms=Y (a request's time to first token and "
                 "mean time between tokens), which the planner sizes for and the status page "
                 "(/v1/dyad/status, /dashboard) measures goodput by",
         .given = &o->given[GIVEN_SLO]},
        {.name = "cost-model", .kind = DY_OPT_STR, .dst = &o->cost_model, .meta = "FILE",
         .help = "--planner sla: the model's cost on this machine (docs/sim-costs.md; made by "
                 "`dyad sim fit`), fitted at --threads-per-worker threads",
         .given = &o->given[GIVEN_COST]},
        {.name = "planner-interval", .kind = DY_OPT_DOUBLE, .dst = &o->interval_s, .meta = "S",
         .help = "seconds between planner decisions", .min = 0.1, .max = 86400, .def = 10},
        {.name = "planner-predictor", .kind = DY_OPT_CALL, .call = cli_opt_predictor,
         .ctx = &o->predict, .meta = "P",
         .help = "--planner sla: how the next intervals' load is forecast: last, mean[:W], "
                 "holt[:ALPHA,BETA] or kalman[:Q,R] (`dyad plan predict` compares them on a "
                 "trace)", .shown_default = "kalman:0.01,1"},
        {.name = "planner-dwell", .kind = DY_OPT_INT, .dst = &o->min_dwell, .meta = "N",
         .help = "intervals a smaller size must be enough before the planner shrinks", .min = 1,
         .max = 1000, .def = 3},
        {.name = "planner-startup", .kind = DY_OPT_DOUBLE, .dst = &o->startup_s, .meta = "S",
         .help = "how long a new worker takes to serve (the forecast looks that far ahead)",
         .min = 0, .max = 86400, .def = -1, .shown_default = "what the first workers took",
         .given = &o->given[GIVEN_STARTUP]},
        {.name = "planner-reconcile", .kind = DY_OPT_DOUBLE, .dst = &o->reconcile_s,
         .meta = "S", .help = "how often moves that had to wait (a drain) are tried again",
         .min = 0.01, .max = 60, .def = 0.2},
    };
    for (int i = 0; i < SERVE_PLAN_OPTS; i++)
        t[i] = own[i];
    return SERVE_PLAN_OPTS;
}

bool serve_plan_check(serve_plan_opts *o, dy_fleet_config *w)
{
    const char *bad = NULL;
    const int threads = w->worker.threads;
    if (o->cores == 0 && (o->given[GIVEN_PLANNER] || o->given[GIVEN_COST]))
        bad = "--planner and --cost-model need --cores N (the budget the pools are sized "
              "within)";
    else if (o->given[GIVEN_SLO] && !(o->slo.ttft_ms > 0 && o->slo.tpot_ms > 0))
        bad = "--slo needs both ttft_ms=X and itl_ms=Y";
    else if (o->cores == 0 && o->slo.e2e_ms > 0)
        bad = "--slo: e2e_ms is not an objective dyad serve measures goodput by";
    else if (o->cores == 0)
        return true; /* --slo alone: the objectives the status page holds requests to */
    else if (o->mode != DY_AUTOSCALE_OFF && !(o->slo.ttft_ms > 0 && o->slo.tpot_ms > 0))
        bad = "--planner needs --slo ttft_ms=X,itl_ms=Y";
    else if (o->slo.e2e_ms > 0)
        bad = "--slo: e2e_ms is not an objective the planner sizes for";
    else if (o->mode == DY_AUTOSCALE_SLA && !o->cost_model)
        bad = "--planner sla needs --cost-model FILE (the model's cost on this machine: dyad "
              "sim fit)";
    else if (w->prefill_launcher || w->decode_launcher)
        bad = "--cores cannot be combined with --prefill-launcher/--decode-launcher (a "
              "worker's launcher would change with its role)";
    if (bad) {
        fprintf(stderr, "dyad serve: %s\n", bad);
        return false;
    }
    int slots = o->cores / threads;
    if (slots > 64)
        slots = 64;
    if (slots < w->n_workers) {
        fprintf(stderr, "dyad serve: --cores %d runs at most %d worker%s of %d thread%s, fewer "
                "than the %d started\n", o->cores, slots, slots == 1 ? "" : "s", threads,
                threads == 1 ? "" : "s", w->n_workers);
        return false;
    }
    w->n_start = w->n_workers;
    w->n_workers = slots;
    w->switchable = true;
    return true;
}

/* The cost model's view of this fleet's workers; -1 after a message. */
static int balance_hw(const serve_plan_opts *o, const dy_fleet_config *w, dy_fleet *fleet,
                      dy_cost_model **cm, dy_balance_hw *hw)
{
    char err[512];
    if (!(*cm = dy_cost_load(o->cost_model, err, sizeof err))) {
        fprintf(stderr, "dyad serve: --cost-model: %s\n", err);
        return -1;
    }
    if (dy_cost_get_kind(*cm) != DY_COST_MEASURED || dy_cost_threads(*cm) != w->worker.threads) {
        fprintf(stderr, "dyad serve: --cost-model %s: %s, but the workers run %d thread%s each\n",
                o->cost_model,
                dy_cost_get_kind(*cm) != DY_COST_MEASURED ? "is a roofline model of a GPU"
                                                          : "was fitted at another thread count",
                w->worker.threads, w->worker.threads == 1 ? "" : "s");
        return -1;
    }
    const char *base = strrchr(w->worker.model, '/');
    base = base ? base + 1 : w->worker.model;
    if (strcmp(dy_cost_served_model(*cm), base) != 0) {
        fprintf(stderr, "dyad serve: --cost-model %s prices %s, not the model served (%s): "
                "make one with `dyad sim fit --model %s`\n", o->cost_model,
                dy_cost_served_model(*cm), base, w->worker.model);
        return -1;
    }
    dy_worker_info info;
    dy_fleet_info(fleet, &info, 1);
    dy_deploy_shape shape = dy_deploy_shape_default();
    shape.kv_blocks = info.hello.kv_blocks;
    shape.block_size = w->worker.block_size;
    shape.max_batch_tokens = w->worker.max_batch_tokens;
    shape.max_running = w->worker.max_running;
    *hw = dy_deploy_balance_hw(*cm, &shape, o->cores);
    hw->units_per_worker = w->worker.threads;
    return 0;
}

/* Whether any deployment could meet the objectives: the criterion for the lightest traffic
 * there is (a one-token prompt and answer, now and then) at no budget; -1 after a message. */
static int objectives_possible(const serve_plan_opts *o, const dy_balance_hw *hw,
                               const dy_balance_slo *slo)
{
    const dy_balance_traffic probe = {.rate = 1e-3, .isl = 1, .osl = 1};
    dy_balance_hw free_hw = *hw;
    free_hw.max_units = 0;
    dy_balance b;
    char err[256];
    if (dy_balance_solve(&probe, slo, &free_hw, &b, err, sizeof err) != 0) {
        fprintf(stderr, "dyad serve: --slo: %s\n", err);
        return -1;
    }
    if (!b.agg.ok && !b.disagg.ok) {
        fprintf(stderr, "dyad serve: --slo ttft_ms=%g,itl_ms=%g cannot be met by any deployment "
                "of this model on the cost model %s (%s)\n", o->slo.ttft_ms, o->slo.tpot_ms,
                o->cost_model, b.agg.why ? b.agg.why : "infeasible");
        return -1;
    }
    return 0;
}

int serve_plan_start(const serve_plan_opts *o, const dy_fleet_config *w, dy_fleet *fleet,
                     dy_loadwin *win, double startup_s, serve_planner *out)
{
    *out = (serve_planner){0};
    if (o->cores == 0)
        return 0;
    dy_autoscale_config c = {.mode = o->mode, .reconcile_s = o->reconcile_s};
    if (o->cost_model && balance_hw(o, w, fleet, &out->costs, &c.planner.hw) != 0) {
        serve_plan_stop(out);
        return -1;
    }
    c.planner.mode = o->mode == DY_AUTOSCALE_REACTIVE ? DY_PLANNER_REACTIVE : DY_PLANNER_SLA;
    if (!out->costs) { /* reactive without a cost model: only the budget is needed */
        c.planner.hw.units_per_worker = w->worker.threads;
        c.planner.hw.max_units = o->cores;
    }
    c.planner.predict = o->predict;
    c.planner.slo = (dy_balance_slo){o->slo.ttft_ms / 1e3, o->slo.tpot_ms / 1e3};
    if (out->costs && objectives_possible(o, &c.planner.hw, &c.planner.slo) != 0) {
        serve_plan_stop(out);
        return -1;
    }
    c.planner.interval_s = o->interval_s;
    c.planner.startup_s = o->startup_s >= 0 ? o->startup_s : startup_s;
    c.planner.min_dwell = o->min_dwell;
    char err[512];
    const int n_start = w->n_start > 0 ? w->n_start : w->n_workers;
    out->autoscale = dy_autoscale_start(&c, fleet, win, w->n_prefill > 0, w->n_prefill,
                                        n_start - w->n_prefill, err, sizeof err);
    if (!out->autoscale) {
        fprintf(stderr, "dyad serve: --planner: %s\n", err);
        serve_plan_stop(out);
        return -1;
    }
    return 0;
}

void serve_plan_stop(serve_planner *p)
{
    dy_autoscale_stop(p->autoscale);
    dy_cost_free(p->costs);
    *p = (serve_planner){0};
}
