/* worker_disagg.c — a worker's part in disaggregated serving (docs/disaggregation.md).
 *  - Prefill role: a PREFILL computes positions [0, n) of a prompt through the ordinary
 *    scheduler (so it batches with other prompts and reuses this worker's prefix cache), then
 *    its KV blocks are copied into the decode worker's blocks and PREFILL_DONE reports the
 *    bytes and time.
 *  - Decode role: a REQUEST marked remote_prefill sets blocks aside (after its own prefix
 *    cache) and answers KV_ALLOC with their ids; KV_READY then lets the sequence run — it
 *    computes the last prompt token itself, and samples the first token from its logits, so
 *    sampling, stop strings and random streams stay exactly those of aggregated serving.
 *  - The decode pools a prefill worker holds open: opened on first use, closed when the
 *    frontend says their worker is gone (PEER_GONE), so a dead worker's pool is not kept
 *    mapped. */
#include "serve/worker/worker_impl.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void prefill_failed(worker *w, uint64_t id, const char *msg)
{
    dy_msg_prefill_done d = {.id = id, .ok = 0, .text = msg, .text_len = (uint32_t)strlen(msg)};
    dy_wire_prefill_done(&w->tx, &d);
}

static const char *check_prefill(const worker *w, const dy_msg_prefill *m)
{
    if (w->cfg.role != DY_ROLE_PREFILL)
        return "this worker does not prefill for others";
    if ((int64_t)m->n_prompt >= w->model->hp.ctx_len)
        return "prompt does not fit the context length";
    for (uint32_t i = 0; i < m->n_prompt; i++)
        if (m->prompt[i] < 0 || m->prompt[i] >= w->model->hp.vocab_size)
            return "prompt token id outside the vocabulary";
    uint32_t blocks = (m->n_prompt + (uint32_t)w->cfg.block_size - 1) / (uint32_t)w->cfg.block_size;
    if (m->first_block > blocks || m->n_blocks > blocks - m->first_block)
        return "the blocks to send do not match the prompt";
    if (dy_worker_find_req((worker *)w, m->id))
        return "duplicate request id";
    return NULL;
}

void dy_disagg_on_prefill(worker *w, const dy_msg_prefill *m)
{
    const char *bad = w->draining ? "worker is shutting down" : check_prefill(w, m);
    if (bad) {
        prefill_failed(w, m->id, bad);
        return;
    }
    wreq *r = calloc(1, sizeof *r);
    int32_t *dest = malloc(sizeof(int32_t) * (m->n_blocks ? m->n_blocks : 1));
    if (!r || !dest) {
        free(r);
        free(dest);
        prefill_failed(w, m->id, "out of memory");
        return;
    }
    memcpy(dest, m->dest, sizeof(int32_t) * m->n_blocks);
    *r = (wreq){.id = m->id, .prefill_only = true, .xfer = m->xfer, .first_block = m->first_block,
                .n_xfer_blocks = m->n_blocks, .dest = dest, .arrived = dy_now(),
                .max_tokens = 1};
    snprintf(r->peer, sizeof r->peer, "%s", m->peer);
    r->seq = dy_sched_add(w->sched, m->id, m->prompt, (int)m->n_prompt, (int)m->n_prompt + 1, r);
    if (!r->seq) {
        free(dest);
        free(r);
        prefill_failed(w, m->id, dy_worker_refusal(w, (int)m->n_prompt, (int)m->n_prompt + 1));
        return;
    }
    r->next = w->reqs;
    w->reqs = r;
}

/* An open connection (or mapping) to a decode worker's pool, opened on first use. */
static dy_xfer_peer *peer_for(worker *w, uint8_t kind, const char *name, char *err, size_t errlen)
{
    for (int i = 0; i < w->n_peers; i++)
        if (!strcmp(dy_xfer_peer_name(w->peers[i]), name))
            return w->peers[i];
    dy_xfer_peer *p = dy_xfer_open((dy_xfer_kind)kind, name, w->pool->type,
                                   dy_kv_block_bytes(w->pool), err, errlen);
    if (!p)
        return NULL;
    if (w->n_peers == (int)(sizeof w->peers / sizeof *w->peers))
        dy_xfer_close(w->peers[--w->n_peers]); /* decode workers were replaced: drop one */
    w->peers[w->n_peers++] = p;
    return p;
}

static void drop_peer(worker *w, dy_xfer_peer *p)
{
    for (int i = 0; i < w->n_peers; i++)
        if (w->peers[i] == p) {
            w->peers[i] = w->peers[--w->n_peers];
            dy_xfer_close(p);
            return;
        }
}

/* Prefills into that pool were cancelled before the frontend sent this (the same stream,
 * read between steps), so nothing writes into the mapping while it is closed. */
void dy_disagg_on_peer_gone(worker *w, const dy_msg_peer_gone *m)
{
    for (int i = 0; i < w->n_peers; i++)
        if (!strcmp(dy_xfer_peer_name(w->peers[i]), m->peer)) {
            drop_peer(w, w->peers[i]);
            return;
        }
}

uint64_t dy_disagg_mapped_bytes(const worker *w)
{
    uint64_t n = 0;
    for (int i = 0; i < w->n_peers; i++)
        n += dy_xfer_peer_mapped_bytes(w->peers[i]);
    return n;
}

void dy_disagg_ship(worker *w, wreq *r)
{
    char err[256];
    double t0 = dy_now();
    uint64_t bytes = 0;
    dy_xfer_peer *p = peer_for(w, r->xfer, r->peer, err, sizeof err);
    int rc = p ? dy_xfer_send(p, r->id, w->pool, r->seq->blocks + r->first_block, r->dest,
                              (int)r->n_xfer_blocks, &bytes, err, sizeof err)
               : -1;
    double t1 = dy_now();
    if (rc != 0) {
        if (p)
            drop_peer(w, p);
        fprintf(stderr, "dyad worker %d: KV transfer failed: %s\n", w->cfg.worker_id, err);
        prefill_failed(w, r->id, err);
    } else {
        w->xfer_bytes += bytes;
        dy_msg_prefill_done d = {.id = r->id, .ok = 1, .bytes = bytes,
                                 .prefill_seconds = t0 - r->arrived, .transfer_seconds = t1 - t0,
                                 .computed_tokens = (uint32_t)(r->seq->n_prompt - r->seq->n_cached),
                                 .cached_tokens = (uint32_t)r->seq->n_cached, .text = "", .text_len = 0};
        dy_wire_prefill_done(&w->tx, &d);
    }
    dy_worker_drop_req(w, r); /* its blocks stay in this worker's prefix cache */
}

void dy_disagg_on_remote_request(worker *w, wreq *r, const dy_msg_request *m)
{
    int64_t max_len = (int64_t)m->n_prompt + m->max_tokens;
    if (max_len > w->model->hp.ctx_len)
        max_len = w->model->hp.ctx_len;
    r->seq = dy_sched_add_remote(w->sched, m->id, m->prompt, (int)m->n_prompt, (int)max_len, r);
    if (!r->seq) {
        dy_worker_send_error(w, m->id, dy_worker_refusal(w, (int)m->n_prompt, (int)max_len));
        dy_worker_drop_req(w, r);
        return;
    }
    dy_seq *q = r->seq;
    dy_msg_kv_alloc a = {.id = m->id, .cached_tokens = (uint32_t)q->n_computed};
    if (q->state == DY_SEQ_REMOTE) {
        a.first_block = (uint32_t)q->n_published;
        a.n_blocks = (uint32_t)(q->n_blocks - q->n_published);
        a.blocks = q->blocks + q->n_published;
        if (w->rx)
            dy_xfer_rx_expect(w->rx, m->id, a.blocks, (int)a.n_blocks);
    } else
        a.local = 1; /* no room to set blocks aside, or nothing to receive: prefill here */
    dy_wire_kv_alloc(&w->tx, &a);
}

void dy_disagg_on_kv_ready(worker *w, const dy_msg_kv_ready *m)
{
    wreq **p = dy_worker_find_req(w, m->id);
    wreq *r = p ? *p : NULL;
    if (!r || !r->seq || r->seq->state != DY_SEQ_REMOTE || r->awaiting_kv)
        return;
    if (m->ok && m->n_blocks > 0 && w->rx) {
        /* TCP: the blocks travel on another connection; wait until they are all here. */
        r->awaiting_kv = true;
        r->n_xfer_blocks = m->n_blocks;
        w->n_awaiting++;
        dy_disagg_poll(w);
        return;
    }
    if (w->rx)
        dy_xfer_rx_forget(w->rx, r->id);
    dy_sched_remote_ready(w->sched, r->seq, m->ok);
}

void dy_disagg_poll(worker *w)
{
    if (!w->n_awaiting)
        return;
    for (wreq *r = w->reqs; r; r = r->next)
        if (r->awaiting_kv && dy_xfer_rx_received(w->rx, r->id) >= (int)r->n_xfer_blocks) {
            r->awaiting_kv = false;
            w->n_awaiting--;
            dy_xfer_rx_forget(w->rx, r->id);
            dy_sched_remote_ready(w->sched, r->seq, true);
        }
}

void dy_disagg_free(worker *w)
{
    for (int i = 0; i < w->n_peers; i++)
        dy_xfer_close(w->peers[i]);
    w->n_peers = 0;
}
