/* kv_cache.h — who holds which KV block, and which blocks can be reused. On top of the
 * block pool it keeps the prefix index: every full, computed block is published under its
 * chained hash h_i = xxh3(h_{i-1} ‖ token ids of block i) (h_{-1} is the model fingerprint),
 * so a later prompt with the same leading tokens finds those blocks instead of recomputing
 * them. A block nobody references stays cached (evictable, least recently released first)
 * until the pool needs it. Pure bookkeeping: no threads, no clocks, no I/O.
 *
 * Optionally it keeps an event log of every change to the index (a block stored under its
 * hash, a block removed, everything cleared), which the worker drains after each step and
 * publishes so the router can mirror the index (src/serve/worker/kv_publish.h). */
#ifndef DYAD_KV_CACHE_H
#define DYAD_KV_CACHE_H

#include <stdbool.h>
#include <stdint.h>
#include "kv/block_hash.h"
#include "kv/kv_pool.h"
#include "kv/kv_event.h"
#include "kv/kv_event_log.h"

typedef struct dy_kv_cache dy_kv_cache;

/* Counters for metrics. */
typedef struct {
    uint64_t lookups;        /* prefix lookups (one per admitted prompt) */
    uint64_t lookup_blocks;  /* full prompt blocks looked up */
    uint64_t hit_blocks;     /* of those, found cached */
    uint64_t evictions;      /* cached blocks reclaimed for new data */
} dy_kv_cache_stats;

/* The cache does not own the pool. */
dy_kv_cache *dy_kv_cache_new(dy_kv_pool *pool, uint64_t fingerprint);
void dy_kv_cache_free(dy_kv_cache *c);
dy_kv_pool *dy_kv_cache_pool(const dy_kv_cache *c);
uint64_t dy_kv_cache_fingerprint(const dy_kv_cache *c);

/* Hashes of the first n_blocks full blocks of tokens (chained from the fingerprint; the
 * hash itself is block_hash.h's). */
void dy_kv_cache_hash_blocks(const dy_kv_cache *c, const int32_t *tokens, int n_blocks,
                             uint64_t *hashes);

/* The longest run of leading blocks already cached: their ids go to blocks[], each gains a
 * reference. Returns how many. */
int dy_kv_cache_lookup(dy_kv_cache *c, const uint64_t *hashes, int n, int32_t *blocks);
/* How many leading blocks a lookup would find now, without taking them (no references, no
 * statistics, the LRU order unchanged). */
int dy_kv_cache_peek(const dy_kv_cache *c, const uint64_t *hashes, int n);
/* A block for new data (reference count 1): a free one, else the least recently released
 * cached one (which leaves the index). -1 when every block is in use. */
int32_t dy_kv_cache_alloc(dy_kv_cache *c);
/* Marks a block as full and computed under `hash`, whose chained parent is `parent` (the
 * previous block's hash, or the fingerprint for a prompt's first block). If another block
 * already holds that hash, this one stays private (it is freed, not cached, when released)
 * and no event is logged. */
void dy_kv_cache_publish_chained(dy_kv_cache *c, int32_t block, uint64_t hash, uint64_t parent);
/* The same with the parent unknown (recorded and published as 0). */
void dy_kv_cache_publish(dy_kv_cache *c, int32_t block, uint64_t hash);
/* Drops one reference; at zero a published block becomes evictable, others become free. */
void dy_kv_cache_release(dy_kv_cache *c, int32_t block);

/* ---- for the lower tiers (kv_tier.h): copying blocks out while nothing may reuse them.
 * A pin is a reference: a pinned block is neither evicted nor freed. */
void dy_kv_cache_pin(dy_kv_cache *c, int32_t block); /* an indexed block, in use or not */
/* Drops a pin; at zero the block becomes evictable as the oldest, the next to go: the
 * write-back cleaner copies the blocks about to be evicted, and copying them must not make
 * them look recently used. */
void dy_kv_cache_unpin_oldest(dy_kv_cache *c, int32_t block);
/* The up to cap evictable blocks that eviction would take first, oldest first. */
int dy_kv_cache_oldest_evictable(const dy_kv_cache *c, int32_t *out, int cap);
/* The block indexed under hash, or -1 (no reference taken, the LRU order unchanged). */
int32_t dy_kv_cache_find(const dy_kv_cache *c, uint64_t hash);
/* The hash and parent an indexed block is published under; false if it is not indexed. */
bool dy_kv_cache_block_hash(const dy_kv_cache *c, int32_t block, uint64_t *hash,
                            uint64_t *parent);
/* Write-through: a record of every block published, for the worker to copy down. */
typedef struct {
    int32_t block;
    uint64_t hash;
} dy_kv_published;
/* Starts (empty) or stops recording. false if out of memory. At most one entry per pool
 * block is kept between takes; more are dropped (those blocks are not copied down). */
bool dy_kv_cache_track_published(dy_kv_cache *c, bool on);
/* Moves up to cap of the oldest records to out, leaving out blocks that were evicted (or
 * reused under another hash) since they were published; returns how many it wrote. */
int dy_kv_cache_take_published(dy_kv_cache *c, dy_kv_published *out, int cap);
/* Blocks that dy_kv_cache_alloc could still hand out (free + evictable). */
int dy_kv_cache_available(const dy_kv_cache *c);
/* Blocks published in the index (cached, whether in use or not). */
int dy_kv_cache_indexed(const dy_kv_cache *c);
/* Drops every unreferenced cached block from the index (they become free). */
void dy_kv_cache_clear(dy_kv_cache *c);
dy_kv_cache_stats dy_kv_cache_get_stats(const dy_kv_cache *c);

/* ---- the event log: every change to the index, in order (tier 0: this worker's pool).
 *   STORED(hash, parent)   a block entered the index (publish)
 *   REMOVED(hash, parent)  a block left it (evicted by alloc, or dropped by clear)
 *   CLEARED                the index is now empty (clear left nothing; earlier events in
 *                          the log are dropped, as CLEARED supersedes them)
 * The log (kv_event_log.h) holds DY_KV_EVENT_LOG_CAP(pool blocks) events. One more and it
 * overflows: it is emptied and records nothing until a snapshot (or a clear that empties
 * the index) makes the receiver's picture whole again. */

/* Turns the log on (empty, not overflowed) or off (dropped). false if out of memory. */
bool dy_kv_cache_enable_events(dy_kv_cache *c, bool on);
/* Moves up to cap of the oldest logged events to out; returns how many. */
int dy_kv_cache_take_events(dy_kv_cache *c, dy_kv_event *out, int cap);
/* Events were lost: the receiver needs a snapshot. */
bool dy_kv_cache_events_overflowed(const dy_kv_cache *c);
/* Every indexed block's hash and parent (in block-id order: a parent may come after its
 * child, or be absent when it was evicted first). Empties the log and clears the overflow:
 * the snapshot already reflects every logged change. Returns the count, or -1 (and changes
 * nothing) if cap < dy_kv_cache_indexed(c). */
int dy_kv_cache_snapshot(dy_kv_cache *c, uint64_t *hashes, uint64_t *parents, int cap);

#endif
