/* worker_link.c — a worker in cluster mode (worker_link.h): the worker loop on one end of a
 * socket pair, and this file's three threads around it:
 *   the pump     reads the worker's frames and publishes each where it belongs;
 *   the renewer  writes the registry entry every lease / 3 (the lease);
 *   the signals  thread waits for SIGINT/SIGTERM and makes the worker leave cleanly.
 * NATS's own threads run the two subscriptions (frames in, HELLO asked for). */
#include "serve/cluster/worker_link.h"

#include "serve/cluster/frames.h"
#include "serve/cluster/ids.h"
#include "serve/cluster/nats_conn.h"
#include "serve/cluster/registry.h"
#include "serve/wire/wire.h"
#include "serve/wire/wire_io.h"
#include "serve/worker/worker.h"
#include "util/clock.h"
#include "util/hashmap.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef DYAD_HAVE_NATS

int dy_cluster_worker_run(dy_worker_config *c)
{
    (void)c;
    fprintf(stderr, "dyad worker: --cluster needs NATS, and this dyad was built without it "
                    "(install libnats-dev and build again)\n");
    return 2;
}

#else

/* Frontends whose inboxes one worker keeps at once, and sequences it routes answers for. */
#define MAX_INBOXES 1024
#define MAX_ROUTES (1u << 20)
#define MAX_SUBJECT 128

typedef struct {
    dy_worker_config *cfg;
    natsConnection *nc;
    kvStore *kv;
    int fd;                  /* our end of the socket pair; the worker loop has the other */
    char key[DY_REG_KEY_LEN + 1];
    char subj_in[64], subj_out[64], subj_hello[64];
    natsSubscription *sub_in, *sub_hello;

    pthread_mutex_t wmu;     /* writes to fd (the frames-in callback, the leave) */
    pthread_mutex_t mu;      /* everything below */
    pthread_cond_t changed;  /* registered, load changed, stopping */
    dy_reg_entry entry;
    bool registered, stopping;
    bool put_now;            /* the entry changed in a way frontends must hear at once */
    uint8_t *hello;          /* the latest HELLO frame, whole */
    size_t hello_len;
    dy_hashmap routes;       /* request id → index in inboxes */
    char *inboxes[MAX_INBOXES];
    int n_inboxes;
    uint64_t dropped_in, dropped_out; /* frames refused or with nowhere to go */
} wlink;

/* ---------------------------------------------------------------- logging */

/* One line for the first few of a kind, then one in a thousand: a peer sending garbage must
 * not flood the log. */
static void log_drop(const wlink *l, uint64_t count, const char *what, const char *why)
{
    if (count <= 5 || count % 1000 == 0)
        fprintf(stderr, "dyad worker %s: dropped %s (%s; %llu so far)\n", l->key, what, why,
                (unsigned long long)count);
}

/* ---------------------------------------------------------------- routes (mu held) */

static int inbox_index(wlink *l, const char *reply)
{
    for (int i = 0; i < l->n_inboxes; i++)
        if (strcmp(l->inboxes[i], reply) == 0)
            return i;
    if (l->n_inboxes == MAX_INBOXES)
        return -1;
    if (!(l->inboxes[l->n_inboxes] = strdup(reply)))
        return -1;
    return l->n_inboxes++;
}

static bool route(wlink *l, uint64_t first, uint32_t n, const char *reply)
{
    if (!reply || !reply[0] || strlen(reply) > MAX_SUBJECT || l->routes.len + n > MAX_ROUTES)
        return false;
    int at = inbox_index(l, reply);
    if (at < 0)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (!dy_hashmap_put(&l->routes, first + i, (uint64_t)at))
            return false;
    return true;
}

/* ---------------------------------------------------------------- frames in (NATS threads) */

static bool write_frame(wlink *l, const void *data, size_t len)
{
    pthread_mutex_lock(&l->wmu);
    bool ok = l->fd >= 0 && dy_write_all(l->fd, data, len);
    pthread_mutex_unlock(&l->wmu);
    return ok;
}

static void on_frame_in(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *arg)
{
    (void)nc, (void)sub;
    wlink *l = arg;
    const char *data = natsMsg_GetData(msg);
    const size_t len = (size_t)natsMsg_GetDataLength(msg);
    char err[256];
    dy_msg_type t;
    if (!dy_cluster_frame_check(data, len, DY_TO_WORKER, &t, err, sizeof err)) {
        pthread_mutex_lock(&l->mu);
        uint64_t k = ++l->dropped_in;
        pthread_mutex_unlock(&l->mu);
        log_drop(l, k, "a malformed frame from a frontend", err);
        natsMsg_Destroy(msg);
        return;
    }
    if (dy_cluster_frame_refused(t)) {
        pthread_mutex_lock(&l->mu);
        uint64_t k = ++l->dropped_in;
        pthread_mutex_unlock(&l->mu);
        log_drop(l, k, t == DY_MSG_ROLE ? "a ROLE frame" : "a SHUTDOWN frame",
                 "a cluster worker's role and life are its host's, not a frontend's");
        natsMsg_Destroy(msg);
        return;
    }
    if (t == DY_MSG_REQUEST || t == DY_MSG_PREFILL) {
        uint64_t first;
        uint32_t n;
        dy_cluster_frame_ids(data, len, &first, &n);
        pthread_mutex_lock(&l->mu);
        bool ok = route(l, first, n, natsMsg_GetReply(msg));
        uint64_t k = ok ? 0 : ++l->dropped_in;
        pthread_mutex_unlock(&l->mu);
        if (!ok) {
            log_drop(l, k, "a sequence", "no reply subject, or too many sequences or "
                                         "frontends at once");
            natsMsg_Destroy(msg);
            return;
        }
    }
    write_frame(l, data, len);
    natsMsg_Destroy(msg);
}

static void on_hello_asked(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *arg)
{
    (void)sub;
    wlink *l = arg;
    const char *reply = natsMsg_GetReply(msg);
    pthread_mutex_lock(&l->mu);
    if (reply && l->hello)
        natsConnection_Publish(nc, reply, l->hello, (int)l->hello_len);
    pthread_mutex_unlock(&l->mu);
    natsMsg_Destroy(msg);
}

/* ---------------------------------------------------------------- frames out (the pump) */

/* HELLO: remembered for frontends that ask, and what the registry entry says. */
static void took_hello(wlink *l, const uint8_t *frame, size_t len)
{
    dy_msg_hello h;
    char err[256];
    if (!dy_wire_decode_hello(frame + DY_WIRE_HEADER, len - DY_WIRE_HEADER, &h, err,
                              sizeof err))
        return;
    uint8_t *copy = malloc(len);
    if (!copy)
        return;
    memcpy(copy, frame, len);
    pthread_mutex_lock(&l->mu);
    free(l->hello);
    l->hello = copy;
    l->hello_len = len;
    dy_reg_entry *e = &l->entry;
    e->role = h.role;
    e->fingerprint = h.fingerprint;
    e->block_size = h.block_size;
    e->kv_blocks = h.kv_blocks;
    snprintf(e->kv_addr, sizeof e->kv_addr, "%s", h.tcp_addr);
    e->kv_transfer = h.tcp_addr[0] ? l->cfg->kv_receiver : 0;
    l->registered = true;
    pthread_cond_broadcast(&l->changed); /* the renewer writes the entry now */
    pthread_mutex_unlock(&l->mu);
}

static void took_stats(wlink *l, const uint8_t *frame, size_t len)
{
    dy_msg_stats s;
    char err[256];
    if (!dy_wire_decode_stats(frame + DY_WIRE_HEADER, len - DY_WIRE_HEADER, &s, err,
                              sizeof err))
        return;
    pthread_mutex_lock(&l->mu);
    l->entry.load = (dy_reg_load){s.running, s.waiting, s.kv_blocks_used, s.kv_blocks_total};
    pthread_cond_broadcast(&l->changed); /* a leave waits for the load to reach zero */
    pthread_mutex_unlock(&l->mu);
}

/* A sequence's frame goes to the frontend that sent the sequence; its last frame (DONE,
 * PREFILL_DONE) forgets the route. */
static void publish_routed(wlink *l, dy_msg_type t, const uint8_t *frame, size_t len)
{
    uint64_t id;
    uint32_t n;
    dy_cluster_frame_ids(frame, len, &id, &n);
    char inbox[MAX_SUBJECT + 1] = "";
    pthread_mutex_lock(&l->mu);
    uint64_t at = n ? dy_hashmap_get(&l->routes, id) : DY_HASHMAP_NONE;
    if (at != DY_HASHMAP_NONE) {
        snprintf(inbox, sizeof inbox, "%s", l->inboxes[at]);
        if (t == DY_MSG_DONE || t == DY_MSG_PREFILL_DONE)
            dy_hashmap_remove(&l->routes, id);
    }
    uint64_t k = inbox[0] ? 0 : ++l->dropped_out;
    pthread_mutex_unlock(&l->mu);
    if (inbox[0])
        natsConnection_Publish(l->nc, inbox, frame, (int)len);
    else
        log_drop(l, k, "an answer", "no frontend sent its sequence");
}

static void pump_frame(void *arg, dy_msg_type t, const uint8_t *frame, size_t len)
{
    wlink *l = arg;
    switch (t) {
    case DY_MSG_TOKEN: case DY_MSG_DONE: case DY_MSG_KV_ALLOC: case DY_MSG_PREFILL_DONE:
        publish_routed(l, t, frame, len);
        return;
    case DY_MSG_HELLO:
        took_hello(l, frame, len);
        break;
    case DY_MSG_STATS:
        took_stats(l, frame, len);
        break;
    default:
        break;
    }
    natsConnection_Publish(l->nc, l->subj_out, frame, (int)len);
}

/* Until the worker closes its end. */
static void *pump_main(void *arg)
{
    wlink *l = arg;
    char err[256];
    if (!dy_conn_pump(l->fd, pump_frame, l, err, sizeof err))
        fprintf(stderr, "dyad worker %s: its own frames are corrupt (%s)\n", l->key, err);
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_cond_broadcast(&l->changed);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---------------------------------------------------------------- the lease */

/* A NATS server that came back without its store (a new server, or one without -sd) has no
 * bucket: it is made again, and the entry put there. Only the renewer uses l->kv after the
 * start, so it may replace it. */
static bool reopen_and_put(wlink *l, const dy_reg_entry *e, char *err, size_t errlen)
{
    kvStore *kv = dy_reg_open(l->nc, 10 * l->cfg->cluster_lease_s + 60, err, errlen);
    if (!kv)
        return false;
    kvStore_Destroy(l->kv);
    l->kv = kv;
    return dy_reg_put(l->kv, e, err, errlen);
}

static void *renew_main(void *arg)
{
    wlink *l = arg;
    bool failing = false;
    uint64_t conn = dy_nats_reconnects(l->nc);
    pthread_mutex_lock(&l->mu);
    while (!l->stopping) {
        if (!l->registered) {
            pthread_cond_wait(&l->changed, &l->mu);
            continue;
        }
        /* Reconnected: frames that frontends sent meanwhile are lost (core NATS keeps none
         * for a subscriber that is away), so the sequences they were part of may wait for
         * ever. A new incarnation makes every frontend let this worker go (ending those
         * sequences: rerun, or a clear error) and attach it again. */
        const uint64_t now_conn = dy_nats_reconnects(l->nc);
        if (now_conn != conn) {
            conn = now_conn;
            dy_cluster_random_hex(l->entry.incarnation, sizeof l->entry.incarnation);
            fprintf(stderr, "dyad worker %s: reconnected to NATS: registering again as a new "
                    "incarnation (frames sent to it meanwhile may be lost)\n", l->key);
        }
        dy_reg_entry e = l->entry;
        pthread_mutex_unlock(&l->mu);
        char err[256];
        bool ok = dy_reg_put(l->kv, &e, err, sizeof err);
        if (!ok)
            ok = reopen_and_put(l, &e, err, sizeof err);
        if (!ok && !failing)
            fprintf(stderr, "dyad worker %s: cannot renew its lease (%s); trying again\n",
                    l->key, err);
        else if (ok && failing)
            fprintf(stderr, "dyad worker %s: lease renewed again\n", l->key);
        failing = !ok;
        pthread_mutex_lock(&l->mu);
        const double until = dy_now() + e.lease_s / 3;
        while (!l->stopping && !l->put_now && dy_now() < until)
            dy_cond_wait_until(&l->changed, &l->mu, until);
        l->put_now = false;
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---------------------------------------------------------------- leaving */

/* Draining: frontends place nothing new here (the renewer writes the entry at once); the
 * running sequences may finish within the drain timeout; then the worker loop is told to end,
 * and the entry is deleted once it has (dy_cluster_worker_run). */
static void leave(wlink *l)
{
    pthread_mutex_lock(&l->mu);
    l->entry.draining = true;
    l->put_now = true;
    pthread_cond_broadcast(&l->changed);
    const double until = dy_now() + l->cfg->cluster_drain_s;
    while (!l->stopping && l->entry.load.running + l->entry.load.waiting > 0 &&
           dy_now() < until)
        dy_cond_wait_until(&l->changed, &l->mu, until);
    pthread_mutex_unlock(&l->mu);
    dy_buf b = {0};
    if (dy_wire_shutdown(&b))
        write_frame(l, b.data, b.len);
    dy_buf_free(&b);
}

typedef struct {
    wlink *link;
    sigset_t set;
} signal_ctx;

/* SIGUSR1 is the main thread's "the worker ended by itself": stop waiting. */
static void *signals_main(void *arg)
{
    signal_ctx *s = arg;
    int sig = 0;
    sigwait(&s->set, &sig);
    if (sig != SIGUSR1) {
        fprintf(stderr, "dyad worker %s: %s: leaving the cluster (running sequences may "
                "finish within %.0f s)\n", s->link->key, sig == SIGINT ? "SIGINT" : "SIGTERM",
                s->link->cfg->cluster_drain_s);
        leave(s->link);
    }
    return NULL;
}

/* ---------------------------------------------------------------- setup */

static void base_name(const char *path, char *out, size_t cap)
{
    const char *s = strrchr(path, '/');
    snprintf(out, cap, "%s", s ? s + 1 : path);
}

static void fill_entry(wlink *l)
{
    const dy_worker_config *c = l->cfg;
    dy_reg_entry *e = &l->entry;
    e->id = (uint32_t)c->worker_id;
    dy_cluster_random_hex(e->incarnation, sizeof e->incarnation);
    if (c->cluster_host)
        snprintf(e->host, sizeof e->host, "%s", c->cluster_host);
    else if (gethostname(e->host, sizeof e->host) != 0)
        snprintf(e->host, sizeof e->host, "unknown");
    e->host[sizeof e->host - 1] = 0;
    e->pid = (uint32_t)getpid();
    e->role = c->role;
    base_name(c->model, e->model, sizeof e->model);
    e->kv_type = c->kv_type;
    e->threads = (uint32_t)c->threads;
    e->lease_s = c->cluster_lease_s;
}

static bool check_config(const dy_worker_config *c, char *err, size_t errlen)
{
    if (!dy_nats_url_check(c->cluster, err, errlen))
        return false;
    if (c->fd >= 0) {
        snprintf(err, errlen, "--cluster and --fd exclude each other");
        return false;
    }
    if (c->switchable) {
        snprintf(err, errlen, "--switchable: a cluster worker keeps the role it is started in");
        return false;
    }
    if (c->role == DY_ROLE_DECODE && !c->kv_listen) {
        snprintf(err, errlen, "a decode worker of a cluster needs --kv-listen HOST:PORT, an "
                              "address its prefill workers can reach");
        return false;
    }
    return true;
}

static bool subscribe(wlink *l, char *err, size_t errlen)
{
    natsStatus s = natsConnection_Subscribe(&l->sub_in, l->nc, l->subj_in, on_frame_in, l);
    if (s == NATS_OK)
        s = natsConnection_Subscribe(&l->sub_hello, l->nc, l->subj_hello, on_hello_asked, l);
    /* A worker in a long step must not lose the frames queued meanwhile: no message limit,
     * and 256 MiB before NATS calls it a slow consumer. */
    if (s == NATS_OK)
        s = natsSubscription_SetPendingLimits(l->sub_in, -1, 256 << 20);
    if (s == NATS_OK)
        s = natsConnection_Flush(l->nc);
    if (s != NATS_OK)
        snprintf(err, errlen, "cannot subscribe to %s: %s", l->subj_in, natsStatus_GetText(s));
    return s == NATS_OK;
}

/* No callback runs after this: they use l, which lives on dy_cluster_worker_run's stack. */
static void unsubscribe(wlink *l)
{
    dy_nats_unsubscribe(&l->sub_in, 2);
    dy_nats_unsubscribe(&l->sub_hello, 2);
}

static void free_link(wlink *l)
{
    dy_hashmap_free(&l->routes);
    for (int i = 0; i < l->n_inboxes; i++)
        free(l->inboxes[i]);
    free(l->hello);
    pthread_mutex_destroy(&l->wmu);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->changed);
}

int dy_cluster_worker_run(dy_worker_config *c)
{
    char err[512];
    if (!check_config(c, err, sizeof err)) {
        fprintf(stderr, "dyad worker: %s\n", err);
        return 2;
    }
    if (c->worker_id == 0)
        c->worker_id = (int)dy_cluster_random_id();
    wlink l = {.cfg = c, .fd = -1};
    dy_reg_key((uint32_t)c->worker_id, l.key);
    snprintf(l.subj_in, sizeof l.subj_in, "dyad.w.%s.in", l.key);
    snprintf(l.subj_out, sizeof l.subj_out, "dyad.w.%s.out", l.key);
    snprintf(l.subj_hello, sizeof l.subj_hello, "dyad.w.%s.hello", l.key);
    pthread_mutex_init(&l.wmu, NULL);
    pthread_mutex_init(&l.mu, NULL);
    dy_cond_init(&l.changed);
    fill_entry(&l);

    /* SIGINT and SIGTERM (and SIGUSR1, the main thread's wake-up) go to the signal thread
     * alone: every thread started from here inherits the mask, NATS's included. */
    signal_ctx sc = {.link = &l};
    sigemptyset(&sc.set);
    sigaddset(&sc.set, SIGINT);
    sigaddset(&sc.set, SIGTERM);
    sigaddset(&sc.set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sc.set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char name[64];
    snprintf(name, sizeof name, "dyad worker %s", l.key);
    dy_nats_opts no = {.url = c->cluster, .name = name, .who = "dyad worker",
                       .timeout_s = c->cluster_timeout_s};
    int sv[2] = {-1, -1};
    int rc = 1;
    pthread_t pump, renew, sigs;
    bool pump_on = false, renew_on = false, sigs_on = false;
    if (!(l.nc = dy_nats_connect(&no, err, sizeof err)) ||
        !(l.kv = dy_reg_open(l.nc, 10 * c->cluster_lease_s + 60, err, sizeof err)) ||
        !subscribe(&l, err, sizeof err)) {
        fprintf(stderr, "dyad worker: %s\n", err);
        goto out;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        fprintf(stderr, "dyad worker: socketpair: %s\n", strerror(errno));
        goto out;
    }
    l.fd = sv[0];
    c->fd = sv[1];
    if (pthread_create(&pump, NULL, pump_main, &l) != 0 ||
        !(pump_on = true) || pthread_create(&renew, NULL, renew_main, &l) != 0 ||
        !(renew_on = true) || pthread_create(&sigs, NULL, signals_main, &sc) != 0) {
        fprintf(stderr, "dyad worker: cannot start its threads\n");
        goto out;
    }
    sigs_on = true;
    fprintf(stderr, "dyad worker %s: joining the cluster at %s as %s\n", l.key, c->cluster,
            c->role == DY_ROLE_PREFILL ? "a prefill worker"
            : c->role == DY_ROLE_DECODE ? "a decode worker" : "an aggregated worker");
    rc = dy_worker_run(c);
out:
    /* The worker loop has ended (or never ran): its end closes, the pump sees it. */
    if (sv[1] >= 0)
        close(sv[1]);
    if (sigs_on) {
        pthread_kill(sigs, SIGUSR1);
        pthread_join(sigs, NULL);
    }
    if (pump_on)
        pthread_join(pump, NULL);
    pthread_mutex_lock(&l.mu);
    l.stopping = true;
    const bool registered = l.registered;
    pthread_cond_broadcast(&l.changed);
    pthread_mutex_unlock(&l.mu);
    if (renew_on)
        pthread_join(renew, NULL);
    if (registered && l.kv)
        dy_reg_delete(l.kv, (uint32_t)c->worker_id, err, sizeof err); /* gone already: fine */
    unsubscribe(&l);
    pthread_mutex_lock(&l.wmu);
    if (l.fd >= 0)
        close(l.fd);
    l.fd = -1;
    pthread_mutex_unlock(&l.wmu);
    if (l.kv)
        kvStore_Destroy(l.kv);
    dy_nats_close(l.nc);
    free_link(&l);
    return rc;
}

#endif
