/* test_plan_quality.c — the quality objective's choice (src/plan/quality.h) on hand-made
 * points: the cheapest configuration that reaches the accuracy, on one task and on every task
 * at once (the lowest accuracy binds, the mean cost counts, a configuration missing a task is
 * out), pass@k only with a verifier, the latency limit, none that reaches it, and the
 * frontier. */
#include "testutil.h"
#include "plan/quality.h"

#include <math.h>
#include <string.h>

static dy_quality_point pt(const char *model, const char *task, const char *method, int k,
                           double acc, double core_s, double p90_ms)
{
    dy_quality_point p = {.k = k, .one_request = true, .problems = 100, .accuracy = acc,
                          .core_seconds = core_s, .latency_ms_p90 = p90_ms, .params = 1e5};
    strcpy(p.model, model);
    strcpy(p.size, model[0] == 's' ? "s" : "m");
    strcpy(p.type, "f32");
    strcpy(p.kv_type, "f32");
    strcpy(p.task, task);
    strcpy(p.method, method);
    return p;
}

/* Small model s (cost 1 a sample), bigger m (cost 4): s reaches m's greedy 0.6 on add
 * only by majority of 4; pass@2 of s reaches it cheaper but needs a checker. */
static int fixture(dy_quality_point *p)
{
    int n = 0;
    p[n++] = pt("s", "add", "greedy", 1, 0.40, 1.0, 10);
    p[n++] = pt("s", "add", "majority_server", 4, 0.62, 3.0, 20);
    p[n++] = pt("s", "add", "pass", 2, 0.65, 1.8, 15);
    p[n++] = pt("m", "add", "greedy", 1, 0.60, 4.0, 12);
    p[n++] = pt("s", "sort", "greedy", 1, 0.90, 1.0, 10);
    p[n++] = pt("s", "sort", "majority_server", 4, 0.95, 3.0, 20);
    p[n++] = pt("m", "sort", "greedy", 1, 0.99, 4.0, 12);
    /* s's pass@2 was measured on add only: it is no candidate for every task at once */
    return n;
}

static const dy_quality_point *chosen(const dy_quality_point *pts, int n, dy_quality_goal g)
{
    dy_quality_candidate c[16];
    const int nc = dy_quality_candidates(pts, n, &g, c, 16);
    const int best = dy_quality_choose(c, nc);
    return best < 0 ? NULL : &pts[c[best].first];
}

static void test_one_task(void **state)
{
    (void)state;
    dy_quality_point p[16];
    const int n = fixture(p);
    const dy_quality_point *c = chosen(p, n, (dy_quality_goal){.min_accuracy = 0.6, .task = "add"});
    assert_non_null(c);
    assert_string_equal(c->method, "majority_server"); /* 3.0 beats m's 4.0 */
    c = chosen(p, n, (dy_quality_goal){.min_accuracy = 0.6, .task = "add", .allow_verifier = true});
    assert_string_equal(c->method, "pass"); /* with a checker, 1.8 */
    c = chosen(p, n, (dy_quality_goal){.min_accuracy = 0.4, .task = "add"});
    assert_string_equal(c->method, "greedy");
    assert_string_equal(c->model, "s");
    c = chosen(p, n, (dy_quality_goal){.min_accuracy = 0.61, .task = "add", .max_latency_ms = 15});
    assert_null(c); /* majority is too slow, m greedy not accurate enough */
    c = chosen(p, n, (dy_quality_goal){.min_accuracy = 0.7, .task = "add", .allow_verifier = true});
    assert_null(c);
}

static void test_every_task(void **state)
{
    (void)state;
    dy_quality_point p[16];
    const int n = fixture(p);
    dy_quality_goal g = {.min_accuracy = 0.6, .allow_verifier = true};
    dy_quality_candidate c[16];
    const int nc = dy_quality_candidates(p, n, &g, c, 16);
    assert_int_equal(nc, 3); /* s greedy, s majority@4, m greedy; not s pass@2 */
    const int best = dy_quality_choose(c, nc);
    assert_int_equal(best, 1);
    assert_string_equal(p[c[best].first].method, "majority_server");
    assert_true(fabs(c[best].accuracy - 0.62) < 1e-12); /* the lower of add and sort */
    assert_true(fabs(c[0].accuracy - 0.40) < 1e-12);
    assert_false(c[0].meets);
    g.min_accuracy = 0.95; /* majority's add (0.62) fails it; m's add (0.60) too */
    assert_null(chosen(p, n, g));
}

static void test_frontier(void **state)
{
    (void)state;
    dy_quality_point p[16];
    const int n = fixture(p);
    dy_quality_goal g = {.min_accuracy = 0.0, .task = "add", .allow_verifier = true};
    dy_quality_candidate c[16];
    bool front[16];
    const int nc = dy_quality_candidates(p, n, &g, c, 16);
    assert_int_equal(nc, 4);
    /* by cost: s greedy 1.0, s pass@2 1.8, s majority@4 3.0, m greedy 4.0 */
    assert_true(c[0].core_seconds <= c[1].core_seconds && c[1].core_seconds <= c[2].core_seconds);
    assert_int_equal(dy_quality_frontier(c, nc, &g, front), 2);
    assert_true(front[0] && front[1]);
    assert_false(front[2]); /* 0.62 at 3.0 is beaten by pass@2's 0.65 at 1.8 */
    assert_false(front[3]);
    assert_true(dy_quality_needs_verifier("pass"));
    assert_false(dy_quality_needs_verifier("majority"));
}

/* More candidates than room: the count says so, and only cap are written. */
static void test_capacity(void **state)
{
    (void)state;
    dy_quality_point p[16];
    const int n = fixture(p);
    dy_quality_goal g = {.min_accuracy = 0.5, .task = "add", .allow_verifier = true};
    dy_quality_candidate c[2];
    assert_int_equal(dy_quality_candidates(p, n, &g, c, 2), 4);
}

/* The same model and method with another KV type is another configuration. */
static void test_kv_type(void **state)
{
    (void)state;
    dy_quality_point p[2] = {pt("s", "add", "greedy", 1, 0.50, 1.0, 10),
                             pt("s", "add", "greedy", 1, 0.45, 0.8, 10)};
    strcpy(p[1].kv_type, "q8_0");
    dy_quality_goal g = {.min_accuracy = 0.45, .task = "add"};
    dy_quality_candidate c[2];
    assert_int_equal(dy_quality_candidates(p, 2, &g, c, 2), 2);
    assert_string_equal(p[c[dy_quality_choose(c, 2)].first].kv_type, "q8_0");
    g.min_accuracy = 0.5;
    assert_string_equal(p[c[0].first].kv_type, "q8_0"); /* cheapest first */
    dy_quality_candidates(p, 2, &g, c, 2);
    assert_string_equal(p[c[dy_quality_choose(c, 2)].first].kv_type, "f32");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_task),
        cmocka_unit_test(test_every_task),
        cmocka_unit_test(test_frontier),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_kv_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
