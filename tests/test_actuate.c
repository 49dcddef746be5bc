/* test_actuate.c — the reconciler that turns target pools into moves on worker slots
 * (src/plan/actuate.h), on hand-worked cases: growing starts parked slots, a reshape switches
 * roles (prefill donors first, the least loaded first) instead of starting, a drain to stop is
 * resumed when its role is short again, a surplus is stopped, no move leaves the deployment
 * without an active generator (agg→split and split→agg take two calls), and a call with the
 * changes under way answers nothing. */
#include "testutil.h"
#include "plan/actuate.h"

#define A DY_POOL_AGG
#define P DY_POOL_PREFILL
#define D DY_POOL_DECODE

static dy_plan_slot active(dy_route_pool role, int in_flight)
{
    return (dy_plan_slot){.state = DY_SLOT_ACTIVE, .role = role, .in_flight = in_flight};
}

static const dy_plan_slot parked = {.state = DY_SLOT_PARKED};

static dy_pool_sizes sizes(int agg, int prefill, int decode)
{
    dy_pool_sizes t = {{0, 0, 0}};
    t.n[A] = agg;
    t.n[P] = prefill;
    t.n[D] = decode;
    return t;
}

/* The moves for target, then each carried out on slots; returns how many. */
static int reconcile(dy_plan_slot *slots, int n, dy_pool_sizes target, dy_plan_action *out)
{
    int k = dy_plan_reconcile(slots, n, target, out, 16);
    for (int i = 0; i < k; i++)
        dy_plan_apply(slots, &out[i]);
    return k;
}

/* A draining slot finishes: it switches or is parked. */
static void drained(dy_plan_slot *s)
{
    *s = s->to_stop ? parked : active(s->next_role, 0);
}

static void test_grow_starts_parked(void **state)
{
    (void)state;
    dy_plan_slot s[3] = {active(A, 2), parked, parked};
    dy_plan_action a[16];
    assert_int_equal(reconcile(s, 3, sizes(2, 0, 0), a), 1);
    assert_int_equal(a[0].kind, DY_ACT_START);
    assert_int_equal(a[0].slot, 1);
    assert_int_equal(a[0].role, A);
    assert_int_equal(s[1].state, DY_SLOT_STARTING);
    /* Under way: nothing more to do. */
    assert_int_equal(dy_plan_reconcile(s, 3, sizes(2, 0, 0), a, 16), 0);
    assert_int_equal(dy_plan_supply(s, 3).n[A], 2);
}

static void test_reshape_switches_prefill_first(void **state)
{
    (void)state;
    /* 2 prefill + 1 decode → 1 prefill + 2 decode: the less loaded prefill worker switches. */
    dy_plan_slot s[4] = {active(P, 3), active(P, 1), active(D, 5), parked};
    dy_plan_action a[16];
    assert_int_equal(reconcile(s, 4, sizes(0, 1, 2), a), 1);
    assert_int_equal(a[0].kind, DY_ACT_SWITCH);
    assert_int_equal(a[0].slot, 1);
    assert_int_equal(a[0].role, D);
    assert_int_equal(s[1].state, DY_SLOT_DRAINING);
    assert_false(s[1].to_stop);
    assert_int_equal(dy_plan_reconcile(s, 4, sizes(0, 1, 2), a, 16), 0);
}

static void test_shrink_stops_least_loaded(void **state)
{
    (void)state;
    dy_plan_slot s[3] = {active(A, 4), active(A, 1), active(A, 2)};
    dy_plan_action a[16];
    assert_int_equal(reconcile(s, 3, sizes(1, 0, 0), a), 2);
    assert_int_equal(a[0].kind, DY_ACT_STOP);
    assert_int_equal(a[0].slot, 1);
    assert_int_equal(a[1].kind, DY_ACT_STOP);
    assert_int_equal(a[1].slot, 2);
    assert_int_equal(s[0].state, DY_SLOT_ACTIVE);
    /* The load comes back before they are empty: both resume, nothing starts. */
    assert_int_equal(reconcile(s, 3, sizes(3, 0, 0), a), 2);
    assert_int_equal(a[0].kind, DY_ACT_RESUME);
    assert_int_equal(a[1].kind, DY_ACT_RESUME);
    assert_int_equal(s[1].state, DY_SLOT_ACTIVE);
    assert_int_equal(s[2].state, DY_SLOT_ACTIVE);
}

static void test_agg_to_split_keeps_a_generator(void **state)
{
    (void)state;
    dy_plan_slot s[2] = {active(A, 1), active(A, 0)};
    dy_plan_action a[16];
    /* Decode first (the less loaded one); the other must keep generating meanwhile. */
    assert_int_equal(reconcile(s, 2, sizes(0, 1, 1), a), 1);
    assert_int_equal(a[0].kind, DY_ACT_SWITCH);
    assert_int_equal(a[0].slot, 1);
    assert_int_equal(a[0].role, D);
    assert_int_equal(dy_plan_reconcile(s, 2, sizes(0, 1, 1), a, 16), 0);
    drained(&s[1]);
    assert_int_equal(reconcile(s, 2, sizes(0, 1, 1), a), 1);
    assert_int_equal(a[0].kind, DY_ACT_SWITCH);
    assert_int_equal(a[0].slot, 0);
    assert_int_equal(a[0].role, P);
    drained(&s[0]);
    assert_int_equal(s[0].role, P);
    assert_int_equal(s[1].role, D);
    assert_int_equal(dy_plan_reconcile(s, 2, sizes(0, 1, 1), a, 16), 0);
}

static void test_split_to_agg_prefill_first(void **state)
{
    (void)state;
    dy_plan_slot s[2] = {active(P, 0), active(D, 3)};
    dy_plan_action a[16];
    assert_int_equal(reconcile(s, 2, sizes(2, 0, 0), a), 1);
    assert_int_equal(a[0].slot, 0);
    assert_int_equal(a[0].role, A);
    drained(&s[0]);
    assert_int_equal(reconcile(s, 2, sizes(2, 0, 0), a), 1);
    assert_int_equal(a[0].kind, DY_ACT_SWITCH);
    assert_int_equal(a[0].slot, 1);
    assert_int_equal(a[0].role, A);
}

static void test_last_generator_never_drains(void **state)
{
    (void)state;
    /* Asked for no workers at all, the one decode worker stays; the prefill one stops. */
    dy_plan_slot s[2] = {active(P, 0), active(D, 0)};
    dy_plan_action a[16];
    assert_int_equal(reconcile(s, 2, sizes(0, 0, 0), a), 1);
    assert_int_equal(a[0].kind, DY_ACT_STOP);
    assert_int_equal(a[0].slot, 0);
    /* A starting generator does not count until it is active. */
    dy_plan_slot t[2] = {active(A, 0), {.state = DY_SLOT_STARTING, .role = D}};
    assert_int_equal(dy_plan_reconcile(t, 2, sizes(0, 0, 1), a, 16), 0);
}

static void test_cap_bounds_moves(void **state)
{
    (void)state;
    dy_plan_slot s[3] = {parked, parked, active(A, 0)};
    dy_plan_action a[1];
    assert_int_equal(dy_plan_reconcile(s, 3, sizes(3, 0, 0), a, 1), 1);
    assert_int_equal(a[0].slot, 0);
    assert_string_equal(dy_plan_action_name(DY_ACT_SWITCH), "switch");
    assert_string_equal(dy_plan_slot_state_name(DY_SLOT_DRAINING), "draining");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_starts_parked),
        cmocka_unit_test(test_reshape_switches_prefill_first),
        cmocka_unit_test(test_shrink_stops_least_loaded),
        cmocka_unit_test(test_agg_to_split_keeps_a_generator),
        cmocka_unit_test(test_split_to_agg_prefill_first),
        cmocka_unit_test(test_last_generator_never_drains),
        cmocka_unit_test(test_cap_bounds_moves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
