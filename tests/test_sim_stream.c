/* test_sim_stream.c — the simulator's streamed run (sim.h's dy_sim_run_stream): its records are
 * dy_sim_run's, field for field, on busy aggregated and disaggregated deployments (prompts
 * made one at a time in a buffer the source overwrites); the requests it holds at once are
 * bounded by the requests in flight, not by the workload's length; a failing source or sink,
 * or arrivals out of order, stop the run with a message. */
#include "testutil.h"
#include "sim/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the workload */


#define MAX_PROMPT 200

/* Request i of a workload of prefix groups (a shared 32-token system prompt per group),
 * varied lengths, every fifth with 2 samples, `gap_ms` apart on average: a pure function of
 * i, written into the caller's buffer. */
typedef struct {
    int n;           /* requests */
    double gap_ms;
    int32_t buf[MAX_PROMPT];
} workload;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static dy_sim_request make_request(const workload *w, int i, int32_t *buf)
{
    uint64_t h = mix((uint64_t)i + 1);
    int group = (int)(h % 4), n = 40 + (int)((h >> 8) % 140);
    for (int k = 0; k < n; k++)
        buf[k] = k < 32 ? 1000 * (group + 1) + k : (int32_t)(mix(h + (uint64_t)k) % 30000);
    return (dy_sim_request){.arrival = i * w->gap_ms * 1e-3, .prompt = buf, .n_prompt = n,
                            .max_tokens = 4 + (int)((h >> 16) % 12),
                            .n_samples = i % 5 == 0 ? 2 : 1};
}

/* The source: request after request in the one buffer, so a simulator that read a prompt
 * after the next call would read another request's tokens. */
typedef struct {
    workload *w;
    int next;
    int fail_at;                 /* the source fails at this request (-1: never) */
    dy_sim_record *rec;          /* the sink's copies, by request and sample (2 per request) */
    double (*times)[16];
    int n_sunk, sink_fail_at;    /* records received; the sink fails at this one (-1: never) */
    bool lazy;                   /* next gives no tokens: the prompt callback does, later */
    int n_prompts;               /* prompts the simulator asked for */
} stream_ctx;

static int next_request(void *ctx, dy_sim_request *out)
{
    stream_ctx *c = ctx;
    if (c->next == c->fail_at)
        return -1;
    if (c->next >= c->w->n)
        return 0;
    memset(c->w->buf, 0xff, sizeof c->w->buf);
    *out = make_request(c->w, c->next++, c->w->buf);
    if (c->lazy)
        out->prompt = NULL;
    return 1;
}

static bool make_prompt(void *ctx, int request, int32_t *out)
{
    stream_ctx *c = ctx;
    int32_t buf[MAX_PROMPT];
    dy_sim_request r = make_request(c->w, request, buf);
    memcpy(out, buf, sizeof *buf * (size_t)r.n_prompt);
    c->n_prompts++;
    return true;
}

static bool keep_record(void *ctx, const dy_sim_record *r)
{
    stream_ctx *c = ctx;
    if (c->n_sunk++ == c->sink_fail_at)
        return false;
    if (!c->rec)
        return true;
    int k = 2 * r->request + r->sample;
    assert_true(r->n_tokens <= 16);
    c->rec[k] = *r;
    memcpy(c->times[k], r->token_times, sizeof(double) * (size_t)r->n_tokens);
    c->rec[k].token_times = c->times[k];
    return true;
}

static dy_sim_config config_of(dy_sim_worker *w, int mode)
{
    for (int i = 0; i < 4; i++) {
        w[i] = (dy_sim_worker){.role = mode == 0 ? DY_POOL_AGG
                                     : i < 2     ? DY_POOL_PREFILL
                                                 : DY_POOL_DECODE,
                               .kv_blocks = 40, .max_batch_tokens = 32, .max_running = 6};
    }
    dy_sim_config c = dy_sim_config_default();
    c.workers = w;
    c.n_workers = 4;
    c.block_size = 16;
    c.kv_block_bytes = 1000;
    c.stats_every_s = 0.002;
    c.max_queue = 40;
    c.xfer_async = mode == 2;
    return c;
}

/* ---------------------------------------------------------------- streamed = dy_sim_run */

static void assert_same_record(const dy_sim_record *x, const dy_sim_record *y)
{
    assert_int_equal(x->request, y->request);
    assert_int_equal(x->sample, y->sample);
    assert_int_equal(x->ok, y->ok);
    assert_true(x->error == y->error || (x->error && y->error && !strcmp(x->error, y->error)));
    assert_memory_equal(&x->arrival, &y->arrival, sizeof(double));
    assert_memory_equal(&x->first_token, &y->first_token, sizeof(double));
    assert_memory_equal(&x->done, &y->done, sizeof(double));
    assert_int_equal(x->n_tokens, y->n_tokens);
    if (x->n_tokens)
        assert_memory_equal(x->token_times, y->token_times, sizeof(double) * x->n_tokens);
    assert_int_equal(x->prompt_tokens, y->prompt_tokens);
    assert_int_equal(x->cached_tokens, y->cached_tokens);
    assert_int_equal(x->worker, y->worker);
    assert_int_equal(x->prefill_worker, y->prefill_worker);
    assert_int_equal(x->overlap_blocks, y->overlap_blocks);
    assert_int_equal(x->preemptions, y->preemptions);
    assert_int_equal(x->kv_bytes, y->kv_bytes);
    assert_memory_equal(&x->kv_seconds, &y->kv_seconds, sizeof(double));
}

/* Aggregated, disaggregated, disaggregated with asynchronous transfers; open loop and a cap
 * on requests in flight; prompts given with each request or asked for once it is admitted. */
static void test_stream_equals_run(void **st)
{
    (void)st;
    enum { N = 80 };
    static workload wl = {.n = N, .gap_ms = 1.0};
    static int32_t prompts[N][MAX_PROMPT];
    static dy_sim_request reqs[N];
    static dy_sim_record got[2 * N];
    static double times[2 * N][16];
    for (int i = 0; i < N; i++)
        reqs[i] = make_request(&wl, i, prompts[i]);
    long refused = 0;
    for (int mode = 0; mode < 3; mode++)
        for (int cap = 0; cap <= 3; cap += 3)
            for (int lazy = 0; lazy < 2; lazy++) {
                dy_sim_worker w[4];
                dy_sim_config c = config_of(w, mode);
                c.max_in_flight = cap;
                char err[256];
                dy_sim *a = dy_sim_new(&c, &tu_sim_costs, NULL, err, sizeof err);
                dy_sim *b = dy_sim_new(&c, &tu_sim_costs, NULL, err, sizeof err);
                assert_int_equal(dy_sim_run(a, reqs, N, err, sizeof err), 0);
                memset(got, 0, sizeof got);
                stream_ctx sc = {.w = &wl, .fail_at = -1, .rec = got, .times = times,
                                 .sink_fail_at = -1, .lazy = lazy};
                dy_sim_stream io = {.next = next_request, .sink = keep_record,
                                    .prompt = lazy ? make_prompt : NULL, .ctx = &sc};
                if (dy_sim_run_stream(b, &io, err, sizeof err) != 0)
                    fail_msg("dy_sim_run_stream: %s", err);
                int n;
                const dy_sim_record *r = dy_sim_records(a, &n);
                assert_int_equal(sc.n_sunk, n);
                for (int i = 0, k = 0; i < N; i++)
                    for (int j = 0; j < reqs[i].n_samples; j++, k++)
                        assert_same_record(&r[k], &got[2 * i + j]);
                dy_sim_totals ta = dy_sim_get_totals(a), tb = dy_sim_get_totals(b);
                assert_memory_equal(&ta, &tb, sizeof ta);
                assert_true(ta.steps > 50);
                if (mode > 0)
                    assert_true(ta.transfers > 0);
                assert_int_equal(dy_sim_records(b, &n) == NULL, 1);
                assert_int_equal(n, 0);
                /* a prompt is asked for once per admitted request, never for a refused one */
                if (lazy)
                    assert_int_equal(sc.n_prompts, N - ta.refused - ta.over_context);
                refused += ta.refused;
                dy_sim_free(a);
                dy_sim_free(b);
            }
    assert_true(refused > 0); /* the queue did fill somewhere */
}

/* ---------------------------------------------------------------- memory follows the load */

static dy_sim_totals stream_run(int n, double gap_ms, int cap)
{
    workload wl = {.n = n, .gap_ms = gap_ms};
    dy_sim_worker w[4];
    dy_sim_config c = config_of(w, 0);
    c.max_in_flight = cap;
    c.max_queue = 1 << 20;
    char err[256];
    dy_sim *s = dy_sim_new(&c, &tu_sim_costs, NULL, err, sizeof err);
    assert_non_null(s);
    stream_ctx sc = {.w = &wl, .fail_at = -1, .sink_fail_at = -1};
    dy_sim_stream io = {.next = next_request, .sink = keep_record, .ctx = &sc};
    if (dy_sim_run_stream(s, &io, err, sizeof err) != 0)
        fail_msg("dy_sim_run_stream: %s", err);
    dy_sim_totals t = dy_sim_get_totals(s);
    assert_int_equal(sc.n_sunk, n + (n + 4) / 5); /* every fifth request has two samples */
    assert_int_equal(t.refused, 0);
    dy_sim_free(s);
    return t;
}

static void test_held_bounded_by_in_flight(void **st)
{
    (void)st;
    /* A closed loop of 3 clients over 3000 requests: at most the 3 in flight and the one
     * pulled ahead are held, each with at most 2 sample records. */
    dy_sim_totals t = stream_run(3000, 0, 3);
    assert_true(t.peak_requests_held >= 3);
    assert_true(t.peak_requests_held <= 4);
    assert_true(t.peak_samples_held <= 8);
    /* An open loop well under capacity: what is held depends on the rate, not the length —
     * ten times the requests, the same peak. */
    dy_sim_totals s1 = stream_run(400, 4.0, 0), s10 = stream_run(4000, 4.0, 0);
    assert_true(s1.peak_requests_held < 40 && s10.peak_requests_held < 40);
    assert_true(s10.peak_requests_held <= 2 * s1.peak_requests_held);
    assert_true(s10.peak_samples_held <= 2 * s1.peak_samples_held);
    /* Overload (everything at once): all of it is in flight, and held. */
    dy_sim_totals all = stream_run(200, 0, 0);
    assert_int_equal(all.peak_requests_held, 200);
}

/* ---------------------------------------------------------------- failures */

static int run_failing(int fail_at, int sink_fail_at, bool out_of_order, char *err, size_t n)
{
    static workload wl = {.n = 50, .gap_ms = 1.0};
    dy_sim_worker w[4];
    dy_sim_config c = config_of(w, 0);
    dy_sim *s = dy_sim_new(&c, &tu_sim_costs, NULL, err, n);
    assert_non_null(s);
    stream_ctx sc = {.w = &wl, .fail_at = fail_at, .sink_fail_at = sink_fail_at};
    wl.gap_ms = out_of_order ? -1.0 : 1.0;
    dy_sim_stream io = {.next = next_request, .sink = keep_record, .ctx = &sc};
    int rc = dy_sim_run_stream(s, &io, err, n);
    char again[64];
    assert_int_equal(dy_sim_run_stream(s, &io, again, sizeof again), -1); /* one run each */
    assert_non_null(strstr(again, "once"));
    dy_sim_free(s);
    return rc;
}

static void test_failures(void **st)
{
    (void)st;
    char err[256];
    assert_int_equal(run_failing(-1, -1, false, err, sizeof err), 0);
    assert_int_equal(run_failing(10, -1, false, err, sizeof err), -1);
    assert_non_null(strstr(err, "source"));
    assert_int_equal(run_failing(-1, 5, false, err, sizeof err), -1);
    assert_non_null(strstr(err, "sink"));
    assert_int_equal(run_failing(-1, -1, true, err, sizeof err), -1);
    assert_non_null(strstr(err, "arrival"));
    dy_sim_worker w[4];
    dy_sim_config c = config_of(w, 0);
    dy_sim *s = dy_sim_new(&c, &tu_sim_costs, NULL, err, sizeof err);
    dy_sim_stream none = {0};
    assert_int_equal(dy_sim_run_stream(s, &none, err, sizeof err), -1);
    dy_sim_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_equals_run),
        cmocka_unit_test(test_held_bounded_by_in_flight),
        cmocka_unit_test(test_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
