/* worker.c — the worker process's step loop (see worker.h). Everything that is policy
 * (which sequences run, when to preempt) is the scheduler's; this file does the I/O around
 * it: frames in, engine step, sampling, detokenization, stop strings, frames out — and the
 * heartbeat that keeps STATS coming while a long step runs. */
#include "serve/worker/worker_impl.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

/* ---------------------------------------------------------------- replies */

static void send_done(worker *w, uint64_t id, dy_end f, const wreq *r, const char *text,
                      size_t len)
{
    dy_msg_done d = {.id = id, .finish = (uint8_t)f, .text = text,
                     .text_len = (uint32_t)(len > DY_WIRE_MAX_TEXT ? DY_WIRE_MAX_TEXT : len)};
    if (r) {
        d.prompt_tokens = (uint32_t)r->seq->n_prompt;
        /* tokens loaded from a lower tier were not computed either: they count as cached */
        d.cached_tokens = (uint32_t)r->seq->n_cached + r->tier.tokens;
        d.completion_tokens = r->generated;
        double q = r->scheduled > 0 ? r->scheduled - r->arrived : dy_now() - r->arrived;
        d.queue_us = (uint32_t)(q * 1e6);
        d.tier_outcome = r->tier.outcome;
        d.tier_tokens = r->tier.tokens;
        d.tier_load_us = r->tier.load_us;
        d.tier_recompute_us = r->tier.recompute_us;
        d.tier_wait_us = r->tier.wait_us;
    }
    dy_wire_done(&w->tx, &d);
    w->stats_due = true;
}

void dy_worker_send_error(worker *w, uint64_t id, const char *msg)
{
    send_done(w, id, DY_END_ERROR, NULL, msg, strlen(msg));
}

/* Length of the longest prefix of s that does not end inside a UTF-8 character. */
static size_t utf8_complete(const char *s, size_t n)
{
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0)
        return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return need > back + 1 ? i - 1 : n;
}

/* Sends text released by the stop filter, holding back a split UTF-8 character. */
static void release_text(wreq *r, const char *text, size_t len, char *out, size_t *out_len)
{
    size_t n = 0;
    memcpy(out, r->hold, (size_t)r->n_hold);
    n = (size_t)r->n_hold;
    memcpy(out + n, text, len);
    n += len;
    size_t ok = utf8_complete(out, n);
    r->n_hold = (int)(n - ok);
    memcpy(r->hold, out + ok, (size_t)r->n_hold);
    *out_len = ok;
}

/* ---------------------------------------------------------------- requests */

wreq **dy_worker_find_req(worker *w, uint64_t id)
{
    for (wreq **p = &w->reqs; *p; p = &(*p)->next)
        if ((*p)->id == id)
            return p;
    return NULL;
}

void dy_worker_drop_req(worker *w, wreq *r)
{
    wreq **p = dy_worker_find_req(w, r->id);
    if (p)
        *p = r->next;
    if (r->seq) {
        dy_kv_tiers_forget(w->tiers, r->seq);
        dy_sched_finish(w->sched, r->seq);
    }
    if (w->rx)
        dy_xfer_rx_forget(w->rx, r->id);
    if (r->awaiting_kv)
        w->n_awaiting--;
    dy_stop_free(&r->stop);
    dy_guide_end(&w->guides, &r->guide);
    free(r->dest);
    free(r);
}

static const char *check_request(const worker *w, const dy_msg_request *m, dy_sampling *s)
{
    *s = (dy_sampling){m->temperature, m->top_k, m->top_p, m->min_p, m->seed};
    if (dy_sampling_check(s))
        return "invalid sampling parameters";
    if (m->max_tokens == 0)
        return "max_tokens must be at least 1";
    for (uint32_t i = 0; i < m->n_prompt; i++)
        if (m->prompt[i] < 0 || m->prompt[i] >= w->model->hp.vocab_size)
            return "prompt token id outside the vocabulary";
    if ((int64_t)m->n_prompt >= w->model->hp.ctx_len)
        return "prompt does not fit the context length";
    for (uint32_t i = 0; i < m->n_samples; i++)
        if (dy_worker_find_req((worker *)w, m->id + i))
            return "duplicate request id";
    return NULL;
}

wreq *dy_worker_new_req(worker *w, const dy_msg_request *m)
{
    dy_sampling s;
    const char *bad = w->draining ? "worker is shutting down" : check_request(w, m, &s);
    if (bad) {
        dy_worker_send_error(w, m->id, bad);
        return NULL;
    }
    wreq *r = calloc(1, sizeof *r);
    const char *stops[DY_WIRE_MAX_STOPS];
    for (int i = 0; i < m->n_stops; i++)
        stops[i] = m->stops[i];
    if (!r || !dy_stop_init(&r->stop, stops, m->n_stops)) {
        free(r);
        dy_worker_send_error(w, m->id, "out of memory");
        return NULL;
    }
    char why[256];
    if (m->grammar_len && !dy_guide_start(&w->guides, &r->guide, m->grammar, m->grammar_len,
                                          why, sizeof why)) {
        dy_stop_free(&r->stop);
        free(r);
        dy_worker_send_error(w, m->id, why);
        return NULL;
    }
    r->id = m->id;
    r->arrived = dy_now();
    r->sampling = s;
    dy_rng_seed(&r->rng, m->seed, m->stream);
    r->max_tokens = m->max_tokens;
    r->ignore_eos = m->ignore_eos;
    r->want_logprobs = m->want_logprobs;
    r->n_logprobs = m->n_logprobs;
    r->session = m->session;
    r->hold_ms = m->hold_ms;
    return r;
}

/* Sample i of a request: id + i, random stream + i. */
static dy_msg_request sample_of(const dy_msg_request *m, uint32_t i)
{
    dy_msg_request s = *m;
    s.id = m->id + i;
    s.stream = m->stream + i;
    s.n_samples = 1;
    return s;
}

const char *dy_worker_refusal(const worker *w, int n, int max_len)
{
    return dy_sched_fits(w->sched, n, max_len) ? "out of memory"
                                               : "prompt does not fit this worker's KV cache";
}

static void fail_samples(worker *w, const dy_msg_request *m, uint32_t from, const char *msg)
{
    for (uint32_t i = from; i < m->n_samples; i++)
        dy_worker_send_error(w, m->id + i, msg);
}

/* The samples after the first fork the leader's prompt (sched.h, dy_sched_fork). */
static void add_forks(worker *w, const dy_msg_request *m, dy_seq *leader)
{
    for (uint32_t i = 1; i < m->n_samples; i++) {
        dy_msg_request si = sample_of(m, i);
        wreq *r = dy_worker_new_req(w, &si);
        if (!r)
            continue;
        r->next = w->reqs;
        w->reqs = r;
        r->seq = dy_sched_fork(w->sched, leader, si.id, r);
        if (!r->seq) {
            dy_worker_send_error(w, si.id, "out of memory");
            dy_worker_drop_req(w, r);
        }
    }
}

static uint32_t estimate_us(double seconds)
{
    return isfinite(seconds) && seconds * 1e6 < (double)UINT32_MAX ? (uint32_t)(seconds * 1e6)
                                                                  : UINT32_MAX;
}

/* A request computed here. If its cached prefix continues in a lower tier and loading that
 * is cheaper than computing it, it waits for the copies first. */
static dy_seq *add_local(worker *w, wreq *r, const dy_msg_request *m, int max_len)
{
    const int n = (int)m->n_prompt;
    dy_tier_plan tp = {0};
    if (w->tiers && !w->cfg.no_prefix_cache)
        tp = dy_kv_tiers_plan(w->tiers, m->prompt, n);
    if (tp.blocks == 0)
        return dy_sched_add(w->sched, m->id, m->prompt, n, max_len, r);
    r->tier.outcome = DY_TIER_RECOMPUTED;
    r->tier.load_us = estimate_us(tp.choice.load_s);
    r->tier.recompute_us = estimate_us(tp.choice.recompute_s);
    if (!tp.choice.load)
        return dy_sched_add(w->sched, m->id, m->prompt, n, max_len, r);
    dy_seq *q = dy_sched_add_loading(w->sched, m->id, m->prompt, n, max_len, tp.upto, r);
    if (q && q->state == DY_SEQ_REMOTE &&
        !dy_kv_tiers_load(w->tiers, q, tp.upto, &r->tier))
        dy_sched_remote_ready(w->sched, q, false); /* not now after all: computed here */
    return q;
}

static void on_request(worker *w, const dy_msg_request *m)
{
    if (w->cfg.role == DY_ROLE_PREFILL) {
        fail_samples(w, m, 0, "this is a prefill worker");
        return;
    }
    if (m->session) /* its conversation's next turn: the hold is over */
        dy_kv_tiers_hold_end(w->tiers, m->session);
    wreq *r = dy_worker_new_req(w, m);
    if (!r) {
        fail_samples(w, m, 1, "the request was refused");
        return;
    }
    int64_t max_len = (int64_t)m->n_prompt + m->max_tokens;
    if (max_len > w->model->hp.ctx_len)
        max_len = w->model->hp.ctx_len;
    r->next = w->reqs;
    w->reqs = r;
    if (m->remote_prefill && w->cfg.role == DY_ROLE_DECODE) {
        dy_disagg_on_remote_request(w, r, m);
        if (!dy_worker_find_req(w, m->id)) { /* refused, and its error sent */
            fail_samples(w, m, 1, dy_worker_refusal(w, (int)m->n_prompt, (int)max_len));
            return;
        }
    } else {
        r->seq = add_local(w, r, m, (int)max_len);
        if (!r->seq) {
            fail_samples(w, m, 0, dy_worker_refusal(w, (int)m->n_prompt, (int)max_len));
            dy_worker_drop_req(w, r);
            return;
        }
    }
    add_forks(w, m, r->seq);
}

/* A REQUEST frame that could not be decoded (its prompt's memory, mostly: the frontend sends
 * only well-formed frames). Its samples still get an answer where their ids were read, so
 * that the client is not left waiting. */
static void refuse_unread(worker *w, dy_msg_request *m, const char *err)
{
    fprintf(stderr, "dyad worker %d: bad request frame: %s\n", w->cfg.worker_id, err);
    if (m->n_samples < 1 || m->n_samples > DY_WIRE_MAX_SAMPLES)
        return;
    fail_samples(w, m, 0, strstr(err, "out of memory") ? "out of memory"
                                                       : "the worker could not read the request");
}

static void on_cancel(worker *w, uint64_t id)
{
    wreq **p = dy_worker_find_req(w, id);
    if (!p)
        return; /* already finished: the DONE crossed the CANCEL */
    wreq *r = *p;
    if (r->prefill_only) {
        dy_msg_prefill_done d = {.id = id, .ok = 0, .text = "cancelled", .text_len = 9};
        dy_wire_prefill_done(&w->tx, &d);
    } else
        send_done(w, id, DY_END_CANCELLED, r, "", 0);
    dy_worker_drop_req(w, r);
}

/* Reads and handles every frame that has arrived. false when the frontend is gone. */
static bool read_frames(worker *w)
{
    long n = dy_conn_fill(&w->conn);
    if (n <= 0)
        return false;
    dy_msg_type t;
    const uint8_t *p;
    uint32_t len;
    char err[256];
    dy_conn_result k;
    while ((k = dy_conn_next(&w->conn, &t, &p, &len, err, sizeof err)) == DY_CONN_FRAME) {
        if (t == DY_MSG_REQUEST) {
            dy_msg_request m;
            if (dy_wire_decode_request(p, len, &m, err, sizeof err))
                on_request(w, &m);
            else
                refuse_unread(w, &m, err);
            dy_msg_request_free(&m);
        } else if (t == DY_MSG_CANCEL) {
            dy_msg_cancel m;
            if (dy_wire_decode_cancel(p, len, &m, err, sizeof err))
                on_cancel(w, m.id);
        } else if (t == DY_MSG_HOLD) {
            dy_msg_hold m;
            if (dy_wire_decode_hold(p, len, &m, err, sizeof err))
                dy_kv_tiers_hold_frame(w->tiers, &m);
            else
                fprintf(stderr, "dyad worker %d: bad HOLD frame: %s\n", w->cfg.worker_id, err);
        } else if (t == DY_MSG_SHUTDOWN) {
            w->draining = true;
        } else if (t == DY_MSG_PREFILL) {
            dy_msg_prefill m;
            if (dy_wire_decode_prefill(p, len, &m, err, sizeof err))
                dy_disagg_on_prefill(w, &m);
            else
                fprintf(stderr, "dyad worker %d: bad prefill frame: %s\n", w->cfg.worker_id, err);
            dy_msg_prefill_free(&m);
        } else if (t == DY_MSG_KV_RESYNC) {
            dy_msg_kv_resync m;
            if (dy_wire_decode_kv_resync(p, len, &m, err, sizeof err) && !w->cfg.no_kv_events)
                dy_kv_publish_snapshot(&w->kvpub, w->kv, &w->tx);
        } else if (t == DY_MSG_ROLE) {
            dy_msg_role m;
            if (dy_wire_decode_role(p, len, &m, err, sizeof err) && w->cfg.switchable)
                w->next_role = m.role;
            else
                fprintf(stderr, "dyad worker %d: a role switch it cannot take: %s\n",
                        w->cfg.worker_id, w->cfg.switchable ? err : "not --switchable");
        } else if (t == DY_MSG_KV_READY) {
            dy_msg_kv_ready m;
            if (dy_wire_decode_kv_ready(p, len, &m, err, sizeof err))
                dy_disagg_on_kv_ready(w, &m);
        } else if (t == DY_MSG_PEER_GONE) {
            dy_msg_peer_gone m;
            if (dy_wire_decode_peer_gone(p, len, &m, err, sizeof err))
                dy_disagg_on_peer_gone(w, &m);
        }
    }
    if (k == DY_CONN_CORRUPT) {
        fprintf(stderr, "dyad worker %d: corrupt stream from the frontend: %s\n",
                w->cfg.worker_id, err);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- the step */

/* The answer cannot go on (its grammar left no token): the error goes out in deliver, and the
 * sequence commits a harmless token meanwhile. */
static void sample_dead(wreq *r, sample_out *o)
{
    *o = (sample_out){.req = r, .token = r->seq->tokens[r->seq->n_tokens - 1], .dead = true};
}

/* What comes before the draw, one item at a time: the grammar's mask (the guides share one
 * cache) and the end tokens an ignore_eos request may not draw. */
static void prepare_item(worker *w, wreq *r, float *logits, sample_out *o)
{
    char why[128];
    if (r->guide.e && !dy_guide_mask(&w->guides, &r->guide, logits, !r->ignore_eos, why,
                                     sizeof why)) {
        fprintf(stderr, "dyad worker %d: request %llu: %s\n", w->cfg.worker_id,
                (unsigned long long)r->id, why);
        sample_dead(r, o);
        return;
    }
    if (r->ignore_eos)
        for (int i = 0; i < w->n_eog; i++)
            logits[w->eog_ids[i]] = -INFINITY;
    *o = (sample_out){.req = r};
}

static void draw_item(dy_sampler *s, const float *logits, sample_out *o)
{
    wreq *r = o->req;
    o->token = dy_sample(s, &r->sampling, &r->rng, logits);
    o->n_top = r->want_logprobs ? r->n_logprobs : 0;
    o->logprob = r->want_logprobs ? dy_logprob(s, logits, o->token, o->n_top, o->top_ids,
                                               o->top_lps)
                                  : 0.0f;
}

/* The draws of a step's n items, split by item across the engine's threads: an item's draw
 * depends only on its logits and its request's random stream, so which thread makes it
 * changes nothing. */
typedef struct {
    worker *w;
    int n;
} draw_job;

static void draw_phase(void *ctx, int ith, int nth)
{
    const draw_job *j = ctx;
    const int V = j->w->model->hp.vocab_size, per = (j->n + nth - 1) / nth;
    for (int k = per * ith; k < per * (ith + 1) && k < j->n; k++) {
        sample_out *o = &j->w->outs[k];
        if (!o->dead && !o->req->prefill_only)
            draw_item(j->w->samplers[ith], j->w->logits + (size_t)k * V, o);
    }
}

/* How a stop string ends an answer: "stop", except that an answer whose grammar it cuts short
 * reports "length" — it was cut off, and never claims to be whole. */
static dy_end guided_cut(const wreq *r)
{
    return r->guide.e ? DY_END_LENGTH : DY_END_STOP;
}

/* Sends the token (its text released through the stop filter) or finishes the request. */
/* The request ends here with an error its client gets; its sequence and blocks are freed. */
static void end_with_error(worker *w, wreq *r, const char *msg)
{
    dy_worker_send_error(w, r->id, msg);
    dy_worker_drop_req(w, r);
}

static void deliver(worker *w, const sample_out *o)
{
    wreq *r = o->req;
    dy_seq *q = r->seq;
    r->generated++;
    dy_end fin = DY_END_NONE;
    char text[2 * DY_WIRE_MAX_TEXT];
    size_t text_len = 0;
    if (o->dead) {
        end_with_error(w, r, "the answer's grammar admits no token here");
        return;
    }
    if (!r->ignore_eos && dy_tokenizer_is_eog(w->model->tok, o->token)) {
        fin = DY_END_STOP;
    } else {
        char piece[512];
        int32_t prev = q->n_tokens >= 2 ? q->tokens[q->n_tokens - 2] : -1;
        int n = dy_token_to_piece(w->model->tok, prev, o->token, piece, sizeof piece);
        if (n > (int)sizeof piece)
            n = (int)sizeof piece;
        char why[128];
        if (r->guide.e &&
            !dy_guide_advance(&r->guide, o->token, piece, (size_t)n, why, sizeof why)) {
            end_with_error(w, r, why);
            return;
        }
        const char *out;
        size_t out_len;
        bool stopped = dy_stop_feed(&r->stop, piece, (size_t)n, &out, &out_len);
        if (r->stop.failed) { /* the piece is lost: the answer would have a hole */
            end_with_error(w, r, "out of memory");
            return;
        }
        if (stopped)
            fin = guided_cut(r);
        else if (r->guide.e && !dy_gstate_can_continue(&r->guide.st))
            fin = DY_END_STOP; /* the grammar is whole and nothing may follow: no end token needed */
        release_text(r, out, out_len, text, &text_len);
        dy_msg_token m = {.id = r->id, .token = o->token, .logprob = o->logprob,
                          .n_top = (uint8_t)o->n_top, .text = text, .text_len = (uint32_t)text_len};
        memcpy(m.top_ids, o->top_ids, sizeof(int32_t) * (size_t)o->n_top);
        memcpy(m.top_logprobs, o->top_lps, sizeof(float) * (size_t)o->n_top);
        dy_wire_token(&w->tx, &m);
    }
    if (!fin && (r->generated >= r->max_tokens || q->n_tokens >= q->max_len))
        fin = DY_END_LENGTH;
    if (!fin)
        return;
    const char *rest = "";
    size_t rest_len = 0;
    if (!r->stop.stopped)
        dy_stop_flush(&r->stop, &rest, &rest_len);
    if (r->stop.failed) {
        end_with_error(w, r, "out of memory");
        return;
    }
    memcpy(text, r->hold, (size_t)r->n_hold); /* a dangling partial character is sent as is */
    memcpy(text + r->n_hold, rest, rest_len);
    if (r->session) /* a conversation's turn: its KV waits for the next one */
        dy_kv_tiers_hold_begin(w->tiers, r->session, q->hashes, q->n_published, r->hold_ms);
    send_done(w, r->id, fin, r, text, (size_t)r->n_hold + rest_len);
    dy_worker_drop_req(w, r);
}

static void fail_plan(worker *w, const dy_plan *p, const char *msg)
{
    for (int i = 0; i < p->n_items; i++) {
        wreq *r = p->items[i].seq->user;
        if (r->prefill_only) {
            dy_msg_prefill_done d = {.id = r->id, .ok = 0, .text = msg, .text_len = (uint32_t)strlen(msg)};
            dy_wire_prefill_done(&w->tx, &d);
        } else
            dy_worker_send_error(w, r->id, msg);
        dy_worker_drop_req(w, r);
    }
}

/* The worker's load and counters now, as STATS carries them. */
static dy_msg_stats current_stats(const worker *w)
{
    dy_kv_cache_stats cs = dy_kv_cache_get_stats(w->kv);
    return (dy_msg_stats){
        .running = (uint32_t)dy_sched_n_running(w->sched),
        .waiting = (uint32_t)dy_sched_n_waiting(w->sched),
        .queued_prefill_tokens = (uint64_t)dy_sched_queued_prefill_tokens(w->sched),
        .kv_blocks_used = (uint32_t)(w->pool->n_blocks - dy_kv_cache_available(w->kv)),
        .kv_blocks_total = (uint32_t)w->pool->n_blocks,
        .active_decode_blocks = (uint32_t)dy_sched_running_blocks(w->sched),
        .kv_event_seq = w->kvpub.seq,
        .prompt_tokens = w->prompt_tokens,
        .generated_tokens = w->generated_tokens,
        .cache_lookup_blocks = cs.lookup_blocks,
        .cache_hit_blocks = cs.hit_blocks,
        .preemptions = dy_sched_total_preemptions(w->sched),
        .steps = w->steps,
        .step_seconds = w->step_seconds,
        .shm_bytes = (w->pool->shm_name[0] ? w->pool->data_bytes : 0) + dy_disagg_mapped_bytes(w),
    };
}

static void send_stats(worker *w)
{
    dy_msg_stats m = current_stats(w);
    dy_kv_tiers_stats(w->tiers, &m);
    dy_wire_stats(&w->tx, &m);
}

/* ---------------------------------------------------------------- the heartbeat */

static void *heartbeat_main(void *arg)
{
    worker *w = arg;
    heartbeat *h = &w->hb;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        if (dy_cond_wait_for(&h->wake, &h->mu, STATS_EVERY_S) != ETIMEDOUT || !h->in_step)
            continue;
        h->frame.len = 0;
        if (dy_wire_stats(&h->frame, &h->last))
            dy_write_all(w->conn.fd, h->frame.data, h->frame.len);
        /* The loop does not touch conn inside a step (it waits on mu to leave it). */
        dy_conn_fill(&w->conn);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static bool heartbeat_start(worker *w)
{
    heartbeat *h = &w->hb;
    pthread_mutex_init(&h->mu, NULL);
    dy_cond_init(&h->wake);
    h->started = pthread_create(&h->thread, NULL, heartbeat_main, w) == 0;
    return h->started;
}

static void heartbeat_stop(heartbeat *h)
{
    if (!h->started)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->wake);
    dy_buf_free(&h->frame);
    h->started = false;
}

/* Inside a step the thread beats; outside it the loop's own STATS do. What it beats is the
 * load as the step began: every frame before it in the stream was written by then, so the
 * frontend reads a report no older than the TOKEN and DONE frames it has applied. (The last
 * STATS the loop sent may be steps old: replayed after a DONE, it would put a finished
 * request's blocks back on the router's books until the next report.) */
static void heartbeat_enter_step(worker *w)
{
    dy_msg_stats m = current_stats(w);
    pthread_mutex_lock(&w->hb.mu);
    w->hb.last = m;
    w->hb.in_step = true;
    pthread_mutex_unlock(&w->hb.mu);
}

static void heartbeat_leave_step(heartbeat *h)
{
    pthread_mutex_lock(&h->mu);
    h->in_step = false;
    pthread_mutex_unlock(&h->mu);
}

/* ---------------------------------------------------------------- one step */

static void step(worker *w)
{
    const dy_plan *p;
    if (dy_sched_plan(w->sched, &p) == 0)
        return;
    int n_logits = 0, n_prompt_tokens = 0;
    for (int i = 0; i < p->n_items; i++) {
        const dy_plan_item *it = &p->items[i];
        w->spans[i] = (dy_span){it->seq->tokens + it->start, it->n, it->start, it->seq->blocks,
                                it->seq->n_blocks, it->logits};
        n_logits += it->logits;
        if (it->start < it->seq->n_prompt)
            n_prompt_tokens += it->n;
    }
    w->prompt_tokens += (uint64_t)n_prompt_tokens;
    /* Forked samples get their own copy of a shared, partly filled block before writing. */
    for (int i = 0; i < p->n_copies; i++)
        dy_kv_copy_block(w->pool, p->copies[i].dst, p->copies[i].src);
    char err[256];
    double t0 = dy_now();
    for (int i = 0; i < p->n_items; i++) {
        wreq *r = p->items[i].seq->user;
        if (r->scheduled == 0)
            r->scheduled = t0;
    }
    heartbeat_enter_step(w);
    int rc = dy_engine_step(w->engine, w->spans, p->n_items, w->logits, err, sizeof err);
    heartbeat_leave_step(&w->hb);
    if (rc != 0) {
        fprintf(stderr, "dyad worker %d: step failed: %s\n", w->cfg.worker_id, err);
        fail_plan(w, p, "the engine step failed");
        return;
    }
    double dt = dy_now() - t0;
    w->step_seconds += dt;
    w->steps++;
    dy_kv_tiers_observe_prefill(w->tiers, n_prompt_tokens, dt);
    const int V = w->model->hp.vocab_size;
    for (int i = 0, k = 0; i < p->n_items; i++)
        if (p->items[i].logits) {
            wreq *r = p->items[i].seq->user;
            if (r->prefill_only) /* its prompt is done: nothing to sample, KV to ship */
                w->outs[k] = (sample_out){.req = r};
            else
                prepare_item(w, r, w->logits + (size_t)k * V, &w->outs[k]);
            k++;
        }
    draw_job dj = {w, n_logits};
    if (n_logits >= 4)
        dy_engine_run(w->engine, draw_phase, &dj);
    else
        draw_phase(&dj, 0, 1);
    for (int k = 0; k < n_logits; k++)
        w->sampled[k] = w->outs[k].token;
    dy_sched_commit(w->sched, w->sampled);
    for (int k = 0; k < n_logits; k++) {
        if (w->outs[k].req->prefill_only) {
            dy_disagg_ship(w, w->outs[k].req);
        } else {
            w->generated_tokens++;
            deliver(w, &w->outs[k]);
        }
    }
}

static bool flush(worker *w)
{
    pthread_mutex_lock(&w->hb.mu);
    bool ok = !w->tx.oom && dy_write_all(w->conn.fd, w->tx.data, w->tx.len);
    pthread_mutex_unlock(&w->hb.mu);
    w->tx.len = 0;
    return ok;
}

/* ---------------------------------------------------------------- setup */

/* The lower KV tiers (--kv-host-mem, --kv-disk-dir), and their events. */
static int setup_tiers(worker *w, char *err, size_t errlen)
{
    const dy_worker_config *c = &w->cfg;
    dy_kv_tiers_config tc = {c->kv_host_mib, c->kv_disk_dir, c->kv_disk_gib, c->kv_offload,
                             c->kv_disk_min_uses, c->worker_id, c->kv_hold, c->kv_hold_ttl_s,
                             c->kv_hold_margin_ms / 1e3, c->kv_hold_share,
                             c->kv_hold_disk_after_s};
    w->tiers = dy_kv_tiers_new(&tc, w->kv, w->sched, err, errlen);
    if (!w->tiers)
        return err[0] ? -1 : 0;
    dy_kv_tier *lower[2] = {dy_kv_tiers_host(w->tiers), dy_kv_tiers_disk(w->tiers)};
    for (int i = 0; i < 2 && !c->no_kv_events; i++)
        if (lower[i] && !dy_kv_publish_add_tier(&w->kvpub, lower[i])) {
            snprintf(err, errlen, "out of memory for KV tier events");
            return -1;
        }
    return 0;
}

static int setup(worker *w, char *err, size_t errlen)
{
    const dy_worker_config *c = &w->cfg;
    if (!(w->model = dy_model_load(c->model, c->tokenizer, err, errlen)))
        return -1;
    if (!w->model->tok) {
        snprintf(err, errlen, "%s has no tokenizer (pass --tokenizer)", c->model);
        return -1;
    }
    const dy_kv_shape shape = dy_model_kv_shape(w->model, c->block_size, (dy_kv_type)c->kv_type);
    const dy_hparams *hp = &w->model->hp;
    size_t block_bytes = dy_kv_shape_block_bytes(&shape);
    int blocks = c->kv_blocks ? c->kv_blocks : (int)(((size_t)c->kv_mem_mib << 20) / block_bytes);
    if (blocks < 2) {
        snprintf(err, errlen, "the KV cache of %d MiB holds fewer than 2 blocks of %zu bytes",
                 c->kv_mem_mib, block_bytes);
        return -1;
    }
    if (c->role == DY_ROLE_DECODE || c->switchable) {
        /* Prefill workers on this host write finished blocks straight into this pool (a
         * switchable worker may become a decode worker later, so it starts with one too). */
        char name[64];
        snprintf(name, sizeof name, "/" DY_KV_SHM_NAME, (int)getpid(), c->worker_id);
        w->pool = dy_kv_pool_make(blocks, &shape, name);
        if (!w->pool) {
            snprintf(err, errlen, "cannot allocate %d KV blocks (%zu MiB) in shared memory "
                     "(/dev/shm full or too small? lower --kv-mem)", blocks,
                     (size_t)blocks * block_bytes >> 20);
            return -1;
        }
    } else
        w->pool = dy_kv_pool_make(blocks, &shape, NULL);
    if (w->pool && c->kv_listen) {
        char host[DY_WIRE_MAX_PEER + 1];
        snprintf(host, sizeof host, "%s", c->kv_listen);
        char *colon = strrchr(host, ':');
        int port = colon ? atoi(colon + 1) : 0;
        if (colon)
            *colon = 0;
        if (!(w->rx = dy_xfer_rx_start((dy_xfer_kind)c->kv_receiver, w->pool, host, port, err,
                                         errlen)))
            return -1;
    }
    w->kv = w->pool ? dy_kv_cache_new(w->pool, w->model->fingerprint) : NULL;
    dy_sched_config sc = {c->max_batch_tokens, c->max_running, c->no_prefix_cache};
    w->sched = w->kv ? dy_sched_new(&sc, w->kv) : NULL;
    w->samplers = calloc((size_t)c->threads, sizeof *w->samplers);
    for (int i = 0; w->samplers && i < c->threads; i++)
        if (!(w->samplers[i] = dy_sampler_new(hp->vocab_size)))
            break;
    w->logits = malloc(sizeof(float) * (size_t)hp->vocab_size * (size_t)c->max_running);
    w->spans = malloc(sizeof *w->spans * (size_t)c->max_running);
    w->sampled = malloc(sizeof *w->sampled * (size_t)c->max_running);
    w->outs = malloc(sizeof *w->outs * (size_t)c->max_running);
    w->eog_ids = malloc(sizeof *w->eog_ids * (size_t)hp->vocab_size);
    if (!w->sched || !w->samplers || !w->samplers[c->threads - 1] || !w->logits || !w->spans || !w->sampled || !w->outs ||
        !w->eog_ids) {
        snprintf(err, errlen, "out of memory for %d KV blocks", blocks);
        return -1;
    }
    if (!c->no_kv_events && !dy_kv_publish_init(&w->kvpub, w->kv, (uint32_t)c->worker_id)) {
        snprintf(err, errlen, "out of memory for KV events");
        return -1;
    }
    if (setup_tiers(w, err, errlen) != 0)
        return -1;
    for (int i = 0; i < hp->vocab_size; i++)
        if (dy_tokenizer_is_eog(w->model->tok, i))
            w->eog_ids[w->n_eog++] = i;
    if (!dy_guides_init(&w->guides, w->model->tok, hp->vocab_size, w->eog_ids, w->n_eog)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->engine = dy_engine_new(w->model, w->pool, c->threads, c->max_batch_tokens, err, errlen);
    return w->engine ? 0 : -1;
}

static void teardown(worker *w)
{
    while (w->reqs)
        dy_worker_drop_req(w, w->reqs);
    dy_disagg_free(w);
    dy_kv_tiers_free(w->tiers); /* waits for its copies: before the pool goes */
    dy_kv_publish_free(&w->kvpub);
    dy_xfer_rx_stop(w->rx);
    dy_engine_free(w->engine);
    dy_sched_free(w->sched);
    dy_kv_cache_free(w->kv);
    dy_kv_pool_free(w->pool);
    for (int i = 0; w->samplers && i < w->cfg.threads; i++)
        dy_sampler_free(w->samplers[i]);
    free(w->samplers);
    dy_guides_free(&w->guides);
    dy_model_free(w->model);
    free(w->logits);
    free(w->spans);
    free(w->sampled);
    free(w->outs);
    free(w->eog_ids);
    dy_conn_free(&w->conn);
    dy_buf_free(&w->tx);
}

/* Appends HELLO: what this worker serves, in its role now. */
static void send_hello(worker *w)
{
    const dy_worker_config *c = &w->cfg;
    dy_msg_hello hello = {(uint32_t)c->worker_id, (uint32_t)getpid(), w->model->fingerprint,
                          (uint32_t)w->model->hp.ctx_len, (uint32_t)w->model->hp.vocab_size,
                          (uint32_t)w->pool->n_blocks, (uint32_t)c->block_size,
                          (uint8_t)c->role, (uint32_t)dy_kv_block_bytes(w->pool), "", ""};
    snprintf(hello.shm_name, sizeof hello.shm_name, "%s", w->pool->shm_name);
    if (w->rx)
        snprintf(hello.tcp_addr, sizeof hello.tcp_addr, "%s", dy_xfer_rx_addr(w->rx));
    dy_wire_hello(&w->tx, &hello);
}

/* A role switch the frontend asked for, once nothing is in flight: the model, the pool and
 * its prefix cache stay; the frontend learns the new role from HELLO and the cache from the
 * snapshot that follows it, as for a new worker. */
static void take_next_role(worker *w)
{
    w->cfg.role = w->next_role;
    w->next_role = -1;
    send_hello(w);
    if (!w->cfg.no_kv_events)
        w->kvpub.want_snapshot = true;
}

int dy_worker_run(const dy_worker_config *cfg)
{
    worker w = {.cfg = *cfg, .next_role = -1};
    char err[1024];
    /* A file-size limit reached by the disk tier is an I/O error that switches the tier off,
     * not a signal that ends the worker. */
    signal(SIGXFSZ, SIG_IGN);
    dy_conn_init(&w.conn, cfg->fd);
    if (setup(&w, err, sizeof err) != 0) {
        fprintf(stderr, "dyad worker %d: %s\n", cfg->worker_id, err);
        teardown(&w);
        return 1;
    }
    fcntl(cfg->fd, F_SETFL, fcntl(cfg->fd, F_GETFL) | O_NONBLOCK);
    if (!heartbeat_start(&w)) {
        fprintf(stderr, "dyad worker %d: cannot start the heartbeat thread\n", cfg->worker_id);
        teardown(&w);
        return 1;
    }
    send_hello(&w);
    bool alive = flush(&w);
    while (alive) {
        dy_disagg_poll(&w);
        bool busy = dy_sched_n_running(w.sched) + dy_sched_n_waiting(w.sched) > 0;
        struct pollfd pf = {cfg->fd, POLLIN, 0};
        int ready = poll(&pf, 1, busy ? 0 : w.n_awaiting || dy_kv_tiers_busy(w.tiers) ? 1 : 100);
        if ((ready > 0 || dy_conn_pending(&w.conn)) && !read_frames(&w))
            break;
        if (busy)
            step(&w);
        else if (w.next_role >= 0 && !w.reqs && !w.n_awaiting)
            take_next_role(&w);
        if (w.tiers) /* after the step: copies down what it published */
            dy_kv_tiers_tick(w.tiers);
        if (!cfg->no_kv_events)
            dy_kv_publish_flush(&w.kvpub, w.kv, &w.tx); /* before STATS, which names its seq */
        /* A finished request changes the load at once: the STATS goes out right behind its
         * DONE, before the client that reads the answer can send its next request. */
        double t = dy_now();
        if (w.stats_due || t - w.last_stats >= STATS_EVERY_S) {
            send_stats(&w);
            w.last_stats = t;
            w.stats_due = false;
        }
        alive = flush(&w);
        if (w.draining && !busy && !w.reqs)
            break;
    }
    heartbeat_stop(&w.hb);
    teardown(&w);
    return 0;
}
