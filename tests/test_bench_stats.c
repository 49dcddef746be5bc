/* test_bench_stats.c — the benchmark's arithmetic: percentiles as numpy computes them (linear
 * interpolation), per-request TPOT from usage counts, goodput under SLOs, the SLO option's
 * parser and the --sweep parser (bench_cli.h, shared with `dyad sim run`), throughputs, and
 * Pareto marking. */
#include "testutil.h"
#include "util/stats.h"
#include "bench/bench_cli.h"
#include "bench/bench_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_percentile_matches_numpy(void **st)
{
    (void)st;
    /* numpy.percentile([15, 20, 35, 40, 50], [0, 50, 90, 99, 100]) */
    const double v[5] = {15, 20, 35, 40, 50};
    assert_float_equal(dy_percentile(v, 5, 0), 15, 1e-12);
    assert_float_equal(dy_percentile(v, 5, 50), 35, 1e-12);
    assert_float_equal(dy_percentile(v, 5, 90), 46, 1e-12);
    assert_float_equal(dy_percentile(v, 5, 99), 49.6, 1e-12);
    assert_float_equal(dy_percentile(v, 5, 100), 50, 1e-12);
    /* numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = 2.5, 3.7, 3.97 */
    const double w[4] = {1, 2, 3, 4};
    assert_float_equal(dy_percentile(w, 4, 50), 2.5, 1e-12);
    assert_float_equal(dy_percentile(w, 4, 90), 3.7, 1e-12);
    assert_float_equal(dy_percentile(w, 4, 99), 3.97, 1e-12);
    assert_float_equal(dy_percentile(w, 1, 99), 1, 1e-12);
    assert_float_equal(dy_percentile(w, 0, 50), 0, 0);
}

static void test_dist_sorts_and_summarises(void **st)
{
    (void)st;
    double v[6] = {9, 1, 8, 2, 7, 3};
    dyb_dist d = dyb_dist_of(v, 6);
    assert_int_equal(d.n, 6);
    assert_float_equal(d.mean, 5, 1e-12);
    assert_float_equal(d.p50, 5, 1e-12); /* between 3 and 7 */
    assert_float_equal(d.min, 1, 0);
    assert_float_equal(d.max, 9, 0);
    assert_float_equal(d.p90, 8.5, 1e-12);
    dyb_dist e = dyb_dist_of(NULL, 0);
    assert_int_equal(e.n, 0);
    assert_float_equal(e.mean, 0, 0);
}

static dyb_result ok_result(double ttft, double e2e, long out, long in)
{
    return (dyb_result){.ok = true, .ttft_ms = ttft, .e2e_ms = e2e, .output_tokens = out,
                        .prompt_tokens = in};
}

static void test_summary_tpot_goodput_throughput(void **st)
{
    (void)st;
    dyb_stats s;
    dyb_stats_init(&s);
    double itl[3] = {10, 10, 10};
    dyb_result a = ok_result(100, 130, 4, 50); /* TPOT (130-100)/3 = 10 */
    a.itl = itl;
    a.n_itl = 3;
    dyb_result b = ok_result(300, 500, 11, 70); /* TPOT 20 */
    dyb_result c = ok_result(50, 50, 1, 30);    /* one token: no TPOT, meets a TPOT SLO */
    dyb_result f = {.ok = false, .error = "HTTP 400: nope"};
    assert_int_equal(dyb_stats_add(&s, &a), 0);
    assert_int_equal(dyb_stats_add(&s, &b), 0);
    assert_int_equal(dyb_stats_add(&s, &c), 0);
    assert_int_equal(dyb_stats_add(&s, &f), 0);
    assert_int_equal(dyb_stats_add(&s, &f), 0);
    dyb_slo slo = {.ttft_ms = 200, .tpot_ms = 15};
    dyb_summary sum;
    assert_int_equal(dyb_stats_summarize(&s, 2.0, &slo, 4, &sum), 0);
    assert_int_equal(sum.completed, 3);
    assert_int_equal(sum.failed, 2);
    assert_int_equal(s.n_errors, 1);
    assert_int_equal(s.errors[0].count, 2);
    assert_string_equal(s.errors[0].msg, "HTTP 400: nope");
    assert_int_equal(sum.tpot.n, 2);
    assert_float_equal(sum.tpot.mean, 15, 1e-9);
    assert_float_equal(sum.tok_per_s_per_user, 1000.0 / 15, 1e-9);
    assert_int_equal(sum.good, 2); /* a (ttft 100, tpot 10) and c (ttft 50, no tpot) */
    assert_float_equal(sum.goodput, 1.0, 1e-12);
    assert_int_equal(sum.output_tokens, 16);
    assert_int_equal(sum.input_tokens, 150);
    assert_float_equal(sum.output_tok_per_s, 8, 1e-12);
    assert_float_equal(sum.output_tok_per_s_per_core, 2, 1e-12);
    assert_float_equal(sum.req_per_s, 1.5, 1e-12);
    assert_int_equal(sum.itl.n, 3);
    assert_float_equal(sum.ttft.p50, 100, 1e-12);
    /* summarising leaves the samples as they were: a second summary is the same */
    dyb_summary again;
    assert_int_equal(dyb_stats_summarize(&s, 2.0, &slo, 4, &again), 0);
    assert_int_equal(again.good, 2);
    dyb_stats_free(&s);
}

/* KV transfers: sums over the requests whose KV moved; rate = bytes / time; share of TTFT =
 * transfer time over those requests' TTFT. */
static void test_summary_kv_transfer(void **st)
{
    (void)st;
    dyb_stats s;
    dyb_stats_init(&s);
    dyb_result a = ok_result(100, 200, 10, 512), b = ok_result(300, 400, 10, 512);
    dyb_result local = ok_result(50, 150, 10, 64), other = ok_result(60, 160, 10, 64);
    a.placed = b.placed = local.placed = true;
    a.kv_moved = b.kv_moved = true;
    a.kv_bytes = 1e6, a.kv_ms = 2;
    b.kv_bytes = 3e6, b.kv_ms = 6;
    local.kv_bytes = 99, local.kv_ms = 99; /* not moved: ignored */
    assert_int_equal(dyb_stats_add(&s, &a), 0);
    assert_int_equal(dyb_stats_add(&s, &b), 0);
    assert_int_equal(dyb_stats_add(&s, &local), 0);
    assert_int_equal(dyb_stats_add(&s, &other), 0);
    dyb_summary sum;
    assert_int_equal(dyb_stats_summarize(&s, 1.0, NULL, 2, &sum), 0);
    assert_int_equal(sum.placed, 3);
    assert_int_equal(sum.kv_moved, 2);
    assert_float_equal(sum.kv_bytes, 4e6, 0);
    assert_float_equal(sum.kv_ms_mean, 4, 1e-12);
    assert_float_equal(sum.kv_gb_per_s, 0.5, 1e-12);       /* 4 MB in 8 ms */
    assert_float_equal(sum.kv_ttft_share, 8.0 / 400, 1e-12); /* TTFT 100 + 300 */
    dyb_stats_free(&s);
    /* nothing placed (not a dyad server): all zero */
    dyb_stats_init(&s);
    assert_int_equal(dyb_stats_add(&s, &other), 0);
    assert_int_equal(dyb_stats_summarize(&s, 1.0, NULL, 2, &sum), 0);
    assert_int_equal(sum.placed, 0);
    assert_float_equal(sum.kv_gb_per_s, 0, 0);
    dyb_stats_free(&s);
}

static void test_sweep_parse(void **st)
{
    (void)st;
    char err[256], many[512] = "rate=1";
    dyb_sweep_kind kind = DYB_SWEEP_NONE;
    double v[DYB_MAX_SWEEP];
    int n = -1;
    assert_true(dyb_sweep_parse("rate=0.5,2", &kind, v, &n, err, sizeof err));
    assert_int_equal(kind, DYB_SWEEP_RATE);
    assert_int_equal(n, 2);
    assert_float_equal(v[0], 0.5, 0);
    assert_float_equal(v[1], 2, 0);
    assert_true(dyb_sweep_parse("concurrency=1,4,16", &kind, v, &n, err, sizeof err));
    assert_int_equal(kind, DYB_SWEEP_CONCURRENCY);
    assert_int_equal(n, 3);
    assert_float_equal(v[2], 16, 0);
    assert_false(dyb_sweep_parse("concurrency=1.5", &kind, v, &n, err, sizeof err));
    assert_non_null(strstr(err, "integers"));
    assert_false(dyb_sweep_parse("rate=0,1", &kind, v, &n, err, sizeof err));
    assert_false(dyb_sweep_parse("rate=1,", &kind, v, &n, err, sizeof err));
    assert_false(dyb_sweep_parse("speed=1", &kind, v, &n, err, sizeof err));
    for (int i = 1; i <= DYB_MAX_SWEEP; i++)
        strcat(many, ",1");
    assert_false(dyb_sweep_parse(many, &kind, v, &n, err, sizeof err)); /* 65 values */
}

static void test_slo_parse(void **st)
{
    (void)st;
    dyb_slo s;
    char err[256];
    assert_int_equal(dyb_slo_parse("ttft_ms=200,tpot_ms=50", &s, err, sizeof err), 0);
    assert_float_equal(s.ttft_ms, 200, 0);
    assert_float_equal(s.tpot_ms, 50, 0);
    assert_float_equal(s.e2e_ms, 0, 0);
    assert_int_equal(dyb_slo_parse("e2e_ms=1.5", &s, err, sizeof err), 0);
    assert_float_equal(s.e2e_ms, 1.5, 0);
    assert_int_equal(dyb_slo_parse("itl_ms=20,ttft_ms=9", &s, err, sizeof err), 0); /* a name */
    assert_float_equal(s.tpot_ms, 20, 0);                                             /* of TPOT */
    assert_float_equal(s.ttft_ms, 9, 0);
    assert_int_equal(dyb_slo_parse("ttft=200", &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "ttft=200"));
    assert_int_equal(dyb_slo_parse("ttft_ms=-1", &s, err, sizeof err), -1);
    assert_int_equal(dyb_slo_parse("ttft_ms=2x", &s, err, sizeof err), -1);
    assert_int_equal(dyb_slo_parse("", &s, err, sizeof err), -1);
}

static void test_pareto_marking(void **st)
{
    (void)st;
    /* x = tokens/s per user, y = tokens/s per core */
    const double x[6] = {100, 50, 20, 40, 20, 10};
    const double y[6] = {5, 20, 40, 15, 40, 30};
    bool d[6];
    dyb_pareto_mark(x, y, 6, d);
    assert_false(d[0]); /* best per user */
    assert_false(d[1]);
    assert_false(d[2]); /* best per core; its equal twin (4) is not "better" */
    assert_true(d[3]);  /* (50, 20) beats it on both axes */
    assert_false(d[4]);
    assert_true(d[5]);  /* (20, 40) beats it */
    bool one;
    dyb_pareto_mark(x, y, 1, &one);
    assert_false(one);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile_matches_numpy),
        cmocka_unit_test(test_dist_sorts_and_summarises),
        cmocka_unit_test(test_summary_tpot_goodput_throughput),
        cmocka_unit_test(test_summary_kv_transfer),
        cmocka_unit_test(test_slo_parse),
        cmocka_unit_test(test_sweep_parse),
        cmocka_unit_test(test_pareto_marking),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
