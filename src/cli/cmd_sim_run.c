/* cmd_sim_run.c — `dyad sim run`: simulates a deployment (spelt as `dyad serve` spells it) on
 * a cost model (sim/cost.h) under a workload (spelt and generated as `dyad bench` generates
 * it: bench_workload.h's requests, bench_run.h's arrival times) and prints `dyad bench`'s
 * report (bench_report.h) of the simulated run, so that real and simulated runs compare line
 * by line. The simulation itself is sim/sim.h; this file only turns options into its inputs
 * and its records into bench's figures. */
#include "bench/bench_cli.h"
#include "bench/bench_report.h"
#include "bench/bench_run.h"
#include "bench/bench_workload.h"
#include "cli/commands.h"
#include "cli/deploy_opts.h"
#include "cli/parse.h"
#include "cli/sim_plan_report.h"
#include "plan/predict.h"
#include "sim/cost.h"
#include "sim/deploy.h"
#include "sim/requests.h"
#include "sim/sim.h"
#include "util/clock.h"
#include "util/progress.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char run_usage[] =
    "usage: dyad sim run --cost FILE [deployment] [workload] [options]\n"
    "Simulates a deployment (as `dyad serve` spells it) on a cost model (docs/sim-costs.md)\n"
    "under a workload (as `dyad bench` spells and generates it) and prints `dyad bench`'s\n"
    "report of the simulated run.\n";
static const char run_epilog[] =
    "\n"
    "The load is bench's: a closed loop (--concurrency C, default 1), an open loop (--rate R,\n"
    "with --concurrency as a cap on requests in flight) or a trace at its times; --sweep runs\n"
    "one simulation per value. The figures are bench's (TTFT, TPOT, ITL, E2E; the run from\n"
    "time 0); the same seed gives the same report. What the simulation leaves out is in\n"
    "docs/sim.md. --planner sla (or reactive) runs the planner (plan/planner.h) each interval\n"
    "on what the simulated frontend saw, sizing for --slo's ttft_ms and tpot_ms within\n"
    "--budget-workers, and carries its decisions out on the workers as `dyad serve` does\n"
    "(docs/sim.md, \"Planner replay\"). On a terminal, stderr shows a progress line (samples\n"
    "ended, simulated time).\n"
    "Exit status: 0; 1 when the cost model or a workload file is bad or no request succeeded;\n"
    "2 on a usage error.\n";

#define DEFAULT_REQUESTS 100 /* bench's, without --requests, --duration or a trace */

typedef struct {
    const char *cost, *csv, *plot;
    dyb_sweep_kind sweep;
    double sweep_values[DYB_MAX_SWEEP];
    int n_sweep;
    int tp;
    /* deployment */
    int agg, pre, dec;          /* -1: not given */
    cli_deploy_opts dep; /* every worker's limits */
    int max_queue, ctx_len;
    int prefill_busy_tokens;
    bool no_kv_events;
    dy_router_config router;
    dy_route_config route;
    /* load and workload */
    long concurrency, requests, cores;
    double rate, burstiness, duration_s;
    dyb_workload_config wl;
    dyb_slo slo;
    bool json;
    /* policy names, as the router spells them */
    const char *policies[5];
    /* the planner */
    int planner;                /* PLANNER_OFF or PLANNER_SLA */
    double plan_interval_s, startup_s, switch_s;
    int budget_workers, min_dwell;
    dy_predict_config predict;
    const char *planner_log;
} run_opts;

enum { PLANNER_OFF = 0, PLANNER_SLA = 1, PLANNER_REACTIVE = 2 };
static const char *const planner_names[] = {"off", "sla", "reactive", NULL};

static bool set_sweep(void *ctx, const char *v, char *err, size_t errlen)
{
    run_opts *o = ctx;
    return dyb_sweep_parse(v, &o->sweep, o->sweep_values, &o->n_sweep, err, errlen);
}

#define N_RUN_OPTS 60

/* The option table: serve's names, ranges and defaults for the deployment, bench's for the
 * load and the workload. seen[i] tells whether entry i was given. Returns its length. */
static int run_table(run_opts *o, bool *seen, dy_opt *t)
{
    static const int policy_values[] = {DY_ROUTER_ROUND_ROBIN, DY_ROUTER_RANDOM,
                                        DY_ROUTER_LEAST_LOADED, DY_ROUTER_KV_AWARE};
    for (int i = 0; i < 4; i++)
        o->policies[i] = dy_router_policy_name(policy_values[i]);
    const dy_route_config route = dy_route_config_default();
    const dy_router_config router = dy_router_config_default();
    dyb_workload_config *w = &o->wl;
    const dy_opt head[] = {
        {.section = "Cost model", .name = "cost", .kind = DY_OPT_STR, .dst = &o->cost,
         .meta = "FILE", .help = "the cost model: a preset of sim/costs/ or one `dyad sim fit` "
                                 "wrote (required)"},
        {.name = "tp", .kind = DY_OPT_INT, .dst = &o->tp, .meta = "N",
         .help = "re-target a roofline model to N GPUs per worker (1, 2, 4 or 8)", .min = 1,
         .max = 8, .shown_default = "the file's"},
        {.section = "Deployment (as `dyad serve`)", .name = "workers", .kind = DY_OPT_INT,
         .dst = &o->agg, .meta = "N",
         .help = "aggregated workers (the same as --prefill-workers 0 --decode-workers N)",
         .min = 1, .max = DY_DEPLOY_MAX_WORKERS, .def = -1, .shown_default = ""},
        {.name = "prefill-workers", .kind = DY_OPT_INT, .dst = &o->pre, .meta = "P",
         .help = "prefill workers; 0 = aggregated serving", .min = 0,
         .max = DY_DEPLOY_MAX_WORKERS - 1, .def = -1, .shown_default = "1"},
        {.name = "decode-workers", .kind = DY_OPT_INT, .dst = &o->dec, .meta = "D",
         .help = "decode workers", .min = 1, .max = DY_DEPLOY_MAX_WORKERS, .def = -1,
         .shown_default = "1"},
    };
    const dy_opt after_workers[] = {
        {.name = "ctx-len", .kind = DY_OPT_INT, .dst = &o->ctx_len, .meta = "N",
         .help = "the model's context length: a sequence stops there (0: no limit)", .min = 0,
         .max = 1 << 24, .def = 0},
        {.name = "disagg-min-tokens", .kind = DY_OPT_INT, .dst = &o->route.disagg_min_tokens,
         .meta = "N", .help = "prompts with fewer tokens prefill on their decode worker",
         .min = 0, .max = 1 << 24, .def = route.disagg_min_tokens},
        {.name = "prefill-busy-tokens", .kind = DY_OPT_INT, .dst = &o->prefill_busy_tokens,
         .meta = "N", .help = "prefill backlog above which prompts stay local", .min = 0,
         .max = 1 << 30, .def = (double)route.prefill_busy_tokens},
        {.name = "router", .kind = DY_OPT_ENUM, .dst = (int *)&o->router.policy,
         .meta = "POLICY", .help = "which worker of a pool: kv-aware (cached prefix against "
                                   "load), least-loaded, round-robin or random",
         .names = o->policies, .values = policy_values, .def = router.policy},
        {.name = "router-overlap-weight", .kind = DY_OPT_DOUBLE, .dst = &o->router.overlap_weight,
         .meta = "W", .help = "kv-aware: weight of prefill blocks against decode blocks",
         .min = 0, .max = 1e6, .def = router.overlap_weight},
        {.name = "router-temperature", .kind = DY_OPT_DOUBLE, .dst = &o->router.temperature,
         .meta = "T", .help = "kv-aware: 0 picks the cheapest worker; > 0 samples from a "
                              "softmax over normalised costs (with serve's fixed seed)",
         .min = 0, .max = 1e6, .def = router.temperature},
        {.name = "router-ttl", .kind = DY_OPT_DOUBLE, .dst = &o->router.approx_ttl_s,
         .meta = "S", .help = "approximate mode (--no-kv-events): how long a prediction holds",
         .min = 0.001, .max = 1e7, .def = router.approx_ttl_s},
        {.name = "no-kv-events", .kind = DY_OPT_FLAG, .dst = &o->no_kv_events,
         .help = "workers publish no KV events; the router predicts their caches from its own "
                 "decisions (approximate mode)"},
        {.name = "max-queue", .kind = DY_OPT_INT, .dst = &o->max_queue, .meta = "N",
         .help = "sequences waiting for a first token before new requests are refused",
         .min = 1, .max = 1 << 20, .def = 256},
        {.section = "Load (as `dyad bench`: closed loop, open loop or trace times)",
         .name = "concurrency", .kind = DY_OPT_LONG, .dst = &o->concurrency, .meta = "C",
         .help = "closed loop: keep C requests in flight; with --rate or trace times: at most C "
                 "in flight", .min = 1, .max = 100000, .shown_default = "1"},
        {.name = "rate", .kind = DY_OPT_DOUBLE, .dst = &o->rate, .meta = "R",
         .help = "open loop: R requests/s (inf: all at once), gamma-distributed gaps",
         .min = 1e-9, .max = INFINITY, .shown_default = ""},
        {.name = "burstiness", .kind = DY_OPT_DOUBLE, .dst = &o->burstiness, .meta = "B",
         .help = "shape of the gamma gaps (1 = Poisson; <1 burstier)", .min = 1e-3, .max = 1000,
         .def = 1},
        {.name = "requests", .kind = DY_OPT_LONG, .dst = &o->requests, .meta = "N",
         .help = "requests to simulate (with --duration or a trace: no count bound, a trace "
                 "ends at its last row)", .min = 1, .max = 1000000000, .def = -1,
         .shown_default = DY_OPTS_QUOTE(DEFAULT_REQUESTS)},
        {.name = "duration", .kind = DY_OPT_DOUBLE, .dst = &o->duration_s, .meta = "S",
         .help = "no arrivals after S seconds (requests in flight then finish; open loop and "
                 "trace times only)", .min = 0.001,
         .max = 1e7, .shown_default = ""},
        {.name = "seed", .kind = DY_OPT_U64, .dst = &w->seed, .meta = "S",
         .help = "seed of every random choice: the same seed gives the same prompts, "
                 "lengths and arrival gaps"},
    };
    const dy_opt planner[] = {
        {.section = "Planner (issue 13: the pools resized as the traffic drifts)",
         .name = "planner", .kind = DY_OPT_ENUM, .dst = &o->planner, .meta = "MODE",
         .help = "sla: the SLA planner sizes the pools each interval for --slo's ttft_ms and "
                 "tpot_ms, within --budget-workers; reactive: one worker at a time where a p90, "
                 "the queue or KV use is over its threshold (plan/planner.h); off: the "
                 "deployment is fixed",
         .names = planner_names, .def = PLANNER_OFF},
        {.name = "planner-interval", .kind = DY_OPT_DOUBLE, .dst = &o->plan_interval_s,
         .meta = "S", .help = "seconds between the planner's decisions", .min = 0.001,
         .max = 1e6, .def = 10},
        {.name = "budget-workers", .kind = DY_OPT_INT, .dst = &o->budget_workers, .meta = "N",
         .help = "workers the planner may run at once (the deployment's are the first; the "
                 "rest start parked)", .min = 1, .max = DY_DEPLOY_MAX_WORKERS,
         .shown_default = "the deployment's workers"},
        {.name = "startup-s", .kind = DY_OPT_DOUBLE, .dst = &o->startup_s, .meta = "S",
         .help = "a started worker serves S seconds after the planner starts it (and the "
                 "planner forecasts that far ahead)", .min = 0, .max = 1e6, .def = 0},
        {.name = "switch-s", .kind = DY_OPT_DOUBLE, .dst = &o->switch_s, .meta = "S",
         .help = "a worker switching roles serves S seconds after it drained", .min = 0,
         .max = 1e6, .def = 0},
        {.name = "planner-predictor", .kind = DY_OPT_CALL, .call = cli_opt_predictor,
         .ctx = &o->predict, .meta = "P",
         .help = "the load predictor of each series: last, mean[:W], holt[:ALPHA,BETA] or "
                 "kalman[:Q,R] (`dyad plan predict` compares them on a trace)",
         .shown_default = "kalman:0.01,1"},
        {.name = "planner-min-dwell", .kind = DY_OPT_INT, .dst = &o->min_dwell, .meta = "N",
         .help = "intervals a smaller size must be the answer before the planner shrinks",
         .min = 1, .max = 100000, .def = 3},
        {.name = "planner-log", .kind = DY_OPT_STR, .dst = &o->planner_log, .meta = "FILE",
         .help = "the planner's decisions as CSV, one row per interval"},
    };
    const dy_opt tail[] = {
        {.section = "Report (as `dyad bench`)", .name = "slo", .kind = DY_OPT_CALL,
         .call = cli_opt_slo, .ctx = &o->slo, .meta = "LIST",
         .help = "goodput objectives: ttft_ms=X,tpot_ms=Y,e2e_ms=Z (any subset)"},
        {.name = "cores", .kind = DY_OPT_LONG, .dst = &o->cores, .meta = "N",
         .help = "for output tokens/s per core (per GPU for a roofline model)", .min = 1,
         .max = 1000000, .shown_default = "workers x threads (measured) or x TP (roofline)"},
        {.name = "sweep", .kind = DY_OPT_CALL, .call = set_sweep, .ctx = o,
         .meta = "P=V1,V2,...", .help = "simulate once per value: concurrency=1,2,4,8 or "
                                        "rate=0.5,1,2,4, compared on bench's Pareto frontier"},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &o->json,
         .help = "one JSON object per run (per sweep point), as bench's, instead of the report"},
        {.name = "csv", .kind = DY_OPT_STR, .dst = &o->csv, .meta = "FILE",
         .help = "the runs as bench's CSV table, with a pareto column"},
        {.name = "plot", .kind = DY_OPT_STR, .dst = &o->plot, .meta = "FILE.svg",
         .help = "bench's Pareto plot as SVG"},
    };
#define N(a) (sizeof(a) / sizeof((a)[0]))
    _Static_assert(N(head) + CLI_DEPLOY_OPTS + N(after_workers) + DYB_WORKLOAD_OPTS +
                       N(planner) + N(tail) <= N_RUN_OPTS, "N_RUN_OPTS");
    int n = cli_opts_append(t, 0, head, N(head));
    n += cli_deploy_opts_table(&o->dep, NULL, true, t + n);
    n = cli_opts_append(t, n, after_workers, N(after_workers));
    n += dyb_workload_opts(w, t + n);
    n = cli_opts_append(t, n, planner, N(planner));
    n = cli_opts_append(t, n, tail, N(tail));
#undef N
    cli_opts_track(t, n, seen);
    return n;
}

/* The planner's options come with --planner sla or reactive, which need both objectives and
 * one run. */
static bool check_planner(const run_opts *o, dy_opts_given g)
{
    static const char *const planner_only[] = {"--planner-interval", "--budget-workers",
                                               "--startup-s", "--switch-s",
                                               "--planner-predictor", "--planner-min-dwell",
                                               "--planner-log"};
    if (o->planner == PLANNER_OFF) {
        for (size_t i = 0; i < sizeof planner_only / sizeof planner_only[0]; i++)
            if (dy_opts_was_given(g, planner_only[i])) {
                fprintf(stderr, "dyad sim run: %s: only with --planner sla or reactive\n",
                        planner_only[i]);
                return false;
            }
        return true;
    }
    if (o->planner == PLANNER_REACTIVE && dy_opts_was_given(g, "--planner-predictor")) {
        fprintf(stderr, "dyad sim run: --planner-predictor: the reactive mode forecasts "
                        "nothing (only with --planner sla)\n");
        return false;
    }
    const char *bad = !(o->slo.ttft_ms > 0) || !(o->slo.tpot_ms > 0)
                          ? "--slo: the planner sizes for ttft_ms=X and tpot_ms=Y: give both"
                      : o->sweep != DYB_SWEEP_NONE ? "--sweep: not with --planner (one run)"
                                                   : NULL;
    if (bad)
        fprintf(stderr, "dyad sim run: %s\n", bad);
    return !bad;
}

/* bench's rules between workload options, serve's between the worker counts, and the load. */
static bool check(const run_opts *o, dy_opts_given g)
{
    const dyb_workload_config *w = &o->wl;
    bool trace = w->trace;
    bool rate = o->rate > 0 || o->sweep == DYB_SWEEP_RATE;
    if (!o->cost) {
        fprintf(stderr, "dyad sim run: --cost: required (see dyad sim run --help)\n");
        return false;
    }
    /* A closed loop's sends depend on the time (bench stops sending at --duration), which a
     * request list fixed before the run cannot say. */
    if (dy_opts_was_given(g, "--duration") && !rate && !trace) {
        fprintf(stderr, "dyad sim run: --duration: a simulated closed loop is bounded by "
                        "--requests (give --rate or a --trace for --duration)\n");
        return false;
    }
    return dy_opts_conflict(g, "--workers", o->pre >= 0 || o->dec >= 0,
                            "--prefill-workers/--decode-workers") &&
           dyb_check_workload_opts(g, w, rate, o->sweep) && check_planner(o, g);
}

/* 0 after --help, 2 on a usage error, CLI_GO to run. */
static int parse(int argc, char **argv, run_opts *o)
{
    *o = (run_opts){.router = dy_router_config_default(), .route = dy_route_config_default()};
    char err[160];
    if (dy_predict_parse("kalman", &o->predict, err, sizeof err) != 0)
        return 2; /* cannot happen: the default's own spelling */
    bool seen[N_RUN_OPTS];
    dy_opt t[N_RUN_OPTS];
    int n = run_table(o, seen, t);
    int rc = cli_parse("sim run", run_usage, run_epilog, t, n, argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    if (!check(o, (dy_opts_given){t, n, "sim run"}))
        return 2;
    o->route.prefill_busy_tokens = o->prefill_busy_tokens;
    if (o->requests < 0 && o->duration_s <= 0 && !o->wl.trace)
        o->requests = DEFAULT_REQUESTS;
    return CLI_GO;
}

/* ---------------------------------------------------------------- the cost model */

/* The cost model, re-targeted to --tp; NULL after the loader's message. */
static dy_cost_model *load_cost(const run_opts *o)
{
    char err[1024];
    dy_cost_model *m = dy_cost_load(o->cost, err, sizeof err);
    if (m && o->tp > 0 && dy_cost_set_tp(m, o->tp, err, sizeof err) != 0) {
        dy_cost_free(m);
        m = NULL;
    }
    if (!m)
        fprintf(stderr, "dyad sim run: %s\n", err);
    return m;
}

/* ---------------------------------------------------------------- the deployment */

/* The pools serve would start: --workers N, else P prefill + D decode (default 1 + 1;
 * --prefill-workers 0 makes the D workers aggregated). */
static int make_deployment(const run_opts *o, const dy_cost_model *m, dy_deploy *d)
{
    dy_deploy_shape sh = cli_deploy_shape(&o->dep);
    int dec = o->dec > 0 ? o->dec : 1;
    if (o->agg > 0)
        sh.agg = o->agg;
    else if (o->pre == 0)
        sh.agg = dec;
    else
        sh.prefill = o->pre > 0 ? o->pre : 1, sh.decode = dec;
    char err[512];
    int rc = dy_deploy_make(&sh, m, d, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "dyad sim run: %s\n", err);
    return rc;
}

static dy_sim_config sim_config(const run_opts *o, const dy_cost_model *m, const dy_deploy *d)
{
    dy_deploy_shape sh = cli_deploy_shape(&o->dep);
    dy_sim_config c = dy_deploy_sim_config(d, &sh, m);
    c.ctx_len = o->ctx_len;
    c.router = o->router;
    c.route = o->route;
    c.max_queue = o->max_queue;
    c.no_kv_events = o->no_kv_events;
    return c;
}

/* ---------------------------------------------------------------- the load */

/* Which rule sends point i's requests, as dyb_point_load decides for bench: an open loop at a
 * trace at its times, or else a closed loop; a concurrency caps the requests in flight (1 in a
 * closed loop without one). A sweep value replaces the option it sweeps. */
typedef struct {
    bool timed, closed;
    int cap;     /* 0: none */
    double rate; /* 0: none */
} load_rule;

static load_rule load_of(const run_opts *o, const dyb_workload *wl, int i, dyb_point *p)
{
    *p = (dyb_point){.slo = o->slo};
    const bool timed = dyb_point_load(p, wl, o->concurrency, o->rate, o->burstiness, o->sweep,
                                      o->sweep_values, i);
    return (load_rule){.timed = timed, .closed = p->rate <= 0 && !timed,
                       .cap = p->concurrency, .rate = p->rate};
}

/* ---------------------------------------------------------------- the workload */

/* The measured phase's requests as `dyad bench` would send them (sim/requests.h). */
static int make_requests(const run_opts *o, const dyb_workload *wl, const load_rule *rule,
                         dy_sim_requests *l)
{
    dy_sim_load load = {.closed = rule->closed, .timed = rule->timed, .rate = rule->rate,
                        .burstiness = o->burstiness, .seed = o->wl.seed,
                        .requests = o->requests, .duration_s = o->duration_s};
    char err[256];
    if (dy_sim_requests_make(wl, &load, l, err, sizeof err) != 0) {
        fprintf(stderr, "dyad sim run: %s\n", err);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- the report */

/* What only a simulation knows, after bench's report. */
static void report_totals(const dy_sim *s)
{
    dy_sim_totals t = dy_sim_get_totals(s);
    printf("simulated     %llu engine steps, %llu preemptions, %ld requests refused (queue "
           "full)\n\n", (unsigned long long)t.steps, (unsigned long long)t.preemptions, t.refused);
}

/* The run's figures as bench's point. -1 when out of memory. */
static int summarize(const run_opts *o, const dy_sim *s, long cores, dyb_point *p)
{
    dyb_stats st;
    int rc = dy_sim_bench_stats(s, &st);
    if (rc == 0)
        rc = dyb_stats_summarize(&st, dy_sim_get_totals(s).duration_s, &o->slo, (int)cores,
                                 &p->sum);
    if (rc == 0)
        dyb_point_take_errors(p, &st);
    dyb_stats_free(&st);
    return rc;
}

/* Writes the CSV or the plot of every point. */
static int write_file(const char *path, bool svg, const dyb_run_info *ri, const dyb_point *pts,
                      size_t n)
{
    FILE *f = fopen(path, "w");
    int rc = !f ? -1 : svg ? dyb_report_svg(f, ri, pts, n) : dyb_report_csv(f, pts, n);
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "dyad sim run: cannot write %s\n", path);
    return rc;
}

/* After every point, as bench writes them: the JSON objects (or the sweep's Pareto table),
 * the CSV and the plot. 0, or 1 when a write failed or no request succeeded. */
/* Bench's JSON object of a run with the planner's report as its "planner" member. */
static char *with_planner(char *bench_json, json_t *planner)
{
    json_t *root = bench_json ? json_loads(bench_json, 0, NULL) : NULL;
    free(bench_json);
    if (!root || json_object_set(root, "planner", planner) != 0) {
        json_decref(root);
        return NULL;
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    json_decref(root);
    return text;
}

static int outputs(const run_opts *o, const dyb_run_info *ri, dyb_point *pts, size_t n,
                   json_t *planner)
{
    dyb_points_mark_pareto(pts, n);
    int rc = 0;
    for (size_t i = 0; o->json && i < n; i++) {
        char *s = dyb_report_json(ri, &pts[i], o->sweep != DYB_SWEEP_NONE);
        if (planner)
            s = with_planner(s, planner);
        if (s)
            printf("%s\n", s);
        else
            rc = 1;
        free(s);
    }
    if (!o->json && o->sweep != DYB_SWEEP_NONE)
        dyb_report_pareto_text(stdout, pts, n);
    fflush(stdout);
    if (o->csv && write_file(o->csv, false, ri, pts, n) != 0)
        rc = 1;
    if (o->plot && write_file(o->plot, true, ri, pts, n) != 0)
        rc = 1;
    long ok = 0;
    for (size_t i = 0; i < n; i++)
        ok += pts[i].sum.completed;
    if (rc == 0 && ok == 0) {
        fprintf(stderr, "dyad sim run: no request succeeded%s%s\n", pts[0].n_errors ? ": " : "",
                pts[0].n_errors ? pts[0].errors[0].msg : "");
        rc = 1;
    }
    return rc;
}

/* ---------------------------------------------------------------- the run */

/* Everything one invocation holds. */
typedef struct {
    run_opts o;
    dy_cost_model *m;
    dy_deploy d;
    dyb_workload *wl;
    dyb_run_info ri;
    char url[320], workload[512];
    dyb_point pts[DYB_MAX_SWEEP];
    size_t n_pts;
    /* --planner sla: the deployment's workers, then the parked slots up to the budget */
    dy_sim_worker *slots;
    int n_slots;
    dy_sim_planner plan;
    json_t *plan_json;        /* the run's planner report, for --json */
} sim_cmd;

/* ---------------------------------------------------------------- the planner */

/* The slots: the deployment's workers first, then parked ones with the same limits. 0, or the
 * exit status after a message. */
static int make_slots(sim_cmd *c)
{
    const int budget = c->o.budget_workers > 0 ? c->o.budget_workers : c->d.n;
    if (budget < c->d.n) {
        fprintf(stderr, "dyad sim run: --budget-workers: %d is below the deployment's %d "
                        "workers\n", budget, c->d.n);
        return 2;
    }
    if (!(c->slots = calloc((size_t)budget, sizeof *c->slots))) {
        fprintf(stderr, "dyad sim run: out of memory\n");
        return 1;
    }
    for (int i = 0; i < budget; i++) {
        c->slots[i] = c->d.workers[i < c->d.n ? i : 0];
        if (i >= c->d.n)
            c->slots[i].role = DY_POOL_AGG; /* a START gives it its role */
    }
    c->n_slots = budget;
    return 0;
}

/* The planner's configuration, checked as the simulator will check it: 0, or 2 after
 * dy_planner_init's message (impossible objectives, a bad predictor). */
static int make_planner(sim_cmd *c)
{
    const run_opts *o = &c->o;
    int rc = make_slots(c);
    if (rc != 0)
        return rc;
    dy_deploy_shape sh = cli_deploy_shape(&o->dep);
    const int units = dy_deploy_worker_units(c->m);
    c->plan = (dy_sim_planner){
        .on = true, .n_active = c->d.n, .switch_s = o->switch_s,
        .planner = {.predict = o->predict, .slo = {o->slo.ttft_ms / 1e3, o->slo.tpot_ms / 1e3},
                    .hw = dy_deploy_balance_hw(c->m, &sh, (long)c->n_slots * units),
                    .interval_s = o->plan_interval_s, .startup_s = o->startup_s,
                    .min_dwell = o->min_dwell,
                    .mode = o->planner == PLANNER_REACTIVE ? DY_PLANNER_REACTIVE
                                                           : DY_PLANNER_SLA}};
    dy_planner check;
    char err[256];
    const int pre = c->d.n_prefill;
    if (dy_planner_init(&check, &c->plan.planner, pre > 0, pre, c->d.n - pre, err,
                        sizeof err) != 0) {
        fprintf(stderr, "dyad sim run: --planner: %s\n", err);
        return 2;
    }
    return 0;
}

/* The planner's part of the run's report: the text (without --json), the CSV log, and the
 * JSON member kept for outputs(). 0, or 1 when a write failed or memory ran out. */
static int report_planner(sim_cmd *c, const dy_sim *s, const dyb_point *p)
{
    if (!c->o.json)
        cli_plan_report_text(stdout, s, &c->plan, &p->sum);
    else if (!(c->plan_json = cli_plan_report_json(s, &c->plan, &p->sum))) {
        fprintf(stderr, "dyad sim run: out of memory writing the planner's report\n");
        return 1;
    }
    if (!c->o.planner_log)
        return 0;
    FILE *f = fopen(c->o.planner_log, "w");
    int rc = f ? cli_plan_report_csv(f, s) : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "dyad sim run: --planner-log: cannot write %s\n", c->o.planner_log);
    return rc != 0;
}

/* The progress line of one simulation: samples ended of the workload's, and the simulated
 * time reached. */
typedef struct {
    dy_progress *line;
    long ended;
} sim_progress;

static void count_sample(void *ctx, const dy_sim_record *r, double now)
{
    (void)r;
    sim_progress *sp = ctx;
    sp->ended++;
    double wall = dy_now();
    if (!dy_progress_wants(sp->line, wall))
        return;
    char note[48];
    snprintf(note, sizeof note, "t=%.1f s simulated", now);
    dy_progress_update(sp->line, (double)sp->ended, note, wall);
}

static dy_progress *start_progress(const dyb_point *p, bool sweep, const dy_sim_requests *l)
{
    if (isatty(STDERR_FILENO) != 1)
        return NULL;
    long samples = 0;
    for (long i = 0; i < l->n; i++)
        samples += l->r[i].n_samples;
    char label[96];
    snprintf(label, sizeof label, "dyad sim run%s%s", sweep ? " " : "", sweep ? p->label : "");
    return dy_progress_new(stderr, true, label, DY_PROGRESS_COUNT, "samples", (double)samples,
                           dy_now());
}

/* Simulates point i (the whole run without a sweep) on a fresh deployment, with fresh prompts
 * (bench's rounds: no point finds an earlier point's prompts in a cache) into pts[n_pts]. */
static int simulate_point(sim_cmd *c, int i)
{
    dyb_point *p = &c->pts[c->n_pts];
    load_rule rule = load_of(&c->o, c->wl, i, p);
    dyb_workload_set_round(c->wl, (uint64_t)i);
    dy_sim_requests l = {0};
    if (make_requests(&c->o, c->wl, &rule, &l) != 0) {
        dy_sim_requests_free(&l);
        return 1;
    }
    dy_sim_config sc = sim_config(&c->o, c->m, &c->d);
    sc.max_in_flight = rule.cap;
    if (c->plan.on) {
        sc.workers = c->slots;
        sc.n_workers = c->n_slots;
        sc.plan = c->plan;
    }
    dy_step_costs costs = dy_deploy_costs(c->m);
    char err[512];
    sim_progress sp = {start_progress(p, c->o.sweep != DYB_SWEEP_NONE, &l), 0};
    dy_sim_observer obs = {.ctx = &sp, .on_sample_end = count_sample};
    dy_sim *s = dy_sim_new(&sc, &costs, sp.line ? &obs : NULL, err, sizeof err);
    int rc = 1;
    bool ran = s && dy_sim_run(s, l.r, (int)l.n, err, sizeof err) == 0;
    dy_progress_finish(sp.line);
    if (ran) {
        long cores = c->o.cores > 0     ? c->o.cores
                     : c->plan.on       ? (long)c->n_slots * dy_deploy_worker_units(c->m)
                                        : dy_deploy_units(&c->d, c->m);
        rc = summarize(&c->o, s, cores, p) == 0 ? 0 : 1;
        if (rc != 0)
            fprintf(stderr, "dyad sim run: out of memory while summarising\n");
        else if (!c->o.json) {
            dyb_report_text(stdout, &c->ri, p);
            report_totals(s);
        }
        if (rc == 0 && c->plan.on)
            rc = report_planner(c, s, p);
        fflush(stdout);
    } else
        fprintf(stderr, "dyad sim run: %s\n", err);
    if (rc == 0)
        c->n_pts++;
    else
        dyb_point_free(p);
    dy_sim_free(s);
    dy_sim_requests_free(&l);
    return rc;
}

static int setup(sim_cmd *c)
{
    if (!(c->m = load_cost(&c->o)))
        return 1;
    int rc = make_deployment(&c->o, c->m, &c->d);
    if (rc == 0 && c->o.planner != PLANNER_OFF)
        rc = make_planner(c);
    if (rc != 0)
        return rc;
    char err[1024];
    if (!(c->wl = dyb_workload_new(&c->o.wl, err, sizeof err))) {
        fprintf(stderr, "dyad sim run: %s\n", err);
        return 1;
    }
    dyb_workload_describe(c->wl, c->workload, sizeof c->workload);
    dy_deploy_describe(&c->d, c->m, c->url, sizeof c->url);
    if (c->plan.on) {
        size_t at = strlen(c->url);
        snprintf(c->url + at, sizeof c->url - at, " at the start; planner %s over %d slots",
                 planner_names[c->o.planner], c->n_slots);
    }
    c->ri = (dyb_run_info){c->url, dy_cost_name(c->m), "completions", c->workload, c->o.wl.seed};
    return 0;
}

int cmd_sim_run(int argc, char **argv)
{
    sim_cmd *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "dyad sim run: out of memory\n");
        return 1;
    }
    int rc = parse(argc, argv, &c->o);
    if (rc != CLI_GO) {
        free(c);
        return rc;
    }
    rc = setup(c);
    int n = c->o.sweep == DYB_SWEEP_NONE ? 1 : c->o.n_sweep;
    for (int i = 0; rc == 0 && i < n; i++)
        rc = simulate_point(c, i);
    if (rc == 0)
        rc = outputs(&c->o, &c->ri, c->pts, c->n_pts, c->plan_json);
    for (size_t i = 0; i < c->n_pts; i++)
        dyb_point_free(&c->pts[i]);
    json_decref(c->plan_json);
    free(c->slots);
    dyb_workload_free(c->wl);
    dy_deploy_free(&c->d);
    dy_cost_free(c->m);
    free(c);
    return rc;
}
