/* fleet_impl.h — the fleet's insides, shared by the files that each do one job of it:
 *   fleet_proc.c     the worker processes: spawn, the reader thread, restarts, start/stop,
 *                    info and totals
 *   fleet_flights.c  the in-flight table: placement (route/place.h), submitting, sending
 *                    samples, cancelling, tokens and ends, reruns after a worker died
 *   fleet_prefill.c  disaggregated prefill (docs/disaggregation.md): a sequence placed with
 *                    a prefill worker goes to its decode worker as REQUEST(remote_prefill);
 *                    the decode worker answers KV_ALLOC with the blocks it set aside; the
 *                    prefill worker gets PREFILL with those destinations; its PREFILL_DONE
 *                    becomes KV_READY for the decode worker; a janitor ends prefills that stall
 *                    (and kills silent workers, fleet_proc.c); PEER_GONE tells the others when
 *                    a decode worker's pool goes away
 *   fleet_kv.c       what workers report about their caches: KV events, snapshots, load
 *   fleet_pool.c     resizing while serving: the planner's moves (plan/actuate.h) on the
 *                    slots — start a parked one, drain one to switch its role or to stop it
 *
 * One mutex (`mu`) guards the slots, their in-flight tables, the live flags and the router;
 * a job's own mutex is always taken after it, never before. Functions here expect mu held
 * unless they say "takes mu". */
#ifndef DYAD_FLEET_IMPL_H
#define DYAD_FLEET_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "plan/actuate.h"
#include "route/place.h"
#include "route/session.h"
#include "serve/front/fleet.h"
#include "serve/wire/wire.h"

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
    uint8_t *tiers;
    int n, cap;
    int n_device; /* of n, blocks in the device tier (the primary pool) */
} snapshot_rx;

/* One worker: its process, its socket, what is in flight there and what it reported. */
typedef struct {
    struct dy_fleet *fleet;
    int index;
    bool remote;              /* cluster mode: no process of ours; fd leads to a bridge */
    pid_t pid;                /* 0 when remote */
    int fd;
    bool alive, hello_seen;
    /* Its place in the deployment (plan/actuate.h): parked slots have no process; starting
     * ones wait for HELLO; draining ones take no new sequences and, once empty, are sent
     * ROLE(next_role) or SHUTDOWN (to_stop), which drain_sent records. */
    dy_slot_state state;
    bool to_stop, drain_sent;
    int next_role;            /* dy_worker_role, when draining to switch */
    pthread_t reader;
    bool reader_started;      /* reader is a thread to join */
    pthread_mutex_t wmu; /* serialises writes to fd */
    flight *fl;
    int n_fl, cap_fl;
    uint64_t restarts;
    /* The heartbeat: when its last STATS or HELLO came (dy_now), and whether the janitor
     * found this incarnation silent past --worker-timeout (or not loaded within
     * --startup-timeout) and killed it. */
    double last_heard;
    double spawned_at;        /* when this incarnation was started (dy_now) */
    bool hung;
    uint64_t hangs;
    /* A frame to this incarnation could not be sent (its connection is being torn down):
     * placement skips it until a new process starts. Set and read with mu held. */
    bool unreachable;
    /* Its incarnations in a row that died or hung before HELLO (0 once one loads): the
     * back-off before the next start grows with it, and while it is > 0 the slot takes no
     * new sequences until its worker loads. */
    int load_failures;
    int role;                 /* dy_worker_role */
    dy_msg_hello hello;
    snapshot_rx snap;
    bool resync_asked;        /* a KV_RESYNC is out; its snapshot has not completed */
    uint64_t routed;
    dy_msg_stats stats, base; /* base: counters of earlier incarnations */
} slot;

struct dy_fleet {
    dy_fleet_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t changed;   /* a HELLO arrived, a worker died, a flight ended (dy_cond_init) */
    slot *slots;
    dy_place_worker *view;    /* placement's view of the slots, refreshed before each decision */
    uint64_t next_id;
    bool stopping;
    dy_xfer_totals xfer;
    dy_router *router;
    dy_router_totals rt;
    dy_sessions *sessions;    /* conversations and their tools' durations (dyad.session) */
    pthread_t janitor;
    bool janitor_started;
};

/* ---- fleet_proc.c */
/* Starts slot s's worker process in s->role (its socket in s->fd). */
int dy_fleet_spawn(dy_fleet *w, slot *s, char *err, size_t errlen);
/* Ends the worker's incarnation: SIGKILL to its process, or, for a remote one, a shutdown of
 * its socket (the bridge's end then closes too). Its reader sees the end and handles the death. */
void dy_fleet_kill(slot *s);
/* Writes one frame to the worker (takes its write lock; mu need not be held). */
bool dy_fleet_send_frame(slot *s, const dy_buf *b);
/* Kills the workers silent past --worker-timeout, and those that have not said HELLO within
 * --startup-timeout of their start; their readers then see the end of their streams and
 * handle them as any death (called by the janitor). */
void dy_fleet_kill_silent(dy_fleet *w, double now);

/* ---- fleet_flights.c */
flight *dy_fleet_add_flight(slot *s, uint64_t id, dy_job *job, int choice);
flight *dy_fleet_find_flight(slot *s, uint64_t id);
void dy_fleet_remove_flight(slot *s, flight *f);
int dy_fleet_total_flights(const dy_fleet *w);
void dy_fleet_send_cancel(slot *s, uint64_t id);
/* The prefill worker for a prompt whose decode worker has set blocks aside (placement's
 * re-pick when the planned one died); -1 if none. */
int dy_fleet_pick_prefill(dy_fleet *w, const dy_msg_request *r, int planned);
void dy_fleet_on_token(dy_fleet *w, slot *s, const dy_msg_token *t);   /* takes mu */
void dy_fleet_on_done(dy_fleet *w, slot *s, const dy_msg_done *d);     /* takes mu */
/* The dead worker's flights (taken off it): prompts that had not started run elsewhere,
 * the rest fail; a dead prefill worker's prefills go back to their decode workers. */
void dy_fleet_flights_on_death(dy_fleet *w, flight *fl, int n);

/* ---- fleet_prefill.c */
/* The choice's prefill in flight, if any (with its prefill worker in *p). */
flight *dy_fleet_prefill_of(dy_fleet *w, const dy_choice *c, slot **p);
void dy_fleet_on_kv_alloc(dy_fleet *w, slot *s, const dy_msg_kv_alloc *m);         /* takes mu */
void dy_fleet_on_prefill_done(dy_fleet *w, slot *p, const dy_msg_prefill_done *m); /* takes mu */
/* The decode worker s died: the prefills feeding it stop (they would write into a dead pool). */
void dy_fleet_prefill_drop_feeding(dy_fleet *w, const slot *s);
/* s's KV pool is going away (it died, stopped, or leaves the decode role): the other workers
 * are told to close it if they hold it open. */
void dy_fleet_peer_gone(dy_fleet *w, const slot *s);
/* The name prefill workers open s's pool by (shared memory or TCP, as configured), or "". */
const char *dy_fleet_peer_name(const dy_fleet *w, const slot *s);
/* A prefill flight lost with its prefill worker: its decode worker computes the prompt. */
void dy_fleet_prefill_lost(dy_fleet *w, flight *f);
void *dy_fleet_janitor_main(void *arg); /* the thread; takes mu */

/* ---- fleet_pool.c */
/* A draining slot with nothing left on it (nor prefills feeding it) is sent its ROLE or
 * SHUTDOWN; anything else is left alone. */
void dy_fleet_drain_check(dy_fleet *w, slot *s);
/* The reader thread of s (takes mu inside; a new one per process the slot runs). */
int dy_fleet_start_reader(slot *s);
/* Its role in dy_route_pool terms, for placement and the planner. */
dy_route_pool dy_fleet_pool_of_role(int role);

/* ---- fleet_kv.c */
void dy_fleet_snapshot_reset(snapshot_rx *r);
void dy_fleet_on_kv_events(dy_fleet *w, slot *s, const dy_msg_kv_events *m);     /* takes mu */
void dy_fleet_on_kv_snapshot(dy_fleet *w, slot *s, const dy_msg_kv_snapshot *m); /* takes mu */
void dy_fleet_on_stats(dy_fleet *w, slot *s, const dy_msg_stats *m);             /* takes mu */

#endif
