/* search.h — the simulator's answer to "what is the cheapest deployment that meets these
 * objectives under this load": deployments of one kind (aggregated, or a prefill and a decode
 * pool) simulated one after another on the same requests, starting from the balance
 * criterion's sizes (plan/balance.h) and moving a pool at a time, until the smallest that
 * meets both objectives. Each simulation is sim/sim.h's, so the search inherits its fidelity
 * and its determinism: the same inputs give the same answer. */
#ifndef DYAD_SIM_SEARCH_H
#define DYAD_SIM_SEARCH_H

#include "bench/bench_stats.h"
#include "sim/cost.h"
#include "sim/deploy.h"
#include "sim/sim.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    double ttft_ms;    /* the chosen percentile of TTFT, at most */
    double itl_ms;     /* the chosen percentile of TPOT (a request's mean ITL), at most */
    double percentile; /* 50, 90 or 99 */
} dy_search_slo;

typedef struct {
    const dy_cost_model *m;     /* what prices the steps, at its TP as set */
    dy_deploy_shape shape;      /* every worker's KV and batch limits (pool sizes ignored) */
    dy_sim_config base;         /* router, placement, queue and context (workers ignored) */
    const dy_sim_request *reqs; /* the workload at its arrival times (borrowed) */
    int n_reqs;
    dy_search_slo slo;
    long max_units;             /* budget in GPUs or cores (dy_deploy_units); 0: none */
    int max_runs;               /* simulations one search may make, ≥ 1 */
} dy_search_config;

/* One simulated deployment and how it did. */
typedef struct {
    int agg, prefill, decode; /* the pools (agg > 0: aggregated) */
    long units;
    bool met;
    const char *why;          /* when !met: which objective or limit it missed (static) */
    double ttft_ms, itl_ms;   /* at the percentile */
    dyb_summary sum;          /* the whole run, as `dyad bench` reports it */
    long refused;             /* requests refused (queue full) or that fit no worker */
} dy_search_result;

/* Simulates one deployment. 0, or -1 with err (a shape that is not a deployment, out of
 * memory, a cost model giving a bad step time). */
int dy_search_eval(const dy_search_config *c, int agg, int prefill, int decode,
                   dy_search_result *out, char *err, size_t errlen);

/* Every run a search made, in order, and the cheapest that met the objectives. */
typedef struct {
    dy_search_result *runs;
    int n, cap;
    int best;                 /* index into runs; -1: none met them within the budget */
} dy_search_trail;

void dy_search_trail_free(dy_search_trail *t);

/* The fewest aggregated workers that meet the objectives, from `start` (≥ 1). */
int dy_search_agg(const dy_search_config *c, int start, dy_search_trail *out, char *err,
                  size_t errlen);
/* The cheapest prefill + decode pools that meet them, from (p0, d0) (each ≥ 1): a pool grows
 * while the objective it bears is missed (ITL: decode; TTFT: prefill, or both when requests
 * fail; at the budget a worker moves from the pool that meets its objective to the one that
 * does not), then each shrinks while both are still met. */
int dy_search_disagg(const dy_search_config *c, int p0, int d0, dy_search_trail *out,
                     char *err, size_t errlen);

#endif
