/* test_grammar.c — the grammar notation (what it accepts, what it refuses and where), the
 * recognizer (bytes in, sentences accepted, UTF-8 kept whole) and the token masks (equal to
 * trying every token by hand, from every state of random walks, with and without the cache). */
#include "testutil.h"
#include "grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

static dy_grammar *compile(const char *text)
{
    char err[256];
    dy_grammar *g = dy_grammar_parse(text, strlen(text), err, sizeof err);
    if (!g)
        fail_msg("%s: %s", text, err);
    return g;
}

static bool accepts(const dy_grammar *g, const char *s)
{
    return dy_grammar_accepts(g, s, strlen(s));
}

/* The error for a bad grammar, which must contain `want`. */
static void expect_error(const char *text, const char *want)
{
    char err[256];
    dy_grammar *g = dy_grammar_parse(text, strlen(text), err, sizeof err);
    if (g)
        fail_msg("accepted: %s", text);
    if (!strstr(err, want))
        fail_msg("%s: said \"%s\", wanted \"%s\"", text, err, want);
}

static const char *const JSON =
    "root   ::= value\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( ws \",\" ws member )* )? ws \"}\"\n"
    "member ::= string ws \":\" ws value\n"
    "array  ::= \"[\" ws ( value ( ws \",\" ws value )* )? ws \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= [ \\t\\n]{0,4}  # bounded, as a server's would be\n";

static void test_literals_classes_alternatives(void **st)
{
    (void)st;
    dy_grammar *g = compile("root ::= \"ab\" [0-9x] | \"c\"");
    assert_true(accepts(g, "ab7"));
    assert_true(accepts(g, "abx"));
    assert_true(accepts(g, "c"));
    assert_false(accepts(g, "ab"));
    assert_false(accepts(g, "aby"));
    assert_false(accepts(g, "cc"));
    assert_false(accepts(g, ""));
    dy_grammar_free(g);
}

/* A root of only the empty sentence: the recognizer starts with no stack at all (found by
 * fuzz/fuzz_grammar.c: its scratch space was still NULL, and clang's UBSan refuses NULL + 0). */
static void test_empty_root(void **st)
{
    (void)st;
    dy_grammar *g = compile("root ::= ");
    assert_true(accepts(g, ""));
    assert_false(accepts(g, "x"));
    dy_grammar_free(g);
}

static void test_repetitions(void **st)
{
    (void)st;
    dy_grammar *g = compile("root ::= \"a\"{2,4} \"b\"* \"c\"+ \"d\"? \"e\"{3,}");
    assert_true(accepts(g, "aaceee"));
    assert_true(accepts(g, "aaaabbbcccdeeeeeee"));
    assert_false(accepts(g, "aceee"));      /* a{2,4}: one is too few */
    assert_false(accepts(g, "aaaaaceee"));  /* five too many */
    assert_false(accepts(g, "aaeee"));      /* c+ needs one */
    assert_false(accepts(g, "aacee"));      /* e{3,} */
    assert_false(accepts(g, "aacddeee"));   /* d? at most one */
    dy_grammar_free(g);
    g = compile("root ::= ( \"x\" | \"yz\" ){3}");
    assert_true(accepts(g, "xyzx"));
    assert_false(accepts(g, "xyz"));
    dy_grammar_free(g);
}

static void test_repetitions_of_what_can_be_empty(void **st)
{
    (void)st;
    /* a cycle that reads nothing, through tail references only: allowed, and it ends */
    dy_grammar *g = compile("root ::= ( \"a\"? )* \"b\" ( | \"c\" | x )*\nx ::= \"d\"?");
    assert_true(accepts(g, "b"));
    assert_true(accepts(g, "aaab"));
    assert_true(accepts(g, "abcdcd"));
    assert_false(accepts(g, "ba"));
    assert_false(accepts(g, ""));
    dy_grammar_free(g);
    g = compile("root ::= ( ( | \"cb\" )* \"d\" ){1,3}"); /* a regex's (|cb)* as the fuzzer met it */
    assert_true(accepts(g, "dcbd"));
    assert_false(accepts(g, "dcd"));
    dy_grammar_free(g);
}

static void test_rules_recursion_and_layout(void **st)
{
    (void)st;
    /* rules used before they are defined, bodies over several lines, comments */
    dy_grammar *g = compile("# balanced parentheses\n"
                            "root ::= item*\n"
                            "item ::= \"(\" root \")\"   # recursion in the middle is fine\n"
                            "       | \"x\"\n");
    assert_true(accepts(g, ""));
    assert_true(accepts(g, "(x(x))x"));
    assert_true(accepts(g, "((((((((((x))))))))))"));
    assert_false(accepts(g, "(x"));
    assert_false(accepts(g, "x)"));
    dy_grammar_free(g);
}

static void test_json(void **st)
{
    (void)st;
    dy_grammar *g = compile(JSON);
    const char *good[] = {"{}", "[]", "0", "-1.5e+3", "\"\"", "true", "null",
                          "{\"a\": [1, 2, {\"b\": null}], \"c\": \"d\\u00e9\\n\"}",
                          "[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]", "\"caf\xc3\xa9 \xe6\x97\xa5\""};
    const char *bad[] = {"{", "{\"a\"}", "[1,]", "01", "1.", "\"\\x\"", "tru", "{} ",
                         "\"a\nb\"", "[1,     2]" /* more blanks than ws allows */};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (!accepts(g, good[i]))
            fail_msg("refused %s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (accepts(g, bad[i]))
            fail_msg("accepted %s", bad[i]);
    dy_grammar_free(g);
}

static void test_utf8_whole_characters(void **st)
{
    (void)st;
    dy_grammar *g = compile("root ::= .+");
    assert_true(accepts(g, "a"));
    assert_true(accepts(g, "\xc3\xa9"));             /* é */
    assert_true(accepts(g, "\xe6\x97\xa5\xe6\x9c\xac")); /* 日本 */
    assert_true(accepts(g, "\xf0\x9f\x98\x80"));     /* an emoji */
    assert_false(accepts(g, "\x80"));                /* a lone continuation byte */
    assert_false(accepts(g, "\xc3"));                /* a truncated character */
    assert_false(accepts(g, "\xc0\x80"));            /* overlong NUL */
    assert_false(accepts(g, "\xed\xa0\x80"));        /* a surrogate */
    assert_false(accepts(g, "\xf4\x90\x80\x80"));    /* past U+10FFFF */
    dy_grammar_free(g);
    g = compile("root ::= [^\"a-c] \"\\u00e9\" [\\x80-\\xbf]");
    assert_true(accepts(g, "z\xc3\xa9\x85"));
    assert_true(accepts(g, "\xe6\x97\xa5\xc3\xa9\xbf"));
    assert_false(accepts(g, "b\xc3\xa9\x85"));
    assert_false(accepts(g, "\"\xc3\xa9\x85"));
    assert_false(accepts(g, "z\xc3\xa9z"));
    dy_grammar_free(g);
}

static void test_errors_say_where(void **st)
{
    (void)st;
    expect_error("root ::= thing", "rule 'thing' is used but never defined");
    expect_error("start ::= \"a\"", "no rule named 'root'");
    expect_error("root ::= root \"a\"", "left-recursive");
    expect_error("root ::= x\nx ::= \"\"? root", "empty literal");
    expect_error("root ::= x \"b\"\nx ::= y? root\ny ::= \"a\"", "left-recursive");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice");
    expect_error("root ::= \"a", "unterminated");
    expect_error("root ::= \"\\q\"", "unknown escape \\q");
    expect_error("root ::= ( \"a\"", "unclosed (");
    expect_error("root ::= \"a\" )", "unmatched )");
    expect_error("root ::= [z-a]", "runs backwards");
    expect_error("root ::= []", "empty class");
    expect_error("root ::= [\xc3\xa9]", "single bytes");
    expect_error("root ::= [^\\x80]", "only ASCII");
    expect_error("root ::= \"a\"{5,2}", "maximum below its minimum");
    expect_error("root ::= \"a\"{99999}", "repetition count over");
    expect_error("root ::= \"\\ud800\"", "surrogate");
    expect_error("root ::= \"a\"\n  @", "line 2, column 3: unexpected '@'");
    expect_error("root \"a\"", "expected ::=");
    const char nul[] = "root ::= \"a\0\"";
    char err[128];
    assert_null(dy_grammar_parse(nul, sizeof nul - 1, err, sizeof err));
    assert_non_null(strstr(err, "NUL byte"));
}

/* ---------------------------------------------------------------- masks */

/* A vocabulary of JSON-ish fragments, some multi-byte, one empty (an end token). */
static const char *const VOCAB[] = {
    "", "{", "}", "[", "]", "\"", ",", ":", " ", "\n", "a", "b", "ab", "\"a", "\":", "\": ",
    "{\"", "\"}", "0", "1", "12", "-", ".", "e", "true", "null", "tr", "ue", "\\", "\\n",
    "\\u", "00e9", "\xc3", "\xa9", "\xc3\xa9", ", \"", "}]", "[{", "1,", " {", "\"\"", "x",
    "{}", "[]", "],", "ull", "fal", "se", "\x80", "a\"", "abcd", "abcdefg", "zz", "\"k\":",
    "\xc3\xa9\"", "ab\xc3", "k", "7", "789", "1234",
};
#define NV ((int)(sizeof VOCAB / sizeof *VOCAB))

static dy_vocab_trie *vocab_trie(void)
{
    uint32_t lens[NV];
    for (int i = 0; i < NV; i++)
        lens[i] = (uint32_t)strlen(VOCAB[i]);
    dy_vocab_trie *t = dy_vocab_trie_new(NV, VOCAB, lens);
    assert_non_null(t);
    assert_int_equal(dy_vocab_trie_size(t), NV);
    return t;
}

static bool bit(const uint32_t *bits, int i)
{
    return bits[i >> 5] >> (i & 31) & 1u;
}

/* What a worker does with a sampled token: its text, or the token itself if it has none. */
static dy_grammar_status advance_token(dy_gmatch *m, dy_gstate *s, int i)
{
    return VOCAB[i][0] ? dy_gstate_advance(m, s, VOCAB[i], strlen(VOCAB[i]))
                       : dy_gstate_advance_token(m, s, i);
}

/* The mask by hand: a token is allowed iff it advances the state. */
static void check_mask(dy_gmatch *m, const dy_gstate *s)
{
    const uint32_t *bits = dy_gstate_mask(m, s);
    assert_non_null(bits);
    uint32_t copy[(NV + 31) / 32];
    memcpy(copy, bits, sizeof copy);
    for (int i = 0; i < NV; i++) {
        dy_gstate t;
        assert_true(dy_gstate_copy(&t, s));
        bool ok = advance_token(m, &t, i) == DY_GRAMMAR_OK;
        dy_gstate_free(&t);
        if (ok != bit(copy, i))
            fail_msg("token %d \"%s\": mask says %d, by hand %d", i, VOCAB[i], bit(copy, i), ok);
    }
}

/* A grammar of counted repetitions: a mask walk follows a chain of distinct states there. */
static const char *const COUNTED =
    "root ::= \"{\" \"\\\"k\\\":\" \" \"? \"\\\"\" [^\"\\\\]{0,6} \"\\\"\" ( \",\" num )? \"}\"\n"
    "num  ::= [0-9]{1,3}\n";

/* Token 0 (no text) named by the grammar, as a template's control token is. */
static const char *const WITH_TOKEN = "root ::= <[0]> \" \"? \"[\" ( <[0]> \"a\" | \"1\" )* \"]\"\n";

/* A cycle of tail references that reads nothing (a repetition of what can be empty). */
static const char *const EMPTY_LOOP = "root ::= \"[\" ( \"a\"? | \"1\" | ( \"b\" \"\\\"\"? )? )* \"]\"\n";

static void random_walks(const char *grammar, unsigned max_masks)
{
    dy_grammar *g = compile(grammar);
    dy_vocab_trie *t = vocab_trie();
    dy_gmatch *m = dy_gmatch_new(g, t, (dy_gmatch_limits){.max_masks = max_masks});
    uint64_t rng = 12345;
    int finished = 0;
    for (int walk = 0; walk < 60; walk++) {
        dy_gstate s;
        assert_int_equal(dy_gstate_start(m, &s), DY_GRAMMAR_OK);
        for (int step = 0; step < 40; step++) {
            check_mask(m, &s);
            const uint32_t *bits = dy_gstate_mask(m, &s);
            int allowed[NV], n = 0;
            for (int i = 0; i < NV; i++)
                if (bit(bits, i))
                    allowed[n++] = i;
            if (s.accept && (n == 0 || tu_rng_u64(&rng) % 4 == 0)) {
                finished++;
                break;
            }
            assert_true(n > 0); /* JSON can always go on until it is whole */
            int pick = allowed[tu_rng_u64(&rng) % (uint64_t)n];
            assert_int_equal(advance_token(m, &s, pick), DY_GRAMMAR_OK);
        }
        dy_gstate_free(&s);
    }
    assert_true(finished > 5);
    uint64_t hits, misses;
    dy_gmatch_mask_counts(m, &hits, &misses);
    assert_true(hits > 0);
    assert_true(dy_gmatch_bytes(m) > 0);
    dy_gmatch_free(m);
    dy_vocab_trie_free(t);
    dy_grammar_free(g);
}

static void test_masks_match_trying_every_token(void **st)
{
    (void)st;
    random_walks(JSON, 0);
    random_walks(COUNTED, 0);
    random_walks(EMPTY_LOOP, 0);
    random_walks(WITH_TOKEN, 0);
}

static void test_masks_survive_eviction(void **st)
{
    (void)st;
    random_walks(JSON, 2); /* a cache of two: almost every mask is recomputed or evicted */
    random_walks(COUNTED, 2);
}

static void test_mask_of_a_literal_and_the_end(void **st)
{
    (void)st;
    dy_grammar *g = compile("root ::= \"true\"");
    dy_vocab_trie *t = vocab_trie();
    dy_gmatch *m = dy_gmatch_new(g, t, (dy_gmatch_limits){0});
    dy_gstate s;
    assert_int_equal(dy_gstate_start(m, &s), DY_GRAMMAR_OK);
    const uint32_t *bits = dy_gstate_mask(m, &s);
    int n = 0;
    for (int i = 0; i < NV; i++)
        n += bit(bits, i);
    assert_int_equal(n, 2); /* "true" and "tr" */
    assert_false(s.accept);
    assert_int_equal(dy_gstate_advance(m, &s, "tr", 2), DY_GRAMMAR_OK);
    assert_int_equal(dy_gstate_advance(m, &s, "x", 1), DY_GRAMMAR_REJECT);
    assert_int_equal(dy_gstate_advance(m, &s, "ue", 2), DY_GRAMMAR_OK);
    assert_true(s.accept);
    assert_false(dy_gstate_can_continue(&s));
    bits = dy_gstate_mask(m, &s);
    for (int i = 0; i < NV; i++)
        assert_false(bit(bits, i)); /* only the end may come: the caller's to allow */
    dy_gstate_free(&s);
    dy_gmatch_free(m);
    dy_vocab_trie_free(t);
    dy_grammar_free(g);
}

static void test_a_token_without_text(void **st)
{
    (void)st;
    dy_grammar *g = compile("root ::= <[0]> \"[\" [0-9] \"]\"");
    dy_vocab_trie *t = vocab_trie();
    dy_gmatch *m = dy_gmatch_new(g, t, (dy_gmatch_limits){0});
    dy_gstate s;
    assert_int_equal(dy_gstate_start(m, &s), DY_GRAMMAR_OK);
    const uint32_t *bits = dy_gstate_mask(m, &s);
    for (int i = 0; i < NV; i++)
        assert_int_equal(bit(bits, i), i == 0); /* only the token itself */
    assert_int_equal(dy_gstate_advance(m, &s, "[", 1), DY_GRAMMAR_REJECT);
    assert_int_equal(dy_gstate_advance_token(m, &s, 5), DY_GRAMMAR_REJECT);
    assert_int_equal(dy_gstate_advance_token(m, &s, 0), DY_GRAMMAR_OK);
    assert_int_equal(dy_gstate_advance(m, &s, "[1]", 3), DY_GRAMMAR_OK);
    assert_true(s.accept);
    dy_gstate_free(&s);
    dy_gmatch_free(m);
    dy_vocab_trie_free(t);
    assert_false(accepts(g, "[1]")); /* bytes alone never stand for the token */
    dy_grammar_free(g);
    expect_error("root ::= <[12", "expected <[token id]>");
    expect_error("root ::= <[99999999999]>", "below 2^30");
}

static void test_forks_are_independent(void **st)
{
    (void)st;
    dy_grammar *g = compile("root ::= \"a\" ( \"b\" | \"c\" ) \"d\"");
    dy_gmatch *m = dy_gmatch_new(g, NULL, (dy_gmatch_limits){0});
    dy_gstate a, b;
    assert_int_equal(dy_gstate_start(m, &a), DY_GRAMMAR_OK);
    assert_int_equal(dy_gstate_advance(m, &a, "a", 1), DY_GRAMMAR_OK);
    assert_true(dy_gstate_copy(&b, &a));
    assert_int_equal(dy_gstate_advance(m, &a, "bd", 2), DY_GRAMMAR_OK);
    assert_int_equal(dy_gstate_advance(m, &b, "cd", 2), DY_GRAMMAR_OK);
    assert_true(a.accept && b.accept);
    assert_null(dy_gstate_mask(m, &a)); /* no vocabulary: no masks */
    dy_gstate_free(&a);
    dy_gstate_free(&b);
    dy_gmatch_free(m);
    dy_grammar_free(g);
}

static void test_node_limit(void **st)
{
    (void)st;
    dy_grammar *g = compile(JSON);
    dy_gmatch *m = dy_gmatch_new(g, NULL, (dy_gmatch_limits){.max_nodes = 200});
    dy_gstate s;
    assert_int_equal(dy_gstate_start(m, &s), DY_GRAMMAR_OK);
    dy_gstate before = {0};
    dy_grammar_status r = DY_GRAMMAR_OK;
    for (int i = 0; i < 500 && r == DY_GRAMMAR_OK; i++) {
        dy_gstate_free(&before);
        assert_true(dy_gstate_copy(&before, &s));
        r = dy_gstate_advance(m, &s, "[", 1); /* every level of nesting is a new stack */
    }
    assert_int_equal(r, DY_GRAMMAR_LIMIT);
    assert_int_equal(s.n, before.n); /* the state is the one before the failed advance */
    assert_memory_equal(s.tops, before.tops, sizeof *s.tops * s.n);
    dy_gstate_free(&before);
    dy_gstate_free(&s);
    dy_gmatch_free(m);
    dy_grammar_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_classes_alternatives),
        cmocka_unit_test(test_empty_root),
        cmocka_unit_test(test_repetitions),
        cmocka_unit_test(test_repetitions_of_what_can_be_empty),
        cmocka_unit_test(test_rules_recursion_and_layout),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_utf8_whole_characters),
        cmocka_unit_test(test_errors_say_where),
        cmocka_unit_test(test_masks_match_trying_every_token),
        cmocka_unit_test(test_masks_survive_eviction),
        cmocka_unit_test(test_mask_of_a_literal_and_the_end),
        cmocka_unit_test(test_a_token_without_text),
        cmocka_unit_test(test_forks_are_independent),
        cmocka_unit_test(test_node_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
