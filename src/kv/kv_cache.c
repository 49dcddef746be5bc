/* kv_cache.c — see kv_cache.h. The index is a hash map from block hash to block; evictable
 * blocks form a doubly linked LRU list threaded through per-block arrays; the event log is a
 * fixed ring. */
#include "kv/kv_cache.h"
#include "util/hashmap.h"

#include <stdlib.h>
#include <string.h>


struct dy_kv_cache {
    dy_kv_pool *pool;
    uint64_t fingerprint;
    /* per block */
    uint64_t *hash, *parent;
    bool *indexed;
    int32_t *lru_prev, *lru_next;
    /* the evictable list: head is the oldest */
    int32_t lru_head, lru_tail;
    int n_evictable, n_indexed;
    dy_hashmap index; /* hash → block, sized for every block: it never grows */
    dy_kv_cache_stats stats;
    /* the event log (NULL when off): a ring of log_cap events from log_head */
    dy_kv_event *log;
    int log_cap, log_head, log_len;
    bool log_overflow;
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
    c->lru_prev = malloc(sizeof(int32_t) * (size_t)n);
    c->lru_next = malloc(sizeof(int32_t) * (size_t)n);
    bool index_ok = dy_hashmap_init(&c->index, (size_t)n);
    if (!c->hash || !c->parent || !c->indexed || !c->lru_prev || !c->lru_next || !index_ok) {
        dy_kv_cache_free(c);
        return NULL;
    }
    c->lru_head = c->lru_tail = -1;
    return c;
}

void dy_kv_cache_free(dy_kv_cache *c)
{
    if (!c)
        return;
    free(c->hash);
    free(c->parent);
    free(c->log);
    free(c->indexed);
    free(c->lru_prev);
    free(c->lru_next);
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
    if (!c->log || c->log_overflow)
        return;
    if (c->log_len == c->log_cap) { /* the receiver will need a snapshot anyway */
        c->log_overflow = true;
        c->log_head = c->log_len = 0;
        return;
    }
    dy_kv_event e = {(uint8_t)kind, DY_KV_TIER_DEVICE, 0, 0};
    if (kind != DY_KV_EV_CLEARED) {
        e.hash = c->hash[block];
        e.parent = c->parent[block];
    }
    c->log[(c->log_head + c->log_len) % c->log_cap] = e;
    c->log_len++;
}

/* ---------------------------------------------------------------- the LRU list */

static void lru_push(dy_kv_cache *c, int32_t b)
{
    c->lru_prev[b] = c->lru_tail;
    c->lru_next[b] = -1;
    if (c->lru_tail >= 0)
        c->lru_next[c->lru_tail] = b;
    else
        c->lru_head = b;
    c->lru_tail = b;
    c->n_evictable++;
}

static void lru_unlink(dy_kv_cache *c, int32_t b)
{
    if (c->lru_prev[b] >= 0)
        c->lru_next[c->lru_prev[b]] = c->lru_next[b];
    else
        c->lru_head = c->lru_next[b];
    if (c->lru_next[b] >= 0)
        c->lru_prev[c->lru_next[b]] = c->lru_prev[b];
    else
        c->lru_tail = c->lru_prev[b];
    c->n_evictable--;
}

/* ---------------------------------------------------------------- the API */

int dy_kv_cache_lookup(dy_kv_cache *c, const uint64_t *hashes, int n, int32_t *blocks)
{
    c->stats.lookups++;
    c->stats.lookup_blocks += (uint64_t)n;
    int found = 0;
    for (; found < n; found++) {
        int32_t b = index_find(c, hashes[found]);
        if (b < 0)
            break;
        if (c->pool->refcount[b] == 0) {
            lru_unlink(c, b); /* evictable → in use again */
            c->pool->refcount[b] = 1;
        } else
            dy_kv_ref(c->pool, b);
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
    if (c->lru_head < 0)
        return -1;
    b = c->lru_head;
    lru_unlink(c, b);
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
}

void dy_kv_cache_publish(dy_kv_cache *c, int32_t block, uint64_t hash)
{
    dy_kv_cache_publish_chained(c, block, hash, 0);
}

void dy_kv_cache_release(dy_kv_cache *c, int32_t block)
{
    if (c->pool->refcount[block] > 1) {
        dy_kv_unref(c->pool, block);
        return;
    }
    if (c->indexed[block]) {
        c->pool->refcount[block] = 0;
        lru_push(c, block);
    } else
        dy_kv_unref(c->pool, block);
}

int dy_kv_cache_available(const dy_kv_cache *c)
{
    return c->pool->n_free + c->n_evictable;
}

int dy_kv_cache_indexed(const dy_kv_cache *c)
{
    return c->n_indexed;
}

void dy_kv_cache_clear(dy_kv_cache *c)
{
    while (c->lru_head >= 0) {
        int32_t b = c->lru_head;
        lru_unlink(c, b);
        log_event(c, DY_KV_EV_REMOVED, b);
        index_remove(c, b);
        c->pool->refcount[b] = 1;
        dy_kv_unref(c->pool, b);
    }
    if (c->log && c->n_indexed == 0) { /* one CLEARED says it all, and heals an overflow */
        c->log_head = c->log_len = 0;
        c->log_overflow = false;
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
    free(c->log);
    c->log = NULL;
    c->log_head = c->log_len = 0;
    c->log_overflow = false;
    if (!on)
        return true;
    c->log_cap = DY_KV_EVENT_LOG_CAP(c->pool->n_blocks);
    c->log = malloc(sizeof *c->log * (size_t)c->log_cap);
    return c->log != NULL;
}

int dy_kv_cache_take_events(dy_kv_cache *c, dy_kv_event *out, int cap)
{
    int n = 0;
    for (; n < cap && c->log_len > 0; n++) {
        out[n] = c->log[c->log_head];
        c->log_head = (c->log_head + 1) % c->log_cap;
        c->log_len--;
    }
    return n;
}

bool dy_kv_cache_events_overflowed(const dy_kv_cache *c)
{
    return c->log_overflow;
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
    c->log_head = c->log_len = 0;
    c->log_overflow = false;
    return n;
}
