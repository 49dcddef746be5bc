/* kv_index.c — the router's global prefix index (see kv_index.h).
 *
 * Layout. A hash map (util/hashmap.h) maps a block hash to an entry id. An entry is PLANES
 * bitsets of nwords words each: one per tier (event-reported) and one for predictions.
 * Entries live in one array and keep their id while the map grows, so growing moves
 * (hash, id) pairs, not bitsets. An entry whose bits are all clear is freed at once, so
 * every indexed hash is held by someone.
 *
 * Predictions carry a deadline per (hash, worker). They live in one array; a second map finds
 * one by (entry id, worker), exact in 64 bits, and valid because a prediction keeps its
 * hash's entry alive (it holds the entry's prediction bit). A min-heap of timers pops them
 * in deadline order. Extending a deadline only updates the prediction; when the old timer
 * pops it is re-armed, so each live prediction has exactly one valid timer and the heap
 * never grows with repeats. */
#include "route/kv_index.h"
#include "util/buf.h"
#include "util/hashmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PLANES (DY_KV_N_TIERS + 1)
#define PLANE_PRED DY_KV_N_TIERS
#define MAX_WORDS (DY_KV_INDEX_MAX_WORKERS / 64)

typedef struct {
    uint64_t hash;
    double expires; /* the prediction's deadline */
    double armed;   /* the deadline its one valid timer carries */
    int32_t worker;
    uint32_t entry; /* the hash's entry id */
} pred;

typedef struct {
    double t;
    uint64_t hash;
    int32_t worker;
} timer;

typedef struct {
    uint8_t state; /* dy_kv_worker_state */
    uint64_t seq;
    int64_t blocks, predicted;
} wstate;

struct dy_kv_index {
    int max_workers, nwords;
    dy_hashmap table;        /* hash → entry id */
    uint64_t *bits;          /* ecap entries × PLANES × nwords */
    uint32_t ecap, next_id;  /* entries allocated; ids below next_id have been handed out */
    uint32_t *free_ids;
    uint32_t n_free;
    wstate *w;
    pred *preds;
    size_t n_preds, preds_cap;
    dy_hashmap pred_at;      /* pred_key(entry, worker) → index in preds */
    timer *heap;
    size_t hlen, hcap;
};

/* ---------------------------------------------------------------- helpers */

static uint64_t *plane(const dy_kv_index *x, uint32_t e, int p)
{
    return x->bits + ((size_t)e * PLANES + (size_t)p) * (size_t)x->nwords;
}

static bool valid_worker(const dy_kv_index *x, int worker)
{
    return x && worker >= 0 && worker < x->max_workers;
}

/* ---------------------------------------------------------------- the hash → entry table */

/* The entry id of key, or -1 if it is not indexed. */
static long find_entry(const dy_kv_index *x, uint64_t key)
{
    uint64_t e = dy_hashmap_get(&x->table, key);
    return e == DY_HASHMAP_NONE ? -1 : (long)e;
}

/* A fresh entry id with every bit clear (freed entries are clear by construction). */
static long new_entry(dy_kv_index *x)
{
    if (x->n_free)
        return x->free_ids[--x->n_free];
    if (x->next_id == x->ecap) {
        if (x->ecap >= UINT32_MAX / 2)
            return -1;
        uint32_t ecap = x->ecap * 2;
        size_t per = (size_t)PLANES * (size_t)x->nwords;
        uint64_t *bits = realloc(x->bits, (size_t)ecap * per * sizeof *bits);
        if (!bits)
            return -1;
        memset(bits + (size_t)x->ecap * per, 0, (size_t)(ecap - x->ecap) * per * sizeof *bits);
        x->bits = bits;
        uint32_t *ids = realloc(x->free_ids, (size_t)ecap * sizeof *ids);
        if (!ids)
            return -1;
        x->free_ids = ids;
        x->ecap = ecap;
    }
    return x->next_id++;
}

/* The entry for key, created (all clear) if absent; -1 when out of memory. */
static long get_entry(dy_kv_index *x, uint64_t key)
{
    long e = find_entry(x, key);
    if (e >= 0)
        return e;
    if (!dy_hashmap_reserve(&x->table, dy_hashmap_len(&x->table) + 1))
        return -1;
    e = new_entry(x);
    if (e < 0)
        return -1;
    dy_hashmap_put(&x->table, key, (uint64_t)e); /* cannot fail: the room is reserved */
    return e;
}

static bool entry_empty(const dy_kv_index *x, uint32_t e)
{
    const uint64_t *b = plane(x, e, 0);
    for (int k = 0; k < PLANES * x->nwords; k++)
        if (b[k])
            return false;
    return true;
}

/* Hands a cleared entry's id back for reuse. */
static void free_entry(dy_kv_index *x, uint32_t e)
{
    x->free_ids[x->n_free++] = e;
}

/* Drops key from the table; its entry (all clear) is freed. */
static void erase_entry(dy_kv_index *x, uint64_t key)
{
    uint64_t e = dy_hashmap_remove(&x->table, key);
    if (e != DY_HASHMAP_NONE)
        free_entry(x, (uint32_t)e);
}

/* Which tiers (bits 0..2) and whether predicted (bit 3) worker holds entry e in. */
static unsigned entry_mask(const dy_kv_index *x, uint32_t e, int worker)
{
    unsigned m = 0;
    for (int p = 0; p < PLANES; p++)
        if (plane(x, e, p)[worker >> 6] >> (worker & 63) & 1)
            m |= 1u << p;
    return m;
}

static void set_bit(dy_kv_index *x, uint32_t e, int p, int worker, bool on)
{
    uint64_t *w = &plane(x, e, p)[worker >> 6], b = 1ull << (worker & 63);
    *w = on ? *w | b : *w & ~b;
}

typedef struct {
    dy_kv_index *x;
    int worker, p0, p1;
} clearing;

/* Clears one entry's bits of the worker; true (drop the hash) if the entry is empty now. */
static bool clear_entry(void *user, uint64_t key, uint64_t e)
{
    (void)key;
    clearing *c = user;
    for (int p = c->p0; p < c->p1; p++)
        set_bit(c->x, (uint32_t)e, p, c->worker, false);
    if (!entry_empty(c->x, (uint32_t)e))
        return false;
    free_entry(c->x, (uint32_t)e);
    return true;
}

/* Clears the worker's bits in planes [p0, p1) of every entry, freeing emptied ones. */
static void clear_worker(dy_kv_index *x, int worker, int p0, int p1)
{
    clearing c = {x, worker, p0, p1};
    dy_hashmap_filter(&x->table, clear_entry, &c);
}

/* ---------------------------------------------------------------- life cycle */

dy_kv_index *dy_kv_index_new(int max_workers)
{
    if (max_workers < 1 || max_workers > DY_KV_INDEX_MAX_WORKERS)
        return NULL;
    dy_kv_index *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->max_workers = max_workers;
    x->nwords = (max_workers + 63) / 64;
    x->ecap = 512;
    x->hcap = 512;
    bool table_ok = dy_hashmap_init(&x->table, 512);
    x->bits = calloc((size_t)x->ecap * PLANES * (size_t)x->nwords, sizeof *x->bits);
    x->free_ids = malloc(x->ecap * sizeof *x->free_ids);
    x->w = calloc((size_t)max_workers, sizeof *x->w);
    bool preds_ok = dy_hashmap_init(&x->pred_at, 512) &&
                    dy_array_reserve((void **)&x->preds, &x->preds_cap, 512, sizeof *x->preds);
    x->heap = malloc(x->hcap * sizeof *x->heap);
    if (!table_ok || !x->bits || !x->free_ids || !x->w || !preds_ok || !x->heap) {
        dy_kv_index_free(x);
        return NULL;
    }
    return x;
}

void dy_kv_index_free(dy_kv_index *x)
{
    if (!x)
        return;
    dy_hashmap_free(&x->table);
    free(x->bits);
    free(x->free_ids);
    free(x->w);
    free(x->preds);
    dy_hashmap_free(&x->pred_at);
    free(x->heap);
    free(x);
}

/* ---------------------------------------------------------------- events */

static int store(dy_kv_index *x, int worker, uint64_t hash, int tier)
{
    long e = get_entry(x, hash);
    if (e < 0)
        return DY_KV_INDEX_ENOMEM;
    if (!(entry_mask(x, (uint32_t)e, worker) & 7u))
        x->w[worker].blocks++;
    set_bit(x, (uint32_t)e, tier, worker, true);
    return DY_KV_INDEX_OK;
}

static void unstore(dy_kv_index *x, int worker, uint64_t hash, int tier)
{
    long found = find_entry(x, hash);
    if (found < 0)
        return; /* not known here: nothing to undo */
    uint32_t e = (uint32_t)found;
    unsigned before = entry_mask(x, e, worker) & 7u;
    set_bit(x, e, tier, worker, false);
    if (before && !(entry_mask(x, e, worker) & 7u))
        x->w[worker].blocks--;
    if (entry_empty(x, e))
        erase_entry(x, hash);
}

static void clear_reported(dy_kv_index *x, int worker)
{
    if (x->w[worker].blocks)
        clear_worker(x, worker, 0, DY_KV_N_TIERS);
    x->w[worker].blocks = 0;
}

static bool valid_event(const dy_kv_event *e)
{
    if (e->kind == DY_KV_EV_CLEARED)
        return true;
    return (e->kind == DY_KV_EV_STORED || e->kind == DY_KV_EV_REMOVED) && e->tier < DY_KV_N_TIERS;
}

int dy_kv_index_apply(dy_kv_index *x, int worker, uint64_t seq, const dy_kv_event *ev, int n)
{
    if (!valid_worker(x, worker) || n < 0 || (n > 0 && !ev))
        return DY_KV_INDEX_EINVAL;
    wstate *w = &x->w[worker];
    if (w->state == DY_KV_WORKER_RESYNC)
        return DY_KV_INDEX_RESYNC;
    bool fresh = w->state == DY_KV_WORKER_UNKNOWN;
    if (fresh ? seq != 1 : seq != w->seq + 1) {
        w->state = DY_KV_WORKER_RESYNC;
        return DY_KV_INDEX_RESYNC;
    }
    for (int i = 0; i < n; i++) {
        if (!valid_event(&ev[i])) {
            w->state = DY_KV_WORKER_RESYNC;
            return DY_KV_INDEX_EINVAL;
        }
    }
    w->state = DY_KV_WORKER_LIVE;
    for (int i = 0; i < n; i++) {
        const dy_kv_event *e = &ev[i];
        if (e->kind == DY_KV_EV_STORED) {
            if (store(x, worker, e->hash, e->tier) != DY_KV_INDEX_OK) {
                w->state = DY_KV_WORKER_RESYNC;
                return DY_KV_INDEX_ENOMEM;
            }
        } else if (e->kind == DY_KV_EV_REMOVED) {
            unstore(x, worker, e->hash, e->tier);
        } else {
            clear_reported(x, worker);
        }
    }
    w->seq = seq;
    return DY_KV_INDEX_OK;
}

static bool valid_tiers(const uint8_t *tiers, int n)
{
    for (int i = 0; tiers && i < n; i++)
        if (tiers[i] >= DY_KV_N_TIERS)
            return false;
    return true;
}

int dy_kv_index_resync(dy_kv_index *x, int worker, uint64_t seq, const uint64_t *hashes,
                       const uint64_t *parents, const uint8_t *tiers, int n)
{
    (void)parents; /* a chained hash already names its whole prefix */
    if (!valid_worker(x, worker) || n < 0 || (n > 0 && !hashes) || !valid_tiers(tiers, n))
        return DY_KV_INDEX_EINVAL;
    wstate *w = &x->w[worker];
    clear_reported(x, worker);
    w->state = DY_KV_WORKER_RESYNC; /* until the whole snapshot is in */
    for (int i = 0; i < n; i++)
        if (store(x, worker, hashes[i], tiers ? tiers[i] : DY_KV_TIER_DEVICE) != DY_KV_INDEX_OK)
            return DY_KV_INDEX_ENOMEM;
    w->state = DY_KV_WORKER_LIVE;
    w->seq = seq;
    return DY_KV_INDEX_OK;
}

/* ---------------------------------------------------------------- predictions */

static uint64_t pred_key(uint32_t entry, int32_t worker)
{
    return (uint64_t)entry << 32 | (uint32_t)worker;
}

/* The index of worker's prediction of hash, or -1. */
static long pred_find(const dy_kv_index *x, uint64_t hash, int32_t worker)
{
    long e = find_entry(x, hash);
    if (e < 0)
        return -1;
    uint64_t i = dy_hashmap_get(&x->pred_at, pred_key((uint32_t)e, worker));
    return i == DY_HASHMAP_NONE ? -1 : (long)i;
}

/* Removes prediction i; the last one moves into its place. */
static void pred_erase(dy_kv_index *x, size_t i)
{
    dy_hashmap_remove(&x->pred_at, pred_key(x->preds[i].entry, x->preds[i].worker));
    size_t last = --x->n_preds;
    if (i == last)
        return;
    x->preds[i] = x->preds[last];
    /* the key is there, so this replaces its value and cannot fail */
    dy_hashmap_put(&x->pred_at, pred_key(x->preds[i].entry, x->preds[i].worker), i);
}

static bool heap_push(dy_kv_index *x, timer t)
{
    if (x->hlen == x->hcap) {
        timer *h = realloc(x->heap, x->hcap * 2 * sizeof *h);
        if (!h)
            return false;
        x->heap = h;
        x->hcap *= 2;
    }
    size_t i = x->hlen++;
    while (i > 0 && x->heap[(i - 1) / 2].t > t.t) {
        x->heap[i] = x->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    x->heap[i] = t;
    return true;
}

static timer heap_pop(dy_kv_index *x)
{
    timer top = x->heap[0], last = x->heap[--x->hlen];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= x->hlen)
            break;
        if (c + 1 < x->hlen && x->heap[c + 1].t < x->heap[c].t)
            c++;
        if (!(x->heap[c].t < last.t))
            break;
        x->heap[i] = x->heap[c];
        i = c;
    }
    if (x->hlen)
        x->heap[i] = last;
    return top;
}

static int predict_one(dy_kv_index *x, int worker, uint64_t hash, double expires_at)
{
    long s = pred_find(x, hash, worker);
    if (s >= 0) { /* already predicted: extend; its timer re-arms when it pops */
        if (expires_at > x->preds[s].expires)
            x->preds[s].expires = expires_at;
        return DY_KV_INDEX_OK;
    }
    if (!dy_hashmap_reserve(&x->pred_at, x->n_preds + 1) ||
        !dy_array_reserve((void **)&x->preds, &x->preds_cap, x->n_preds + 1, sizeof *x->preds))
        return DY_KV_INDEX_ENOMEM;
    long e = get_entry(x, hash);
    if (e < 0)
        return DY_KV_INDEX_ENOMEM;
    if (!heap_push(x, (timer){expires_at, hash, worker})) {
        if (entry_empty(x, (uint32_t)e))
            erase_entry(x, hash);
        return DY_KV_INDEX_ENOMEM;
    }
    x->preds[x->n_preds] = (pred){hash, expires_at, expires_at, worker, (uint32_t)e};
    dy_hashmap_put(&x->pred_at, pred_key((uint32_t)e, worker), x->n_preds++); /* reserved */
    set_bit(x, (uint32_t)e, PLANE_PRED, worker, true);
    x->w[worker].predicted++;
    return DY_KV_INDEX_OK;
}

int dy_kv_index_predict(dy_kv_index *x, int worker, const uint64_t *hashes, int n,
                        double expires_at)
{
    if (!valid_worker(x, worker) || n < 0 || (n > 0 && !hashes) || isnan(expires_at))
        return DY_KV_INDEX_EINVAL;
    for (int i = 0; i < n; i++) {
        int rc = predict_one(x, worker, hashes[i], expires_at);
        if (rc != DY_KV_INDEX_OK)
            return rc;
    }
    return DY_KV_INDEX_OK;
}

static void unpredict(dy_kv_index *x, int worker, uint64_t hash)
{
    long found = find_entry(x, hash);
    if (found < 0)
        return;
    uint32_t e = (uint32_t)found;
    set_bit(x, e, PLANE_PRED, worker, false);
    x->w[worker].predicted--;
    if (entry_empty(x, e))
        erase_entry(x, hash);
}

void dy_kv_index_expire(dy_kv_index *x, double now)
{
    if (!x)
        return;
    while (x->hlen && x->heap[0].t <= now) {
        timer t = heap_pop(x);
        long s = pred_find(x, t.hash, t.worker);
        if (s < 0 || x->preds[s].armed != t.t)
            continue; /* a timer of a prediction already gone (its worker was removed) */
        if (x->preds[s].expires > now) {
            /* extended since it was armed: re-arm at the new deadline. The push cannot
             * fail: this pop just freed a heap slot. */
            x->preds[s].armed = x->preds[s].expires;
            heap_push(x, (timer){x->preds[s].expires, t.hash, t.worker});
            continue;
        }
        pred_erase(x, (size_t)s);
        unpredict(x, t.worker, t.hash);
    }
}

/* ---------------------------------------------------------------- leaving */

int dy_kv_index_remove_worker(dy_kv_index *x, int worker)
{
    if (!valid_worker(x, worker))
        return DY_KV_INDEX_EINVAL;
    wstate *w = &x->w[worker];
    if (w->blocks || w->predicted)
        clear_worker(x, worker, 0, PLANES);
    if (w->predicted) { /* their timers stay in the heap and are dropped when they pop */
        for (size_t i = 0; i < x->n_preds;) {
            if (x->preds[i].worker == worker)
                pred_erase(x, i); /* the last one moved into i: look at it again */
            else
                i++;
        }
    }
    *w = (wstate){0};
    return DY_KV_INDEX_OK;
}

/* ---------------------------------------------------------------- queries */

/* The bitset planes of each of hashes[0..n) (NULL when not indexed), n <= CHUNK. The table
 * is far larger than the caches, so each lookup is two likely misses (slot, then entry):
 * touching a chunk's slots, then its entries, ahead of use lets the misses overlap. */
#define CHUNK 16
static void lookup_chunk(const dy_kv_index *x, const uint64_t *hashes, int n,
                         const uint64_t **bits)
{
    size_t home[CHUNK];
    for (int i = 0; i < n; i++)
        home[i] = dy_hashmap_prefetch(&x->table, hashes[i]);
    for (int i = 0; i < n; i++) {
        uint64_t e = dy_hashmap_get_from(&x->table, hashes[i], home[i]);
        bits[i] = e != DY_HASHMAP_NONE ? plane(x, (uint32_t)e, 0) : NULL;
        for (int k = 0; bits[i] && k < PLANES * x->nwords; k += 8) /* each cache line */
            __builtin_prefetch(bits[i] + k);
    }
}

/* ---- per-tier counts of the leading runs
 *
 * For each lower tier, every worker's count of run blocks it holds only there (the fastest
 * tier it holds them in) is kept bit-sliced: bit j of the counts of workers 64k..64k+63 is
 * word k of slice j. Adding one to the counts of a set of 64 workers is a ripple carry over
 * the slices, two steps on average, so counting costs word operations per block, like the
 * walk itself, and nothing at all while every live worker holds the block in its device
 * tier. Slices are cleared as the counts first reach them. */
#define LOWER_TIERS (DY_KV_N_TIERS - 1)
#define COUNT_BITS 31 /* counts stay below n <= INT_MAX */

typedef struct {
    uint64_t slice[LOWER_TIERS][COUNT_BITS][MAX_WORDS];
    int depth[LOWER_TIERS]; /* slices in use (the rest are not cleared yet) */
    int nw;
} tier_counts;

/* One more block in lower tier `tier` for each worker in mask (word k). */
static void count_add(tier_counts *c, int tier, int k, uint64_t mask)
{
    int t = tier - 1;
    for (int j = 0; mask; j++) {
        if (j == c->depth[t]) {
            memset(c->slice[t][j], 0, (size_t)c->nw * sizeof c->slice[t][j][0]);
            c->depth[t]++;
        }
        uint64_t carry = c->slice[t][j][k] & mask;
        c->slice[t][j][k] ^= mask;
        mask = carry;
    }
}

static int count_of(const tier_counts *c, int tier, int worker)
{
    int t = tier - 1, n = 0;
    for (int j = 0; j < c->depth[t]; j++)
        n |= (int)(c->slice[t][j][worker >> 6] >> (worker & 63) & 1) << j;
    return n;
}

/* Counts one block for the workers in `live` (word k) that hold it, by its entry's planes b,
 * in a lower tier and not in a faster one (`faster`: the device tier or predicted). */
static void count_lower(tier_counts *c, const uint64_t *b, int k, uint64_t faster, uint64_t live)
{
    for (int p = DY_KV_TIER_DEVICE + 1; p < DY_KV_N_TIERS; p++) {
        uint64_t only_here = b[p * c->nw + k] & ~faster & live;
        if (only_here)
            count_add(c, p, k, only_here);
        faster |= b[p * c->nw + k];
    }
}

/* Where the walk writes each worker's run: its length alone (overlap), or its length by
 * tier (tiers, with the lower-tier counts kept in counts). */
typedef struct {
    int *overlap;
    dy_kv_overlap *tiers;
    tier_counts counts;
} runs;

/* The worker's run ended at `len` blocks; its counts are final (it left the walk). */
static void run_ends(runs *r, int worker, int len)
{
    if (r->overlap) {
        r->overlap[worker] = len;
        return;
    }
    dy_kv_overlap *o = &r->tiers[worker];
    o->blocks = o->tier[DY_KV_TIER_DEVICE] = len;
    for (int t = DY_KV_TIER_DEVICE + 1; t < DY_KV_N_TIERS; t++) {
        o->tier[t] = count_of(&r->counts, t, worker);
        o->tier[DY_KV_TIER_DEVICE] -= o->tier[t];
    }
}

/* The walk behind both overlap queries. The set of workers holding every block so far
 * shrinks block by block; a worker dropping out at block i has a run of i. Every run starts
 * written as 0, so those that end at block 0 need no write. */
static void walk(const dy_kv_index *x, const uint64_t *hashes, int n, runs *r)
{
    if (r->overlap)
        memset(r->overlap, 0, (size_t)x->max_workers * sizeof *r->overlap);
    else
        memset(r->tiers, 0, (size_t)x->max_workers * sizeof *r->tiers);
    const int nw = x->nwords;
    tier_counts *counts = r->tiers ? &r->counts : NULL;
    if (counts) { /* slices are cleared as they come into use */
        counts->nw = nw;
        for (int t = 0; t < LOWER_TIERS; t++)
            counts->depth[t] = 0;
    }
    if (!hashes || n <= 0)
        return;
    uint64_t live[MAX_WORDS]; /* workers that hold every block so far */
    for (int k = 0; k < nw; k++)
        live[k] = ~0ull;
    if (x->max_workers & 63)
        live[nw - 1] = (1ull << (x->max_workers & 63)) - 1;
    const uint64_t *bits[CHUNK];
    for (int i = 0; i < n; i++) {
        if (i % CHUNK == 0)
            lookup_chunk(x, hashes + i, n - i < CHUNK ? n - i : CHUNK, bits);
        const uint64_t *b = bits[i % CHUNK];
        uint64_t any = 0;
        for (int k = 0; k < nw; k++) {
            uint64_t held = 0; /* in any tier, or predicted */
            if (b) {
                /* predicted counts as the device tier */
                uint64_t device = b[DY_KV_TIER_DEVICE * nw + k] | b[PLANE_PRED * nw + k];
                held = device;
                for (int p = DY_KV_TIER_DEVICE + 1; p < DY_KV_N_TIERS; p++)
                    held |= b[p * nw + k];
                if (counts && (held & ~device & live[k]))
                    count_lower(counts, b, k, device, live[k]);
            }
            uint64_t cur = live[k] & held, gone = i ? live[k] & ~cur : 0;
            for (; gone; gone &= gone - 1) /* these workers' runs end at block i */
                run_ends(r, k * 64 + __builtin_ctzll(gone), i);
            live[k] = cur;
            any |= cur;
        }
        if (!any)
            return;
    }
    for (int k = 0; k < nw; k++)
        for (uint64_t l = live[k]; l; l &= l - 1)
            run_ends(r, k * 64 + __builtin_ctzll(l), n);
}

void dy_kv_index_overlap(const dy_kv_index *x, const uint64_t *hashes, int n, int *overlap)
{
    if (!x || !overlap)
        return;
    runs r; /* not cleared whole: walk clears the counts it uses */
    r.overlap = overlap;
    r.tiers = NULL;
    walk(x, hashes, n, &r);
}

void dy_kv_index_overlap_tiers(const dy_kv_index *x, const uint64_t *hashes, int n,
                               dy_kv_overlap *out)
{
    if (!x || !out)
        return;
    runs r; /* as above */
    r.overlap = NULL;
    r.tiers = out;
    walk(x, hashes, n, &r);
}

/* The fastest tier of a holding mask (entry_mask's bits), or -1 for none. */
static int fastest_tier(unsigned mask)
{
    if (mask & DY_KV_INDEX_PREDICTED)
        return DY_KV_TIER_DEVICE;
    for (int t = 0; t < DY_KV_N_TIERS; t++)
        if (mask >> t & 1)
            return t;
    return -1;
}

int dy_kv_index_overlap_tiers_one(const dy_kv_index *x, int worker, const uint64_t *hashes,
                                  int n, dy_kv_overlap *out)
{
    if (!valid_worker(x, worker) || n < 0 || (n > 0 && !hashes))
        return -1;
    dy_kv_overlap o = {0};
    for (; o.blocks < n; o.blocks++) {
        long e = find_entry(x, hashes[o.blocks]);
        int t = e < 0 ? -1 : fastest_tier(entry_mask(x, (uint32_t)e, worker));
        if (t < 0)
            break;
        o.tier[t]++;
    }
    if (out)
        *out = o;
    return o.blocks;
}

int dy_kv_index_overlap_one(const dy_kv_index *x, int worker, const uint64_t *hashes, int n)
{
    return dy_kv_index_overlap_tiers_one(x, worker, hashes, n, NULL);
}

const char *dy_kv_index_tier_name(int tier)
{
    static const char *const names[DY_KV_N_TIERS] = {"device", "host", "disk"};
    return tier >= 0 && tier < DY_KV_N_TIERS ? names[tier] : "?";
}

dy_kv_worker_state dy_kv_index_worker_state(const dy_kv_index *x, int worker)
{
    return valid_worker(x, worker) ? (dy_kv_worker_state)x->w[worker].state
                                   : DY_KV_WORKER_UNKNOWN;
}

uint64_t dy_kv_index_worker_seq(const dy_kv_index *x, int worker)
{
    return valid_worker(x, worker) ? x->w[worker].seq : 0;
}

size_t dy_kv_index_size(const dy_kv_index *x)
{
    return x ? dy_hashmap_len(&x->table) : 0;
}

int64_t dy_kv_index_worker_blocks(const dy_kv_index *x, int worker)
{
    return valid_worker(x, worker) ? x->w[worker].blocks : 0;
}

int64_t dy_kv_index_worker_predicted(const dy_kv_index *x, int worker)
{
    return valid_worker(x, worker) ? x->w[worker].predicted : 0;
}

unsigned dy_kv_index_holds(const dy_kv_index *x, int worker, uint64_t hash)
{
    if (!valid_worker(x, worker))
        return 0;
    long e = find_entry(x, hash);
    return e < 0 ? 0 : entry_mask(x, (uint32_t)e, worker);
}

int64_t dy_kv_index_worker_hashes(const dy_kv_index *x, int worker, uint64_t *out, int64_t cap)
{
    if (!valid_worker(x, worker) || cap < 0 || (cap > 0 && !out))
        return -1;
    int64_t n = 0;
    uint64_t hash, e;
    for (size_t i = 0; dy_hashmap_next(&x->table, &i, &hash, &e);) {
        if (!(entry_mask(x, (uint32_t)e, worker) & 7u))
            continue;
        if (n < cap)
            out[n] = hash;
        n++;
    }
    return n;
}
