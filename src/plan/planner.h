/* planner.h — the SLA planner's decision (issue 13), pure: each interval the frontend hands
 * in what it observed (requests, their lengths, the prefix-cache hit share, TTFT and ITL), and
 * the planner forecasts the next interval's traffic (plan/predict.h, one predictor per series),
 * corrects the cost model by how far observed latency was from what it predicted for the
 * deployment that served it, and sizes the pools through the balance criterion
 * (plan/balance.h) for the corrected objectives, within the budget. It grows at once (a worker
 * takes startup_s to start, so the forecast looks that far ahead) and shrinks only after the
 * smaller size has been the answer for min_dwell intervals in a row, so it does not flap.
 * Every decision is a record of its inputs, its forecast and its reason. Carrying it out
 * (starting, draining, switching workers) is the frontend's. */
#ifndef DYAD_PLAN_PLANNER_H
#define DYAD_PLAN_PLANNER_H

#include "plan/balance.h"
#include "plan/predict.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    dy_predict_config predict; /* the predictor of each series (rate, ISL, OSL) */
    dy_balance_slo slo;
    dy_balance_hw hw;          /* costs, worker limits, units per worker, the budget */
    double interval_s;         /* > 0 */
    double startup_s;          /* ≥ 0: how long a new worker takes to serve */
    int min_dwell;             /* ≥ 1: intervals a smaller size must hold before a shrink */
} dy_planner_config;

/* What the frontend saw over the interval that just ended. */
typedef struct {
    double requests;        /* arrived in the interval */
    double prompt_tokens;   /* their prompt tokens, summed */
    double output_tokens;   /* their output tokens (requested), summed */
    double prefix_hit;      /* share of prompt tokens found cached, [0, 1) */
    double ttft_s, itl_s;   /* observed means; 0: none this interval */
} dy_planner_obs;

typedef struct {
    long interval;                 /* 0, 1, ... */
    dy_balance_traffic observed;   /* the interval that ended */
    dy_balance_traffic predicted;  /* the one a new worker would serve in */
    double ttft_factor, itl_factor; /* observed ÷ predicted latency, as applied */
    bool split;                    /* the target: prefill + decode pools */
    int prefill, decode;           /* target sizes (aggregated: prefill 0, decode = workers) */
    int units;
    enum { DY_PLAN_HOLD, DY_PLAN_GROW, DY_PLAN_SHRINK, DY_PLAN_RESHAPE } action;
    const char *reason;            /* static */
} dy_planner_decision;

typedef struct {
    dy_planner_config cfg;
    dy_predictor rate, isl, osl;
    long intervals;
    dy_planner_decision current;   /* what is deployed (the last decision carried out) */
    int smaller_streak;            /* intervals in a row the answer was smaller */
} dy_planner;

/* 0, or -1 with the field named in err. The deployment starts as `start` (its sizes; units
 * and split are derived). */
int dy_planner_init(dy_planner *p, const dy_planner_config *c, bool split, int prefill,
                    int decode, char *err, size_t errlen);
/* One interval: the decision for what the observation implies. 0, or -1 with err (a bad
 * observation). The decision becomes the deployment the next step corrects against. */
int dy_planner_step(dy_planner *p, const dy_planner_obs *o, dy_planner_decision *out,
                    char *err, size_t errlen);
/* "hold", "grow", "shrink", "reshape". */
const char *dy_planner_action_name(int action);

#endif
