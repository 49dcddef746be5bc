/* fleet_kv.c — what the workers report about their caches, into the router (fleet_impl.h):
 * KV event batches and snapshots keep its prefix index a mirror of theirs (a gap in the
 * numbered stream asks for a snapshot), and load reports feed its cost. */
#include "serve/front/fleet_impl.h"
#include "util/clock.h"

#include <limits.h>
#include <stdlib.h>

void dy_fleet_snapshot_reset(snapshot_rx *r)
{
    free(r->hashes);
    free(r->parents);
    free(r->tiers);
    *r = (snapshot_rx){0};
}

/* Asks the worker for a full snapshot (once until it arrives). */
static void ask_resync(dy_fleet *w, slot *s, uint8_t reason)
{
    if (s->resync_asked)
        return;
    s->resync_asked = true;
    w->rt.resyncs++;
    dy_fleet_snapshot_reset(&s->snap);
    dy_msg_kv_resync m = {.reason = reason,
                          .seen_seq = dy_kv_index_worker_seq(dy_router_index(w->router), s->index)};
    dy_buf b = {0};
    if (dy_wire_kv_resync(&b, &m))
        dy_fleet_send_frame(s, &b);
    dy_buf_free(&b);
}

void dy_fleet_on_kv_events(dy_fleet *w, slot *s, const dy_msg_kv_events *m)
{
    pthread_mutex_lock(&w->mu);
    int rc = dy_kv_index_apply(dy_router_index(w->router), s->index, m->seq, m->events,
                               (int)m->n_events);
    if (rc == DY_KV_INDEX_RESYNC)
        ask_resync(w, s, DY_RESYNC_GAP);
    else if (rc != DY_KV_INDEX_OK)
        ask_resync(w, s, DY_RESYNC_ERROR);
    pthread_mutex_unlock(&w->mu);
}

/* Room for total blocks in the snapshot being collected; false if out of memory. */
static bool snapshot_reserve(snapshot_rx *r, int64_t total)
{
    if (total <= r->cap)
        return true;
    int cap = (int)total;
    uint64_t *h = realloc(r->hashes, sizeof *h * (size_t)cap);
    uint64_t *p = h ? realloc(r->parents, sizeof *p * (size_t)cap) : NULL;
    uint8_t *t = p ? realloc(r->tiers, sizeof *t * (size_t)cap) : NULL;
    if (h)
        r->hashes = h;
    if (p)
        r->parents = p;
    if (t)
        r->tiers = t;
    if (h && p && t)
        r->cap = cap;
    return h && p && t;
}

/* Collects a snapshot's parts; the last one replaces the worker's blocks in the index. */
void dy_fleet_on_kv_snapshot(dy_fleet *w, slot *s, const dy_msg_kv_snapshot *m)
{
    pthread_mutex_lock(&w->mu);
    snapshot_rx *r = &s->snap;
    if (m->part == 0)
        dy_fleet_snapshot_reset(r);
    bool ok = m->part == r->next_part && (m->part == 0 || (m->seq == r->seq && m->n_parts == r->n_parts));
    int64_t total = (int64_t)r->n + m->n_blocks, device = r->n_device;
    for (uint32_t i = 0; i < m->n_blocks; i++)
        device += m->blocks[i].tier == DY_KV_TIER_DEVICE;
    ok = ok && device <= (int64_t)s->hello.kv_blocks; /* its primary pool cannot hold more */
    ok = ok && total <= INT_MAX; /* lower tiers: HELLO does not say their sizes (yet) */
    ok = ok && snapshot_reserve(r, total);
    if (!ok) {
        dy_fleet_snapshot_reset(r);
        s->resync_asked = false;
        ask_resync(w, s, DY_RESYNC_ERROR);
        pthread_mutex_unlock(&w->mu);
        return;
    }
    for (uint32_t i = 0; i < m->n_blocks; i++) {
        r->hashes[r->n] = m->blocks[i].hash;
        r->parents[r->n] = m->blocks[i].parent;
        r->tiers[r->n++] = m->blocks[i].tier;
    }
    r->n_device = (int)device;
    r->seq = m->seq;
    r->n_parts = m->n_parts;
    r->next_part = m->part + 1;
    if (r->next_part == r->n_parts) {
        dy_kv_index_resync(dy_router_index(w->router), s->index, r->seq, r->hashes, r->parents,
                           r->tiers, r->n);
        dy_fleet_snapshot_reset(r);
        s->resync_asked = false;
    }
    pthread_mutex_unlock(&w->mu);
}

/* A load report. Its event sequence number also tells whether a batch went missing: the
 * stream is ordered, so every batch sent before this report has been applied by now. It also
 * tells of blocks the index has never heard of: a worker met after it had published (a
 * cluster worker that this frontend attaches late or again, docs/cluster.md) is asked for a
 * snapshot now, not at its next batch, which a worker serving only prompts it holds already
 * may never send. */
void dy_fleet_on_stats(dy_fleet *w, slot *s, const dy_msg_stats *m)
{
    pthread_mutex_lock(&w->mu);
    s->stats = *m;
    s->last_heard = dy_now(); /* STATS is the heartbeat */
    dy_router_load load = {(int64_t)m->queued_prefill_tokens, (int64_t)m->active_decode_blocks,
                           (int64_t)m->running + m->waiting, (int64_t)m->kv_blocks_used,
                           (int64_t)m->kv_blocks_total};
    dy_router_report_load(w->router, s->index, &load);
    dy_kv_index *x = dy_router_index(w->router);
    const dy_kv_worker_state st = dy_kv_index_worker_state(x, s->index);
    if (!w->cfg.worker.no_kv_events &&
        ((st == DY_KV_WORKER_LIVE && dy_kv_index_worker_seq(x, s->index) != m->kv_event_seq) ||
         (st == DY_KV_WORKER_UNKNOWN && m->kv_event_seq > 0)))
        ask_resync(w, s, DY_RESYNC_GAP);
    pthread_mutex_unlock(&w->mu);
}
