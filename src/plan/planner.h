/* planner.h — the SLA planner's decision (issue 13), pure: each interval the frontend hands
 * in what it observed (requests, their lengths, the prefix-cache hit share, TTFT and ITL), and
 * the planner forecasts the next interval's traffic (plan/predict.h, one predictor per series),
 * corrects the cost model by how far observed latency was from what it predicted for the
 * deployment that served it, and sizes the pools through the balance criterion
 * (plan/balance.h) for the corrected objectives, within the budget. It grows at once (a worker
 * takes startup_s to start, so the forecast looks that far ahead) and shrinks only after the
 * smaller size has been the answer for min_dwell intervals in a row, so it does not flap.
 * Every decision is a record of its inputs, its forecast and its reason. Carrying it out
 * (starting, draining, switching workers) is the frontend's.
 *
 * Two modes. SLA (the default) is the above. REACTIVE (plan/reactive.h holds its rule) sizes
 * from no forecast: each interval it looks at the latency percentiles, the waiting queue and
 * KV use, and moves one worker at a time in the deployed shape:
 *   - TTFT p90 over its objective, or more than queue_per_worker sequences waiting for a first
 *     token per worker that computes prompts (the prefill pool when split, else the
 *     aggregated one): one more prefill (or aggregated) worker;
 *   - ITL p90 over its objective, or KV use over kv_high: one more decode (or aggregated)
 *     worker;
 *   - both, split: one more of each if the budget allows both, else of the pool whose signal
 *     is the further over its threshold (a tie: decode); aggregated: one more worker;
 *   - a pool that grew waits ceil(startup_s / interval_s) intervals before it grows again, so
 *     the worker it started can serve before the signal is read again;
 *   - every signal below `low` times its threshold (a p90 of 0, none, counts as low) for
 *     min_dwell intervals in a row: one fewer worker in the pool with the most slack (the one
 *     whose signals are the furthest below their thresholds; a tie: prefill), never below one
 *     worker per role of the shape;
 *   - the budget (hw.max_units) binds: a grow it refuses holds, with `unmet` set.
 * Its records have the observed traffic, no forecast (predicted zero) and factors 1; it never
 * reshapes, and needs no cost model (hw.costs may be empty).
 *
 * The SLA mode's safety net: when an observed p90 (TTFT or ITL) is over its objective and the
 * SLA decision's pool for that signal's role (prefill or decode; aggregated: the one pool) is
 * not larger than the deployed one, the decision is raised to what the reactive rule gives for
 * that role (the deployed size plus one, within the budget; when the SLA decision is another
 * shape of no more units, the deployed shape plus one), with a reason starting "reactive safety
 * net:". It waits for a started worker as the reactive rule does. The forecast and the model
 * said enough; the latency says otherwise, and the latency wins.
 *
 * `unmet` marks a decision that cannot meet the objectives: the SLA criterion's "cannot be
 * met" answers, and grows (reactive or the net's) that the budget refused. */
#ifndef DYAD_PLAN_PLANNER_H
#define DYAD_PLAN_PLANNER_H

#include "plan/balance.h"
#include "plan/predict.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum { DY_PLANNER_SLA = 0, DY_PLANNER_REACTIVE = 1 } dy_planner_mode;

/* The reactive rule's thresholds (the rule: above); a field of 0 takes its default. */
typedef struct {
    double queue_per_worker; /* > 0, default 4: waiting sequences per prompt-computing worker
                                above which the queue is long */
    double kv_high;          /* (0, 1], default 0.9: KV use above which decode grows */
    double low;              /* (0, 1), default 0.5: a signal below low × its threshold is low */
} dy_planner_reactive;

#define DY_REACTIVE_QUEUE_PER_WORKER 4.0
#define DY_REACTIVE_KV_HIGH 0.9
#define DY_REACTIVE_LOW 0.5

typedef struct {
    dy_predict_config predict; /* SLA: the predictor of each series (rate, ISL, OSL) */
    dy_balance_slo slo;
    dy_balance_hw hw;          /* costs, worker limits, units per worker, the budget */
    double interval_s;         /* > 0 */
    double startup_s;          /* ≥ 0: how long a new worker takes to serve */
    int min_dwell;             /* ≥ 1: intervals a smaller size must hold before a shrink */
    dy_planner_mode mode;      /* 0: SLA */
    dy_planner_reactive reactive; /* REACTIVE's thresholds, and the SLA mode's safety net's */
} dy_planner_config;

/* What the frontend saw over the interval that just ended. */
typedef struct {
    double requests;        /* arrived in the interval */
    double prompt_tokens;   /* their prompt tokens, summed */
    double output_tokens;   /* their output tokens (requested), summed */
    double prefix_hit;      /* share of prompt tokens found cached, [0, 1) */
    double ttft_s, itl_s;   /* observed means; 0: none this interval */
    double ttft_p90_s, itl_p90_s; /* observed 90th percentiles, ≥ 0; 0: none this interval */
    double waiting;         /* sequences sent but without a first token, now, over the
                               deployment (≥ 0) */
    double kv_use;          /* the highest KV-pool use among generating workers, [0, 1] */
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
    bool unmet;                    /* the objectives cannot be met (see above) */
} dy_planner_decision;

typedef struct {
    dy_planner_config cfg;
    dy_predictor rate, isl, osl;
    long intervals;
    dy_planner_decision current;   /* what is deployed (the last decision carried out) */
    int smaller_streak;            /* intervals in a row the answer was smaller */
    int low_streak;                /* REACTIVE: intervals in a row every signal was low */
    int grow_wait[2];              /* intervals before the prefill [0] and the decode or
                                      aggregated [1] pool may grow again (reactive rule) */
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
