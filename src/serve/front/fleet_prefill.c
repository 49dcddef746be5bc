/* fleet_prefill.c — disaggregated prefill, coordinated by the frontend (fleet_impl.h,
 * docs/disaggregation.md): KV_ALLOC from the decode worker -> PREFILL to a prefill worker ->
 * its PREFILL_DONE -> KV_READY to the decode worker. A prefill that fails, dies or stalls
 * past --xfer-timeout ends with KV_READY(!ok): the decode worker then computes the prompt
 * itself. When a decode worker's pool goes away, PEER_GONE tells the prefill workers to unmap
 * it. The fleet's janitor thread lives here too. */
#include "serve/front/fleet_impl.h"
#include "util/clock.h"

#include <signal.h>
#include <stdio.h>
#include <time.h>

flight *dy_fleet_prefill_of(dy_fleet *w, const dy_choice *c, slot **p)
{
    for (int i = 0; i < w->cfg.n_workers; i++)
        for (int k = 0; k < w->slots[i].n_fl; k++) {
            flight *f = &w->slots[i].fl[k];
            if (f->kind == FL_PREFILL && f->decode_slot == c->worker && f->decode_id == c->seq_id) {
                *p = &w->slots[i];
                return f;
            }
        }
    return NULL;
}

static void send_kv_ready(slot *d, uint64_t id, bool ok, uint32_t n_blocks)
{
    dy_buf b = {0};
    dy_msg_kv_ready m = {id, ok, n_blocks};
    if (dy_wire_kv_ready(&b, &m))
        dy_fleet_send_frame(d, &b);
    dy_buf_free(&b);
}

/* The decode worker s set blocks aside: hand the prompt to a prefill worker. */
void dy_fleet_on_kv_alloc(dy_fleet *w, slot *s, const dy_msg_kv_alloc *m)
{
    pthread_mutex_lock(&w->mu);
    flight *f = dy_fleet_find_flight(s, m->id);
    if (!f || f->kind != FL_GEN) {
        pthread_mutex_unlock(&w->mu);
        return;
    }
    if (m->local) {
        w->xfer.local++;
        pthread_mutex_unlock(&w->mu);
        return;
    }
    dy_choice *c = &f->job->choices[f->choice];
    int pi = dy_fleet_pick_prefill(w, &c->req, f->prefill_slot);
    const char *peer = dy_fleet_peer_name(w, s);
    dy_buf b = {0};
    /* The prefill runs under the decode sequence's id: its TCP frames name that sequence. */
    dy_msg_prefill pm = {.id = m->id, .xfer = (uint8_t)w->cfg.xfer,
                         .first_block = m->first_block, .n_blocks = m->n_blocks,
                         .dest = m->blocks, .n_prompt = c->req.n_prompt - 1, .prompt = c->req.prompt};
    snprintf(pm.peer, sizeof pm.peer, "%s", peer);
    slot *p = pi >= 0 ? &w->slots[pi] : NULL;
    if (!p || !peer[0] || !dy_wire_prefill(&b, &pm) || !dy_fleet_send_frame(p, &b)) {
        w->xfer.local++;
        send_kv_ready(s, m->id, false, 0); /* no prefill worker: compute it on the decode worker */
    } else {
        flight *pf = dy_fleet_add_flight(p, pm.id, f->job, f->choice);
        pf->group = f->group;
        pf->kind = FL_PREFILL;
        pf->decode_slot = s->index;
        pf->decode_id = m->id;
        pf->tokens = (int64_t)pm.n_prompt - m->cached_tokens;
        pf->n_blocks = m->n_blocks;
        pf->t_sent = dy_now();
        w->xfer.remote++;
        pthread_mutex_lock(&f->job->mu);
        f->job->refs++; /* the prefill flight holds the job too */
        pthread_mutex_unlock(&f->job->mu);
    }
    dy_buf_free(&b);
    pthread_mutex_unlock(&w->mu);
}

/* Ends a prefill flight: tell its decode worker to go on (ok: the KV is there; else compute
 * locally), or cancel it there when its client has left. */
static void end_prefill(dy_fleet *w, slot *p, flight *f, bool ok)
{
    slot *d = &w->slots[f->decode_slot];
    if (d->alive && dy_fleet_find_flight(d, f->decode_id)) {
        if (f->cancel_decode)
            dy_fleet_send_cancel(d, f->decode_id);
        else
            send_kv_ready(d, f->decode_id, ok,
                          ok && DY_XFER_NETWORKED(w->cfg.xfer) ? f->n_blocks : 0);
    }
    dy_job *j = f->job;
    dy_fleet_remove_flight(p, f);
    dy_job_unref(j);
}

/* One transfer fed every sample of the prompt: each choice gets its figures. */
static void record_transfer(slot *p, flight *f, const dy_msg_prefill_done *m)
{
    dy_job *j = f->job;
    pthread_mutex_lock(&j->mu);
    for (int k = 0; k < f->group; k++) {
        dy_choice *c = &j->choices[f->choice + k];
        c->prefill_worker = p->index;
        c->xfer_bytes = m->bytes;
        c->xfer_seconds = m->transfer_seconds;
        c->prefill_seconds = m->prefill_seconds;
    }
    pthread_mutex_unlock(&j->mu);
}

void dy_fleet_on_prefill_done(dy_fleet *w, slot *p, const dy_msg_prefill_done *m)
{
    pthread_mutex_lock(&w->mu);
    flight *f = dy_fleet_find_flight(p, m->id);
    if (f && f->kind == FL_PREFILL) {
        if (m->ok) {
            flight *df = dy_fleet_find_flight(&w->slots[f->decode_slot], f->decode_id);
            if (df)
                df->prefilled_remotely = true;
            w->rt.cached_tokens += m->cached_tokens;
            w->xfer.transfers++;
            w->xfer.bytes += m->bytes;
            w->xfer.seconds += m->transfer_seconds;
            record_transfer(p, f, m);
        } else if (!f->cancel_decode) {
            w->xfer.failed++;
            fprintf(stderr, "dyad serve: prefill on worker %d failed (%.*s); prefilling locally\n",
                    p->index, (int)m->text_len, m->text);
        }
        end_prefill(w, p, f, m->ok);
        pthread_cond_broadcast(&w->changed);
    }
    pthread_mutex_unlock(&w->mu);
}

void dy_fleet_prefill_drop_feeding(dy_fleet *w, const slot *s)
{
    for (int i = 0; i < w->cfg.n_workers; i++)
        for (int k = w->slots[i].n_fl - 1; k >= 0; k--) {
            flight *f = &w->slots[i].fl[k];
            if (f->kind == FL_PREFILL && f->decode_slot == s->index) {
                dy_fleet_send_cancel(&w->slots[i], f->id);
                f->cancel_decode = true; /* nothing to tell the dead worker */
                end_prefill(w, &w->slots[i], f, false);
            }
        }
}

const char *dy_fleet_peer_name(const dy_fleet *w, const slot *s)
{
    return DY_XFER_NETWORKED(w->cfg.xfer) ? s->hello.tcp_addr : s->hello.shm_name;
}

void dy_fleet_peer_gone(dy_fleet *w, const slot *s)
{
    dy_msg_peer_gone m;
    snprintf(m.peer, sizeof m.peer, "%s", dy_fleet_peer_name(w, s));
    dy_buf b = {0};
    if (m.peer[0] && dy_wire_peer_gone(&b, &m))
        for (int i = 0; i < w->cfg.n_workers; i++)
            if (&w->slots[i] != s && w->slots[i].alive)
                dy_fleet_send_frame(&w->slots[i], &b);
    dy_buf_free(&b);
}

void dy_fleet_prefill_lost(dy_fleet *w, flight *f)
{
    w->xfer.failed++;
    slot *d = &w->slots[f->decode_slot];
    if (d->alive && dy_fleet_find_flight(d, f->decode_id))
        send_kv_ready(d, f->decode_id, false, 0);
    dy_job_unref(f->job);
}

/* Prefills past the timeout: the prefill worker is stuck, so it is killed; its death (seen by
 * its reader) sends each decode worker KV_READY(!ok) once the process is gone, so no late
 * write can land in blocks that were given up. */
static void kill_stalled_prefills(dy_fleet *w, double now)
{
    for (int i = 0; i < w->cfg.n_workers; i++) {
        slot *p = &w->slots[i];
        for (int k = 0; p->alive && k < p->n_fl; k++)
            if (p->fl[k].kind == FL_PREFILL && now - p->fl[k].t_sent > w->cfg.xfer_timeout_s) {
                fprintf(stderr, "dyad serve: prefill worker %d stalled for %.1f s; restarting "
                        "it and prefilling locally\n", i, now - p->fl[k].t_sent);
                w->xfer.timeouts++;
                dy_fleet_kill(p);
                break;
            }
    }
}

/* The fleet's periodic checks: stalled prefills, and workers gone silent. */
void *dy_fleet_janitor_main(void *arg)
{
    dy_fleet *w = arg;
    for (;;) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&w->mu);
        bool stop = w->stopping;
        double now = dy_now();
        if (!stop) {
            kill_stalled_prefills(w, now);
            dy_fleet_kill_silent(w, now);
        }
        pthread_mutex_unlock(&w->mu);
        if (stop)
            return NULL;
    }
}
