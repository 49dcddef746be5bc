/* test_bench_agentic.c — the agentic workload's pieces that need no server: tool durations
 * have the asked mean for every distribution, the options are checked, and /metrics text is
 * summed by name and labels. (serve_kv_hold_test.py runs it against a server.) */
#include "testutil.h"
#include "bench/bench_agentic.h"
#include "bench/bench_rng.h"

#include <math.h>
#include <string.h>

static double mean_of(dyb_agentic_config *c, int n)
{
    dyb_rng r = dyb_rng_keyed(7, 1, 2);
    double s = 0;
    for (int i = 0; i < n; i++) {
        double d = dyb_tool_draw(c, &r);
        assert_true(d >= 0);
        s += d;
    }
    return s / n;
}

static void test_tool_durations(void **st)
{
    (void)st;
    dyb_agentic_config c = {.tool_ms = 400, .tool_dist = DYB_TOOL_FIXED};
    assert_true(mean_of(&c, 10) == 400);
    c.tool_dist = DYB_TOOL_LOGNORMAL;
    c.tool_sigma = 0.5;
    assert_true(fabs(mean_of(&c, 40000) / 400 - 1) < 0.02);
    c.tool_dist = DYB_TOOL_PARETO;
    c.tool_sigma = 3; /* a finite variance, so the sample mean settles */
    assert_true(fabs(mean_of(&c, 40000) / 400 - 1) < 0.05);
    c.tool_ms = 0;
    assert_true(mean_of(&c, 10) == 0);
}

static void test_checks(void **st)
{
    (void)st;
    char err[128];
    dyb_agentic_config ok = {.sessions = 1, .turns = 2, .isl = 8, .osl = 2, .tool_ms = 5,
                             .tool_dist = DYB_TOOL_PARETO, .tool_sigma = 1.5, .vocab_size = 512};
    assert_true(dyb_agentic_check(&ok, err, sizeof err));
    dyb_agentic_config c = ok;
    c.tool_sigma = 1;
    assert_false(dyb_agentic_check(&c, err, sizeof err));
    assert_non_null(strstr(err, "--tool-shape"));
    c = ok;
    c.tool_error = -1;
    assert_false(dyb_agentic_check(&c, err, sizeof err));
    c = ok;
    c.turns = 1000;
    assert_false(dyb_agentic_check(&c, err, sizeof err));
}

static void test_prom_sum(void **st)
{
    (void)st;
    const char *t = "# HELP dyad_x A.\n# TYPE dyad_x counter\n"
                    "dyad_x{worker=\"0\",tier=\"host\",direction=\"in\"} 10\n"
                    "dyad_x{worker=\"1\",tier=\"host\",direction=\"in\"} 2.5\n"
                    "dyad_x{worker=\"0\",tier=\"host\",direction=\"out\"} 7\n"
                    "dyad_xy{worker=\"0\"} 100\n"
                    "dyad_y 3";
    int n;
    assert_true(dyb_prom_sum(t, "dyad_x", "tier=\"host\"", "direction=\"in\"", &n) == 12.5);
    assert_int_equal(n, 2);
    assert_true(dyb_prom_sum(t, "dyad_x", NULL, NULL, &n) == 19.5 && n == 3);
    assert_true(dyb_prom_sum(t, "dyad_y", NULL, NULL, NULL) == 3);
    assert_true(dyb_prom_sum(t, "dyad_z", NULL, NULL, &n) == 0 && n == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tool_durations),
        cmocka_unit_test(test_checks),
        cmocka_unit_test(test_prom_sum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
