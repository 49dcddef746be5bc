/* quality.h — the quality axis of the one point: from measured (model, weight type, method,
 * samples k) points — each an accuracy on a task and what one problem cost as served (worker
 * core-seconds, tokens, latency) — the cheapest way to answer at a target accuracy, and the
 * frontier of accuracy against cost. The points come from the quality bench
 * (bench/quality.py, docs/quality.md); `dyad plan quality` reads its file and calls this.
 *
 * A candidate is one (model, KV type, method, k, one_request) configuration. For one task it is the
 * point of that task; for every task at once ("all") it needs a point on each task the file
 * measured, its accuracy is the lowest of them (it must meet the target on each), its cost
 * the mean over the tasks and its latency the highest. Methods that need a checker to select
 * (pass@k: a verifier in the loop) are candidates only when the goal allows a verifier.
 * Pure: no clock, no I/O. */
#ifndef DYAD_PLAN_QUALITY_H
#define DYAD_PLAN_QUALITY_H

#include <stdbool.h>

#define DY_QUALITY_NAME 32

typedef struct {
    char model[DY_QUALITY_NAME];  /* e.g. "s-q8_0" */
    char size[DY_QUALITY_NAME];   /* "s", "m", "l" */
    char type[DY_QUALITY_NAME];   /* weight type: "f32", "q8_0", ... */
    char kv_type[DY_QUALITY_NAME]; /* the KV cache's element type: "f32", "f16", "q8_0" */
    char task[DY_QUALITY_NAME];   /* "add", "sort", ... */
    char method[DY_QUALITY_NAME]; /* greedy, pass, majority, majority_server, logprob */
    double params;                /* the model's parameters */
    int k;                        /* samples per problem */
    bool one_request;             /* the k samples in one request (one shared prefill) */
    int problems;                 /* problems the accuracy was measured on */
    double accuracy;              /* in [0, 1] */
    double core_seconds;          /* worker core-seconds per problem */
    double latency_ms_p90;        /* end-to-end latency per problem, 90th percentile */
    double prompt_tokens, completion_tokens; /* per problem */
} dy_quality_point;

typedef struct {
    double min_accuracy;   /* the target, in [0, 1] */
    const char *task;      /* one task, or NULL for every task at once */
    double max_latency_ms; /* p90 per problem; 0: no limit */
    bool allow_verifier;   /* pass@k may be chosen (a checker selects the answer) */
} dy_quality_goal;

/* One candidate as judged for a goal (indices into the points array). */
typedef struct {
    int first;             /* a point of the candidate (its model, method, k) */
    double accuracy;       /* for the goal's task(s) */
    double core_seconds;   /* per problem */
    double latency_ms_p90; /* per problem */
    bool meets;            /* accuracy and latency meet the goal */
} dy_quality_candidate;

/* Whether a method needs a checker to select its answer (pass@k). */
bool dy_quality_needs_verifier(const char *method);

/* The candidates of the goal's task(s) into out, in order of cost per problem (ties: higher
 * accuracy, then the point's index). Returns how many there are; past cap, only the first cap
 * found are written (give cap ≥ n to rank them all). */
int dy_quality_candidates(const dy_quality_point *pts, int n, const dy_quality_goal *g,
                          dy_quality_candidate *out, int cap);

/* The index into cands of the cheapest candidate that meets the goal, or -1 if none does. */
int dy_quality_choose(const dy_quality_candidate *cands, int n);

/* Marks in on_frontier[i] the candidates no other beats: none as cheap or cheaper with a higher
 * accuracy (within the latency limit). Returns how many are marked. */
int dy_quality_frontier(const dy_quality_candidate *cands, int n, const dy_quality_goal *g,
                        bool *on_frontier);

#endif
