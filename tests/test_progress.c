/* test_progress.c — util/progress.h: the line's wording for each unit (percentage, amounts,
 * rate, time left; an unknown total shows the time so far), its cut to the terminal width,
 * the throttle, and the reporter's output: nothing at all when off, redraws in place ('\r',
 * erase to the end of the line) at most every DY_PROGRESS_INTERVAL_S of the time passed in,
 * and the line erased when done. */
#include "testutil.h"
#include "util/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fmt(dy_progress_figures f)
{
    static char line[DY_PROGRESS_WIDTH + 1];
    size_t n = dy_progress_format(line, sizeof line, &f);
    assert_int_equal(n, strlen(line));
    return line;
}

static void test_format_count(void **state)
{
    (void)state;
    /* 450 of 1000 in 9 s: 50/s, 550 left -> 11 s. */
    assert_string_equal(fmt((dy_progress_figures){"dyad bench", DY_PROGRESS_COUNT, "requests",
                                                  450, 1000, 9, "2 failed"}),
                        "dyad bench   45%  450/1000 requests  50.0/s  ETA 0:11  2 failed");
    /* Fast rates lose their decimals; done is shown as 100% with nothing left. */
    assert_string_equal(fmt((dy_progress_figures){"x", DY_PROGRESS_COUNT, "reps", 3000, 3000,
                                                  10, NULL}),
                        "x  100%  3000/3000 reps  300/s  ETA 0:00");
    /* Over an hour left. */
    assert_string_equal(fmt((dy_progress_figures){"x", DY_PROGRESS_COUNT, "", 1, 1001, 5,
                                                  NULL}),
                        "x    0%  1/1001  0.2/s  ETA 1:23:20");
}

static void test_format_bytes(void **state)
{
    (void)state;
    /* 1.5 GiB of 3 GiB in 6 s: 256 MiB/s, 6 s left. */
    const double gib = 1024.0 * 1024 * 1024;
    assert_string_equal(fmt((dy_progress_figures){"dyad convert", DY_PROGRESS_BYTES, NULL,
                                                  1.5 * gib, 3 * gib, 6, "tensor 80/201"}),
                        "dyad convert   50%  1.5/3.0 GiB  256.0 MiB/s  ETA 0:06  tensor 80/201");
    /* Small files in KiB; the amounts take the total's prefix. */
    assert_string_equal(fmt((dy_progress_figures){"g", DY_PROGRESS_BYTES, NULL, 512, 2048, 1,
                                                  NULL}),
                        "g   25%  0.5/2.0 KiB  512.0 B/s  ETA 0:03");
}

static void test_format_seconds_and_unknown_total(void **state)
{
    (void)state;
    assert_string_equal(fmt((dy_progress_figures){"dyad sim run", DY_PROGRESS_SECONDS, NULL,
                                                  300, 600, 2, NULL}),
                        "dyad sim run   50%  300.0/600.0 s  150 s/s  ETA 0:02");
    /* Without a total: no percentage, no time left, the time so far instead. */
    assert_string_equal(fmt((dy_progress_figures){"dyad sim run", DY_PROGRESS_COUNT,
                                                  "requests", 40, 0, 75, "t=12.5 s"}),
                        "dyad sim run  40 requests  0.5/s  1:15 elapsed  t=12.5 s");
}

static void test_format_before_any_rate(void **state)
{
    (void)state;
    /* At the start (no time, or nothing done) there is no rate and so no time left. */
    assert_string_equal(fmt((dy_progress_figures){"c", DY_PROGRESS_COUNT, "tensors", 0, 20, 0,
                                                  NULL}),
                        "c    0%  0/20 tensors  ETA --:--");
    assert_string_equal(fmt((dy_progress_figures){"c", DY_PROGRESS_COUNT, "tensors", 5, 20,
                                                  0.01, NULL}),
                        "c   25%  5/20 tensors  ETA --:--");
    /* Nor in the first half second, when start-up costs make the rate meaningless. */
    assert_string_equal(fmt((dy_progress_figures){"c", DY_PROGRESS_COUNT, "tensors", 1, 20,
                                                  0.45, NULL}),
                        "c    5%  1/20 tensors  ETA --:--");
    assert_string_equal(fmt((dy_progress_figures){"c", DY_PROGRESS_COUNT, "tensors", 1, 20,
                                                  0.5, NULL}),
                        "c    5%  1/20 tensors  2.0/s  ETA 0:10");
    /* Done past the total (a bound that was an estimate): clamped at 100%. */
    assert_string_equal(fmt((dy_progress_figures){"c", DY_PROGRESS_COUNT, NULL, 30, 20, 3,
                                                  NULL}),
                        "c  100%  30/20  10.0/s  ETA 0:00");
}

static void test_format_cut_to_width(void **state)
{
    (void)state;
    char note[200];
    memset(note, 'n', sizeof note - 1);
    note[sizeof note - 1] = 0;
    const char *line = fmt((dy_progress_figures){"dyad bench", DY_PROGRESS_COUNT, "requests",
                                                 1, 2, 1, note});
    assert_int_equal(strlen(line), DY_PROGRESS_WIDTH);
    assert_memory_equal(line, "dyad bench   50%  1/2 requests", 30);
    /* A small buffer gets what fits, NUL-terminated. */
    char small[8];
    dy_progress_figures f = {"dyad convert", DY_PROGRESS_COUNT, NULL, 1, 2, 1, NULL};
    assert_int_equal(dy_progress_format(small, sizeof small, &f), 7);
    assert_string_equal(small, "dyad co");
}

static void test_due(void **state)
{
    (void)state;
    assert_true(dy_progress_due(false, 0, 0));     /* the first line at once */
    assert_false(dy_progress_due(true, 10, 10.1)); /* then not again so soon */
    assert_false(dy_progress_due(true, 10, 10 + DY_PROGRESS_INTERVAL_S * 0.99));
    assert_true(dy_progress_due(true, 10, 10 + DY_PROGRESS_INTERVAL_S));
}

/* The reporter's whole output into a string (freed by the caller). */
static char *read_all(FILE *f)
{
    long n = ftell(f);
    assert_true(n >= 0);
    char *s = calloc(1, (size_t)n + 1);
    rewind(f);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    return s;
}

static void test_off_writes_nothing(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    dy_progress *p = dy_progress_new(f, false, "dyad convert", DY_PROGRESS_BYTES, NULL, 100, 0);
    assert_null(p);
    /* Every call takes NULL. */
    dy_progress_set_total(p, 5);
    assert_false(dy_progress_wants(p, 1));
    assert_false(dy_progress_update(p, 1, "x", 1));
    dy_progress_clear(p);
    dy_progress_finish(p);
    assert_int_equal(ftell(f), 0);
    fclose(f);
}

static void test_reporter_throttles_and_erases(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    dy_progress *p = dy_progress_new(f, true, "t", DY_PROGRESS_COUNT, "items", 10, 100);
    assert_non_null(p);
    assert_true(dy_progress_wants(p, 100));
    assert_true(dy_progress_update(p, 0, NULL, 100));      /* drawn at once */
    assert_false(dy_progress_wants(p, 100.1));
    assert_false(dy_progress_update(p, 1, NULL, 100.1));   /* too soon: nothing */
    assert_false(dy_progress_update(p, 2, NULL, 100.2));
    assert_true(dy_progress_update(p, 5, "half", 101));    /* 5/s, 1 s left */
    dy_progress_clear(p);                                  /* erased: the next one at once */
    assert_true(dy_progress_update(p, 6, NULL, 101.05));
    dy_progress_set_total(p, 0);                           /* unknown from here */
    assert_true(dy_progress_update(p, 8, NULL, 102));
    dy_progress_finish(p);
    char *s = read_all(f);
    assert_string_equal(s, "\rt    0%  0/10 items  ETA --:--\033[K"
                           "\rt   50%  5/10 items  5.0/s  ETA 0:01  half\033[K"
                           "\r\033[K"
                           "\rt   60%  6/10 items  5.7/s  ETA 0:01\033[K"
                           "\rt  8 items  4.0/s  0:02 elapsed\033[K"
                           "\r\033[K");
    free(s);
    fclose(f);
}

static void test_finish_without_a_line_writes_nothing(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    dy_progress *p = dy_progress_new(f, true, "t", DY_PROGRESS_COUNT, NULL, 1, 0);
    assert_non_null(p);
    dy_progress_clear(p); /* nothing drawn: nothing to erase */
    dy_progress_finish(p);
    assert_int_equal(ftell(f), 0);
    fclose(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_count),
        cmocka_unit_test(test_format_bytes),
        cmocka_unit_test(test_format_seconds_and_unknown_total),
        cmocka_unit_test(test_format_before_any_rate),
        cmocka_unit_test(test_format_cut_to_width),
        cmocka_unit_test(test_due),
        cmocka_unit_test(test_off_writes_nothing),
        cmocka_unit_test(test_reporter_throttles_and_erases),
        cmocka_unit_test(test_finish_without_a_line_writes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
