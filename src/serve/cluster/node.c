/* node.c — `dyad node`, the per-host agent (node.h, docs/cluster.md "Node agents"): its NATS
 * and process half. One thread runs a loop that, in turn,
 *   - takes SIGINT/SIGTERM (blocked, polled with sigtimedwait) and starts leaving;
 *   - reaps its workers (waitpid, never blocking): their cores are free again, a start or
 *     stop waiting on one is answered, and a worker that died by itself gets a log line;
 *   - answers the requests on dyad.n.<key>.cmd (a synchronous subscription), each decoded by
 *     dy_node_req_decode: start forks `dyad worker --cluster ...` (util/spawn.h), stop sends
 *     SIGTERM, list answers the entry;
 *   - watches the worker registry (registry.h) for the workers it started: a start is answered
 *     once its worker has registered there;
 *   - answers or kills what ran past its bound (a worker that never registers, one that does
 *     not leave within its drain);
 *   - writes its entry in dyad_nodes when it changed, and every lease / 3 (the lease).
 * Leaving: every worker gets SIGTERM and leaves cleanly (worker_link.h) within its drain, the
 * rest get SIGKILL, and the entry is deleted. The pure half is node_entry.c. */
#include "serve/cluster/node.h"

#ifdef DYAD_HAVE_NATS
#include "serve/cluster/ids.h"
#include "serve/cluster/nats_conn.h"
#include "serve/cluster/registry.h"
#include "serve/wire/wire.h"
#include "serve/wire/worker_args.h"
#include "util/clock.h"
#include "util/spawn.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SUBJECT 256
#define POLL_MS 20          /* each wait of the loop: requests, then the registry */
#define KILL_GRACE_S 5.0    /* past a worker's drain before SIGKILL */

typedef enum { C_STARTING, C_RUNNING, C_STOPPING } cstate;

typedef struct {
    pid_t pid;
    uint32_t id;
    cstate state;
    char reply[MAX_SUBJECT + 1]; /* who waits for its start or its stop; "" for nobody */
    double deadline;             /* STARTING: registered by then; STOPPING: SIGKILL then */
    bool killed;                 /* SIGKILL sent */
} child;

typedef struct {
    const dy_node_config *cfg;
    natsConnection *nc;
    kvStore *nodes, *workers;
    natsSubscription *cmd;
    dy_reg_watch *watch;
    dy_node_entry e;
    char key[DY_NODE_KEY_LEN + 1], subject[64];
    child ch[DY_NODE_MAX_WORKERS];
    int n_ch;
    bool dirty;       /* the entry changed: write it now */
    double next_put;
    bool put_failing;
} node;

static const dy_kv_bucket nodes_bucket = {DY_NODE_BUCKET, "dyad node agents (docs/cluster.md)",
                                          DY_NODE_MAX_VALUE};

static void say(const node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const node *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dyad node %s: %s\n", n->key, msg);
}

/* ---------------------------------------------------------------- answers */

static void answer(node *n, const char *reply, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(obj);
    if (!text) {
        text = strdup("{\"ok\":false,\"error\":\"the node ran out of memory\"}");
        if (!text)
            return;
    }
    if (reply && reply[0])
        natsConnection_PublishString(n->nc, reply, text);
    free(text);
}

static void answer_error(node *n, const char *reply, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void answer_error(node *n, const char *reply, const char *fmt, ...)
{
    char msg[DY_NODE_MAX_ERROR + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    answer(n, reply, json_pack("{s:b, s:s}", "ok", 0, "error", msg));
}

static void answer_worker(node *n, const char *reply, const child *c, const char *how)
{
    char key[DY_REG_KEY_LEN + 1];
    dy_reg_key(c->id, key);
    json_t *o = json_pack("{s:b, s:s, s:i}", "ok", 1, "worker", key, "pid", (json_int_t)c->pid);
    if (o && how)
        json_object_set_new(o, "exit", json_string(how));
    answer(n, reply, o);
}

/* ---------------------------------------------------------------- the entry (the lease) */

static bool put_entry(node *n, char *err, size_t errlen)
{
    char value[DY_NODE_MAX_VALUE + 1];
    int len = dy_node_encode(&n->e, value, sizeof value);
    if (len < 0) {
        snprintf(err, errlen, "its entry cannot be encoded");
        return false;
    }
    uint64_t rev = 0;
    natsStatus s = kvStore_Put(&rev, n->nodes, n->key, value, len);
    if (s != NATS_OK)
        dy_nats_reason(s, err, errlen);
    return s == NATS_OK;
}

/* As the workers' renewer does: a server that came back without its store has no bucket, so
 * it is made again. */
static void renew(node *n, bool force)
{
    double now = dy_now();
    if (!force && !n->dirty && now < n->next_put)
        return;
    char err[512];
    bool ok = put_entry(n, err, sizeof err);
    if (!ok) {
        kvStore *kv = dy_kv_open(n->nc, &nodes_bucket, 10 * n->cfg->lease_s + 60, err,
                                 sizeof err);
        if (kv) {
            kvStore_Destroy(n->nodes);
            n->nodes = kv;
            ok = put_entry(n, err, sizeof err);
        }
    }
    if (!ok && !n->put_failing)
        say(n, "cannot renew its lease (%s); trying again", err);
    else if (ok && n->put_failing)
        say(n, "lease renewed again");
    n->put_failing = !ok;
    n->dirty = false;
    n->next_put = now + n->cfg->lease_s / 3;
}

/* ---------------------------------------------------------------- workers */

static child *child_of_id(node *n, uint32_t id)
{
    for (int i = 0; i < n->n_ch; i++)
        if (n->ch[i].id == id)
            return &n->ch[i];
    return NULL;
}

static void forget_child(node *n, child *c)
{
    int i = dy_node_find_worker(&n->e, c->id);
    if (i >= 0)
        dy_node_remove_worker(&n->e, i);
    *c = n->ch[--n->n_ch];
    n->dirty = true;
}

static const char *role_words(int role)
{
    return role == DY_ROLE_PREFILL ? "a prefill worker"
           : role == DY_ROLE_DECODE ? "a decode worker" : "an aggregated worker";
}

/* The worker's command line into argv (strings in store / the config's). */
static bool worker_argv(const node *n, uint32_t id, int role, uint32_t threads, char **argv,
                        int cap, char *store, size_t storecap, char *err, size_t errlen)
{
    const dy_node_config *c = n->cfg;
    dy_worker_config wc;
    char *none[] = {"worker", NULL};
    if (dy_worker_args_parse(1, none, &wc, err, errlen) != DY_OPTS_OK)
        return false;
    wc.role = role;
    wc.threads = (int)threads;
    wc.worker_id = (int)id;
    wc.model = c->model;
    wc.tokenizer = c->tokenizer;
    char *listen = store;
    int used = snprintf(listen, storecap, "%s:0", c->kv_host);
    char *lease = store + used + 1, *drain;
    used += 1 + snprintf(lease, storecap - (size_t)used - 1, "%g", c->lease_s);
    drain = store + used + 1;
    used += 1 + snprintf(drain, storecap - (size_t)used - 1, "%g", c->drain_s);
    if ((size_t)used + 1 >= storecap / 2) {
        snprintf(err, errlen, "the worker's arguments do not fit");
        return false;
    }
    if (role == DY_ROLE_DECODE)
        wc.kv_listen = listen;
    int a = 0;
    argv[a++] = (char *)c->exe;
    argv[a++] = "worker";
    argv[a++] = "--cluster";
    argv[a++] = (char *)c->url;
    argv[a++] = "--cluster-host";
    argv[a++] = (char *)n->e.host;
    argv[a++] = "--cluster-lease";
    argv[a++] = lease;
    argv[a++] = "--cluster-drain";
    argv[a++] = drain;
    if (dy_worker_args_argv(&wc, argv + a, cap - a, store + storecap / 2, storecap / 2) < 0) {
        snprintf(err, errlen, "the worker's arguments do not fit");
        return false;
    }
    return true;
}

/* A worker id that no worker of this node, nor any entry of the registry, has: `dyad worker
 * --id` takes at most DY_WORKER_ID_MAX (the embedded fleet's bound), so ids are drawn from
 * that smaller range and checked. */
static bool worker_id(node *n, uint32_t *id)
{
    for (int tries = 0; tries < 32; tries++) {
        *id = dy_cluster_random_id() % (uint32_t)DY_WORKER_ID_MAX + 1;
        char key[DY_REG_KEY_LEN + 1];
        dy_reg_key(*id, key);
        kvEntry *ke = NULL;
        natsStatus s = kvStore_Get(&ke, n->workers, key);
        kvEntry_Destroy(ke);
        if (dy_node_find_worker(&n->e, *id) < 0 && s == NATS_NOT_FOUND)
            return true;
    }
    return false;
}

static void start_worker(node *n, const char *reply, const dy_node_req *q)
{
    uint32_t id;
    if (!worker_id(n, &id)) {
        answer_error(n, reply, "no free worker id found in " DY_REG_BUCKET);
        return;
    }
    char err[512];
    /* the cores are taken first: the check and the accounting are one */
    if (!dy_node_add_worker(&n->e, id, q->role, q->threads, 1, err, sizeof err)) {
        say(n, "refusing to start %s of %u threads: %s", role_words(q->role),
            (unsigned)q->threads, err);
        answer_error(n, reply, "%s", err);
        return;
    }
    char *argv[16 + DY_WORKER_ARGV_MAX], store[2 * DY_WORKER_ARGV_STORE];
    pid_t pid = -1;
    if (worker_argv(n, id, q->role, q->threads, argv, (int)(sizeof argv / sizeof argv[0]),
                    store, sizeof store, err, sizeof err))
        pid = dy_spawn(n->cfg->exe, argv, -1, err, sizeof err);
    int at = dy_node_find_worker(&n->e, id);
    if (pid < 0) {
        dy_node_remove_worker(&n->e, at);
        answer_error(n, reply, "cannot start the worker: %s", err);
        return;
    }
    n->e.workers[at].pid = (uint32_t)pid;
    child *c = &n->ch[n->n_ch++];
    *c = (child){.pid = pid, .id = id, .state = C_STARTING,
                 .deadline = dy_now() + n->cfg->start_timeout_s};
    snprintf(c->reply, sizeof c->reply, "%s", reply);
    n->dirty = true;
    say(n, "starting %s w%08x of %u threads (pid %d); %u of %u cores used",
        role_words(q->role), (unsigned)id, (unsigned)q->threads, (int)pid,
        (unsigned)n->e.cores_used, (unsigned)n->e.cores);
}

/* SIGTERM: the worker leaves cleanly, within its drain; SIGKILL past that. */
static void stop_child(node *n, child *c, const char *reply)
{
    if (c->state == C_STARTING && c->reply[0])
        answer_error(n, c->reply, "worker w%08x was stopped before it registered",
                     (unsigned)c->id);
    c->state = C_STOPPING;
    c->deadline = dy_now() + n->cfg->drain_s + KILL_GRACE_S;
    snprintf(c->reply, sizeof c->reply, "%s", reply ? reply : "");
    kill(c->pid, SIGTERM);
}

static void handle(node *n, natsMsg *msg)
{
    const char *reply = natsMsg_GetReply(msg);
    if (!reply || !reply[0] || strlen(reply) > MAX_SUBJECT) {
        say(n, "dropped a request with no reply subject (or one too long)");
        return;
    }
    dy_node_req q;
    char err[384];
    if (!dy_node_req_decode(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg), &q, err,
                            sizeof err)) {
        say(n, "refused a bad request: %s", err);
        answer_error(n, reply, "bad request: %s", err);
        return;
    }
    if (q.op == DY_NODE_START) {
        start_worker(n, reply, &q);
    } else if (q.op == DY_NODE_STOP) {
        child *c = child_of_id(n, q.worker_id);
        if (!c)
            answer_error(n, reply, "worker %s: not a worker of node %s (%s)", q.worker, n->key,
                         n->e.host);
        else if (c->state == C_STOPPING)
            answer_error(n, reply, "worker %s: already stopping", q.worker);
        else {
            say(n, "stopping worker %s (pid %d)", q.worker, (int)c->pid);
            stop_child(n, c, reply);
        }
    } else {
        json_t *e = dy_node_to_json(&n->e);
        answer(n, reply, e ? json_pack("{s:b, s:s, s:o}", "ok", 1, "key", n->key, "node", e)
                           : NULL);
    }
}

static void describe_status(int st, char *out, size_t cap)
{
    if (WIFEXITED(st))
        snprintf(out, cap, "exit status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(out, cap, "killed by signal %d", WTERMSIG(st));
    else
        snprintf(out, cap, "status %d", st);
}

static void reap(node *n)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        child *c = NULL;
        for (int i = 0; i < n->n_ch; i++)
            if (n->ch[i].pid == pid)
                c = &n->ch[i];
        if (!c)
            continue;
        char how[64];
        describe_status(st, how, sizeof how);
        int at = dy_node_find_worker(&n->e, c->id);
        unsigned threads = at >= 0 ? (unsigned)n->e.workers[at].threads : 0;
        const child was = *c;
        /* The entry without it is written before anyone hears of the end. */
        forget_child(n, c);
        renew(n, false);
        if (was.state == C_STARTING) {
            say(n, "worker w%08x (pid %d) ended before it registered (%s)", (unsigned)was.id,
                (int)pid, how);
            answer_error(n, was.reply, "worker w%08x ended before it registered (%s); the "
                         "node's log says why", (unsigned)was.id, how);
        } else if (was.state == C_STOPPING) {
            say(n, "worker w%08x (pid %d) stopped (%s)", (unsigned)was.id, (int)pid, how);
            if (was.reply[0])
                answer_worker(n, was.reply, &was, how);
        } else {
            say(n, "worker w%08x (pid %d) died by itself (%s); its %u core%s free",
                (unsigned)was.id, (int)pid, how, threads, threads == 1 ? " is" : "s are");
        }
    }
}

/* Starts answered once their worker registered; bounds enforced. */
static void watch_registry(node *n)
{
    dy_reg_change kind;
    uint32_t id;
    dy_reg_entry e;
    char err[512];
    for (int k = 0; k < 64; k++) {
        int rc = dy_reg_watch_next(n->watch, k ? 0.001 : POLL_MS / 1e3, &kind, &id, &e, err,
                                   sizeof err);
        if (rc == 0)
            return;
        if (rc < 0)
            continue; /* another worker's bad entry: not ours to judge */
        child *c = child_of_id(n, id);
        if (kind == DY_REG_PUT && c && c->state == C_STARTING && e.pid == (uint32_t)c->pid) {
            c->state = C_RUNNING;
            say(n, "worker w%08x (pid %d) registered", (unsigned)id, (int)c->pid);
            answer_worker(n, c->reply, c, NULL);
            c->reply[0] = 0;
        }
    }
}

static void enforce_bounds(node *n)
{
    double now = dy_now();
    for (int i = 0; i < n->n_ch; i++) {
        child *c = &n->ch[i];
        if (now < c->deadline || c->killed || c->state == C_RUNNING)
            continue;
        if (c->state == C_STARTING) {
            say(n, "worker w%08x (pid %d) did not register within %g s; killing it",
                (unsigned)c->id, (int)c->pid, n->cfg->start_timeout_s);
            answer_error(n, c->reply, "worker w%08x did not register in " DY_REG_BUCKET
                         " within %g s; killed it (the node's log may say why)",
                         (unsigned)c->id, n->cfg->start_timeout_s);
            c->reply[0] = 0;
            c->state = C_STOPPING;
        } else {
            say(n, "worker w%08x (pid %d) did not leave within %g s; SIGKILL", (unsigned)c->id,
                (int)c->pid, n->cfg->drain_s + KILL_GRACE_S);
        }
        kill(c->pid, SIGKILL);
        c->killed = true;
    }
}

/* ---------------------------------------------------------------- the loop */

static bool stop_signal(const sigset_t *set)
{
    struct timespec zero = {0, 0};
    int sig;
    bool stop = false;
    while ((sig = sigtimedwait(set, NULL, &zero)) > 0)
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "dyad node: %s: stopping its workers\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM");
            stop = true;
        }
    return stop;
}

static void serve(node *n, const sigset_t *set)
{
    while (!stop_signal(set)) {
        reap(n);
        natsMsg *msg = NULL;
        natsStatus s = natsSubscription_NextMsg(&msg, n->cmd, POLL_MS);
        if (s == NATS_OK) {
            handle(n, msg);
            natsMsg_Destroy(msg);
        } else if (s != NATS_TIMEOUT) {
            struct timespec ts = {0, POLL_MS * 1000000L}; /* the connection is down: no spin */
            nanosleep(&ts, NULL);
        }
        watch_registry(n);
        enforce_bounds(n);
        renew(n, false);
    }
}

/* Every worker SIGTERM, up to its drain (and the grace), then SIGKILL; all reaped. */
static void stop_all(node *n)
{
    for (int i = 0; i < n->n_ch; i++)
        if (n->ch[i].state != C_STOPPING) {
            if (n->ch[i].state == C_STARTING && n->ch[i].reply[0])
                answer_error(n, n->ch[i].reply, "the node is stopping");
            n->ch[i].reply[0] = 0;
            stop_child(n, &n->ch[i], NULL);
        }
    /* SIGKILL comes at each worker's deadline; past the last one and a grace, whatever was
     * not reaped is given up on (never a hang). */
    double until = dy_now() + n->cfg->drain_s + 3 * KILL_GRACE_S;
    while (n->n_ch > 0 && dy_now() < until) {
        reap(n);
        enforce_bounds(n);
        renew(n, false);
        struct timespec ts = {0, POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (n->n_ch > 0)
        say(n, "%d worker%s did not end after SIGKILL; leaving anyway", n->n_ch,
            n->n_ch == 1 ? "" : "s");
}

static bool host_name(const dy_node_config *c, char *out, size_t cap)
{
    if (c->host_name)
        snprintf(out, cap, "%s", c->host_name);
    else if (gethostname(out, cap) != 0)
        snprintf(out, cap, "unknown");
    out[cap - 1] = 0;
    return true;
}

static bool setup(node *n, char *err, size_t errlen)
{
    const dy_node_config *c = n->cfg;
    char name[64];
    snprintf(name, sizeof name, "dyad node %s", n->key);
    dy_nats_opts no = {.url = c->url, .name = name, .who = "dyad node",
                       .timeout_s = c->timeout_s};
    if (!(n->nc = dy_nats_connect(&no, err, errlen)))
        return false;
    double max_age = 10 * c->lease_s + 60;
    if (!(n->nodes = dy_kv_open(n->nc, &nodes_bucket, max_age, err, errlen)) ||
        !(n->workers = dy_reg_open(n->nc, max_age, err, errlen)) ||
        !(n->watch = dy_reg_watch_start(n->workers, err, errlen)))
        return false;
    natsStatus s = natsConnection_SubscribeSync(&n->cmd, n->nc, n->subject);
    if (s == NATS_OK)
        s = natsConnection_Flush(n->nc);
    if (s != NATS_OK) {
        char why[256];
        dy_nats_reason(s, why, sizeof why);
        snprintf(err, errlen, "cannot subscribe to %s: %s", n->subject, why);
        return false;
    }
    return put_entry(n, err, errlen);
}

int dy_node_run(const dy_node_config *c)
{
    node *n = calloc(1, sizeof *n);
    if (!n) {
        fprintf(stderr, "dyad node: out of memory\n");
        return 1;
    }
    n->cfg = c;
    n->e.id = dy_cluster_random_id();
    dy_cluster_random_hex(n->e.incarnation, sizeof n->e.incarnation);
    host_name(c, n->e.host, sizeof n->e.host);
    n->e.pid = (uint32_t)getpid();
    n->e.cores = (uint32_t)c->cores;
    n->e.lease_s = c->lease_s;
    dy_node_key(n->e.id, n->key);
    snprintf(n->subject, sizeof n->subject, "dyad.n.%s.cmd", n->key);

    /* Taken by the loop (sigtimedwait): every thread started from here inherits the mask,
     * NATS's included; the workers get the defaults back (util/spawn.h). */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    int rc = 0;
    if (!setup(n, err, sizeof err)) {
        fprintf(stderr, "dyad node: %s\n", err);
        rc = 1;
    } else {
        fprintf(stderr, "dyad node %s: %s, %d cores, registered at %s (requests on %s)\n",
                n->key, n->e.host, c->cores, c->url, n->subject);
        n->next_put = dy_now() + c->lease_s / 3;
        serve(n, &set);
        stop_all(n);
        if (kvStore_Delete(n->nodes, n->key) != NATS_OK)
            say(n, "could not delete its entry (it expires with its lease)");
        else
            say(n, "left the cluster");
    }
    natsSubscription_Unsubscribe(n->cmd);
    natsSubscription_Destroy(n->cmd);
    dy_reg_watch_stop(n->watch);
    if (n->workers)
        kvStore_Destroy(n->workers);
    if (n->nodes)
        kvStore_Destroy(n->nodes);
    dy_nats_close(n->nc);
    free(n);
    return rc;
}
#endif
