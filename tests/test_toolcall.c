/* test_toolcall.c — tool calls per chat-template family: crafted model outputs parsed back
 * into calls (well-formed, several, content before them, malformed JSON, unknown names, text
 * after them), the streaming prefix that is surely content, the ids, and the forced-call
 * grammars: each compiles, accepts the family's call syntax for the right function with valid
 * arguments, refuses the rest, and what it accepts parses back into the call. */
#include "testutil.h"
#include "serve/front/toolcall.h"
#include "grammar/grammar.h"
#include "grammar/schema.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[] = {"get_weather", "now"};

static int parse(dy_chat_family f, const char *text, dy_toolcall_found *out)
{
    return dy_toolcall_parse(f, text, strlen(text), NAMES, 2, out);
}

static void expect_call(const dy_toolcall_found *r, int k, const char *name, const char *args)
{
    assert_true(k < r->n_calls);
    assert_string_equal(r->calls[k].name, name);
    assert_string_equal(r->calls[k].arguments, args);
}

static void expect_content(dy_chat_family f, const char *text)
{
    dy_toolcall_found r;
    assert_int_equal(parse(f, text, &r), 0);
    assert_int_equal(r.n_calls, 0);
    assert_null(r.calls);
}

/* ---- parsing ---- */

static void test_parse_chatml(void **st)
{
    (void)st;
    dy_toolcall_found r;
    /* Qwen's layout, arguments re-serialized compactly */
    assert_int_equal(parse(DY_CHAT_CHATML, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                           "{\"city\": \"Paris\", \"days\": 2.5}}\n</tool_call>", &r), 1);
    expect_call(&r, 0, "get_weather", "{\"city\":\"Paris\",\"days\":2.5}");
    assert_int_equal(r.content_len, 0);
    dy_toolcall_found_free(&r);
    /* several calls, text before them (its trailing whitespace is not content) */
    const char *two = "Let me check.\n\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                      "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call>\n";
    assert_int_equal(parse(DY_CHAT_CHATML, two, &r), 2);
    assert_int_equal(r.content_len, strlen("Let me check."));
    expect_call(&r, 0, "now", "{}");
    expect_call(&r, 1, "get_weather", "{\"city\":\"Oslo\"}");
    dy_toolcall_found_free(&r);
    /* not calls: the answer stays content */
    expect_content(DY_CHAT_CHATML, "Just text.");
    expect_content(DY_CHAT_CHATML, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>");
    expect_content(DY_CHAT_CHATML, "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>");
    expect_content(DY_CHAT_CHATML, "<tool_call>{\"name\": \"now\", \"arguments\": 3}</tool_call>");
    expect_content(DY_CHAT_CHATML, "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call> and then");
    expect_content(DY_CHAT_CHATML, "<tool_call>{\"name\": \"now\", \"arguments\": {}}"); /* cut */
    expect_content(DY_CHAT_CHATML, "<tool_call>{\"name\": \"now\", \"arguments\": {}");
}

static void test_parse_generic(void **st)
{
    (void)st;
    dy_toolcall_found r;
    /* the plain family's envelope, as the forced grammar writes it */
    assert_int_equal(parse(DY_CHAT_PLAIN, "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>\n"
                                          "<tool_call>{\"name\": \"now\", \"arguments\": {\"tz\": \"UTC\"}}</tool_call>",
                           &r), 2);
    expect_call(&r, 1, "now", "{\"tz\":\"UTC\"}");
    dy_toolcall_found_free(&r);
    assert_int_equal(parse(DY_CHAT_GEMMA, " <tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", &r), 1);
    dy_toolcall_found_free(&r);
    expect_content(DY_CHAT_PLAIN, "Once upon a time <tool_call> there was a girl.");
}

static void test_parse_llama31(void **st)
{
    (void)st;
    dy_toolcall_found r;
    assert_int_equal(parse(DY_CHAT_LLAMA31, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", &r), 1);
    expect_call(&r, 0, "get_weather", "{\"city\":\"Rome\"}");
    assert_int_equal(r.content_len, 0);
    dy_toolcall_found_free(&r);
    /* the python tag's text, "arguments" for "parameters", several calls separated by ';' */
    assert_int_equal(parse(DY_CHAT_LLAMA31, "<|python_tag|>{\"name\": \"now\", \"arguments\": {}}; "
                                            "{\"name\": \"now\", \"parameters\": {}}", &r), 2);
    dy_toolcall_found_free(&r);
    expect_content(DY_CHAT_LLAMA31, "The weather is {\"name\": \"now\", \"parameters\": {}}");
    expect_content(DY_CHAT_LLAMA31, "{\"name\": \"now\", \"parameters\": {}} is what I would call");
    expect_content(DY_CHAT_LLAMA31, "{\"name\": \"now\", \"parameters\": {");
    expect_content(DY_CHAT_LLAMA31, "{\"city\": \"Rome\"}");
}

static void test_parse_mistral(void **st)
{
    (void)st;
    dy_toolcall_found r;
    /* [TOOL_CALLS] is a control token: the text is the array alone */
    assert_int_equal(parse(DY_CHAT_MISTRAL_V3, " [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}}, "
                                               "{\"name\": \"now\", \"arguments\": {}, \"id\": \"abcdefghi\"}]", &r), 2);
    expect_call(&r, 0, "get_weather", "{\"city\":\"Nice\"}");
    expect_call(&r, 1, "now", "{}");
    dy_toolcall_found_free(&r);
    /* with the marker's text, after content */
    assert_int_equal(parse(DY_CHAT_MISTRAL_V3_TEKKEN, "Sure. [TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]", &r), 1);
    assert_int_equal(r.content_len, strlen("Sure."));
    dy_toolcall_found_free(&r);
    expect_content(DY_CHAT_MISTRAL_V7, "[1, 2, 3]");
    expect_content(DY_CHAT_MISTRAL_V7, "[]");
    expect_content(DY_CHAT_MISTRAL_V7_TEKKEN, "[{\"name\": \"now\", \"arguments\": {}}] done");
    expect_content(DY_CHAT_MISTRAL_V7_TEKKEN, "[{\"name\": \"now\", \"arguments\": {}");
    expect_content(DY_CHAT_MISTRAL_V3, "No tools needed.");
}

/* ---- streaming ---- */

static size_t prefix(dy_chat_family f, const char *s)
{
    return dy_toolcall_content_prefix(f, s, strlen(s));
}

static void test_content_prefix(void **st)
{
    (void)st;
    assert_int_equal(prefix(DY_CHAT_CHATML, "Hello there"), 11);
    assert_int_equal(prefix(DY_CHAT_CHATML, "Hello <tool"), 5);     /* may be a call's start */
    assert_int_equal(prefix(DY_CHAT_CHATML, "Hello <b>"), 9);       /* cannot */
    assert_int_equal(prefix(DY_CHAT_CHATML, "Hi\n\n<tool_call>{\"na"), 2);
    assert_int_equal(prefix(DY_CHAT_CHATML, "Hi  "), 2);            /* trailing space waits */
    assert_int_equal(prefix(DY_CHAT_PLAIN, "<"), 0);
    assert_int_equal(prefix(DY_CHAT_LLAMA31, "  {\"name\""), 0);    /* a call is the whole answer */
    assert_int_equal(prefix(DY_CHAT_LLAMA31, "  "), 0);
    assert_int_equal(prefix(DY_CHAT_LLAMA31, "It is sunny "), 11);
    assert_int_equal(prefix(DY_CHAT_MISTRAL_V3, " [{"), 0);
    assert_int_equal(prefix(DY_CHAT_MISTRAL_V3, "Ok [TOOL_"), 2);
    /* never more than the content a finished answer parses to */
    const char *ans = "Let me look.\n<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>";
    dy_toolcall_found r;
    for (size_t n = 0; n <= strlen(ans); n++)
        assert_true(dy_toolcall_content_prefix(DY_CHAT_CHATML, ans, n) <= strlen("Let me look."));
    assert_int_equal(parse(DY_CHAT_CHATML, ans, &r), 1);
    assert_int_equal(r.content_len, strlen("Let me look."));
    dy_toolcall_found_free(&r);
}

static void test_ids(void **st)
{
    (void)st;
    char a[32], b[32], c[32], d[32];
    dy_toolcall_id(42, 0, 0, a);
    dy_toolcall_id(42, 0, 0, b);
    dy_toolcall_id(42, 0, 1, c);
    dy_toolcall_id(43, 0, 0, d);
    assert_string_equal(a, b); /* a function of the seed */
    assert_string_not_equal(a, c);
    assert_string_not_equal(a, d);
    assert_int_equal(strlen(a), 5 + 24);
    assert_memory_equal(a, "call_", 5);
    for (int i = 5; a[i]; i++)
        assert_non_null(strchr("0123456789abcdef", a[i]));
}

/* ---- forced-call grammars ---- */

static const char *SCHEMA_WEATHER =
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},\"required\":[\"city\",\"days\"],"
    "\"additionalProperties\":false}";
static const char *SCHEMA_NONE = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}";

/* The grammar of family f forcing tool `forced` (-1: any) of the two. */
static dy_grammar *forced_grammar_with(dy_chat_family f, int forced, bool parallel,
                                      int32_t call_token)
{
    const char *schemas[] = {SCHEMA_WEATHER, SCHEMA_NONE};
    char *rules[2];
    for (int i = 0; i < 2; i++) {
        dy_buf b = {0};
        dy_schema_error e;
        json_t *s = json_loads(schemas[i], 0, NULL);
        char prefix[16];
        snprintf(prefix, sizeof prefix, "tool%d", i);
        assert_int_equal(dy_schema_rules(s, prefix, NULL, &b, &e), DY_SCHEMA_OK);
        json_decref(s);
        rules[i] = (char *)dy_buf_cstr(&b);
    }
    dy_buf g = {0};
    dy_toolcall_grammar(f, NAMES, (const char *const *)rules, 2, forced, parallel, call_token, &g);
    free(rules[0]);
    free(rules[1]);
    char err[256] = "";
    const char *text = dy_buf_cstr(&g);
    assert_non_null(text);
    dy_grammar *gr = dy_grammar_parse(text, g.len, err, sizeof err);
    if (!gr)
        print_error("%s\n%s\n", err, text);
    assert_non_null(gr);
    dy_buf_free(&g);
    return gr;
}

static dy_grammar *forced_grammar(dy_chat_family f, int forced, bool parallel)
{
    return forced_grammar_with(f, forced, parallel, -1);
}

static bool accepts(const dy_grammar *g, const char *s)
{
    return dy_grammar_accepts(g, s, strlen(s));
}

/* What the grammar accepts parses back into the call. */
static void accepted_parses(dy_chat_family f, const dy_grammar *g, const char *s, int n_calls)
{
    assert_true(accepts(g, s));
    dy_toolcall_found r;
    assert_int_equal(parse(f, s, &r), n_calls);
    dy_toolcall_found_free(&r);
}

static void test_grammar_chatml_and_generic(void **st)
{
    (void)st;
    dy_grammar *g = forced_grammar(DY_CHAT_CHATML, 0, false);
    accepted_parses(DY_CHAT_CHATML, g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                       "{\"city\": \"Paris\", \"days\": 3}}\n</tool_call>", 1);
    assert_false(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                            "{\"city\": \"Paris\", \"days\": 9}}\n</tool_call>")); /* maximum 7 */
    assert_false(accepts(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    assert_false(accepts(g, "Sure! <tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    dy_grammar_free(g);
    /* any of the tools; one or more calls when parallel */
    g = forced_grammar(DY_CHAT_PLAIN, -1, true);
    accepted_parses(DY_CHAT_PLAIN, g, "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", 1);
    accepted_parses(DY_CHAT_PLAIN, g, "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>\n"
                                      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\", "
                                      "\"days\": 1}}</tool_call>", 2);
    assert_false(accepts(g, ""));
    dy_grammar_free(g);
    g = forced_grammar(DY_CHAT_PLAIN, -1, false);
    assert_false(accepts(g, "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>\n"
                            "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>"));
    dy_grammar_free(g);
}

static void test_grammar_llama_and_mistral(void **st)
{
    (void)st;
    dy_grammar *g = forced_grammar(DY_CHAT_LLAMA31, 1, true); /* Llama: one call even if parallel */
    accepted_parses(DY_CHAT_LLAMA31, g, "{\"name\": \"now\", \"parameters\": {}}", 1);
    assert_false(accepts(g, "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"now\", \"parameters\": {}}"));
    assert_false(accepts(g, "{\"name\": \"now\", \"arguments\": {}}"));
    dy_grammar_free(g);
    g = forced_grammar(DY_CHAT_MISTRAL_V3, -1, true);
    accepted_parses(DY_CHAT_MISTRAL_V3, g, " [{\"name\": \"now\", \"arguments\": {}}, {\"name\": "
                                           "\"get_weather\", \"arguments\": {\"city\": \"B\", \"days\": 2}}]", 2);
    accepted_parses(DY_CHAT_MISTRAL_V3, g, "[{\"name\": \"now\", \"arguments\": {}}]", 1);
    assert_false(accepts(g, "[]"));
    dy_grammar_free(g);
    /* a vocabulary with [TOOL_CALLS] (id 7 here): the answer starts with that token */
    g = forced_grammar_with(DY_CHAT_MISTRAL_V3, 1, false, 7);
    const char *call = "[{\"name\": \"now\", \"arguments\": {}}]";
    assert_false(accepts(g, call)); /* the text alone is not enough */
    dy_gmatch *m = dy_gmatch_new(g, NULL, (dy_gmatch_limits){0});
    dy_gstate s;
    assert_int_equal(dy_gstate_start(m, &s), DY_GRAMMAR_OK);
    assert_int_equal(dy_gstate_advance_token(m, &s, 7), DY_GRAMMAR_OK);
    assert_int_equal(dy_gstate_advance(m, &s, call, strlen(call)), DY_GRAMMAR_OK);
    assert_true(s.accept);
    dy_gstate_free(&s);
    dy_gmatch_free(m);
    dy_grammar_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_chatml),
        cmocka_unit_test(test_parse_generic),
        cmocka_unit_test(test_parse_llama31),
        cmocka_unit_test(test_parse_mistral),
        cmocka_unit_test(test_content_prefix),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_grammar_chatml_and_generic),
        cmocka_unit_test(test_grammar_llama_and_mistral),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
