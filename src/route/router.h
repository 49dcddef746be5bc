/* router.h — which worker of a pool a request goes to (pure policy: no I/O, no clocks, no
 * threads; the caller passes time in and feeds the workers' events and loads in).
 *
 * Policies (--router): round-robin, random, least-loaded, kv-aware. kv-aware scores each
 * candidate worker with
 *     cost = w × (prefill work the prompt leaves there + prefill blocks queued there)
 *            + decode blocks active there (counting the blocks this request would add)
 * (w = --router-overlap-weight) and takes the lowest, ties at random; with a temperature
 * τ > 0 (--router-temperature) it samples from softmax(−cost / max cost / τ) instead.
 * The prefill work is the prompt blocks it would compute plus, for each block of its cached
 * prefix that sits in a lower tier (host memory, disk), the cost of loading it as a share of
 * computing it (--router-tier-cost): a host or disk hit is worth less than a primary one,
 * and more than none. The blocks the request would add are the ones not already in its
 * primary pool (computed or loaded): counting them makes a worker whose cached prefix a
 * running request is already using no dearer than an idle one that would have to store the
 * whole prompt (router.c, cost_of).
 * "Blocks it would still have to prefill" come from the global prefix index
 * (route/kv_index.h), which the caller keeps current with the workers' KV events; workers
 * that publish no events are covered by predictions of what the router sent them, with a
 * TTL.
 *
 * Load of a worker = its last report plus the router's own accounting of what changed
 * since (see dy_router_report_load): a routed request counts as prefill load until its first
 * token and as decode load until it ends, so the load is right between reports.
 *
 * Disaggregated serving: the pool argument picks the cost terms. A prefill pool is routed
 * by overlap + prefill load (the decode term is dropped: prefill workers do not decode), a
 * decode pool by load alone (its KV arrives by transfer, so overlap does not matter).
 *
 * One dy_router is one mutable state with no locks: the frontend calls it from one thread
 * (or under one lock). */
#ifndef DYAD_ROUTER_H
#define DYAD_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "route/kv_index.h"

/* The pools a worker can belong to (its role); they pick the cost terms below. */
typedef enum { DY_POOL_AGG = 0, DY_POOL_PREFILL = 1, DY_POOL_DECODE = 2 } dy_route_pool;

typedef enum {
    DY_ROUTER_ROUND_ROBIN = 0,
    DY_ROUTER_RANDOM = 1,
    DY_ROUTER_LEAST_LOADED = 2,
    DY_ROUTER_KV_AWARE = 3,
} dy_router_policy;

/* "round-robin", "random", "least-loaded", "kv-aware". parse returns false (and leaves *out)
 * for anything else; name returns "?" for an out-of-range value. */
bool dy_router_policy_parse(const char *s, dy_router_policy *out);
const char *dy_router_policy_name(dy_router_policy p);

typedef struct {
    dy_router_policy policy;
    double overlap_weight; /* w: weight of prefill work against decode load (default 1) */
    double temperature;    /* τ: 0 = argmin (default); larger spreads choices */
    int block_size;        /* tokens per KV block, as on the workers (default 16) */
    double approx_ttl_s;   /* how long a predicted block is believed (default 120 s) */
    uint64_t seed;         /* random tie-breaks and sampling (default 1) */
    /* Bringing one cached block up from tier t (DY_KV_TIER_*) into the primary pool costs
     * tier_cost[t] × computing it again: 0 is a primary hit, 1 is no better than a miss.
     * Each in [0, 1]; defaults in dy_router_config_default. */
    double tier_cost[DY_KV_N_TIERS];
} dy_router_config;

dy_router_config dy_router_config_default(void);
/* Whether dy_router_new would take cfg: a known policy, block_size >= 1, a non-negative
 * weight, temperature and TTL, every tier cost in [0, 1]. */
bool dy_router_config_valid(const dy_router_config *cfg);

/* Reads "host=F,disk=F" (either or both, any order) into cost[DY_KV_TIER_HOST/DISK]; the
 * other entries are left as they are. false, with the problem in err, for an unknown tier,
 * a repeated one, or a value that is not a number in [0, 1]; cost is then untouched. */
bool dy_router_tier_cost_parse(const char *text, double cost[DY_KV_N_TIERS], char *err,
                               size_t errlen);

/* What a worker reports about itself (with each event batch). */
typedef struct {
    int64_t queued_prefill_tokens; /* prompt tokens waiting or being prefilled */
    int64_t active_decode_blocks;  /* KV blocks of the sequences it is decoding */
    int64_t running;               /* requests it holds */
    int64_t kv_used_blocks, kv_total_blocks; /* pool use (for metrics; not in the cost) */
} dy_router_load;

typedef struct dy_router dy_router;

/* Workers are 0..max_workers-1 (at most DY_KV_INDEX_MAX_WORKERS). NULL on a bad config
 * (dy_router_config_valid) or out of memory. */
dy_router *dy_router_new(const dy_router_config *cfg, int max_workers);
void dy_router_free(dy_router *r);
/* The router's prefix index: apply the workers' event batches and snapshots to it. */
dy_kv_index *dy_router_index(dy_router *r);

/* A worker joins (or changes mode). publishes_events = false puts it in approximate mode:
 * the router predicts its cache from its own decisions. Joining resets its load. */
int dy_router_add_worker(dy_router *r, int worker, bool publishes_events);
/* A worker is gone: it leaves the candidates, the index and the load accounting (tickets
 * still held for it become no-ops). */
int dy_router_remove_worker(dy_router *r, int worker);
bool dy_router_worker_alive(const dy_router *r, int worker);
/* A load report. It replaces the previous one and restarts the own-accounting delta: the
 * report already counts everything the worker had received, so from now on only what the
 * router routes, and what starts decoding or ends, after it is added on top. (Adding all
 * own accounting to every report would count requests twice; taking max(report, own) would
 * hide other frontends' load or the worker's real progress through a long prefill.) */
int dy_router_report_load(dy_router *r, int worker, const dy_router_load *load);
/* The load the cost sees now, in blocks: reported + own accounting since that report. */
int dy_router_worker_load(const dy_router *r, int worker, int64_t *prefill_blocks,
                          int64_t *decode_blocks);

typedef struct {
    int worker;         /* -1 when no candidate is alive (or bad arguments) */
    int overlap_blocks; /* leading blocks of the request already cached there (any tier) */
    int tier_blocks[DY_KV_N_TIERS]; /* of those, how many in each tier (the fastest holding
                                     * it; dy_kv_overlap); they sum to overlap_blocks */
    double cost;        /* kv-aware: the cost above; other policies: the load cost */
} dy_router_choice;

/* Picks a worker of one pool for a request whose prompt has prompt_tokens tokens and whose
 * full blocks hash to hashes[0..n_blocks). candidates lists the pool's workers (dead ones
 * are skipped); NULL means every live worker. `pool` picks the cost terms (DY_POOL_AGG:
 * the whole cost, DY_POOL_PREFILL: w × prefill terms, DY_POOL_DECODE: load only). `now`
 * expires old predictions. Round-robin keeps one turn per pool kind. */
dy_router_choice dy_router_pick(dy_router *r, dy_route_pool pool, const int *candidates,
                                int n_candidates, const uint64_t *hashes, int n_blocks,
                                int prompt_tokens, double now);

/* ---- the router's own accounting of a request, from routing to its end. The caller keeps
 * the ticket with the request and hands it back at its first token and at its end; both
 * calls are idempotent, and a request that ends before its first token simply drops its
 * prefill load. */
typedef struct {
    int worker;         /* generates (decode or aggregated worker) */
    int prefill_worker; /* computes the prompt: `worker` itself, or a prefill worker */
    int prefill_blocks; /* prefill work on prefill_worker when routed, in blocks rounded up:
                         * the prompt blocks not cached there plus each lower-tier cached
                         * block at its tier cost (loading is cheaper than computing, not
                         * free, and like computing it stands before the first token) */
    int decode_blocks;  /* KV blocks it adds where it decodes: prompt blocks not in the
                         * primary pool of `worker` when routed — computed or brought up
                         * from a lower tier, they take room there alike (shared prefix
                         * blocks count once, for the request that brought them, as in
                         * the worker's pool) */
    uint32_t gen, prefill_gen; /* the workers' join generations (stale after a leave) */
    uint8_t phase;      /* 0 prefilling, 1 decoding, 2 done */
} dy_router_ticket;

/* The request was sent to `worker`; prefill_worker is -1 (or == worker) when it prefills
 * itself, else the prefill worker that computes the prompt and ships its KV. Counts
 * prefill_blocks on the prefill worker until the first token, then decode_blocks on
 * `worker` until the end; with a separate prefill worker the decode worker's blocks count
 * at once (it sets them aside when the request arrives). Own accounting is approximate
 * (it does not follow generated tokens, nor a shared prefix outliving the request that
 * brought it); it only bridges the time to the next load report, which is exact.
 * Approximate-mode workers get the prompt's blocks predicted until now + TTL. */
int dy_router_on_routed(dy_router *r, dy_router_ticket *t, int worker, int prefill_worker,
                        const uint64_t *hashes, int n_blocks, int prompt_tokens, double now);
/* First token: its prefill load becomes decode load. */
int dy_router_on_first_token(dy_router *r, dy_router_ticket *t);
/* The request ended (finished, failed or cancelled): its load goes. */
int dy_router_on_finished(dy_router *r, dy_router_ticket *t);

#endif
