/* workers.c — see workers.h. One mutex (`mu`) guards the slots, their in-flight tables and
 * the live flags; a job's own mutex is always taken after it, never before.
 *
 * Disaggregated prefill is orchestrated here (docs/disaggregation.md): a sequence routed to
 * a prefill worker goes to its decode worker as REQUEST(remote_prefill); the decode worker
 * answers KV_ALLOC with the blocks it set aside; the prefill worker gets PREFILL with those
 * destinations; its PREFILL_DONE becomes KV_READY for the decode worker. */
#include "serve/front/workers.h"
#include "kv/kv_cache.h"
#include "serve/wire/wire_io.h"
#include "serve/worker/worker.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef enum { FL_GEN, FL_PREFILL } flight_kind;

/* A sequence on a worker: a generating one (FL_GEN), or a prompt a prefill worker computes
 * for a decode worker (FL_PREFILL). */
typedef struct {
    uint64_t id;
    dy_job *job;
    int choice;
    int group;             /* samples sharing this prompt: choices [choice, choice + group) */
    flight_kind kind;
    int prefill_slot;      /* FL_GEN routed for remote prefill: the planned prefill worker */
    int decode_slot;       /* FL_PREFILL: where the KV goes, and its sequence id there */
    uint64_t decode_id;
    int64_t tokens;        /* FL_PREFILL: prompt tokens to compute (load accounting) */
    uint32_t n_blocks;
    double t_sent;
    bool cancel_decode;    /* FL_PREFILL: the client left; cancel at the decode worker after */
    bool has_ticket;       /* FL_GEN, a prompt's first sample: the router's load accounting */
    bool prefilled_remotely; /* FL_GEN: a prefill worker computed its prompt (its cache hits
                              * are the ones that saved work, counted at PREFILL_DONE) */
    dy_router_ticket ticket;
} flight;

/* A worker's KV snapshot arriving in parts. */
typedef struct {
    uint64_t seq;
    uint32_t next_part, n_parts;
    uint64_t *hashes, *parents;
    int n, cap;
} snapshot_rx;

typedef struct {
    struct dy_workers *pool;
    int index;
    pid_t pid;
    int fd;
    bool alive, hello_seen;
    pthread_t reader;
    pthread_mutex_t wmu; /* serialises writes to fd */
    flight *fl;
    int n_fl, cap_fl;
    uint64_t restarts;
    int role;                 /* dy_worker_role */
    dy_msg_hello hello;
    snapshot_rx snap;
    bool resync_asked;        /* a KV_RESYNC is out; its snapshot has not completed */
    uint64_t routed;
    dy_msg_stats stats, base; /* base: counters of earlier incarnations */
} slot;

struct dy_workers {
    dy_workers_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a HELLO arrived, a worker died, a flight ended */
    slot *slots;
    uint64_t next_id;
    unsigned rr;
    bool stopping;
    dy_xfer_totals xfer;
    dy_router *router;        /* under mu */
    dy_router_totals rt;
    pthread_t janitor;
    bool janitor_started;
};

static void w_count_local(dy_workers *w)
{
    w->xfer.local++;
}

/* ---------------------------------------------------------------- processes */

static int spawn(dy_workers *w, slot *s, char *err, size_t errlen)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    const dy_workers_config *c = &w->cfg;
    char fd[16], id[16], th[16], kvm[16], kvb[16], bs[16], mbt[16], mr[16];
    snprintf(fd, sizeof fd, "%d", sv[1]);
    snprintf(id, sizeof id, "%d", s->index);
    snprintf(th, sizeof th, "%d", c->threads_per_worker);
    snprintf(kvm, sizeof kvm, "%d", c->kv_mem_mib);
    snprintf(kvb, sizeof kvb, "%d", c->kv_blocks);
    snprintf(bs, sizeof bs, "%d", c->block_size);
    snprintf(mbt, sizeof mbt, "%d", c->max_batch_tokens);
    snprintf(mr, sizeof mr, "%d", c->max_running);
    char *argv[64];
    int a = 0;
    /* An optional launcher in front, e.g. "ip netns exec hostA" (its words split on spaces). */
    char launcher[256] = "";
    const char *l = s->role == DY_ROLE_PREFILL ? c->prefill_launcher
                    : s->role == DY_ROLE_DECODE ? c->decode_launcher : NULL;
    if (l)
        snprintf(launcher, sizeof launcher, "%s", l);
    for (char *save = NULL, *tok = strtok_r(launcher, " ", &save); tok && a < 16;
         tok = strtok_r(NULL, " ", &save))
        argv[a++] = tok;
    const char *prog = a ? argv[0] : c->exe;
    argv[a++] = (char *)c->exe;
    argv[a++] = "worker";
    argv[a++] = "--fd"; argv[a++] = fd;
    argv[a++] = "--id"; argv[a++] = id;
    argv[a++] = "--model"; argv[a++] = (char *)c->model;
    if (c->tokenizer) {
        argv[a++] = "--tokenizer";
        argv[a++] = (char *)c->tokenizer;
    }
    argv[a++] = "--threads"; argv[a++] = th;
    argv[a++] = "--kv-mem"; argv[a++] = kvm;
    if (c->kv_blocks) {
        argv[a++] = "--kv-blocks";
        argv[a++] = kvb;
    }
    argv[a++] = "--block-size"; argv[a++] = bs;
    argv[a++] = "--max-batch-tokens"; argv[a++] = mbt;
    argv[a++] = "--max-running"; argv[a++] = mr;
    if (c->no_prefix_cache)
        argv[a++] = "--no-prefix-cache";
    if (c->no_kv_events)
        argv[a++] = "--no-kv-events";
    static const char *const roles[] = {"agg", "prefill", "decode"};
    argv[a++] = "--role"; argv[a++] = (char *)roles[s->role];
    char listen[DY_WIRE_MAX_PEER + 8];
    if (s->role == DY_ROLE_DECODE && c->xfer == DY_XFER_TCP) {
        snprintf(listen, sizeof listen, "%s:0", c->kv_host ? c->kv_host : "127.0.0.1");
        argv[a++] = "--kv-listen";
        argv[a++] = listen;
    }
    argv[a] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        /* Only async-signal-safe calls between fork and exec. The frontend blocks SIGINT and
         * SIGTERM (it takes them with sigwait) and ignores SIGPIPE; a signal mask and ignored
         * signals survive exec, so the worker gets the defaults back first — otherwise the
         * parent-death SIGTERM below could never end an orphaned worker. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) /* the frontend died before prctl took effect */
            _exit(1);
        fcntl(sv[1], F_SETFD, 0);
        execvp(prog, argv);
        _exit(127);
    }
    close(sv[1]);
    s->pid = pid;
    s->fd = sv[0];
    s->alive = true;
    s->hello_seen = false;
    return 0;
}

/* ---------------------------------------------------------------- flights */

static flight *add_flight(slot *s, uint64_t id, dy_job *job, int choice)
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

static flight *find_flight(slot *s, uint64_t id)
{
    for (int i = 0; i < s->n_fl; i++)
        if (s->fl[i].id == id)
            return &s->fl[i];
    return NULL;
}

static void remove_flight(slot *s, flight *f)
{
    *f = s->fl[--s->n_fl];
}

static int waiting_sequences(const dy_workers *w)
{
    int n = 0;
    for (int i = 0; i < w->cfg.n_workers; i++)
        for (int k = 0; k < w->slots[i].n_fl; k++) {
            const flight *f = &w->slots[i].fl[k];
            n += f->kind == FL_GEN && !f->job->choices[f->choice].started;
        }
    return n;
}

static void snapshot_reset(snapshot_rx *r);

/* ---------------------------------------------------------------- routing */

static int block_size(const dy_workers *w)
{
    return w->slots[0].hello.block_size ? (int)w->slots[0].hello.block_size : w->cfg.block_size;
}

/* The chained hashes of the prompt's full blocks, exactly as the workers compute them (the
 * model's fingerprint from HELLO starts the chain), into a malloc'd *out. -1 if out of memory. */
static int prompt_hashes(const dy_workers *w, const dy_msg_request *r, uint64_t **out)
{
    const int bs = block_size(w), n = (int)r->n_prompt / bs;
    *out = malloc(sizeof(uint64_t) * (size_t)(n ? n : 1));
    if (!*out)
        return -1;
    uint64_t parent = w->slots[0].hello.fingerprint;
    for (int i = 0; i < n; i++)
        parent = (*out)[i] = dy_block_hash(parent, r->prompt + (size_t)i * bs, bs);
    return n;
}

/* The live workers of the prefill pool, or of the pools that generate. */
static int pool_members(const dy_workers *w, bool prefill_pool, int *out)
{
    int n = 0;
    for (int i = 0; i < w->cfg.n_workers; i++)
        if (w->slots[i].alive && (w->slots[i].role == DY_ROLE_PREFILL) == prefill_pool)
            out[n++] = i;
    return n;
}

typedef struct {
    int gen;      /* the worker that generates; -1 if none is alive */
    int prefill;  /* the prefill worker, or -1 for local prefill */
    int overlap;  /* leading prompt blocks the prefilling worker already holds */
} placement;

/* Where a prompt runs: the generating worker (its pool routed by the --router policy) and,
 * disaggregated and when `remote`, the prefill worker, if conditional disaggregation says
 * the uncached part is long enough and the prefill pool is not backed up (route.h). The
 * decision enters the router's load accounting through *ticket. Call with mu held. */
static placement place(dy_workers *w, const dy_msg_request *r, bool remote, dy_router_ticket *ticket)
{
    placement p = {-1, -1, 0};
    uint64_t *hashes = NULL;
    int *members = malloc(sizeof(int) * (size_t)w->cfg.n_workers);
    int nb = members ? prompt_hashes(w, r, &hashes) : -1;
    if (nb < 0) {
        free(members);
        return p;
    }
    const double now = dy_job_now();
    const bool disagg = w->cfg.n_prefill > 0;
    const int bs = block_size(w);
    int n = pool_members(w, false, members);
    dy_router_choice g = dy_router_pick(w->router, disagg ? DY_POOL_DECODE : DY_POOL_AGG, members,
                                        n, hashes, nb, (int)r->n_prompt, now);
    p.gen = g.worker;
    p.overlap = g.overlap_blocks;
    if (p.gen >= 0 && disagg) {
        int held = dy_kv_index_overlap_one(dy_router_index(w->router), p.gen, hashes, nb);
        p.overlap = held > 0 ? held : 0;
        int64_t uncached = (int64_t)r->n_prompt - 1 - (int64_t)p.overlap * bs;
        n = remote ? pool_members(w, true, members) : 0;
        dy_router_choice pf = dy_router_pick(w->router, DY_POOL_PREFILL, members, n, hashes, nb,
                                             (int)r->n_prompt, now);
        int64_t backlog = 0;
        if (pf.worker >= 0)
            dy_router_worker_load(w->router, pf.worker, &backlog, NULL);
        if (pf.worker >= 0 && dy_route_remote(&w->cfg.route, uncached, backlog * bs)) {
            p.prefill = pf.worker;
            p.overlap = pf.overlap_blocks;
        }
    }
    if (p.gen >= 0) {
        dy_router_on_routed(w->router, ticket, p.gen, p.prefill, hashes, nb, (int)r->n_prompt, now);
        w->slots[p.gen].routed++;
        w->rt.decisions++;
        w->rt.overlap_blocks += (uint64_t)p.overlap;
    }
    free(hashes);
    free(members);
    return p;
}

/* A prefill worker for a prompt whose planned one died. -1 if none. Call with mu held. */
static int pick_prefill(dy_workers *w, const dy_msg_request *r)
{
    uint64_t *hashes = NULL;
    int *members = malloc(sizeof(int) * (size_t)w->cfg.n_workers);
    int nb = members ? prompt_hashes(w, r, &hashes) : -1;
    int pick = -1;
    if (nb >= 0)
        pick = dy_router_pick(w->router, DY_POOL_PREFILL, members, pool_members(w, true, members),
                              hashes, nb, (int)r->n_prompt, dy_job_now()).worker;
    free(hashes);
    free(members);
    return pick;
}

static bool send_frame(slot *s, const dy_buf *b)
{
    if (b->oom || s->fd < 0)
        return false;
    pthread_mutex_lock(&s->wmu);
    bool ok = dy_write_all(s->fd, b->data, b->len);
    pthread_mutex_unlock(&s->wmu);
    return ok;
}

/* Sends choices [first, first + count) of a job — samples of one prompt, with consecutive
 * random streams — to slot s as one request with ids id .. id + count - 1, its prompt
 * prefilled by slot `prefill` (or locally if -1). Call with mu held. */
static bool send_samples(slot *s, dy_job *job, int first, int count, uint64_t id, int prefill)
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
    bool ok = dy_wire_request(&b, &m) && send_frame(s, &b);
    dy_buf_free(&b);
    for (int i = 0; ok && i < count; i++) { /* the first sample's flight carries the prefill */
        flight *f = add_flight(s, id + (uint64_t)i, job, first + i);
        f->prefill_slot = i ? -1 : prefill;
        f->group = i ? 1 : count;
    }
    if (ok && prefill < 0)
        w_count_local(s->pool);
    return ok;
}

static bool send_choice(slot *s, dy_job *job, int ci, uint64_t id, int prefill)
{
    return send_samples(s, job, ci, 1, id, prefill);
}

/* ---------------------------------------------------------------- the reader */

static void on_token(dy_workers *w, slot *s, const dy_msg_token *t)
{
    pthread_mutex_lock(&w->mu);
    flight *f = find_flight(s, t->id);
    if (f && f->has_ticket)
        dy_router_on_first_token(w->router, &f->ticket); /* idempotent */
    if (f) {
        dy_job *j = f->job;
        pthread_mutex_lock(&j->mu);
        dy_choice_push_token(&j->choices[f->choice], t, dy_job_now());
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

static void on_done(dy_workers *w, slot *s, const dy_msg_done *d)
{
    pthread_mutex_lock(&w->mu);
    flight *f = find_flight(s, d->id);
    if (f && f->has_ticket) {
        dy_router_on_finished(w->router, &f->ticket);
        if (!f->prefilled_remotely)
            w->rt.cached_tokens += d->cached_tokens;
    }
    if (f) {
        dy_job *j = f->job;
        pthread_mutex_lock(&j->mu);
        dy_choice_finish(&j->choices[f->choice], d);
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        remove_flight(s, f);
        dy_job_unref(j);
        pthread_cond_broadcast(&w->changed);
    }
    pthread_mutex_unlock(&w->mu);
}

/* ---------------------------------------------------------------- disaggregated prefill */

static void send_kv_ready(slot *d, uint64_t id, bool ok, uint32_t n_blocks)
{
    dy_buf b = {0};
    dy_msg_kv_ready m = {id, ok, n_blocks};
    if (dy_wire_kv_ready(&b, &m))
        send_frame(d, &b);
    dy_buf_free(&b);
}

static void send_cancel(slot *s, uint64_t id)
{
    dy_buf b = {0};
    dy_msg_cancel m = {id};
    if (dy_wire_cancel(&b, &m))
        send_frame(s, &b);
    dy_buf_free(&b);
}

/* The decode worker s set blocks aside: hand the prompt to a prefill worker. */
static void on_kv_alloc(dy_workers *w, slot *s, const dy_msg_kv_alloc *m)
{
    pthread_mutex_lock(&w->mu);
    flight *f = find_flight(s, m->id);
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
    int pi = f->prefill_slot;
    if (pi < 0 || !w->slots[pi].alive)
        pi = pick_prefill(w, &c->req);
    const char *peer = w->cfg.xfer == DY_XFER_TCP ? s->hello.tcp_addr : s->hello.shm_name;
    dy_buf b = {0};
    /* The prefill runs under the decode sequence's id: its TCP frames name that sequence. */
    dy_msg_prefill pm = {.id = m->id, .xfer = (uint8_t)w->cfg.xfer,
                         .first_block = m->first_block, .n_blocks = m->n_blocks,
                         .dest = m->blocks, .n_prompt = c->req.n_prompt - 1, .prompt = c->req.prompt};
    snprintf(pm.peer, sizeof pm.peer, "%s", peer);
    slot *p = pi >= 0 ? &w->slots[pi] : NULL;
    if (!p || !peer[0] || !dy_wire_prefill(&b, &pm) || !send_frame(p, &b)) {
        w->xfer.local++;
        send_kv_ready(s, m->id, false, 0); /* no prefill worker: compute it on the decode worker */
    } else {
        flight *pf = add_flight(p, pm.id, f->job, f->choice);
        pf->group = f->group;
        pf->kind = FL_PREFILL;
        pf->decode_slot = s->index;
        pf->decode_id = m->id;
        pf->tokens = (int64_t)pm.n_prompt - m->cached_tokens;
        pf->n_blocks = m->n_blocks;
        pf->t_sent = dy_job_now();
        w->xfer.remote++;
        pthread_mutex_lock(&f->job->mu);
        f->job->refs++; /* the prefill flight holds the job too */
        pthread_mutex_unlock(&f->job->mu);
    }
    dy_buf_free(&b);
    pthread_mutex_unlock(&w->mu);
}

/* Ends a prefill flight: tell its decode worker to go on (ok: the KV is there; else compute
 * locally), or cancel it there when its client has left. Call with mu held. */
static void end_prefill(dy_workers *w, slot *p, flight *f, bool ok)
{
    slot *d = &w->slots[f->decode_slot];
    if (d->alive && find_flight(d, f->decode_id)) {
        if (f->cancel_decode)
            send_cancel(d, f->decode_id);
        else
            send_kv_ready(d, f->decode_id, ok, ok && w->cfg.xfer == DY_XFER_TCP ? f->n_blocks : 0);
    }
    dy_job *j = f->job;
    remove_flight(p, f);
    dy_job_unref(j);
}

static void on_prefill_done(dy_workers *w, slot *p, const dy_msg_prefill_done *m)
{
    pthread_mutex_lock(&w->mu);
    flight *f = find_flight(p, m->id);
    if (f && f->kind == FL_PREFILL) {
        if (m->ok) {
            flight *df = find_flight(&w->slots[f->decode_slot], f->decode_id);
            if (df)
                df->prefilled_remotely = true;
            w->rt.cached_tokens += m->cached_tokens;
            w->xfer.transfers++;
            w->xfer.bytes += m->bytes;
            w->xfer.seconds += m->transfer_seconds;
            dy_job *j = f->job;
            pthread_mutex_lock(&j->mu);
            for (int k = 0; k < f->group; k++) { /* one transfer fed every sample */
                dy_choice *c = &j->choices[f->choice + k];
                c->prefill_worker = p->index;
                c->xfer_bytes = m->bytes;
                c->xfer_seconds = m->transfer_seconds;
                c->prefill_seconds = m->prefill_seconds;
            }
            pthread_mutex_unlock(&j->mu);
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

/* Prefills past the timeout: the prefill worker is stuck, so it is killed; its death (seen by
 * its reader) sends each decode worker KV_READY(!ok) once the process is gone, so no late
 * write can land in blocks that were given up. */
static void *janitor_main(void *arg)
{
    dy_workers *w = arg;
    for (;;) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&w->mu);
        bool stop = w->stopping;
        double now = dy_job_now();
        for (int i = 0; !stop && i < w->cfg.n_workers; i++) {
            slot *p = &w->slots[i];
            for (int k = 0; p->alive && k < p->n_fl; k++)
                if (p->fl[k].kind == FL_PREFILL && now - p->fl[k].t_sent > w->cfg.xfer_timeout_s) {
                    fprintf(stderr, "dyad serve: prefill worker %d stalled for %.1f s; restarting "
                            "it and prefilling locally\n", i, now - p->fl[k].t_sent);
                    w->xfer.timeouts++;
                    kill(p->pid, SIGKILL);
                    break;
                }
        }
        pthread_mutex_unlock(&w->mu);
        if (stop)
            return NULL;
    }
}

/* ---------------------------------------------------------------- KV events */

static void snapshot_reset(snapshot_rx *r)
{
    free(r->hashes);
    free(r->parents);
    *r = (snapshot_rx){0};
}

/* Asks the worker for a full snapshot (once until it arrives). Call with mu held. */
static void ask_resync(dy_workers *w, slot *s, uint8_t reason)
{
    if (s->resync_asked)
        return;
    s->resync_asked = true;
    w->rt.resyncs++;
    snapshot_reset(&s->snap);
    dy_msg_kv_resync m = {.reason = reason,
                          .seen_seq = dy_kv_index_worker_seq(dy_router_index(w->router), s->index)};
    dy_buf b = {0};
    if (dy_wire_kv_resync(&b, &m))
        send_frame(s, &b);
    dy_buf_free(&b);
}

static void on_kv_events(dy_workers *w, slot *s, const dy_msg_kv_events *m)
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

/* Collects a snapshot's parts; the last one replaces the worker's blocks in the index. */
static void on_kv_snapshot(dy_workers *w, slot *s, const dy_msg_kv_snapshot *m)
{
    pthread_mutex_lock(&w->mu);
    snapshot_rx *r = &s->snap;
    if (m->part == 0)
        snapshot_reset(r);
    bool ok = m->part == r->next_part && (m->part == 0 || (m->seq == r->seq && m->n_parts == r->n_parts));
    int64_t total = (int64_t)r->n + m->n_blocks;
    ok = ok && total <= (int64_t)s->hello.kv_blocks; /* a worker cannot hold more */
    if (ok && total > r->cap) {
        int cap = (int)total;
        uint64_t *h = realloc(r->hashes, sizeof *h * (size_t)cap);
        uint64_t *p = h ? realloc(r->parents, sizeof *p * (size_t)cap) : NULL;
        if (h)
            r->hashes = h;
        if (p)
            r->parents = p;
        ok = h && p;
        if (ok)
            r->cap = cap;
    }
    if (!ok) {
        snapshot_reset(r);
        s->resync_asked = false;
        ask_resync(w, s, DY_RESYNC_ERROR);
        pthread_mutex_unlock(&w->mu);
        return;
    }
    for (uint32_t i = 0; i < m->n_blocks; i++) {
        r->hashes[r->n] = m->blocks[i].hash;
        r->parents[r->n++] = m->blocks[i].parent;
    }
    r->seq = m->seq;
    r->n_parts = m->n_parts;
    r->next_part = m->part + 1;
    if (r->next_part == r->n_parts) {
        dy_kv_index_resync(dy_router_index(w->router), s->index, r->seq, r->hashes, r->parents, r->n);
        snapshot_reset(r);
        s->resync_asked = false;
    }
    pthread_mutex_unlock(&w->mu);
}

/* A load report. Its event sequence number also tells whether a batch went missing: the
 * stream is ordered, so every batch sent before this report has been applied by now. */
static void on_stats(dy_workers *w, slot *s, const dy_msg_stats *m)
{
    pthread_mutex_lock(&w->mu);
    s->stats = *m;
    dy_router_load load = {(int64_t)m->queued_prefill_tokens, (int64_t)m->active_decode_blocks,
                           (int64_t)m->running + m->waiting, (int64_t)m->kv_blocks_used,
                           (int64_t)m->kv_blocks_total};
    dy_router_report_load(w->router, s->index, &load);
    dy_kv_index *x = dy_router_index(w->router);
    if (!w->cfg.no_kv_events && dy_kv_index_worker_state(x, s->index) == DY_KV_WORKER_LIVE &&
        dy_kv_index_worker_seq(x, s->index) != m->kv_event_seq)
        ask_resync(w, s, DY_RESYNC_GAP);
    pthread_mutex_unlock(&w->mu);
}

static void on_frame(dy_workers *w, slot *s, dy_msg_type t, const uint8_t *p, uint32_t len)
{
    char err[256];
    if (t == DY_MSG_TOKEN) {
        dy_msg_token m;
        if (dy_wire_decode_token(p, len, &m, err, sizeof err))
            on_token(w, s, &m);
    } else if (t == DY_MSG_DONE) {
        dy_msg_done m;
        if (dy_wire_decode_done(p, len, &m, err, sizeof err))
            on_done(w, s, &m);
    } else if (t == DY_MSG_STATS) {
        dy_msg_stats m;
        if (dy_wire_decode_stats(p, len, &m, err, sizeof err))
            on_stats(w, s, &m);
    } else if (t == DY_MSG_KV_EVENTS) {
        dy_msg_kv_events m;
        if (dy_wire_decode_kv_events(p, len, &m, err, sizeof err))
            on_kv_events(w, s, &m);
        dy_msg_kv_events_free(&m);
    } else if (t == DY_MSG_KV_SNAPSHOT) {
        dy_msg_kv_snapshot m;
        if (dy_wire_decode_kv_snapshot(p, len, &m, err, sizeof err))
            on_kv_snapshot(w, s, &m);
        dy_msg_kv_snapshot_free(&m);
    } else if (t == DY_MSG_KV_ALLOC) {
        dy_msg_kv_alloc m;
        if (dy_wire_decode_kv_alloc(p, len, &m, err, sizeof err))
            on_kv_alloc(w, s, &m);
        dy_msg_kv_alloc_free(&m);
    } else if (t == DY_MSG_PREFILL_DONE) {
        dy_msg_prefill_done m;
        if (dy_wire_decode_prefill_done(p, len, &m, err, sizeof err))
            on_prefill_done(w, s, &m);
    } else if (t == DY_MSG_HELLO) {
        dy_msg_hello m;
        if (dy_wire_decode_hello(p, len, &m, err, sizeof err)) {
            pthread_mutex_lock(&w->mu);
            s->hello = m;
            s->hello_seen = true;
            /* A new incarnation: forget the old one's blocks and load; its first snapshot
             * (sequence 0) brings it into the index. */
            dy_router_remove_worker(w->router, s->index);
            dy_router_add_worker(w->router, s->index, !w->cfg.no_kv_events);
            snapshot_reset(&s->snap);
            s->resync_asked = false;
            pthread_cond_broadcast(&w->changed);
            pthread_mutex_unlock(&w->mu);
        }
    }
}

/* The worker is gone: rerun what had not started, fail the rest. Call with mu held. */
static void on_death(dy_workers *w, slot *s)
{
    s->alive = false;
    dy_router_remove_worker(w->router, s->index); /* its blocks leave the index */
    snapshot_reset(&s->snap);
    close(s->fd);
    s->fd = -1;
    waitpid(s->pid, NULL, 0);
    /* Keep the dead incarnation's counters so totals never go backwards. */
    s->base.prompt_tokens += s->stats.prompt_tokens;
    s->base.generated_tokens += s->stats.generated_tokens;
    s->base.cache_lookup_blocks += s->stats.cache_lookup_blocks;
    s->base.cache_hit_blocks += s->stats.cache_hit_blocks;
    s->base.preemptions += s->stats.preemptions;
    s->base.steps += s->stats.steps;
    s->base.step_seconds += s->stats.step_seconds;
    memset(&s->stats, 0, sizeof s->stats);
    if (s->hello.shm_name[0])
        shm_unlink(s->hello.shm_name); /* a killed decode worker could not remove its pool */
    /* Prefills feeding this worker: stop them (they would write into a dead pool). */
    for (int i = 0; i < w->cfg.n_workers; i++)
        for (int k = w->slots[i].n_fl - 1; k >= 0; k--) {
            flight *f = &w->slots[i].fl[k];
            if (f->kind == FL_PREFILL && f->decode_slot == s->index) {
                send_cancel(&w->slots[i], f->id);
                f->cancel_decode = true; /* nothing to tell the dead worker */
                end_prefill(w, &w->slots[i], f, false);
            }
        }
    flight *fl = s->fl;
    int n = s->n_fl;
    s->fl = NULL;
    s->n_fl = s->cap_fl = 0;
    for (int i = 0; i < n; i++) {
        dy_job *j = fl[i].job;
        if (fl[i].kind == FL_PREFILL) {
            /* This prefill worker died: its decode worker computes the prompt itself. */
            w->xfer.failed++;
            slot *d = &w->slots[fl[i].decode_slot];
            if (d->alive && find_flight(d, fl[i].decode_id))
                send_kv_ready(d, fl[i].decode_id, false, 0);
            dy_job_unref(j);
            continue;
        }
        dy_choice *c = &j->choices[fl[i].choice];
        pthread_mutex_lock(&j->mu);
        bool rerun = !c->started && !c->done && !w->stopping;
        pthread_mutex_unlock(&j->mu);
        dy_router_ticket t;
        placement pl = rerun ? place(w, &c->req, false, &t) : (placement){-1, -1, 0};
        uint64_t id = w->next_id++;
        if (pl.gen >= 0 && send_choice(&w->slots[pl.gen], j, fl[i].choice, id, -1)) {
            flight *nf = find_flight(&w->slots[pl.gen], id);
            nf->has_ticket = true;
            nf->ticket = t;
            continue; /* the job reference moves with it */
        }
        if (pl.gen >= 0)
            dy_router_on_finished(w->router, &t);
        pthread_mutex_lock(&j->mu);
        dy_choice_fail(c, "the worker running this request died");
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        dy_job_unref(j);
    }
    free(fl);
    pthread_cond_broadcast(&w->changed);
}

static void *reader_main(void *arg)
{
    slot *s = arg;
    dy_workers *w = s->pool;
    dy_conn conn;
    dy_conn_init(&conn, s->fd);
    for (;;) {
        long n = dy_conn_fill(&conn);
        dy_msg_type t;
        const uint8_t *p;
        uint32_t len;
        char err[256];
        int k = 0;
        if (n > 0)
            while ((k = dy_conn_next(&conn, &t, &p, &len, err, sizeof err)) == 1)
                on_frame(w, s, t, p, len);
        if (n > 0 && k == 0)
            continue;
        if (k < 0) {
            fprintf(stderr, "dyad serve: worker %d sent a corrupt frame (%s); restarting it\n",
                    s->index, err);
            kill(s->pid, SIGKILL);
        }
        /* End of stream: the worker exited or was killed. */
        pthread_mutex_lock(&w->mu);
        bool had_hello = s->hello_seen;
        on_death(w, s);
        bool stop = w->stopping;
        pthread_mutex_unlock(&w->mu);
        dy_conn_free(&conn);
        if (stop)
            return NULL;
        if (!had_hello)
            sleep(1); /* it died while loading: do not spin */
        fprintf(stderr, "dyad serve: worker %d exited; starting a new one\n", s->index);
        pthread_mutex_lock(&w->mu);
        char e[256];
        int rc = w->stopping ? -1 : spawn(w, s, e, sizeof e);
        if (rc == 0) {
            s->restarts++;
            /* A candidate at once (requests queue on its socket while it loads); its blocks
             * enter the index with its first snapshot after HELLO. */
            dy_router_add_worker(w->router, s->index, !w->cfg.no_kv_events);
        }
        pthread_mutex_unlock(&w->mu);
        if (rc != 0)
            return NULL;
        dy_conn_init(&conn, s->fd);
    }
}

/* ---------------------------------------------------------------- the API */

static bool wait_for_hellos(dy_workers *w, char *err, size_t errlen)
{
    double deadline = dy_job_now() + w->cfg.startup_timeout_s;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int ready = 0;
        for (int i = 0; i < w->cfg.n_workers; i++)
            ready += w->slots[i].hello_seen;
        if (ready == w->cfg.n_workers)
            break;
        for (int i = 0; i < w->cfg.n_workers; i++)
            if (w->slots[i].restarts > 0 && !w->slots[i].hello_seen) {
                snprintf(err, errlen, "worker %d exited while loading the model (see its message "
                         "above)", i);
                pthread_mutex_unlock(&w->mu);
                return false;
            }
        if (dy_job_now() > deadline) {
            snprintf(err, errlen, "workers did not start within %.0f s", w->cfg.startup_timeout_s);
            pthread_mutex_unlock(&w->mu);
            return false;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&w->changed, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return true;
}

/* Decode workers' KV pools are named shared-memory objects (/dev/shm/dyad-kv-PID-ID) that a
 * worker removes when it exits and the frontend when it reaps a dead one; a frontend killed
 * outright (SIGKILL, OOM) takes its workers with it before either can. Their memory stays
 * committed until someone unlinks the name, so each start removes the pools of processes that
 * no longer exist. (A pid reused by an unrelated process keeps its stale pool: safe.) */
static void remove_stale_pools(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        int pid, id, end = 0;
        if (sscanf(e->d_name, DY_KV_SHM_NAME "%n", &pid, &id, &end) != 2 || e->d_name[end] ||
            pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        shm_unlink(name);
    }
    closedir(d);
}

dy_workers *dy_workers_start(const dy_workers_config *cfg, char *err, size_t errlen)
{
    dy_workers *w = calloc(1, sizeof *w);
    if (!w || !(w->slots = calloc((size_t)cfg->n_workers, sizeof *w->slots))) {
        free(w);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (cfg->n_prefill > 0)
        remove_stale_pools();
    w->cfg = *cfg;
    w->next_id = 1;
    w->rt.policy = dy_router_policy_name(cfg->router.policy);
    w->cfg.router.block_size = cfg->block_size; /* the router counts blocks as workers do */
    if (!(w->router = dy_router_new(&w->cfg.router, cfg->n_workers))) {
        snprintf(err, errlen, "bad router settings, or out of memory");
        free(w->slots);
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->changed, NULL);
    int started = 0;
    for (int i = 0; i < cfg->n_workers; i++) {
        slot *s = &w->slots[i];
        s->pool = w;
        s->index = i;
        s->fd = -1;
        s->role = i < cfg->n_prefill ? DY_ROLE_PREFILL : cfg->n_prefill > 0 ? DY_ROLE_DECODE : DY_ROLE_AGG;
        pthread_mutex_init(&s->wmu, NULL);
        if (spawn(w, s, err, errlen) != 0)
            break;
        pthread_mutex_lock(&w->mu);
        dy_router_add_worker(w->router, i, !cfg->no_kv_events);
        pthread_mutex_unlock(&w->mu);
        if (pthread_create(&s->reader, NULL, reader_main, s) != 0)
            break;
        started++;
    }
    if (started == cfg->n_workers && wait_for_hellos(w, err, errlen) &&
        pthread_create(&w->janitor, NULL, janitor_main, w) == 0) {
        w->janitor_started = true;
        return w;
    }
    if (started < cfg->n_workers && !err[0])
        snprintf(err, errlen, "could not start worker %d", started);
    w->cfg.n_workers = started;
    dy_workers_stop(w, 0);
    dy_workers_free(w);
    return NULL;
}

/* Samples of one prompt that one worker's KV pool can hold at once, at worst: the prompt's
 * blocks once (shared) plus each sample's own blocks for its completion. */
static int samples_per_worker(const slot *s, const dy_msg_request *r)
{
    int bs = s->hello.block_size ? (int)s->hello.block_size : 16;
    int64_t prompt = (r->n_prompt + bs - 1) / bs;
    int64_t each = ((int64_t)r->max_tokens + bs) / bs + 1;
    int64_t fit = ((int64_t)s->hello.kv_blocks - prompt) / each;
    return fit < 1 ? 1 : fit > DY_WIRE_MAX_SAMPLES ? DY_WIRE_MAX_SAMPLES : (int)fit;
}

/* Routes and sends the samples [first, first + count) of one prompt. They stay together on
 * one worker — one prefill, one KV transfer, forked blocks — unless that worker's KV pool
 * could not hold them all at once; then they go in parts that fit, each routed anew
 * (docs/repeated-sampling.md). -1 if no worker is available. Call with mu held. */
static int submit_samples(dy_workers *w, dy_job *job, int first, int count)
{
    while (count > 0) {
        const dy_msg_request *r = &job->choices[first].req;
        dy_router_ticket ticket;
        placement pl = place(w, r, true, &ticket);
        if (pl.gen < 0)
            return -1;
        slot *s = &w->slots[pl.gen];
        int prefill = pl.prefill;
        int part = samples_per_worker(s, r);
        if (part > count)
            part = count;
        pthread_mutex_lock(&job->mu);
        job->refs += part; /* one per flight */
        pthread_mutex_unlock(&job->mu);
        uint64_t id = w->next_id;
        w->next_id += (uint64_t)part;
        if (!send_samples(s, job, first, part, id, prefill)) {
            /* The worker's socket broke: the reader will see it die; fail these now. */
            pthread_mutex_lock(&job->mu);
            for (int i = 0; i < part; i++)
                dy_choice_fail(&job->choices[first + i], "could not reach the worker");
            job->refs -= part;
            pthread_mutex_unlock(&job->mu);
            dy_router_on_finished(w->router, &ticket);
        } else {
            flight *lead = find_flight(s, id);
            lead->has_ticket = true;
            lead->ticket = ticket;
            pthread_mutex_lock(&job->mu);
            for (int i = 0; i < part; i++)
                job->choices[first + i].overlap_blocks = pl.overlap;
            pthread_mutex_unlock(&job->mu);
        }
        first += part;
        count -= part;
    }
    return 0;
}

int dy_workers_submit(dy_workers *w, dy_job *job, char *err, size_t errlen)
{
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    if (w->stopping) {
        snprintf(err, errlen, "the server is shutting down");
        rc = -2;
    } else if (waiting_sequences(w) + job->n_choices > w->cfg.max_queue) {
        snprintf(err, errlen, "the server's queue is full (%d sequences waiting)", w->cfg.max_queue);
        rc = -1;
    }
    int group = job->group > 0 ? job->group : 1;
    for (int first = 0; rc == 0 && first < job->n_choices; first += group) {
        int count = job->n_choices - first < group ? job->n_choices - first : group;
        if (submit_samples(w, job, first, count) != 0) {
            if (first == 0) {
                snprintf(err, errlen, "no worker is available");
                rc = -2;
                break;
            }
            pthread_mutex_lock(&job->mu); /* a later prompt: its choices fail */
            for (int i = first; i < first + count; i++)
                dy_choice_fail(&job->choices[i], "no worker is available");
            pthread_mutex_unlock(&job->mu);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* The choice's prefill in flight, if any (with its prefill worker). Call with mu held. */
static flight *prefill_of(dy_workers *w, const dy_choice *c, slot **p)
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

/* Call with mu held. */
static void cancel_choice(dy_workers *w, dy_job *job, int i)
{
    slot *ps;
    flight *pf = prefill_of(w, &job->choices[i], &ps);
    if (pf) {
        /* The prefill worker may be writing into blocks of this sequence: cancel there
         * first; its answer cancels the sequence on the decode worker. */
        pf->cancel_decode = true;
        send_cancel(ps, pf->id);
        return;
    }
    dy_choice *c = &job->choices[i];
    pthread_mutex_lock(&job->mu);
    bool live = !c->done && c->worker >= 0;
    pthread_mutex_unlock(&job->mu);
    slot *s = live ? &w->slots[c->worker] : NULL;
    if (s && s->alive && find_flight(s, c->seq_id))
        send_cancel(s, c->seq_id);
}

void dy_workers_cancel(dy_workers *w, dy_job *job)
{
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < job->n_choices; i++)
        cancel_choice(w, job, i);
    pthread_mutex_unlock(&w->mu);
}

void dy_workers_cancel_choice(dy_workers *w, dy_job *job, int i)
{
    pthread_mutex_lock(&w->mu);
    if (i >= 0 && i < job->n_choices)
        cancel_choice(w, job, i);
    pthread_mutex_unlock(&w->mu);
}

static int total_flights(const dy_workers *w)
{
    int n = 0;
    for (int i = 0; i < w->cfg.n_workers; i++)
        n += w->slots[i].n_fl;
    return n;
}

static int alive_workers(const dy_workers *w)
{
    int n = 0;
    for (int i = 0; i < w->cfg.n_workers; i++)
        n += w->slots[i].alive;
    return n;
}

void dy_workers_stop(dy_workers *w, double timeout_s)
{
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    double deadline = dy_job_now() + timeout_s;
    while (total_flights(w) > 0 && dy_job_now() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&w->changed, &w->mu, &ts);
    }
    /* Ask politely; the reader threads see the sockets close and reap. */
    for (int i = 0; i < w->cfg.n_workers; i++) {
        slot *s = &w->slots[i];
        if (!s->alive)
            continue;
        dy_buf b = {0};
        if (dy_wire_shutdown(&b)) {
            pthread_mutex_lock(&s->wmu);
            dy_write_all(s->fd, b.data, b.len);
            pthread_mutex_unlock(&s->wmu);
        }
        dy_buf_free(&b);
        if (total_flights(w) > 0)
            kill(s->pid, SIGKILL); /* past the deadline: stop now, choices fail on death */
        shutdown(s->fd, SHUT_WR);
    }
    /* A worker that does not exit (stopped, stuck in a step) is killed after a grace period,
     * so shutting down never hangs on it. */
    double grace = dy_job_now() + 5;
    while (alive_workers(w) > 0 && dy_job_now() < grace) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&w->changed, &w->mu, &ts);
    }
    for (int i = 0; i < w->cfg.n_workers; i++)
        if (w->slots[i].alive) {
            fprintf(stderr, "dyad serve: worker %d did not exit; killing it\n", i);
            kill(w->slots[i].pid, SIGKILL);
        }
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->cfg.n_workers; i++)
        pthread_join(w->slots[i].reader, NULL);
    if (w->janitor_started)
        pthread_join(w->janitor, NULL);
    w->janitor_started = false;
}

void dy_workers_free(dy_workers *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->cfg.n_workers; i++) {
        pthread_mutex_destroy(&w->slots[i].wmu);
        free(w->slots[i].fl);
        snapshot_reset(&w->slots[i].snap);
    }
    dy_router_free(w->router);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->changed);
    free(w->slots);
    free(w);
}

void dy_workers_kill(dy_workers *w, int i)
{
    pthread_mutex_lock(&w->mu);
    if (i >= 0 && i < w->cfg.n_workers && w->slots[i].alive)
        kill(w->slots[i].pid, SIGKILL);
    pthread_mutex_unlock(&w->mu);
}

int dy_workers_info(dy_workers *w, dy_worker_info *out, int cap)
{
    pthread_mutex_lock(&w->mu);
    int n = w->cfg.n_workers < cap ? w->cfg.n_workers : cap;
    for (int i = 0; i < n; i++) {
        const slot *s = &w->slots[i];
        dy_msg_stats st = s->stats;
        st.prompt_tokens += s->base.prompt_tokens;
        st.generated_tokens += s->base.generated_tokens;
        st.cache_lookup_blocks += s->base.cache_lookup_blocks;
        st.cache_hit_blocks += s->base.cache_hit_blocks;
        st.preemptions += s->base.preemptions;
        st.steps += s->base.steps;
        st.step_seconds += s->base.step_seconds;
        const dy_kv_index *x = dy_router_index(w->router);
        out[i] = (dy_worker_info){s->alive, s->role, s->pid, s->restarts, s->n_fl, st, s->hello,
                                  s->routed, dy_kv_index_worker_blocks(x, i) +
                                                 dy_kv_index_worker_predicted(x, i)};
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}

dy_xfer_totals dy_workers_xfer_totals(dy_workers *w)
{
    pthread_mutex_lock(&w->mu);
    dy_xfer_totals t = w->xfer;
    pthread_mutex_unlock(&w->mu);
    return t;
}

dy_router_totals dy_workers_router_totals(dy_workers *w)
{
    pthread_mutex_lock(&w->mu);
    dy_router_totals t = w->rt;
    t.index_blocks = dy_kv_index_size(dy_router_index(w->router));
    pthread_mutex_unlock(&w->mu);
    return t;
}

dy_msg_hello dy_workers_hello(dy_workers *w)
{
    pthread_mutex_lock(&w->mu);
    dy_msg_hello h = w->slots[0].hello;
    pthread_mutex_unlock(&w->mu);
    return h;
}
