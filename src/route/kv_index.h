/* kv_index.h — the router's global prefix index: for every KV block hash, which workers hold
 * it. Built only from the workers' published events (kv/kv_event.h) and snapshots, plus,
 * for workers that publish nothing, the router's own predictions of what it sent there.
 *
 * Because block hashes are chained (h_i covers every token up to block i), the index is a
 * flat map hash → set of workers; no tree is needed. Each set is a bitset, so the leading
 * overlap of a request for ALL workers is one walk over the request's hashes that keeps the
 * set of workers holding every block so far: O(request blocks × max_workers/64), not
 * O(workers × blocks).
 *
 * Event-reported holdings (per tier) and predicted ones are kept apart: events never touch
 * predictions and predictions never touch event-reported bits. An overlap query counts a
 * block as held when it is held in any tier or predicted; the tiered query also says, of a
 * worker's leading run, how many blocks sit in each tier, in the same one walk (lower-tier
 * blocks are counted in bit-sliced counters, 64 workers per word operation).
 *
 * Pure bookkeeping: no clocks (time is passed in), no I/O, no threads. */
#ifndef DYAD_KV_INDEX_H
#define DYAD_KV_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kv/kv_event.h"

typedef struct dy_kv_index dy_kv_index;

#define DY_KV_INDEX_MAX_WORKERS 1024

/* dy_kv_index_apply results. */
#define DY_KV_INDEX_OK 0
#define DY_KV_INDEX_RESYNC 1 /* sequence gap (or the worker awaits one): send a snapshot */
#define DY_KV_INDEX_EINVAL (-1) /* bad argument (NULL, worker out of range, bad event) */
#define DY_KV_INDEX_ENOMEM (-2) /* out of memory */

/* Bit 3 of dy_kv_index_holds: the block is predicted there (bits 0..2 are the tiers). */
#define DY_KV_INDEX_PREDICTED (1u << 3)

/* Workers are 0..max_workers-1 (1..DY_KV_INDEX_MAX_WORKERS). Memory per indexed block is
 * 32 bytes per 64 workers of max_workers plus up to 32 bytes of table, and a query reads
 * max_workers/64 words per block, so pass the deployment's size. NULL when out of memory or
 * max_workers is out of range. Not thread-safe: one owner (the router) calls it. */
dy_kv_index *dy_kv_index_new(int max_workers);
void dy_kv_index_free(dy_kv_index *x);

/* Applies one batch of a worker's events. A worker's batches are numbered 1, 2, 3, ...; the
 * first batch after a snapshot taken at seq s is s + 1. An unknown worker joins implicitly
 * with a batch numbered 1 (a fresh worker whose cache starts empty); anything else from an
 * unknown worker, or any seq != last + 1 from a known one (a lost batch, a duplicate, or a
 * restarted worker counting from 1 again), applies nothing and returns DY_KV_INDEX_RESYNC,
 * and so does every batch until dy_kv_index_resync. A batch with a bad event (unknown kind
 * or tier) applies nothing, returns DY_KV_INDEX_EINVAL and also leaves the worker awaiting
 * a resync, since its picture is no longer whole. CLEARED drops the worker's event-reported
 * blocks in every tier (not its predictions). Out of memory part-way: DY_KV_INDEX_ENOMEM, and
 * the worker awaits a resync. */
int dy_kv_index_apply(dy_kv_index *x, int worker, uint64_t seq, const dy_kv_event *ev, int n);

/* Replaces the worker's event-reported blocks with a snapshot taken at `seq`: block i is
 * hashes[i] in tier tiers[i] (DY_KV_TIER_*; tiers NULL: all in the device tier; a block held
 * in two tiers comes twice); parents may be NULL: chained hashes do not need them. The worker
 * joins if it was unknown. Returns 0, DY_KV_INDEX_EINVAL (a bad argument or tier: nothing
 * changed) or DY_KV_INDEX_ENOMEM (the worker still awaits a resync). */
int dy_kv_index_resync(dy_kv_index *x, int worker, uint64_t seq, const uint64_t *hashes,
                       const uint64_t *parents, const uint8_t *tiers, int n);

/* The worker is gone (dead, or restarted before its resync): every block it held, reported
 * or predicted, leaves the index, and it is unknown until it joins again. Costs one pass
 * over the index; rare by nature. Returns 0 or DY_KV_INDEX_EINVAL. */
int dy_kv_index_remove_worker(dy_kv_index *x, int worker);

/* overlap[w] = how many leading blocks of hashes[0..n) worker w holds (any tier, or
 * predicted), for every w < max_workers; unknown workers get 0. Apply dy_kv_index_expire
 * first so expired predictions do not count. */
void dy_kv_index_overlap(const dy_kv_index *x, const uint64_t *hashes, int n, int *overlap);
/* The same for one worker: O(its overlap). -1 on bad arguments. */
int dy_kv_index_overlap_one(const dy_kv_index *x, int worker, const uint64_t *hashes, int n);

/* A worker's leading run split by tier. A block counts in the fastest tier that holds it
 * (device < host < disk); a predicted block counts as device, as the router predicts what it
 * sent, which the worker computed into its primary pool. The run ends at the first block the
 * worker holds in no tier: a worker brings a chain up from a lower tier only behind the
 * prefix it already has. */
typedef struct {
    int blocks;               /* the leading run: what dy_kv_index_overlap gives */
    int tier[DY_KV_N_TIERS];  /* of those, how many in each tier; they sum to blocks */
} dy_kv_overlap;

/* out[w] for every w < max_workers (unknown workers: all 0), in the one walk of
 * dy_kv_index_overlap. Needs the same dy_kv_index_expire first. */
void dy_kv_index_overlap_tiers(const dy_kv_index *x, const uint64_t *hashes, int n,
                               dy_kv_overlap *out);
/* The same for one worker into *out (which may be NULL); returns out->blocks, or -1 (and
 * *out untouched) on bad arguments. O(its overlap). */
int dy_kv_index_overlap_tiers_one(const dy_kv_index *x, int worker, const uint64_t *hashes,
                                  int n, dy_kv_overlap *out);

/* "device", "host", "disk" for DY_KV_TIER_*; "?" for anything else. */
const char *dy_kv_index_tier_name(int tier);

/* Approximate mode, for workers that publish no events: records that the router sent
 * hashes[0..n) to `worker`, valid until expires_at (seconds, the caller's clock). Predicting
 * a block again extends its life. Returns 0, DY_KV_INDEX_EINVAL or DY_KV_INDEX_ENOMEM. */
int dy_kv_index_predict(dy_kv_index *x, int worker, const uint64_t *hashes, int n,
                        double expires_at);
/* Drops every prediction with expires_at <= now. Cost: O(expired · log predictions). */
void dy_kv_index_expire(dy_kv_index *x, double now);

/* ---- state and sizes, for the caller and for metrics */
typedef enum {
    DY_KV_WORKER_UNKNOWN = 0, /* never seen, or removed */
    DY_KV_WORKER_LIVE = 1,    /* its events are being applied */
    DY_KV_WORKER_RESYNC = 2,  /* awaiting a snapshot; its batches are ignored */
} dy_kv_worker_state;

dy_kv_worker_state dy_kv_index_worker_state(const dy_kv_index *x, int worker);
/* The last applied batch's (or snapshot's) sequence number; 0 if none. */
uint64_t dy_kv_index_worker_seq(const dy_kv_index *x, int worker);
/* Distinct hashes indexed (held by someone, reported or predicted). */
size_t dy_kv_index_size(const dy_kv_index *x);
/* Blocks the worker holds by its events (in any tier), and blocks predicted there. */
int64_t dy_kv_index_worker_blocks(const dy_kv_index *x, int worker);
int64_t dy_kv_index_worker_predicted(const dy_kv_index *x, int worker);
/* Tier bits (1 << tier) the worker holds `hash` in, | DY_KV_INDEX_PREDICTED; 0 if none. */
unsigned dy_kv_index_holds(const dy_kv_index *x, int worker, uint64_t hash);
/* Writes up to cap hashes the worker holds by its events (in table order) to out; returns
 * how many it holds in all (so a caller can size out), or -1 on bad arguments. O(index). */
int64_t dy_kv_index_worker_hashes(const dy_kv_index *x, int worker, uint64_t *out, int64_t cap);

#endif
