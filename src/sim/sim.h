/* sim.h — a discrete-event simulation of a whole dyad deployment: a frontend (admission,
 * placement, the router), N workers (aggregated, prefill or decode, as `dyad serve` runs them)
 * and the KV transfers between them. It runs dyad's own policy code, never a copy of it:
 *   - every worker is a real dy_sched (sched/) over a real dy_kv_cache (kv/), on a pool with
 *     no storage (dy_kv_pool_new_meta), so batching, chunked prefill, preemption, the prefix
 *     cache and sample forking are the server's;
 *   - every prompt is admitted and placed by route/place.h (dy_place_admit, dy_place,
 *     dy_place_prefill) with a real dy_router that the simulated workers feed with their KV
 *     events and load reports as serve/worker/kv_publish.c and serve/front/fleet_kv.c do.
 * Only time is modelled: a cost model prices each step (sched/step_shape.h) and each KV
 * transfer. Messages between the frontend and the workers take no time.
 *
 * What the simulation does in the server's order, per request:
 *   arrival      the frontend's context check (prompt + max_tokens within ctx_len, as
 *                openai.c's dy_api_max_new_tokens), admission against the sequences sent but
 *                without a first token; then, like fleet_flights.c's submit_samples,
 *                placement of its samples in parts that fit
 *   aggregated   dy_sched_add (+ dy_sched_fork for the other samples) on the chosen worker
 *   disagg.      dy_sched_add_remote on the decode worker; if it set blocks aside, the
 *                prefill worker (dy_place_prefill) computes positions [0, n_prompt - 1) with
 *                dy_sched_add, as worker_disagg.c does; at that step's end the blocks are
 *                shipped (transfer_seconds of their bytes; the prefill worker waits for its
 *                copies, as dy_disagg_ship does, unless xfer_async), then
 *                dy_sched_remote_ready on the decode worker
 *   each step    dy_sched_plan -> dy_step_shape -> step_seconds; at its end dy_sched_commit
 *                with a fixed token (never end-of-generation: requests end at max_tokens or
 *                at the context length), tokens recorded, dy_router_on_first_token /
 *                dy_router_on_finished on the request's ticket, the KV events published into
 *                the router's index, and a load report when one is due
 * Same inputs, same results: events at the same time run in the order they were scheduled,
 * and the router's random tie-breaks come from its seed. */
#ifndef DYAD_SIM_H
#define DYAD_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "bench/bench_stats.h"
#include "plan/actuate.h"
#include "plan/planner.h"
#include "route/place.h"
#include "route/router.h"
#include "sched/step_shape.h"

/* The token every simulated step "samples". */
#define DY_SIM_TOKEN 7

/* One worker, with the fields `dyad worker` takes. */
typedef struct {
    dy_route_pool role;    /* DY_POOL_AGG, DY_POOL_PREFILL or DY_POOL_DECODE */
    int kv_blocks;         /* blocks in its KV pool */
    int max_batch_tokens;  /* token budget of one step */
    int max_running;       /* sequences in the running batch at most */
    bool no_prefix_cache;
} dy_sim_worker;

/* The planner in the loop (issue 13): every interval the simulated frontend hands what it saw
 * to plan/planner.h's dy_planner_step and carries the decision out through plan/actuate.h's
 * dy_plan_reconcile, as `dyad serve --planner` does. The deployment's workers are slots: the
 * first n_active start active in their configured roles (aggregated, or prefill + decode),
 * the rest are parked (their configured role is not used; a START gives one). A started
 * worker takes planner.startup_s to become active, with an empty KV cache; a draining worker
 * takes no new request but finishes what it holds (remote prefills too), then either parks
 * (its cache is lost) or switches role (its cache stays; the router relearns its blocks from
 * a snapshot, as after a HELLO), which takes switch_s. */
typedef struct {
    bool on;
    dy_planner_config planner;  /* interval_s is the planning interval, startup_s the start-up
                                 * time; hw.max_units must be n_workers x units_per_worker */
    int n_active;               /* 1..n_workers */
    double switch_s;            /* >= 0 */
} dy_sim_planner;

typedef struct {
    const dy_sim_worker *workers;
    int n_workers;              /* 1..DY_KV_INDEX_MAX_WORKERS */
    int block_size;             /* tokens per KV block, on every worker and in the router */
    int64_t kv_block_bytes;     /* bytes of one KV block (what a transfer ships per block) */
    int ctx_len;                /* the model's context length (0: unlimited): the frontend
                                 * refuses a request whose prompt + max_tokens exceeds it */
    uint64_t fingerprint;       /* the model's: starts every block hash chain */
    dy_router_config router;    /* its block_size is set to block_size */
    dy_route_config route;
    int max_queue;              /* sequences waiting for a first token, at most (--max-queue) */
    int max_samples;            /* samples one request to a worker may carry */
    double stats_every_s;       /* a worker's load report interval (the worker's STATS_EVERY_S) */
    bool no_kv_events;          /* workers publish nothing: the router predicts (approximate) */
    bool xfer_async;            /* the prefill worker steps on while its KV ships */
    /* > 0: at most this many requests in flight, as `dyad bench --concurrency` keeps them: a
     * request due while that many are in flight is sent when one ends (all its samples done or
     * failed), and a sample's arrival is when it was sent. All arrivals at 0 make bench's
     * closed loop. 0: every request is sent at its arrival time. */
    int max_in_flight;
    dy_sim_planner plan;        /* off unless plan.on */
} dy_sim_config;

/* The defaults of `dyad serve` for everything but the deployment itself. */
dy_sim_config dy_sim_config_default(void);

/* One request of the workload. */
typedef struct {
    double arrival;          /* seconds from the start */
    const int32_t *prompt;   /* token ids (dy_sim_run: borrowed until it returns; a stream's
                              * source: until its next call, the simulator keeps a copy; NULL
                              * when the stream's prompt callback gives them later) */
    int n_prompt;
    int max_tokens;          /* tokens each sample generates (the sim never stops early) */
    int n_samples;           /* ≥ 1 */
} dy_sim_request;

/* What happened to one sample of one request. Times in seconds from the start; -1 when it
 * never happened. */
typedef struct {
    int request, sample;
    bool ok;                 /* false: refused (over the context, queue full) or did not fit */
    const char *error;       /* why, when !ok (a static string) */
    double arrival, first_token, done; /* arrival: when it was sent (see max_in_flight) */
    double *token_times;     /* n_tokens entries: when each output token was delivered */
    int n_tokens;
    int prompt_tokens;
    int cached_tokens;       /* prompt tokens found in the prefilling worker's prefix cache */
    int worker;              /* where it decoded; -1 if never placed */
    int prefill_worker;      /* where its prompt was computed (== worker when locally) */
    int overlap_blocks;      /* the router's overlap on the prefilling worker when placed */
    int preemptions;
    int64_t kv_bytes;        /* KV shipped to its decode worker (0: prefilled locally) */
    double kv_seconds;
} dy_sim_record;

/* Per worker and over the run. */
typedef struct {
    uint64_t steps, preemptions;
    uint64_t prefill_tokens, decode_tokens; /* computed in steps (prompt / generated) */
    double busy_s;                          /* time spent in steps (and sync transfers) */
} dy_sim_worker_totals;

typedef struct {
    double duration_s;          /* from time 0 to the last sample's end (bench's run duration) */
    uint64_t steps, preemptions;
    uint64_t output_tokens;
    uint64_t transfers, local_prefills; /* disaggregated prompts: shipped / computed locally */
    int64_t kv_bytes;
    double kv_seconds;
    long refused;               /* requests refused at admission (the queue was full) */
    long over_context;          /* requests refused before it: prompt + max_tokens > ctx_len */
    /* the most requests (and sample records) the simulator held at once: those pulled from
     * the source and not yet ended, which bounds its memory whatever the workload's length */
    int peak_requests_held, peak_samples_held;
    /* worker-seconds over [0, duration_s] per role (dy_route_pool): a worker counts while
     * starting, active or draining, not while parked (without a planner: every worker, all
     * the run) */
    double worker_s[3];
} dy_sim_totals;

/* With a planner: each interval's decision, when it was taken, and the pools then. */
typedef struct {
    double t;
    dy_planner_decision d;
    dy_planner_obs obs;         /* what it was given */
    int active[3];              /* active workers per role (dy_route_pool) when taken */
    int starting, draining;     /* slots starting (or switching) and draining */
} dy_sim_decision;

/* A move made (dy_plan_reconcile's), or a slot's change it led to: */
typedef enum {
    DY_SIM_MOVE = 0,            /* a move: `act` */
    DY_SIM_READY = 1,           /* a started (act.kind START) or switched (SWITCH) worker
                                 * became active in `act.role` */
    DY_SIM_PARKED = 2,          /* a stopping worker drained and parked */
    DY_SIM_DRAINED = 3,         /* a switching worker drained; it takes `act.role` */
} dy_sim_move_kind;

typedef struct {
    double t;
    dy_sim_move_kind kind;
    dy_plan_action act;         /* the slot, and the role (see dy_sim_move_kind) */
} dy_sim_move;

/* Watches the router's inputs and the placement decisions as they happen (for tests and
 * traces). Every field may be NULL. `placement` numbers dy_place calls from 0; the ticket of
 * placement k comes back in on_ticket. */
typedef struct {
    void *ctx;
    void (*on_kv_events)(void *ctx, int worker, uint64_t seq, const dy_kv_event *ev, int n);
    void (*on_kv_snapshot)(void *ctx, int worker, uint64_t seq, const uint64_t *hashes,
                           const uint64_t *parents, int n);
    void (*on_load)(void *ctx, int worker, const dy_router_load *load);
    void (*on_admit)(void *ctx, int request, int waiting_sequences, dy_admit verdict);
    void (*on_place)(void *ctx, int placement, int request, int first_sample, int n_samples,
                     double now, const dy_placement *p);
    void (*on_prefill_pick)(void *ctx, int placement, int planned, double now, int pick);
    void (*on_ticket)(void *ctx, int placement, bool finished); /* first token / finished */
    /* A sample ended (done, failed or refused) at simulated time `now`: its final record,
     * valid during the call only (what a command's progress line counts). */
    void (*on_sample_end)(void *ctx, const dy_sim_record *r, double now);
} dy_sim_observer;

typedef struct dy_sim dy_sim;

/* A deployment ready to run (costs and observer copied; observer may be NULL). NULL with a
 * message in err on a bad configuration or out of memory. */
dy_sim *dy_sim_new(const dy_sim_config *cfg, const dy_step_costs *costs,
                   const dy_sim_observer *obs, char *err, size_t errlen);
void dy_sim_free(dy_sim *s);

/* A streamed run: the simulator pulls its requests one at a time, as the simulated clock
 * reaches the one before (it holds one request ahead), and hands each sample's record out
 * when the sample ends, then frees it, so that memory follows the requests in flight and not
 * the workload's length.
 *   next  fills *out with the next request (arrivals in non-decreasing order) and returns 1;
 *         0 when there are no more; -1 stops the run. *out, prompt included, need only stay
 *         valid until the next call.
 *   sink  (may be NULL) is called once per sample as it ends (done, failed or refused), in
 *         the order they end; the record and its token_times are valid during the call only.
 *         Returning false stops the run.
 *   prompt  (may be NULL) lets next give a request without its tokens (prompt NULL): the
 *         simulator asks for them, request by request (numbered from 0 in the order next gave
 *         them), writing n_prompt ids into out, once the request passed the frontend's checks
 *         and admission — so the prompts of refused requests are never made. Returning false
 *         stops the run. */
typedef struct {
    int (*next)(void *ctx, dy_sim_request *out);
    bool (*sink)(void *ctx, const dy_sim_record *r);
    bool (*prompt)(void *ctx, int request, int32_t *out);
    void *ctx;
} dy_sim_stream;

/* Runs the stream to the end: every sample done or refused. One run per dy_sim. 0, or -1 with
 * a message (out of memory, a bad request, the source or the sink failed). */
int dy_sim_run_stream(dy_sim *s, const dy_sim_stream *io, char *err, size_t errlen);

/* Runs the workload (arrivals in non-decreasing order) to the end, as a stream over the array
 * whose sink keeps every record (the same run, event for event). One run per dy_sim. 0, or
 * -1 with a message (out of memory, bad request list). */
int dy_sim_run(dy_sim *s, const dy_sim_request *reqs, int n_reqs, char *err, size_t errlen);

/* After dy_sim_run: one record per sample, in request order then sample order (none after a
 * streamed run: its records went to its sink). */
const dy_sim_record *dy_sim_records(const dy_sim *s, int *n);
dy_sim_totals dy_sim_get_totals(const dy_sim *s);
dy_sim_worker_totals dy_sim_get_worker_totals(const dy_sim *s, int worker);
/* With a planner, after a run: its decisions and the slots' moves, in time order (NULL, 0
 * without one). Valid until dy_sim_free. */
const dy_sim_decision *dy_sim_decisions(const dy_sim *s, int *n);
const dy_sim_move *dy_sim_moves(const dy_sim *s, int *n);
/* "move", "ready", "parked", "drained". */
const char *dy_sim_move_kind_name(dy_sim_move_kind k);

/* dy_sim_run's records as `dyad bench` counts requests (bench_stats.h): one result per
 * sample, times in ms after the start. -1 when out of memory. */
int dy_sim_bench_stats(const dy_sim *s, dyb_stats *out);
/* The same, summarized as `dyad bench` reports a run (duration = the run's). */
int dy_sim_summarize(const dy_sim *s, const dyb_slo *slo, int cores, dyb_summary *out);

#endif
