/* kv_cache.c — see kv_cache.h. The index is a hash map from block hash to block; evictable
 * blocks form an LRU list (lru.h); the event log is kv_event_log.h's ring. */
#include "kv/kv_cache.h"
#include "kv/kv_event_log.h"
#include "kv/lru.h"
#include "util/hashmap.h"

#include <stdlib.h>
#include <string.h>


struct dy_kv_cache {
    dy_kv_pool *pool;
    uint64_t fingerprint;
    /* per block */
    uint64_t *hash, *parent;
    bool *indexed;
    dy_lru evictable; /* indexed blocks nobody references, least recently released first */
    int n_indexed;
    dy_hashmap index; /* hash → block, sized for every block: it never grows */
    dy_kv_cache_stats stats;
    dy_kv_event_log log;
    /* blocks published since the last dy_kv_cache_take_published (NULL when not tracked) */
    dy_kv_published *published;
    int n_published;
};

void dy_kv_cache_hash_blocks(const dy_kv_cache *c, const int32_t *tokens, int n_blocks,
                             uint64_t *hashes)
{
    const int bs = c->pool->block_size;
    dy_block_hashes(c->fingerprint, tokens, n_blocks * bs, bs, hashes);
}

dy_kv_cache *dy_kv_cache_new(dy_kv_pool *pool, uint64_t fingerprint)
{
    dy_kv_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    const int n = pool->n_blocks;
    c->pool = pool;
    c->fingerprint = fingerprint;
    c->hash = calloc((size_t)n, sizeof *c->hash);
    c->parent = calloc((size_t)n, sizeof *c->parent);
    c->indexed = calloc((size_t)n, sizeof *c->indexed);
    bool lru_ok = dy_lru_init(&c->evictable, n);
    bool index_ok = dy_hashmap_init(&c->index, (size_t)n);
    if (!c->hash || !c->parent || !c->indexed || !lru_ok || !index_ok) {
        dy_kv_cache_free(c);
        return NULL;
    }
    return c;
}

void dy_kv_cache_free(dy_kv_cache *c)
{
    if (!c)
        return;
    free(c->hash);
    free(c->parent);
    dy_kv_event_log_free(&c->log);
    free(c->published);
    free(c->indexed);
    dy_lru_free(&c->evictable);
    dy_hashmap_free(&c->index);
    free(c);
}

dy_kv_pool *dy_kv_cache_pool(const dy_kv_cache *c)
{
    return c->pool;
}

uint64_t dy_kv_cache_fingerprint(const dy_kv_cache *c)
{
    return c->fingerprint;
}

/* ---------------------------------------------------------------- the index */

/* The block indexed under hash, or -1. */
static int32_t index_find(const dy_kv_cache *c, uint64_t hash)
{
    uint64_t b = dy_hashmap_get(&c->index, hash);
    return b == DY_HASHMAP_NONE ? -1 : (int32_t)b;
}

/* Cannot fail: the map was sized for every block at creation. */
static void index_insert(dy_kv_cache *c, int32_t block)
{
    dy_hashmap_put(&c->index, c->hash[block], (uint64_t)block);
    c->indexed[block] = true;
    c->n_indexed++;
}

static void index_remove(dy_kv_cache *c, int32_t block)
{
    if (index_find(c, c->hash[block]) == block)
        dy_hashmap_remove(&c->index, c->hash[block]);
    c->indexed[block] = false;
    c->n_indexed--;
}

/* ---------------------------------------------------------------- the event log */

static void log_event(dy_kv_cache *c, dy_kv_event_kind kind, int32_t block)
{
    dy_kv_event e = {(uint8_t)kind, DY_KV_TIER_DEVICE, 0, 0};
    if (kind != DY_KV_EV_CLEARED) {
        e.hash = c->hash[block];
        e.parent = c->parent[block];
    }
    dy_kv_event_log_push(&c->log, e);
}

/* ---------------------------------------------------------------- the API */

/* A reference to an indexed block, evictable or in use. */
static void take_ref(dy_kv_cache *c, int32_t b)
{
    if (c->pool->refcount[b] == 0) {
        dy_lru_unlink(&c->evictable, b); /* evictable → in use again */
        c->pool->refcount[b] = 1;
    } else
        dy_kv_ref(c->pool, b);
}

int dy_kv_cache_lookup(dy_kv_cache *c, const uint64_t *hashes, int n, int32_t *blocks)
{
    c->stats.lookups++;
    c->stats.lookup_blocks += (uint64_t)n;
    int found = 0;
    for (; found < n; found++) {
        int32_t b = index_find(c, hashes[found]);
        if (b < 0)
            break;
        take_ref(c, b);
        blocks[found] = b;
    }
    c->stats.hit_blocks += (uint64_t)found;
    return found;
}

int dy_kv_cache_peek(const dy_kv_cache *c, const uint64_t *hashes, int n)
{
    int found = 0;
    while (found < n && index_find(c, hashes[found]) >= 0)
        found++;
    return found;
}

int32_t dy_kv_cache_alloc(dy_kv_cache *c)
{
    int32_t b = dy_kv_alloc(c->pool);
    if (b >= 0)
        return b;
    b = dy_lru_oldest(&c->evictable);
    if (b < 0)
        return -1;
    dy_lru_unlink(&c->evictable, b);
    log_event(c, DY_KV_EV_REMOVED, b);
    index_remove(c, b);
    c->stats.evictions++;
    c->pool->refcount[b] = 1;
    return b;
}

void dy_kv_cache_publish_chained(dy_kv_cache *c, int32_t block, uint64_t hash, uint64_t parent)
{
    if (c->indexed[block] || index_find(c, hash) >= 0)
        return;
    c->hash[block] = hash;
    c->parent[block] = parent;
    index_insert(c, block);
    log_event(c, DY_KV_EV_STORED, block);
    if (c->published && c->n_published < c->pool->n_blocks)
        c->published[c->n_published++] = (dy_kv_published){block, hash};
}

void dy_kv_cache_publish(dy_kv_cache *c, int32_t block, uint64_t hash)
{
    dy_kv_cache_publish_chained(c, block, hash, 0);
}

static void release(dy_kv_cache *c, int32_t block, bool as_oldest)
{
    if (c->pool->refcount[block] > 1) {
        dy_kv_unref(c->pool, block);
        return;
    }
    if (c->indexed[block]) {
        c->pool->refcount[block] = 0;
        if (as_oldest)
            dy_lru_push_oldest(&c->evictable, block);
        else
            dy_lru_push_newest(&c->evictable, block);
    } else
        dy_kv_unref(c->pool, block);
}

void dy_kv_cache_release(dy_kv_cache *c, int32_t block)
{
    release(c, block, false);
}

void dy_kv_cache_pin(dy_kv_cache *c, int32_t block)
{
    take_ref(c, block);
}

void dy_kv_cache_unpin_oldest(dy_kv_cache *c, int32_t block)
{
    release(c, block, true);
}

int dy_kv_cache_oldest_evictable(const dy_kv_cache *c, int32_t *out, int cap)
{
    int n = 0;
    for (int32_t b = dy_lru_oldest(&c->evictable); b >= 0 && n < cap;
         b = dy_lru_after(&c->evictable, b))
        out[n++] = b;
    return n;
}

int32_t dy_kv_cache_find(const dy_kv_cache *c, uint64_t hash)
{
    return index_find(c, hash);
}

bool dy_kv_cache_block_hash(const dy_kv_cache *c, int32_t block, uint64_t *hash,
                            uint64_t *parent)
{
    if (block < 0 || block >= c->pool->n_blocks || !c->indexed[block])
        return false;
    *hash = c->hash[block];
    *parent = c->parent[block];
    return true;
}

int dy_kv_cache_available(const dy_kv_cache *c)
{
    return c->pool->n_free + c->evictable.n;
}

int dy_kv_cache_indexed(const dy_kv_cache *c)
{
    return c->n_indexed;
}

void dy_kv_cache_clear(dy_kv_cache *c)
{
    for (int32_t b; (b = dy_lru_oldest(&c->evictable)) >= 0;) {
        dy_lru_unlink(&c->evictable, b);
        log_event(c, DY_KV_EV_REMOVED, b);
        index_remove(c, b);
        c->pool->refcount[b] = 1;
        dy_kv_unref(c->pool, b);
    }
    if (dy_kv_event_log_on(&c->log) && c->n_indexed == 0) {
        /* one CLEARED says it all, and heals an overflow */
        dy_kv_event_log_reset(&c->log);
        log_event(c, DY_KV_EV_CLEARED, -1);
    }
}

dy_kv_cache_stats dy_kv_cache_get_stats(const dy_kv_cache *c)
{
    return c->stats;
}

/* ---------------------------------------------------------------- events */

bool dy_kv_cache_enable_events(dy_kv_cache *c, bool on)
{
    return dy_kv_event_log_enable(&c->log, on ? DY_KV_EVENT_LOG_CAP(c->pool->n_blocks) : 0);
}

int dy_kv_cache_take_events(dy_kv_cache *c, dy_kv_event *out, int cap)
{
    return dy_kv_event_log_take(&c->log, out, cap);
}

bool dy_kv_cache_events_overflowed(const dy_kv_cache *c)
{
    return c->log.overflow;
}

bool dy_kv_cache_track_published(dy_kv_cache *c, bool on)
{
    free(c->published);
    c->published = NULL;
    c->n_published = 0;
    if (on)
        c->published = malloc(sizeof *c->published * (size_t)c->pool->n_blocks);
    return !on || c->published;
}

int dy_kv_cache_take_published(dy_kv_cache *c, dy_kv_published *out, int cap)
{
    int n = 0, k = 0;
    for (; k < c->n_published && n < cap; k++) {
        dy_kv_published p = c->published[k];
        if (c->indexed[p.block] && c->hash[p.block] == p.hash) /* not evicted meanwhile */
            out[n++] = p;
    }
    memmove(c->published, c->published + k, sizeof *c->published * (size_t)(c->n_published - k));
    c->n_published -= k;
    return n;
}

int dy_kv_cache_snapshot(dy_kv_cache *c, uint64_t *hashes, uint64_t *parents, int cap)
{
    if (cap < c->n_indexed)
        return -1;
    int n = 0;
    for (int32_t b = 0; b < c->pool->n_blocks && n < c->n_indexed; b++)
        if (c->indexed[b]) {
            hashes[n] = c->hash[b];
            parents[n] = c->parent[b];
            n++;
        }
    dy_kv_event_log_reset(&c->log);
    return n;
}
