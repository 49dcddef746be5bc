/* test_recent.c — the frontend's rolling view (serve/front/recent.h) on made-up clocks:
 * percentiles computed by hand, rates over a young and a full window, seconds that leave the
 * window (skipped when read, cleared when their bucket is reused), goodput against the
 * objectives, the KV figures, the per-second sample bound, bad configurations, and adds from
 * several threads at once. */
#include "testutil.h"
#include "serve/front/recent.h"

#include <math.h>
#include <pthread.h>

static const dy_recent_request plain = {.ttft_s = -1, .tpot_s = -1};

static dy_recent_request with_latency(double ttft, double tpot)
{
    dy_recent_request q = plain;
    q.ttft_s = ttft;
    q.tpot_s = tpot;
    return q;
}

static void test_percentiles_by_hand(void **state)
{
    (void)state;
    dy_recent_config c = {60, 0, 0};
    dy_recent *r = dy_recent_new(&c, 1000.0);
    assert_non_null(r);
    /* TTFT 0.1 .. 1.0 in shuffled order; TPOT 0.01 .. 0.05 twice. */
    const double ttft[10] = {0.7, 0.1, 1.0, 0.4, 0.3, 0.9, 0.2, 0.6, 0.8, 0.5};
    for (int i = 0; i < 10; i++) {
        dy_recent_request q = with_latency(ttft[i], 0.01 * (i % 5 + 1));
        q.output_tokens = 4;
        dy_recent_ended(r, 1000.5 + i * 0.01, &q);
    }
    dy_recent_figures f = dy_recent_between(r, 1000.9, 60, 0);
    /* Linear interpolation between order statistics: p50 at rank 4.5, p90 at rank 8.1. */
    assert_int_equal(f.ttft.n, 10);
    assert_float_equal(f.ttft.p50, 0.55, 1e-6);
    assert_float_equal(f.ttft.p90, 0.91, 1e-6);
    assert_int_equal(f.tpot.n, 10);
    assert_float_equal(f.tpot.p50, 0.03, 1e-6);
    assert_float_equal(f.tpot.p90, 0.05, 1e-6);
    assert_int_equal(f.itl.n, 0);
    assert_float_equal(f.itl.p50, 0, 0);
    /* The window is 0.9 s old: the rates are over that, not over 60 s. */
    assert_float_equal(f.span_s, 0.9, 1e-9);
    assert_float_equal(f.requests, 10, 0);
    assert_float_equal(f.requests_per_s, 10 / 0.9, 1e-9);
    assert_float_equal(f.output_tokens_per_s, 40 / 0.9, 1e-9);
    assert_float_equal(f.goodput, -1, 0); /* no objectives */
    for (int i = 1; i <= 4; i++)
        dy_recent_itl(r, 1000.5, 0.001 * i);
    f = dy_recent_between(r, 1000.9, 60, 0);
    assert_int_equal(f.itl.n, 4);
    assert_float_equal(f.itl.p50, 0.0025, 1e-7);
    assert_float_equal(f.itl.p90, 0.0037, 1e-7);
    dy_recent_free(r);
}

static void test_rates_over_spans(void **state)
{
    (void)state;
    dy_recent_config c = {60, 0, 0};
    dy_recent *r = dy_recent_new(&c, 1000.0);
    for (int s = 0; s < 20; s++) /* two requests a second for 20 s */
        for (int k = 0; k < 2; k++)
            dy_recent_ended(r, 1000.0 + s + 0.25 * k, &plain);
    dy_recent_figures f = dy_recent_between(r, 1020.0, 60, 0);
    assert_float_equal(f.span_s, 20, 1e-9);
    assert_float_equal(f.requests, 40, 0);
    assert_float_equal(f.requests_per_s, 2, 1e-9);
    /* The current second as far as it has gone. */
    f = dy_recent_between(r, 1019.5, 60, 0);
    assert_float_equal(f.span_s, 19.5, 1e-9);
    assert_float_equal(f.requests_per_s, 40 / 19.5, 1e-9);
    /* The seconds 1011..1015: from_ago 10 to to_ago 5 at second 1020. */
    f = dy_recent_between(r, 1020.0, 10, 5);
    assert_float_equal(f.span_s, 5, 1e-9);
    assert_float_equal(f.requests, 10, 0);
    /* Asked for more than the window holds: clipped to it, seconds 1001..1060 (the last not
     * begun). */
    f = dy_recent_between(r, 1060.0, 1000, 0);
    assert_float_equal(f.span_s, 59, 1e-9);
    assert_float_equal(f.requests, 38, 0);
    /* An empty or reversed span. */
    f = dy_recent_between(r, 1019.5, 5, 5);
    assert_float_equal(f.span_s, 0, 0);
    assert_float_equal(f.requests, 0, 0);
    assert_float_equal(f.requests_per_s, 0, 0);
    dy_recent_free(r);
}

static void test_expiry_by_time(void **state)
{
    (void)state;
    dy_recent_config c = {10, 0, 0};
    dy_recent *r = dy_recent_new(&c, 1000.0);
    dy_recent_ended(r, 1000.2, &(dy_recent_request){.ttft_s = 5.0, .tpot_s = -1});
    dy_recent_figures f = dy_recent_between(r, 1009.9, 10, 0);
    assert_float_equal(f.requests, 1, 0); /* second 1000 is the window's oldest */
    f = dy_recent_between(r, 1010.0, 10, 0);
    assert_float_equal(f.requests, 0, 0); /* it has left: seconds 1001..1010 */
    assert_int_equal(f.ttft.n, 0);
    /* Second 1010 reuses second 1000's bucket: the old request is gone from it. */
    dy_recent_ended(r, 1010.3, &(dy_recent_request){.ttft_s = 0.25, .tpot_s = -1});
    f = dy_recent_between(r, 1010.5, 1, 0);
    assert_float_equal(f.requests, 1, 0);
    assert_int_equal(f.ttft.n, 1);
    assert_float_equal(f.ttft.p90, 0.25, 1e-7);
    /* Much later, nothing at all is left. */
    f = dy_recent_between(r, 2000.0, 10, 0);
    assert_float_equal(f.requests, 0, 0);
    assert_float_equal(f.span_s, 9, 1e-9); /* 1991..2000, the last not begun */
    dy_recent_free(r);
}

static void test_goodput_against_objectives(void **state)
{
    (void)state;
    dy_recent_config c = {60, 0.5, 0.1};
    dy_recent *r = dy_recent_new(&c, 0.0);
    dy_recent_request qs[] = {
        with_latency(0.3, 0.05), /* both met */
        with_latency(0.6, 0.05), /* TTFT missed */
        with_latency(0.3, 0.2),  /* TPOT missed */
        with_latency(0.5, -1),   /* one token, TTFT exactly at the objective: met */
        with_latency(-1, -1),    /* no token */
        with_latency(0.1, 0.01), /* fast, but failed */
    };
    qs[5].failed = true;
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
        dy_recent_ended(r, 3.5, &qs[i]);
    dy_recent_figures f = dy_recent_between(r, 3.9, 60, 0);
    assert_float_equal(f.requests, 6, 0);
    assert_float_equal(f.failed, 1, 0);
    assert_float_equal(f.good, 2, 0);
    assert_float_equal(f.goodput, 2.0 / 6.0, 1e-12);
    /* A span without requests has no goodput. */
    f = dy_recent_between(r, 30.0, 10, 0);
    assert_float_equal(f.goodput, -1, 0);
    dy_recent_free(r);
}

static void test_kv_figures(void **state)
{
    (void)state;
    dy_recent_config c = {60, 0, 0};
    dy_recent *r = dy_recent_new(&c, 0.0);
    dy_recent_request moved = with_latency(0.2, 0.01);
    moved.transfers = 1;
    moved.xfer_bytes = 3000000;
    moved.xfer_s = 0.05;
    moved.prompt_tokens = 100;
    moved.cached_tokens = 32;
    moved.predicted_blocks = 3;
    dy_recent_request local = with_latency(0.1, 0.01);
    local.prompt_tokens = 50;
    local.cached_tokens = 16;
    local.predicted_blocks = 1;
    dy_recent_ended(r, 0.5, &moved);
    dy_recent_ended(r, 1.5, &moved);
    dy_recent_ended(r, 1.5, &local);
    dy_recent_figures f = dy_recent_between(r, 2.0, 60, 0);
    assert_float_equal(f.span_s, 2, 1e-9);
    assert_float_equal(f.transfers, 2, 0);
    assert_float_equal(f.transfers_per_s, 1, 1e-12);
    assert_float_equal(f.xfer_bytes, 6e6, 0);
    assert_float_equal(f.xfer_bytes_per_s, 3e6, 1e-6);
    assert_float_equal(f.xfer_s, 0.1, 1e-12);
    assert_float_equal(f.moved_ttft_s, 0.4, 1e-12); /* the local request's TTFT is not in it */
    assert_float_equal(f.prompt_tokens, 250, 0);
    assert_float_equal(f.cached_tokens, 80, 0);
    assert_float_equal(f.predicted_blocks, 7, 0);
    dy_recent_free(r);
}

static void test_samples_bounded_per_second(void **state)
{
    (void)state;
    dy_recent_config c = {5, 0, 0};
    dy_recent *r = dy_recent_new(&c, 0.0);
    for (int i = 0; i < DY_RECENT_SAMPLES + 100; i++)
        dy_recent_itl(r, 0.5, i < DY_RECENT_SAMPLES ? 0.01 : 9.0);
    dy_recent_itl(r, 1.5, 0.02);
    dy_recent_figures f = dy_recent_between(r, 1.9, 5, 0);
    assert_int_equal(f.itl.n, DY_RECENT_SAMPLES + 1);
    assert_float_equal(f.itl.p90, 0.01, 1e-7); /* the first ones stood for the rest */
    dy_recent_free(r);
}

static void test_bad_configurations(void **state)
{
    (void)state;
    const dy_recent_config bad[] = {
        {0, 0, 0}, {DY_RECENT_MAX_WINDOW_S + 1, 0, 0}, {60, -1, 0}, {60, 0, NAN},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(dy_recent_new(&bad[i], 0.0));
    dy_recent_config ok = {DY_RECENT_MAX_WINDOW_S, 0.2, 0.05};
    dy_recent *r = dy_recent_new(&ok, 0.0);
    assert_non_null(r);
    assert_int_equal(dy_recent_config_of(r)->window_s, DY_RECENT_MAX_WINDOW_S);
    dy_recent_free(r);
    dy_recent_free(NULL);
}

#define THREADS 4
#define PER_THREAD 2000

static void *add_many(void *arg)
{
    dy_recent *r = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        dy_recent_ended(r, 10.0 + (i % 3), &(dy_recent_request){.ttft_s = 0.1, .tpot_s = -1,
                                                                .output_tokens = 1});
        dy_recent_itl(r, 10.0 + (i % 3), 0.01);
    }
    return NULL;
}

static void test_threads_add_at_once(void **state)
{
    (void)state;
    dy_recent_config c = {60, 0, 0};
    dy_recent *r = dy_recent_new(&c, 10.0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, add_many, r), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    dy_recent_figures f = dy_recent_between(r, 12.5, 60, 0);
    assert_float_equal(f.requests, THREADS * PER_THREAD, 0);
    assert_float_equal(f.output_tokens, THREADS * PER_THREAD, 0);
    assert_int_equal(f.itl.n, 3 * DY_RECENT_SAMPLES);
    dy_recent_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentiles_by_hand),
        cmocka_unit_test(test_rates_over_spans),
        cmocka_unit_test(test_expiry_by_time),
        cmocka_unit_test(test_goodput_against_objectives),
        cmocka_unit_test(test_kv_figures),
        cmocka_unit_test(test_samples_bounded_per_second),
        cmocka_unit_test(test_bad_configurations),
        cmocka_unit_test(test_threads_add_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
