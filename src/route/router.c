/* router.c — the routing policies and the router's load accounting (see router.h). */
#include "route/router.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool alive, publishes_events;
    uint32_t gen;                 /* bumped at every join and leave: old tickets go stale */
    dy_router_load reported;
    int64_t own_prefill, own_decode;   /* blocks the router has in flight there */
    int64_t snap_prefill, snap_decode; /* the same at the last report */
} wstate;

struct dy_router {
    dy_router_config cfg;
    int max_workers;
    dy_kv_index *index;
    wstate *w;
    uint64_t rng;
    unsigned turn[3]; /* round-robin position per pool kind */
    dy_kv_overlap *overlap; /* scratch: overlap per worker, by tier */
    int *pick;        /* scratch: eligible workers */
    double *cost;     /* scratch: cost per eligible worker */
};

static const char *const policy_names[] = {"round-robin", "random", "least-loaded", "kv-aware"};

bool dy_router_policy_parse(const char *s, dy_router_policy *out)
{
    for (int i = 0; s && out && i < 4; i++) {
        if (!strcmp(s, policy_names[i])) {
            *out = (dy_router_policy)i;
            return true;
        }
    }
    return false;
}

const char *dy_router_policy_name(dy_router_policy p)
{
    return (unsigned)p < 4 ? policy_names[p] : "?";
}

dy_router_config dy_router_config_default(void)
{
    /* w = 1 weighs a block of prefill like a block of decode KV; τ = 0 is deterministic up to
     * ties; the TTL should not outlast how long a prefix stays in a worker's LRU under load
     * (docs/routing.md). Tier costs: a host block comes up by a memory copy, far cheaper than
     * the matrix work that recomputes it, so a tenth keeps a host hit nearly as good as a
     * primary one while still preferring the primary one; a disk block is a file read that
     * may queue behind other transfers and, on a slow disk, come close to recomputing, so it
     * is credited half. The worker itself decides per request from measured rates whether
     * to load or recompute; these only rank workers. */
    return (dy_router_config){.policy = DY_ROUTER_KV_AWARE, .overlap_weight = 1.0,
                              .temperature = 0.0, .block_size = 16, .approx_ttl_s = 120.0,
                              .seed = 1, .tier_cost = {0.0, 0.1, 0.5}};
}

bool dy_router_config_valid(const dy_router_config *cfg)
{
    if (!cfg || (unsigned)cfg->policy > DY_ROUTER_KV_AWARE || cfg->block_size < 1 ||
        !(cfg->overlap_weight >= 0) || !(cfg->temperature >= 0) || !(cfg->approx_ttl_s >= 0))
        return false;
    for (int t = 0; t < DY_KV_N_TIERS; t++)
        if (!(cfg->tier_cost[t] >= 0 && cfg->tier_cost[t] <= 1))
            return false;
    return true;
}

/* The lower tier named `name` (the first len bytes), or -1. */
static int lower_tier(const char *name, size_t len)
{
    for (int t = DY_KV_TIER_HOST; t < DY_KV_N_TIERS; t++) {
        const char *n = dy_kv_index_tier_name(t);
        if (strlen(n) == len && !strncmp(name, n, len))
            return t;
    }
    return -1;
}

bool dy_router_tier_cost_parse(const char *text, double cost[DY_KV_N_TIERS], char *err,
                               size_t errlen)
{
    double got[DY_KV_N_TIERS];
    bool seen[DY_KV_N_TIERS] = {false};
    const char *p = text ? text : "";
    do {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        int t = eq ? lower_tier(p, (size_t)(eq - p)) : -1;
        char *end = NULL;
        double v = t >= 0 ? strtod(eq + 1, &end) : 0;
        if (t < 0 || seen[t] || end == eq + 1 || end != p + len || !(v >= 0 && v <= 1)) {
            snprintf(err, errlen, "'%.*s' is not host=F or disk=F (once each, F a number in "
                     "[0, 1])", (int)len, p);
            return false;
        }
        seen[t] = true;
        got[t] = v;
        p += len;
    } while (*p++ == ',');
    for (int t = DY_KV_TIER_HOST; t < DY_KV_N_TIERS; t++)
        if (seen[t])
            cost[t] = got[t];
    return true;
}

/* splitmix64: small, seedable, good enough for tie-breaks and sampling. */
static uint64_t next_u64(dy_router *r)
{
    uint64_t z = (r->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double next_unit(dy_router *r)
{
    return (double)(next_u64(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, n), n > 0. The modulo bias at n ≤ 1024 is below 1e-16. */
static int next_below(dy_router *r, int n)
{
    return (int)(next_u64(r) % (uint64_t)n);
}

/* ---------------------------------------------------------------- life cycle */

dy_router *dy_router_new(const dy_router_config *cfg, int max_workers)
{
    if (!dy_router_config_valid(cfg))
        return NULL;
    dy_router *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->cfg = *cfg;
    r->max_workers = max_workers;
    r->rng = cfg->seed;
    r->index = dy_kv_index_new(max_workers);
    if (r->index) {
        r->w = calloc((size_t)max_workers, sizeof *r->w);
        r->overlap = calloc((size_t)max_workers, sizeof *r->overlap);
        r->pick = calloc((size_t)max_workers, sizeof *r->pick);
        r->cost = calloc((size_t)max_workers, sizeof *r->cost);
    }
    if (!r->index || !r->w || !r->overlap || !r->pick || !r->cost) {
        dy_router_free(r);
        return NULL;
    }
    return r;
}

void dy_router_free(dy_router *r)
{
    if (!r)
        return;
    dy_kv_index_free(r->index);
    free(r->w);
    free(r->overlap);
    free(r->pick);
    free(r->cost);
    free(r);
}

dy_kv_index *dy_router_index(dy_router *r)
{
    return r ? r->index : NULL;
}

static bool valid(const dy_router *r, int worker)
{
    return r && worker >= 0 && worker < r->max_workers;
}

int dy_router_add_worker(dy_router *r, int worker, bool publishes_events)
{
    if (!valid(r, worker))
        return -1;
    wstate *w = &r->w[worker];
    if (!w->alive)
        *w = (wstate){.alive = true, .gen = w->gen + 1};
    w->publishes_events = publishes_events;
    return 0;
}

int dy_router_remove_worker(dy_router *r, int worker)
{
    if (!valid(r, worker))
        return -1;
    r->w[worker] = (wstate){.gen = r->w[worker].gen + 1};
    return dy_kv_index_remove_worker(r->index, worker);
}

bool dy_router_worker_alive(const dy_router *r, int worker)
{
    return valid(r, worker) && r->w[worker].alive;
}

int dy_router_report_load(dy_router *r, int worker, const dy_router_load *load)
{
    if (!valid(r, worker) || !load || !r->w[worker].alive)
        return -1;
    wstate *w = &r->w[worker];
    w->reported = *load;
    w->snap_prefill = w->own_prefill;
    w->snap_decode = w->own_decode;
    return 0;
}

static int64_t blocks_of(const dy_router *r, int64_t tokens)
{
    return tokens > 0 ? (tokens + r->cfg.block_size - 1) / r->cfg.block_size : 0;
}

static int64_t prefill_load(const dy_router *r, const wstate *w)
{
    int64_t b = blocks_of(r, w->reported.queued_prefill_tokens) + w->own_prefill - w->snap_prefill;
    return b > 0 ? b : 0;
}

static int64_t decode_load(const wstate *w)
{
    int64_t b = w->reported.active_decode_blocks + w->own_decode - w->snap_decode;
    return b > 0 ? b : 0;
}

int dy_router_worker_load(const dy_router *r, int worker, int64_t *prefill_blocks,
                          int64_t *decode_blocks)
{
    if (!valid(r, worker))
        return -1;
    if (prefill_blocks)
        *prefill_blocks = prefill_load(r, &r->w[worker]);
    if (decode_blocks)
        *decode_blocks = decode_load(&r->w[worker]);
    return 0;
}

/* ---------------------------------------------------------------- choosing */

/* The prefill work, in blocks of computing, a prompt of prompt_blocks leaves a worker whose
 * cached prefix is `o`: the blocks it computes, plus each cached block at the cost of
 * bringing it up from its tier (the device tier's is 0 by default: a primary hit is free). */
static double prefill_work(const dy_router *r, int64_t prompt_blocks, const dy_kv_overlap *o)
{
    double work = (double)(prompt_blocks - o->blocks);
    for (int t = 0; t < DY_KV_N_TIERS && o->blocks; t++)
        work += r->cfg.tier_cost[t] * o->tier[t];
    return work > 0 ? work : 0;
}

/* The cost of sending the request to worker i, whose cached prefix is `o` (blocks of the
 * prompt's prompt_blocks, by tier):
 *     w × (work + queued prefill) + (active decode + added)
 * where work = prefill_work and added = prompt blocks not in its device tier. The decode
 * term is the blocks that would be active there with this request ("potential" decode
 * blocks, as Dynamo's router counts them): the request's blocks in the primary pool are
 * there already, the `added` ones it would bring in, computed or loaded from a lower tier.
 * Without that term a worker whose cached prefix is in use by a sibling request looks dearer
 * than an idle worker that would have to recompute and store the whole prompt, and
 * shared-prefix groups scatter. With every hit in the device tier, work = added = the
 * blocks left to prefill. least-loaded (use_overlap false) keeps the load terms only; the
 * prefill pool drops the decode terms, the decode pool the prefill work. */
static double cost_of(const dy_router *r, dy_route_pool pool, int i, int64_t prompt_blocks,
                      const dy_kv_overlap *o, bool use_overlap)
{
    const wstate *w = &r->w[i];
    double wt = r->cfg.overlap_weight, queued = (double)prefill_load(r, w);
    double work = 0, added = 0;
    if (use_overlap && pool != DY_POOL_DECODE) {
        work = prefill_work(r, prompt_blocks, o);
        added = (double)(prompt_blocks - o->tier[DY_KV_TIER_DEVICE]);
        added = added > 0 ? added : 0;
    }
    if (pool == DY_POOL_PREFILL)
        return wt * (work + queued);
    return wt * (work + queued) + (double)decode_load(w) + added;
}

/* Index into cost[0..n) of the lowest, ties uniformly at random (reservoir sampling). */
static int argmin(dy_router *r, const double *cost, int n)
{
    int best = 0, ties = 1;
    for (int k = 1; k < n; k++) {
        if (cost[k] < cost[best]) {
            best = k;
            ties = 1;
        } else if (cost[k] == cost[best] && next_below(r, ++ties) == 0) {
            best = k;
        }
    }
    return best;
}

/* Samples from softmax(−(cost / max cost) / τ). Dividing by the largest cost makes τ a
 * tolerance relative to the load: costs 5% apart look alike at τ = 0.1 whatever the scale. */
static int sample(dy_router *r, const double *cost, int n, double tau)
{
    double hi = 0, lo = INFINITY, sum = 0;
    for (int k = 0; k < n; k++) {
        hi = cost[k] > hi ? cost[k] : hi;
        lo = cost[k] < lo ? cost[k] : lo;
    }
    double scale = hi > 0 ? 1.0 / (hi * tau) : 0;
    for (int k = 0; k < n; k++)
        sum += exp(-(cost[k] - lo) * scale); /* shifted by the minimum: no underflow to 0/0 */
    double u = next_unit(r) * sum;
    for (int k = 0; k < n; k++) {
        u -= exp(-(cost[k] - lo) * scale);
        if (u < 0)
            return k;
    }
    return n - 1;
}

/* The live workers among the candidates (all live workers when candidates is NULL). */
static int eligible(dy_router *r, const int *candidates, int n_candidates)
{
    int n = 0;
    if (!candidates) {
        for (int i = 0; i < r->max_workers; i++)
            if (r->w[i].alive)
                r->pick[n++] = i;
        return n;
    }
    for (int k = 0; k < n_candidates; k++) {
        int i = candidates[k];
        if (valid(r, i) && r->w[i].alive && n < r->max_workers)
            r->pick[n++] = i;
    }
    return n;
}

dy_router_choice dy_router_pick(dy_router *r, dy_route_pool pool, const int *candidates,
                                int n_candidates, const uint64_t *hashes, int n_blocks,
                                int prompt_tokens, double now)
{
    dy_router_choice c = {.worker = -1};
    if (!r || (unsigned)pool > DY_POOL_DECODE || n_candidates < 0 || n_blocks < 0 ||
        (n_blocks > 0 && !hashes))
        return c;
    dy_kv_index_expire(r->index, now);
    int n = eligible(r, candidates, n_candidates);
    if (n == 0)
        return c;
    int64_t prompt_blocks = blocks_of(r, prompt_tokens);
    if (prompt_blocks < n_blocks)
        prompt_blocks = n_blocks;
    bool kv = r->cfg.policy == DY_ROUTER_KV_AWARE;
    if (kv)
        dy_kv_index_overlap_tiers(r->index, hashes, n_blocks, r->overlap);
    int k = 0;
    switch (r->cfg.policy) {
    case DY_ROUTER_ROUND_ROBIN:
        k = (int)(r->turn[pool]++ % (unsigned)n);
        break;
    case DY_ROUTER_RANDOM:
        k = next_below(r, n);
        break;
    case DY_ROUTER_LEAST_LOADED:
    case DY_ROUTER_KV_AWARE:
        for (int j = 0; j < n; j++) {
            int i = r->pick[j];
            r->cost[j] = cost_of(r, pool, i, prompt_blocks, &r->overlap[i], kv);
        }
        k = kv && r->cfg.temperature > 0 ? sample(r, r->cost, n, r->cfg.temperature)
                                         : argmin(r, r->cost, n);
        break;
    }
    c.worker = r->pick[k];
    dy_kv_overlap held = r->overlap[c.worker];
    if (!kv)
        dy_kv_index_overlap_tiers_one(r->index, c.worker, hashes, n_blocks, &held);
    c.overlap_blocks = held.blocks;
    memcpy(c.tier_blocks, held.tier, sizeof c.tier_blocks);
    c.cost = cost_of(r, pool, c.worker, prompt_blocks, &held, kv);
    return c;
}

/* ---------------------------------------------------------------- own accounting */

static bool current(const dy_router *r, int worker, uint32_t gen)
{
    return valid(r, worker) && r->w[worker].alive && r->w[worker].gen == gen;
}

int dy_router_on_routed(dy_router *r, dy_router_ticket *t, int worker, int prefill_worker,
                        const uint64_t *hashes, int n_blocks, int prompt_tokens, double now)
{
    if (prefill_worker < 0)
        prefill_worker = worker;
    if (!t || !valid(r, worker) || !valid(r, prefill_worker) || !r->w[worker].alive ||
        !r->w[prefill_worker].alive || n_blocks < 0 || (n_blocks > 0 && !hashes))
        return -1;
    int64_t blocks = blocks_of(r, prompt_tokens);
    if (blocks < n_blocks)
        blocks = n_blocks;
    if (blocks > INT32_MAX)
        return -1;
    dy_kv_index_expire(r->index, now);
    dy_kv_overlap cached, cached_here;
    dy_kv_index_overlap_tiers_one(r->index, prefill_worker, hashes, n_blocks, &cached);
    if (prefill_worker == worker)
        cached_here = cached;
    else
        dy_kv_index_overlap_tiers_one(r->index, worker, hashes, n_blocks, &cached_here);
    *t = (dy_router_ticket){.worker = worker, .prefill_worker = prefill_worker,
                            .prefill_blocks = (int)ceil(prefill_work(r, blocks, &cached)),
                            .decode_blocks = (int)blocks - cached_here.tier[DY_KV_TIER_DEVICE],
                            .gen = r->w[worker].gen, .prefill_gen = r->w[prefill_worker].gen};
    r->w[prefill_worker].own_prefill += t->prefill_blocks;
    if (prefill_worker != worker)
        r->w[worker].own_decode += t->decode_blocks;
    /* After this request both hold the prompt's blocks (the decode worker by transfer). */
    double until = now + r->cfg.approx_ttl_s;
    int rc = 0;
    if (!r->w[prefill_worker].publishes_events)
        rc |= dy_kv_index_predict(r->index, prefill_worker, hashes, n_blocks, until);
    if (prefill_worker != worker && !r->w[worker].publishes_events)
        rc |= dy_kv_index_predict(r->index, worker, hashes, n_blocks, until);
    return rc ? -1 : 0;
}

int dy_router_on_first_token(dy_router *r, dy_router_ticket *t)
{
    if (!r || !t)
        return -1;
    if (t->phase != 0)
        return 0;
    t->phase = 1;
    if (current(r, t->prefill_worker, t->prefill_gen))
        r->w[t->prefill_worker].own_prefill -= t->prefill_blocks;
    if (t->prefill_worker == t->worker && current(r, t->worker, t->gen))
        r->w[t->worker].own_decode += t->decode_blocks;
    return 0;
}

int dy_router_on_finished(dy_router *r, dy_router_ticket *t)
{
    if (!r || !t)
        return -1;
    if (t->phase == 2)
        return 0;
    bool decoding = t->phase == 1 || t->prefill_worker != t->worker;
    if (t->phase == 0 && current(r, t->prefill_worker, t->prefill_gen))
        r->w[t->prefill_worker].own_prefill -= t->prefill_blocks;
    if (decoding && current(r, t->worker, t->gen))
        r->w[t->worker].own_decode -= t->decode_blocks;
    t->phase = 2;
    return 0;
}
