/* bench_run.h — one benchmark run: an optional warmup phase, then the measured phase that
 * launches requests by the load's rule (closed loop: keep C in flight; open loop: gamma/
 * Poisson arrivals; trace replay: the trace's scaled times), bounded by a request count, a
 * duration or the trace's end, and collects every finished request into the statistics.
 * Single-threaded: the loop sleeps in the client's poll until the next arrival or network
 * activity. */
#ifndef DYAD_BENCH_RUN_H
#define DYAD_BENCH_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "bench/bench_client.h"
#include "bench/bench_stats.h"
#include "bench/bench_workload.h"

typedef struct {
    dyb_workload *wl;
    dyb_client *client;
    int concurrency;         /* in-flight cap; 0: none (open loop, trace times) */
    double rate, burstiness; /* rate > 0: open loop */
    bool timed;              /* rate == 0 and a trace's times: replay them */
    long requests;           /* measured requests; -1: no count bound */
    double duration_s;       /* 0: no time bound */
    long warmup;
    uint64_t seed;
    bool progress;           /* draw a progress line on stderr */
    const char *label;       /* for the progress line (the sweep's point; NULL: none) */
    volatile sig_atomic_t *stop; /* set by Ctrl-C: stop sending, drop what is in flight */
} dyb_run_config;

typedef struct {
    double duration_s;  /* first send → last completion of the measured phase */
    bool interrupted;
} dyb_run_outcome;

/* Runs and fills stats (measured requests only). -1 with a message in err when the run could
 * not go on (out of memory). */
int dyb_run(const dyb_run_config *c, dyb_stats *stats, dyb_run_outcome *out, char *err,
            size_t errlen);

/* When the requests of a measured open loop (gamma gaps at a rate, keyed by the seed) or of a
 * trace replay (the trace's scaled times) arrive: the schedule dyb_run sends by, for whoever
 * needs the same times without sending (the simulator). */
typedef struct {
    const dyb_workload *wl;
    bool timed;              /* the trace's times; else gaps at rate */
    double rate, burstiness;
    dyb_rng gaps;
    long index;              /* the request that arrives at next_ms */
    double next_ms;          /* ms after the phase's start */
} dyb_arrivals;

void dyb_arrivals_init(dyb_arrivals *a, const dyb_workload *wl, bool timed, double rate,
                       double burstiness, uint64_t seed, bool warmup);
/* Moves on to the next request's arrival. */
void dyb_arrivals_advance(dyb_arrivals *a);

#endif
