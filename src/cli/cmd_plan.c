/* cmd_plan.c — `dyad plan`: the one cheapest deployment that meets a TTFT and an ITL objective
 * for a workload on some hardware. For every tensor-parallel degree the hardware allows, the
 * balance criterion (plan/balance.h) sizes an aggregated pool and a prefill + decode pair from
 * the workload's means, and the simulator's search (sim/search.h) checks and corrects each by
 * running it on the workload's requests; the cheapest deployment that met both objectives in
 * simulation is the answer, with the command (or per-role replica counts) that runs it and its
 * frontier over load. This file turns options into those calls and prints what they return. */
#include "bench/bench_cli.h"
#include "bench/bench_workload.h"
#include "cli/commands.h"
#include "cli/deploy_opts.h"
#include "cli/parse.h"
#include "plan/balance.h"
#include "sim/cost.h"
#include "sim/deploy.h"
#include "sim/requests.h"
#include "sim/search.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char plan_usage[] =
    "usage: dyad plan --hardware H --slo ttft_ms=X,itl_ms=Y [workload] [options]\n"
    "Prints the cheapest deployment (aggregated or prefill + decode pools, their sizes and TP)\n"
    "that meets both objectives for the workload on the hardware, sized by the balance\n"
    "criterion and checked by simulating it, the command that runs it, and its frontier.\n";
static const char plan_epilog[] =
    "\n"
    "The hardware is a preset (h100, h200: roofline cost models of sim/costs/, with --model)\n"
    "or a cost-model file (`dyad sim fit` writes one of this machine). The objectives bind the\n"
    "--percentile of TTFT and of TPOT (a request's mean inter-token latency) over the simulated\n"
    "requests; none may fail. The cost is GPUs (roofline) or cores (measured). docs/plan.md\n"
    "explains the criterion and the search. `dyad plan predict --trace F` measures the load\n"
    "predictors on a trace; `dyad plan quality --file F --accuracy A` picks the model size,\n"
    "method and samples k that reach an accuracy at the least cost (docs/quality.md).\n"
    "Exit status: 0 when a deployment meets the objectives; 1 when none does within the budget\n"
    "(the table says why) or a file is bad; 2 on a usage error.\n";

#define DEFAULT_REQUESTS 500
/* A planned split prefills every prompt remotely (serve's own threshold for short prompts, but
 * no fallback to local prefill under a backlog), as the balance criterion assumes. */
#define PLAN_PREFILL_BUSY_TOKENS (1 << 30)
#define DEFAULT_MAX_RUNS 40
#define MAX_TP 4 /* degrees searched: 1, 2, 4, 8 */
#define N_PLAN_OPTS 48
/* The frontier: the chosen deployment at these multiples of the workload's rate. */
static const double frontier_load[] = {0.25, 0.5, 0.75, 1, 1.25, 1.5, 2};
#define N_FRONTIER (int)(sizeof frontier_load / sizeof frontier_load[0])

typedef struct {
    const char *hardware, *model, *tp_list;
    dyb_slo slo;
    double percentile;
    long budget, requests;
    int max_runs;
    double rate, burstiness, duration_s;
    cli_deploy_opts dep;
    dy_deploy_shape shape; /* dep's, after parsing */
    int max_queue, ctx_len;
    int disagg_min_tokens, prefill_busy_tokens;
    dyb_workload_config wl;
    bool json, no_sim, no_frontier;
} plan_opts;

static int plan_table(plan_opts *o, bool *seen, dy_opt *t)
{
    const dy_opt head[] = {
        {.section = "Hardware and objectives", .name = "hardware", .kind = DY_OPT_STR,
         .dst = &o->hardware, .meta = "H",
         .help = "h100 or h200 (a roofline preset, with --model), or a cost-model FILE "
                 "(required)"},
        {.name = "model", .kind = DY_OPT_STR, .dst = &o->model, .meta = "M",
         .help = "for a preset: llama3.1-8b or llama3.1-70b (FP8 weights)",
         .shown_default = "llama3.1-70b"},
        {.name = "tp", .kind = DY_OPT_STR, .dst = &o->tp_list, .meta = "LIST",
         .help = "roofline: the GPUs per worker to consider, of 1,2,4,8",
         .shown_default = "all that fit the model"},
        {.name = "slo", .kind = DY_OPT_CALL, .call = cli_opt_slo, .ctx = &o->slo, .meta = "LIST",
         .help = "the objectives ttft_ms=X,itl_ms=Y (both required; tpot_ms is itl_ms)"},
        {.name = "percentile", .kind = DY_OPT_DOUBLE, .dst = &o->percentile, .meta = "P",
         .help = "which percentile must meet them: 50, 90 or 99", .min = 50, .max = 99,
         .def = 90},
        {.name = "budget", .kind = DY_OPT_LONG, .dst = &o->budget, .meta = "N",
         .help = "at most N GPUs (roofline) or cores (measured) in all", .min = 1,
         .max = 1000000, .shown_default = "none"},
        {.section = "Load (as `dyad bench`'s open loop, or a trace at its times)",
         .name = "rate", .kind = DY_OPT_DOUBLE, .dst = &o->rate, .meta = "R",
         .help = "requests per second (required without a --trace)", .min = 1e-6, .max = 1e7,
         .shown_default = ""},
        {.name = "burstiness", .kind = DY_OPT_DOUBLE, .dst = &o->burstiness, .meta = "B",
         .help = "shape of the gamma gaps (1 = Poisson; <1 burstier)", .min = 1e-3, .max = 1000,
         .def = 1},
        {.name = "requests", .kind = DY_OPT_LONG, .dst = &o->requests, .meta = "N",
         .help = "requests each simulation runs (a trace: at most its rows)", .min = 1,
         .max = 10000000, .def = DEFAULT_REQUESTS},
        {.name = "duration", .kind = DY_OPT_DOUBLE, .dst = &o->duration_s, .meta = "S",
         .help = "no arrivals after S seconds", .min = 0.001, .max = 1e7, .shown_default = ""},
        {.name = "seed", .kind = DY_OPT_U64, .dst = &o->wl.seed, .meta = "S",
         .help = "seed of the prompts, lengths and arrival gaps"},
    };
    const dy_opt after_workers[] = {
        {.name = "ctx-len", .kind = DY_OPT_INT, .dst = &o->ctx_len, .meta = "N",
         .help = "the model's context length (0: no limit)", .min = 0, .max = 1 << 24,
         .def = 0},
        {.name = "max-queue", .kind = DY_OPT_INT, .dst = &o->max_queue, .meta = "N",
         .help = "sequences waiting for a first token before requests are refused", .min = 1,
         .max = 1 << 20, .def = 256},
        {.name = "disagg-min-tokens", .kind = DY_OPT_INT, .dst = &o->disagg_min_tokens,
         .meta = "N", .help = "disaggregated: prompts with fewer tokens prefill on their decode "
                              "worker", .min = 0, .max = 1 << 24,
         .def = dy_route_config_default().disagg_min_tokens},
        {.name = "prefill-busy-tokens", .kind = DY_OPT_INT, .dst = &o->prefill_busy_tokens,
         .meta = "N", .help = "disaggregated: prefill backlog above which prompts stay local",
         .min = 0, .max = 1 << 30, .def = PLAN_PREFILL_BUSY_TOKENS,
         .shown_default = "unlimited (1073741824): every prompt of --disagg-min-tokens is split"},
    };
    const dy_opt tail[] = {
        {.section = "Search and report", .name = "max-runs", .kind = DY_OPT_INT,
         .dst = &o->max_runs, .meta = "N",
         .help = "simulations one search (one TP, one kind) may make", .min = 1, .max = 10000,
         .def = DEFAULT_MAX_RUNS},
        {.name = "no-sim", .kind = DY_OPT_FLAG, .dst = &o->no_sim,
         .help = "the balance criterion only: no simulation checks its sizes"},
        {.name = "no-frontier", .kind = DY_OPT_FLAG, .dst = &o->no_frontier,
         .help = "skip the chosen deployment's frontier over load"},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &o->json,
         .help = "one JSON object with every candidate instead of the report"},
    };
#define N(a) (sizeof(a) / sizeof((a)[0]))
    _Static_assert(N(head) + CLI_DEPLOY_OPTS + N(after_workers) + DYB_WORKLOAD_OPTS + N(tail) <=
                       N_PLAN_OPTS, "N_PLAN_OPTS");
    int n = cli_opts_append(t, 0, head, N(head));
    n += cli_deploy_opts_table(&o->dep, "Every worker (as `dyad serve`)", true, t + n);
    n = cli_opts_append(t, n, after_workers, N(after_workers));
    n += dyb_workload_opts(&o->wl, t + n);
    n = cli_opts_append(t, n, tail, N(tail));
#undef N
    cli_opts_track(t, n, seen);
    return n;
}

static bool check(const plan_opts *o, dy_opts_given g)
{
    if (!o->hardware) {
        fprintf(stderr, "dyad plan: --hardware: required (see dyad plan --help)\n");
        return false;
    }
    if (!(o->slo.ttft_ms > 0) || !(o->slo.tpot_ms > 0)) {
        fprintf(stderr, "dyad plan: --slo: both ttft_ms=X and itl_ms=Y are required\n");
        return false;
    }
    if (o->slo.e2e_ms > 0) {
        fprintf(stderr, "dyad plan: --slo: e2e_ms is not an objective the plan sizes for\n");
        return false;
    }
    if (o->percentile != 50 && o->percentile != 90 && o->percentile != 99) {
        fprintf(stderr, "dyad plan: --percentile: must be 50, 90 or 99\n");
        return false;
    }
    if (!(o->rate > 0) && !o->wl.trace) {
        fprintf(stderr, "dyad plan: --rate: required without a --trace\n");
        return false;
    }
    return dyb_check_workload_opts(g, &o->wl, o->rate > 0, DYB_SWEEP_NONE);
}

static int parse(int argc, char **argv, plan_opts *o)
{
    *o = (plan_opts){0};
    bool seen[N_PLAN_OPTS];
    dy_opt t[N_PLAN_OPTS];
    int n = plan_table(o, seen, t);
    int rc = cli_parse("plan", plan_usage, plan_epilog, t, n, argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    if (!check(o, (dy_opts_given){t, n, "plan"}))
        return 2;
    o->shape = cli_deploy_shape(&o->dep);
    return CLI_GO;
}

/* ---------------------------------------------------------------- hardware */

/* The cost-model file --hardware names: a preset's path, or the argument itself. */
static int hardware_path(const plan_opts *o, char *out, size_t cap)
{
    const char *h = o->hardware, *m = o->model ? o->model : "llama3.1-70b";
    if (strcmp(h, "h100") != 0 && strcmp(h, "h200") != 0) {
        if (o->model) {
            fprintf(stderr, "dyad plan: --model: only with a preset (h100, h200); a cost-model "
                            "file names its model\n");
            return 2;
        }
        snprintf(out, cap, "%s", h);
        return 0;
    }
    if (strcmp(m, "llama3.1-8b") != 0 && strcmp(m, "llama3.1-70b") != 0) {
        fprintf(stderr, "dyad plan: --model: '%s' is not llama3.1-8b or llama3.1-70b\n", m);
        return 2;
    }
    const char *dir = getenv("DYAD_COST_DIR");
    snprintf(out, cap, "%s/%s-%s-fp8.json", dir && *dir ? dir : DYAD_SOURCE_DIR "/sim/costs",
             h, m);
    return 0;
}

/* The TP degrees to consider into tps (n returned); -1 after a message. */
static int tp_degrees(const plan_opts *o, const dy_cost_model *m, int *tps)
{
    if (dy_cost_get_kind(m) != DY_COST_ROOFLINE) {
        if (o->tp_list) {
            fprintf(stderr, "dyad plan: --tp: a measured cost model has no TP degree\n");
            return -1;
        }
        tps[0] = 0; /* as measured */
        return 1;
    }
    if (!o->tp_list) {
        for (int i = 0; i < MAX_TP; i++)
            tps[i] = 1 << i;
        return MAX_TP;
    }
    int n = 0;
    char *copy = strdup(o->tp_list), *save = NULL;
    for (char *v = copy ? strtok_r(copy, ",", &save) : NULL; v; v = strtok_r(NULL, ",", &save)) {
        char *end;
        long tp = strtol(v, &end, 10);
        if (*end || (tp != 1 && tp != 2 && tp != 4 && tp != 8) || n == MAX_TP) {
            fprintf(stderr, "dyad plan: --tp: '%s' is not a list of distinct 1, 2, 4, 8\n",
                    o->tp_list);
            free(copy);
            return -1;
        }
        tps[n++] = (int)tp;
    }
    free(copy);
    if (n == 0)
        fprintf(stderr, "dyad plan: --tp: empty\n");
    return n ? n : -1;
}

/* ---------------------------------------------------------------- one TP degree */

typedef struct {
    int tp;           /* 0: a measured model */
    const char *skip; /* why this degree was not considered (its own message) */
    char skip_msg[600];
    dy_balance bal;
    dy_search_trail agg, dis;
} tp_plan;

typedef struct {
    plan_opts o;
    char path[1024];
    dy_cost_model *m;
    dyb_workload *wl;
    char workload[512];
    dy_sim_requests reqs;
    dy_balance_traffic traffic;
    tp_plan tps[MAX_TP];
    int n_tps;
    const dy_search_result *best;
    const tp_plan *best_tp;
    dy_search_result frontier[N_FRONTIER];
    int n_frontier;
} plan_cmd;

static dy_search_config search_config(const plan_cmd *c, const dy_sim_request *reqs, int n)
{
    dy_sim_config base = dy_sim_config_default();
    base.ctx_len = c->o.ctx_len;
    base.max_queue = c->o.max_queue;
    base.route.disagg_min_tokens = c->o.disagg_min_tokens;
    base.route.prefill_busy_tokens = c->o.prefill_busy_tokens;
    return (dy_search_config){.m = c->m, .shape = c->o.shape, .base = base, .reqs = reqs,
                              .n_reqs = n,
                              .slo = {c->o.slo.ttft_ms, c->o.slo.tpot_ms, c->o.percentile},
                              .max_units = c->o.budget, .max_runs = c->o.max_runs};
}

/* The start of a search: the criterion's size when it found one, else its size at the limit
 * it reported (the search grows from there), never below 1. */
static int start_of(int n)
{
    return n > 0 ? n : 1;
}

static int plan_tp(plan_cmd *c, tp_plan *t)
{
    char err[512];
    if (t->tp > 0 && dy_cost_set_tp(c->m, t->tp, err, sizeof err) != 0) {
        snprintf(t->skip_msg, sizeof t->skip_msg, "%s", err);
        t->skip = t->skip_msg;
        return 0;
    }
    dy_balance_slo slo = {c->o.slo.ttft_ms / 1e3, c->o.slo.tpot_ms / 1e3};
    dy_balance_hw hw = dy_deploy_balance_hw(c->m, &c->o.shape, c->o.budget);
    if (dy_balance_solve(&c->traffic, &slo, &hw, &t->bal, err, sizeof err) != 0) {
        fprintf(stderr, "dyad plan: %s\n", err);
        return 1;
    }
    t->agg.best = t->dis.best = -1;
    if (c->o.no_sim)
        return 0;
    dy_search_config sc = search_config(c, c->reqs.r, (int)c->reqs.n);
    if (dy_search_agg(&sc, start_of(t->bal.agg.decode), &t->agg, err, sizeof err) != 0 ||
        dy_search_disagg(&sc, start_of(t->bal.disagg.prefill), start_of(t->bal.disagg.decode),
                         &t->dis, err, sizeof err) != 0) {
        fprintf(stderr, "dyad plan: %s: %s\n", c->path, err);
        return 1;
    }
    return 0;
}

/* The cheapest deployment that met the objectives over every degree (ties: aggregated, then
 * the smaller TP). */
static void choose(plan_cmd *c)
{
    for (int i = 0; i < c->n_tps; i++) {
        const tp_plan *t = &c->tps[i];
        const dy_search_trail *trails[2] = {&t->agg, &t->dis};
        for (int k = 0; k < 2 && !t->skip; k++) {
            if (trails[k]->best < 0)
                continue;
            const dy_search_result *r = &trails[k]->runs[trails[k]->best];
            if (!c->best || r->units < c->best->units) {
                c->best = r;
                c->best_tp = t;
            }
        }
    }
}

/* The chosen deployment at multiples of the workload's load: the same requests, their
 * arrival times divided by the multiple. */
static int frontier(plan_cmd *c)
{
    if (!c->best || c->o.no_frontier)
        return 0;
    char err[512];
    if (c->best_tp->tp > 0 && dy_cost_set_tp(c->m, c->best_tp->tp, err, sizeof err) != 0) {
        fprintf(stderr, "dyad plan: %s\n", err);
        return 1;
    }
    dy_sim_request *scaled = malloc(sizeof *scaled * (size_t)(c->reqs.n ? c->reqs.n : 1));
    if (!scaled) {
        fprintf(stderr, "dyad plan: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int k = 0; k < N_FRONTIER && rc == 0; k++) {
        for (long i = 0; i < c->reqs.n; i++) {
            scaled[i] = c->reqs.r[i];
            scaled[i].arrival /= frontier_load[k];
        }
        dy_search_config sc = search_config(c, scaled, (int)c->reqs.n);
        sc.max_units = 0;
        if (dy_search_eval(&sc, c->best->agg, c->best->prefill, c->best->decode,
                           &c->frontier[k], err, sizeof err) != 0) {
            fprintf(stderr, "dyad plan: %s\n", err);
            rc = 1;
        } else
            c->n_frontier++;
    }
    free(scaled);
    return rc;
}

/* ---------------------------------------------------------------- the report */

static const char *unit_name(const plan_cmd *c)
{
    return dy_cost_get_kind(c->m) == DY_COST_ROOFLINE ? "GPUs" : "cores";
}

static void pools_text(int agg, int prefill, int decode, char *out, size_t cap)
{
    if (agg > 0)
        snprintf(out, cap, "%d agg", agg);
    else
        snprintf(out, cap, "%dP + %dD", prefill, decode);
}

/* "2", or "-" for a measured model (no TP degree). */
static const char *tp_text(const tp_plan *t, char *out, size_t cap)
{
    snprintf(out, cap, t->tp > 0 ? "%d" : "-", t->tp);
    return out;
}

static void print_balance_row(const tp_plan *t, const char *kind, const dy_balance_choice *b)
{
    char pools[48], tp[8];
    pools_text(b->prefill == 0 ? b->decode : 0, b->prefill, b->decode, pools, sizeof pools);
    if (b->ok)
        printf("  %-4s %-7s criterion  %-12s %6d %10.1f %9.2f   (means)\n",
               tp_text(t, tp, sizeof tp), kind, pools, b->units, b->ttft_s * 1e3,
               b->itl_s * 1e3);
    else
        printf("  %-4s %-7s criterion  %-12s %6s   %s\n", tp_text(t, tp, sizeof tp), kind, "-",
               "-", b->why);
}

static void print_search_row(const tp_plan *t, const char *kind, const dy_search_trail *tr)
{
    char tp[8];
    if (tr->best < 0) {
        const char *why = tr->n ? tr->runs[tr->n - 1].why : "no deployment fits the budget";
        printf("  %-4s %-7s simulated  %-12s %6s   none met the objectives in %d runs (last: "
               "%s)\n", tp_text(t, tp, sizeof tp), kind, "-", "-", tr->n,
               why ? why : "the run limit");
        return;
    }
    const dy_search_result *r = &tr->runs[tr->best];
    char pools[48];
    pools_text(r->agg, r->prefill, r->decode, pools, sizeof pools);
    printf("  %-4s %-7s simulated  %-12s %6ld %10.1f %9.2f %10.1f %10.1f %5d\n",
           tp_text(t, tp, sizeof tp), kind, pools, r->units, r->ttft_ms, r->itl_ms,
           r->units ? r->sum.output_tok_per_s / (double)r->units : 0, r->sum.tok_per_s_per_user,
           tr->n);
}

static void print_command(const plan_cmd *c)
{
    const dy_search_result *r = c->best;
    const dy_deploy_shape *sh = &c->o.shape;
    if (dy_cost_get_kind(c->m) == DY_COST_ROOFLINE) {
        int tp = c->best_tp->tp;
        if (r->agg > 0)
            printf("run it:    %d aggregated replicas of TP %d (%ld GPUs)\n", r->agg, tp,
                   r->units);
        else
            printf("run it:    %d prefill replicas and %d decode replicas, TP %d each (%ld "
                   "GPUs)\n", r->prefill, r->decode, tp, r->units);
        return;
    }
    printf("run it:    dyad serve --model %s --threads-per-worker %d", dy_cost_served_model(c->m),
           dy_cost_threads(c->m));
    if (r->agg > 0) {
        printf(" --workers %d", r->agg);
    } else {
        printf(" --prefill-workers %d --decode-workers %d", r->prefill, r->decode);
        dy_route_config serve = dy_route_config_default();
        if (c->o.disagg_min_tokens != serve.disagg_min_tokens)
            printf(" --disagg-min-tokens %d", c->o.disagg_min_tokens);
        if (c->o.prefill_busy_tokens != serve.prefill_busy_tokens)
            printf(" --prefill-busy-tokens %d", c->o.prefill_busy_tokens);
    }
    dy_deploy_shape def = dy_deploy_shape_default();
    if (sh->block_size != def.block_size)
        printf(" --block-size %d", sh->block_size);
    if (sh->kv_blocks > 0)
        printf(" --kv-blocks %lld", (long long)sh->kv_blocks);
    if (sh->max_batch_tokens != def.max_batch_tokens)
        printf(" --max-batch-tokens %d", sh->max_batch_tokens);
    if (sh->max_running != def.max_running)
        printf(" --max-running %d", sh->max_running);
    if (sh->no_prefix_cache)
        printf(" --no-prefix-cache");
    printf("\n");
}

static void print_frontier(const plan_cmd *c)
{
    if (c->n_frontier == 0)
        return;
    printf("\nfrontier of that deployment (the same requests at a multiple of the load):\n");
    printf("  %-6s %9s %12s %12s %10s %9s  %s\n", "load", "req/s", "tok/s/user",
           c->best->units ? (dy_cost_get_kind(c->m) == DY_COST_ROOFLINE ? "tok/s/GPU"
                                                                         : "tok/s/core")
                          : "tok/s",
           "TTFT ms", "ITL ms", "met");
    for (int k = 0; k < c->n_frontier; k++) {
        const dy_search_result *r = &c->frontier[k];
        printf("  %-5.2fx %9.2f %12.1f %12.1f %10.1f %9.2f  %s\n", frontier_load[k],
               c->traffic.rate * frontier_load[k], r->sum.tok_per_s_per_user,
               r->units ? r->sum.output_tok_per_s / (double)r->units : 0, r->ttft_ms, r->itl_ms,
               r->met ? "yes" : r->why);
    }
}

static void print_report(const plan_cmd *c)
{
    const char *hw = dy_cost_hardware(c->m);
    printf("== dyad plan\n");
    printf("hardware      %s%s%s (%s)\n", dy_cost_served_model(c->m), hw ? " on " : "",
           hw ? hw : "", c->path);
    printf("workload      %s; %.3g req/s, mean ISL %.1f, OSL %.1f, prefix hit %.1f%%\n",
           c->workload, c->traffic.rate, c->traffic.isl, c->traffic.osl,
           c->traffic.prefix_hit * 100);
    printf("objectives    p%g TTFT <= %g ms, p%g ITL <= %g ms", c->o.percentile,
           c->o.slo.ttft_ms, c->o.percentile, c->o.slo.tpot_ms);
    if (c->o.budget > 0)
        printf(", at most %ld %s", c->o.budget, unit_name(c));
    printf("\n\n  %-4s %-7s %-10s %-12s %6s %10s %9s %10s %10s %5s\n", "TP", "kind", "by",
           "pools", unit_name(c), "TTFT ms", "ITL ms",
           dy_cost_get_kind(c->m) == DY_COST_ROOFLINE ? "tok/s/GPU" : "tok/s/core",
           "tok/s/user", "runs");
    for (int i = 0; i < c->n_tps; i++) {
        const tp_plan *t = &c->tps[i];
        if (t->skip) {
            char tp[8];
            printf("  %-4s skipped: %s\n", tp_text(t, tp, sizeof tp), t->skip);
            continue;
        }
        print_balance_row(t, "agg", &t->bal.agg);
        if (!c->o.no_sim)
            print_search_row(t, "agg", &t->agg);
        print_balance_row(t, "disagg", &t->bal.disagg);
        if (!c->o.no_sim)
            print_search_row(t, "disagg", &t->dis);
    }
    printf("\n");
    if (c->o.no_sim) {
        printf("(--no-sim: the criterion's sizes are not checked by simulation)\n");
        return;
    }
    if (!c->best) {
        printf("cheapest:  none of the deployments searched met the objectives\n");
        return;
    }
    const dy_search_result *r = c->best;
    char pools[48], tp[16] = "";
    pools_text(r->agg, r->prefill, r->decode, pools, sizeof pools);
    if (c->best_tp->tp > 0)
        snprintf(tp, sizeof tp, ", TP %d", c->best_tp->tp);
    printf("cheapest:  %s, %s%s: %ld %s; p%g TTFT %.1f ms, p%g ITL %.2f ms, %.1f output "
           "tok/s, %.1f tok/s per user\n", r->agg > 0 ? "aggregated" : "disaggregated", pools,
           tp, r->units, unit_name(c), c->o.percentile, r->ttft_ms, c->o.percentile, r->itl_ms,
           r->sum.output_tok_per_s, r->sum.tok_per_s_per_user);
    print_command(c);
    print_frontier(c);
}

/* ---------------------------------------------------------------- JSON */

static json_t *result_json(const dy_search_result *r)
{
    return json_pack("{s:i, s:i, s:i, s:I, s:b, s:s?, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f}",
                     "workers", r->agg, "prefill", r->prefill, "decode", r->decode, "units",
                     (json_int_t)r->units, "met", r->met, "why", r->why, "ttft_ms", r->ttft_ms,
                     "itl_ms", r->itl_ms, "output_tok_s", r->sum.output_tok_per_s,
                     "tok_s_per_user", r->sum.tok_per_s_per_user, "kv_ttft_share",
                     r->sum.kv_ttft_share, "completed", (json_int_t)r->sum.completed,
                     "failed", (json_int_t)r->sum.failed, "duration_s", r->sum.duration_s);
}

static json_t *choice_json(const dy_balance_choice *b)
{
    return json_pack("{s:b, s:s?, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f}", "ok", b->ok, "why",
                     b->why, "prefill", b->prefill, "decode", b->decode, "units", b->units,
                     "ttft_ms", b->ttft_s * 1e3, "itl_ms", b->itl_s * 1e3, "prefill_util",
                     b->prefill_util, "batch", b->batch, "transfer_ms", b->transfer_s * 1e3);
}

static json_t *trail_json(const dy_search_trail *t)
{
    json_t *runs = json_array();
    for (int i = 0; runs && i < t->n; i++)
        json_array_append_new(runs, result_json(&t->runs[i]));
    return json_pack("{s:o*, s:o?}", "runs", runs, "best",
                     t->best >= 0 ? result_json(&t->runs[t->best]) : NULL);
}

static int print_json(const plan_cmd *c)
{
    json_t *tps = json_array();
    for (int i = 0; tps && i < c->n_tps; i++) {
        const tp_plan *t = &c->tps[i];
        json_t *o = t->skip ? json_pack("{s:i, s:s}", "tp", t->tp, "skipped", t->skip)
                            : json_pack("{s:i, s:{s:o*, s:o*, s:b}, s:o*, s:o*}", "tp", t->tp,
                                        "criterion", "agg", choice_json(&t->bal.agg), "disagg",
                                        choice_json(&t->bal.disagg), "split", t->bal.split,
                                        "agg", trail_json(&t->agg), "disagg",
                                        trail_json(&t->dis));
        json_array_append_new(tps, o);
    }
    json_t *fr = json_array();
    for (int k = 0; fr && k < c->n_frontier; k++) {
        json_t *p = result_json(&c->frontier[k]);
        json_object_set_new(p, "load", json_real(frontier_load[k]));
        json_array_append_new(fr, p);
    }
    json_t *root = json_pack(
        "{s:s, s:s, s:{s:f, s:f, s:f, s:f}, s:{s:f, s:f, s:f}, s:I, s:o*, s:o?, s:i, s:o*}",
        "cost_model", c->path, "workload", c->workload, "traffic", "rate", c->traffic.rate,
        "isl", c->traffic.isl, "osl", c->traffic.osl, "prefix_hit", c->traffic.prefix_hit,
        "slo", "ttft_ms", c->o.slo.ttft_ms, "itl_ms", c->o.slo.tpot_ms, "percentile",
        c->o.percentile, "budget", (json_int_t)c->o.budget, "tp", tps, "best",
        c->best ? result_json(c->best) : NULL, "best_tp", c->best_tp ? c->best_tp->tp : -1,
        "frontier", fr);
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!s) {
        fprintf(stderr, "dyad plan: out of memory writing JSON\n");
        return 1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
}

/* ---------------------------------------------------------------- the command */

/* The workload's requests at the load's times, and its traffic window for the criterion: the
 * rate given, or a trace's (requests over the span of their arrivals). */
static int make_workload(plan_cmd *c)
{
    char err[1024];
    if (!(c->wl = dyb_workload_new(&c->o.wl, err, sizeof err))) {
        fprintf(stderr, "dyad plan: %s\n", err);
        return 1;
    }
    dyb_workload_describe(c->wl, c->workload, sizeof c->workload);
    dy_sim_load load = {.timed = c->o.rate <= 0, .rate = c->o.rate,
                        .burstiness = c->o.burstiness, .seed = c->o.wl.seed,
                        .requests = c->o.requests, .duration_s = c->o.duration_s};
    if (dy_sim_requests_make(c->wl, &load, &c->reqs, err, sizeof err) != 0) {
        fprintf(stderr, "dyad plan: %s\n", err);
        return 1;
    }
    if (c->reqs.n == 0) {
        fprintf(stderr, "dyad plan: the workload has no requests\n");
        return 1;
    }
    double span = c->reqs.r[c->reqs.n - 1].arrival - c->reqs.r[0].arrival;
    c->traffic.rate = c->o.rate > 0 ? c->o.rate : span > 0 ? (double)(c->reqs.n - 1) / span : 0;
    if (!(c->traffic.rate > 0)) {
        fprintf(stderr, "dyad plan: the trace's requests all arrive at once: give --rate\n");
        return 1;
    }
    dy_sim_config def = dy_sim_config_default();
    if (dy_sim_requests_traffic(&c->reqs, c->o.shape.block_size, def.fingerprint,
                                &c->traffic.isl, &c->traffic.osl, &c->traffic.prefix_hit) != 0) {
        fprintf(stderr, "dyad plan: out of memory\n");
        return 1;
    }
    if (c->o.shape.no_prefix_cache)
        c->traffic.prefix_hit = 0;
    if (c->traffic.prefix_hit >= 1)
        c->traffic.prefix_hit = 0.999;
    return 0;
}

static int setup(plan_cmd *c)
{
    int rc = hardware_path(&c->o, c->path, sizeof c->path);
    if (rc != 0)
        return rc;
    char err[1024];
    if (!(c->m = dy_cost_load(c->path, err, sizeof err))) {
        fprintf(stderr, "dyad plan: %s\n", err);
        return 1;
    }
    int tps[MAX_TP];
    c->n_tps = tp_degrees(&c->o, c->m, tps);
    if (c->n_tps < 0)
        return 2;
    for (int i = 0; i < c->n_tps; i++)
        c->tps[i].tp = tps[i];
    return make_workload(c);
}

static void plan_free(plan_cmd *c)
{
    for (int i = 0; i < c->n_tps; i++) {
        dy_search_trail_free(&c->tps[i].agg);
        dy_search_trail_free(&c->tps[i].dis);
    }
    dy_sim_requests_free(&c->reqs);
    dyb_workload_free(c->wl);
    dy_cost_free(c->m);
    free(c);
}

int cmd_plan(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "predict"))
        return cmd_plan_predict(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "quality"))
        return cmd_plan_quality(argc - 1, argv + 1);
    plan_cmd *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "dyad plan: out of memory\n");
        return 1;
    }
    int rc = parse(argc, argv, &c->o);
    if (rc != CLI_GO) {
        free(c);
        return rc;
    }
    rc = setup(c);
    for (int i = 0; rc == 0 && i < c->n_tps; i++)
        rc = plan_tp(c, &c->tps[i]);
    if (rc == 0) {
        choose(c);
        rc = frontier(c);
    }
    if (rc == 0)
        rc = c->o.json ? print_json(c) : (print_report(c), 0);
    if (rc == 0 && !c->o.no_sim && !c->best)
        rc = 1;
    plan_free(c);
    return rc;
}
