/* kv_publish.h — the worker's side of KV events: once per loop it turns its prefix cache's
 * event log (and its lower tiers', kv_tier.h) into numbered KV_EVENTS frames, or sends a KV_SNAPSHOT instead when one is due:
 * at start, when the log overflowed, when a frame could not be encoded, or when the frontend
 * asked (KV_RESYNC). Pure: it appends frames to a buffer; the worker writes them out.
 * Numbering (wire.h): batches are 1, 2, 3, …; a snapshot carries the number of the last
 * batch before it, so the frontend expects snapshot.seq + 1 next. */
#ifndef DYAD_KV_PUBLISH_H
#define DYAD_KV_PUBLISH_H

#include <stdbool.h>
#include <stdint.h>
#include "kv/kv_cache.h"
#include "kv/kv_tier.h"
#include "serve/wire/wire.h"

#define DY_KV_PUBLISH_MAX_TIERS 2

typedef struct {
    uint32_t worker_id;
    uint64_t seq;               /* the last batch's number; 0 before the first */
    bool want_snapshot;         /* the next flush sends a snapshot */
    int cap;                    /* events per batch, blocks per snapshot part */
    dy_kv_event *scratch;       /* cap entries: one frame's worth */
    uint64_t *hashes, *parents; /* a snapshot of the prefix cache: one per pool block */
    int n_blocks;
    dy_kv_tier *tiers[DY_KV_PUBLISH_MAX_TIERS]; /* lower tiers whose events go out too */
    int n_tiers;
    dy_kv_event *entries;       /* a whole snapshot, every tier */
    int entries_cap;
} dy_kv_publisher;

/* Turns on kv's event log. The first flush sends a snapshot (seq 0), so the frontend's
 * picture of this worker starts whole even if it missed the worker's previous life.
 * false if out of memory. */
bool dy_kv_publish_init(dy_kv_publisher *p, dy_kv_cache *kv, uint32_t worker_id);
void dy_kv_publish_free(dy_kv_publisher *p);
/* A lower tier's events (and blocks, in snapshots) go out with the prefix cache's from now
 * on; its log is turned on and the next flush sends a snapshot. false if out of memory or
 * there are DY_KV_PUBLISH_MAX_TIERS already. */
bool dy_kv_publish_add_tier(dy_kv_publisher *p, dy_kv_tier *tier);
/* Once per loop, after the step and before the stats: appends the logged events as
 * KV_EVENTS frames (nothing when there are none), or a snapshot when one is due. false if a
 * frame could not be encoded (out of memory): the next flush sends a snapshot. */
bool dy_kv_publish_flush(dy_kv_publisher *p, dy_kv_cache *kv, dy_buf *tx);
/* Appends a snapshot of every indexed block now, in as many parts as it needs (the answer
 * to KV_RESYNC). false as above. */
bool dy_kv_publish_snapshot(dy_kv_publisher *p, dy_kv_cache *kv, dy_buf *tx);

#endif
