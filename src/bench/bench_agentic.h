/* bench_agentic.h — the agentic workload of `dyad bench agentic` (docs/kv-tiers.md): many
 * concurrent agent sessions, each a conversation of model turns separated by tool calls whose
 * durations are drawn from a distribution, with prompts that grow turn by turn (each turn is
 * the last one's prompt plus the tool's result), beside open-loop background traffic.
 *
 * Each turn is a dyad.session request; with a hint it also says when the next turn will come
 * (dyad.hold.expected_ms): the true tool time ("oracle"), or that time off by --tool-error
 * ("predicted"; a negative error is a prediction too early, a positive one too late). The
 * server's own counters (/metrics) before and after give the bytes its tiers moved; samples
 * of them during the run give the KV cache's occupancy. Single-threaded, like dyad bench. */
#ifndef DYAD_BENCH_AGENTIC_H
#define DYAD_BENCH_AGENTIC_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "bench/bench_client.h"
#include "bench/bench_stats.h"

typedef enum { DYB_TOOL_FIXED, DYB_TOOL_LOGNORMAL, DYB_TOOL_PARETO } dyb_tool_dist;
typedef enum { DYB_HINT_NONE, DYB_HINT_PREDICTED, DYB_HINT_ORACLE } dyb_hint;

typedef struct {
    const char *url, *api_key;
    dyb_body_config body;       /* model, endpoint (completions), ignore_eos */
    double timeout_s;
    int sessions, turns;        /* concurrent sessions; model turns in each */
    long isl, turn_tokens, osl; /* first prompt; tokens each tool result adds; answer tokens */
    double tool_ms;             /* the tool durations' mean */
    dyb_tool_dist tool_dist;
    double tool_sigma;          /* lognormal: σ of the log; pareto: its shape α */
    double tool_error;          /* predicted = true × (1 + tool_error) */
    dyb_hint hint;
    double background_rate;     /* requests/s of unrelated traffic; 0: none */
    long background_isl, background_osl;
    int vocab_size;
    uint64_t seed;
    bool progress;              /* draw a progress line on stderr (turns ended of all) */
    volatile sig_atomic_t *stop;
} dyb_agentic_config;

/* What the server moved, from its /metrics before and after (sums over workers). */
typedef struct {
    double host_in, host_out, disk_in, disk_out;     /* bytes */
    double host_seconds, disk_seconds;               /* the copies' time */
    double prefetched_blocks, loaded_prompts, recomputed_prompts, failed_loads;
    double load_seconds, loads;                      /* prompts' measured waits for loads */
} dyb_tier_moves;

typedef struct {
    double duration_s;
    long turns_done, turns_failed, background_done, background_failed;
    dyb_dist first_ttft, next_ttft;   /* ms: a session's first turn; its continuations */
    dyb_dist bg_ttft, bg_tpot;        /* ms: the background traffic */
    double bg_tokens_per_s;
    double tool_mean_ms;              /* of the durations drawn */
    double occupancy_mean, occupancy_max; /* the KV caches' use, sampled (-1: no samples) */
    double load_share;                /* mean load wait ÷ mean continuation TTFT (-1: none) */
    long occupancy_samples;
    dyb_tier_moves moved;
    bool metrics;                     /* the server had dyad's /metrics */
    char first_error[256];
} dyb_agentic_report;

/* Checks the numbers (a message in err, false, when one is out of range). */
bool dyb_agentic_check(const dyb_agentic_config *c, char *err, size_t errlen);
/* Runs it against the server. -1 with a message in err when it cannot (no server, memory). */
int dyb_agentic_run(const dyb_agentic_config *c, dyb_agentic_report *out, char *err,
                    size_t errlen);
/* A tool duration in ms (one draw from c's distribution). */
double dyb_tool_draw(const dyb_agentic_config *c, dyb_rng *r);
/* Sums the series of `name` whose line contains `label` and `label2` (e.g. `tier="host"`; NULL:
 * any) in Prometheus text, with how many there were in *count (may be NULL); 0 if none. */
double dyb_prom_sum(const char *text, const char *name, const char *label, const char *label2,
                    int *count);

#endif
