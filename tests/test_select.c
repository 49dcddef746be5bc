/* test_select.c — choosing among samples: answers extracted by the default "last number" rule
 * and by a capture group, the vote table on a crafted case, settling early once the lead
 * cannot be overturned, ties, abstentions, and ranking by mean log-probability. */
#include "testutil.h"
#include "serve/front/select.h"

#include <math.h>
#include <string.h>

static void add(dy_vote *v, int i, const char *text)
{
    dy_vote_add(v, i, text, strlen(text));
}

static void test_default_takes_the_last_number(void **st)
{
    (void)st;
    char err[128];
    dy_vote *v = dy_vote_new(NULL, 5, err, sizeof err);
    assert_non_null(v);
    add(v, 0, "3 apples and 4 pears make 7.");
    add(v, 1, "The total is 1,250 dollars");
    add(v, 2, "It drops to -3.5 degrees\n");
    add(v, 3, "no digits here");
    add(v, 4, "");
    assert_string_equal(dy_vote_answer(v, 0), "7");
    assert_string_equal(dy_vote_answer(v, 1), "1250");
    assert_string_equal(dy_vote_answer(v, 2), "-3.5");
    assert_null(dy_vote_answer(v, 3));
    assert_null(dy_vote_answer(v, 4));
    dy_vote_free(v);
}

static void test_capture_group(void **st)
{
    (void)st;
    char err[128];
    dy_vote *v = dy_vote_new("answer: *([A-D])", 3, err, sizeof err);
    assert_non_null(v);
    add(v, 0, "I think the answer: C, not B");
    add(v, 1, "answer:B");
    add(v, 2, "Answer: A"); /* case matters: no match */
    assert_string_equal(dy_vote_answer(v, 0), "C");
    assert_string_equal(dy_vote_answer(v, 1), "B");
    assert_null(dy_vote_answer(v, 2));
    dy_vote_free(v);
    /* Without a group the whole match is the answer; a bad regex is an error. */
    v = dy_vote_new("[0-9]+ cats", 1, err, sizeof err);
    add(v, 0, "we saw 12 cats today");
    assert_string_equal(dy_vote_answer(v, 0), "12 cats");
    dy_vote_free(v);
    assert_null(dy_vote_new("(unclosed", 2, err, sizeof err));
    assert_non_null(strstr(err, "answer_regex"));
}

/* Seven samples: 42 ×3 (samples 1, 4, 6), 41 ×2 (0, 2), 40 ×1 (5), one without a number. */
static void test_vote_table(void **st)
{
    (void)st;
    char err[128];
    dy_vote *v = dy_vote_new(NULL, 7, err, sizeof err);
    const char *texts[7] = {"so 41", "it is 42", "41!", "I don't know", "42", "40", "= 42"};
    for (int i = 0; i < 7; i++)
        add(v, i, texts[i]);
    assert_true(dy_vote_settled(v));
    assert_string_equal(dy_vote_winner(v), "42");
    assert_int_equal(dy_vote_chosen(v), 1);
    json_t *j = dy_vote_json(v);
    assert_string_equal(json_string_value(json_object_get(j, "winner")), "42");
    assert_false(json_is_true(json_object_get(j, "settled_early")));
    json_t *votes = json_object_get(j, "votes");
    assert_int_equal(json_object_size(votes), 3);
    json_t *e42 = json_object_get(votes, "42");
    assert_int_equal(json_integer_value(json_object_get(e42, "count")), 3);
    json_t *s = json_object_get(e42, "samples");
    assert_int_equal(json_array_size(s), 3);
    assert_int_equal(json_integer_value(json_array_get(s, 0)), 1);
    assert_int_equal(json_integer_value(json_array_get(s, 2)), 6);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(votes, "41"), "count")), 2);
    json_decref(j);
    dy_vote_free(v);
}

/* Five samples: after three identical answers, two outstanding votes cannot overturn it. */
static void test_settles_early(void **st)
{
    (void)st;
    char err[128];
    dy_vote *v = dy_vote_new(NULL, 5, err, sizeof err);
    add(v, 3, "7");
    add(v, 0, "7");
    assert_false(dy_vote_settled(v));
    add(v, 1, "8");
    assert_false(dy_vote_settled(v)); /* 2 vs 1 with 2 out */
    add(v, 4, "7");
    assert_true(dy_vote_settled(v)); /* 3 vs 1 with 1 out */
    dy_vote_free(v);

    v = dy_vote_new(NULL, 5, err, sizeof err);
    add(v, 0, "7");
    add(v, 1, "7");
    add(v, 2, "7");
    assert_true(dy_vote_settled(v)); /* 3 > 0 + 2 */
    json_t *j = dy_vote_json(v);
    assert_true(json_is_true(json_object_get(j, "settled_early")));
    json_decref(j);
    assert_int_equal(dy_vote_chosen(v), 0);
    dy_vote_abstain(v, 3); /* the cancelled rest */
    dy_vote_abstain(v, 4);
    assert_string_equal(dy_vote_winner(v), "7");
    dy_vote_free(v);
}

/* Equal counts: the answer given by the lowest sample index wins. Nobody answering: sample 0. */
static void test_ties_and_no_answers(void **st)
{
    (void)st;
    char err[128];
    dy_vote *v = dy_vote_new(NULL, 4, err, sizeof err);
    add(v, 0, "none");
    add(v, 3, "5");
    add(v, 1, "6");
    add(v, 2, "7");
    add(v, 2, "5"); /* counted once: sample 2 already voted 7 */
    assert_string_equal(dy_vote_winner(v), "6");
    assert_int_equal(dy_vote_chosen(v), 1);
    dy_vote_free(v);
    v = dy_vote_new(NULL, 2, err, sizeof err);
    add(v, 0, "x");
    dy_vote_abstain(v, 1);
    assert_true(dy_vote_settled(v));
    assert_null(dy_vote_winner(v));
    assert_int_equal(dy_vote_chosen(v), 0);
    dy_vote_free(v);
}

/* A pattern that backtracks exponentially stops at the match limit: the sample abstains and
 * the vote reports why, quickly, instead of running for seconds; invalid UTF-8 is no answer,
 * not an error. */
static void test_match_limit(void **st)
{
    (void)st;
    char err[128], text[4001];
    for (int i = 0; i < 4000; i++)
        text[i] = "abc de"[i % 6];
    text[4000] = 0;
    dy_vote *v = dy_vote_new("^(([a-z ])+.)+[A-Z]([a-z])+$", 3, err, sizeof err);
    assert_non_null(v);
    add(v, 0, "\xff\xfe not text");
    assert_null(dy_vote_error(v));
    add(v, 1, text);
    assert_null(dy_vote_answer(v, 1));
    assert_non_null(dy_vote_error(v));
    assert_non_null(strstr(dy_vote_error(v), "limit"));
    assert_non_null(strstr(dy_vote_error(v), "sample 1"));
    add(v, 2, "a b Cd"); /* still matches what it can */
    assert_string_equal(dy_vote_answer(v, 2), "a b"); /* group 1, trimmed */
    dy_vote_free(v);
}

static void test_rank_by_mean_logprob(void **st)
{
    (void)st;
    float a[3] = {-0.5f, -1.0f, -1.5f};
    assert_true(fabs(dy_mean_logprob(a, 3) + 1.0) < 1e-9);
    assert_true(isinf(dy_mean_logprob(a, 0)));
    double score[6] = {-1.0, -0.2, NAN, -0.2, -INFINITY, -3.0};
    int out[6];
    dy_select_best(score, 6, 6, out);
    int want[6] = {1, 3, 0, 5, 2, 4};
    assert_memory_equal(out, want, sizeof want);
    dy_select_best(score, 6, 2, out);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_takes_the_last_number),
        cmocka_unit_test(test_capture_group),
        cmocka_unit_test(test_vote_table),
        cmocka_unit_test(test_settles_early),
        cmocka_unit_test(test_ties_and_no_answers),
        cmocka_unit_test(test_match_limit),
        cmocka_unit_test(test_rank_by_mean_logprob),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
