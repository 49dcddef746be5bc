/* kv_tier.h — one lower tier of a worker's KV cache (host memory, or a file on disk): a fixed
 * number of slots, each able to hold a copy of one primary-pool block, found by the block's
 * chained hash (kv_cache.h). Pure bookkeeping: which slot holds which hash, in what state,
 * in what least-recently-used order, how often it was asked for, and the checksum of what
 * was written; the bytes themselves are the caller's (slot i is bytes [i × block bytes,
 * (i + 1) × block bytes) of its memory or file), and so is the copying, on a thread of its
 * own.
 *
 * A slot is FREE, FILLING (reserved for a copy in flight: not findable yet) or READY. Slots
 * being read or written are pinned and never evicted; eviction takes the least recently used
 * unpinned READY slot. Like the prefix cache, a tier keeps an event log (tier-tagged STORED
 * and REMOVED) for the router's index, and a snapshot of what it holds. */
#ifndef DYAD_KV_TIER_H
#define DYAD_KV_TIER_H

#include <stdbool.h>
#include <stdint.h>
#include "kv/kv_event.h"

typedef struct dy_kv_tier dy_kv_tier;

typedef struct {
    uint64_t stored;     /* copies that became READY */
    uint64_t evicted;    /* READY slots reclaimed for other blocks */
    uint64_t lookups;    /* dy_kv_tier_touch calls that found the hash */
    uint64_t bad;        /* slots dropped because what came back failed its checksum */
    uint64_t full;       /* reservations refused: every slot filling or pinned */
} dy_kv_tier_stats;

/* n_slots ≥ 1; tier is DY_KV_TIER_HOST or DY_KV_TIER_DISK (it tags the events). NULL if out of
 * memory or the arguments are out of range. */
dy_kv_tier *dy_kv_tier_new(int n_slots, int tier);
void dy_kv_tier_free(dy_kv_tier *t);
int dy_kv_tier_slots(const dy_kv_tier *t);
int dy_kv_tier_id(const dy_kv_tier *t);
/* Slots READY or FILLING. */
int dy_kv_tier_used(const dy_kv_tier *t);

/* The READY slot holding hash, or -1. */
int32_t dy_kv_tier_find(const dy_kv_tier *t, uint64_t hash);
/* True if hash is READY or being written (no second copy should be started). */
bool dy_kv_tier_has(const dy_kv_tier *t, uint64_t hash);
/* A prompt asked for hash: if READY, its use count grows and it becomes the most recently
 * used. Returns the slot or -1. */
int32_t dy_kv_tier_touch(dy_kv_tier *t, uint64_t hash);

/* A slot for a copy of block `hash` (child of `parent`), FILLING and pinned: a free slot, else
 * the least recently used READY unpinned one (which leaves the tier: a REMOVED event). `uses`
 * is carried over from the tier above (how often the block was asked for there). -1 when the
 * hash is already here or every slot is filling or pinned. */
int32_t dy_kv_tier_reserve(dy_kv_tier *t, uint64_t hash, uint64_t parent, uint32_t uses);
/* The copy into a FILLING slot ended: ok → READY (a STORED event) with the checksum of the
 * bytes written; !ok → FREE. Unpins it. */
void dy_kv_tier_filled(dy_kv_tier *t, int32_t slot, bool ok, uint64_t checksum);

/* Readers (a copy out of the slot in flight) pin a READY slot; unpinning a slot that was
 * dropped meanwhile frees it. */
void dy_kv_tier_pin(dy_kv_tier *t, int32_t slot);
void dy_kv_tier_unpin(dy_kv_tier *t, int32_t slot);
/* What came back from the slot failed its checksum, or could not be read: it leaves the tier
 * (REMOVED) and is never found again; freed when its last pin goes. */
void dy_kv_tier_drop_bad(dy_kv_tier *t, int32_t slot);
/* The tier is switched off (a disk error): every slot leaves (REMOVED events); pinned ones
 * are freed when their pins go. */
void dy_kv_tier_clear(dy_kv_tier *t);

/* A READY slot's hash, parent, checksum and use count. */
uint64_t dy_kv_tier_hash(const dy_kv_tier *t, int32_t slot);
uint64_t dy_kv_tier_parent(const dy_kv_tier *t, int32_t slot);
uint64_t dy_kv_tier_checksum(const dy_kv_tier *t, int32_t slot);
uint32_t dy_kv_tier_uses(const dy_kv_tier *t, int32_t slot);
/* The up to cap unpinned READY slots eviction would take first, oldest first (for copying
 * them a tier down before they go). */
int dy_kv_tier_oldest(const dy_kv_tier *t, int32_t *out, int cap);
dy_kv_tier_stats dy_kv_tier_get_stats(const dy_kv_tier *t);

/* ---- events, as kv_cache.h's: a bounded log of DY_KV_EVENT_LOG_CAP(n_slots) events. */
bool dy_kv_tier_enable_events(dy_kv_tier *t, bool on);
int dy_kv_tier_take_events(dy_kv_tier *t, dy_kv_event *out, int cap);
bool dy_kv_tier_events_overflowed(const dy_kv_tier *t);
/* Every READY slot as a STORED event of this tier (slot order); empties the log and clears
 * its overflow. Returns the count, or -1 (nothing changed) if cap is too small. */
int dy_kv_tier_snapshot(dy_kv_tier *t, dy_kv_event *out, int cap);

#endif
