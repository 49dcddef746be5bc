/* test_sim.c — the simulator (src/sim/sim.h): hand-computed step times for aggregated 1 and 2
 * workers, disaggregated 1+1, two samples forking one prompt, and a cap on requests in flight
 * (bench's closed loop); the same run twice gives identical records; every placement the simulator makes equals dy_place called directly on a
 * router fed the same inputs (and a router fed differently is caught); a shared prompt
 * prefix is found in the cache; the observer hears of each sample's end when it ends. */
#include "testutil.h"
#include "kv/block_hash.h"
#include "sim/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

/* The cost model of the hand computations is testutil.h's tu_sim_costs: 1 ms per step, 0.01 ms
 * per prompt token, 0.1 ms per decoding sequence; every KV transfer 0.5 ms. */

/* Times are sums of a few doubles: equal to the hand result up to rounding. */
#define assert_ms(actual_s, expect_ms) assert_true(fabs((actual_s) * 1e3 - (expect_ms)) < 1e-9)

static void fill_prompt(int32_t *p, int n, int32_t first)
{
    for (int i = 0; i < n; i++)
        p[i] = first + i;
}

static dy_sim_worker worker_of(dy_route_pool role)
{
    return (dy_sim_worker){.role = role, .kv_blocks = 64, .max_batch_tokens = 32,
                           .max_running = 8};
}

static dy_sim_config config_of(const dy_sim_worker *w, int n)
{
    dy_sim_config c = dy_sim_config_default();
    c.workers = w;
    c.n_workers = n;
    c.block_size = 16;
    c.kv_block_bytes = 1000;
    return c;
}

static dy_sim *run(const dy_sim_config *c, const dy_sim_observer *obs, const dy_sim_request *r,
                   int n)
{
    char err[256];
    dy_sim *s = dy_sim_new(c, &tu_sim_costs, obs, err, sizeof err);
    assert_non_null(s);
    int rc = dy_sim_run(s, r, n, err, sizeof err);
    if (rc != 0)
        fail_msg("dy_sim_run: %s", err);
    return s;
}

static const dy_sim_record *rec(const dy_sim *s, int i)
{
    int n;
    const dy_sim_record *r = dy_sim_records(s, &n);
    assert_true(i < n);
    return &r[i];
}

/* TTFT, TPOT and E2E of one record, in ms, against the hand computation. */
static void assert_latency(const dy_sim_record *r, double ttft, double tpot, double e2e)
{
    assert_true(r->ok);
    assert_ms(r->first_token - r->arrival, ttft);
    assert_ms(r->done - r->arrival, e2e);
    assert_ms((r->done - r->first_token) / (r->n_tokens - 1), tpot);
}

/* Two requests at t = 0: R0 a 40-token prompt, 3 output tokens; R1 20 tokens, 2 outputs. */
static int32_t p40[40], p20[20];

static void two_requests(dy_sim_request *r)
{
    fill_prompt(p40, 40, 100);
    fill_prompt(p20, 20, 500);
    r[0] = (dy_sim_request){.arrival = 0, .prompt = p40, .n_prompt = 40, .max_tokens = 3,
                            .n_samples = 1};
    r[1] = (dy_sim_request){.arrival = 0, .prompt = p20, .n_prompt = 20, .max_tokens = 2,
                            .n_samples = 1};
}

/* ---------------------------------------------------------------- (a) hand-computed times */

static void test_aggregated_one_worker(void **st)
{
    (void)st;
    dy_sim_worker w[1] = {worker_of(DY_POOL_AGG)};
    dy_sim_config c = config_of(w, 1);
    dy_sim_request r[2];
    two_requests(r);
    dy_sim *s = run(&c, NULL, r, 2);
    /* Both arrive before the worker's first step (max_batch_tokens 32):
     *   step 1  R0 prompt [0, 32)                        1 + 0.32       = 1.32 → 1.32
     *   step 2  R0 prompt [32, 40) + R1 prompt [0, 20)  1 + 0.28       = 1.28 → 2.60  first tokens
     *   step 3  R0, R1 decode                            1 + 0.2        = 1.2  → 3.80  R1 done
     *   step 4  R0 decode                                1 + 0.1        = 1.1  → 4.90  R0 done
     * R0: TTFT 2.60, TPOT (4.90 − 2.60) / 2 = 1.15, E2E 4.90; R1: 2.60, 1.2, 3.80. */
    assert_latency(rec(s, 0), 2.60, 1.15, 4.90);
    assert_latency(rec(s, 1), 2.60, 1.20, 3.80);
    assert_ms(rec(s, 0)->token_times[1], 3.80);
    dy_sim_totals t = dy_sim_get_totals(s);
    assert_int_equal(t.steps, 4);
    assert_int_equal(t.output_tokens, 5);
    assert_int_equal(t.preemptions, 0);
    assert_ms(t.duration_s, 4.90);
    dy_sim_worker_totals wt = dy_sim_get_worker_totals(s, 0);
    assert_int_equal(wt.prefill_tokens, 60);
    assert_int_equal(wt.decode_tokens, 3);
    /* the same figures through dyad bench's statistics */
    dyb_summary sum;
    dyb_slo slo = {.ttft_ms = 2.7};
    assert_int_equal(dy_sim_summarize(s, &slo, 1, &sum), 0);
    assert_int_equal(sum.completed, 2);
    assert_int_equal(sum.output_tokens, 5);
    assert_true(fabs(sum.ttft.p50 - 2.60) < 1e-9);
    assert_true(fabs(sum.e2e.max - 4.90) < 1e-9);
    assert_true(fabs(sum.tpot.mean - (1.15 + 1.2) / 2) < 1e-9);
    assert_int_equal(sum.itl.n, 3); /* R0: 2 gaps, R1: 1 */
    assert_true(fabs(sum.output_tok_per_s - 5 / 4.90e-3) < 1e-6);
    assert_int_equal(sum.good, 2);
    dy_sim_free(s);
}

/* The observer hears of every sample's end, in the order they end, at the simulated time
 * they end (what a progress line counts): a request over the context is refused at its
 * arrival, then R1 ends at 3.80 and R0 at 4.90 as above. */
typedef struct {
    int n, request[4];
    bool ok[4];
    double now[4], done[4];
} ends;

static void on_end(void *ctx, const dy_sim_record *r, double now)
{
    ends *e = ctx;
    assert_true(e->n < 4);
    e->request[e->n] = r->request;
    e->ok[e->n] = r->ok;
    e->done[e->n] = r->done;
    e->now[e->n++] = now;
}

static void test_sample_end_observer(void **st)
{
    (void)st;
    dy_sim_worker w[1] = {worker_of(DY_POOL_AGG)};
    dy_sim_config c = config_of(w, 1);
    c.ctx_len = 50;
    dy_sim_request r[3];
    two_requests(r);
    static int32_t p60[60];
    fill_prompt(p60, 60, 900);
    r[2] = (dy_sim_request){.arrival = 0, .prompt = p60, .n_prompt = 60, .max_tokens = 2,
                            .n_samples = 1};
    ends e = {0};
    dy_sim_observer obs = {.ctx = &e, .on_sample_end = on_end};
    dy_sim *s = run(&c, &obs, r, 3);
    assert_int_equal(e.n, 3);
    assert_int_equal(e.request[0], 2);
    assert_false(e.ok[0]);
    assert_ms(e.now[0], 0);
    assert_int_equal(e.request[1], 1);
    assert_true(e.ok[1]);
    assert_ms(e.now[1], 3.80);
    assert_ms(e.done[1], 3.80);
    assert_int_equal(e.request[2], 0);
    assert_ms(e.now[2], 4.90);
    assert_ms(e.done[2], 4.90);
    /* the run itself is the one without an observer */
    assert_latency(rec(s, 0), 2.60, 1.15, 4.90);
    assert_latency(rec(s, 1), 2.60, 1.20, 3.80);
    dy_sim_free(s);
}

/* bench's closed loop with one client: R1 is sent when R0 ends. Alone on the worker:
 *   R0  [0, 32) 1.32 → 1.32; [32, 40) 1.08 → 2.40 first token; decode 1.1 → 3.50, → 4.60 done
 *   R1  sent at 4.60: prompt 1.2 → 5.80 first token; decode 1.1 → 6.90 done
 * A cap of two (not reached) changes nothing. */
static void test_max_in_flight(void **st)
{
    (void)st;
    dy_sim_worker w[1] = {worker_of(DY_POOL_AGG)};
    dy_sim_config c = config_of(w, 1);
    c.max_in_flight = 1;
    dy_sim_request r[2];
    two_requests(r);
    dy_sim *s = run(&c, NULL, r, 2);
    assert_latency(rec(s, 0), 2.40, 1.10, 4.60);
    assert_ms(rec(s, 1)->arrival, 4.60);
    assert_latency(rec(s, 1), 1.20, 1.10, 2.30);
    assert_ms(dy_sim_get_totals(s).duration_s, 6.90);
    dy_sim_free(s);

    c.max_in_flight = 2;
    s = run(&c, NULL, r, 2);
    assert_latency(rec(s, 0), 2.60, 1.15, 4.90);
    assert_latency(rec(s, 1), 2.60, 1.20, 3.80);
    dy_sim_free(s);
}

static void test_aggregated_two_workers(void **st)
{
    (void)st;
    dy_sim_worker w[2] = {worker_of(DY_POOL_AGG), worker_of(DY_POOL_AGG)};
    dy_sim_config c = config_of(w, 2);
    dy_sim_request r[2];
    two_requests(r);
    dy_sim *s = run(&c, NULL, r, 2);
    /* kv-aware: R0 ties on two idle workers; R1 then sees R0's prompt blocks as load where R0
     * went and takes the other. Each runs alone:
     *   R0: 32 tokens 1.32, 8 tokens 1.08 → 2.40 first; decodes 1.1 → 3.50, 4.60
     *   R1: 20 tokens 1.20 → 1.20 first; decode 1.1 → 2.30 */
    assert_int_not_equal(rec(s, 0)->worker, rec(s, 1)->worker);
    assert_latency(rec(s, 0), 2.40, 1.10, 4.60);
    assert_latency(rec(s, 1), 1.20, 1.10, 2.30);
    assert_int_equal(dy_sim_get_totals(s).steps, 6);
    dy_sim_free(s);
}

static void test_disaggregated_one_plus_one(void **st)
{
    (void)st;
    dy_sim_worker w[2] = {worker_of(DY_POOL_PREFILL), worker_of(DY_POOL_DECODE)};
    dy_sim_config c = config_of(w, 2);
    dy_sim_request r[2];
    two_requests(r);
    dy_sim *s = run(&c, NULL, r, 2);
    /* Conditional disaggregation (disagg_min_tokens 32): R0 has 39 uncached tokens to
     * compute, so it goes to the prefill worker 0; R1's 19 stay on the decode worker 1.
     *   0.00  W1 reads both: R0 sets aside blocks for [0, 39) (3 blocks), R1 queues;
     *         W1 steps R1's prompt (20 tokens)             1.20 → 1.20  R1 first
     *   1.20  W1's flush carries the KV_ALLOC (written before the step): PREFILL to W0;
     *         W1 decodes R1                                 1.10 → 2.30  R1 done
     *         W0: R0 positions [0, 32)                      1.32 → 2.52
     *         W0: [32, 39)                                  1.07 → 3.59
     *   3.59  W0 copies 3 blocks (0.5 ms, waiting for the copy) → 4.09: KV_READY
     *   4.09  W1: R0's last prompt token                    1.01 → 5.10  R0 first
     *         two decodes                                   1.10 → 6.20, 7.30
     * R0: TTFT 5.10, TPOT 1.1, E2E 7.30; R1: TTFT 1.20, TPOT 1.1, E2E 2.30. */
    assert_int_equal(rec(s, 0)->prefill_worker, 0);
    assert_int_equal(rec(s, 0)->worker, 1);
    assert_int_equal(rec(s, 1)->prefill_worker, 1);
    assert_latency(rec(s, 0), 5.10, 1.10, 7.30);
    assert_latency(rec(s, 1), 1.20, 1.10, 2.30);
    assert_int_equal(rec(s, 0)->kv_bytes, 3000);
    assert_ms(rec(s, 0)->kv_seconds, 0.5);
    assert_int_equal(rec(s, 1)->kv_bytes, 0);
    dy_sim_totals t = dy_sim_get_totals(s);
    assert_int_equal(t.transfers, 1);
    assert_int_equal(t.kv_bytes, 3000);
    assert_int_equal(dy_sim_get_worker_totals(s, 0).prefill_tokens, 39);
    assert_int_equal(dy_sim_get_worker_totals(s, 1).prefill_tokens, 21);
    dy_sim_free(s);

    /* With the copy off the prefill worker's critical path nothing changes for one
     * transfer: R0's KV is ready at the same 4.09. */
    c.xfer_async = true;
    s = run(&c, NULL, r, 2);
    assert_latency(rec(s, 0), 5.10, 1.10, 7.30);
    dy_sim_free(s);
}

/* Two samples of one prompt go together and share its computation (sched.h's forks). */
static void test_samples_fork(void **st)
{
    (void)st;
    dy_sim_worker w[1] = {worker_of(DY_POOL_AGG)};
    dy_sim_config c = config_of(w, 1);
    dy_sim_request r[1] = {{.arrival = 0, .prompt = p20, .n_prompt = 20, .max_tokens = 2,
                            .n_samples = 2}};
    fill_prompt(p20, 20, 500);
    dy_sim *s = run(&c, NULL, r, 1);
    /*   step 1  the leader alone: positions [0, 19)               1.19 → 1.19
     *   step 2  the sample forks; each computes position 19 itself 1.02 → 2.21  first tokens
     *   step 3  two decodes                                         1.2  → 3.41  both done */
    int n;
    dy_sim_records(s, &n);
    assert_int_equal(n, 2);
    assert_int_equal(rec(s, 1)->sample, 1);
    assert_int_equal(rec(s, 0)->worker, rec(s, 1)->worker);
    assert_latency(rec(s, 0), 2.21, 1.2, 3.41);
    assert_latency(rec(s, 1), 2.21, 1.2, 3.41);
    assert_int_equal(dy_sim_get_worker_totals(s, 0).prefill_tokens, 21);
    dyb_summary sum;
    assert_int_equal(dy_sim_summarize(s, NULL, 1, &sum), 0);
    assert_int_equal(sum.completed, 2);
    dy_sim_free(s);
}

/* ---------------------------------------------------------------- a busier workload */

#define N_BUSY 60

typedef struct {
    int32_t tokens[N_BUSY][160];
    dy_sim_request req[N_BUSY];
} busy_workload;

/* Prefix groups (a shared system prompt per group), varied lengths, some with 2 samples,
 * arrivals closer than the service time, small KV pools: batching, chunking, prefix hits,
 * preemption and forks all happen. */
static void make_busy(busy_workload *wl)
{
    uint64_t rng = 12345;
    double t = 0;
    for (int i = 0; i < N_BUSY; i++) {
        int group = (int)(tu_rng_u64(&rng) % 4);
        int n = 40 + (int)(tu_rng_u64(&rng) % 120);
        for (int k = 0; k < n; k++)
            wl->tokens[i][k] = k < 32 ? 1000 * (group + 1) + k : (int32_t)(tu_rng_u64(&rng) % 30000);
        t += 0.0005 * (double)(tu_rng_u64(&rng) % 4);
        wl->req[i] = (dy_sim_request){.arrival = t, .prompt = wl->tokens[i], .n_prompt = n,
                                      .max_tokens = 4 + (int)(tu_rng_u64(&rng) % 12),
                                      .n_samples = i % 5 == 0 ? 2 : 1};
    }
}

static dy_sim_config busy_config(dy_sim_worker *w, bool disagg)
{
    for (int i = 0; i < 4; i++) {
        w[i] = worker_of(disagg ? (i < 2 ? DY_POOL_PREFILL : DY_POOL_DECODE) : DY_POOL_AGG);
        w[i].kv_blocks = 40;
        w[i].max_running = 6;
    }
    dy_sim_config c = config_of(w, 4);
    c.stats_every_s = 0.002;
    c.max_queue = 40;
    return c;
}

/* ---------------------------------------------------------------- (b) determinism */

static void assert_same_records(const dy_sim *a, const dy_sim *b)
{
    int na, nb;
    const dy_sim_record *ra = dy_sim_records(a, &na), *rb = dy_sim_records(b, &nb);
    assert_int_equal(na, nb);
    for (int i = 0; i < na; i++) {
        const dy_sim_record *x = &ra[i], *y = &rb[i];
        assert_int_equal(x->ok, y->ok);
        assert_int_equal(x->worker, y->worker);
        assert_int_equal(x->prefill_worker, y->prefill_worker);
        assert_int_equal(x->overlap_blocks, y->overlap_blocks);
        assert_int_equal(x->cached_tokens, y->cached_tokens);
        assert_int_equal(x->preemptions, y->preemptions);
        assert_int_equal(x->kv_bytes, y->kv_bytes);
        assert_int_equal(x->n_tokens, y->n_tokens);
        assert_memory_equal(&x->first_token, &y->first_token, sizeof(double));
        assert_memory_equal(&x->done, &y->done, sizeof(double));
        if (x->n_tokens)
            assert_memory_equal(x->token_times, y->token_times, sizeof(double) * x->n_tokens);
    }
    dy_sim_totals ta = dy_sim_get_totals(a), tb = dy_sim_get_totals(b);
    assert_memory_equal(&ta, &tb, sizeof ta);
}

static void test_deterministic(void **st)
{
    (void)st;
    static busy_workload wl;
    make_busy(&wl);
    for (int disagg = 0; disagg < 2; disagg++) {
        dy_sim_worker w[4];
        dy_sim_config c = busy_config(w, disagg);
        dy_sim *a = run(&c, NULL, wl.req, N_BUSY), *b = run(&c, NULL, wl.req, N_BUSY);
        assert_same_records(a, b);
        /* the run did exercise the policies it claims to be deterministic over */
        dy_sim_totals t = dy_sim_get_totals(a);
        assert_true(t.steps > 50);
        int n;
        const dy_sim_record *r = dy_sim_records(a, &n);
        long cached = 0;
        for (int i = 0; i < n; i++)
            cached += r[i].cached_tokens;
        assert_true(cached > 0);
        if (disagg) /* fewer generating workers: the queue fills and pools run short */
            assert_true(t.transfers > 0 && t.local_prefills > 0 && t.preemptions > 0 &&
                        t.refused > 0);
        dy_sim_free(a);
        dy_sim_free(b);
    }
}

/* ---------------------------------------------------------------- (c) live = simulated */

/* A second router, fed exactly the inputs the simulated workers give the simulator's router,
 * takes every placement decision itself the way the frontend does (fleet_flights.c: the view
 * built from the deployment, the prompt's hashes from the model's fingerprint, dy_place) and
 * compares it with the simulator's. */
typedef struct {
    const dy_sim_config *cfg;
    const dy_sim_request *req;
    dy_router *router;
    dy_place_worker view[4];
    dy_router_ticket tickets[4 * N_BUSY];
    int request_of[4 * N_BUSY]; /* per placement */
    uint64_t hashes[N_BUSY][16];
    long placements, prefill_picks, admits, mismatches, event_batches, loads;
} shadow;

static void sh_events(void *ctx, int worker, uint64_t seq, const dy_kv_event *ev, int n)
{
    shadow *sh = ctx;
    sh->event_batches++;
    assert_int_equal(dy_kv_index_apply(dy_router_index(sh->router), worker, seq, ev, n),
                     DY_KV_INDEX_OK);
}

static void sh_snapshot(void *ctx, int worker, uint64_t seq, const uint64_t *h, const uint64_t *p,
                        int n)
{
    shadow *sh = ctx;
    assert_int_equal(dy_kv_index_resync(dy_router_index(sh->router), worker, seq, h, p, NULL, n), 0);
}

static void sh_load(void *ctx, int worker, const dy_router_load *load)
{
    shadow *sh = ctx;
    sh->loads++;
    dy_router_report_load(sh->router, worker, load);
}

static void sh_admit(void *ctx, int request, int waiting, dy_admit verdict)
{
    shadow *sh = ctx;
    sh->admits++;
    if (dy_place_admit(waiting, sh->req[request].n_samples, sh->cfg->max_queue) != verdict)
        sh->mismatches++;
}

static dy_place_view sh_view(shadow *sh)
{
    return (dy_place_view){.workers = sh->view, .n_workers = sh->cfg->n_workers,
                           .block_size = sh->cfg->block_size, .max_samples = sh->cfg->max_samples,
                           .route = sh->cfg->route, .router = sh->router};
}

static dy_place_request sh_request(shadow *sh, int request, int n_samples)
{
    const dy_sim_request *r = &sh->req[request];
    int nb = dy_block_hashes(sh->cfg->fingerprint, r->prompt, r->n_prompt, sh->cfg->block_size,
                             sh->hashes[request]);
    return (dy_place_request){.prompt_tokens = r->n_prompt, .hashes = sh->hashes[request],
                              .n_blocks = nb, .max_tokens = r->max_tokens,
                              .n_samples = n_samples};
}

static void sh_place(void *ctx, int placement, int request, int first, int n_samples, double now,
                     const dy_placement *p)
{
    shadow *sh = ctx;
    assert_true(placement < 4 * N_BUSY);
    dy_place_view v = sh_view(sh);
    dy_place_request pr = sh_request(sh, request, n_samples);
    dy_placement live = dy_place(&v, &pr, now, &sh->tickets[placement]);
    sh->request_of[placement] = request;
    assert_true(first >= 0 && first < sh->req[request].n_samples);
    sh->placements++;
    if (live.gen != p->gen || live.prefill != p->prefill ||
        live.overlap_blocks != p->overlap_blocks || live.samples != p->samples)
        sh->mismatches++;
}

static void sh_prefill_pick(void *ctx, int placement, int planned, double now, int pick)
{
    shadow *sh = ctx;
    dy_place_view v = sh_view(sh);
    dy_place_request pr = sh_request(sh, sh->request_of[placement], 1);
    sh->prefill_picks++;
    int live = dy_place_prefill(&v, &pr, planned, now);
    if (live != pick)
        sh->mismatches++;
}

static void sh_ticket(void *ctx, int placement, bool finished)
{
    shadow *sh = ctx;
    if (finished)
        dy_router_on_finished(sh->router, &sh->tickets[placement]);
    else
        dy_router_on_first_token(sh->router, &sh->tickets[placement]);
}

static void shadow_init(shadow *sh, const dy_sim_config *c, const dy_router_config *rc,
                        const dy_sim_request *req)
{
    memset(sh, 0, sizeof *sh);
    sh->cfg = c;
    sh->req = req;
    dy_router_config cfg = *rc;
    cfg.block_size = c->block_size;
    sh->router = dy_router_new(&cfg, c->n_workers);
    assert_non_null(sh->router);
    for (int i = 0; i < c->n_workers; i++) {
        dy_router_add_worker(sh->router, i, !c->no_kv_events);
        sh->view[i] = (dy_place_worker){.alive = true, .pool = c->workers[i].role,
                                        .kv_blocks = c->workers[i].kv_blocks};
    }
}

static dy_sim_observer shadow_observer(shadow *sh)
{
    return (dy_sim_observer){.ctx = sh, .on_kv_events = sh_events,
                             .on_kv_snapshot = sh_snapshot, .on_load = sh_load,
                             .on_admit = sh_admit, .on_place = sh_place,
                             .on_prefill_pick = sh_prefill_pick, .on_ticket = sh_ticket};
}

static void test_live_equals_simulated(void **st)
{
    (void)st;
    static busy_workload wl;
    make_busy(&wl);
    for (int variant = 0; variant < 3; variant++) {
        const bool disagg = variant == 1;
        dy_sim_worker w[4];
        dy_sim_config c = busy_config(w, disagg);
        c.no_kv_events = variant == 2; /* the router predicts what it sent where */
        static shadow sh;
        shadow_init(&sh, &c, &c.router, wl.req);
        dy_sim_observer obs = shadow_observer(&sh);
        dy_sim *s = run(&c, &obs, wl.req, N_BUSY);
        assert_true(sh.placements >= N_BUSY - dy_sim_get_totals(s).refused);
        assert_int_equal(sh.admits, N_BUSY);
        assert_true(sh.loads > N_BUSY); /* the router was fed */
        assert_true(c.no_kv_events ? sh.event_batches == 0 : sh.event_batches > N_BUSY);
        if (disagg)
            assert_true(sh.prefill_picks > 0);
        assert_int_equal(sh.mismatches, 0);
        dy_sim_free(s);
        dy_router_free(sh.router);

        /* The comparison has teeth: a live router with another weight of prefill work
         * against decode load decides differently somewhere on the same inputs. */
        dy_router_config other = c.router;
        other.overlap_weight = 4.0;
        shadow_init(&sh, &c, &other, wl.req);
        obs = shadow_observer(&sh);
        s = run(&c, &obs, wl.req, N_BUSY);
        assert_true(sh.mismatches > 0);
        dy_sim_free(s);
        dy_router_free(sh.router);
    }
}

/* ---------------------------------------------------------------- (d) prefix sharing */

static void test_prefix_sharing(void **st)
{
    (void)st;
    dy_sim_worker w[2] = {worker_of(DY_POOL_AGG), worker_of(DY_POOL_AGG)};
    dy_sim_config c = config_of(w, 2);
    static int32_t a[64], b[64];
    fill_prompt(a, 64, 100);
    memcpy(b, a, sizeof b);
    fill_prompt(b + 48, 16, 9000); /* the same first 48 tokens (3 blocks), then different */
    dy_sim_request r[2] = {
        {.arrival = 0, .prompt = a, .n_prompt = 64, .max_tokens = 2, .n_samples = 1},
        {.arrival = 1.0, .prompt = b, .n_prompt = 64, .max_tokens = 2, .n_samples = 1},
    };
    dy_sim *s = run(&c, NULL, r, 2);
    /* R0 is long done when R1 comes: its published blocks are in the router's index, so the
     * kv-aware router sends R1 where they are, and that worker's cache hands them over. */
    const dy_sim_record *r0 = rec(s, 0), *r1 = rec(s, 1);
    assert_int_equal(r0->overlap_blocks, 0);
    assert_int_equal(r1->worker, r0->worker);
    assert_int_equal(r1->overlap_blocks, 3);
    assert_int_equal(r1->cached_tokens, 48);
    assert_int_equal(dy_sim_get_worker_totals(s, r0->worker).prefill_tokens, 64 + 16);
    /* R1's prompt: 16 tokens in one step (1.16 ms) instead of 64 in two (1.32 + 1.32) */
    assert_ms(r1->first_token - r1->arrival, 1.16);
    dy_sim_free(s);

    /* Without the prefix cache the same prompt is computed in full. */
    w[0].no_prefix_cache = w[1].no_prefix_cache = true;
    s = run(&c, NULL, r, 2);
    assert_int_equal(rec(s, 1)->cached_tokens, 0);
    assert_ms(rec(s, 1)->first_token - rec(s, 1)->arrival, 2.64);
    dy_sim_free(s);
}

/* ---------------------------------------------------------------- configuration */

static void test_bad_config(void **st)
{
    (void)st;
    char err[256];
    dy_sim_worker w[1] = {worker_of(DY_POOL_AGG)};
    dy_sim_config c = config_of(w, 1);
    c.n_workers = 0;
    assert_null(dy_sim_new(&c, &tu_sim_costs, NULL, err, sizeof err));
    c.n_workers = 1;
    w[0].kv_blocks = 1;
    assert_null(dy_sim_new(&c, &tu_sim_costs, NULL, err, sizeof err));
    w[0].kv_blocks = 64;
    dy_sim *s = dy_sim_new(&c, &tu_sim_costs, NULL, err, sizeof err);
    assert_non_null(s);
    dy_sim_request r[2];
    two_requests(r);
    r[1].arrival = -1; /* out of order */
    assert_int_equal(dy_sim_run(s, r, 2, err, sizeof err), -1);
    dy_sim_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aggregated_one_worker),
        cmocka_unit_test(test_max_in_flight),
        cmocka_unit_test(test_aggregated_two_workers),
        cmocka_unit_test(test_disaggregated_one_plus_one),
        cmocka_unit_test(test_samples_fork),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_live_equals_simulated),
        cmocka_unit_test(test_prefix_sharing),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_sample_end_observer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
