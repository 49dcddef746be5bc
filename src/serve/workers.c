/* workers.c — see workers.h. One mutex (`mu`) guards the slots, their in-flight tables and
 * the live flags; a job's own mutex is always taken after it, never before. */
#include "serve/workers.h"
#include "serve/wire_io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint64_t id;
    dy_job *job;
    int choice;
} flight;

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
    dy_msg_hello hello;
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
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
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
    char *argv[32];
    int a = 0;
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
    argv[a] = NULL;
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        /* Only async-signal-safe calls between fork and exec. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        fcntl(sv[1], F_SETFD, 0);
        execv(c->exe, argv);
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

static void add_flight(slot *s, uint64_t id, dy_job *job, int choice)
{
    if (s->n_fl == s->cap_fl) {
        int cap = s->cap_fl ? s->cap_fl * 2 : 64;
        flight *f = realloc(s->fl, sizeof *f * (size_t)cap);
        if (!f)
            abort(); /* a few bytes per sequence: out of memory here is fatal */
        s->fl = f;
        s->cap_fl = cap;
    }
    s->fl[s->n_fl++] = (flight){id, job, choice};
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
            n += !f->job->choices[f->choice].started;
        }
    return n;
}

/* The live worker with the fewest sequences in flight (ties in turn). */
static slot *pick(dy_workers *w)
{
    slot *best = NULL;
    int n = w->cfg.n_workers;
    for (int k = 0; k < n; k++) {
        slot *s = &w->slots[(w->rr + (unsigned)k) % (unsigned)n];
        if (s->alive && (!best || s->n_fl < best->n_fl))
            best = s;
    }
    w->rr++;
    return best;
}

/* Sends one choice to slot s. Call with mu held. */
static bool send_choice(slot *s, dy_job *job, int ci, uint64_t id)
{
    dy_choice *c = &job->choices[ci];
    c->seq_id = id;
    c->req.id = id;
    c->worker = s->index;
    dy_buf b = {0};
    bool ok = dy_wire_request(&b, &c->req);
    pthread_mutex_lock(&s->wmu);
    ok = ok && dy_write_all(s->fd, b.data, b.len);
    pthread_mutex_unlock(&s->wmu);
    dy_buf_free(&b);
    if (ok)
        add_flight(s, id, job, ci);
    return ok;
}

/* ---------------------------------------------------------------- the reader */

static void on_token(dy_workers *w, slot *s, const dy_msg_token *t)
{
    pthread_mutex_lock(&w->mu);
    flight *f = find_flight(s, t->id);
    if (f) {
        dy_job *j = f->job;
        pthread_mutex_lock(&j->mu);
        dy_choice_push_token(&j->choices[f->choice], t, now_s());
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

static void on_done(dy_workers *w, slot *s, const dy_msg_done *d)
{
    pthread_mutex_lock(&w->mu);
    flight *f = find_flight(s, d->id);
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
        if (dy_wire_decode_stats(p, len, &m, err, sizeof err)) {
            pthread_mutex_lock(&w->mu);
            s->stats = m;
            pthread_mutex_unlock(&w->mu);
        }
    } else if (t == DY_MSG_HELLO) {
        dy_msg_hello m;
        if (dy_wire_decode_hello(p, len, &m, err, sizeof err)) {
            pthread_mutex_lock(&w->mu);
            s->hello = m;
            s->hello_seen = true;
            pthread_cond_broadcast(&w->changed);
            pthread_mutex_unlock(&w->mu);
        }
    }
}

/* The worker is gone: rerun what had not started, fail the rest. Call with mu held. */
static void on_death(dy_workers *w, slot *s)
{
    s->alive = false;
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
    flight *fl = s->fl;
    int n = s->n_fl;
    s->fl = NULL;
    s->n_fl = s->cap_fl = 0;
    for (int i = 0; i < n; i++) {
        dy_job *j = fl[i].job;
        dy_choice *c = &j->choices[fl[i].choice];
        slot *other = w->stopping ? NULL : pick(w);
        pthread_mutex_lock(&j->mu);
        bool rerun = !c->started && !c->done && other;
        pthread_mutex_unlock(&j->mu);
        if (rerun && send_choice(other, j, fl[i].choice, w->next_id++))
            continue; /* the job reference moves with it */
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
        if (rc == 0)
            s->restarts++;
        pthread_mutex_unlock(&w->mu);
        if (rc != 0)
            return NULL;
        dy_conn_init(&conn, s->fd);
    }
}

/* ---------------------------------------------------------------- the API */

static bool wait_for_hellos(dy_workers *w, char *err, size_t errlen)
{
    double deadline = now_s() + w->cfg.startup_timeout_s;
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
        if (now_s() > deadline) {
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

dy_workers *dy_workers_start(const dy_workers_config *cfg, char *err, size_t errlen)
{
    dy_workers *w = calloc(1, sizeof *w);
    if (!w || !(w->slots = calloc((size_t)cfg->n_workers, sizeof *w->slots))) {
        free(w);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->cfg = *cfg;
    w->next_id = 1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->changed, NULL);
    int started = 0;
    for (int i = 0; i < cfg->n_workers; i++) {
        slot *s = &w->slots[i];
        s->pool = w;
        s->index = i;
        s->fd = -1;
        pthread_mutex_init(&s->wmu, NULL);
        if (spawn(w, s, err, errlen) != 0 || pthread_create(&s->reader, NULL, reader_main, s) != 0)
            break;
        started++;
    }
    if (started < cfg->n_workers || !wait_for_hellos(w, err, errlen)) {
        if (started < cfg->n_workers && !err[0])
            snprintf(err, errlen, "could not start worker %d", started);
        w->cfg.n_workers = started;
        dy_workers_stop(w, 0);
        dy_workers_free(w);
        return NULL;
    }
    return w;
}

int dy_workers_submit(dy_workers *w, dy_job *job, char *err, size_t errlen)
{
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    slot *s = w->stopping ? NULL : pick(w);
    if (!s) {
        snprintf(err, errlen, w->stopping ? "the server is shutting down" : "no worker is available");
        rc = -2;
    } else if (waiting_sequences(w) + job->n_choices > w->cfg.max_queue) {
        snprintf(err, errlen, "the server's queue is full (%d sequences waiting)", w->cfg.max_queue);
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < job->n_choices; i++) {
        pthread_mutex_lock(&job->mu);
        job->refs++;
        pthread_mutex_unlock(&job->mu);
        if (!send_choice(s, job, i, w->next_id++)) {
            /* The worker's socket broke: the reader will see it die; fail this choice now. */
            pthread_mutex_lock(&job->mu);
            dy_choice_fail(&job->choices[i], "could not reach the worker");
            job->refs--;
            pthread_mutex_unlock(&job->mu);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void dy_workers_cancel(dy_workers *w, dy_job *job)
{
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < job->n_choices; i++) {
        dy_choice *c = &job->choices[i];
        pthread_mutex_lock(&job->mu);
        bool live = !c->done && c->worker >= 0;
        pthread_mutex_unlock(&job->mu);
        slot *s = live ? &w->slots[c->worker] : NULL;
        if (!s || !s->alive || !find_flight(s, c->seq_id))
            continue;
        dy_buf b = {0};
        dy_msg_cancel m = {c->seq_id};
        if (dy_wire_cancel(&b, &m)) {
            pthread_mutex_lock(&s->wmu);
            dy_write_all(s->fd, b.data, b.len);
            pthread_mutex_unlock(&s->wmu);
        }
        dy_buf_free(&b);
    }
    pthread_mutex_unlock(&w->mu);
}

static int total_flights(const dy_workers *w)
{
    int n = 0;
    for (int i = 0; i < w->cfg.n_workers; i++)
        n += w->slots[i].n_fl;
    return n;
}

void dy_workers_stop(dy_workers *w, double timeout_s)
{
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    double deadline = now_s() + timeout_s;
    while (total_flights(w) > 0 && now_s() < deadline) {
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
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->cfg.n_workers; i++)
        pthread_join(w->slots[i].reader, NULL);
}

void dy_workers_free(dy_workers *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->cfg.n_workers; i++) {
        pthread_mutex_destroy(&w->slots[i].wmu);
        free(w->slots[i].fl);
    }
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
        out[i] = (dy_worker_info){s->alive, s->pid, s->restarts, s->n_fl, st, s->hello};
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}

dy_msg_hello dy_workers_hello(dy_workers *w)
{
    pthread_mutex_lock(&w->mu);
    dy_msg_hello h = w->slots[0].hello;
    pthread_mutex_unlock(&w->mu);
    return h;
}
