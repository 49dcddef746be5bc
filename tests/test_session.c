/* test_session.c — the frontend's conversations: a next turn goes back to the worker of the
 * last one; the time from an answer that called a tool to the next turn is that tool's
 * duration, learned as a mean; a full table forgets the least recently ended; a dead worker's
 * sessions lose their place. */
#include "testutil.h"
#include "route/session.h"

#include <math.h>

static void test_affinity_and_learning(void **st)
{
    (void)st;
    assert_null(dy_sessions_new(0, 4));
    dy_sessions *s = dy_sessions_new(4, 2);
    const uint64_t grep = 101, web = 202, other = 303;
    assert_int_equal(dy_sessions_arrive(s, 1, 0.0), -1);          /* new */
    assert_true(dy_sessions_end(s, 1, 3, grep, 1.0) < 0);         /* grep never timed */
    assert_int_equal(dy_sessions_worker(s, 1), 3);
    assert_int_equal(dy_sessions_worker(s, 9), -1);
    assert_int_equal(dy_sessions_arrive(s, 1, 3.0), 3);           /* grep took 2 s */
    int timed;
    assert_true(fabs(dy_sessions_tool_mean(s, grep, &timed) - 2.0) < 1e-12 && timed == 1);
    assert_true(fabs(dy_sessions_end(s, 1, 3, grep, 4.0) - 2.0) < 1e-12);
    assert_int_equal(dy_sessions_arrive(s, 1, 8.0), 3);           /* 4 s this time */
    assert_true(fabs(dy_sessions_tool_mean(s, grep, &timed) - 3.0) < 1e-12 && timed == 2);
    /* An answer with no call teaches nothing; a turn arriving twice counts once. */
    dy_sessions_end(s, 1, 3, 0, 9.0);
    assert_int_equal(dy_sessions_arrive(s, 1, 20.0), 3);
    assert_int_equal(dy_sessions_arrive(s, 1, 30.0), 3);
    dy_sessions_tool_mean(s, grep, &timed);
    assert_int_equal(timed, 2);
    /* Two tools fit; a third is not learned. */
    dy_sessions_end(s, 2, 0, web, 0.0);
    dy_sessions_arrive(s, 2, 1.0);
    dy_sessions_end(s, 2, 0, other, 1.0);
    dy_sessions_arrive(s, 2, 5.0);
    assert_true(dy_sessions_tool_mean(s, other, &timed) < 0 && timed == 0);
    assert_true(dy_sessions_tool_mean(s, web, &timed) == 1.0);
    dy_sessions_free(s);
}

static void test_forgetting(void **st)
{
    (void)st;
    dy_sessions *s = dy_sessions_new(2, 1);
    dy_sessions_end(s, 1, 0, 0, 1.0);
    dy_sessions_end(s, 2, 1, 0, 2.0);
    dy_sessions_end(s, 1, 0, 0, 3.0);  /* 1 ended most recently: 2 is the oldest */
    dy_sessions_end(s, 3, 1, 0, 4.0);  /* full: 2 is forgotten */
    assert_int_equal(dy_sessions_count(s), 2);
    assert_int_equal(dy_sessions_arrive(s, 2, 5.0), -1);
    assert_int_equal(dy_sessions_arrive(s, 1, 5.0), 0);
    dy_sessions_forget_worker(s, 1);
    assert_int_equal(dy_sessions_arrive(s, 3, 5.0), -1);
    dy_sessions_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_affinity_and_learning),
        cmocka_unit_test(test_forgetting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
