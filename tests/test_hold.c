/* test_hold.c — the tool-call hold's clock: a prefetch falls due at return − load time −
 * margin and only once; a new expectation re-arms it; an unexpected session never falls due;
 * the next turn, the TTL and a full table each end a hold and hand it back whole. */
#include "testutil.h"
#include "kv/hold.h"

static void test_prefetch_falls_due_once(void **st)
{
    (void)st;
    dy_holds_config c = {.ttl_s = 60, .margin_s = 0.1, .max_sessions = 4};
    dy_holds *h = dy_holds_new(&c);
    uint64_t hs[3] = {11, 12, 13};
    dy_hold ended;
    assert_non_null(dy_holds_begin(h, 7, hs, 3, 100.0, &ended));
    assert_int_equal(ended.key, 0);
    const dy_hold *due[4];
    assert_int_equal(dy_holds_due(h, 1e9, 0.01, 0.01, due, 4), 0); /* no return time yet */
    assert_true(dy_holds_expect(h, 7, 105.0));
    assert_false(dy_holds_expect(h, 8, 105.0));                /* not held */
    /* due at 105 − 3 × 0.5 − 0.1 = 103.4 */
    assert_int_equal(dy_holds_due(h, 103.39, 0.5, 0.5, due, 4), 0);
    assert_int_equal(dy_holds_due(h, 103.41, 0.5, 0.5, due, 4), 1);
    assert_true(due[0]->key == 7 && due[0]->n == 3 && due[0]->hashes[2] == 13);
    assert_int_equal(dy_holds_due(h, 104, 0.5, 0.5, due, 4), 0);  /* started once */
    assert_true(dy_holds_expect(h, 7, 200.0));                /* a later return: again */
    assert_int_equal(dy_holds_due(h, 198.3, 0.5, 0.5, due, 4), 0);
    assert_int_equal(dy_holds_due(h, 198.5, 0.5, 0.5, due, 4), 1);
    dy_holds_free(h);
}

/* A long wait parks once; its prefetch is then timed by the disk's rate. */
static void test_long_wait_parks(void **st)
{
    (void)st;
    dy_holds_config c = {.ttl_s = 600, .margin_s = 0.1, .max_sessions = 4};
    dy_holds *h = dy_holds_new(&c);
    uint64_t hs[4] = {21, 22, 23, 24};
    dy_hold ended;
    const dy_hold *out[4];
    assert_non_null(dy_holds_begin(h, 1, hs, 4, 100.0, &ended));
    assert_non_null(dy_holds_begin(h, 2, hs, 2, 100.0, &ended));
    assert_int_equal(dy_holds_long(h, 100.0, 30, out, 4), 0); /* no return time yet */
    assert_true(dy_holds_expect(h, 1, 160.0));                /* 60 s away: long */
    assert_true(dy_holds_expect(h, 2, 110.0));                /* 10 s away: not */
    assert_int_equal(dy_holds_long(h, 100.0, 30, out, 4), 1);
    assert_true(out[0]->key == 1 && out[0]->parked);
    assert_int_equal(dy_holds_long(h, 100.0, 30, out, 4), 0); /* parked once */
    assert_true(dy_holds_expect(h, 1, 260.0));
    assert_int_equal(dy_holds_long(h, 101.0, 30, out, 4), 0); /* still parked */
    /* hold 1 comes up from disk at 0.5 s a block: due at 260 − 4 × 0.5 − 0.1 = 257.9;
     * hold 2 from host at 0.01 s: due at 110 − 0.02 − 0.1 = 109.88 */
    assert_int_equal(dy_holds_due(h, 109.87, 0.01, 0.5, out, 4), 0);
    assert_int_equal(dy_holds_due(h, 109.89, 0.01, 0.5, out, 4), 1);
    assert_int_equal(out[0]->key, 2);
    assert_int_equal(dy_holds_due(h, 257.8, 0.01, 0.5, out, 4), 0);
    assert_int_equal(dy_holds_due(h, 258.0, 0.01, 0.5, out, 4), 1);
    assert_int_equal(out[0]->key, 1);
    dy_holds_free(h);
}

static void test_holds_end(void **st)
{
    (void)st;
    assert_null(dy_holds_new(&(dy_holds_config){.ttl_s = 0, .max_sessions = 1}));
    dy_holds_config c = {.ttl_s = 10, .margin_s = 0, .max_sessions = 2};
    dy_holds *h = dy_holds_new(&c);
    uint64_t a[2] = {1, 2}, b[1] = {3}, d[1] = {4};
    dy_hold ended, out;
    dy_holds_begin(h, 1, a, 2, 0.0, &ended);
    dy_holds_begin(h, 2, b, 1, 1.0, &ended);
    dy_holds_begin(h, 3, d, 1, 2.0, &ended); /* full: session 1, the oldest, ends */
    assert_true(ended.key == 1 && ended.n == 2 && ended.hashes[1] == 2);
    assert_int_equal(dy_holds_count(h), 2);
    dy_holds_begin(h, 2, a, 2, 3.0, &ended); /* session 2's next turn replaces its hold */
    assert_true(ended.key == 2 && ended.n == 1 && ended.hashes[0] == 3);
    assert_true(dy_holds_find(h, 2)->n == 2);
    assert_true(dy_holds_end(h, 3, &out));   /* its next turn arrived */
    assert_true(out.key == 3 && out.hashes[0] == 4);
    assert_false(dy_holds_end(h, 3, &out));
    assert_false(dy_holds_expire(h, 12.9, &out));
    assert_true(dy_holds_expire(h, 13.0, &out)); /* began at 3, TTL 10 */
    assert_int_equal(out.key, 2);
    assert_int_equal(dy_holds_count(h), 0);
    dy_holds_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefetch_falls_due_once),
        cmocka_unit_test(test_long_wait_parks),
        cmocka_unit_test(test_holds_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
