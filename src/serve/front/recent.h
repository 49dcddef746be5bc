/* recent.h — the frontend's rolling view of its last minutes of traffic, for the status
 * endpoint and the dashboard (GET /v1/dyad/status, docs/dashboard.md): one bucket per second
 * of the requests that ended in it (counts, tokens, the objectives met, KV moved, the
 * router's predicted and realised overlap) and a bounded sample of their latencies (TTFT,
 * TPOT, each gap between tokens), summed over any span of the window with percentiles as
 * util/stats.h computes them. A bucket is reused once its second has left the window.
 * The caller passes the time in (dy_now() seconds in the server), so it is testable with
 * made-up clocks. Thread-safe: the HTTP threads add, the status route reads. */
#ifndef DYAD_RECENT_H
#define DYAD_RECENT_H

#include <stdbool.h>
#include <stdint.h>

/* Latency samples kept per second and kind (past that, the first ones stand for the rest). */
#define DY_RECENT_SAMPLES 256
#define DY_RECENT_MAX_WINDOW_S 3600

typedef struct {
    int window_s;                  /* seconds kept, 1..DY_RECENT_MAX_WINDOW_S */
    double slo_ttft_s, slo_tpot_s; /* the objectives (--slo); 0: none (no goodput) */
} dy_recent_config;

/* One request that ended, as dy_recent_ended takes it. */
typedef struct {
    bool failed;              /* ended with an error (never meets the objectives) */
    double ttft_s;            /* first token after arrival; < 0: no token */
    double tpot_s;            /* mean time between its tokens; < 0: fewer than two */
    int64_t prompt_tokens, cached_tokens, output_tokens;
    int64_t predicted_blocks; /* leading prompt blocks the router expected cached */
    int transfers;            /* prompts whose KV moved from a prefill worker */
    uint64_t xfer_bytes;
    double xfer_s;            /* time spent moving them */
} dy_recent_request;

typedef struct {
    double p50, p90;
    int n; /* samples they are over; 0: none (both 0) */
} dy_recent_pct;

/* A span's figures. Rates are over span_s. */
typedef struct {
    double span_s;            /* the time summed: the current second as far as it has gone,
                               * nothing before the window's start */
    double requests, failed, good;
    double requests_per_s, output_tokens_per_s;
    double goodput;           /* good / requests; -1 without objectives or requests */
    dy_recent_pct ttft, itl, tpot;
    double prompt_tokens, cached_tokens, output_tokens, predicted_blocks;
    double transfers, transfers_per_s, xfer_bytes, xfer_bytes_per_s, xfer_s;
    double moved_ttft_s;      /* TTFT summed over the requests whose KV moved */
} dy_recent_figures;

typedef struct dy_recent dy_recent;

/* A window that starts at `now`; NULL if c is out of range or out of memory. */
dy_recent *dy_recent_new(const dy_recent_config *c, double now);
void dy_recent_free(dy_recent *r);
const dy_recent_config *dy_recent_config_of(const dy_recent *r);
void dy_recent_ended(dy_recent *r, double now, const dy_recent_request *q);
/* One gap between two tokens of a sequence, observed at `now`. */
void dy_recent_itl(dy_recent *r, double now, double gap_s);
/* The seconds s with floor(now) - from_ago < s <= floor(now) - to_ago (0 <= to_ago < from_ago),
 * those before the window started left out; rates are over span_s (at least 0.1 s). */
dy_recent_figures dy_recent_between(dy_recent *r, double now, int from_ago, int to_ago);

#endif
