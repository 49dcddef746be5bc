/* place.c — see place.h. */
#include "route/place.h"

#include <string.h>

dy_route_config dy_route_config_default(void)
{
    /* Short prompts cost about as much as the step they ride in locally, while shipping
     * their KV adds a round trip; a backlog of two full prefill chunks means a remote
     * prefill would wait longer than computing here (docs/disaggregation.md). */
    dy_route_config c = {.disagg_min_tokens = 32, .prefill_busy_tokens = 1024};
    return c;
}

bool dy_route_remote(const dy_route_config *cfg, int64_t uncached_tokens,
                     int64_t prefill_backlog_tokens)
{
    return uncached_tokens >= cfg->disagg_min_tokens &&
           prefill_backlog_tokens < cfg->prefill_busy_tokens;
}

static bool disaggregated(const dy_place_view *v)
{
    for (int i = 0; i < v->n_workers; i++)
        if (v->workers[i].pool == DY_POOL_PREFILL)
            return true;
    return false;
}

/* The live workers of the prefill pool, or of the pools that generate, into out. */
static int members(const dy_place_view *v, bool prefill_pool, int *out)
{
    int n = 0;
    for (int i = 0; i < v->n_workers && i < DY_KV_INDEX_MAX_WORKERS; i++)
        if (v->workers[i].alive && (v->workers[i].pool == DY_POOL_PREFILL) == prefill_pool)
            out[n++] = i;
    return n;
}

static dy_router_choice pick(const dy_place_view *v, dy_route_pool pool,
                             const dy_place_request *r, double now)
{
    int m[DY_KV_INDEX_MAX_WORKERS];
    int n = members(v, pool == DY_POOL_PREFILL, m);
    return dy_router_pick(v->router, pool, m, n, r->hashes, r->n_blocks, r->prompt_tokens, now);
}

/* The generator: the worker that holds the conversation's KV for its next turn, when it is
 * alive in the generating pool; else the router's pick. */
static dy_router_choice pick_generator(const dy_place_view *v, dy_route_pool pool,
                                       const dy_place_request *r, double now)
{
    int w = r->session_worker;
    if (r->by_session && w >= 0 && w < v->n_workers && v->workers[w].alive &&
        v->workers[w].pool == pool)
        return dy_router_pick(v->router, pool, &w, 1, r->hashes, r->n_blocks, r->prompt_tokens,
                              now);
    return pick(v, pool, r, now);
}

/* Disaggregated, with the generator chosen: the prefill worker, if conditional
 * disaggregation sends the prompt to one, else -1; p's overlap becomes the blocks the
 * prefilling worker holds. */
static int choose_prefill(const dy_place_view *v, const dy_place_request *r, int gen,
                          double now, dy_placement *p)
{
    dy_kv_overlap held = {0};
    dy_kv_index_overlap_tiers_one(dy_router_index(v->router), gen, r->hashes, r->n_blocks, &held);
    p->overlap_blocks = held.blocks;
    memcpy(p->tier_blocks, held.tier, sizeof p->tier_blocks);
    if (r->local_prefill)
        return -1;
    /* The worker computes all but the prompt's last token, whose step starts decoding. */
    int64_t uncached = (int64_t)r->prompt_tokens - 1 - (int64_t)p->overlap_blocks * v->block_size;
    dy_router_choice pf = pick(v, DY_POOL_PREFILL, r, now);
    if (pf.worker < 0)
        return -1;
    int64_t backlog_blocks = 0;
    dy_router_worker_load(v->router, pf.worker, &backlog_blocks, NULL);
    if (!dy_route_remote(&v->route, uncached, backlog_blocks * v->block_size))
        return -1;
    p->overlap_blocks = pf.overlap_blocks;
    memcpy(p->tier_blocks, pf.tier_blocks, sizeof p->tier_blocks);
    return pf.worker;
}

dy_placement dy_place(const dy_place_view *v, const dy_place_request *r, double now,
                      dy_router_ticket *ticket)
{
    dy_placement p = {.gen = -1, .prefill = -1, .overlap_blocks = 0, .samples = 0};
    const bool disagg = disaggregated(v);
    dy_router_choice g = pick_generator(v, disagg ? DY_POOL_DECODE : DY_POOL_AGG, r, now);
    if (g.worker < 0)
        return p;
    p.gen = g.worker;
    p.overlap_blocks = g.overlap_blocks;
    memcpy(p.tier_blocks, g.tier_blocks, sizeof p.tier_blocks);
    if (disagg && v->workers[p.gen].pool == DY_POOL_DECODE)
        p.prefill = choose_prefill(v, r, p.gen, now, &p);
    int fit = dy_place_samples_per_worker(v->workers[p.gen].kv_blocks, v->block_size,
                                          r->prompt_tokens, r->max_tokens, v->max_samples);
    p.samples = r->n_samples < fit ? r->n_samples : fit;
    if (p.samples < 1)
        p.samples = 1;
    dy_router_on_routed(v->router, ticket, p.gen, p.prefill, r->hashes, r->n_blocks,
                        r->prompt_tokens, now);
    return p;
}

int dy_place_prefill(const dy_place_view *v, const dy_place_request *r, int planned, double now)
{
    if (planned >= 0 && planned < v->n_workers && v->workers[planned].alive)
        return planned;
    return pick(v, DY_POOL_PREFILL, r, now).worker;
}

int dy_place_samples_per_worker(int kv_blocks, int block_size, int prompt_tokens,
                                int max_tokens, int max_samples)
{
    const int64_t bs = block_size > 0 ? block_size : 1;
    int64_t prompt = (prompt_tokens + bs - 1) / bs;
    int64_t each = ((int64_t)max_tokens + bs) / bs + 1;
    int64_t fit = ((int64_t)kv_blocks - prompt) / each;
    return fit < 1 ? 1 : fit > max_samples ? max_samples : (int)fit;
}

dy_admit dy_place_admit(int waiting_sequences, int new_sequences, int max_queue)
{
    return (int64_t)waiting_sequences + new_sequences > max_queue ? DY_ADMIT_QUEUE_FULL
                                                                  : DY_ADMIT_OK;
}
