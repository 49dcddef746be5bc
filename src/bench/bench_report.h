/* bench_report.h — what the benchmark prints: the human report (one block per run and, after
 * a sweep, the Pareto table), one JSON object per run for machines, the sweep table as CSV and
 * the Pareto plot as SVG (x: tokens/s per user, y: output tokens/s per core). Writes only to
 * the FILE it is given; the JSON objects are built with jansson. */
#ifndef DYAD_BENCH_REPORT_H
#define DYAD_BENCH_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_stats.h"

/* What is the same for every run of one invocation (strings borrowed). */
typedef struct {
    const char *url;       /* the endpoint's full URL */
    const char *model;
    const char *endpoint;  /* "completions" or "chat" */
    const char *workload;  /* dyb_workload_describe's line */
    uint64_t seed;
} dyb_run_info;

/* One run (one sweep point). */
typedef struct {
    char label[64];           /* "concurrency=8", "rate=2", or "run" without a sweep */
    const char *sweep_param;  /* "concurrency", "rate" or NULL */
    double sweep_value;
    const char *mode;         /* "closed loop", "open loop" or "trace replay" */
    int concurrency;          /* in-flight cap; 0: none */
    double rate, burstiness;  /* open loop */
    long warmup;              /* warmup requests sent before the measurement */
    bool interrupted;         /* stopped by Ctrl-C */
    dyb_slo slo;
    dyb_summary sum;
    dyb_error_count errors[DYB_MAX_ERRORS]; /* owned copies */
    size_t n_errors;
    long other_errors;
    bool dominated;           /* off the Pareto frontier of its sweep */
} dyb_point;

/* Copies the stats' error tally into the point; dyb_point_free releases it. */
void dyb_point_take_errors(dyb_point *p, const dyb_stats *s);
void dyb_point_free(dyb_point *p);
/* Sets every point's `dominated` from its (tokens/s per user, output tokens/s per core). */
void dyb_points_mark_pareto(dyb_point *pts, size_t n);

void dyb_report_text(FILE *f, const dyb_run_info *ri, const dyb_point *p);
/* The sweep's table: one line per point, frontier points marked. */
void dyb_report_pareto_text(FILE *f, const dyb_point *pts, size_t n);
/* One run as a compact JSON object (malloc'd text, no newline); NULL when out of memory.
 * with_pareto: include "pareto_dominated" (known once the sweep is over). */
char *dyb_report_json(const dyb_run_info *ri, const dyb_point *p, bool with_pareto);
/* The sweep table as CSV (header + one row per point). -1 on a write error. */
int dyb_report_csv(FILE *f, const dyb_point *pts, size_t n);
/* The Pareto plot. -1 on a write error. */
int dyb_report_svg(FILE *f, const dyb_run_info *ri, const dyb_point *pts, size_t n);

/* A "nice" tick step (1, 2 or 5 × 10^k) giving about `target` ticks over [0, max]. */
double dyb_nice_step(double max, int target);

#endif
