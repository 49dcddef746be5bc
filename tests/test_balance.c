/* test_balance.c — the balance criterion (src/plan/balance.h) against hand computations on a
 * linear cost model: the decode pool's steady batch and ITL, the prefill pool's M/D/1 TTFT, the
 * aggregated pool's fixed point; the cheapest size of each; a tie goes to aggregated, a tight
 * ITL objective splits, a tight TTFT objective does not; budgets, impossible objectives and bad
 * inputs; and the step shapes of sched/step_shape.h the criterion prices. */
#include "testutil.h"
#include "plan/balance.h"

#include <math.h>
#include <string.h>

/* The hand computations' cost model is testutil.h's tu_plan_costs. */

static dy_balance_hw hw_default(void)
{
    return (dy_balance_hw){.costs = tu_plan_costs, .kv_bytes_per_token = 1000,
                           .kv_capacity_tokens = 1 << 20, .max_batch_tokens = 512,
                           .max_running = 256, .units_per_worker = 1};
}

/* 100 requests a second of 100 prompt and 10 output tokens. */
static const dy_balance_traffic traffic = {.rate = 100, .isl = 100, .osl = 10};

#define assert_near(a, b) assert_true(fabs((a) - (b)) < 1e-6 * (1 + fabs((double)(b))))

/* Decode pool of 1: B = (100·10)·(1 ms + 0.5 ms·B) solves to B = 2, ITL = 2 ms. Prefill pool of
 * 2: a prompt alone takes 1 + 10 = 11 ms; 5 share a step of 1 + 50 ms, 10.2 ms each; ρ = 100 ·
 * 10.2 ms / 2 = 0.51, the M/D/1 wait 0.51 · 10.2 / (2 · 0.49) ms; TTFT = wait + 11 + 0.25 + 2. */
static void test_disagg_hand(void **state)
{
    (void)state;
    dy_balance_hw hw = hw_default();
    dy_balance_slo slo = {1, 1};
    dy_balance_choice c = dy_balance_eval_disagg(&traffic, &slo, &hw, 2, 1);
    assert_true(c.ok);
    assert_near(c.batch, 2);
    assert_near(c.itl_s, 2e-3);
    assert_near(c.prefill_util, 0.51);
    assert_near(c.transfer_s, 2.5e-4);
    assert_near(c.ttft_s, (0.51 * 10.2 / (2 * 0.49) + 11 + 0.25 + 2) * 1e-3);
    assert_int_equal(c.units, 3);

    c = dy_balance_eval_disagg(&traffic, &slo, &hw, 1, 1); /* ρ = 1.02 */
    assert_false(c.ok);
    assert_string_equal(c.why, "the prefill pool cannot keep up");
    hw.max_running = 1; /* the steady batch of 2 does not fit */
    c = dy_balance_eval_disagg(&traffic, &slo, &hw, 2, 1);
    assert_false(c.ok);
    assert_string_equal(c.why, "the decode pool cannot keep up");
}

/* Aggregated pool of 2 (50 requests a second each): at B = 2 a prompt's one chunk runs beside
 * the decodes in 1 + 10 + 1 = 12 ms, so prefill keeps a worker 60 % busy; steps come at 50 (with
 * a chunk) + 0.4 / 2 ms (decode only) = 250 a second, ITL 4 ms, and 50 · 10 · 4 ms = 2 = B.
 * TTFT = 0.6 · 12 / (2 · 0.4) + 12 = 21 ms. */
static void test_agg_hand(void **state)
{
    (void)state;
    dy_balance_hw hw = hw_default();
    dy_balance_slo slo = {1, 1};
    dy_balance_choice c = dy_balance_eval_agg(&traffic, &slo, &hw, 2);
    assert_true(c.ok);
    assert_int_equal(c.prefill, 0);
    assert_int_equal(c.decode, 2);
    assert_near(c.batch, 2);
    assert_near(c.itl_s, 4e-3);
    assert_near(c.prefill_util, 0.6);
    assert_near(c.ttft_s, 21e-3);
    assert_near(c.transfer_s, 0);

    c = dy_balance_eval_agg(&traffic, &slo, &hw, 1); /* prompts alone: 100 · 11 ms > 1 */
    assert_false(c.ok);
    assert_string_equal(c.why, "the workers cannot keep up with the prompts");
}

/* A prefix hit computes fewer tokens: half of 100 cached leaves 50, alone in 1 + 5 ms. */
static void test_prefix_hit(void **state)
{
    (void)state;
    dy_balance_hw hw = hw_default();
    dy_balance_traffic t = traffic;
    t.prefix_hit = 0.5;
    dy_balance_slo slo = {1, 1};
    dy_balance_choice c = dy_balance_eval_disagg(&t, &slo, &hw, 1, 1);
    assert_true(c.ok);
    /* 10 prompts of 50 share a step of 1 + 50 ms: 5.1 ms each, ρ = 0.51 on one worker */
    assert_near(c.prefill_util, 0.51);
    assert_near(c.ttft_s, (0.51 * 5.1 / (2 * 0.49) + 6 + 0.25 + 2) * 1e-3);
}

/* TTFT ≤ 20 ms, ITL ≤ 5 ms: aggregated 2 gives 21 ms, 3 meets both; disaggregated 2 + 1
 * meets both (18.56 ms). Both cost 3: the tie goes to aggregated. */
static void test_tie_goes_to_agg(void **state)
{
    (void)state;
    dy_balance_hw hw = hw_default();
    dy_balance_slo slo = {20e-3, 5e-3};
    dy_balance b;
    char err[128];
    assert_int_equal(dy_balance_solve(&traffic, &slo, &hw, &b, err, sizeof err), 0);
    assert_true(b.agg.ok);
    assert_int_equal(b.agg.decode, 3);
    assert_true(b.disagg.ok);
    assert_int_equal(b.disagg.prefill, 2);
    assert_int_equal(b.disagg.decode, 1);
    assert_false(b.split);
}

/* ITL ≤ 2.1 ms: one decode worker decodes at 2 ms, so 2 + 1 serve; aggregated workers pay the
 * prompts' chunks in their steps and need 4 (3 give 2.24 ms). The split is cheaper. */
static void test_tight_itl_splits(void **state)
{
    (void)state;
    dy_balance_hw hw = hw_default();
    dy_balance_slo slo = {100e-3, 2.1e-3};
    dy_balance b;
    char err[128];
    assert_int_equal(dy_balance_solve(&traffic, &slo, &hw, &b, err, sizeof err), 0);
    assert_int_equal(b.agg.decode, 4);
    assert_true(b.agg.itl_s <= 2.1e-3);
    assert_true(dy_balance_eval_agg(&traffic, &slo, &hw, 3).itl_s > 2.1e-3);
    assert_int_equal(b.disagg.prefill + b.disagg.decode, 3);
    assert_true(b.split);
}

/* TTFT ≤ 17 ms: disaggregated needs a third prefill worker (2 + 1 give 18.56 ms, 2 + 2 give
 * 18.06), aggregated 3 give about 14.8 ms: do not split. */
static void test_tight_ttft_does_not_split(void **state)
{
    (void)state;
    dy_balance_hw hw = hw_default();
    dy_balance_slo slo = {17e-3, 5e-3};
    dy_balance b;
    char err[128];
    assert_int_equal(dy_balance_solve(&traffic, &slo, &hw, &b, err, sizeof err), 0);
    assert_int_equal(b.agg.decode, 3);
    assert_int_equal(b.disagg.prefill, 3);
    assert_int_equal(b.disagg.decode, 1);
    assert_false(b.split);
}

/* Units: 4 GPUs a worker doubles nothing but the cost; a budget of 8 units holds 2 workers. */
static void test_budget(void **state)
{
    (void)state;
    dy_balance_hw hw = hw_default();
    hw.units_per_worker = 4;
    hw.max_units = 8;
    dy_balance_slo slo = {20e-3, 5e-3};
    dy_balance b;
    char err[128];
    assert_int_equal(dy_balance_solve(&traffic, &slo, &hw, &b, err, sizeof err), 0);
    assert_false(b.agg.ok);
    assert_string_equal(b.agg.why, "TTFT over the objective"); /* 2 workers: 21 ms */
    assert_false(b.disagg.ok);
    assert_string_equal(b.disagg.why, "the prefill pool cannot keep up"); /* 1 + 1 */
    assert_false(b.split);
    hw.max_units = 12;
    assert_int_equal(dy_balance_solve(&traffic, &slo, &hw, &b, err, sizeof err), 0);
    assert_true(b.agg.ok);
    assert_int_equal(b.agg.units, 12);
}

/* An ITL objective below one sequence's step cannot be met by either. */
static void test_impossible(void **state)
{
    (void)state;
    dy_balance_hw hw = hw_default();
    dy_balance_slo slo = {1, 0.9e-3};
    dy_balance b;
    char err[128];
    assert_int_equal(dy_balance_solve(&traffic, &slo, &hw, &b, err, sizeof err), 0);
    assert_false(b.agg.ok);
    assert_non_null(b.agg.why);
    assert_false(b.disagg.ok);
    assert_string_equal(b.disagg.why, "the decode pool cannot meet the ITL objective");
    assert_false(b.split);
}

static void expect_bad(dy_balance_traffic t, dy_balance_slo slo, dy_balance_hw hw,
                       const char *field)
{
    dy_balance b;
    char err[128] = "";
    assert_int_equal(dy_balance_solve(&t, &slo, &hw, &b, err, sizeof err), -1);
    assert_non_null(strstr(err, field));
}

static void test_bad_inputs(void **state)
{
    (void)state;
    dy_balance_slo slo = {1, 1};
    dy_balance_hw hw = hw_default();
    dy_balance_traffic t = traffic;
    t.rate = 0;
    expect_bad(t, slo, hw, "traffic.rate");
    t = traffic;
    t.rate = NAN;
    expect_bad(t, slo, hw, "traffic.rate");
    t = traffic;
    t.isl = 0.5;
    expect_bad(t, slo, hw, "traffic.isl");
    t = traffic;
    t.prefix_hit = 1;
    expect_bad(t, slo, hw, "traffic.prefix_hit");
    expect_bad(traffic, (dy_balance_slo){0, 1}, hw, "slo.ttft");
    expect_bad(traffic, (dy_balance_slo){1, -1}, hw, "slo.itl");
    hw.costs.transfer_seconds = NULL;
    expect_bad(traffic, slo, hw, "hw.costs");
    hw = hw_default();
    hw.units_per_worker = 0;
    expect_bad(traffic, slo, hw, "hw.units_per_worker");
    hw = hw_default();
    hw.kv_capacity_tokens = 0;
    expect_bad(traffic, slo, hw, "hw.kv_capacity_tokens");
}

/* KV capacity bounds the batch: a decode pool of 1 at 190 requests a second settles at
 * B = 1.9 / (1 − 0.95) = 38; 330 tokens hold only 3 sequences of 110. */
static void test_kv_capacity_bounds_batch(void **state)
{
    (void)state;
    dy_balance_hw hw = hw_default();
    dy_balance_traffic t = traffic;
    t.rate = 190;
    dy_balance_slo slo = {1, 1};
    dy_balance_choice c = dy_balance_eval_disagg(&t, &slo, &hw, 4, 1);
    assert_true(c.ok);
    assert_near(c.batch, 38);
    hw.kv_capacity_tokens = 330;
    c = dy_balance_eval_disagg(&t, &slo, &hw, 4, 1);
    assert_false(c.ok);
    assert_string_equal(c.why, "the decode pool cannot keep up");
}

/* The shapes the criterion and the simulator price. */
static void test_step_shapes(void **state)
{
    (void)state;
    dy_step_shape s = dy_step_shape_prefill(0, 4); /* positions 0..3 attend to 1..4 */
    assert_int_equal(s.prefill_tokens, 4);
    assert_int_equal(s.prefill_context, 1 + 2 + 3 + 4);
    s = dy_step_shape_prefill(10, 12); /* 11 + 12 */
    assert_int_equal(s.prefill_tokens, 2);
    assert_int_equal(s.prefill_context, 23);
    assert_int_equal(s.decode_seqs, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disagg_hand),
        cmocka_unit_test(test_agg_hand),
        cmocka_unit_test(test_prefix_hit),
        cmocka_unit_test(test_tie_goes_to_agg),
        cmocka_unit_test(test_tight_itl_splits),
        cmocka_unit_test(test_tight_ttft_does_not_split),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_impossible),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_kv_capacity_bounds_batch),
        cmocka_unit_test(test_step_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
