/* test_planner.c — the SLA planner's decisions (src/plan/planner.h) on test_balance.c's linear
 * cost model: it grows at once to the criterion's size for the forecast, holds a smaller size
 * for min_dwell intervals before it shrinks, grows when observed latency runs above what the
 * criterion predicted for the deployed pools (the correction factor), runs the most workers the
 * budget allows when it cannot meet the objectives (and marks the decision unmet), raises a
 * decision that keeps a pool whose observed p90 is over its objective (the reactive safety
 * net), and refuses bad configurations and observations. */
#include "testutil.h"
#include "plan/planner.h"

#include <math.h>
#include <string.h>

/* The hand computations' cost model is testutil.h's tu_plan_costs. */

static dy_planner_config config(void)
{
    return (dy_planner_config){
        .predict = {.kind = DY_PREDICT_LAST},
        .slo = {20e-3, 5e-3},
        .hw = {.costs = tu_plan_costs, .kv_bytes_per_token = 1000,
               .kv_capacity_tokens = 1 << 20, .max_batch_tokens = 512, .max_running = 256,
               .units_per_worker = 1},
        .interval_s = 1, .startup_s = 0, .min_dwell = 2};
}

/* rate requests in a 1 s interval, of 100 prompt and 10 output tokens. */
static dy_planner_obs load(double rate)
{
    return (dy_planner_obs){.requests = rate, .prompt_tokens = 100 * rate,
                            .output_tokens = 10 * rate};
}

static dy_planner_decision step(dy_planner *p, dy_planner_obs o)
{
    dy_planner_decision d;
    char err[160];
    assert_int_equal(dy_planner_step(p, &o, &d, err, sizeof err), 0);
    return d;
}

/* What the criterion alone answers for this traffic and objectives. */
static int criterion_units(double rate, dy_balance_slo slo)
{
    dy_planner_config c = config();
    dy_balance_traffic t = {.rate = rate, .isl = 100, .osl = 10};
    dy_balance b;
    char err[160];
    assert_int_equal(dy_balance_solve(&t, &slo, &c.hw, &b, err, sizeof err), 0);
    return b.split ? b.disagg.units : b.agg.units;
}

/* 100 requests a second need 3 aggregated workers (test_balance.c's tie): from 1 it grows at
 * once; at 50 a second a smaller size is enough, but it holds for one interval (min_dwell 2)
 * and shrinks on the second. */
static void test_grow_then_dwell_then_shrink(void **state)
{
    (void)state;
    dy_planner_config c = config();
    dy_planner p;
    char err[160];
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), 0);
    dy_planner_decision d = step(&p, load(100));
    assert_int_equal(d.action, DY_PLAN_GROW);
    assert_false(d.split);
    assert_int_equal(d.decode, 3);
    assert_int_equal(d.units, 3);
    assert_true(fabs(d.predicted.rate - 100) < 1e-9);
    assert_true(fabs(d.observed.isl - 100) < 1e-9);
    assert_int_equal(d.interval, 0);
    d = step(&p, load(100));
    assert_int_equal(d.action, DY_PLAN_HOLD);
    const int small = criterion_units(50, c.slo);
    assert_true(small < 3);
    d = step(&p, load(50));
    assert_int_equal(d.action, DY_PLAN_HOLD);
    assert_int_equal(d.units, 3);
    assert_non_null(strstr(d.reason, "min_dwell"));
    d = step(&p, load(50));
    assert_int_equal(d.action, DY_PLAN_SHRINK);
    assert_int_equal(d.units, small);
    assert_string_equal(dy_planner_action_name(d.action), "shrink");
}

/* Observed TTFT twice what the criterion predicts for the 3 deployed workers: the factor moves
 * half way, to 1.5, the objective it sizes for tightens to 20 / 1.5 ms, and it grows. */
static void test_correction_grows(void **state)
{
    (void)state;
    dy_planner_config c = config();
    dy_planner p;
    char err[160];
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 3, err, sizeof err), 0);
    dy_balance_traffic t = {.rate = 100, .isl = 100, .osl = 10};
    dy_balance_choice now = dy_balance_eval_agg(&t, &c.slo, &c.hw, 3);
    dy_planner_obs o = load(100);
    o.ttft_s = 2 * now.ttft_s;
    o.itl_s = now.itl_s; /* as predicted: factor 1 */
    dy_planner_decision d = step(&p, o);
    assert_true(fabs(d.ttft_factor - 1.5) < 1e-9);
    assert_true(fabs(d.itl_factor - 1) < 1e-9);
    assert_int_equal(d.action, DY_PLAN_GROW);
    assert_int_equal(d.units, criterion_units(100, (dy_balance_slo){20e-3 / 1.5, 5e-3}));
    assert_true(d.units > 3);
}

/* A budget of 2 cannot meet the objectives at 100 a second: the most it allows. */
static void test_budget_binds(void **state)
{
    (void)state;
    dy_planner_config c = config();
    c.hw.max_units = 2;
    dy_planner p;
    char err[160];
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), 0);
    dy_planner_decision d = step(&p, load(100));
    assert_int_equal(d.units, 2);
    assert_non_null(strstr(d.reason, "budget"));
    assert_true(d.unmet);
    c.hw.max_units = 0;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), 0);
    d = step(&p, load(100));
    assert_false(d.unmet);
}

/* 3 aggregated workers are what 100 requests a second need; an observed ITL p90 of 6 ms over
 * the 5 ms objective raises the hold to 4 (the deployed pool plus one), and the next interval
 * the SLA answer (3) is smaller again. A budget of 3 refuses the net: unmet. Where the SLA
 * decision itself grows the pool (from 1 to 3), the net leaves it. */
static void test_safety_net(void **state)
{
    (void)state;
    dy_planner_config c = config();
    dy_planner p;
    char err[160];
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 3, err, sizeof err), 0);
    dy_planner_obs o = load(100);
    o.itl_p90_s = 6e-3;
    dy_planner_decision d = step(&p, o);
    assert_int_equal(d.action, DY_PLAN_GROW);
    assert_int_equal(d.decode, 4);
    assert_int_equal(d.units, 4);
    assert_string_equal(d.reason,
                        "reactive safety net: ITL p90 over the objective: one more worker where "
                        "it fired");
    assert_false(d.unmet);
    d = step(&p, load(100)); /* no p90 over: the SLA answer, held for min_dwell */
    assert_int_equal(d.action, DY_PLAN_HOLD);
    assert_int_equal(d.units, 4);
    assert_non_null(strstr(d.reason, "min_dwell"));

    c.hw.max_units = 3;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 3, err, sizeof err), 0);
    o = load(100);
    o.ttft_p90_s = 30e-3;
    d = step(&p, o);
    assert_int_equal(d.action, DY_PLAN_HOLD);
    assert_int_equal(d.units, 3);
    assert_true(d.unmet);
    assert_non_null(strstr(d.reason, "reactive safety net: TTFT p90 over the objective, but the "
                                     "budget allows no more workers"));

    c.hw.max_units = 0;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), 0);
    d = step(&p, o);
    assert_int_equal(d.units, 3);
    assert_non_null(strstr(d.reason, "the criterion's"));
}

/* Split 1 + 1 deployed: the SLA answer for 100 a second is 3 aggregated workers (more units),
 * so the net leaves it; at 1 a second the answer is smaller (one aggregated worker) and the
 * observed TTFT p90 is over, so the net keeps the deployed split and grows its prefill pool. */
static void test_safety_net_keeps_the_deployed_shape(void **state)
{
    (void)state;
    dy_planner_config c = config();
    dy_planner p;
    char err[160];
    assert_int_equal(dy_planner_init(&p, &c, true, 1, 1, err, sizeof err), 0);
    dy_planner_obs o = load(1);
    o.ttft_p90_s = 30e-3;
    assert_int_equal(criterion_units(1, c.slo), 1);
    dy_planner_decision d = step(&p, o);
    assert_int_equal(d.action, DY_PLAN_GROW);
    assert_true(d.split);
    assert_int_equal(d.prefill, 2);
    assert_int_equal(d.decode, 1);
    assert_non_null(strstr(d.reason, "reactive safety net: TTFT p90"));

    /* both p90s over, room for one more: the decode pool, whose ITL is the further over (the
     * net reads the p90s alone: a long queue does not make prefill the worse) */
    c.hw.max_units = 3;
    assert_int_equal(dy_planner_init(&p, &c, true, 1, 1, err, sizeof err), 0);
    o.ttft_p90_s = 22e-3;
    o.itl_p90_s = 7.5e-3;
    o.waiting = 100;
    d = step(&p, o);
    assert_true(d.split);
    assert_int_equal(d.prefill, 1);
    assert_int_equal(d.decode, 2);
    assert_true(d.unmet);
    assert_non_null(strstr(d.reason, "reactive safety net: ITL p90 over the objective: one more "
                                     "worker where it fired; the budget refused more"));
    c.hw.max_units = 0;

    assert_int_equal(dy_planner_init(&p, &c, true, 1, 1, err, sizeof err), 0);
    o = load(100);
    o.ttft_p90_s = 30e-3;
    d = step(&p, o);
    assert_false(d.split);
    assert_int_equal(d.units, 3);
}

/* With Holt's trend and a start-up of 2 intervals, the forecast looks 3 intervals ahead. */
static void test_startup_lead(void **state)
{
    (void)state;
    dy_planner_config c = config();
    c.predict = (dy_predict_config){.kind = DY_PREDICT_HOLT, .alpha = 1, .beta = 1};
    c.startup_s = 2;
    dy_planner p;
    char err[160];
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), 0);
    step(&p, load(10));
    dy_planner_decision d = step(&p, load(20)); /* level 20, trend 10 */
    assert_true(fabs(d.predicted.rate - 50) < 1e-9);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    dy_planner_config c = config();
    dy_planner p;
    char err[160];
    c.min_dwell = 0;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "planner.min_dwell"));
    c = config();
    c.interval_s = 0;
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "planner.interval_s"));
    c = config();
    c.predict.kind = DY_PREDICT_MEAN; /* window 0 */
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "predict.window"));
    c = config();
    assert_int_equal(dy_planner_init(&p, &c, true, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "planner.start"));
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), 0);
    dy_planner_obs o = load(10);
    dy_planner_decision d;
    o.requests = -1;
    assert_int_equal(dy_planner_step(&p, &o, &d, err, sizeof err), -1);
    o = load(10);
    o.prefix_hit = 1;
    assert_int_equal(dy_planner_step(&p, &o, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "prefix_hit"));
    o = load(10);
    o.output_tokens = 0;
    assert_int_equal(dy_planner_step(&p, &o, &d, err, sizeof err), -1);
    o = load(10);
    o.kv_use = 2;
    assert_int_equal(dy_planner_step(&p, &o, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "kv_use"));
    o = load(10);
    o.waiting = -1;
    assert_int_equal(dy_planner_step(&p, &o, &d, err, sizeof err), -1);
    c.reactive.low = -1; /* the SLA mode's net reads the thresholds too */
    assert_int_equal(dy_planner_init(&p, &c, false, 0, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "planner.reactive.low"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_then_dwell_then_shrink),
        cmocka_unit_test(test_correction_grows),
        cmocka_unit_test(test_budget_binds),
        cmocka_unit_test(test_safety_net),
        cmocka_unit_test(test_safety_net_keeps_the_deployed_shape),
        cmocka_unit_test(test_startup_lead),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
