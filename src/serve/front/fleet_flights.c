/* fleet_flights.c — the fleet's in-flight table (fleet_impl.h): which sequence runs on which
 * worker for which job choice. Submitting asks placement (route/place.h) where each prompt
 * goes and sends it there; tokens and ends coming back are routed to their choices; a
 * worker's death reruns the choices that had not started. */
#include "serve/front/fleet_impl.h"
#include "kv/block_hash.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---------------------------------------------------------------- the table */

flight *dy_fleet_add_flight(slot *s, uint64_t id, dy_job *job, int choice)
{
    if (s->n_fl == s->cap_fl) {
        int cap = s->cap_fl ? s->cap_fl * 2 : 64;
        flight *f = realloc(s->fl, sizeof *f * (size_t)cap);
        if (!f)
            abort(); /* a few bytes per sequence: out of memory here is fatal */
        s->fl = f;
        s->cap_fl = cap;
    }
    s->fl[s->n_fl] = (flight){.id = id, .job = job, .choice = choice, .group = 1, .kind = FL_GEN,
                              .prefill_slot = -1, .decode_slot = -1};
    return &s->fl[s->n_fl++];
}

flight *dy_fleet_find_flight(slot *s, uint64_t id)
{
    for (int i = 0; i < s->n_fl; i++)
        if (s->fl[i].id == id)
            return &s->fl[i];
    return NULL;
}

void dy_fleet_remove_flight(slot *s, flight *f)
{
    dy_fleet *w = s->fleet;
    const int fed = f->kind == FL_PREFILL ? f->decode_slot : -1;
    *f = s->fl[--s->n_fl];
    dy_fleet_drain_check(w, s);
    if (fed >= 0 && fed < w->cfg.n_workers)
        dy_fleet_drain_check(w, &w->slots[fed]);
}

int dy_fleet_total_flights(const dy_fleet *w)
{
    int n = 0;
    for (int i = 0; i < w->cfg.n_workers; i++)
        n += w->slots[i].n_fl;
    return n;
}

/* Sequences sent that have not produced their first token (what admission counts). */
static int waiting_sequences(const dy_fleet *w)
{
    int n = 0;
    for (int i = 0; i < w->cfg.n_workers; i++)
        for (int k = 0; k < w->slots[i].n_fl; k++) {
            const flight *f = &w->slots[i].fl[k];
            n += f->kind == FL_GEN && !f->job->choices[f->choice].started;
        }
    return n;
}

/* ---------------------------------------------------------------- placement */

dy_route_pool dy_fleet_pool_of_role(int role)
{
    return role == DY_ROLE_PREFILL ? DY_POOL_PREFILL
           : role == DY_ROLE_DECODE ? DY_POOL_DECODE : DY_POOL_AGG;
}

/* The fleet as placement sees it now. */
static dy_place_view place_view(dy_fleet *w)
{
    for (int i = 0; i < w->cfg.n_workers; i++) {
        const slot *s = &w->slots[i];
        /* Starting, draining and parked workers take no new sequences, nor a restarted one
         * whose last incarnation failed to load, until this one has. */
        const bool candidate = s->alive && !s->unreachable && s->state == DY_SLOT_ACTIVE &&
                               (s->hello_seen || s->load_failures == 0);
        w->view[i] = (dy_place_worker){.alive = candidate,
                                       .pool = dy_fleet_pool_of_role(s->role),
                                       .kv_blocks = (int)s->hello.kv_blocks};
    }
    /* Every worker was started with cfg.worker.block_size (and reports it back in HELLO). */
    return (dy_place_view){.workers = w->view, .n_workers = w->cfg.n_workers,
                           .block_size = w->cfg.worker.block_size,
                           .max_samples = DY_WIRE_MAX_SAMPLES, .route = w->cfg.route,
                           .router = w->router};
}

/* The chained hashes of the prompt's full blocks, exactly as the workers compute them (the
 * model's fingerprint from HELLO starts the chain), into a malloc'd *out. -1 if out of memory. */
static int prompt_hashes(const dy_fleet *w, const dy_msg_request *r, uint64_t **out)
{
    const int bs = w->cfg.worker.block_size, n = (int)r->n_prompt / bs;
    *out = malloc(sizeof(uint64_t) * (size_t)(n ? n : 1));
    if (!*out)
        return -1;
    return dy_block_hashes(w->slots[0].hello.fingerprint, r->prompt, (int)r->n_prompt, bs, *out);
}

static dy_place_request place_request(const dy_fleet *w, const dy_msg_request *r,
                                      const uint64_t *hashes, int nb, int n_samples,
                                      bool local_prefill)
{
    return (dy_place_request){.prompt_tokens = (int)r->n_prompt, .hashes = hashes, .n_blocks = nb,
                              .max_tokens = (int)r->max_tokens, .n_samples = n_samples,
                              .local_prefill = local_prefill, .by_session = r->session != 0,
                              .session_worker = r->session ? dy_sessions_worker(w->sessions,
                                                                                r->session)
                                                           : -1};
}

/* Where the prompt (the next n_samples of its samples) runs; the decision enters the
 * router's load accounting through *ticket and the router's totals. gen -1: no worker, or
 * (*no_memory set, when given) no memory to decide. */
static dy_placement place(dy_fleet *w, const dy_msg_request *r, int n_samples, bool local_prefill,
                          dy_router_ticket *ticket, bool *no_memory)
{
    dy_placement p = {.gen = -1, .prefill = -1};
    uint64_t *hashes = NULL;
    int nb = prompt_hashes(w, r, &hashes);
    if (no_memory)
        *no_memory = nb < 0;
    if (nb >= 0) {
        dy_place_view v = place_view(w);
        dy_place_request pr = place_request(w, r, hashes, nb, n_samples, local_prefill);
        p = dy_place(&v, &pr, dy_now(), ticket);
    }
    if (p.gen >= 0) {
        w->slots[p.gen].routed++;
        w->rt.decisions++;
        w->rt.overlap_blocks += (uint64_t)p.overlap_blocks;
        for (int t = 0; t < DY_KV_N_TIERS; t++)
            w->rt.tier_blocks[t] += (uint64_t)p.tier_blocks[t];
    }
    free(hashes);
    return p;
}

int dy_fleet_pick_prefill(dy_fleet *w, const dy_msg_request *r, int planned)
{
    uint64_t *hashes = NULL;
    int nb = prompt_hashes(w, r, &hashes);
    int pick = -1;
    if (nb >= 0) {
        dy_place_view v = place_view(w);
        dy_place_request pr = place_request(w, r, hashes, nb, 1, false);
        pick = dy_place_prefill(&v, &pr, planned, dy_now());
    }
    free(hashes);
    return pick;
}

/* ---------------------------------------------------------------- sending */

void dy_fleet_send_cancel(slot *s, uint64_t id)
{
    dy_buf b = {0};
    dy_msg_cancel m = {id};
    if (dy_wire_cancel(&b, &m))
        dy_fleet_send_frame(s, &b);
    dy_buf_free(&b);
}

typedef enum { SENT, NOT_SENT, UNREACHABLE } send_result;

/* Sends choices [first, first + count) of a job — samples of one prompt, with consecutive
 * random streams — to slot s as one request with ids id .. id + count - 1, its prompt
 * prefilled by slot `prefill` (or locally if -1). UNREACHABLE: the frame could not be sent
 * (the worker's connection is being torn down), and the slot is marked so that placement
 * puts the samples elsewhere; NOT_SENT: out of memory. */
static send_result send_samples(slot *s, dy_job *job, int first, int count, uint64_t id,
                                int prefill)
{
    for (int i = 0; i < count; i++) {
        dy_choice *c = &job->choices[first + i];
        c->seq_id = c->req.id = id + (uint64_t)i;
        c->req.remote_prefill = prefill >= 0;
        c->worker = s->index;
    }
    dy_msg_request m = job->choices[first].req;
    m.n_samples = (uint32_t)count;
    dy_buf b = {0};
    if (!dy_wire_request(&b, &m) || b.oom) {
        dy_buf_free(&b);
        return NOT_SENT;
    }
    bool ok = dy_fleet_send_frame(s, &b);
    dy_buf_free(&b);
    if (!ok) {
        s->unreachable = true;
        return UNREACHABLE;
    }
    for (int i = 0; i < count; i++) { /* the first sample's flight carries the prefill */
        flight *f = dy_fleet_add_flight(s, id + (uint64_t)i, job, first + i);
        f->prefill_slot = i ? -1 : prefill;
        f->group = i ? 1 : count;
    }
    if (prefill < 0)
        s->fleet->xfer.local++;
    return SENT;
}

/* Places and sends the samples [first, first + count) of one prompt. They stay together on
 * one worker — one prefill, one KV transfer, forked blocks — unless that worker's KV pool
 * could not hold them all at once; then they go in parts that fit, each placed anew
 * (docs/repeated-sampling.md). A part whose worker cannot be reached is placed again on
 * another. OK, or UNAVAILABLE (no worker) or NO_MEMORY for the samples not sent. */
static dy_submit_result submit_samples(dy_fleet *w, dy_job *job, int first, int count)
{
    while (count > 0) {
        const dy_msg_request *r = &job->choices[first].req;
        dy_router_ticket ticket;
        bool no_memory;
        dy_placement pl = place(w, r, count, false, &ticket, &no_memory);
        if (pl.gen < 0)
            return no_memory ? DY_SUBMIT_NO_MEMORY : DY_SUBMIT_UNAVAILABLE;
        slot *s = &w->slots[pl.gen];
        int part = pl.samples;
        pthread_mutex_lock(&job->mu);
        job->refs += part; /* one per flight */
        pthread_mutex_unlock(&job->mu);
        uint64_t id = w->next_id;
        w->next_id += (uint64_t)part;
        const send_result sent = send_samples(s, job, first, part, id, pl.prefill);
        if (sent != SENT) {
            pthread_mutex_lock(&job->mu);
            for (int i = 0; sent == NOT_SENT && i < part; i++)
                dy_choice_fail(&job->choices[first + i], "out of memory");
            job->refs -= part;
            pthread_mutex_unlock(&job->mu);
            dy_router_on_finished(w->router, &ticket);
            if (sent == UNREACHABLE)
                continue; /* the same samples, placed again without that worker */
        } else {
            flight *lead = dy_fleet_find_flight(s, id);
            lead->has_ticket = true;
            lead->ticket = ticket;
            pthread_mutex_lock(&job->mu);
            for (int i = 0; i < part; i++)
                job->choices[first + i].overlap_blocks = pl.overlap_blocks;
            pthread_mutex_unlock(&job->mu);
        }
        first += part;
        count -= part;
    }
    return DY_SUBMIT_OK;
}

dy_submit_result dy_fleet_submit(dy_fleet *w, dy_job *job, char *err, size_t errlen)
{
    pthread_mutex_lock(&w->mu);
    dy_submit_result rc = DY_SUBMIT_OK;
    if (w->stopping) {
        snprintf(err, errlen, "the server is shutting down");
        rc = DY_SUBMIT_UNAVAILABLE;
    } else if (dy_place_admit(waiting_sequences(w), job->n_choices, w->cfg.max_queue) ==
               DY_ADMIT_QUEUE_FULL) {
        snprintf(err, errlen, "the server's queue is full (%d sequences waiting)", w->cfg.max_queue);
        rc = DY_SUBMIT_QUEUE_FULL;
    }
    uint64_t session = job->n_choices > 0 ? job->choices[0].req.session : 0;
    if (rc == DY_SUBMIT_OK && session) /* a conversation's next turn: learn, then follow it */
        dy_sessions_arrive(w->sessions, session, dy_now());
    int group = job->group > 0 ? job->group : 1;
    for (int first = 0; rc == DY_SUBMIT_OK && first < job->n_choices; first += group) {
        int count = job->n_choices - first < group ? job->n_choices - first : group;
        dy_submit_result sr = submit_samples(w, job, first, count);
        if (sr != DY_SUBMIT_OK) {
            const char *why = sr == DY_SUBMIT_NO_MEMORY ? "out of memory" : "no worker is available";
            if (first == 0) {
                snprintf(err, errlen, "%s", why);
                rc = sr;
                break;
            }
            pthread_mutex_lock(&job->mu); /* a later prompt: its choices fail */
            for (int i = first; i < first + count; i++)
                dy_choice_fail(&job->choices[i], why);
            pthread_mutex_unlock(&job->mu);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void dy_fleet_turn_ended(dy_fleet *w, const dy_choice *c, const char *tool, bool hinted)
{
    if (!c->req.session || c->worker < 0)
        return;
    uint64_t tool_key = tool ? XXH3_64bits(tool, strlen(tool)) | 1 : 0;
    pthread_mutex_lock(&w->mu);
    double expected = dy_sessions_end(w->sessions, c->req.session, c->worker, tool_key, dy_now());
    slot *s = &w->slots[c->worker];
    if (!hinted && s->alive) {
        /* The worker holds the turn's KV from its end: say when it is wanted again — the
         * tool's learned time, or not known — or, when the answer called no tool, that it is
         * not held for a tool at all. */
        dy_msg_hold m = {.session = c->req.session, .expected_ms = DY_WIRE_NO_HOLD,
                         .release = !tool};
        if (expected >= 0)
            m.expected_ms = expected * 1e3 < DY_WIRE_MAX_HOLD_MS ? (uint32_t)(expected * 1e3)
                                                                  : DY_WIRE_MAX_HOLD_MS;
        dy_buf b = {0};
        if (dy_wire_hold(&b, &m))
            dy_fleet_send_frame(s, &b);
        dy_buf_free(&b);
    }
    pthread_mutex_unlock(&w->mu);
}

/* ---------------------------------------------------------------- cancelling */

static void cancel_choice(dy_fleet *w, dy_job *job, int i)
{
    slot *ps;
    flight *pf = dy_fleet_prefill_of(w, &job->choices[i], &ps);
    if (pf) {
        /* The prefill worker may be writing into blocks of this sequence: cancel there
         * first; its answer cancels the sequence on the decode worker. */
        pf->cancel_decode = true;
        dy_fleet_send_cancel(ps, pf->id);
        return;
    }
    dy_choice *c = &job->choices[i];
    pthread_mutex_lock(&job->mu);
    bool live = !c->done && c->worker >= 0;
    pthread_mutex_unlock(&job->mu);
    slot *s = live ? &w->slots[c->worker] : NULL;
    if (s && s->alive && dy_fleet_find_flight(s, c->seq_id))
        dy_fleet_send_cancel(s, c->seq_id);
}

void dy_fleet_cancel(dy_fleet *w, dy_job *job)
{
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < job->n_choices; i++)
        cancel_choice(w, job, i);
    pthread_mutex_unlock(&w->mu);
}

void dy_fleet_cancel_choice(dy_fleet *w, dy_job *job, int i)
{
    pthread_mutex_lock(&w->mu);
    if (i >= 0 && i < job->n_choices)
        cancel_choice(w, job, i);
    pthread_mutex_unlock(&w->mu);
}

/* ---------------------------------------------------------------- what comes back */

void dy_fleet_on_token(dy_fleet *w, slot *s, const dy_msg_token *t)
{
    pthread_mutex_lock(&w->mu);
    flight *f = dy_fleet_find_flight(s, t->id);
    if (f && f->has_ticket)
        dy_router_on_first_token(w->router, &f->ticket); /* idempotent */
    if (f) {
        dy_job *j = f->job;
        dy_choice *c = &j->choices[f->choice];
        pthread_mutex_lock(&j->mu);
        /* A token that cannot be kept fails the choice (an answer with a hole in it would be
         * wrong text); the worker stops it, and its DONE then finds the choice ended. */
        bool lost = !c->done && !dy_choice_push_token(c, t, dy_now());
        if (lost)
            dy_choice_fail(c, "out of memory");
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        if (lost)
            dy_fleet_send_cancel(s, t->id);
    }
    pthread_mutex_unlock(&w->mu);
}

void dy_fleet_on_done(dy_fleet *w, slot *s, const dy_msg_done *d)
{
    pthread_mutex_lock(&w->mu);
    flight *f = dy_fleet_find_flight(s, d->id);
    if (f && f->has_ticket) {
        dy_router_on_finished(w->router, &f->ticket);
        if (!f->prefilled_remotely)
            w->rt.cached_tokens += d->cached_tokens;
    }
    if (f) {
        dy_job *j = f->job;
        pthread_mutex_lock(&j->mu);
        if (!j->choices[f->choice].done) /* not failed already (a token it could not keep) */
            dy_choice_finish(&j->choices[f->choice], d);
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        dy_fleet_remove_flight(s, f);
        dy_job_unref(j);
        pthread_cond_broadcast(&w->changed);
    }
    pthread_mutex_unlock(&w->mu);
}

/* ---------------------------------------------------------------- a worker died */

/* A generating flight of a dead worker: placed anew (prefilled where it decodes) if it had
 * not started, else its choice fails. */
static void rerun_or_fail(dy_fleet *w, flight *f)
{
    dy_job *j = f->job;
    dy_choice *c = &j->choices[f->choice];
    pthread_mutex_lock(&j->mu);
    bool rerun = !c->started && !c->done && !w->stopping;
    pthread_mutex_unlock(&j->mu);
    while (rerun) {
        dy_router_ticket t;
        dy_placement pl = place(w, &c->req, 1, true, &t, NULL);
        if (pl.gen < 0)
            break;
        uint64_t id = w->next_id++;
        const send_result sent = send_samples(&w->slots[pl.gen], j, f->choice, 1, id, -1);
        if (sent == SENT) {
            flight *nf = dy_fleet_find_flight(&w->slots[pl.gen], id);
            nf->has_ticket = true;
            nf->ticket = t;
            return; /* the job reference moves with it */
        }
        dy_router_on_finished(w->router, &t);
        rerun = sent == UNREACHABLE; /* placed again without that worker */
    }
    pthread_mutex_lock(&j->mu);
    /* Stopping: the drain's deadline passed and the workers were stopped under it. */
    dy_choice_fail(c, w->stopping ? "the server is shutting down and this request did not "
                                    "finish within --drain-timeout."
                                  : "the worker running this request died");
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    dy_job_unref(j);
}

void dy_fleet_flights_on_death(dy_fleet *w, flight *fl, int n)
{
    for (int i = 0; i < n; i++) {
        if (fl[i].kind == FL_PREFILL)
            dy_fleet_prefill_lost(w, &fl[i]);
        else
            rerun_or_fail(w, &fl[i]);
    }
}
