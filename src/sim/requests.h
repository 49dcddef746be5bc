/* requests.h — a workload's requests for the simulator, made exactly as `dyad bench` would
 * send them: the prompts and lengths of bench's workload (dyb_workload_make) at the times of
 * bench's load (dyb_arrivals: an open loop at a rate, a trace at its own times, or all at 0
 * for a closed loop whose cap on requests in flight sends them). Shared by `dyad sim run` and
 * `dyad plan`. */
#ifndef DYAD_SIM_REQUESTS_H
#define DYAD_SIM_REQUESTS_H

#include "bench/bench_workload.h"
#include "sim/sim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    bool closed;       /* every request at time 0 */
    bool timed;        /* the trace's own times (when not closed) */
    double rate;       /* else an open loop at this many requests a second (inf: all at 0) */
    double burstiness; /* of the open loop's gamma gaps (1: Poisson) */
    uint64_t seed;
    long requests;     /* at most this many; -1: no bound but a trace's rows */
    double duration_s; /* > 0: no arrival at or after this time */
} dy_sim_load;

/* The requests, and the prompts they point into. */
typedef struct {
    dy_sim_request *r;
    dyb_request *src;
    long n, cap;
} dy_sim_requests;

/* Makes the requests into out (empty on entry). 0, or -1 with err when out of memory. */
int dy_sim_requests_make(const dyb_workload *wl, const dy_sim_load *load, dy_sim_requests *out,
                         char *err, size_t errlen);
void dy_sim_requests_free(dy_sim_requests *l);

/* The mean prompt and output lengths, and the share of prompt tokens an unbounded prefix cache
 * shared by every worker would hold (a block found in an earlier request's chain of
 * block_size-token blocks). For the balance criterion's traffic window. -1 when out of
 * memory. */
int dy_sim_requests_traffic(const dy_sim_requests *l, int block_size, uint64_t fingerprint,
                            double *isl, double *osl, double *prefix_hit);

#endif
