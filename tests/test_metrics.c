/* test_metrics.c — the frontend's exposition (src/serve/front/metrics.h) on hand-made input:
 * a model id from outside is escaped in its label (backslash, quote, newline), histograms
 * are cumulative with +Inf equal to _count, the TPOT histogram counts what it is given, and
 * requests are counted by outcome. The Prometheus scrape test (serve_prometheus_test.py)
 * checks the same text against a real Prometheus and promtool. */
#include "testutil.h"
#include "serve/front/metrics.h"

#include <stdlib.h>
#include <string.h>

static char *render(dy_metrics *m)
{
    dy_xfer_totals x;
    dy_router_totals r;
    memset(&x, 0, sizeof x);
    memset(&r, 0, sizeof r);
    r.policy = "kv-aware";
    return dy_metrics_render(m, NULL, 0, &x, &r);
}

static void test_model_label_is_escaped(void **state)
{
    (void)state;
    dy_metrics *m = dy_metrics_new("a\"b\\c\nd");
    assert_non_null(m);
    char *t = render(m);
    assert_non_null(t);
    assert_non_null(strstr(t, "# TYPE dyad_model_info gauge\n"));
    assert_non_null(strstr(t, "\ndyad_model_info{model=\"a\\\"b\\\\c\\nd\"} 1\n"));
    assert_non_null(strstr(t, "\ndyad_router_info{policy=\"kv-aware\"} 1\n"));
    free(t);
    dy_metrics_free(m);
}

static void test_histograms_are_cumulative(void **state)
{
    (void)state;
    dy_metrics *m = dy_metrics_new("m");
    dy_metrics_tpot(m, 0.003);  /* in (0.002, 0.005] */
    dy_metrics_tpot(m, 0.0005); /* on the first bound: in it */
    dy_metrics_tpot(m, 30);     /* past the last bound: +Inf only */
    dy_metrics_request(m, DY_END_LENGTH);
    dy_metrics_request(m, DY_END_LENGTH);
    dy_metrics_request(m, DY_END_REJECTED);
    char *t = render(m);
    assert_non_null(t);
    const char *want[] = {
        "# TYPE dyad_time_per_output_token_seconds histogram\n",
        "dyad_time_per_output_token_seconds_bucket{le=\"0.0005\"} 1\n",
        "dyad_time_per_output_token_seconds_bucket{le=\"0.002\"} 1\n",
        "dyad_time_per_output_token_seconds_bucket{le=\"0.005\"} 2\n",
        "dyad_time_per_output_token_seconds_bucket{le=\"2.5\"} 2\n",
        "dyad_time_per_output_token_seconds_bucket{le=\"+Inf\"} 3\n",
        "dyad_time_per_output_token_seconds_sum 30.0035\n",
        "dyad_time_per_output_token_seconds_count 3\n",
        "dyad_requests_total{outcome=\"length\"} 2\n",
        "dyad_requests_total{outcome=\"rejected\"} 1\n",
        "dyad_requests_total{outcome=\"stop\"} 0\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(t, want[i]))
            fail_msg("missing: %s", want[i]);
    free(t);
    dy_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_label_is_escaped),
        cmocka_unit_test(test_histograms_are_cumulative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
