/* test_stop.c — stop strings over streamed pieces: text is released as soon as it cannot
 * be part of a stop string; a stop split across pieces is caught; text after it is dropped. */
#include "testutil.h"
#include "engine/stop.h"

#include <string.h>

/* Feeds the pieces, returns everything released (including the final flush). */
static void run(const char *const *stops, int n_stops, const char *const *pieces, int n,
                char *out, bool *stopped)
{
    dy_stop s;
    assert_true(dy_stop_init(&s, stops, n_stops));
    out[0] = 0;
    const char *o;
    size_t ol;
    *stopped = false;
    for (int i = 0; i < n && !*stopped; i++) {
        *stopped = dy_stop_feed(&s, pieces[i], strlen(pieces[i]), &o, &ol);
        strncat(out, o, ol);
    }
    dy_stop_flush(&s, &o, &ol);
    strncat(out, o, ol);
    dy_stop_free(&s);
}

static void test_no_stops_passes_through(void **st)
{
    (void)st;
    const char *p[] = {"Once", " upon", " a time"};
    char out[128];
    bool stopped;
    run(NULL, 0, p, 3, out, &stopped);
    assert_string_equal(out, "Once upon a time");
    assert_false(stopped);
}

static void test_stop_across_pieces(void **st)
{
    (void)st;
    const char *stops[] = {"\n\n", "The end"};
    const char *p[] = {"Hello", " there.", "\n", "\nMore", " text"};
    char out[128];
    bool stopped;
    run(stops, 2, p, 5, out, &stopped);
    assert_string_equal(out, "Hello there.");
    assert_true(stopped);
    const char *q[] = {"It was", " The e", "nd!", " after"};
    run(stops, 2, q, 4, out, &stopped);
    assert_string_equal(out, "It was ");
    assert_true(stopped);
}

static void test_partial_is_released_when_broken(void **st)
{
    (void)st;
    const char *stops[] = {"STOP"};
    dy_stop s;
    assert_true(dy_stop_init(&s, stops, 1));
    const char *o;
    size_t ol;
    assert_false(dy_stop_feed(&s, "a ST", 4, &o, &ol));
    assert_int_equal(ol, 2); /* "ST" held back */
    assert_false(dy_stop_feed(&s, "x", 1, &o, &ol));
    assert_int_equal(ol, 3); /* "STx" released: it cannot become STOP */
    assert_memory_equal(o, "STx", 3);
    dy_stop_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_stops_passes_through),
        cmocka_unit_test(test_stop_across_pieces),
        cmocka_unit_test(test_partial_is_released_when_broken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
