/* test_route.c — the router's choices: the decode (or aggregated) worker with the fewest
 * sequences, ties in turn, dead workers skipped; a prefill worker only for prompts at least
 * disagg_min_tokens long and only while the prefill pool's backlog is under the threshold. */
#include "testutil.h"
#include "route/route.h"

static void test_aggregated_least_loaded(void **st)
{
    (void)st;
    dy_route_config c = dy_route_config_default();
    dy_route_worker w[3] = {{DY_POOL_AGG, true, 5, 0}, {DY_POOL_AGG, true, 2, 0}, {DY_POOL_AGG, false, 0, 0}};
    dy_route_decision d = dy_route_pick(&c, w, 3, 10000, 0);
    assert_int_equal(d.decode, 1); /* the dead one (0 in flight) is skipped */
    assert_int_equal(d.prefill, -1);
    w[1].alive = false;
    w[0].alive = false;
    assert_int_equal(dy_route_pick(&c, w, 3, 10, 0).decode, -1);
}

static void test_ties_in_turn(void **st)
{
    (void)st;
    dy_route_config c = dy_route_config_default();
    dy_route_worker w[2] = {{DY_POOL_AGG, true, 1, 0}, {DY_POOL_AGG, true, 1, 0}};
    assert_int_equal(dy_route_pick(&c, w, 2, 0, 0).decode, 0);
    assert_int_equal(dy_route_pick(&c, w, 2, 0, 1).decode, 1);
}

static void test_conditional_disaggregation(void **st)
{
    (void)st;
    dy_route_config c = {.disagg_min_tokens = 100, .prefill_busy_tokens = 500};
    dy_route_worker w[4] = {{DY_POOL_PREFILL, true, 0, 300}, {DY_POOL_PREFILL, true, 0, 200},
                            {DY_POOL_DECODE, true, 3, 0}, {DY_POOL_DECODE, true, 1, 0}};
    dy_route_decision d = dy_route_pick(&c, w, 4, 99, 0);
    assert_int_equal(d.decode, 3);
    assert_int_equal(d.prefill, -1); /* short prompt: local */
    d = dy_route_pick(&c, w, 4, 100, 0);
    assert_int_equal(d.decode, 3);
    assert_int_equal(d.prefill, 1);  /* the prefill worker with the smaller backlog */
    w[0].queued_prefill_tokens = w[1].queued_prefill_tokens = 600;
    assert_int_equal(dy_route_pick(&c, w, 4, 1000, 0).prefill, -1); /* pool busy: local */
    w[0].queued_prefill_tokens = 0;
    w[0].alive = false;
    assert_int_equal(dy_route_pick(&c, w, 4, 1000, 0).prefill, -1); /* only a busy one left */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aggregated_least_loaded),
        cmocka_unit_test(test_ties_in_turn),
        cmocka_unit_test(test_conditional_disaggregation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
