/* fleet_proc.c — the worker processes of the fleet (fleet_impl.h): spawning them, one reader
 * thread per worker that turns its frames into calls to the other fleet files, noticing a
 * death (or a silence past --worker-timeout, or no HELLO within --startup-timeout, which are
 * made deaths) and starting a new worker in its place, starting and stopping the whole fleet,
 * and the snapshots of its state for /health and /metrics. */
#include "serve/front/fleet_impl.h"
#include "serve/wire/wire_io.h"
#include "util/clock.h"
#include "util/spawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* The conversations the frontend remembers (their next turn follows them to their worker),
 * and the tool names whose durations it learns. */
#define SESSIONS_MAX 65536
#define SESSION_TOOLS_MAX 1024
/* The longest pause before starting again a worker that keeps failing to load. */
#define LOAD_BACKOFF_MAX_S 30

/* ---------------------------------------------------------------- processes */

int dy_fleet_spawn(dy_fleet *w, slot *s, char *err, size_t errlen)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    const dy_fleet_config *c = &w->cfg;
    char *argv[16 + 2 + DY_WORKER_ARGV_MAX], store[DY_WORKER_ARGV_STORE];
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
    /* Every worker gets the same settings; its socket, id, role and KV receiver are its own. */
    dy_worker_config wc = c->worker;
    wc.fd = sv[1];
    wc.worker_id = s->index;
    wc.role = s->role;
    wc.switchable = c->switchable;
    char listen[DY_WIRE_MAX_PEER + 8];
    if ((s->role == DY_ROLE_DECODE || c->switchable) && DY_XFER_NETWORKED(c->xfer)) {
        snprintf(listen, sizeof listen, "%s:0", c->kv_host);
        wc.kv_listen = listen;
        wc.kv_receiver = (int)c->xfer;
    }
    if (dy_worker_args_argv(&wc, argv + a, DY_WORKER_ARGV_MAX, store, sizeof store) < 0) {
        snprintf(err, errlen, "the worker's arguments do not fit");
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    pid_t pid = dy_spawn(prog, argv, sv[1], err, errlen);
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    close(sv[1]);
    s->pid = pid;
    s->fd = sv[0];
    s->alive = true;
    s->hello_seen = false;
    s->hung = false; /* a new incarnation: judged afresh (up only once it says HELLO) */
    s->unreachable = false;
    s->last_heard = s->spawned_at = dy_now();
    return 0;
}

void dy_fleet_kill(slot *s)
{
    if (!s->remote)
        kill(s->pid, SIGKILL);
    if (s->fd >= 0)
        shutdown(s->fd, SHUT_RDWR);
}

/* A worker that takes nothing for --worker-timeout is hung too: writers (often holding mu)
 * must not wait on it forever, or nothing — the janitor included — could go on. */
bool dy_fleet_send_frame(slot *s, const dy_buf *b)
{
    if (b->oom || s->fd < 0)
        return false;
    double limit = s->fleet->cfg.worker_timeout_s;
    pthread_mutex_lock(&s->wmu);
    bool ok = limit > 0 ? dy_write_all_within(s->fd, b->data, b->len, limit)
                        : dy_write_all(s->fd, b->data, b->len);
    const int why = errno;
    pthread_mutex_unlock(&s->wmu);
    /* A frame that did not go out whole leaves the stream unusable, whatever the cause: the
     * connection is torn down and the reader handles it as a death. */
    if (!ok) {
        if (limit > 0 && why == ETIMEDOUT)
            fprintf(stderr, "dyad serve: worker %d took nothing for %.1f s; killing it and "
                    "starting a new one\n", s->index, limit);
        else
            fprintf(stderr, "dyad serve: could not send to worker %d (%s); killing it and "
                    "starting a new one\n", s->index, strerror(why));
        dy_fleet_kill(s); /* its reader sees the end: handled as a death */
    }
    return ok;
}

/* ---------------------------------------------------------------- the reader */

/* A (new) worker has loaded its model. */
static void on_hello(dy_fleet *w, slot *s, const dy_msg_hello *m)
{
    pthread_mutex_lock(&w->mu);
    /* Leaving the decode role: prefill workers need not keep its pool mapped. */
    if (s->hello_seen && s->hello.role == DY_ROLE_DECODE && m->role != DY_ROLE_DECODE)
        dy_fleet_peer_gone(w, s);
    s->hello = *m;
    s->hello_seen = true;
    s->last_heard = dy_now();
    s->hung = false;
    s->load_failures = 0;
    if (s->role != m->role || s->state != DY_SLOT_ACTIVE)
        fprintf(stderr, "dyad serve: worker %d serves as %s\n", s->index,
                m->role == DY_ROLE_PREFILL ? "a prefill worker"
                : m->role == DY_ROLE_DECODE ? "a decode worker" : "an aggregated worker");
    s->role = m->role;
    /* A started worker, or a drained one that took its new role: it takes requests now. */
    if (s->state == DY_SLOT_STARTING || (s->state == DY_SLOT_DRAINING && !s->to_stop)) {
        s->state = DY_SLOT_ACTIVE;
        s->drain_sent = false;
    }
    /* A new incarnation: forget the old one's blocks and load; its first snapshot
     * (sequence 0) brings it into the index. */
    dy_router_remove_worker(w->router, s->index);
    dy_sessions_forget_worker(w->sessions, s->index);
    dy_router_add_worker(w->router, s->index, !w->cfg.worker.no_kv_events);
    dy_fleet_snapshot_reset(&s->snap);
    s->resync_asked = false;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->mu);
}

static void on_frame(dy_fleet *w, slot *s, dy_msg_type t, const uint8_t *p, uint32_t len)
{
    char err[256];
    if (t == DY_MSG_TOKEN) {
        dy_msg_token m;
        if (dy_wire_decode_token(p, len, &m, err, sizeof err))
            dy_fleet_on_token(w, s, &m);
    } else if (t == DY_MSG_DONE) {
        dy_msg_done m;
        if (dy_wire_decode_done(p, len, &m, err, sizeof err))
            dy_fleet_on_done(w, s, &m);
    } else if (t == DY_MSG_STATS) {
        dy_msg_stats m;
        if (dy_wire_decode_stats(p, len, &m, err, sizeof err))
            dy_fleet_on_stats(w, s, &m);
    } else if (t == DY_MSG_KV_EVENTS) {
        dy_msg_kv_events m;
        if (dy_wire_decode_kv_events(p, len, &m, err, sizeof err))
            dy_fleet_on_kv_events(w, s, &m);
        dy_msg_kv_events_free(&m);
    } else if (t == DY_MSG_KV_SNAPSHOT) {
        dy_msg_kv_snapshot m;
        if (dy_wire_decode_kv_snapshot(p, len, &m, err, sizeof err))
            dy_fleet_on_kv_snapshot(w, s, &m);
        dy_msg_kv_snapshot_free(&m);
    } else if (t == DY_MSG_KV_ALLOC) {
        dy_msg_kv_alloc m;
        if (dy_wire_decode_kv_alloc(p, len, &m, err, sizeof err))
            dy_fleet_on_kv_alloc(w, s, &m);
        dy_msg_kv_alloc_free(&m);
    } else if (t == DY_MSG_PREFILL_DONE) {
        dy_msg_prefill_done m;
        if (dy_wire_decode_prefill_done(p, len, &m, err, sizeof err))
            dy_fleet_on_prefill_done(w, s, &m);
    } else if (t == DY_MSG_HELLO) {
        dy_msg_hello m;
        if (dy_wire_decode_hello(p, len, &m, err, sizeof err))
            on_hello(w, s, &m);
    }
}

/* Keeps the dead incarnation's counters so totals never go backwards. */
static void bank_stats(slot *s)
{
    s->base.prompt_tokens += s->stats.prompt_tokens;
    s->base.generated_tokens += s->stats.generated_tokens;
    s->base.cache_lookup_blocks += s->stats.cache_lookup_blocks;
    s->base.cache_hit_blocks += s->stats.cache_hit_blocks;
    s->base.preemptions += s->stats.preemptions;
    s->base.steps += s->stats.steps;
    s->base.step_seconds += s->stats.step_seconds;
    memset(&s->stats, 0, sizeof s->stats);
}

/* The worker is gone: reap it and take its flights (into *fl, *n; the caller reruns or fails
 * them with rerun_orphans). Call with mu held. */
static void on_death(dy_fleet *w, slot *s, flight **fl, int *n)
{
    s->alive = false;
    dy_router_remove_worker(w->router, s->index); /* its blocks leave the index */
    dy_sessions_forget_worker(w->sessions, s->index);
    dy_fleet_snapshot_reset(&s->snap);
    close(s->fd);
    s->fd = -1;
    if (!s->remote) {
        waitpid(s->pid, NULL, 0);
        if (s->hello.shm_name[0])
            shm_unlink(s->hello.shm_name); /* a killed decode worker could not remove its pool */
    }
    bank_stats(s);
    dy_fleet_prefill_drop_feeding(w, s); /* cancels first, so no prefill is left writing */
    dy_fleet_peer_gone(w, s);
    *fl = s->fl;
    *n = s->n_fl;
    s->fl = NULL;
    s->n_fl = s->cap_fl = 0;
    pthread_cond_broadcast(&w->changed);
}

/* A dead worker's flights: what had not started runs again where placement puts it, the rest
 * fails. Called once its replacement is a candidate (or none will come), so that a request
 * of the only worker of its pool waits for the new one instead of failing. Call with mu. */
static void rerun_orphans(dy_fleet *w, flight *fl, int n)
{
    dy_fleet_flights_on_death(w, fl, n);
    free(fl);
}

/* A worker that died or hung while loading is started again after a pause that doubles with
 * each such failure in a row (1 s, 2 s, 4 s ... up to LOAD_BACKOFF_MAX_S), so one that can
 * never load does not spin. Call with mu; returns early when the fleet stops. */
static void load_backoff(dy_fleet *w, const slot *s)
{
    double pause = 1;
    for (int k = 1; k < s->load_failures && pause < LOAD_BACKOFF_MAX_S; k++)
        pause *= 2;
    if (pause > LOAD_BACKOFF_MAX_S)
        pause = LOAD_BACKOFF_MAX_S;
    const double until = dy_now() + pause;
    while (!w->stopping && dy_now() < until)
        dy_cond_wait_until(&w->changed, &w->mu, until);
}

static void *reader_main(void *arg)
{
    slot *s = arg;
    dy_fleet *w = s->fleet;
    dy_conn conn;
    dy_conn_init(&conn, s->fd);
    for (;;) {
        long n = dy_conn_fill(&conn);
        dy_msg_type t;
        const uint8_t *p;
        uint32_t len;
        char err[256];
        dy_conn_result k = DY_CONN_PARTIAL;
        if (n > 0)
            while ((k = dy_conn_next(&conn, &t, &p, &len, err, sizeof err)) == DY_CONN_FRAME)
                on_frame(w, s, t, p, len);
        if (n > 0 && k == DY_CONN_PARTIAL)
            continue;
        if (k == DY_CONN_CORRUPT) {
            fprintf(stderr, "dyad serve: worker %d sent a corrupt frame (%s); restarting it\n",
                    s->index, err);
            dy_fleet_kill(s);
        }
        /* End of stream: the worker exited or was killed. */
        pthread_mutex_lock(&w->mu);
        bool had_hello = s->hello_seen;
        flight *orphans;
        int n_orphans;
        on_death(w, s, &orphans, &n_orphans);
        bool stop = w->stopping;
        /* A remote worker's stay has ended (it left, its lease expired, or the frontend
         * stops): its slot waits for the next worker that registers. */
        if (s->remote) {
            s->state = DY_SLOT_PARKED;
            s->remote = false;
            s->to_stop = s->drain_sent = false;
            rerun_orphans(w, orphans, n_orphans);
            pthread_cond_broadcast(&w->changed);
            pthread_mutex_unlock(&w->mu);
            dy_conn_free(&conn);
            if (!stop)
                fprintf(stderr, "dyad serve: worker %d (%s) left\n", s->index,
                        had_hello ? "cluster" : "cluster, before its HELLO");
            return NULL;
        }
        /* Drained and told to stop (or dead while draining to stop): the slot is parked. Dead
         * while draining to switch: it starts again in its new role. */
        bool park = s->state == DY_SLOT_DRAINING && s->to_stop;
        if (park)
            s->state = DY_SLOT_PARKED;
        else if (s->state == DY_SLOT_DRAINING) {
            s->role = s->next_role;
            s->state = DY_SLOT_STARTING;
        }
        s->to_stop = s->drain_sent = false;
        /* Died or hung while loading: the next incarnation takes no new sequences until it
         * has loaded, so this one's run elsewhere now (or fail) rather than wait on it. */
        const bool load_failed = !had_hello;
        if (load_failed)
            s->load_failures++;
        if (stop || park || load_failed) {
            rerun_orphans(w, orphans, n_orphans);
            orphans = NULL;
            n_orphans = 0;
        }
        pthread_cond_broadcast(&w->changed);
        pthread_mutex_unlock(&w->mu);
        dy_conn_free(&conn);
        if (park && !stop)
            fprintf(stderr, "dyad serve: worker %d stopped\n", s->index);
        if (stop || park)
            return NULL;
        fprintf(stderr, "dyad serve: worker %d exited; starting a new one\n", s->index);
        pthread_mutex_lock(&w->mu);
        if (load_failed)
            load_backoff(w, s);
        char e[256];
        int rc = w->stopping ? -1 : dy_fleet_spawn(w, s, e, sizeof e);
        if (rc == 0) {
            s->restarts++;
            /* A candidate at once (requests queue on its socket while it loads); its blocks
             * enter the index with its first snapshot after HELLO. */
            dy_router_add_worker(w->router, s->index, !w->cfg.worker.no_kv_events);
        }
        rerun_orphans(w, orphans, n_orphans);
        pthread_mutex_unlock(&w->mu);
        if (rc != 0)
            return NULL;
        dy_conn_init(&conn, s->fd);
    }
}

/* ---------------------------------------------------------------- hung workers */

/* Silent: loaded (it said HELLO), and nothing from it for longer than --worker-timeout. */
static bool silent(const dy_fleet *w, const slot *s, double now)
{
    return w->cfg.worker_timeout_s > 0 && s->alive && s->hello_seen &&
           now - s->last_heard > w->cfg.worker_timeout_s;
}

/* Not loaded: started, and no HELLO within --startup-timeout (a worker stopped or stuck while
 * loading, a launcher that never runs it). The first start is wait_for_hellos's to judge. */
static bool not_loaded(const dy_fleet *w, const slot *s, double now)
{
    return w->cfg.startup_timeout_s > 0 && s->alive && !s->hello_seen &&
           now - s->spawned_at > w->cfg.startup_timeout_s;
}

/* SIGKILL ends even a stopped process; shutting the socket down as well makes its reader see
 * the end of the stream even if something else holds the worker's end open (a launcher's
 * child), so its flights are handled as a death's in every case. */
void dy_fleet_kill_silent(dy_fleet *w, double now)
{
    for (int i = 0; i < w->cfg.n_workers; i++) {
        slot *s = &w->slots[i];
        const bool loading = not_loaded(w, s, now);
        if (s->hung || !(loading || silent(w, s, now)))
            continue;
        if (s->remote)
            fprintf(stderr, "dyad serve: worker %d (cluster) sent nothing for %.1f s; letting "
                    "it go until it registers again\n", i, now - s->last_heard);
        else if (loading)
            fprintf(stderr, "dyad serve: worker %d (pid %d) has not loaded within "
                    "--startup-timeout (%.1f s); killing it and starting a new one\n", i,
                    (int)s->pid, w->cfg.startup_timeout_s);
        else
            fprintf(stderr, "dyad serve: worker %d (pid %d) sent nothing for %.1f s; killing "
                    "it and starting a new one\n", i, (int)s->pid, now - s->last_heard);
        s->hung = true;
        s->hangs++;
        dy_fleet_kill(s);
    }
}

/* ---------------------------------------------------------------- starting and stopping */

int dy_fleet_start_reader(slot *s)
{
    if (pthread_create(&s->reader, NULL, reader_main, s) != 0)
        return -1;
    s->reader_started = true;
    return 0;
}

static bool wait_for_hellos(dy_fleet *w, int n, char *err, size_t errlen)
{
    double deadline = dy_now() + w->cfg.startup_timeout_s;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int ready = 0;
        for (int i = 0; i < n; i++)
            ready += w->slots[i].hello_seen;
        if (ready == n)
            break;
        for (int i = 0; i < n; i++)
            if (w->slots[i].restarts > 0 && !w->slots[i].hello_seen) {
                snprintf(err, errlen, "worker %d exited while loading the model (see its message "
                         "above)", i);
                pthread_mutex_unlock(&w->mu);
                return false;
            }
        if (w->cfg.startup_timeout_s > 0 && dy_now() > deadline) {
            snprintf(err, errlen, "workers did not start within %.0f s", w->cfg.startup_timeout_s);
            pthread_mutex_unlock(&w->mu);
            return false;
        }
        /* A restart is counted without a broadcast: look again now and then. */
        dy_cond_wait_for(&w->changed, &w->mu, 0.1);
    }
    pthread_mutex_unlock(&w->mu);
    return true;
}

/* Whether process pid still runs: it exists (or belongs to someone else) and is not a zombie —
 * a worker killed with its frontend stays a zombie until its parent is reaped, and a zombie
 * passes kill(pid, 0). */
static bool process_runs(int pid)
{
    if (kill(pid, 0) != 0)
        return errno != ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true; /* no /proc: trust kill */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *paren = strrchr(buf, ')'); /* "pid (comm) state ...": comm may hold spaces */
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

/* Decode workers' KV pools are named shared-memory objects (/dev/shm/dyad-kv-PID-ID) that a
 * worker removes when it exits and the frontend when it reaps a dead one; a frontend killed
 * outright (SIGKILL, OOM) takes its workers with it before either can. Their memory stays
 * committed until someone unlinks the name, so each start removes the pools of processes that
 * no longer run (gone, or zombies). (A pid reused by an unrelated process keeps its stale
 * pool: safe.) */
static void remove_stale_pools(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        int pid, id, end = 0;
        if (sscanf(e->d_name, DY_KV_SHM_NAME "%n", &pid, &id, &end) != 2 || e->d_name[end] ||
            pid <= 0 || process_runs(pid))
            continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        shm_unlink(name);
    }
    closedir(d);
}

dy_fleet *dy_fleet_start(const dy_fleet_config *cfg, char *err, size_t errlen)
{
    dy_fleet *w = calloc(1, sizeof *w);
    if (!w || !(w->slots = calloc((size_t)cfg->n_workers, sizeof *w->slots)) ||
        !(w->view = calloc((size_t)cfg->n_workers, sizeof *w->view))) {
        if (w)
            free(w->slots);
        free(w);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (cfg->n_prefill > 0 || cfg->switchable)
        remove_stale_pools();
    w->cfg = *cfg;
    w->next_id = cfg->id_base ? cfg->id_base : 1;
    w->rt.policy = dy_router_policy_name(cfg->router.policy);
    w->cfg.router.block_size = cfg->worker.block_size; /* the router counts blocks as workers do */
    w->sessions = dy_sessions_new(SESSIONS_MAX, SESSION_TOOLS_MAX);
    if (!w->sessions || !(w->router = dy_router_new(&w->cfg.router, cfg->n_workers))) {
        snprintf(err, errlen, "bad router settings, or out of memory");
        dy_sessions_free(w->sessions);
        free(w->view);
        free(w->slots);
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    dy_cond_init(&w->changed);
    const int n_start = cfg->cluster ? 0
                        : cfg->n_start > 0 && cfg->n_start < cfg->n_workers ? cfg->n_start
                                                                            : cfg->n_workers;
    for (int i = 0; i < cfg->n_workers; i++) {
        slot *s = &w->slots[i];
        s->fleet = w;
        s->index = i;
        s->fd = -1;
        s->role = i < cfg->n_prefill ? DY_ROLE_PREFILL : cfg->n_prefill > 0 ? DY_ROLE_DECODE : DY_ROLE_AGG;
        s->state = i < n_start ? DY_SLOT_ACTIVE : DY_SLOT_PARKED;
        pthread_mutex_init(&s->wmu, NULL);
    }
    int started = 0;
    for (int i = 0; i < n_start; i++) {
        slot *s = &w->slots[i];
        if (dy_fleet_spawn(w, s, err, errlen) != 0)
            break;
        pthread_mutex_lock(&w->mu);
        dy_router_add_worker(w->router, i, !cfg->worker.no_kv_events);
        pthread_mutex_unlock(&w->mu);
        if (dy_fleet_start_reader(s) != 0)
            break;
        started++;
    }
    if (started == n_start && wait_for_hellos(w, n_start, err, errlen) &&
        pthread_create(&w->janitor, NULL, dy_fleet_janitor_main, w) == 0) {
        w->janitor_started = true;
        return w;
    }
    if (started < n_start && !err[0])
        snprintf(err, errlen, "could not start worker %d", started);
    dy_fleet_stop(w, 0);
    dy_fleet_free(w);
    return NULL;
}

static int alive_workers(const dy_fleet *w)
{
    int n = 0;
    for (int i = 0; i < w->cfg.n_workers; i++)
        n += w->slots[i].alive;
    return n;
}

static double earlier(double a, double b)
{
    return a < b ? a : b;
}

void dy_fleet_stop(dy_fleet *w, double timeout_s)
{
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_broadcast(&w->changed); /* a reader pausing before a restart gives up */
    double deadline = dy_now() + timeout_s;
    /* Flights end with a broadcast; the recheck each second only bounds a missed one. */
    while (dy_fleet_total_flights(w) > 0 && dy_now() < deadline)
        dy_cond_wait_until(&w->changed, &w->mu, earlier(deadline, dy_now() + 1));
    /* Ask politely; the reader threads see the sockets close and reap. */
    for (int i = 0; i < w->cfg.n_workers; i++) {
        slot *s = &w->slots[i];
        if (!s->alive)
            continue;
        if (s->remote) { /* not ours to stop: the other frontends may go on using it */
            shutdown(s->fd, SHUT_RDWR);
            continue;
        }
        dy_buf b = {0};
        if (dy_wire_shutdown(&b)) {
            pthread_mutex_lock(&s->wmu);
            dy_write_all(s->fd, b.data, b.len);
            pthread_mutex_unlock(&s->wmu);
        }
        dy_buf_free(&b);
        if (dy_fleet_total_flights(w) > 0)
            kill(s->pid, SIGKILL); /* past the deadline: stop now, choices fail on death */
        shutdown(s->fd, SHUT_WR);
    }
    /* A worker that does not exit (stopped, stuck in a step) is killed after a grace period,
     * so shutting down never hangs on it. */
    double grace = dy_now() + 5;
    while (alive_workers(w) > 0 && dy_now() < grace)
        dy_cond_wait_until(&w->changed, &w->mu, earlier(grace, dy_now() + 0.1));
    for (int i = 0; i < w->cfg.n_workers; i++)
        if (w->slots[i].alive) {
            fprintf(stderr, "dyad serve: worker %d did not exit; killing it\n", i);
            dy_fleet_kill(&w->slots[i]);
        }
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->cfg.n_workers; i++)
        if (w->slots[i].reader_started) {
            pthread_join(w->slots[i].reader, NULL);
            w->slots[i].reader_started = false;
        }
    if (w->janitor_started)
        pthread_join(w->janitor, NULL);
    w->janitor_started = false;
}

void dy_fleet_free(dy_fleet *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->cfg.n_workers; i++) {
        pthread_mutex_destroy(&w->slots[i].wmu);
        free(w->slots[i].fl);
        dy_fleet_snapshot_reset(&w->slots[i].snap);
    }
    dy_router_free(w->router);
    dy_sessions_free(w->sessions);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->changed);
    free(w->view);
    free(w->slots);
    free(w);
}

/* ---------------------------------------------------------------- cluster mode */

int dy_fleet_attach(dy_fleet *w, int fd, int role, char *err, size_t errlen)
{
    pthread_mutex_lock(&w->mu);
    slot *s = NULL;
    for (int i = 0; i < w->cfg.n_workers && !s; i++)
        if (w->slots[i].state == DY_SLOT_PARKED && !w->slots[i].alive)
            s = &w->slots[i];
    if (!s || w->stopping) {
        snprintf(err, errlen, w->stopping ? "the server is stopping"
                              : "all %d worker slots are taken (--cluster-max-workers)",
                 w->cfg.n_workers);
        pthread_mutex_unlock(&w->mu);
        return -1;
    }
    /* The slot's last reader returned right after parking it (with mu released). */
    pthread_t old = s->reader;
    bool join = s->reader_started;
    s->reader_started = false;
    s->state = DY_SLOT_STARTING; /* no other attach takes it meanwhile */
    pthread_mutex_unlock(&w->mu);
    if (join)
        pthread_join(old, NULL);
    pthread_mutex_lock(&w->mu);
    s->remote = true;
    s->pid = 0;
    s->fd = fd;
    s->role = role;
    s->alive = true;
    s->hello_seen = s->hung = s->unreachable = false;
    s->to_stop = s->drain_sent = false;
    s->last_heard = s->spawned_at = dy_now();
    dy_router_add_worker(w->router, s->index, !w->cfg.worker.no_kv_events);
    int rc = s->index;
    if (dy_fleet_start_reader(s) != 0) {
        snprintf(err, errlen, "cannot start a reader thread");
        dy_router_remove_worker(w->router, s->index);
        s->remote = s->alive = false;
        s->fd = -1;
        s->state = DY_SLOT_PARKED;
        rc = -1;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void dy_fleet_detaching(dy_fleet *w, int i)
{
    pthread_mutex_lock(&w->mu);
    slot *s = i >= 0 && i < w->cfg.n_workers ? &w->slots[i] : NULL;
    if (s && s->remote && s->alive && s->state == DY_SLOT_ACTIVE) {
        s->state = DY_SLOT_DRAINING;
        s->to_stop = true;
        s->next_role = s->role;
        s->drain_sent = true; /* nothing to send: the worker leaves by itself */
    }
    pthread_mutex_unlock(&w->mu);
}

/* ---------------------------------------------------------------- what it reports */

int dy_fleet_info(dy_fleet *w, dy_worker_info *out, int cap)
{
    pthread_mutex_lock(&w->mu);
    int n = w->cfg.n_workers < cap ? w->cfg.n_workers : cap;
    double now = dy_now();
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
        /* Up once loaded; hung and killed, it stays down until its replacement has loaded. */
        bool up = s->alive && s->hello_seen && !s->hung && !silent(w, s, now);
        out[i] = (dy_worker_info){up, s->role, s->state,
                                  s->state == DY_SLOT_DRAINING && !s->to_stop ? s->next_role
                                                                              : -1,
                                  s->pid, s->restarts, s->hangs, s->n_fl, st, s->hello,
                                  s->routed, dy_kv_index_worker_blocks(x, i) +
                                                 dy_kv_index_worker_predicted(x, i)};
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}

dy_xfer_totals dy_fleet_xfer_totals(dy_fleet *w)
{
    pthread_mutex_lock(&w->mu);
    dy_xfer_totals t = w->xfer;
    pthread_mutex_unlock(&w->mu);
    return t;
}

dy_router_totals dy_fleet_router_totals(dy_fleet *w)
{
    pthread_mutex_lock(&w->mu);
    dy_router_totals t = w->rt;
    t.index_blocks = dy_kv_index_size(dy_router_index(w->router));
    pthread_mutex_unlock(&w->mu);
    return t;
}
