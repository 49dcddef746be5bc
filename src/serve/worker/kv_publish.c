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
    if (!p->scratch || !p->hashes || !p->parents || !dy_kv_cache_enable_events(kv, true)) {
        dy_kv_publish_free(p);
        return false;
    }
    return true;
}

void dy_kv_publish_free(dy_kv_publisher *p)
{
    free(p->scratch);
    free(p->hashes);
    free(p->parents);
    p->scratch = NULL;
    p->hashes = p->parents = NULL;
}

bool dy_kv_publish_snapshot(dy_kv_publisher *p, dy_kv_cache *kv, dy_buf *tx)
{
    /* Never -1: the arrays hold one entry per pool block. */
    int n = dy_kv_cache_snapshot(kv, p->hashes, p->parents, p->n_blocks);
    uint32_t parts = n > 0 ? (uint32_t)((n + p->cap - 1) / p->cap) : 1;
    size_t at = tx->len;
    for (uint32_t part = 0; part < parts; part++) {
        int first = (int)part * p->cap, k = n - first < p->cap ? n - first : p->cap;
        for (int i = 0; i < k; i++)
            p->scratch[i] = (dy_kv_event){DY_KV_EV_STORED, DY_KV_TIER_DEVICE,
                                          p->hashes[first + i], p->parents[first + i]};
        dy_msg_kv_snapshot m = {p->worker_id, p->seq, part, parts, (uint32_t)k, p->scratch};
        if (!dy_wire_kv_snapshot(tx, &m)) {
            tx->len = at; /* no half snapshot on the wire */
            p->want_snapshot = true;
            return false;
        }
    }
    p->want_snapshot = false;
    return true;
}

bool dy_kv_publish_flush(dy_kv_publisher *p, dy_kv_cache *kv, dy_buf *tx)
{
    if (p->want_snapshot || dy_kv_cache_events_overflowed(kv))
        return dy_kv_publish_snapshot(p, kv, tx);
    int n;
    while ((n = dy_kv_cache_take_events(kv, p->scratch, p->cap)) > 0) {
        dy_msg_kv_events m = {p->worker_id, p->seq + 1, (uint32_t)n, p->scratch};
        if (!dy_wire_kv_events(tx, &m)) { /* those events are lost: resend everything */
            p->want_snapshot = true;
            return false;
        }
        p->seq++;
    }
    return true;
}
