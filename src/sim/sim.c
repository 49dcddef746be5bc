/* sim.c — see sim.h. One event queue (a binary heap on (time, order scheduled)) drives two
 * kinds of actors:
 *   the frontend  arrivals (admission, placement), and what the workers' flushed frames say
 *                 (fleet_flights.c, fleet_prefill.c, fleet_kv.c);
 *   each worker   the loop of serve/worker/worker.c: handle the frames that came in, run one
 *                 step, publish KV events, report its load when due, flush its frames. A frame
 *                 that arrives while a step runs waits for the step's end, as on a real worker.
 * Frontend-to-worker frames land in the worker's inbox; worker-to-frontend frames go to its
 * outbox and reach the frontend when the worker flushes, in the order they were written.
 *
 * Memory follows the requests in flight, not the workload's length: a request is pulled from
 * the source when the clock reaches the one before it and lives in a slot (its prompt's copy,
 * its block hashes, one record per sample) until its last sample ended and went to the sink;
 * the slot, buffers and all, then serves a later request. Placements (flights) are slots too,
 * freed when their last sample ends. dy_sim_run is this streamed run over an array, keeping
 * every record.
 *
 * With a planner (cfg.plan) the frontend also runs plan/planner.h each interval (EV_PLAN) on
 * what it saw, and carries the decision out with plan/actuate.h's reconciler on the worker
 * slots, as the server does: the reconciler is asked again whenever a slot changes state (a
 * start or a switch done, EV_SLOT; a drain done, when a draining worker goes idle holding
 * nothing), so that the moves it deferred happen then. */
#include "sim/sim.h"
#include "kv/block_hash.h"
#include "kv/kv_cache.h"
#include "sched/sched.h"
#include "util/buf.h"
#include "util/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- types */

typedef enum {
    EV_ARRIVAL, EV_ITERATE, EV_STEP_END, EV_FLUSH, EV_TICK, EV_XFER_DONE,
    EV_PLAN, /* the planner's interval ended */
    EV_SLOT, /* a starting (or switching) worker is ready */
} ev_kind;

/* Idle ticks, planning intervals and start-ups change nothing a request waits for (a request
 * is only ever placed on an active worker): when only they are left, the run is over. */
static bool is_work(int kind)
{
    return kind != EV_TICK && kind != EV_PLAN && kind != EV_SLOT;
}

typedef struct {
    double t;
    uint64_t order; /* ties run in the order scheduled */
    int kind, worker, a; /* a: request slot (arrival), idle generation (tick), flight slot (xfer) */
} event;

/* Frames, both ways (only what the simulation needs of them). */
typedef enum {
    M_REQUEST,    /* frontend -> worker: samples [first, first + count) of a request */
    M_PREFILL,    /* frontend -> prefill worker: compute a prompt for a decode worker */
    M_KV_READY,   /* frontend -> decode worker: the prompt's KV is there (or not: ok false) */
    M_KV_ALLOC,   /* decode worker -> frontend: blocks set aside (or local) */
    M_TOKEN,      /* worker -> frontend: a sample's token */
    M_DONE,       /* worker -> frontend: a sample ended (ok, or an error) */
    M_PREFILL_DONE, /* prefill worker -> frontend */
} msg_kind;

typedef struct {
    int kind;
    int flight;      /* the placement (flight slot) this frame is about */
    int sample;      /* M_TOKEN / M_DONE: the sample's number in its request */
    bool ok, local;
    int n_blocks;    /* M_KV_ALLOC / M_PREFILL: blocks to ship */
    int cached;      /* M_PREFILL_DONE: prompt tokens found cached on the prefill worker */
    int64_t bytes;
    double seconds;
    const char *error;
} msg;

typedef struct {
    msg *m;
    size_t n, cap, head;
} msg_queue;

/* A dy_seq's user pointer is a tag, not memory: a sample's sequence carries its request slot
 * and sample number ((slot << 32 | sample) + 1), a prefill worker's sequence computing a
 * flight's prompt -(flight slot + 1). */
_Static_assert(sizeof(intptr_t) >= 8, "a sample's tag packs two 32-bit numbers");
static void *tag_sample(int slot, int sample)
{
    return (void *)(intptr_t)(((int64_t)slot << 32 | (uint32_t)sample) + 1);
}
static void *tag_prefill(int flight) { return (void *)(intptr_t)-(flight + 1); }
static bool is_prefill(const dy_seq *q) { return (intptr_t)q->user < 0; }
static int slot_of_seq(const dy_seq *q) { return (int)(((intptr_t)q->user - 1) >> 32); }
static int sample_of_seq(const dy_seq *q) { return (int)(((intptr_t)q->user - 1) & 0xffffffff); }
static int flight_of_prefill(const dy_seq *q) { return (int)-(intptr_t)q->user - 1; }

typedef struct {
    dy_sim_worker cfg;
    dy_kv_pool *pool;
    dy_kv_cache *kv;
    dy_sched *sched;
    msg_queue inbox, outbox;
    enum { W_IDLE, W_SCHEDULED, W_STEPPING } state;
    uint32_t idle_gen;       /* stale ticks carry an old one */
    double last_stats;
    double link_free;        /* async transfers: when the link is free again */
    /* KV publishing (kv_publish.c) */
    bool want_snapshot;
    uint64_t kv_seq;
    dy_kv_event *ev;
    int ev_cap;
    uint64_t *snap_h, *snap_p;
    const dy_plan *plan;     /* the step in flight */
    int32_t *sampled;
    void *sampled_seqs;      /* scratch: the step's sequences that get a token */
    dy_sim_worker_totals tot;
    /* the frontend's view of it */
    int held;                /* samples sent to it and prompts sent it to prefill, not ended */
    /* its slot (dy_sim's slot[]: always active without a planner); cfg.role is its role */
    bool fresh;              /* starting: a new process (an empty cache) */
    double since;            /* the start of the span not yet counted in worker_s */
} sim_worker;

/* One sample of a request the simulator holds. */
typedef struct {
    dy_sim_record rec;       /* rec.token_times is `times` */
    double *times;           /* kept with the slot: room for times_cap tokens */
    int times_cap;
    int flight;              /* the flight slot it went out in; -1 before placement */
    int generated;           /* tokens its worker has sampled */
} live_sample;

/* A request pulled from the source and not yet ended. Its buffers stay with the slot. */
typedef struct {
    dy_sim_request r;        /* r.prompt is `prompt`, the simulator's copy */
    int index;               /* its number in the workload (the records' `request`) */
    uint64_t first_id;       /* sample 0's scheduler id: ids number the samples of the run */
    int open_samples;        /* admitted samples not yet ended */
    bool has_prompt;         /* false until the stream's prompt callback gave the tokens */
    int32_t *prompt;
    uint64_t *hashes;        /* its full blocks' hashes */
    live_sample *smp;        /* r.n_samples of them */
    int prompt_cap, hashes_cap, smp_cap;
} live_request;

/* One placement (a flight of fleet_flights.c): samples [first, first + count) of a request
 * sent to `gen`, the first of them carrying the router's ticket. */
typedef struct {
    int number;               /* placements are numbered from 0 over the run (the observer's) */
    int request;              /* its request's slot */
    int first, count;
    int open;                 /* its samples not yet ended */
    int gen, prefill;         /* prefill: the planned prefill worker, -1 local */
    int prefill_at;           /* the prefill worker its prompt was sent to; -1: none */
    dy_router_ticket ticket;
    bool has_ticket;
    dy_seq *decode_seq;       /* disaggregated: the leader's sequence on the decode worker */
    int n_ship;               /* disaggregated: blocks the decode worker set aside */
    msg xfer_done;            /* async transfer: the PREFILL_DONE frame its copy's end sends */
} flight;

/* What the frontend saw over one planning interval (dy_planner_obs's figures). */
typedef struct {
    double requests, prompt_tokens, output_tokens; /* arrived: their lengths as asked */
    double prompts, cached;   /* prompt tokens of prompts prefilled (ended), of them cached */
    double *ttft;             /* the TTFT of each first token delivered in the interval */
    double *tpot;             /* the mean gap between the tokens (bench's TPOT) of each sample
                               * that ended in it with more than one token */
    size_t n_ttft, ttft_cap, n_tpot, tpot_cap;
} plan_window;

/* The free slots of a pool, as a stack of their indices. */
typedef struct {
    int *ids;
    size_t n, cap;
} free_list;

struct dy_sim {
    dy_sim_config cfg;
    dy_step_costs costs;
    dy_sim_observer obs;
    sim_worker *w;
    dy_place_worker *view;
    dy_router *router;
    /* the event queue */
    event *heap;
    size_t n_heap, heap_cap;
    size_t n_work;            /* events in the heap that are work (is_work) */
    uint64_t next_order;
    double now;
    /* the workload, pulled as the clock reaches it */
    dy_sim_stream io;
    bool source_done;         /* the source has no more requests */
    int n_pulled;             /* requests pulled so far */
    uint64_t next_id;         /* scheduler ids handed out (one per sample) */
    double last_arrival;
    live_request *rq;         /* request slots */
    size_t n_rq, rq_cap;
    free_list rq_free;
    flight *fl;               /* flight slots */
    size_t n_fl, fl_cap;
    free_list fl_free;
    int n_flights;            /* placements so far */
    int requests_held, samples_held;
    /* dy_sim_run keeps every record here (a streamed run none) */
    dy_sim_record *rec;
    int n_rec;
    int *first_record;        /* per request: index of its first sample's record */
    /* the frontend's counts */
    int waiting_sequences;    /* sent, without a first token (admission's count) */
    long outstanding;         /* admitted samples not yet ended */
    int in_flight;            /* requests sent and not ended (for max_in_flight) */
    int held;                 /* slot of a request due while max_in_flight were in flight; -1 */
    bool ran;
    const char *fail;         /* a run-stopping error */
    dy_sim_totals tot;
    /* the planner (cfg.plan.on) */
    dy_planner planner;
    dy_pool_sizes target;     /* the last decision's pools */
    plan_window win;          /* what the frontend saw since the last decision */
    double last_hit;          /* the last prefix-hit share observed */
    dy_plan_slot *slot;       /* per worker: its slot, as plan/actuate.h describes one */
    dy_plan_action *acts;     /* scratch: its moves */
    dy_sim_decision *dec;
    size_t n_dec, dec_cap;
    dy_sim_move *mv;
    size_t n_mv, mv_cap;
    char plan_err[200];
};

/* ---------------------------------------------------------------- the event queue */

static bool ev_before(const event *a, const event *b)
{
    return a->t < b->t || (a->t == b->t && a->order < b->order);
}

static void push_event(dy_sim *s, double t, int kind, int worker, int a)
{
    if (!dy_array_reserve((void **)&s->heap, &s->heap_cap, s->n_heap + 1, sizeof *s->heap)) {
        s->fail = "out of memory";
        return;
    }
    event e = {t, s->next_order++, kind, worker, a};
    s->n_work += is_work(kind);
    size_t i = s->n_heap++;
    while (i > 0 && ev_before(&e, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = e;
}

static event pop_event(dy_sim *s)
{
    event top = s->heap[0], last = s->heap[--s->n_heap];
    s->n_work -= is_work(top.kind);
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->n_heap)
            break;
        if (c + 1 < s->n_heap && ev_before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!ev_before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->n_heap)
        s->heap[i] = last;
    return top;
}

/* ---------------------------------------------------------------- slots */

/* A free slot of a pool of *n items (index), growing the pool when none is free; -1 when out
 * of memory. A slot new to the pool is zeroed; a reused one is as its last user left it. */
static int take_slot(dy_sim *s, void **items, size_t *n, size_t *cap, size_t elem,
                     free_list *fl)
{
    if (fl->n > 0)
        return fl->ids[--fl->n];
    /* room for every slot on the free list now, so that giving one back cannot fail */
    if (*n >= INT32_MAX || !dy_array_reserve(items, cap, *n + 1, elem) ||
        !dy_array_reserve((void **)&fl->ids, &fl->cap, *n + 1, sizeof *fl->ids)) {
        s->fail = "out of memory";
        return -1;
    }
    memset((char *)*items + *n * elem, 0, elem);
    return (int)(*n)++;
}

static void give_slot(free_list *fl, int slot)
{
    fl->ids[fl->n++] = slot;
}

/* Room for `need` elements in a buffer that a slot keeps from request to request (a new part
 * zeroed). With `shrink`, a buffer over twice the need is cut down to it, so that a slot that
 * once held a very long request does not keep its memory: what the slots hold follows the
 * requests held now (within a factor of two), not the longest ones of the run. */
static bool fit(void **buf, int *cap, int need, size_t elem, bool shrink)
{
    if (need <= *cap && (!shrink || *cap / 2 <= need))
        return true;
    void *p = realloc(*buf, (size_t)need * elem);
    if (!p)
        return need <= *cap; /* a failed shrink leaves the buffer as it was */
    if (need > *cap)
        memset((char *)p + (size_t)*cap * elem, 0, (size_t)(need - *cap) * elem);
    *buf = p;
    *cap = need;
    return true;
}

/* ---------------------------------------------------------------- the workload */

static const char *check_request(const dy_sim *s, const dy_sim_request *r, double previous)
{
    if (!isfinite(r->arrival) || r->arrival < 0 || r->arrival < previous)
        return "arrival times must be finite, non-negative and in order";
    if (r->n_prompt < 1 || (!r->prompt && !s->io.prompt) || r->max_tokens < 1 ||
        r->n_samples < 1)
        return "every request needs a prompt, max_tokens >= 1 and n_samples >= 1";
    if (r->n_samples > s->cfg.max_samples * s->cfg.n_workers * 64)
        return "too many samples for one request";
    return NULL;
}

/* A request's records as the simulator starts them. */
static bool start_records(live_request *q)
{
    for (int k = 0; k < q->r.n_samples; k++) {
        live_sample *m = &q->smp[k];
        if (!fit((void **)&m->times, &m->times_cap, q->r.max_tokens, sizeof *m->times, true))
            return false;
        m->rec = (dy_sim_record){.request = q->index, .sample = k, .arrival = q->r.arrival,
                                 .first_token = -1, .done = -1, .token_times = m->times,
                                 .worker = -1, .prefill_worker = -1,
                                 .prompt_tokens = q->r.n_prompt};
        m->flight = -1;
        m->generated = 0;
    }
    for (int k = q->r.n_samples; k < q->smp_cap; k++) { /* left by a request of more samples */
        free(q->smp[k].times);
        q->smp[k].times = NULL;
        q->smp[k].times_cap = 0;
    }
    return true;
}

/* A copy of request r in a slot of its own. -1 when out of memory. */
static int hold_request(dy_sim *s, const dy_sim_request *r)
{
    int slot = take_slot(s, (void **)&s->rq, &s->n_rq, &s->rq_cap, sizeof *s->rq, &s->rq_free);
    if (slot < 0)
        return -1;
    live_request *q = &s->rq[slot];
    if (!fit((void **)&q->prompt, &q->prompt_cap, r->n_prompt, sizeof *q->prompt, true) ||
        !fit((void **)&q->smp, &q->smp_cap, r->n_samples, sizeof *q->smp, false)) {
        give_slot(&s->rq_free, slot);
        s->fail = "out of memory";
        return -1;
    }
    q->has_prompt = r->prompt != NULL;
    if (q->has_prompt)
        memcpy(q->prompt, r->prompt, sizeof *q->prompt * (size_t)r->n_prompt);
    q->r = *r;
    q->r.prompt = q->prompt;
    q->index = s->n_pulled;
    q->first_id = s->next_id;
    q->open_samples = 0;
    if (!start_records(q)) {
        give_slot(&s->rq_free, slot);
        s->fail = "out of memory";
        return -1;
    }
    s->n_pulled++;
    s->next_id += (uint64_t)r->n_samples;
    s->requests_held++;
    s->samples_held += r->n_samples;
    if (s->requests_held > s->tot.peak_requests_held)
        s->tot.peak_requests_held = s->requests_held;
    if (s->samples_held > s->tot.peak_samples_held)
        s->tot.peak_samples_held = s->samples_held;
    return slot;
}

static void release_request(dy_sim *s, int slot)
{
    s->requests_held--;
    s->samples_held -= s->rq[slot].r.n_samples;
    give_slot(&s->rq_free, slot);
}

/* The source's next request, held in a slot; -1 when there is none (or the run failed). */
static int pull_request(dy_sim *s)
{
    if (s->source_done || s->fail)
        return -1;
    dy_sim_request r;
    int got = s->io.next(s->io.ctx, &r);
    const char *bad = got < 0  ? "the request source failed"
                    : got == 0 ? NULL
                    : check_request(s, &r, s->last_arrival);
    if (got <= 0 || bad) {
        s->source_done = true;
        s->fail = bad;
        return -1;
    }
    if (s->n_pulled == INT32_MAX) {
        s->fail = "too many requests for one run";
        return -1;
    }
    s->last_arrival = r.arrival;
    return hold_request(s, &r);
}

/* A sample's record is final: it goes to the sink. */
static void emit(dy_sim *s, int slot, int sample)
{
    if (s->obs.on_sample_end)
        s->obs.on_sample_end(s->obs.ctx, &s->rq[slot].smp[sample].rec, s->now);
    if (s->io.sink && !s->fail && !s->io.sink(s->io.ctx, &s->rq[slot].smp[sample].rec) &&
        !s->fail)
        s->fail = "the record sink failed";
}

/* ---------------------------------------------------------------- frames */

static void msg_push(dy_sim *s, msg_queue *q, msg m)
{
    if (q->head == q->n)
        q->head = q->n = 0;
    if (!dy_array_reserve((void **)&q->m, &q->cap, q->n + 1, sizeof *q->m)) {
        s->fail = "out of memory";
        return;
    }
    q->m[q->n++] = m;
}

static bool msg_pop(msg_queue *q, msg *out)
{
    if (q->head == q->n)
        return false;
    *out = q->m[q->head++];
    return true;
}

static void wake(dy_sim *s, int wi);
static void go_idle(dy_sim *s, int wi);

/* A frame from the frontend: the worker reads it at its next loop turn. */
static void send_to_worker(dy_sim *s, int wi, msg m)
{
    msg_push(s, &s->w[wi].inbox, m);
    wake(s, wi);
}

/* ---------------------------------------------------------------- placement (the frontend) */

static live_request *req_of(dy_sim *s, const flight *f)
{
    return &s->rq[f->request];
}

static int n_blocks_of(const dy_sim *s, const dy_sim_request *r)
{
    return r->n_prompt / s->cfg.block_size;
}

/* The deployment as placement sees it (fleet_flights.c's place_view). */
static dy_place_view place_view(dy_sim *s)
{
    return (dy_place_view){.workers = s->view, .n_workers = s->cfg.n_workers,
                           .block_size = s->cfg.block_size, .max_samples = s->cfg.max_samples,
                           .route = s->cfg.route, .router = s->router};
}

static dy_place_request place_request(const dy_sim *s, int slot, int n_samples)
{
    const live_request *q = &s->rq[slot];
    return (dy_place_request){.prompt_tokens = q->r.n_prompt, .hashes = q->hashes,
                              .n_blocks = n_blocks_of(s, &q->r), .max_tokens = q->r.max_tokens,
                              .n_samples = n_samples, .local_prefill = false};
}

static dy_sim_record *record_of(dy_sim *s, int slot, int sample)
{
    return &s->rq[slot].smp[sample].rec;
}

/* A sample's end: its record to the sink, the frontend's count of open work, its flight once
 * no sample of it is left, and the request's slot once none of its samples is. */
static void sample_ended(dy_sim *s, int slot, int sample)
{
    emit(s, slot, sample);
    live_request *q = &s->rq[slot];
    const int fi = q->smp[sample].flight;
    if (fi >= 0 && --s->fl[fi].open == 0)
        give_slot(&s->fl_free, fi);
    s->outstanding--;
    if (--q->open_samples == 0) {
        release_request(s, slot);
        s->in_flight--;
        if (s->held >= 0) { /* the client sends its next request now */
            push_event(s, s->now, EV_ARRIVAL, -1, s->held);
            s->held = -1;
        }
    }
}

static void fail_record(dy_sim *s, int slot, int sample, const char *why)
{
    dy_sim_record *r = record_of(s, slot, sample);
    r->ok = false;
    r->error = why;
    r->done = s->now;
}

static int new_flight(dy_sim *s)
{
    int fi = take_slot(s, (void **)&s->fl, &s->n_fl, &s->fl_cap, sizeof *s->fl, &s->fl_free);
    if (fi >= 0)
        s->fl[fi] = (flight){.number = s->n_flights++};
    return fi;
}

/* fleet_flights.c's submit_samples: the samples go together to one worker unless its pool
 * could not hold them all; each part is placed anew. */
static void submit(dy_sim *s, int slot)
{
    const int n_samples = s->rq[slot].r.n_samples;
    for (int first = 0; first < n_samples && !s->fail;) {
        int fi = new_flight(s);
        if (fi < 0)
            return;
        flight *f = &s->fl[fi];
        dy_place_view v = place_view(s);
        dy_place_request pr = place_request(s, slot, n_samples - first);
        dy_placement p = dy_place(&v, &pr, s->now, &f->ticket);
        if (s->obs.on_place)
            s->obs.on_place(s->obs.ctx, f->number, s->rq[slot].index, first, n_samples - first,
                            s->now, &p);
        if (p.gen < 0) { /* no live worker: cannot happen in a fixed deployment */
            give_slot(&s->fl_free, fi);
            for (int k = first; k < n_samples; k++) {
                fail_record(s, slot, k, "no worker is available");
                s->waiting_sequences--;
                sample_ended(s, slot, k);
            }
            return;
        }
        *f = (flight){.number = f->number, .request = slot, .first = first, .count = p.samples,
                      .open = p.samples, .gen = p.gen, .prefill = p.prefill, .prefill_at = -1,
                      .ticket = f->ticket, .has_ticket = true};
        s->w[p.gen].held += p.samples;
        for (int k = first; k < first + p.samples; k++) {
            live_sample *m = &s->rq[slot].smp[k];
            m->flight = fi;
            m->rec.worker = p.gen;
            m->rec.prefill_worker = p.prefill >= 0 ? p.prefill : p.gen;
            m->rec.overlap_blocks = p.overlap_blocks;
        }
        send_to_worker(s, p.gen, (msg){.kind = M_REQUEST, .flight = fi});
        first += p.samples;
    }
}

/* The frontend's first check, before admission (openai.c's dy_api_max_new_tokens): the
 * prompt and the tokens asked for must fit the model's context, or the request is refused
 * (HTTP 400, context_length_exceeded) and never reaches a worker. */
static bool fits_context(const dy_sim *s, const dy_sim_request *r)
{
    return s->cfg.ctx_len <= 0 || (int64_t)r->n_prompt + r->max_tokens <= s->cfg.ctx_len;
}

/* A request that ends where it arrives: every sample failed with `why`. */
static void refuse(dy_sim *s, int slot, const char *why)
{
    for (int k = 0; k < s->rq[slot].r.n_samples; k++) {
        fail_record(s, slot, k, why);
        emit(s, slot, k);
    }
    release_request(s, slot);
}

static void on_arrival(dy_sim *s, int slot)
{
    live_request *q = &s->rq[slot];
    const int n = q->r.n_samples;
    for (int k = 0; k < n; k++)
        q->smp[k].rec.arrival = s->now; /* later than planned when held */
    s->win.requests++;
    s->win.prompt_tokens += q->r.n_prompt;
    s->win.output_tokens += (double)q->r.max_tokens * n;
    if (!fits_context(s, &q->r)) {
        s->tot.over_context++;
        refuse(s, slot, "the prompt and max_tokens exceed the context length");
        return;
    }
    dy_admit verdict = dy_place_admit(s->waiting_sequences, n, s->cfg.max_queue);
    if (s->obs.on_admit)
        s->obs.on_admit(s->obs.ctx, q->index, s->waiting_sequences, verdict);
    if (verdict == DY_ADMIT_QUEUE_FULL) {
        s->tot.refused++;
        refuse(s, slot, "the server's queue is full");
        return;
    }
    if (!q->has_prompt && !(q->has_prompt = s->io.prompt(s->io.ctx, q->index, q->prompt))) {
        s->fail = "the prompt source failed";
        return;
    }
    const int nb = n_blocks_of(s, &q->r);
    if (!fit((void **)&q->hashes, &q->hashes_cap, nb ? nb : 1, sizeof *q->hashes, true)) {
        s->fail = "out of memory";
        return;
    }
    dy_block_hashes(s->cfg.fingerprint, q->prompt, q->r.n_prompt, s->cfg.block_size, q->hashes);
    q->open_samples = n;
    s->in_flight++;
    s->outstanding += n;
    s->waiting_sequences += n;
    submit(s, slot);
}

/* ---------------------------------------------------------------- the frontend reads a flush */

/* One latency sample of the planning interval. */
static void window_add(dy_sim *s, double **v, size_t *n, size_t *cap, double x)
{
    if (!dy_array_reserve((void **)v, cap, *n + 1, sizeof **v)) {
        s->fail = "out of memory";
        return;
    }
    (*v)[(*n)++] = x;
}

static void ticket_call(dy_sim *s, int fi, bool finished)
{
    flight *f = &s->fl[fi];
    if (!f->has_ticket)
        return;
    if (finished)
        dy_router_on_finished(s->router, &f->ticket);
    else if (f->ticket.phase == 0)
        dy_router_on_first_token(s->router, &f->ticket);
    else
        return; /* idempotent: only the first token moves the load */
    if (s->obs.on_ticket)
        s->obs.on_ticket(s->obs.ctx, f->number, finished);
}

static void front_on_token(dy_sim *s, const msg *m)
{
    const flight *f = &s->fl[m->flight];
    dy_sim_record *r = record_of(s, f->request, m->sample);
    if (r->n_tokens == 0) {
        r->first_token = s->now;
        s->waiting_sequences--;
        if (s->cfg.plan.on)
            window_add(s, &s->win.ttft, &s->win.n_ttft, &s->win.ttft_cap, s->now - r->arrival);
    }
    r->token_times[r->n_tokens++] = s->now;
    s->tot.output_tokens++;
    if (m->sample == f->first)
        ticket_call(s, m->flight, false); /* the flight's first sample carries the ticket */
}

static void front_on_done(dy_sim *s, const msg *m)
{
    const flight *f = &s->fl[m->flight];
    const int slot = f->request;
    dy_sim_record *r = record_of(s, slot, m->sample);
    if (m->sample == f->first)
        ticket_call(s, m->flight, true);
    if (r->n_tokens == 0)
        s->waiting_sequences--;
    if (m->ok && m->sample == f->first) { /* the flight's prompt, counted once */
        s->win.prompts += r->prompt_tokens;
        s->win.cached += r->cached_tokens;
    }
    if (s->cfg.plan.on && m->ok && r->n_tokens > 1)
        window_add(s, &s->win.tpot, &s->win.n_tpot, &s->win.tpot_cap,
                   (s->now - r->first_token) / (r->n_tokens - 1));
    s->w[f->gen].held--;
    r->ok = m->ok;
    r->error = m->error;
    r->done = s->now;
    if (s->now > s->tot.duration_s)
        s->tot.duration_s = s->now;
    sample_ended(s, slot, m->sample);
}

/* fleet_prefill.c's dy_fleet_on_kv_alloc. */
static void front_on_kv_alloc(dy_sim *s, const msg *m)
{
    flight *f = &s->fl[m->flight];
    if (m->local) {
        s->tot.local_prefills++;
        for (int k = f->first; k < f->first + f->count; k++)
            record_of(s, f->request, k)->prefill_worker = f->gen;
        return;
    }
    dy_place_view v = place_view(s);
    dy_place_request pr = place_request(s, f->request, 1);
    int pi = dy_place_prefill(&v, &pr, f->prefill, s->now);
    if (s->obs.on_prefill_pick)
        s->obs.on_prefill_pick(s->obs.ctx, f->number, f->prefill, s->now, pi);
    for (int k = f->first; k < f->first + f->count; k++)
        record_of(s, f->request, k)->prefill_worker = pi >= 0 ? pi : f->gen;
    if (pi < 0) {
        s->tot.local_prefills++;
        send_to_worker(s, f->gen, (msg){.kind = M_KV_READY, .flight = m->flight, .ok = false});
        return;
    }
    f->prefill_at = pi;
    s->w[pi].held++;
    send_to_worker(s, pi, (msg){.kind = M_PREFILL, .flight = m->flight, .n_blocks = m->n_blocks});
}

/* fleet_prefill.c's dy_fleet_on_prefill_done. */
static void front_on_prefill_done(dy_sim *s, const msg *m)
{
    flight *f = &s->fl[m->flight];
    if (f->prefill_at >= 0)
        s->w[f->prefill_at].held--;
    if (m->ok) {
        s->tot.transfers++;
        s->tot.kv_bytes += m->bytes;
        s->tot.kv_seconds += m->seconds;
        for (int k = f->first; k < f->first + f->count; k++) {
            dy_sim_record *r = record_of(s, f->request, k);
            r->kv_bytes = m->bytes;
            r->kv_seconds = m->seconds;
            r->cached_tokens = m->cached;
        }
    } else { /* the decode worker computes the prompt after all */
        s->tot.local_prefills++;
        for (int k = f->first; k < f->first + f->count; k++)
            record_of(s, f->request, k)->prefill_worker = f->gen;
    }
    send_to_worker(s, f->gen, (msg){.kind = M_KV_READY, .flight = m->flight, .ok = m->ok});
}

static void front_read(dy_sim *s, const msg *m)
{
    switch (m->kind) {
    case M_KV_ALLOC: front_on_kv_alloc(s, m); break;
    case M_TOKEN: front_on_token(s, m); break;
    case M_DONE: front_on_done(s, m); break;
    case M_PREFILL_DONE: front_on_prefill_done(s, m); break;
    default: break;
    }
}

/* ---------------------------------------------------------------- a worker's frames */

static void worker_reply(dy_sim *s, int wi, msg m)
{
    msg_push(s, &s->w[wi].outbox, m);
}

static void reply_done(dy_sim *s, int wi, int fi, int sample, bool ok, const char *error)
{
    worker_reply(s, wi, (msg){.kind = M_DONE, .flight = fi, .sample = sample, .ok = ok,
                              .error = error});
}

static int max_len_of(const dy_sim *s, const dy_sim_request *r)
{
    int64_t len = (int64_t)r->n_prompt + r->max_tokens;
    if (s->cfg.ctx_len > 0 && len > s->cfg.ctx_len)
        len = s->cfg.ctx_len;
    return (int)len;
}

/* The other samples fork the leader's prompt (worker.c's add_forks). */
static void add_forks(dy_sim *s, int wi, int fi, dy_seq *leader)
{
    const flight *f = &s->fl[fi];
    const live_request *q = req_of(s, f);
    for (int k = f->first + 1; k < f->first + f->count; k++)
        if (!dy_sched_fork(s->w[wi].sched, leader, q->first_id + (uint64_t)k,
                           tag_sample(f->request, k)))
            reply_done(s, wi, fi, k, false, "out of memory");
}

/* worker.c's on_request, with worker_disagg.c's dy_disagg_on_remote_request. */
static void worker_on_request(dy_sim *s, int wi, int fi)
{
    sim_worker *w = &s->w[wi];
    flight *f = &s->fl[fi];
    live_request *q = req_of(s, f);
    const dy_sim_request *r = &q->r;
    const int lead = f->first;
    const uint64_t id = q->first_id + (uint64_t)lead;
    const bool remote = f->prefill >= 0 && w->cfg.role == DY_POOL_DECODE;
    dy_seq *seq = NULL;
    if (s->cfg.ctx_len <= 0 || r->n_prompt < s->cfg.ctx_len) /* worker.c's check_request */
        seq = remote ? dy_sched_add_remote(w->sched, id, r->prompt, r->n_prompt,
                                           max_len_of(s, r), tag_sample(f->request, lead))
                     : dy_sched_add(w->sched, id, r->prompt, r->n_prompt, max_len_of(s, r),
                                    tag_sample(f->request, lead));
    if (!seq) {
        for (int k = 0; k < f->count; k++)
            reply_done(s, wi, fi, lead + k, false, "prompt does not fit this worker's KV cache");
        return;
    }
    if (!remote) /* an aggregated worker computes a prompt meant for a prefill worker itself */
        for (int k = 0; k < f->count; k++)
            q->smp[lead + k].rec.prefill_worker = wi;
    if (remote) {
        f->decode_seq = seq;
        msg a = {.kind = M_KV_ALLOC, .flight = fi, .local = seq->state != DY_SEQ_REMOTE};
        if (!a.local)
            a.n_blocks = f->n_ship = seq->n_blocks - seq->n_published;
        worker_reply(s, wi, a);
    }
    add_forks(s, wi, fi, seq);
}

/* worker_disagg.c's dy_disagg_on_prefill: positions [0, n_prompt - 1) through the scheduler. */
static void worker_on_prefill(dy_sim *s, int wi, const msg *m)
{
    sim_worker *w = &s->w[wi];
    const flight *f = &s->fl[m->flight];
    const dy_sim_request *r = &req_of(s, f)->r;
    const int n = r->n_prompt - 1;
    dy_seq *q = NULL;
    if (s->cfg.ctx_len <= 0 || n < s->cfg.ctx_len) /* worker_disagg.c's check_prefill */
        q = dy_sched_add(w->sched, (uint64_t)f->number, r->prompt, n, n + 1,
                         tag_prefill(m->flight));
    if (!q)
        worker_reply(s, wi, (msg){.kind = M_PREFILL_DONE, .flight = m->flight, .ok = false});
}

static void worker_on_kv_ready(dy_sim *s, int wi, const msg *m)
{
    dy_seq *q = s->fl[m->flight].decode_seq;
    if (q && q->state == DY_SEQ_REMOTE)
        dy_sched_remote_ready(s->w[wi].sched, q, m->ok);
}

static void worker_read_inbox(dy_sim *s, int wi)
{
    msg m;
    while (msg_pop(&s->w[wi].inbox, &m)) {
        if (m.kind == M_REQUEST)
            worker_on_request(s, wi, m.flight);
        else if (m.kind == M_PREFILL)
            worker_on_prefill(s, wi, &m);
        else if (m.kind == M_KV_READY)
            worker_on_kv_ready(s, wi, &m);
    }
}

/* ---------------------------------------------------------------- KV events and load */

static void apply_snapshot(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    int n = dy_kv_cache_snapshot(w->kv, w->snap_h, w->snap_p, w->pool->n_blocks);
    dy_kv_index_resync(dy_router_index(s->router), wi, w->kv_seq, w->snap_h, w->snap_p, NULL, n);
    if (s->obs.on_kv_snapshot)
        s->obs.on_kv_snapshot(s->obs.ctx, wi, w->kv_seq, w->snap_h, w->snap_p, n);
    w->want_snapshot = false;
}

/* kv_publish.c's dy_kv_publish_flush: the cache's event log, in numbered batches, into the
 * router's index (a snapshot first, and whenever the log overflowed). */
static void publish_kv(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    if (s->cfg.no_kv_events)
        return;
    if (w->want_snapshot || dy_kv_cache_events_overflowed(w->kv)) {
        apply_snapshot(s, wi);
        return;
    }
    int n;
    while ((n = dy_kv_cache_take_events(w->kv, w->ev, w->ev_cap)) > 0) {
        w->kv_seq++;
        dy_kv_index_apply(dy_router_index(s->router), wi, w->kv_seq, w->ev, n);
        if (s->obs.on_kv_events)
            s->obs.on_kv_events(s->obs.ctx, wi, w->kv_seq, w->ev, n);
    }
}

/* worker.c's send_stats as fleet_kv.c's dy_fleet_on_stats turns it into a load report. */
static void report_load(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    dy_router_load load = {
        .queued_prefill_tokens = dy_sched_queued_prefill_tokens(w->sched),
        .active_decode_blocks = dy_sched_running_blocks(w->sched),
        .running = (int64_t)dy_sched_n_running(w->sched) + dy_sched_n_waiting(w->sched),
        .kv_used_blocks = w->pool->n_blocks - dy_kv_cache_available(w->kv),
        .kv_total_blocks = w->pool->n_blocks,
    };
    dy_router_report_load(s->router, wi, &load);
    if (s->obs.on_load)
        s->obs.on_load(s->obs.ctx, wi, &load);
    w->last_stats = s->now;
}

/* The end of a loop turn: what it wrote reaches the frontend in worker.c's order — the
 * replies (KV_ALLOC, tokens, ends, PREFILL_DONE), then the KV events, then the load report
 * when one is due. */
static void flush(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    msg m;
    while (msg_pop(&w->outbox, &m))
        front_read(s, &m);
    publish_kv(s, wi);
    if (s->now - w->last_stats >= s->cfg.stats_every_s)
        report_load(s, wi);
}

/* ---------------------------------------------------------------- a worker's step */

static bool finite_nonneg(double x)
{
    return isfinite(x) && x >= 0;
}

static bool sim_finished(const dy_sim *s)
{
    return s->source_done && s->outstanding == 0;
}

/* A worker process that runs its loop: active or draining (not parked, not starting). */
static bool serving(const dy_sim *s, int wi)
{
    return s->slot[wi].state == DY_SLOT_ACTIVE || s->slot[wi].state == DY_SLOT_DRAINING;
}

static void drain_check(dy_sim *s, int wi);

static void go_idle(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    w->state = W_IDLE;
    if (w->inbox.head < w->inbox.n) { /* a frame came during this turn's flush */
        wake(s, wi);
        return;
    }
    w->idle_gen++;
    if (!sim_finished(s) && serving(s, wi))
        push_event(s, s->now + s->cfg.stats_every_s, EV_TICK, wi, (int)w->idle_gen);
    drain_check(s, wi);
}

/* One loop turn of worker.c's dy_worker_run: frames in, then a step if there is work. */
static void iterate(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    worker_read_inbox(s, wi);
    const dy_plan *p;
    if (dy_sched_n_running(w->sched) + dy_sched_n_waiting(w->sched) > 0 &&
        dy_sched_plan(w->sched, &p) > 0) {
        dy_step_shape sh = dy_step_shape_of(p);
        double dt = s->costs.step_seconds(s->costs.ctx, &sh);
        if (!finite_nonneg(dt)) {
            s->fail = "the cost model gave a step time that is negative or not finite";
            return;
        }
        w->tot.steps++;
        w->tot.preemptions += (uint64_t)p->n_preempted;
        w->tot.prefill_tokens += (uint64_t)sh.prefill_tokens;
        w->tot.decode_tokens += (uint64_t)sh.decode_seqs;
        w->tot.busy_s += dt;
        w->state = W_STEPPING;
        w->plan = p;
        push_event(s, s->now + dt, EV_STEP_END, wi, 0);
        return;
    }
    flush(s, wi);
    go_idle(s, wi);
}

static void wake(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    if (w->state != W_IDLE)
        return; /* a turn is coming: it reads the inbox then */
    w->state = W_SCHEDULED;
    w->idle_gen++;
    push_event(s, s->now, EV_ITERATE, wi, 0);
}

/* A sampled token reaches its request (worker.c's deliver); ends it at its length. */
static void deliver(dy_sim *s, int wi, dy_seq *q)
{
    const int slot = slot_of_seq(q), k = sample_of_seq(q);
    live_sample *m = &s->rq[slot].smp[k];
    const int fi = m->flight, generated = ++m->generated;
    worker_reply(s, wi, (msg){.kind = M_TOKEN, .flight = fi, .sample = k});
    if (generated < s->rq[slot].r.max_tokens && q->n_tokens < q->max_len)
        return;
    m->rec.preemptions = q->n_preemptions;
    if (m->rec.prefill_worker == wi) /* a remote prefill's cached count comes with its transfer */
        m->rec.cached_tokens = q->n_cached;
    reply_done(s, wi, fi, k, true, NULL);
    dy_sched_finish(s->w[wi].sched, q);
}

/* A prefill worker's prompt is done: its blocks go to the decode worker (dy_disagg_ship),
 * starting at t_start. Returns the seconds this worker waits for the copy (0 when
 * transfers run asynchronously; they then share one link, back to back). */
static double ship(dy_sim *s, int wi, dy_seq *q, double t_start)
{
    sim_worker *w = &s->w[wi];
    const int fi = flight_of_prefill(q);
    int64_t bytes = (int64_t)s->fl[fi].n_ship * s->cfg.kv_block_bytes;
    double dt = s->costs.transfer_seconds(s->costs.ctx, bytes);
    if (!finite_nonneg(dt)) {
        s->fail = "the cost model gave a transfer time that is negative or not finite";
        dt = 0;
    }
    msg done = {.kind = M_PREFILL_DONE, .flight = fi, .ok = true, .bytes = bytes,
                .seconds = dt, .cached = q->n_cached};
    dy_sched_finish(w->sched, q); /* its blocks stay in this worker's prefix cache */
    w->tot.busy_s += s->cfg.xfer_async ? 0 : dt;
    if (!s->cfg.xfer_async) {
        worker_reply(s, wi, done);
        return dt;
    }
    /* The frame leaves when the copy ends, not with this worker's next flush. */
    double start = w->link_free > t_start ? w->link_free : t_start;
    w->link_free = start + dt;
    s->fl[fi].xfer_done = done;
    push_event(s, w->link_free, EV_XFER_DONE, wi, fi);
    return 0;
}

/* The step's end (worker.c's step after the engine): commit the fixed token, deliver it,
 * ship finished prefills; the turn ends (flush) once this worker's copies are done. */
static void on_step_end(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    const dy_plan *p = w->plan;
    int n_logits = 0;
    for (int i = 0; i < p->n_items; i++)
        n_logits += p->items[i].logits;
    for (int k = 0; k < n_logits; k++)
        w->sampled[k] = DY_SIM_TOKEN;
    dy_sched_commit(w->sched, w->sampled);
    /* Delivering ends sequences, and ending one clears it from the plan: collect first. */
    dy_seq **ready = (dy_seq **)w->sampled_seqs;
    int n_ready = 0;
    for (int i = 0; i < p->n_items; i++)
        if (p->items[i].logits && p->items[i].seq)
            ready[n_ready++] = p->items[i].seq;
    double wait = 0;
    for (int k = 0; k < n_ready; k++) {
        if (is_prefill(ready[k]))
            wait += ship(s, wi, ready[k], s->now + wait);
        else
            deliver(s, wi, ready[k]);
    }
    w->plan = NULL;
    if (wait > 0) {
        push_event(s, s->now + wait, EV_FLUSH, wi, 0);
        return;
    }
    flush(s, wi);
    iterate(s, wi);
}

/* ---------------------------------------------------------------- the planner (cfg.plan) */

static bool worker_init(sim_worker *w, const dy_sim_worker *cfg, int block_size,
                        uint64_t fingerprint);
static void worker_free(sim_worker *w);

/* Its time in its state so far goes to its role's worker-seconds (a parked slot costs none). */
static void account(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    if (s->slot[wi].state != DY_SLOT_PARKED && s->now > w->since)
        s->tot.worker_s[w->cfg.role] += s->now - w->since;
    w->since = s->now;
}

static void log_move(dy_sim *s, dy_sim_move_kind kind, dy_plan_action a)
{
    if (!dy_array_reserve((void **)&s->mv, &s->mv_cap, s->n_mv + 1, sizeof *s->mv)) {
        s->fail = "out of memory";
        return;
    }
    s->mv[s->n_mv++] = (dy_sim_move){.t = s->now, .kind = kind, .act = a};
}

/* Placement sees a worker only while it is active. */
static void set_view(dy_sim *s, int wi)
{
    const dy_slot_state st = s->slot[wi].state;
    s->view[wi].alive = st == DY_SLOT_ACTIVE;
    s->view[wi].pool = st == DY_SLOT_PARKED ? DY_POOL_AGG : s->w[wi].cfg.role;
}

/* A new process: an empty KV cache and scheduler (its totals and tick generation go on). */
static bool restart_worker(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    const dy_sim_worker cfg = w->cfg;
    const dy_sim_worker_totals tot = w->tot;
    const uint32_t gen = w->idle_gen;
    const double since = w->since;
    worker_free(w);
    bool ok = worker_init(w, &cfg, s->cfg.block_size, s->cfg.fingerprint);
    w->tot = tot;
    w->idle_gen = gen;
    w->since = since;
    return ok;
}

/* It takes requests in its role: the router forgets what it knew of it and relearns its blocks
 * from its first turn's snapshot and load report, as after a HELLO. */
static void activate(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    const dy_act_kind how = w->fresh ? DY_ACT_START : DY_ACT_SWITCH;
    if (w->fresh && !restart_worker(s, wi)) {
        s->fail = "out of memory";
        return;
    }
    account(s, wi);
    s->slot[wi].state = DY_SLOT_ACTIVE;
    w->fresh = false;
    w->want_snapshot = true;
    w->last_stats = -INFINITY;
    set_view(s, wi);
    dy_router_remove_worker(s->router, wi);
    dy_router_add_worker(s->router, wi, !s->cfg.no_kv_events);
    log_move(s, DY_SIM_READY, (dy_plan_action){how, wi, w->cfg.role});
    wake(s, wi);
}

/* A draining worker that holds nothing any more parks, or takes its next role. */
static void finish_drain(dy_sim *s, int wi)
{
    sim_worker *w = &s->w[wi];
    dy_plan_slot *sl = &s->slot[wi];
    account(s, wi);
    if (sl->to_stop) {
        sl->state = DY_SLOT_PARKED;
        w->idle_gen++; /* its idle tick is stale */
        set_view(s, wi);
        dy_router_remove_worker(s->router, wi);
        log_move(s, DY_SIM_PARKED, (dy_plan_action){DY_ACT_STOP, wi, w->cfg.role});
        return;
    }
    w->cfg.role = sl->role = sl->next_role;
    log_move(s, DY_SIM_DRAINED, (dy_plan_action){DY_ACT_SWITCH, wi, w->cfg.role});
    if (s->cfg.plan.switch_s > 0) {
        sl->state = DY_SLOT_STARTING;
        set_view(s, wi);
        push_event(s, s->now + s->cfg.plan.switch_s, EV_SLOT, wi, 0);
        return;
    }
    activate(s, wi);
}

static bool drained(const dy_sim *s, int wi)
{
    const sim_worker *w = &s->w[wi];
    return s->slot[wi].state == DY_SLOT_DRAINING && w->state == W_IDLE && w->held == 0;
}

/* A move on the slot's description (dy_plan_apply), and what the worker does with it: a START
 * comes up after the start-up time; every move changes what placement sees. */
static void make_move(dy_sim *s, const dy_plan_action *a)
{
    log_move(s, DY_SIM_MOVE, *a);
    account(s, a->slot);
    dy_plan_apply(s->slot, a);
    if (a->kind == DY_ACT_START) {
        s->w[a->slot].cfg.role = a->role;
        s->w[a->slot].fresh = true;
        push_event(s, s->now + s->cfg.plan.planner.startup_s, EV_SLOT, a->slot, 0);
    }
    set_view(s, a->slot);
}

/* dy_plan_reconcile's moves toward the target, made; then the drains they finished at once
 * (an idle worker is empty already), which may let deferred moves happen, until none. */
static void reconcile(dy_sim *s)
{
    const int n = s->cfg.n_workers;
    for (bool again = true; again && !s->fail;) {
        for (int i = 0; i < n; i++)
            s->slot[i].in_flight = s->w[i].held;
        int k = dy_plan_reconcile(s->slot, n, s->target, s->acts, 2 * n);
        for (int i = 0; i < k; i++)
            make_move(s, &s->acts[i]);
        again = false;
        for (int i = 0; i < n; i++)
            if (drained(s, i)) {
                finish_drain(s, i);
                again = true;
            }
    }
}

static void drain_check(dy_sim *s, int wi)
{
    if (!s->cfg.plan.on || sim_finished(s) || !drained(s, wi))
        return;
    finish_drain(s, wi);
    reconcile(s);
}

static void on_slot_ready(dy_sim *s, int wi)
{
    if (sim_finished(s) || s->slot[wi].state != DY_SLOT_STARTING)
        return;
    activate(s, wi);
    reconcile(s);
}

static double mean_of(const double *v, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return n ? sum / (double)n : 0;
}

/* The highest KV-pool use among the workers that generate (the reactive rule's signal). */
static double generators_kv_use(const dy_sim *s)
{
    double top = 0;
    for (int i = 0; i < s->cfg.n_workers; i++) {
        const sim_worker *w = &s->w[i];
        if (!serving(s, i) || w->cfg.role == DY_POOL_PREFILL)
            continue;
        const double use = 1.0 - (double)dy_kv_cache_available(w->kv) / w->pool->n_blocks;
        top = use > top ? use : top;
    }
    return top;
}

/* The interval's observation, as the frontend saw it: what arrived; the prefix-hit share of
 * the prompts whose samples ended (the last one when none did); the TTFT of the first tokens
 * delivered and the TPOT of the samples that ended, mean and p90; the queue (sent, without a
 * first token) and KV use now. Its latency samples are sorted on the way. */
static dy_planner_obs observe(dy_sim *s)
{
    plan_window *v = &s->win;
    if (v->prompts > 0) {
        double hit = v->cached / v->prompts;
        s->last_hit = hit < 0.99 ? hit : 0.99; /* the server's frontend caps it there too */
    }
    dy_sort_doubles(v->ttft, v->n_ttft);
    dy_sort_doubles(v->tpot, v->n_tpot);
    return (dy_planner_obs){.requests = v->requests, .prompt_tokens = v->prompt_tokens,
                            .output_tokens = v->output_tokens, .prefix_hit = s->last_hit,
                            .ttft_s = mean_of(v->ttft, v->n_ttft),
                            .itl_s = mean_of(v->tpot, v->n_tpot),
                            .ttft_p90_s = dy_percentile(v->ttft, v->n_ttft, 90),
                            .itl_p90_s = dy_percentile(v->tpot, v->n_tpot, 90),
                            .waiting = s->waiting_sequences, .kv_use = generators_kv_use(s)};
}

/* A fresh window for the next interval (its buffers kept). */
static void window_restart(plan_window *v)
{
    *v = (plan_window){.ttft = v->ttft, .tpot = v->tpot, .ttft_cap = v->ttft_cap,
                       .tpot_cap = v->tpot_cap};
}

static void log_decision(dy_sim *s, const dy_planner_obs *o, const dy_planner_decision *d)
{
    if (!dy_array_reserve((void **)&s->dec, &s->dec_cap, s->n_dec + 1, sizeof *s->dec)) {
        s->fail = "out of memory";
        return;
    }
    dy_sim_decision r = {.t = s->now, .d = *d, .obs = *o};
    for (int i = 0; i < s->cfg.n_workers; i++) {
        const dy_slot_state st = s->slot[i].state;
        r.active[s->w[i].cfg.role] += st == DY_SLOT_ACTIVE;
        r.starting += st == DY_SLOT_STARTING;
        r.draining += st == DY_SLOT_DRAINING;
    }
    s->dec[s->n_dec++] = r;
}

/* An interval ended: the planner's decision, carried out. */
static void on_plan(dy_sim *s)
{
    if (sim_finished(s))
        return;
    dy_planner_obs o = observe(s);
    dy_planner_decision d;
    if (dy_planner_step(&s->planner, &o, &d, s->plan_err, sizeof s->plan_err) != 0) {
        s->fail = s->plan_err;
        return;
    }
    log_decision(s, &o, &d);
    window_restart(&s->win);
    s->target = dy_plan_target_sizes(&d);
    reconcile(s);
    push_event(s, s->now + s->cfg.plan.planner.interval_s, EV_PLAN, -1, 0);
}

/* ---------------------------------------------------------------- the run */

static void on_tick(dy_sim *s, int wi, uint32_t gen)
{
    sim_worker *w = &s->w[wi];
    if (w->state != W_IDLE || w->idle_gen != gen || !serving(s, wi))
        return; /* it woke up (or parked) meanwhile */
    flush(s, wi);
    go_idle(s, wi);
}

/* An asynchronous transfer ended: its PREFILL_DONE reaches the frontend. */
static void on_xfer_done(dy_sim *s, int wi, int fi)
{
    msg m = s->fl[fi].xfer_done;
    front_read(s, &m);
    if (s->w[wi].state == W_IDLE)
        drain_check(s, wi); /* the copy was the last thing it held */
}

static void dispatch(dy_sim *s, const event *e)
{
    switch (e->kind) {
    case EV_ARRIVAL: {
        if (s->cfg.max_in_flight > 0 && s->in_flight >= s->cfg.max_in_flight) {
            s->held = e->a; /* and the ones after it wait behind it, in order */
            break;
        }
        int next = pull_request(s); /* scheduled before anything this arrival schedules */
        if (next >= 0)
            push_event(s, fmax(s->now, s->rq[next].r.arrival), EV_ARRIVAL, -1, next);
        on_arrival(s, e->a);
        break;
    }
    case EV_ITERATE: iterate(s, e->worker); break;
    case EV_STEP_END: on_step_end(s, e->worker); break;
    case EV_FLUSH:
        flush(s, e->worker);
        iterate(s, e->worker);
        break;
    case EV_TICK: on_tick(s, e->worker, (uint32_t)e->a); break;
    case EV_XFER_DONE: on_xfer_done(s, e->worker, e->a); break;
    case EV_PLAN: on_plan(s); break;
    case EV_SLOT: on_slot_ready(s, e->worker); break;
    }
}

int dy_sim_run_stream(dy_sim *s, const dy_sim_stream *io, char *err, size_t errlen)
{
    if (s->ran || !io || !io->next) {
        snprintf(err, errlen, s->ran ? "a simulation runs once" : "the run needs a source");
        return -1;
    }
    s->ran = true;
    s->held = -1;
    s->io = *io;
    /* Every worker's first turn comes before the first arrival: it publishes its (empty)
     * snapshot and its first load report, as a worker does once it has said HELLO. */
    for (int i = 0; i < s->cfg.n_workers; i++)
        if (serving(s, i))
            wake(s, i);
    if (s->cfg.plan.on)
        push_event(s, s->cfg.plan.planner.interval_s, EV_PLAN, -1, 0);
    int first = pull_request(s);
    if (first >= 0)
        push_event(s, s->rq[first].r.arrival, EV_ARRIVAL, -1, first);
    /* Idle ticks alone change nothing a request waits for: when only they are left, the
     * run is over (or stuck). */
    while (s->n_work > 0 && !s->fail) {
        event e = pop_event(s);
        s->now = e.t;
        dispatch(s, &e);
    }
    if (!s->fail && s->outstanding > 0)
        s->fail = "requests were left waiting with every worker idle (a scheduling deadlock)";
    for (int i = 0; i < s->cfg.n_workers && !s->fail; i++)
        if (s->w[i].held != 0) /* what a drain waits on must come back to zero */
            s->fail = "the frontend's count of a worker's sequences did not return to zero";
    if (s->fail) {
        snprintf(err, errlen, "%s", s->fail);
        return -1;
    }
    for (int i = 0; i < s->cfg.n_workers; i++) {
        s->tot.steps += s->w[i].tot.steps;
        s->tot.preemptions += s->w[i].tot.preemptions;
        s->now = s->tot.duration_s; /* worker-seconds count to the run's end */
        account(s, i);
    }
    return 0;
}

/* dy_sim_run: the streamed run over an array, its sink keeping every record in place. */
typedef struct {
    dy_sim *s;
    const dy_sim_request *reqs;
    int n, next;
} array_run;

static int array_next(void *ctx, dy_sim_request *out)
{
    array_run *a = ctx;
    if (a->next >= a->n)
        return 0;
    *out = a->reqs[a->next++];
    return 1;
}

static bool array_keep(void *ctx, const dy_sim_record *r)
{
    dy_sim *s = ((array_run *)ctx)->s;
    dy_sim_record *dst = &s->rec[s->first_record[r->request] + r->sample];
    double *times = malloc(sizeof *times * (size_t)(r->n_tokens ? r->n_tokens : 1));
    if (!times) {
        s->fail = "out of memory";
        return false;
    }
    if (r->n_tokens)
        memcpy(times, r->token_times, sizeof *times * (size_t)r->n_tokens);
    *dst = *r;
    dst->token_times = times;
    return true;
}

/* One record per sample of the array, in request order then sample order. */
static bool make_records(dy_sim *s, const dy_sim_request *reqs, int n)
{
    long total = 0;
    for (int i = 0; i < n; i++)
        total += reqs[i].n_samples;
    if (total > INT32_MAX)
        return false;
    s->rec = calloc((size_t)(total ? total : 1), sizeof *s->rec);
    s->first_record = calloc((size_t)(n ? n : 1), sizeof *s->first_record);
    if (!s->rec || !s->first_record)
        return false;
    s->n_rec = (int)total;
    for (int i = 0, k = 0; i < n; k += reqs[i++].n_samples)
        s->first_record[i] = k;
    return true;
}

int dy_sim_run(dy_sim *s, const dy_sim_request *reqs, int n_reqs, char *err, size_t errlen)
{
    if (s->ran) {
        snprintf(err, errlen, "a simulation runs once");
        return -1;
    }
    const int n = n_reqs > 0 ? n_reqs : 0;
    const char *bad = NULL;
    for (int i = 0; i < n && !bad; i++)
        bad = check_request(s, &reqs[i], i ? reqs[i - 1].arrival : 0);
    if (bad || !make_records(s, reqs, n)) {
        s->ran = true;
        snprintf(err, errlen, "%s", bad ? bad : "out of memory");
        return -1;
    }
    array_run a = {s, reqs, n, 0};
    dy_sim_stream io = {.next = array_next, .sink = array_keep, .ctx = &a};
    return dy_sim_run_stream(s, &io, err, errlen);
}

/* ---------------------------------------------------------------- life cycle */

dy_sim_config dy_sim_config_default(void)
{
    dy_sim_config c = {0};
    c.block_size = 16;
    c.kv_block_bytes = 0;
    c.fingerprint = 1;
    c.router = dy_router_config_default();
    c.route = dy_route_config_default();
    c.max_queue = 1024;
    c.max_samples = 128; /* the wire's DY_WIRE_MAX_SAMPLES */
    c.stats_every_s = 0.1; /* the worker's STATS_EVERY_S */
    return c;
}

/* The initial deployment's pools (workers [0, n_active)) by role. */
static dy_pool_sizes initial_pools(const dy_sim_config *c)
{
    dy_pool_sizes p = {{0, 0, 0}};
    for (int i = 0; i < c->plan.n_active && i < c->n_workers; i++)
        p.n[c->workers[i].role]++;
    return p;
}

static const char *check_planner(const dy_sim_config *c)
{
    const dy_sim_planner *p = &c->plan;
    if (p->n_active < 1 || p->n_active > c->n_workers)
        return "planner: the initial deployment needs 1 to n_workers (the budget's) workers";
    dy_pool_sizes init = initial_pools(c);
    if (init.n[DY_POOL_AGG] > 0 ? init.n[DY_POOL_AGG] != p->n_active
                                : init.n[DY_POOL_PREFILL] < 1 || init.n[DY_POOL_DECODE] < 1)
        return "planner: the initial deployment is aggregated workers, or prefill + decode "
               "workers (at least one of each)";
    if (!(isfinite(p->switch_s) && p->switch_s >= 0))
        return "planner: switch_s must be >= 0";
    const dy_balance_hw *hw = &p->planner.hw;
    if (hw->units_per_worker < 1 || hw->max_units != c->n_workers * hw->units_per_worker)
        return "planner: the budget (hw.max_units) must be the slots' units: n_workers x "
               "units_per_worker";
    return NULL;
}

static const char *check_config(const dy_sim_config *c, const dy_step_costs *costs)
{
    if (!costs || !costs->step_seconds || !costs->transfer_seconds)
        return "the cost model needs step_seconds and transfer_seconds";
    if (!c->workers || c->n_workers < 1 || c->n_workers > DY_KV_INDEX_MAX_WORKERS)
        return "the deployment needs 1 to 1024 workers";
    if (c->block_size < 1 || c->block_size > 4096 || c->kv_block_bytes < 0 ||
        c->max_queue < 0 || c->max_samples < 1 || !(c->stats_every_s > 0) ||
        c->max_in_flight < 0)
        return "block_size, kv_block_bytes, max_queue, max_samples, stats_every_s or "
               "max_in_flight out of range";
    for (int i = 0; i < c->n_workers; i++) {
        const dy_sim_worker *w = &c->workers[i];
        if ((unsigned)w->role > DY_POOL_DECODE || w->kv_blocks < 2 || w->max_batch_tokens < 1 ||
            w->max_running < 1)
            return "a worker needs a role, at least 2 KV blocks, max_batch_tokens and max_running";
    }
    return c->plan.on ? check_planner(c) : NULL;
}

static bool worker_init(sim_worker *w, const dy_sim_worker *cfg, int block_size,
                        uint64_t fingerprint)
{
    *w = (sim_worker){.cfg = *cfg, .want_snapshot = true, .last_stats = -INFINITY};
    w->pool = dy_kv_pool_new_meta(cfg->kv_blocks, block_size, 1, 1);
    w->kv = w->pool ? dy_kv_cache_new(w->pool, fingerprint) : NULL;
    dy_sched_config sc = {cfg->max_batch_tokens, cfg->max_running, cfg->no_prefix_cache};
    w->sched = w->kv ? dy_sched_new(&sc, w->kv) : NULL;
    w->ev_cap = DY_KV_EVENT_LOG_CAP(cfg->kv_blocks);
    w->ev = malloc(sizeof *w->ev * (size_t)w->ev_cap);
    w->snap_h = malloc(sizeof *w->snap_h * (size_t)cfg->kv_blocks);
    w->snap_p = malloc(sizeof *w->snap_p * (size_t)cfg->kv_blocks);
    w->sampled = malloc(sizeof *w->sampled * (size_t)(cfg->max_running + 1));
    w->sampled_seqs = malloc(sizeof(dy_seq *) * (size_t)(cfg->max_running + 1));
    return w->sched && w->ev && w->snap_h && w->snap_p && w->sampled && w->sampled_seqs &&
           dy_kv_cache_enable_events(w->kv, true);
}

static void worker_free(sim_worker *w)
{
    dy_sched_free(w->sched);
    dy_kv_cache_free(w->kv);
    dy_kv_pool_free(w->pool);
    free(w->ev);
    free(w->snap_h);
    free(w->snap_p);
    free(w->sampled);
    free(w->sampled_seqs);
    free(w->inbox.m);
    free(w->outbox.m);
}

/* The slots past the initial deployment park; the planner starts from the initial pools. */
static int start_planner(dy_sim *s, const dy_sim_config *cfg, char *err, size_t errlen)
{
    const dy_pool_sizes init = initial_pools(cfg);
    const bool split = init.n[DY_POOL_PREFILL] > 0;
    if (dy_planner_init(&s->planner, &cfg->plan.planner, split, init.n[DY_POOL_PREFILL],
                        split ? init.n[DY_POOL_DECODE] : init.n[DY_POOL_AGG], err,
                        errlen) != 0)
        return -1;
    s->target = init;
    s->acts = calloc((size_t)cfg->n_workers * 2, sizeof *s->acts);
    if (!s->acts) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = cfg->plan.n_active; i < cfg->n_workers; i++) {
        s->slot[i].state = DY_SLOT_PARKED;
        set_view(s, i);
        dy_router_remove_worker(s->router, i);
    }
    return 0;
}

dy_sim *dy_sim_new(const dy_sim_config *cfg, const dy_step_costs *costs,
                   const dy_sim_observer *obs, char *err, size_t errlen)
{
    const char *bad = check_config(cfg, costs);
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return NULL;
    }
    dy_sim *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->cfg.router.block_size = cfg->block_size;
    s->costs = *costs;
    if (obs)
        s->obs = *obs;
    s->w = calloc((size_t)cfg->n_workers, sizeof *s->w);
    s->view = calloc((size_t)cfg->n_workers, sizeof *s->view);
    s->slot = calloc((size_t)cfg->n_workers, sizeof *s->slot);
    s->router = dy_router_new(&s->cfg.router, cfg->n_workers);
    bool ok = s->w && s->view && s->slot && s->router;
    for (int i = 0; ok && i < cfg->n_workers; i++) {
        ok = worker_init(&s->w[i], &cfg->workers[i], cfg->block_size, cfg->fingerprint);
        s->view[i] = (dy_place_worker){.alive = true, .pool = cfg->workers[i].role,
                                       .kv_blocks = cfg->workers[i].kv_blocks};
        s->slot[i] = (dy_plan_slot){.state = DY_SLOT_ACTIVE, .role = cfg->workers[i].role};
        ok = ok && dy_router_add_worker(s->router, i, !cfg->no_kv_events) == 0;
    }
    s->cfg.workers = NULL; /* borrowed only during dy_sim_new */
    if (!ok) {
        dy_sim_free(s);
        snprintf(err, errlen, "out of memory (or a bad router configuration)");
        return NULL;
    }
    if (cfg->plan.on && start_planner(s, cfg, err, errlen) != 0) {
        dy_sim_free(s);
        return NULL;
    }
    return s;
}

void dy_sim_free(dy_sim *s)
{
    if (!s)
        return;
    for (int i = 0; s->w && i < s->cfg.n_workers; i++)
        worker_free(&s->w[i]);
    free(s->w);
    free(s->view);
    dy_router_free(s->router);
    free(s->heap);
    for (size_t i = 0; i < s->n_rq; i++) {
        live_request *q = &s->rq[i];
        for (int k = 0; k < q->smp_cap; k++)
            free(q->smp[k].times);
        free(q->smp);
        free(q->prompt);
        free(q->hashes);
    }
    free(s->rq);
    free(s->rq_free.ids);
    free(s->fl);
    free(s->fl_free.ids);
    for (int i = 0; s->rec && i < s->n_rec; i++)
        free(s->rec[i].token_times);
    free(s->rec);
    free(s->first_record);
    free(s->slot);
    free(s->acts);
    free(s->dec);
    free(s->mv);
    free(s->win.ttft);
    free(s->win.tpot);
    free(s);
}

/* ---------------------------------------------------------------- results */

const dy_sim_record *dy_sim_records(const dy_sim *s, int *n)
{
    *n = s->n_rec;
    return s->rec;
}

dy_sim_totals dy_sim_get_totals(const dy_sim *s)
{
    return s->tot;
}

dy_sim_worker_totals dy_sim_get_worker_totals(const dy_sim *s, int worker)
{
    dy_sim_worker_totals none = {0};
    return worker >= 0 && worker < s->cfg.n_workers ? s->w[worker].tot : none;
}

const dy_sim_decision *dy_sim_decisions(const dy_sim *s, int *n)
{
    *n = (int)s->n_dec;
    return s->dec;
}

const dy_sim_move *dy_sim_moves(const dy_sim *s, int *n)
{
    *n = (int)s->n_mv;
    return s->mv;
}

const char *dy_sim_move_kind_name(dy_sim_move_kind k)
{
    static const char *const names[] = {"move", "ready", "parked", "drained"};
    return k >= DY_SIM_MOVE && k <= DY_SIM_DRAINED ? names[k] : "?";
}

/* One sample as the load generator would have measured it. */
static int add_result(dyb_stats *st, const dy_sim_record *r)
{
    const double ms = 1000.0;
    double *itl = r->n_tokens > 1 ? malloc(sizeof(double) * (size_t)(r->n_tokens - 1)) : NULL;
    if (r->n_tokens > 1 && !itl)
        return -1;
    for (int k = 1; k < r->n_tokens; k++)
        itl[k - 1] = (r->token_times[k] - r->token_times[k - 1]) * ms;
    dyb_result res = {
        .ok = r->ok, .index = r->request, .prompt_tokens = r->prompt_tokens,
        .output_tokens = r->n_tokens,
        .requested = r->n_tokens, /* a simulated sample always runs to its length */
        .send_ms = r->arrival * ms,
        .ttft_ms = r->ok ? (r->first_token - r->arrival) * ms : 0,
        .e2e_ms = r->ok ? (r->done - r->arrival) * ms : 0,
        .itl = itl, .n_itl = r->n_tokens > 1 ? (size_t)(r->n_tokens - 1) : 0,
        .placed = r->ok, .kv_moved = r->ok && r->kv_bytes > 0,
        .kv_bytes = (double)r->kv_bytes, .kv_ms = r->kv_seconds * ms,
        .error = (char *)r->error, /* borrowed: not freed below */
    };
    int rc = dyb_stats_add(st, &res);
    free(itl);
    return rc;
}

int dy_sim_bench_stats(const dy_sim *s, dyb_stats *out)
{
    dyb_stats_init(out);
    for (int i = 0; i < s->n_rec; i++)
        if (add_result(out, &s->rec[i]) != 0)
            return -1;
    return 0;
}

int dy_sim_summarize(const dy_sim *s, const dyb_slo *slo, int cores, dyb_summary *out)
{
    dyb_stats st;
    int rc = dy_sim_bench_stats(s, &st);
    if (rc == 0)
        rc = dyb_stats_summarize(&st, s->tot.duration_s, slo, cores, out);
    dyb_stats_free(&st);
    return rc;
}
