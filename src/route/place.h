/* place.h — where a request runs: everything the frontend decides about a request, as pure
 * policy (no I/O, no clocks, no threads, no locks, no allocation; the caller passes the
 * time in). The frontend (serve/front/fleet_*.c) calls it under its lock with a view of its
 * worker pool; a simulator or planner can call it with a made-up pool and get the very
 * decisions the server makes.
 *
 * For each prompt it decides, in order:
 *   admission      whether the queue has room for the request's sequences (dy_place_admit);
 *   the generator  the worker that decodes it (aggregated: prefills it too), picked from
 *                  the generating pool by the router's policy (router.h);
 *   the prefiller  disaggregated only: a prefill worker computes the prompt and ships its
 *                  KV when enough of it is uncached where it decodes and the prefill pool
 *                  is not backed up (conditional disaggregation, dy_route_remote); else -1,
 *                  and the generator prefills it itself (as an aggregated generator always
 *                  does: while the planner switches roles a pool may hold both kinds);
 *   the samples    how many of its n samples go together to that worker: all of them, unless
 *                  the worker's KV pool could not hold them at once (docs/repeated-sampling.md);
 *                  the rest are placed anew.
 * docs/disaggregation.md gives the defaults of conditional disaggregation and why
 * (docs/disaggregation-results.md the measurements); docs/routing.md the router's policies. */
#ifndef DYAD_PLACE_H
#define DYAD_PLACE_H

#include <stdbool.h>
#include <stdint.h>
#include "route/router.h"

/* ---- conditional disaggregation */

typedef struct {
    int disagg_min_tokens;        /* prompts with fewer uncached tokens prefill locally */
    int64_t prefill_busy_tokens;  /* prefill pool backlog above which prompts stay local */
} dy_route_config;

/* The defaults (see docs/disaggregation.md). */
dy_route_config dy_route_config_default(void);

/* Whether a prompt with `uncached_tokens` still to compute on its decode worker goes to the
 * prefill worker whose backlog is `prefill_backlog_tokens` (true), or is prefilled where it
 * decodes (false). */
bool dy_route_remote(const dy_route_config *cfg, int64_t uncached_tokens,
                     int64_t prefill_backlog_tokens);

/* ---- the pool as placement sees it */

typedef struct {
    bool alive;
    dy_route_pool pool;  /* DY_POOL_AGG, DY_POOL_PREFILL or DY_POOL_DECODE: its role */
    int kv_blocks;       /* blocks in its KV pool (from HELLO) */
} dy_place_worker;

typedef struct {
    const dy_place_worker *workers; /* workers[i] is the router's worker i */
    int n_workers;                  /* at most DY_KV_INDEX_MAX_WORKERS */
    int block_size;                 /* tokens per KV block, as every worker has them */
    int max_samples;                /* the most samples one request to a worker may carry */
    dy_route_config route;
    dy_router *router;              /* its choices and load accounting change with each call */
} dy_place_view;
/* The pool is disaggregated when any of its workers is a prefill worker (dead or alive). */

typedef struct {
    int prompt_tokens;        /* the prompt as sent to the worker */
    const uint64_t *hashes;   /* its full blocks' chained hashes (kv/block_hash.h) */
    int n_blocks;
    int max_tokens;           /* completion tokens each sample may generate */
    int n_samples;            /* samples of this prompt still to place (≥ 1) */
    bool local_prefill;       /* no prefill worker: a rerun after its worker died */
    bool by_session;          /* a conversation's turn whose KV session_worker holds
                               * (route/session.h): it generates it if alive */
    int session_worker;
} dy_place_request;

typedef struct {
    int gen;            /* the worker that generates; -1 when none is alive */
    int prefill;        /* the prefill worker, or -1: `gen` prefills the prompt itself */
    int overlap_blocks; /* leading prompt blocks the prefilling worker already holds */
    int samples;        /* of the request's n_samples, how many go in this part (≥ 1;
                         * 0 when gen is -1) */
    int tier_blocks[DY_KV_N_TIERS]; /* of overlap_blocks, how many in each of its tiers */
} dy_placement;

/* Places one prompt (or the next part of its samples). When gen ≥ 0 the decision enters the
 * router's load accounting through *ticket (hand it back with dy_router_on_first_token /
 * dy_router_on_finished, router.h); else *ticket is untouched. `now` expires old
 * predictions in the router's index. */
dy_placement dy_place(const dy_place_view *v, const dy_place_request *r, double now,
                      dy_router_ticket *ticket);

/* The prefill worker for a prompt whose decode worker has set its blocks aside: the planned
 * one while it lives, else a new pick from the live prefill pool (the planned one died in
 * between). -1 when none is alive: the decode worker prefills it itself. */
int dy_place_prefill(const dy_place_view *v, const dy_place_request *r, int planned, double now);

/* Samples of one prompt that a worker with kv_blocks blocks can hold at once, at worst: the
 * prompt's blocks once (shared) plus each sample's own blocks for its completion; at least 1
 * (a sample that does not fit is the worker's to refuse), at most max_samples. */
int dy_place_samples_per_worker(int kv_blocks, int block_size, int prompt_tokens,
                                int max_tokens, int max_samples);

/* ---- admission */

typedef enum {
    DY_ADMIT_OK = 0,
    DY_ADMIT_QUEUE_FULL = 1, /* over max_queue sequences would wait: refuse (HTTP 429) */
} dy_admit;

/* Whether a request of new_sequences (its choices) may queue behind waiting_sequences
 * (sequences sent but without their first token yet), with at most max_queue waiting. */
dy_admit dy_place_admit(int waiting_sequences, int new_sequences, int max_queue);

#endif
