/* balance.h — the balance criterion: for a window of traffic (request rate, mean prompt and
 * output lengths, the share of prompt tokens a prefix cache already holds) and a cost model,
 * how many workers meet a TTFT and an ITL objective at the least cost, as one aggregated pool
 * or as a prefill pool and a decode pool, and whether to split at all.
 *
 * It reasons in means, from the cost of the steps a worker would run (priced through
 * dy_step_costs, the same interface the simulator uses), so it answers in microseconds and a
 * planner can call it every interval; the simulator (dyad plan) checks its answer by running
 * the deployment. Pure: no clock, no I/O.
 *
 * The model, per worker and in steady state (docs/plan.md derives it):
 *   decode pool    D workers share rate·osl tokens per second. A worker that decodes B
 *                  sequences runs steps of t_d(B) (B decodes at the mean context isl + osl/2),
 *                  so B solves B = (rate·osl / D) · t_d(B) (Little's law); ITL = t_d(B).
 *   prefill pool   P workers each serve prompts of p = isl·(1 − prefix_hit) computed tokens:
 *                  alone in S_1 (its chunks of max_batch_tokens), under load in S_sat (short
 *                  prompts share a step). Utilisation ρ = rate·S_sat / P, the queue an M/D/1
 *                  queue: TTFT = ρ·S_sat / (2(1 − ρ)) + S_1 + the KV transfer of p tokens
 *                  + one decode step (the decode worker computes the last prompt position).
 *   aggregated     A workers each get rate / A requests; a prompt is computed in chunks of
 *                  max_batch_tokens − B beside the B decodes, taking S(B) (those steps'
 *                  time). Prefill keeps a worker busy ρ = (rate / A)·S(B); steps come at
 *                  (rate / A)·chunks per prompt (with prefill) plus (1 − ρ) / t_d(B) (decode
 *                  only), and ITL is one over that; B = (rate / A)·osl·ITL. TTFT = the M/D/1
 *                  wait on S(B) + S(B).
 * A pool whose fixed point has no solution (its load exceeds what it can serve), a batch past
 * max_running or past the KV capacity, or utilisation ≥ 1 is infeasible at that size. */
#ifndef DYAD_PLAN_BALANCE_H
#define DYAD_PLAN_BALANCE_H

#include "sched/step_shape.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most workers of one pool the criterion considers. */
#define DY_BALANCE_MAX_WORKERS 4096

typedef struct {
    double rate;       /* requests per second, > 0 */
    double isl, osl;   /* mean prompt and output tokens per request, ≥ 1 */
    double prefix_hit; /* share of prompt tokens a prefix cache holds, in [0, 1) */
} dy_balance_traffic;

typedef struct {
    double ttft_s; /* a request's time to first token, at most (> 0) */
    double itl_s;  /* a request's mean time between output tokens (bench's TPOT), at most */
} dy_balance_slo;

typedef struct {
    dy_step_costs costs;        /* step_seconds and transfer_seconds, both required */
    int64_t kv_bytes_per_token; /* what a transfer ships per prompt token */
    int64_t kv_capacity_tokens; /* KV one worker holds */
    int max_batch_tokens;       /* a step's token budget (dyad serve --max-batch-tokens) */
    int max_running;            /* sequences in one worker's batch (--max-running) */
    int units_per_worker;       /* what one worker costs: its GPUs (TP) or its cores, ≥ 1 */
    int max_units;              /* budget over all workers; 0: no budget */
} dy_balance_hw;

/* One way to serve the traffic: the pool sizes and what the model predicts for them. */
typedef struct {
    bool ok;           /* meets both objectives (within the budget, for a solve) */
    const char *why;   /* when !ok, the limit that binds (a static string); else NULL */
    int prefill;       /* prefill workers (0 for an aggregated pool) */
    int decode;        /* decode workers, or the aggregated workers */
    int units;         /* (prefill + decode) · units_per_worker */
    double ttft_s;     /* predicted mean TTFT (0 when infeasible) */
    double itl_s;      /* predicted mean ITL (0 when infeasible) */
    double prefill_util; /* busy share of a worker spent on prompts */
    double batch;      /* sequences decoding per worker */
    double transfer_s; /* KV transfer per prompt (disaggregated only) */
} dy_balance_choice;

typedef struct {
    dy_balance_choice agg, disagg; /* the cheapest of each that meets the objectives */
    bool split; /* disaggregate: it meets them and costs strictly less than aggregated */
} dy_balance;

/* Checks the inputs: 0, or -1 with the field named in err ("traffic.rate: must be > 0"). */
int dy_balance_check(const dy_balance_traffic *t, const dy_balance_slo *slo,
                     const dy_balance_hw *hw, char *err, size_t errlen);

/* What the model predicts for one size (inputs as dy_balance_check accepts them). A size that
 * cannot keep up has ok = false and its why; one that keeps up but misses an objective has its
 * predictions, ok = false and why naming the objective. */
dy_balance_choice dy_balance_eval_agg(const dy_balance_traffic *t, const dy_balance_slo *slo,
                                      const dy_balance_hw *hw, int workers);
dy_balance_choice dy_balance_eval_disagg(const dy_balance_traffic *t, const dy_balance_slo *slo,
                                         const dy_balance_hw *hw, int prefill, int decode);

/* The cheapest aggregated and the cheapest disaggregated size, and which to run. A way that
 * cannot meet the objectives within the budget (or DY_BALANCE_MAX_WORKERS) comes back with
 * ok = false and why. 0, or -1 with err when the inputs are bad. */
int dy_balance_solve(const dy_balance_traffic *t, const dy_balance_slo *slo,
                     const dy_balance_hw *hw, dy_balance *out, char *err, size_t errlen);

#endif
