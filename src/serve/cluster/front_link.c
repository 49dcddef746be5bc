/* front_link.c — a frontend's workers in cluster mode (front_link.h). One watcher thread owns
 * the members (the workers it has heard of): it attaches, lets go and times leases. Each
 * attached member has a pump thread (the fleet's frames → NATS) and two subscriptions, whose
 * callbacks run on NATS's threads and write into the member's socket under its write lock. */
#include "serve/cluster/front_link.h"

#include "serve/cluster/frames.h"
#include "serve/cluster/nats_conn.h"
#include "serve/cluster/registry.h"
#include "serve/wire/wire.h"
#include "serve/wire/wire_io.h"
#include "util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef DYAD_HAVE_NATS

dy_front_link *dy_front_link_start(const dy_front_link_opts *o, dy_fleet *fleet, char *err,
                                   size_t errlen)
{
    (void)o, (void)fleet;
    snprintf(err, errlen, "--cluster needs NATS, and this dyad was built without it (install "
                          "libnats-dev and build again)");
    return NULL;
}

void dy_front_link_stop(dy_front_link *l)
{
    (void)l;
}

#else

/* Workers heard of at once (attached, refused or recently gone). */
#define MAX_MEMBERS 512
/* A member let go is reused for another worker only this long after, when no NATS callback
 * of its old subscriptions can still be running. */
#define REUSE_AFTER_S 30
/* How long a worker has to answer for its HELLO. */
#define HELLO_TIMEOUT_MS 3000
#define HELLO_BACKOFF_MAX_S 60

typedef enum { M_FREE, M_SEEN, M_ATTACHED, M_GONE } member_state;

typedef struct member {
    struct dy_front_link *link;
    member_state state;
    uint32_t id;
    char key[DY_REG_KEY_LEN + 1];
    char incarnation[DY_REG_MAX_STR + 1];
    bool refused;            /* this incarnation differs from the frontend: not used */
    bool said_full;          /* "all slots are taken" was logged for this stay */
    /* HELLOs this incarnation did not answer in a row, and when to ask again: asking waits up
     * to HELLO_TIMEOUT_MS in the watcher, which times every lease, so a worker that keeps
     * renewing and never answers is asked after a pause that doubles, up to HELLO_BACKOFF_MAX_S. */
    int hello_fails;
    double hello_retry_at;
    bool draining;
    double last_write;       /* dy_now() when its entry was last written */
    double lease_s;
    double gone_at;
    int slot;                /* its fleet slot while attached */
    char subj_in[64], subj_out[64], inbox[96];
    natsSubscription *sub_out, *sub_inbox;
    pthread_mutex_t wmu;     /* fd, for the callbacks' writes */
    int fd;                  /* our end of its socket pair; -1 */
    uint64_t conn;           /* the connection's reconnect count when it was attached */
    pthread_t pump;
    bool pump_on, pump_ended;
    bool unheard;            /* NATS said a frame we sent it reached no subscriber */
    uint64_t dropped;
} member;

struct dy_front_link {
    dy_front_link_opts o;
    dy_fleet *fleet;
    natsConnection *nc;
    kvStore *kv;
    dy_reg_watch *watch;
    pthread_t watcher;
    pthread_mutex_t mu;      /* stop, and each member's pump_ended and unheard */
    bool stop;
    member m[MAX_MEMBERS];
};

/* ---------------------------------------------------------------- NATS → the fleet */

static void write_in(member *m, natsMsg *msg, const char *from)
{
    const char *data = natsMsg_GetData(msg);
    const size_t len = (size_t)natsMsg_GetDataLength(msg);
    char err[256];
    dy_msg_type t;
    if (natsMsg_IsNoResponders(msg)) {
        /* NATS's answer to a frame of ours that reached no subscriber of the worker (it is
         * away, reconnecting): the frame is lost, and its sequence would wait for ever. */
        pthread_mutex_lock(&m->link->mu);
        m->unheard = true;
        pthread_mutex_unlock(&m->link->mu);
        natsMsg_Destroy(msg);
        return;
    }
    pthread_mutex_lock(&m->wmu);
    if (!dy_cluster_frame_check(data, len, DY_TO_FRONTEND, &t, err, sizeof err)) {
        uint64_t k = ++m->dropped;
        if (k <= 5 || k % 1000 == 0)
            fprintf(stderr, "dyad serve: dropped a malformed frame from worker %s on %s (%s; "
                    "%llu so far)\n", m->key, from, err, (unsigned long long)k);
    } else if (m->fd >= 0 && dy_nats_reconnects(m->link->nc) == m->conn) {
        dy_write_all(m->fd, data, len); /* a closed socket: the watcher is letting it go */
    }
    /* Not written after a reconnect: what the worker sent while we were away is lost, so
     * its sequences' streams have holes; the watcher lets it go (check_members). */
    pthread_mutex_unlock(&m->wmu);
    natsMsg_Destroy(msg);
}

static void on_out(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *arg)
{
    (void)nc, (void)sub;
    write_in(arg, msg, "its broadcast subject");
}

static void on_inbox(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *arg)
{
    (void)nc, (void)sub;
    write_in(arg, msg, "this frontend's inbox");
}

/* ---------------------------------------------------------------- the fleet → NATS */

static void publish_to_worker(void *arg, dy_msg_type t, const uint8_t *frame, size_t len)
{
    (void)t;
    member *m = arg;
    natsConnection_PublishRequest(m->link->nc, m->subj_in, m->inbox, frame, (int)len);
}

/* Until the fleet's end of the socket closes (the worker's stay ended). */
static void *pump_main(void *arg)
{
    member *m = arg;
    dy_front_link *l = m->link;
    char err[256];
    dy_conn_pump(m->fd, publish_to_worker, m, err, sizeof err); /* the fleet's own frames */
    pthread_mutex_lock(&l->mu);
    m->pump_ended = true;
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---------------------------------------------------------------- members (the watcher) */

static member *find(dy_front_link *l, uint32_t id)
{
    for (int i = 0; i < MAX_MEMBERS; i++)
        if (l->m[i].state != M_FREE && l->m[i].id == id)
            return &l->m[i];
    return NULL;
}

static member *take(dy_front_link *l, uint32_t id, double now)
{
    for (int i = 0; i < MAX_MEMBERS; i++) {
        member *m = &l->m[i];
        if (m->state == M_FREE || (m->state == M_GONE && now - m->gone_at > REUSE_AFTER_S)) {
            m->state = M_SEEN;
            m->id = id;
            dy_reg_key(id, m->key);
            m->incarnation[0] = 0;
            m->refused = m->draining = m->said_full = false;
            m->hello_fails = 0;
            m->hello_retry_at = 0;
            m->dropped = 0;
            return m;
        }
    }
    return NULL;
}

/* Lets an attached worker go: its socket shuts, so the fleet's reader sees a death and the
 * pump ends; the subscriptions stop. */
static void let_go(member *m, const char *why)
{
    if (m->state == M_ATTACHED) {
        if (why)
            fprintf(stderr, "dyad serve: worker %d (%s) %s\n", m->slot, m->key, why);
        /* Not under wmu: a callback blocked writing into a full socket fails at once. */
        shutdown(m->fd, SHUT_RDWR);
        if (m->pump_on)
            pthread_join(m->pump, NULL);
        m->pump_on = false;
        /* The callbacks' writes fail at once on the shut socket; none runs after this. */
        dy_nats_unsubscribe(&m->sub_out, 2);
        dy_nats_unsubscribe(&m->sub_inbox, 2);
        pthread_mutex_lock(&m->wmu);
        close(m->fd);
        m->fd = -1;
        pthread_mutex_unlock(&m->wmu);
    }
    m->state = M_GONE;
    m->gone_at = dy_now();
}

/* Whether the worker's entry fits this frontend; if not, why in err. */
static bool fits(const dy_front_link *l, const dy_reg_entry *e, char *err, size_t errlen)
{
    const dy_front_link_opts *o = &l->o;
    if (e->fingerprint != o->fingerprint)
        snprintf(err, errlen, "serves another model (%s, fingerprint %016llx; this frontend's "
                 "is %016llx)", e->model, (unsigned long long)e->fingerprint,
                 (unsigned long long)o->fingerprint);
    else if (e->block_size != o->block_size)
        snprintf(err, errlen, "has KV blocks of %u positions, this frontend %u (--block-size)",
                 e->block_size, o->block_size);
    else if (e->kv_type != o->kv_type)
        snprintf(err, errlen, "has another KV type (--kv-type)");
    else if (e->role == DY_ROLE_DECODE && (!e->kv_addr[0] || e->kv_transfer != o->xfer))
        snprintf(err, errlen, "is a decode worker that does not receive KV over %s "
                 "(--kv-listen, --kv-receiver)", o->xfer == DY_XFER_UCX ? "ucx" : "tcp");
    else
        return true;
    return false;
}

/* Its HELLO frame (checked, and matching its entry) into *frame; false with why in err. */
static bool ask_hello(dy_front_link *l, const member *m, const dy_reg_entry *e,
                      natsMsg **reply, dy_msg_hello *h, char *err, size_t errlen)
{
    char subj[64];
    snprintf(subj, sizeof subj, "dyad.w.%s.hello", m->key);
    natsStatus s = natsConnection_Request(reply, l->nc, subj, NULL, 0, HELLO_TIMEOUT_MS);
    if (s != NATS_OK) {
        snprintf(err, errlen, "did not answer for its HELLO (%s)", natsStatus_GetText(s));
        return false;
    }
    const char *data = natsMsg_GetData(*reply);
    const size_t len = (size_t)natsMsg_GetDataLength(*reply);
    dy_msg_type t;
    if (!dy_cluster_frame_check(data, len, DY_TO_FRONTEND, &t, err, errlen) ||
        t != DY_MSG_HELLO ||
        !dy_wire_decode_hello((const uint8_t *)data + DY_WIRE_HEADER, len - DY_WIRE_HEADER, h,
                              err, errlen)) {
        if (t != DY_MSG_HELLO)
            snprintf(err, errlen, "answered its HELLO with a frame of type %d", (int)t);
        return false;
    }
    if (h->fingerprint != e->fingerprint || h->block_size != e->block_size ||
        h->role != e->role) {
        snprintf(err, errlen, "sent a HELLO that does not match its registry entry");
        return false;
    }
    return true;
}

static bool subscribe(dy_front_link *l, member *m, char *err, size_t errlen)
{
    natsStatus s = natsConnection_Subscribe(&m->sub_out, l->nc, m->subj_out, on_out, m);
    if (s == NATS_OK)
        s = natsConnection_Subscribe(&m->sub_inbox, l->nc, m->inbox, on_inbox, m);
    /* The reader may lag behind a burst of tokens: NATS buffers them rather than drop. */
    if (s == NATS_OK)
        s = natsSubscription_SetPendingLimits(m->sub_inbox, -1, 256 << 20);
    if (s == NATS_OK)
        s = natsSubscription_SetPendingLimits(m->sub_out, -1, 256 << 20);
    if (s == NATS_OK)
        s = natsConnection_Flush(l->nc);
    if (s != NATS_OK)
        snprintf(err, errlen, "cannot subscribe: %s", natsStatus_GetText(s));
    return s == NATS_OK;
}

/* Attaches a worker that fits: its HELLO first on its socket, then what it publishes. */
static void attach(dy_front_link *l, member *m, const dy_reg_entry *e)
{
    char err[512];
    if (!fits(l, e, err, sizeof err)) {
        fprintf(stderr, "dyad serve: refusing worker %s on %s (pid %u): it %s\n", m->key,
                e->host, e->pid, err);
        m->refused = true;
        return;
    }
    natsMsg *reply = NULL;
    dy_msg_hello h;
    int sv[2] = {-1, -1};
    if (!ask_hello(l, m, e, &reply, &h, err, sizeof err)) {
        double pause = 1;
        for (int k = 0; k < m->hello_fails && pause < HELLO_BACKOFF_MAX_S; k++)
            pause *= 2;
        pause = pause < HELLO_BACKOFF_MAX_S ? pause : HELLO_BACKOFF_MAX_S;
        m->hello_fails++;
        m->hello_retry_at = dy_now() + pause;
        fprintf(stderr, "dyad serve: worker %s on %s %s; asking again in %.0f s\n", m->key,
                e->host, err, pause);
        natsMsg_Destroy(reply);
        return;
    }
    m->hello_fails = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
        !dy_write_all(sv[1], natsMsg_GetData(reply), (size_t)natsMsg_GetDataLength(reply))) {
        fprintf(stderr, "dyad serve: worker %s: socketpair: %s\n", m->key, strerror(errno));
        natsMsg_Destroy(reply);
        if (sv[0] >= 0)
            close(sv[0]), close(sv[1]);
        return;
    }
    natsMsg_Destroy(reply);
    snprintf(m->subj_in, sizeof m->subj_in, "dyad.w.%s.in", m->key);
    snprintf(m->subj_out, sizeof m->subj_out, "dyad.w.%s.out", m->key);
    snprintf(m->inbox, sizeof m->inbox, "dyad.f.%08x.%s", l->o.frontend_id, m->key);
    m->fd = sv[1];
    pthread_mutex_lock(&l->mu);
    m->pump_ended = m->unheard = false;
    pthread_mutex_unlock(&l->mu);
    m->conn = dy_nats_reconnects(l->nc);
    int slot = dy_fleet_attach(l->fleet, sv[0], h.role, err, sizeof err);
    if (slot < 0) {
        if (!m->said_full) /* tried again at each renewal: said once */
            fprintf(stderr, "dyad serve: cannot take worker %s: %s\n", m->key, err);
        m->said_full = true;
        close(sv[0]);
        close(sv[1]);
        m->fd = -1;
        return;
    }
    m->slot = slot;
    m->state = M_ATTACHED;
    if (!subscribe(l, m, err, sizeof err) ||
        pthread_create(&m->pump, NULL, pump_main, m) != 0) {
        fprintf(stderr, "dyad serve: worker %s: %s\n", m->key, err);
        let_go(m, NULL);
        return;
    }
    m->pump_on = true;
    fprintf(stderr, "dyad serve: worker %d is %s (%s: %s on %s, pid %u, %u threads, "
            "incarnation %.8s)\n", slot, m->key,
            h.role == DY_ROLE_PREFILL ? "prefill" : h.role == DY_ROLE_DECODE ? "decode" : "agg",
            e->model, e->host, e->pid, e->threads, e->incarnation);
    if (e->draining)
        dy_fleet_detaching(l->fleet, slot);
}

static void on_put(dy_front_link *l, const dy_reg_entry *e, double now, double written)
{
    if (now - written > e->lease_s)
        return; /* expired already: nothing to attach (its key may still be let go) */
    member *m = find(l, e->id);
    if (m && strcmp(m->incarnation, e->incarnation) != 0 && m->incarnation[0]) {
        /* The key's member is used again for the new process: had another been taken, find
         * would go on returning this one, with the old incarnation, and every renewal would
         * attach the worker once more. */
        let_go(m, "registered again as a new incarnation (a new process, or it reconnected to "
                  "NATS)");
        m->state = M_SEEN;
        m->refused = m->draining = false;
        m->dropped = 0;
        m->hello_fails = 0;
        m->hello_retry_at = 0;
    }
    if (m && m->state == M_GONE)
        m->state = M_SEEN; /* came back (a partition healed): a new stay */
    if (!m && !(m = take(l, e->id, now))) {
        fprintf(stderr, "dyad serve: ignoring worker %08x: %d workers known already\n", e->id,
                MAX_MEMBERS);
        return;
    }
    snprintf(m->incarnation, sizeof m->incarnation, "%s", e->incarnation);
    m->last_write = written;
    m->lease_s = e->lease_s;
    if (m->state == M_ATTACHED) {
        if (e->draining && !m->draining)
            dy_fleet_detaching(l->fleet, m->slot);
        m->draining = e->draining;
        return;
    }
    if (!m->refused && !e->draining && now >= m->hello_retry_at)
        attach(l, m, e);
}

/* Leases past due, members whose slot ended their stay (the fleet found them silent), and
 * members attached before this frontend's connection to NATS last broke: frames to and from
 * them were lost meanwhile (core NATS keeps nothing for a subscriber that is away), so their
 * sequences end here (rerun if they had not started, else a clear error) and they are
 * attached again at their next renewal. */
static void check_members(dy_front_link *l, double now)
{
    const uint64_t conn = dy_nats_reconnects(l->nc);
    for (int i = 0; i < MAX_MEMBERS; i++) {
        member *m = &l->m[i];
        if (m->state != M_ATTACHED && m->state != M_SEEN)
            continue;
        pthread_mutex_lock(&l->mu);
        const bool ended = m->state == M_ATTACHED && m->pump_ended;
        const bool unheard = m->state == M_ATTACHED && m->unheard;
        pthread_mutex_unlock(&l->mu);
        if (now - m->last_write > m->lease_s) {
            char why[128];
            snprintf(why, sizeof why, "has not renewed its lease for %.1f s: letting it go",
                     now - m->last_write);
            let_go(m, why);
        } else if (ended || unheard || (m->state == M_ATTACHED && m->conn != conn)) {
            let_go(m, ended     ? NULL
                      : unheard ? "did not get a frame this frontend sent (NATS found no "
                                  "subscriber: it is away): letting it go until it renews its "
                                  "lease"
                                : "was cut off while this frontend reconnected to NATS (frames "
                                  "may have been lost): letting it go until it renews its "
                                  "lease");
            m->incarnation[0] = 0; /* its next renewal attaches it again */
            m->state = M_SEEN;
        }
    }
}

/* One change of the watch (rc as dy_reg_watch_next returned it). */
static void take_change(dy_front_link *l, int rc, dy_reg_change kind, uint32_t id,
                        const dy_reg_entry *e, const char *err, uint64_t *errors)
{
    const double now = dy_now();
    if (rc > 0 && kind == DY_REG_PUT) {
        /* Judged by when the server stored it: an entry among the initial values may be a
         * dead worker's, long past its lease. */
        on_put(l, e, now, now - dy_reg_watch_age(l->watch));
    } else if (rc > 0) {
        member *m = find(l, id);
        if (m && m->state != M_GONE)
            let_go(m, "left the cluster");
    } else if (rc < 0 && (++*errors <= 5 || *errors % 1000 == 0)) {
        fprintf(stderr, "dyad serve: the registry: %s\n", err);
    }
}

static void *watcher_main(void *arg)
{
    dy_front_link *l = arg;
    uint64_t errors = 0;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        const bool stop = l->stop;
        pthread_mutex_unlock(&l->mu);
        if (stop)
            break;
        dy_reg_change kind;
        uint32_t id;
        dy_reg_entry e;
        char err[512];
        int rc = dy_reg_watch_next(l->watch, 0.2, &kind, &id, &e, err, sizeof err);
        take_change(l, rc, kind, id, &e, err, &errors);
        /* What came in meanwhile is taken before any lease is judged: an attach waits up
         * to HELLO_TIMEOUT_MS for the worker's HELLO, and the renewals the others wrote
         * then are still in the watch, not yet in their last_write. */
        for (int k = 0; rc != 0 && k < 4 * MAX_MEMBERS; k++) {
            rc = dy_reg_watch_next(l->watch, 0, &kind, &id, &e, err, sizeof err);
            take_change(l, rc, kind, id, &e, err, &errors);
        }
        check_members(l, dy_now());
    }
    for (int i = 0; i < MAX_MEMBERS; i++)
        if (l->m[i].state == M_ATTACHED)
            let_go(&l->m[i], NULL);
    return NULL;
}

/* ---------------------------------------------------------------- start and stop */

dy_front_link *dy_front_link_start(const dy_front_link_opts *o, dy_fleet *fleet, char *err,
                                   size_t errlen)
{
    dy_front_link *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->o = *o;
    l->fleet = fleet;
    pthread_mutex_init(&l->mu, NULL);
    for (int i = 0; i < MAX_MEMBERS; i++) {
        l->m[i].link = l;
        l->m[i].fd = -1;
        pthread_mutex_init(&l->m[i].wmu, NULL);
    }
    char name[64];
    snprintf(name, sizeof name, "dyad serve %08x", o->frontend_id);
    dy_nats_opts no = {.url = o->url, .name = name, .who = "dyad serve",
                       .timeout_s = o->timeout_s};
    if (!(l->nc = dy_nats_connect(&no, err, errlen)) ||
        !(l->kv = dy_reg_open(l->nc, 120, err, errlen)) ||
        !(l->watch = dy_reg_watch_start(l->kv, err, errlen)) ||
        pthread_create(&l->watcher, NULL, watcher_main, l) != 0) {
        if (l->nc && l->kv && l->watch)
            snprintf(err, errlen, "cannot start the registry's watcher thread");
        dy_reg_watch_stop(l->watch);
        if (l->kv)
            kvStore_Destroy(l->kv);
        dy_nats_close(l->nc);
        for (int i = 0; i < MAX_MEMBERS; i++)
            pthread_mutex_destroy(&l->m[i].wmu);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return NULL;
    }
    return l;
}

void dy_front_link_stop(dy_front_link *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->watcher, NULL);
    dy_reg_watch_stop(l->watch);
    kvStore_Destroy(l->kv);
    dy_nats_close(l->nc); /* every member was let go: their subscriptions have ended */
    for (int i = 0; i < MAX_MEMBERS; i++)
        pthread_mutex_destroy(&l->m[i].wmu);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

#endif
