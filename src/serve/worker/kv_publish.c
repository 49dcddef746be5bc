/* kv_publish.c — see kv_publish.h. */
#include "serve/worker/kv_publish.h"

#include <stdlib.h>
#include <string.h>

bool dy_kv_publish_init(dy_kv_publisher *p, dy_kv_cache *kv, uint32_t worker_id)
{
    memset(p, 0, sizeof *p);
    p->worker_id = worker_id;
    p->want_snapshot = true;
    p->n_blocks = dy_kv_cache_pool(kv)->n_blocks;
    /* The whole log fits one batch unless it is larger than a frame may carry. */
    p->cap = DY_KV_EVENT_LOG_CAP(p->n_blocks);
    if (p->cap > DY_WIRE_MAX_KV_EVENTS)
        p->cap = DY_WIRE_MAX_KV_EVENTS;
    if (p->cap > DY_WIRE_MAX_KV_BLOCKS)
        p->cap = DY_WIRE_MAX_KV_BLOCKS;
    p->scratch = malloc(sizeof *p->scratch * (size_t)p->cap);
    p->hashes = malloc(sizeof *p->hashes * (size_t)p->n_blocks);
    p->parents = malloc(sizeof *p->parents * (size_t)p->n_blocks);
    p->entries = malloc(sizeof *p->entries * (size_t)p->n_blocks);
    p->entries_cap = p->n_blocks;
    if (!p->scratch || !p->hashes || !p->parents || !p->entries ||
        !dy_kv_cache_enable_events(kv, true)) {
        dy_kv_publish_free(p);
        return false;
    }
    return true;
}

bool dy_kv_publish_add_tier(dy_kv_publisher *p, dy_kv_tier *tier)
{
    if (p->n_tiers == DY_KV_PUBLISH_MAX_TIERS || !dy_kv_tier_enable_events(tier, true))
        return false;
    int cap = p->entries_cap + dy_kv_tier_slots(tier);
    dy_kv_event *e = realloc(p->entries, sizeof *e * (size_t)cap);
    if (!e)
        return false;
    p->entries = e;
    p->entries_cap = cap;
    p->tiers[p->n_tiers++] = tier;
    p->want_snapshot = true;
    return true;
}

void dy_kv_publish_free(dy_kv_publisher *p)
{
    free(p->scratch);
    free(p->hashes);
    free(p->parents);
    free(p->entries);
    p->scratch = p->entries = NULL;
    p->hashes = p->parents = NULL;
}

/* Every block the worker holds, in every tier, into p->entries; returns how many. */
static int gather(dy_kv_publisher *p, dy_kv_cache *kv)
{
    /* Never -1: the arrays hold one entry per pool block, and per slot of each tier. */
    int n = dy_kv_cache_snapshot(kv, p->hashes, p->parents, p->n_blocks);
    for (int i = 0; i < n; i++)
        p->entries[i] = (dy_kv_event){DY_KV_EV_STORED, DY_KV_TIER_DEVICE, p->hashes[i],
                                      p->parents[i]};
    for (int t = 0; t < p->n_tiers; t++)
        n += dy_kv_tier_snapshot(p->tiers[t], p->entries + n, p->entries_cap - n);
    return n;
}

bool dy_kv_publish_snapshot(dy_kv_publisher *p, dy_kv_cache *kv, dy_buf *tx)
{
    int n = gather(p, kv);
    uint32_t parts = n > 0 ? (uint32_t)((n + p->cap - 1) / p->cap) : 1;
    size_t at = tx->len;
    for (uint32_t part = 0; part < parts; part++) {
        int first = (int)part * p->cap, k = n - first < p->cap ? n - first : p->cap;
        dy_msg_kv_snapshot m = {p->worker_id, p->seq, part, parts, (uint32_t)(k > 0 ? k : 0),
                                p->entries + first};
        if (!dy_wire_kv_snapshot(tx, &m)) {
            tx->len = at; /* no half snapshot on the wire */
            p->want_snapshot = true;
            return false;
        }
    }
    p->want_snapshot = false;
    return true;
}

/* Whether any log lost events: the receiver needs everything again. */
static bool overflowed(const dy_kv_publisher *p, const dy_kv_cache *kv)
{
    bool o = dy_kv_cache_events_overflowed(kv);
    for (int t = 0; t < p->n_tiers; t++)
        o |= dy_kv_tier_events_overflowed(p->tiers[t]);
    return o;
}

/* The next batch's worth of events: the prefix cache's first, then each tier's. */
static int take(dy_kv_publisher *p, dy_kv_cache *kv)
{
    int n = dy_kv_cache_take_events(kv, p->scratch, p->cap);
    for (int t = 0; t < p->n_tiers && n < p->cap; t++)
        n += dy_kv_tier_take_events(p->tiers[t], p->scratch + n, p->cap - n);
    return n;
}

bool dy_kv_publish_flush(dy_kv_publisher *p, dy_kv_cache *kv, dy_buf *tx)
{
    if (p->want_snapshot || overflowed(p, kv))
        return dy_kv_publish_snapshot(p, kv, tx);
    int n;
    bool cleared = false;
    while ((n = take(p, kv)) > 0) {
        dy_msg_kv_events m = {p->worker_id, p->seq + 1, (uint32_t)n, p->scratch};
        if (!dy_wire_kv_events(tx, &m)) { /* those events are lost: resend everything */
            p->want_snapshot = true;
            return false;
        }
        p->seq++;
        for (int i = 0; i < n; i++)
            cleared |= p->scratch[i].kind == DY_KV_EV_CLEARED;
    }
    /* CLEARED empties every tier of the worker in the receiver's index, but only the prefix
     * cache was cleared: what the lower tiers still hold goes out again. */
    if (cleared && p->n_tiers > 0)
        return dy_kv_publish_snapshot(p, kv, tx);
    return true;
}
