/* test_predict.c — the planner's load predictors (src/plan/predict.h) against hand
 * computations: last value, the mean of a window (before and after it fills), Holt's trend,
 * the local-level Kalman filter; no forecast below 0; bad configurations. */
#include "testutil.h"
#include "plan/predict.h"

#include <math.h>
#include <string.h>

#define assert_near(a, b) assert_true(fabs((a) - (b)) < 1e-9)

static dy_predictor made(dy_predict_config c)
{
    char err[128];
    assert_int_equal(dy_predict_check(&c, err, sizeof err), 0);
    dy_predictor p;
    dy_predict_init(&p, &c);
    return p;
}

static void feed(dy_predictor *p, const double *x, int n)
{
    for (int i = 0; i < n; i++)
        dy_predict_observe(p, x[i]);
}

static void test_last_and_mean(void **state)
{
    (void)state;
    const double x[] = {1, 2, 3, 10};
    dy_predictor p = made((dy_predict_config){.kind = DY_PREDICT_LAST});
    assert_near(dy_predict_next(&p), 0); /* nothing seen */
    feed(&p, x, 3);
    assert_near(dy_predict_next(&p), 3);
    p = made((dy_predict_config){.kind = DY_PREDICT_MEAN, .window = 2});
    feed(&p, x, 1);
    assert_near(dy_predict_next(&p), 1); /* the window is not full: the mean of what was seen */
    feed(&p, x + 1, 2);
    assert_near(dy_predict_next(&p), 2.5); /* (2 + 3) / 2 */
    feed(&p, x + 3, 1);
    assert_near(dy_predict_next(&p), 6.5); /* (3 + 10) / 2 */
}

/* α = β = 0.5: after 10 the level is 10; after 20 it is 0.5·20 + 0.5·10 = 15 and the trend
 * 0.5·(15 − 10) = 2.5, so the forecast is 17.5; after 30: level 0.5·30 + 0.5·17.5 = 23.75,
 * trend 0.5·8.75 + 0.5·2.5 = 5.625, forecast 29.375. */
static void test_holt(void **state)
{
    (void)state;
    dy_predictor p = made((dy_predict_config){.kind = DY_PREDICT_HOLT, .alpha = 0.5, .beta = 0.5});
    dy_predict_observe(&p, 10);
    assert_near(dy_predict_next(&p), 10);
    dy_predict_observe(&p, 20);
    assert_near(dy_predict_next(&p), 17.5);
    dy_predict_observe(&p, 30);
    assert_near(dy_predict_next(&p), 29.375);
    assert_near(dy_predict_ahead(&p, 3), 23.75 + 3 * 5.625); /* the trend, three steps */
    /* A falling series is never forecast below 0. */
    const double down[] = {100, 50, 5, 0, 0};
    p = made((dy_predict_config){.kind = DY_PREDICT_HOLT, .alpha = 1, .beta = 1});
    feed(&p, down, 3); /* level 5, trend −45 */
    assert_near(dy_predict_next(&p), 0);
}

/* q = r = 1: the first value sets the estimate (variance r = 1); the next prior has variance 2,
 * gain 2/3: 10 + (2/3)·10 = 16.67, variance 2/3; then prior 5/3, gain 5/8: 16.67 + (5/8)·(20 −
 * 16.67) = 18.75. */
static void test_kalman(void **state)
{
    (void)state;
    dy_predictor p = made((dy_predict_config){.kind = DY_PREDICT_KALMAN, .q = 1, .r = 1});
    dy_predict_observe(&p, 10);
    assert_near(dy_predict_next(&p), 10);
    dy_predict_observe(&p, 20);
    assert_near(dy_predict_next(&p), 10 + 20.0 / 3);
    dy_predict_observe(&p, 20);
    assert_near(dy_predict_next(&p), 10 + 20.0 / 3 + 5.0 / 8 * (20 - (10 + 20.0 / 3)));
}

static void expect_bad(dy_predict_config c, const char *field)
{
    char err[128] = "";
    assert_int_equal(dy_predict_check(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, field));
}

static void test_bad_configs(void **state)
{
    (void)state;
    expect_bad((dy_predict_config){.kind = DY_PREDICT_MEAN, .window = 0}, "predict.window");
    expect_bad((dy_predict_config){.kind = DY_PREDICT_MEAN, .window = 65}, "predict.window");
    expect_bad((dy_predict_config){.kind = DY_PREDICT_HOLT, .alpha = 0, .beta = 1},
               "predict.alpha");
    expect_bad((dy_predict_config){.kind = DY_PREDICT_HOLT, .alpha = 1, .beta = 1.5},
               "predict.beta");
    expect_bad((dy_predict_config){.kind = DY_PREDICT_KALMAN, .q = 0, .r = 1}, "predict.q");
    expect_bad((dy_predict_config){.kind = DY_PREDICT_KALMAN, .q = 1, .r = NAN}, "predict.r");
    expect_bad((dy_predict_config){.kind = (dy_predict_kind)9}, "predict.kind");
    assert_string_equal(dy_predict_name(DY_PREDICT_KALMAN), "kalman");
}

/* The command line's spelling: defaults per kind, settings, and what is refused. */
static void test_parse(void **state)
{
    (void)state;
    dy_predict_config c;
    char err[160], text[64];
    assert_int_equal(dy_predict_parse("last", &c, err, sizeof err), 0);
    assert_int_equal(c.kind, DY_PREDICT_LAST);
    assert_int_equal(dy_predict_parse("mean", &c, err, sizeof err), 0);
    assert_int_equal(c.window, 10);
    assert_int_equal(dy_predict_parse("mean:3", &c, err, sizeof err), 0);
    assert_int_equal(c.window, 3);
    assert_int_equal(dy_predict_parse("holt:0.3,0.05", &c, err, sizeof err), 0);
    assert_true(c.kind == DY_PREDICT_HOLT && c.alpha == 0.3 && c.beta == 0.05);
    assert_int_equal(dy_predict_parse("kalman", &c, err, sizeof err), 0);
    assert_true(c.kind == DY_PREDICT_KALMAN && c.q == 0.01 && c.r == 1);
    dy_predict_format(&c, text, sizeof text);
    assert_string_equal(text, "kalman:0.01,1");
    const char *bad[] = {"", "kal", "kalmanx", "last:1", "mean:2.5", "mean:0", "mean:65",
                         "holt:0.5", "holt:0.5,0.1,3", "holt:2,0.1", "kalman:-1,1", "kalman:1,x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (dy_predict_parse(bad[i], &c, err, sizeof err) == 0)
            fail_msg("'%s' was accepted", bad[i]);
    assert_int_equal(dy_predict_parse("mean:0", &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "predict.window"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_last_and_mean),
        cmocka_unit_test(test_holt),
        cmocka_unit_test(test_kalman),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
