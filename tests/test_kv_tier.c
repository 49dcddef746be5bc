/* test_kv_tier.c — a lower tier's bookkeeping: a copy is findable only once filled, LRU
 * eviction follows use, pinned slots are never evicted, a full tier refuses, a bad slot is
 * never found again (and is freed only when its readers are done), clear, and the events and
 * snapshot mirror what the tier holds; load or recompute follows the measured rates. */
#include "testutil.h"
#include "kv/kv_tier.h"
#include "kv/tier_choice.h"

#include <math.h>

static int32_t put(dy_kv_tier *t, uint64_t hash)
{
    int32_t s = dy_kv_tier_reserve(t, hash, hash - 1, 0);
    if (s >= 0)
        dy_kv_tier_filled(t, s, true, hash * 7);
    return s;
}

static void test_fill_and_find(void **st)
{
    (void)st;
    assert_null(dy_kv_tier_new(0, DY_KV_TIER_HOST));
    assert_null(dy_kv_tier_new(4, DY_KV_TIER_DEVICE));
    dy_kv_tier *t = dy_kv_tier_new(2, DY_KV_TIER_HOST);
    int32_t s = dy_kv_tier_reserve(t, 10, 9, 3);
    assert_true(s >= 0);
    assert_int_equal(dy_kv_tier_find(t, 10), -1); /* filling: not usable yet */
    assert_true(dy_kv_tier_has(t, 10));
    assert_int_equal(dy_kv_tier_reserve(t, 10, 9, 0), -1); /* no second copy */
    dy_kv_tier_filled(t, s, true, 1234);
    assert_int_equal(dy_kv_tier_find(t, 10), s);
    assert_true(dy_kv_tier_checksum(t, s) == 1234 && dy_kv_tier_parent(t, s) == 9);
    assert_int_equal(dy_kv_tier_uses(t, s), 3);
    assert_int_equal(dy_kv_tier_touch(t, 10), s);
    assert_int_equal(dy_kv_tier_uses(t, s), 4);
    /* A failed copy leaves nothing behind. */
    int32_t f = dy_kv_tier_reserve(t, 20, 19, 0);
    dy_kv_tier_filled(t, f, false, 0);
    assert_false(dy_kv_tier_has(t, 20));
    assert_int_equal(dy_kv_tier_used(t), 1);
    assert_true(dy_kv_tier_reserve(t, 20, 19, 0) >= 0); /* its slot is free again */
    dy_kv_tier_free(t);
}

static void test_lru_and_pins(void **st)
{
    (void)st;
    dy_kv_tier *t = dy_kv_tier_new(3, DY_KV_TIER_HOST);
    put(t, 1);
    put(t, 2);
    put(t, 3);
    dy_kv_tier_touch(t, 1); /* order: 2 3 1 */
    int32_t old[3];
    assert_int_equal(dy_kv_tier_oldest(t, old, 3), 3);
    assert_int_equal(dy_kv_tier_hash(t, old[0]), 2);
    assert_int_equal(dy_kv_tier_hash(t, old[2]), 1);
    dy_kv_tier_pin(t, dy_kv_tier_find(t, 2)); /* being read */
    put(t, 4); /* evicts 3, the oldest unpinned */
    assert_int_equal(dy_kv_tier_find(t, 3), -1);
    assert_true(dy_kv_tier_find(t, 2) >= 0);
    assert_int_equal(dy_kv_tier_get_stats(t).evicted, 1);
    /* Everything pinned or filling: refused. */
    dy_kv_tier_pin(t, dy_kv_tier_find(t, 1));
    dy_kv_tier_pin(t, dy_kv_tier_find(t, 4));
    assert_int_equal(dy_kv_tier_reserve(t, 5, 4, 0), -1);
    assert_int_equal(dy_kv_tier_get_stats(t).full, 1);
    dy_kv_tier_unpin(t, dy_kv_tier_find(t, 1));
    assert_true(put(t, 5) >= 0); /* 1 was the only unpinned one */
    assert_int_equal(dy_kv_tier_find(t, 1), -1);
    dy_kv_tier_free(t);
}

static void test_bad_and_clear(void **st)
{
    (void)st;
    dy_kv_tier *t = dy_kv_tier_new(2, DY_KV_TIER_DISK);
    int32_t a = put(t, 1);
    put(t, 2);
    dy_kv_tier_pin(t, a);          /* a reader is using it when it is found bad */
    dy_kv_tier_drop_bad(t, a);
    assert_int_equal(dy_kv_tier_find(t, 1), -1);
    assert_false(dy_kv_tier_has(t, 1));
    assert_int_equal(dy_kv_tier_get_stats(t).bad, 1);
    assert_int_equal(dy_kv_tier_reserve(t, 3, 2, 0) >= 0, 1); /* evicts 2: a is still pinned */
    assert_int_equal(dy_kv_tier_reserve(t, 4, 3, 0), -1);
    dy_kv_tier_unpin(t, a);        /* its last reader: now free */
    int32_t b = dy_kv_tier_reserve(t, 4, 3, 0);
    assert_int_equal(b, a);
    dy_kv_tier_clear(t);           /* both filling: gone now, freed when their copies end */
    assert_int_equal(dy_kv_tier_used(t), 0);
    dy_kv_tier_filled(t, b, true, 0);
    assert_int_equal(dy_kv_tier_find(t, 4), -1);
    assert_true(put(t, 9) >= 0);
    dy_kv_tier_free(t);
}

/* Replaying the events onto an empty set gives what the tier holds; so does a snapshot. */
static void test_events_and_snapshot(void **st)
{
    (void)st;
    dy_kv_tier *t = dy_kv_tier_new(2, DY_KV_TIER_HOST);
    assert_true(dy_kv_tier_enable_events(t, true));
    put(t, 1);
    put(t, 2);
    put(t, 3); /* evicts 1 */
    dy_kv_tier_drop_bad(t, dy_kv_tier_find(t, 2));
    dy_kv_event ev[16];
    int n = dy_kv_tier_take_events(t, ev, 16);
    assert_int_equal(n, 5); /* stored 1, stored 2, removed 1, stored 3, removed 2 */
    int held[4] = {0};
    for (int i = 0; i < n; i++) {
        assert_int_equal(ev[i].tier, DY_KV_TIER_HOST);
        held[ev[i].hash] += ev[i].kind == DY_KV_EV_STORED ? 1 : -1;
    }
    assert_int_equal(held[1], 0);
    assert_int_equal(held[2], 0);
    assert_int_equal(held[3], 1);
    assert_int_equal(ev[3].parent, 2);
    assert_int_equal(dy_kv_tier_snapshot(t, ev, 0), -1);
    assert_int_equal(dy_kv_tier_snapshot(t, ev, 16), 1);
    assert_true(ev[0].hash == 3 && ev[0].kind == DY_KV_EV_STORED);
    /* Overflow: more changes than the log holds between two takes. */
    for (uint64_t h = 10; h < 200; h++)
        put(t, h);
    assert_true(dy_kv_tier_events_overflowed(t));
    dy_kv_tier_snapshot(t, ev, 16);
    assert_false(dy_kv_tier_events_overflowed(t));
    dy_kv_tier_free(t);
}

static void test_load_or_recompute(void **st)
{
    (void)st;
    dy_kv_rate up[DY_KV_N_TIERS] = {{0}}, prefill = {0};
    int blocks[DY_KV_N_TIERS] = {0, 4, 2};
    /* Nothing measured yet: the load is taken (and measures the tier). */
    dy_kv_choice c = dy_kv_choose(up, blocks, 0, 96, &prefill);
    assert_true(c.load && c.load_s == 0 && isinf(c.recompute_s));
    /* The first observations are averaged plainly: 1 ms and 3 ms per block → 2 ms. */
    dy_kv_rate_observe(&up[DY_KV_TIER_HOST], 0.004, 4);
    dy_kv_rate_observe(&up[DY_KV_TIER_HOST], 0.003, 1);
    assert_true(fabs(up[DY_KV_TIER_HOST].mean - 0.002) < 1e-12);
    dy_kv_rate_observe(&up[DY_KV_TIER_DISK], 0.010, 1);
    dy_kv_rate_observe(&prefill, 0.096, 96);  /* 1 ms per token */
    dy_kv_rate_observe(&prefill, 1.0, 0);     /* no units: ignored */
    assert_int_equal(prefill.n, 1);
    c = dy_kv_choose(up, blocks, 0.001, 96, &prefill);
    assert_true(fabs(c.load_s - (0.001 + 4 * 0.002 + 2 * 0.010)) < 1e-12);
    assert_true(fabs(c.recompute_s - 0.096) < 1e-12);
    assert_true(c.load);
    /* A long queue ahead of the copies makes recomputing cheaper. */
    c = dy_kv_choose(up, blocks, 0.2, 96, &prefill);
    assert_false(c.load);
    /* The settled mean follows a change of rate. */
    for (int i = 0; i < 200; i++)
        dy_kv_rate_observe(&up[DY_KV_TIER_HOST], 0.010, 1);
    assert_true(fabs(up[DY_KV_TIER_HOST].mean - 0.010) < 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_and_find),
        cmocka_unit_test(test_lru_and_pins),
        cmocka_unit_test(test_bad_and_clear),
        cmocka_unit_test(test_events_and_snapshot),
        cmocka_unit_test(test_load_or_recompute),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
