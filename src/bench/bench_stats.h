/* bench_stats.h — the benchmark's figures, with vLLM's benchmark definitions: per request TTFT
 * (send → first content token), TPOT ((E2E − TTFT) / (output tokens − 1), for requests with
 * more than one output token), E2E; ITL pooled over all gaps of all requests; each reported
 * as mean and p50/p90/p99 (linear interpolation between order statistics, as numpy's
 * percentile). Throughputs divide by the run's duration; goodput counts the requests that met
 * every given SLO. The two axes of the Pareto frontier: output tokens/s per core and tokens/s
 * per user (1000 / mean TPOT ms). Pure. */
#ifndef DYAD_BENCH_STATS_H
#define DYAD_BENCH_STATS_H

#include <stdbool.h>
#include <stddef.h>

#include "bench/bench_stream.h"

typedef struct {
    size_t n;
    double mean, p50, p90, p99, min, max; /* all 0 when n == 0 */
} dyb_dist;

/* Summary of n values; sorts v in place. */
dyb_dist dyb_dist_of(double *v, size_t n);

/* Service-level objectives; a value <= 0 is not set. */
typedef struct {
    double ttft_ms, tpot_ms, e2e_ms;
} dyb_slo;

bool dyb_slo_any(const dyb_slo *s);
/* "ttft_ms=200,tpot_ms=50[,e2e_ms=X]" → slo (itl_ms is another name for tpot_ms: a
 * request's mean inter-token latency); -1 with a message on a bad string. */
int dyb_slo_parse(const char *text, dyb_slo *out, char *err, size_t errlen);

#define DYB_MAX_ERRORS 8

typedef struct {
    char *msg;
    long count;
} dyb_error_count;

/* One completed request's latencies, ms; tpot is NaN with <= 1 output token. */
typedef struct {
    double ttft, tpot, e2e;
} dyb_sample;

/* Everything kept from the finished requests of one run; owns its arrays. */
typedef struct {
    dyb_sample *req; /* per completed request */
    size_t n_ok, cap;
    double *itl;
    size_t n_itl, itl_cap;
    long failed;
    long input_tokens, output_tokens; /* of completed requests */
    long placed, kv_moved;     /* completed requests dyad placed; of those, whose KV moved */
    double kv_bytes, kv_ms, kv_ttft_ms; /* sums over the moved ones (TTFT: for the share) */
    dyb_error_count errors[DYB_MAX_ERRORS]; /* distinct messages, first seen first */
    size_t n_errors;
    long other_errors; /* failures whose message did not fit in errors[] */
} dyb_stats;

void dyb_stats_init(dyb_stats *s);
void dyb_stats_free(dyb_stats *s);
/* Adds a finished request (ok or failed). -1 when out of memory. */
int dyb_stats_add(dyb_stats *s, const dyb_result *r);

typedef struct {
    long completed, failed;
    double duration_s;
    long input_tokens, output_tokens;
    double req_per_s, input_tok_per_s, output_tok_per_s;
    dyb_dist ttft, tpot, itl, e2e;
    bool has_slo;
    long good;              /* completed requests meeting every SLO */
    double goodput;         /* good / duration, requests/s */
    int cores;
    double output_tok_per_s_per_core;
    double tok_per_s_per_user; /* 1000 / mean TPOT ms; 0 without TPOT samples */
    /* KV transfers (dyad servers only; placed == 0 for others): requests prefilled on a
     * prefill worker, their KV bytes, mean transfer time, the rate (bytes / time), and
     * transfer time as a share of those requests' TTFT (sum over sum). */
    long placed, kv_moved;
    double kv_bytes, kv_ms_mean, kv_gb_per_s, kv_ttft_share;
} dyb_summary;

/* The run's summary; the stats are left as they were. -1 when out of memory. */
int dyb_stats_summarize(const dyb_stats *s, double duration_s, const dyb_slo *slo, int cores,
                        dyb_summary *out);

/* Marks the points (x[i], y[i]) that another point beats on one axis without losing on the
 * other (larger is better on both): those are off the Pareto frontier. */
void dyb_pareto_mark(const double *x, const double *y, size_t n, bool *dominated);

#endif
