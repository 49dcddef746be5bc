/* fleet.h — the frontend's fleet of worker processes: it spawns them (`dyad worker --fd N`,
 * one end of a Unix socket pair each), sends them sequences where placement
 * (route/place.h) puts them, and runs one reader thread per worker that routes the tokens
 * coming back to their jobs. A worker that dies is seen at once (its socket closes):
 * choices that had not produced a token yet are sent to another worker, the others end with
 * an error, and a new worker is started in its place. A worker that goes silent (stopped,
 * stuck) for worker_timeout_s is reported down, killed and handled the same way. (How:
 * fleet_impl.h.) */
#ifndef DYAD_FLEET_H
#define DYAD_FLEET_H

#include <stdint.h>
#include <sys/types.h>
#include "plan/actuate.h"
#include "route/place.h"
#include "route/router.h"
#include "serve/front/job.h"
#include "serve/wire/worker_args.h"

typedef struct {
    const char *exe;        /* the dyad binary */
    /* What every worker is started with (serve/wire/worker_args.h); each worker's socket, id,
     * role and KV receiver are set when it is started. */
    dy_worker_config worker;
    /* Slots: the most workers the deployment runs at once. The first n_start of them start
     * (0: all of them); the others are parked until the planner starts one (dy_fleet_move). */
    int n_workers;
    int n_start;
    /* Workers may switch roles while serving (ROLE): each is started --switchable. */
    bool switchable;
    int max_queue;          /* sequences waiting for their first token, over all workers */
    /* A worker must say HELLO (have loaded its model) within this long of its start: at the
     * first start the fleet fails to start; a later one is killed and started again. */
    double startup_timeout_s;
    /* A worker that has said HELLO and then sends no frame for this long (workers report
     * every 100 ms, even inside a long step) is hung: it is killed and replaced. 0: never. */
    double worker_timeout_s;
    /* Disaggregation: the first n_prefill workers prefill, the others decode; with
     * n_prefill == 0 every worker is aggregated. */
    int n_prefill;
    dy_xfer_kind xfer;      /* how KV moves: shared memory (default) or TCP */
    const char *kv_host;    /* TCP: the address decode workers' receivers listen on */
    double xfer_timeout_s;  /* a prefill not done by then falls back to local prefill */
    /* Commands put in front of `dyad worker ...` per role (split on spaces), e.g.
     * "ip netns exec hostA" to run workers on other (network-namespace) hosts; NULL: none. */
    const char *prefill_launcher, *decode_launcher;
    dy_route_config route;    /* conditional disaggregation */
    dy_router_config router;  /* which worker of a pool (docs/routing.md) */
    bool no_kv_events;        /* workers publish no KV events: the router predicts their
                               * caches from its own decisions (approximate mode) */
    /* Cluster mode (docs/cluster.md): the fleet starts no process. Every slot is parked until
     * serve/cluster/front_link.c attaches a worker that registered on NATS (dy_fleet_attach);
     * a slot whose worker goes away is parked again, not restarted. Request ids start at
     * id_base, so that the ids of several frontends sharing the workers never meet. */
    bool cluster;
    uint64_t id_base;
} dy_fleet_config;

/* KV transfer totals (for metrics and reports). */
typedef struct {
    uint64_t transfers, failed, timeouts, bytes;
    double seconds;             /* time spent copying or sending blocks */
    uint64_t remote, local;     /* prompts prefilled on a prefill worker / on their decode worker */
} dy_xfer_totals;

/* The router's figures (for metrics). */
typedef struct {
    const char *policy;
    uint64_t decisions;         /* requests routed (a prompt's samples count once) */
    uint64_t overlap_blocks;    /* leading prompt blocks the chosen worker held, summed */
    uint64_t tier_blocks[DY_KV_N_TIERS]; /* of those, by the tier they were held in */
    uint64_t cached_tokens;     /* prompt tokens the workers then found cached, summed */
    uint64_t resyncs;           /* snapshots asked of workers (sequence gaps, restarts) */
    uint64_t index_blocks;      /* distinct block hashes in the global prefix index */
} dy_router_totals;

typedef struct dy_fleet dy_fleet;

typedef struct {
    int alive;                  /* its process runs, has loaded (HELLO) and is not silent past
                                 * the timeout */
    int role;                   /* dy_worker_role */
    int state;                  /* dy_slot_state (plan/actuate.h) */
    int next_role;              /* draining: the role it switches to, or -1 when it stops */
    pid_t pid;
    uint64_t restarts;
    uint64_t hangs;             /* times it was found silent past the timeout (or not loaded
                                 * within the startup timeout) and killed */
    int in_flight;              /* sequences assigned to it now */
    dy_msg_stats stats;         /* its latest report, with counters summed over restarts */
    dy_msg_hello hello;
    uint64_t routed;            /* routing decisions that chose it */
    int64_t indexed_blocks;     /* blocks the global index says it holds */
} dy_worker_info;

/* How dy_fleet_submit went. */
typedef enum {
    DY_SUBMIT_OK = 0,
    DY_SUBMIT_QUEUE_FULL = 1,  /* over max_queue sequences would wait (HTTP 429) */
    DY_SUBMIT_UNAVAILABLE = 2, /* no worker is alive, or the server is stopping (HTTP 503) */
    DY_SUBMIT_NO_MEMORY = 3,   /* the frontend ran out of memory placing it (HTTP 500) */
} dy_submit_result;

/* Starts the workers and waits until each has loaded the model (or fails with the reason). */
dy_fleet *dy_fleet_start(const dy_fleet_config *cfg, char *err, size_t errlen);
/* Admits the job and sends each of its prompts (with its samples) where placement puts
 * them; the message in err says why not. Takes one job reference per choice, dropped when
 * the choice ends. */
dy_submit_result dy_fleet_submit(dy_fleet *w, dy_job *job, char *err, size_t errlen);
/* Asks the workers to stop the job's unfinished choices (the client went away). */
void dy_fleet_cancel(dy_fleet *w, dy_job *job);
/* Cancels one choice of a job (a sample whose vote is no longer needed). */
void dy_fleet_cancel_choice(dy_fleet *w, dy_job *job, int i);
/* A conversation's turn (dyad.session) ended with choice c, its answer calling `tool` (NULL:
 * no call); `hinted`: the request gave dyad.hold, so its worker knows when the next turn is
 * due. Learns, and tells the worker what to do with the turn's KV (docs/kv-tiers.md). */
void dy_fleet_turn_ended(dy_fleet *w, const dy_choice *c, const char *tool, bool hinted);
/* Refuses new jobs, lets in-flight sequences finish (up to timeout_s), then stops and reaps
 * every worker. Choices still running at the timeout end with an error. w stays valid (new
 * submissions get DY_SUBMIT_UNAVAILABLE) until dy_fleet_free. */
void dy_fleet_stop(dy_fleet *w, double timeout_s);
void dy_fleet_free(dy_fleet *w);
/* A snapshot of up to cap workers; returns how many. */
int dy_fleet_info(dy_fleet *w, dy_worker_info *out, int cap);
dy_xfer_totals dy_fleet_xfer_totals(dy_fleet *w);

/* Resizing while serving (docs/planner.md). The slots as the planner's reconciler reads them
 * (plan/actuate.h), up to cap; returns how many. */
int dy_fleet_slots(dy_fleet *w, dy_plan_slot *out, int cap);
/* Carries out one move. 0: under way (a drain finishes on its own, a start with HELLO);
 * 1: not now (the slot is not in the state the move needs yet: try again later); -1: failed,
 * with the reason in err. One caller at a time (the planner). */
int dy_fleet_move(dy_fleet *w, const dy_plan_action *a, char *err, size_t errlen);
dy_router_totals dy_fleet_router_totals(dy_fleet *w);

/* Cluster mode: a worker on another host, reached through fd (one end of a socket pair whose
 * other end a bridge carries over NATS), takes a parked slot in `role`; the first frame on fd
 * must be its HELLO. Returns the slot's index, or -1 (no parked slot, the fleet is stopping,
 * no thread; err says which). The slot owns fd from then on; the bridge ends the worker's
 * stay by shutting its end down, which the slot takes as the worker's death and parks. */
int dy_fleet_attach(dy_fleet *w, int fd, int role, char *err, size_t errlen);
/* Cluster mode: the worker in slot i is leaving: it takes no new sequences from now on. */
void dy_fleet_detaching(dy_fleet *w, int i);

#endif
