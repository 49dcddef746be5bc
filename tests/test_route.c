/* test_route.c — conditional disaggregation: a prefill worker computes the prompt only when
 * at least disagg_min_tokens of it are uncached, and only while that worker's backlog is
 * under the threshold. (Which worker of each pool: test_router.c.) */
#include "testutil.h"
#include "route/route.h"

static void test_short_prompts_stay_local(void **st)
{
    (void)st;
    dy_route_config c = {.disagg_min_tokens = 100, .prefill_busy_tokens = 500};
    assert_false(dy_route_remote(&c, 99, 0));
    assert_true(dy_route_remote(&c, 100, 0));
    assert_false(dy_route_remote(&c, 0, 0));
}

static void test_busy_prefill_pool_stays_local(void **st)
{
    (void)st;
    dy_route_config c = {.disagg_min_tokens = 100, .prefill_busy_tokens = 500};
    assert_true(dy_route_remote(&c, 1000, 499));
    assert_false(dy_route_remote(&c, 1000, 500));
}

static void test_defaults(void **st)
{
    (void)st;
    dy_route_config c = dy_route_config_default();
    assert_int_equal(c.disagg_min_tokens, 32);
    assert_int_equal(c.prefill_busy_tokens, 1024);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_prompts_stay_local),
        cmocka_unit_test(test_busy_prefill_pool_stays_local),
        cmocka_unit_test(test_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
