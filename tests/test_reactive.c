/* test_reactive.c — the planner's REACTIVE mode (src/plan/reactive.h, through planner.h) on
 * hand-worked observations: each signal grows its pool by one in the deployed shape, both
 * grow both or the worse one within the budget, a refused grow sets unmet, a grown pool waits
 * for its worker, every signal low for min_dwell intervals shrinks the pool with the most
 * slack down to one worker per role, and bad thresholds and observations are refused. The
 * objectives are TTFT 20 ms and ITL 5 ms; no cost model is given (the mode needs none). */
#include "testutil.h"
#include "plan/planner.h"

#include <math.h>
#include <string.h>

static dy_planner_config config(int max_units)
{
    return (dy_planner_config){.slo = {20e-3, 5e-3},
                               .hw = {.units_per_worker = 1, .max_units = max_units},
                               .interval_s = 1, .startup_s = 0, .min_dwell = 2,
                               .mode = DY_PLANNER_REACTIVE};
}

static dy_planner planner(dy_planner_config c, bool split, int prefill, int decode)
{
    dy_planner p;
    char err[160];
    assert_int_equal(dy_planner_init(&p, &c, split, prefill, decode, err, sizeof err), 0);
    return p;
}

/* 10 requests of 100 prompt and 10 output tokens in the 1 s interval, and the signals. */
static dy_planner_obs seen(double ttft_p90, double itl_p90, double waiting, double kv_use)
{
    return (dy_planner_obs){.requests = 10, .prompt_tokens = 1000, .output_tokens = 100,
                            .ttft_p90_s = ttft_p90, .itl_p90_s = itl_p90, .waiting = waiting,
                            .kv_use = kv_use};
}

/* Every signal below half its threshold. */
static dy_planner_obs quiet(void)
{
    return seen(5e-3, 1e-3, 0, 0.2);
}

static dy_planner_decision step(dy_planner *p, dy_planner_obs o)
{
    dy_planner_decision d;
    char err[160];
    assert_int_equal(dy_planner_step(p, &o, &d, err, sizeof err), 0);
    return d;
}

static void assert_pools(const dy_planner_decision *d, int prefill, int decode)
{
    assert_int_equal(d->prefill, prefill);
    assert_int_equal(d->decode, decode);
    assert_int_equal(d->units, prefill + decode);
}

static void assert_reason(const dy_planner_decision *d, const char *part)
{
    assert_non_null(d->reason);
    if (!strstr(d->reason, part))
        fail_msg("reason \"%s\" lacks \"%s\"", d->reason, part);
}

/* TTFT p90 25 ms > 20: the prefill pool grows (split), or the aggregated one. The record has
 * the observed traffic, no forecast and factors 1. */
static void test_ttft_grows_prompt_pool(void **state)
{
    (void)state;
    dy_planner p = planner(config(0), true, 1, 1);
    dy_planner_decision d = step(&p, seen(25e-3, 0, 0, 0));
    assert_int_equal(d.action, DY_PLAN_GROW);
    assert_true(d.split);
    assert_pools(&d, 2, 1);
    assert_reason(&d, "reactive: TTFT p90 over the objective: one more worker");
    assert_false(d.unmet);
    assert_true(fabs(d.observed.rate - 10) < 1e-9);
    assert_true(fabs(d.observed.isl - 100) < 1e-9);
    assert_true(fabs(d.observed.osl - 10) < 1e-9);
    assert_true(d.predicted.rate == 0);
    assert_true(d.ttft_factor == 1 && d.itl_factor == 1);
    assert_int_equal(d.interval, 0);

    p = planner(config(0), false, 0, 2);
    d = step(&p, seen(25e-3, 0, 0, 0));
    assert_false(d.split);
    assert_pools(&d, 0, 3);
    /* at the objective is not over: no signal is over, and TTFT is not low */
    d = step(&p, seen(20e-3, 0, 0, 0));
    assert_int_equal(d.action, DY_PLAN_HOLD);
    assert_pools(&d, 0, 3);
    assert_reason(&d, "not all low");
}

/* The queue's threshold is 4 waiting sequences per worker that computes prompts: with 2
 * prefill workers, 8 is not over and 9 is; aggregated 3 workers, 13 is. */
static void test_queue_grows_prompt_pool(void **state)
{
    (void)state;
    dy_planner p = planner(config(0), true, 2, 1);
    dy_planner_decision d = step(&p, seen(0, 0, 8, 0));
    assert_int_equal(d.action, DY_PLAN_HOLD);
    d = step(&p, seen(0, 0, 9, 0));
    assert_int_equal(d.action, DY_PLAN_GROW);
    assert_pools(&d, 3, 1);
    assert_reason(&d, "the waiting queue over its threshold");

    dy_planner_config c = config(0);
    c.reactive.queue_per_worker = 1; /* 3 workers: over 3 */
    p = planner(c, false, 0, 3);
    d = step(&p, seen(0, 0, 3.5, 0));
    assert_pools(&d, 0, 4);
}

/* ITL p90 6 ms > 5, or KV use 0.95 > 0.9: the decode pool grows; KV at 0.9 is not over. */
static void test_itl_and_kv_grow_decode_pool(void **state)
{
    (void)state;
    dy_planner p = planner(config(0), true, 1, 1);
    dy_planner_decision d = step(&p, seen(0, 6e-3, 0, 0));
    assert_pools(&d, 1, 2);
    assert_reason(&d, "reactive: ITL p90 over the objective");
    d = step(&p, seen(0, 0, 0, 0.9));
    assert_int_equal(d.action, DY_PLAN_HOLD);
    d = step(&p, seen(0, 0, 0, 0.95));
    assert_pools(&d, 1, 3);
    assert_reason(&d, "KV use over its threshold");

    dy_planner_config c = config(0);
    c.reactive.kv_high = 0.5;
    p = planner(c, false, 0, 1);
    d = step(&p, seen(0, 0, 0, 0.6));
    assert_pools(&d, 0, 2);
    assert_reason(&d, "KV use");
}

/* TTFT 2x its objective and ITL 1.5x: with room for both, one more of each; with room for
 * one, the prefill pool (the further over), unmet; with no room, hold, unmet. Aggregated, both
 * sides load the one pool: one more worker, both signals named. */
static void test_both_over_and_budget(void **state)
{
    (void)state;
    const dy_planner_obs both = seen(40e-3, 7.5e-3, 0, 0);
    dy_planner p = planner(config(4), true, 1, 1);
    dy_planner_decision d = step(&p, both);
    assert_pools(&d, 2, 2);
    assert_false(d.unmet);
    assert_reason(&d, "TTFT p90 over the objective and ITL p90 over the objective: one more");

    p = planner(config(3), true, 1, 1);
    d = step(&p, both);
    assert_pools(&d, 2, 1);
    assert_true(d.unmet);
    assert_reason(&d, "reactive: TTFT p90 over the objective: one more worker where it fired; "
                      "the budget refused more");

    /* the worse is decode when ITL is the further over */
    p = planner(config(3), true, 1, 1);
    d = step(&p, seen(22e-3, 7.5e-3, 0, 0));
    assert_pools(&d, 1, 2);
    assert_true(d.unmet);

    p = planner(config(2), true, 1, 1);
    d = step(&p, both);
    assert_int_equal(d.action, DY_PLAN_HOLD);
    assert_pools(&d, 1, 1);
    assert_true(d.unmet);
    assert_reason(&d, "but the budget allows no more workers");

    p = planner(config(0), false, 0, 2);
    d = step(&p, both);
    assert_pools(&d, 0, 3);
    assert_reason(&d, "TTFT p90 over the objective and ITL p90 over the objective");
    p = planner(config(2), false, 0, 2);
    d = step(&p, both);
    assert_pools(&d, 0, 2);
    assert_true(d.unmet);
}

/* A start-up of 2 intervals: after a grow, the pool waits 2 intervals (its worker serves from
 * the third); the other pool may grow meanwhile. */
static void test_grown_pool_waits_for_its_worker(void **state)
{
    (void)state;
    dy_planner_config c = config(0);
    c.startup_s = 2;
    dy_planner p = planner(c, true, 1, 1);
    dy_planner_decision d = step(&p, seen(25e-3, 0, 0, 0));
    assert_pools(&d, 2, 1);
    d = step(&p, seen(25e-3, 6e-3, 0, 0));
    assert_pools(&d, 2, 2); /* prefill waits; decode grows */
    assert_reason(&d, "reactive: ITL p90 over the objective: one more worker");
    d = step(&p, seen(25e-3, 0, 0, 0));
    assert_int_equal(d.action, DY_PLAN_HOLD);
    assert_pools(&d, 2, 2);
    assert_false(d.unmet);
    assert_reason(&d, "TTFT p90 over the objective, waiting for the worker started for it");
    d = step(&p, seen(25e-3, 0, 0, 0));
    assert_pools(&d, 3, 2);
}

/* min_dwell 2: every signal low for one interval holds, for the second shrinks the pool with
 * the most slack (prefill: TTFT at 0.25 of its objective, the decode side at 0.4); a signal
 * not low restarts the count; it never goes below one worker per role. */
static void test_dwell_then_shrink_to_the_floor(void **state)
{
    (void)state;
    dy_planner p = planner(config(0), true, 2, 2);
    const dy_planner_obs low = seen(5e-3, 2e-3, 0, 0.1);
    dy_planner_decision d = step(&p, low);
    assert_int_equal(d.action, DY_PLAN_HOLD);
    assert_reason(&d, "min_dwell");
    d = step(&p, low);
    assert_int_equal(d.action, DY_PLAN_SHRINK);
    assert_pools(&d, 1, 2);
    assert_reason(&d, "every signal low for min_dwell intervals");
    d = step(&p, low);
    assert_int_equal(d.action, DY_PLAN_HOLD);
    d = step(&p, seen(5e-3, 3e-3, 0, 0.1)); /* ITL at 0.6 of its objective: not low */
    assert_int_equal(d.action, DY_PLAN_HOLD);
    assert_reason(&d, "not all low");
    d = step(&p, low);
    assert_int_equal(d.action, DY_PLAN_HOLD);
    d = step(&p, low);
    assert_int_equal(d.action, DY_PLAN_SHRINK); /* prefill is at one: decode */
    assert_pools(&d, 1, 1);
    step(&p, low);
    d = step(&p, low);
    assert_int_equal(d.action, DY_PLAN_HOLD);
    assert_pools(&d, 1, 1);
    assert_reason(&d, "one worker per role");

    /* an empty interval (p90 0: none) is low too; its lengths are the last observed */
    p = planner(config(0), false, 0, 2);
    const dy_planner_obs none = {0};
    step(&p, quiet());
    d = step(&p, none);
    assert_int_equal(d.action, DY_PLAN_SHRINK);
    assert_pools(&d, 0, 1);
    assert_true(fabs(d.observed.isl - 100) < 1e-9);
    assert_true(d.observed.rate == 0);
}

static void test_bad_reactive_inputs(void **state)
{
    (void)state;
    dy_planner p;
    char err[160];
    dy_planner_config c = config(0);
    c.reactive.kv_high = 1.5;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "planner.reactive.kv_high"));
    c = config(0);
    c.reactive.low = 1;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "planner.reactive.low"));
    c = config(0);
    c.reactive.queue_per_worker = -1;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "planner.reactive.queue_per_worker"));
    c = config(0);
    c.mode = (dy_planner_mode)7;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "planner.mode"));
    c = config(0);
    c.slo.itl_s = 0;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "slo.itl"));
    c = config(0);
    c.mode = DY_PLANNER_SLA; /* the SLA mode needs the cost model the reactive one does not */
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "hw.costs"));

    p = planner(config(0), false, 0, 1);
    dy_planner_decision d;
    const dy_planner_obs bad[] = {seen(0, 0, 0, 1.5), seen(0, 0, 0, -0.1), seen(0, 0, 0, NAN),
                                  seen(0, 0, -1, 0),  seen(-1, 0, 0, 0),   seen(0, NAN, 0, 0),
                                  seen(INFINITY, 0, 0, 0)};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(dy_planner_step(&p, &bad[i], &d, err, sizeof err), -1);
    assert_int_equal(dy_planner_step(&p, &bad[0], &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "kv_use"));
    assert_int_equal(p.intervals, 0); /* a refused observation is no interval */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ttft_grows_prompt_pool),
        cmocka_unit_test(test_queue_grows_prompt_pool),
        cmocka_unit_test(test_itl_and_kv_grow_decode_pool),
        cmocka_unit_test(test_both_over_and_budget),
        cmocka_unit_test(test_grown_pool_waits_for_its_worker),
        cmocka_unit_test(test_dwell_then_shrink_to_the_floor),
        cmocka_unit_test(test_bad_reactive_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
