/* test_openai.c — the OpenAI API layer: every request parameter's happy path and its
 * wrong-type / out-of-range error (status and `param`), bad JSON bodies, the prompt and message
 * forms, the context-length check, error objects, response and streaming-chunk shapes (parsed
 * back with jansson), SSE framing and the UTF-8 helpers.
 *
 * Request bodies are written with ' for " to keep them readable (J() swaps them back). */
#include "testutil.h"
#include "serve/front/openai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTX 512
#define VOCAB 1000

static dy_api_limits lim(void)
{
    dy_api_limits l = dy_api_limits_default(CTX);
    l.vocab_size = VOCAB;
    return l;
}

/* The body with every ' turned into ", malloc'd. */
static char *J(const char *s)
{
    char *b = strdup(s);
    for (char *p = b; *p; p++)
        if (*p == '\'')
            *p = '"';
    return b;
}

/* {'model':'m','prompt':'p', extra} or the chat equivalent. */
static char *body_with(dy_api_kind k, const char *extra)
{
    char buf[8192];
    snprintf(buf, sizeof buf, k == DY_API_CHAT
             ? "{'model':'m','messages':[{'role':'user','content':'hi'}]%s%s}"
             : "{'model':'m','prompt':'p'%s%s}", *extra ? "," : "", extra);
    return J(buf);
}

static int parse_raw(dy_api_kind k, const char *body, size_t len, const dy_api_limits *l,
                     dy_api_request *r, dy_api_error *e)
{
    int rc = dy_api_parse(body, len, k, l, r, e);
    if (rc == 0 && e->status != 0)
        fail_msg("error set on success");
    return rc;
}

static void ok_body(dy_api_kind k, const char *json_single_quoted, dy_api_request *r)
{
    dy_api_limits l = lim();
    dy_api_error e;
    char *b = J(json_single_quoted);
    int rc = parse_raw(k, b, strlen(b), &l, r, &e);
    if (rc != 0)
        print_error("unexpected error for %s: %d %s (param %s)\n", b, e.status, e.message, e.param);
    free(b);
    assert_int_equal(rc, 0);
}

static void ok(dy_api_kind k, const char *extra, dy_api_request *r)
{
    dy_api_limits l = lim();
    dy_api_error e;
    char *b = body_with(k, extra);
    int rc = parse_raw(k, b, strlen(b), &l, r, &e);
    if (rc != 0)
        print_error("unexpected error for %s: %d %s (param %s)\n", b, e.status, e.message, e.param);
    free(b);
    assert_int_equal(rc, 0);
}

/* Parses `body` (len bytes) expecting an error with `status`, `param` ("" = null) and, when
 * not NULL, `code`; also checks that the request was left empty and the JSON error object
 * parses back with the same fields. */
static void expect_error_raw(dy_api_kind k, const char *body, size_t len, const dy_api_limits *l,
                             int status, const char *param, const char *code)
{
    dy_api_request r;
    dy_api_error e;
    int rc = parse_raw(k, body, len, l, &r, &e);
    if (rc != -1 || e.status != status || strcmp(e.param, param) != 0 ||
        (code && strcmp(e.code, code) != 0))
        print_error("body %.200s\n got rc %d status %d param '%s' code '%s' (%s)\n want %d '%s' '%s'\n",
                    body, rc, e.status, e.param, e.code, e.message, status, param, code ? code : "*");
    assert_int_equal(rc, -1);
    assert_int_equal(e.status, status);
    assert_string_equal(e.param, param);
    if (code)
        assert_string_equal(e.code, code);
    assert_true(e.message[0] != 0);
    assert_null(r.model);
    assert_null(r.prompts);
    assert_null(r.messages);
    char *js = dy_api_error_json(&e);
    json_t *o = json_loads(js, 0, NULL), *er = json_object_get(o, "error");
    assert_non_null(er);
    assert_string_equal(json_string_value(json_object_get(er, "message")), e.message);
    assert_string_equal(json_string_value(json_object_get(er, "type")), "invalid_request_error");
    if (*param)
        assert_string_equal(json_string_value(json_object_get(er, "param")), param);
    else
        assert_true(json_is_null(json_object_get(er, "param")));
    json_decref(o);
    free(js);
}

static void bad_body(dy_api_kind k, const char *json_single_quoted, const char *param, const char *code)
{
    dy_api_limits l = lim();
    char *b = J(json_single_quoted);
    expect_error_raw(k, b, strlen(b), &l, 400, param, code);
    free(b);
}

static void bad(dy_api_kind k, const char *extra, const char *param, const char *code)
{
    dy_api_limits l = lim();
    char *b = body_with(k, extra);
    expect_error_raw(k, b, strlen(b), &l, 400, param, code);
    free(b);
}

#define CMPL DY_API_COMPLETIONS
#define CHAT DY_API_CHAT

/* ==== defaults and required fields ==== */

static void test_completion_defaults(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CMPL, "", &r);
    assert_int_equal(r.kind, CMPL);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.n_prompts, 1);
    assert_string_equal(r.prompts[0].text, "p");
    assert_null(r.prompts[0].ids);
    assert_int_equal(r.max_tokens, 16);
    assert_false(r.max_tokens_auto);
    assert_true(r.sampling.temperature == 1.0f);
    assert_true(r.sampling.top_p == 1.0f);
    assert_int_equal(r.sampling.top_k, 0);
    assert_true(r.sampling.min_p == 0.0f);
    assert_false(r.has_seed);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.best_of, 1);
    assert_false(r.stream);
    assert_false(r.include_usage);
    assert_false(r.logprobs);
    assert_false(r.echo);
    assert_false(r.ignore_eos);
    assert_int_equal(r.n_stop, 0);
    assert_null(r.user);
    assert_int_equal(r.select, DY_SELECT_NONE);
    assert_null(r.answer_regex);
    dy_api_request_free(&r);
    assert_null(r.model);
    dy_api_request_free(&r); /* twice is harmless */
}

static void test_chat_defaults(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CHAT, "", &r);
    assert_int_equal(r.kind, CHAT);
    assert_int_equal(r.n_messages, 1);
    assert_int_equal(r.messages[0].role, DY_ROLE_USER);
    assert_string_equal(r.messages[0].content, "hi");
    assert_true(r.max_tokens_auto); /* the context the prompt leaves */
    assert_int_equal(r.max_tokens, CTX);
    assert_int_equal(r.n_prompts, 0);
    dy_api_request_free(&r);
}

static void test_required_fields(void **st)
{
    (void)st;
    bad_body(CMPL, "{'prompt':'p'}", "model", "missing_required_parameter");
    bad_body(CMPL, "{'model':null,'prompt':'p'}", "model", "missing_required_parameter");
    bad_body(CMPL, "{'model':'m'}", "prompt", "missing_required_parameter");
    bad_body(CMPL, "{'model':'m','prompt':null}", "prompt", "missing_required_parameter");
    bad_body(CHAT, "{'model':'m'}", "messages", "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','prompt':'p'}", "messages", "missing_required_parameter");
    bad_body(CMPL, "{'model':5,'prompt':'p'}", "model", "invalid_type");
    bad_body(CMPL, "{'model':'','prompt':'p'}", "model", "invalid_value");
    char big[600];
    memset(big, 'x', 300);
    big[300] = 0;
    char body[800];
    snprintf(body, sizeof body, "{'model':'%s','prompt':'p'}", big);
    bad_body(CMPL, body, "model", "string_above_max_length");
}

/* ==== prompts ==== */

static void test_prompt_forms(void **st)
{
    (void)st;
    dy_api_request r;
    ok_body(CMPL, "{'model':'m','prompt':['a','b','c']}", &r);
    assert_int_equal(r.n_prompts, 3);
    assert_string_equal(r.prompts[2].text, "c");
    dy_api_request_free(&r);

    ok_body(CMPL, "{'model':'m','prompt':[1,2,999]}", &r);
    assert_int_equal(r.n_prompts, 1);
    assert_null(r.prompts[0].text);
    assert_int_equal(r.prompts[0].n_ids, 3);
    assert_int_equal(r.prompts[0].ids[2], 999);
    dy_api_request_free(&r);

    ok_body(CMPL, "{'model':'m','prompt':[[1,2],[3],[4,5,6]]}", &r);
    assert_int_equal(r.n_prompts, 3);
    assert_int_equal(r.prompts[1].n_ids, 1);
    assert_int_equal(r.prompts[2].ids[2], 6);
    dy_api_request_free(&r);

    ok_body(CMPL, "{'model':'m','prompt':''}", &r); /* empty text: caught after tokenizing */
    assert_string_equal(r.prompts[0].text, "");
    dy_api_request_free(&r);

    ok_body(CMPL, "{'model':'m','prompt':'caf\\u00e9 \\ud83d\\ude00'}", &r);
    assert_string_equal(r.prompts[0].text, "caf\xc3\xa9 \xf0\x9f\x98\x80");
    dy_api_request_free(&r);
}

static void test_prompt_errors(void **st)
{
    (void)st;
    bad_body(CMPL, "{'model':'m','prompt':[]}", "prompt", "invalid_value");
    bad_body(CMPL, "{'model':'m','prompt':{}}", "prompt", "invalid_type");
    bad_body(CMPL, "{'model':'m','prompt':5}", "prompt", "invalid_type");
    bad_body(CMPL, "{'model':'m','prompt':[true]}", "prompt[0]", "invalid_type");
    bad_body(CMPL, "{'model':'m','prompt':['a',1]}", "prompt[1]", "invalid_type");
    bad_body(CMPL, "{'model':'m','prompt':[[1],'a']}", "prompt[1]", "invalid_type");
    bad_body(CMPL, "{'model':'m','prompt':[1,'a']}", "prompt[1]", "invalid_type");
    bad_body(CMPL, "{'model':'m','prompt':[5,1000]}", "prompt[1]", "integer_above_max_value");
    bad_body(CMPL, "{'model':'m','prompt':[-1]}", "prompt[0]", "integer_below_min_value");
    bad_body(CMPL, "{'model':'m','prompt':[[1,2],[]]}", "prompt[1]", "invalid_value");
    bad_body(CMPL, "{'model':'m','prompt':[[1,2],[3,1.5]]}", "prompt[1][1]", "invalid_type");
    /* more prompts than max_prompts, a token list longer than the context */
    char body[20000];
    strcpy(body, "{'model':'m','prompt':[");
    for (int i = 0; i < 65; i++)
        strcat(body, i ? ",'x'" : "'x'");
    strcat(body, "]}");
    bad_body(CMPL, body, "prompt", "array_above_max_length");
    strcpy(body, "{'model':'m','prompt':[");
    for (int i = 0; i < CTX + 1; i++)
        strcat(body, i ? ",7" : "7");
    strcat(body, "]}");
    bad_body(CMPL, body, "prompt", "array_above_max_length");
}

/* ==== chat messages ==== */

static void test_messages_forms(void **st)
{
    (void)st;
    dy_api_request r;
    ok_body(CHAT, "{'model':'m','messages':["
                  "{'role':'developer','content':'be brief'},"
                  "{'role':'user','content':[{'type':'text','text':'a'},{'type':'text','text':'b'}]},"
                  "{'role':'assistant','content':null,'tool_calls':[]},"
                  "{'role':'tool','content':'42','tool_call_id':'x','name':'ignored'},"
                  "{'role':'system','content':[]}]}", &r);
    assert_int_equal(r.n_messages, 5);
    assert_int_equal(r.messages[0].role, DY_ROLE_SYSTEM);
    assert_string_equal(r.messages[0].content, "be brief");
    assert_int_equal(r.messages[1].role, DY_ROLE_USER);
    assert_string_equal(r.messages[1].content, "a\nb"); /* text parts joined with \n */
    assert_int_equal(r.messages[2].role, DY_ROLE_ASSISTANT);
    assert_string_equal(r.messages[2].content, "");
    assert_int_equal(r.messages[3].role, DY_ROLE_TOOL);
    assert_string_equal(r.messages[3].content, "42");
    assert_string_equal(r.messages[4].content, "");
    dy_api_request_free(&r);
}

static void test_messages_errors(void **st)
{
    (void)st;
    bad_body(CHAT, "{'model':'m','messages':'hi'}", "messages", "invalid_type");
    bad_body(CHAT, "{'model':'m','messages':[]}", "messages", "empty_array");
    bad_body(CHAT, "{'model':'m','messages':['hi']}", "messages[0]", "invalid_type");
    bad_body(CHAT, "{'model':'m','messages':[{'content':'x'}]}", "messages[0].role",
             "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':'x'},{'role':'bot','content':'y'}]}",
             "messages[1].role", "invalid_value");
    bad_body(CHAT, "{'model':'m','messages':[{'role':3,'content':'x'}]}", "messages[0].role",
             "invalid_type");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user'}]}", "messages[0].content",
             "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':null}]}", "messages[0].content",
             "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':7}]}", "messages[0].content",
             "invalid_type");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':[{'type':'text','text':'a'},"
                   "{'type':'image_url','image_url':{'url':'x'}}]}]}",
             "messages[0].content[1].type", "unsupported_value");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':[{'type':'text'}]}]}",
             "messages[0].content[0].text", "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':[{'type':'text','text':1}]}]}",
             "messages[0].content[0].text", "invalid_type");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':['a']}]}",
             "messages[0].content[0]", "invalid_type");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':[{'text':'a'}]}]}",
             "messages[0].content[0].type", "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':null,'tool_calls':"
                   "[{'id':'c','type':'function','function':{'name':'f','arguments':'{}'}}]}]}",
             "messages[0].tool_calls", "invalid_value");
    dy_api_limits l = lim();
    l.max_messages = 2;
    const char *b3 = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                     "{\"role\":\"user\",\"content\":\"b\"},{\"role\":\"user\",\"content\":\"c\"}]}";
    expect_error_raw(CHAT, b3, strlen(b3), &l, 400, "messages", "array_above_max_length");
}

/* ==== generation parameters ==== */

static void test_max_tokens(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CMPL, "'max_tokens':0", &r); /* echo-only scoring */
    assert_int_equal(r.max_tokens, 0);
    dy_api_request_free(&r);
    ok(CMPL, "'max_tokens':16.0", &r);
    assert_int_equal(r.max_tokens, 16);
    dy_api_request_free(&r);
    ok(CMPL, "'max_tokens':null", &r);
    assert_int_equal(r.max_tokens, 16);
    dy_api_request_free(&r);
    ok(CMPL, "'max_tokens':100,'max_completion_tokens':7", &r); /* not a completions param */
    assert_int_equal(r.max_tokens, 100);
    dy_api_request_free(&r);
    ok(CHAT, "'max_tokens':100", &r);
    assert_int_equal(r.max_tokens, 100);
    assert_false(r.max_tokens_auto);
    dy_api_request_free(&r);
    ok(CHAT, "'max_tokens':100,'max_completion_tokens':7", &r); /* max_completion_tokens wins */
    assert_int_equal(r.max_tokens, 7);
    dy_api_request_free(&r);
    ok(CHAT, "'max_completion_tokens':9,'max_tokens':100", &r); /* whatever the key order */
    assert_int_equal(r.max_tokens, 9);
    dy_api_request_free(&r);

    bad(CHAT, "'max_tokens':0", "max_tokens", "integer_below_min_value");
    bad(CMPL, "'max_tokens':-1", "max_tokens", "integer_below_min_value");
    bad(CMPL, "'max_tokens':513", "max_tokens", "integer_above_max_value");
    bad(CMPL, "'max_tokens':16.5", "max_tokens", "invalid_type");
    bad(CMPL, "'max_tokens':'16'", "max_tokens", "invalid_type");
    bad(CHAT, "'max_completion_tokens':true", "max_completion_tokens", "invalid_type");
    bad(CHAT, "'max_completion_tokens':100000", "max_completion_tokens", "integer_above_max_value");
}

static void test_sampling_params(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CMPL, "'temperature':0,'top_p':0.5,'top_k':40,'min_p':0.05,'seed':42", &r);
    assert_true(r.sampling.temperature == 0.0f);
    assert_true(r.sampling.top_p == 0.5f);
    assert_int_equal(r.sampling.top_k, 40);
    assert_true(fabsf(r.sampling.min_p - 0.05f) < 1e-7f);
    assert_true(r.has_seed);
    assert_int_equal(r.sampling.seed, 42);
    assert_null(dy_sampling_check(&r.sampling)); /* what we accept the engine accepts */
    dy_api_request_free(&r);
    ok(CHAT, "'temperature':2,'top_p':1,'top_k':-1,'min_p':1,'seed':-1", &r);
    assert_true(r.sampling.temperature == 2.0f);
    assert_int_equal(r.sampling.top_k, 0); /* -1 is vLLM's "off" */
    assert_int_equal(r.sampling.seed, UINT64_MAX);
    assert_null(dy_sampling_check(&r.sampling));
    dy_api_request_free(&r);
    ok(CMPL, "'temperature':1,'top_p':null,'seed':null", &r);
    assert_false(r.has_seed);
    dy_api_request_free(&r);

    bad(CMPL, "'temperature':2.5", "temperature", "decimal_above_max_value");
    bad(CHAT, "'temperature':-0.1", "temperature", "decimal_below_min_value");
    bad(CMPL, "'temperature':'1'", "temperature", "invalid_type");
    bad(CMPL, "'top_p':0", "top_p", "decimal_below_min_value");
    bad(CMPL, "'top_p':1.01", "top_p", "decimal_above_max_value");
    bad(CHAT, "'top_p':[1]", "top_p", "invalid_type");
    bad(CMPL, "'top_k':-2", "top_k", "integer_below_min_value");
    bad(CMPL, "'top_k':1.5", "top_k", "invalid_type");
    bad(CMPL, "'min_p':1.5", "min_p", "decimal_above_max_value");
    bad(CMPL, "'min_p':-0.5", "min_p", "decimal_below_min_value");
    bad(CMPL, "'min_p':false", "min_p", "invalid_type");
    bad(CMPL, "'seed':'x'", "seed", "invalid_type");
    bad(CMPL, "'seed':1.5", "seed", "invalid_type");
}

static void test_stop(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CMPL, "'stop':'\\n'", &r);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "\n");
    dy_api_request_free(&r);
    ok(CHAT, "'stop':['a','bc','d','e']", &r);
    assert_int_equal(r.n_stop, 4);
    assert_string_equal(r.stop[1], "bc");
    dy_api_request_free(&r);
    ok(CHAT, "'stop':[]", &r);
    assert_int_equal(r.n_stop, 0);
    dy_api_request_free(&r);
    ok(CHAT, "'stop':null", &r);
    assert_int_equal(r.n_stop, 0);
    dy_api_request_free(&r);

    bad(CMPL, "'stop':['a','b','c','d','e']", "stop", "array_above_max_length");
    bad(CMPL, "'stop':5", "stop", "invalid_type");
    bad(CMPL, "'stop':['a',5]", "stop[1]", "invalid_type");
    char big[300], extra[400];
    memset(big, 'x', 257);
    big[257] = 0;
    snprintf(extra, sizeof extra, "'stop':['a','%s']", big);
    bad(CMPL, extra, "stop[1]", "string_above_max_length");
    snprintf(extra, sizeof extra, "'stop':'%s'", big);
    bad(CMPL, extra, "stop", "string_above_max_length");
    /* a limit above what engine/stop.h holds is clamped to it */
    dy_api_limits l = lim();
    l.max_stop = 100;
    const char *b9 = "{\"model\":\"m\",\"prompt\":\"p\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}";
    expect_error_raw(CMPL, b9, strlen(b9), &l, 400, "stop", "array_above_max_length");
}

static void test_stream_options(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CHAT, "'stream':true,'stream_options':{'include_usage':true,'future_key':1}", &r);
    assert_true(r.stream);
    assert_true(r.include_usage);
    dy_api_request_free(&r);
    ok(CMPL, "'stream':true,'stream_options':{}", &r);
    assert_false(r.include_usage);
    dy_api_request_free(&r);
    ok(CMPL, "'stream':false,'stream_options':null", &r);
    assert_false(r.stream);
    dy_api_request_free(&r);

    bad(CMPL, "'stream':'yes'", "stream", "invalid_type");
    bad(CHAT, "'stream_options':{'include_usage':true}", "stream_options", "invalid_value");
    bad(CHAT, "'stream':true,'stream_options':true", "stream_options", "invalid_type");
    bad(CHAT, "'stream':true,'stream_options':{'include_usage':'y'}",
        "stream_options.include_usage", "invalid_type");
}

static void test_n_and_best_of(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CMPL, "'n':3", &r);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.best_of, 3);
    dy_api_request_free(&r);
    ok(CMPL, "'n':2,'best_of':4", &r);
    assert_int_equal(r.best_of, 4);
    dy_api_request_free(&r);
    ok(CHAT, "'n':4,'best_of':9", &r); /* best_of is not a chat parameter: ignored */
    assert_int_equal(r.n, 4);
    assert_int_equal(r.best_of, 4);
    dy_api_request_free(&r);

    bad(CMPL, "'n':0", "n", "integer_below_min_value");
    bad(CHAT, "'n':65", "n", "integer_above_max_value");
    bad(CHAT, "'n':'2'", "n", "invalid_type");
    bad(CMPL, "'n':3,'best_of':2", "best_of", "invalid_value");
    bad(CMPL, "'best_of':65", "best_of", "integer_above_max_value");
    bad(CMPL, "'n':1,'best_of':3,'stream':true", "best_of", "invalid_value");
    /* 5 prompts x 16 samples = 80 sequences > 64 */
    bad_body(CMPL, "{'model':'m','prompt':['a','b','c','d','e'],'n':16}", "n", "invalid_value");
}

static void test_logprobs(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CMPL, "'logprobs':3", &r);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 3);
    dy_api_request_free(&r);
    ok(CMPL, "'logprobs':0", &r);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 0);
    dy_api_request_free(&r);
    ok(CMPL, "'logprobs':null", &r);
    assert_false(r.logprobs);
    dy_api_request_free(&r);
    ok(CHAT, "'logprobs':true,'top_logprobs':5", &r);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 5);
    dy_api_request_free(&r);
    ok(CHAT, "'logprobs':false", &r);
    assert_false(r.logprobs);
    dy_api_request_free(&r);
    ok(CHAT, "'top_logprobs':0", &r); /* asks for nothing, so logprobs need not be set */
    assert_false(r.logprobs);
    dy_api_request_free(&r);

    bad(CMPL, "'logprobs':6", "logprobs", "integer_above_max_value");
    bad(CMPL, "'logprobs':true", "logprobs", "invalid_type");
    bad(CHAT, "'logprobs':1", "logprobs", "invalid_type");
    bad(CHAT, "'top_logprobs':2", "top_logprobs", "invalid_value");
    bad(CHAT, "'logprobs':false,'top_logprobs':2", "top_logprobs", "invalid_value");
    bad(CHAT, "'logprobs':true,'top_logprobs':21", "top_logprobs", "integer_above_max_value");
}

static void test_echo_user_ignore_eos(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CMPL, "'echo':true,'user':'u-1','ignore_eos':true", &r);
    assert_true(r.echo);
    assert_string_equal(r.user, "u-1");
    assert_true(r.ignore_eos);
    dy_api_request_free(&r);
    ok(CHAT, "'echo':'ignored in chat','ignore_eos':false", &r);
    assert_false(r.echo);
    dy_api_request_free(&r);

    bad(CMPL, "'echo':1", "echo", "invalid_type");
    bad(CHAT, "'user':5", "user", "invalid_type");
    bad(CHAT, "'ignore_eos':'true'", "ignore_eos", "invalid_type");
}

static void test_unsupported_params(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CHAT, "'presence_penalty':0,'frequency_penalty':0.0,'repetition_penalty':1,"
             "'logit_bias':{},'tools':[],'tool_choice':'none','functions':null,"
             "'response_format':{'type':'text'},'parallel_tool_calls':true", &r);
    dy_api_request_free(&r);
    ok(CMPL, "'suffix':'','logit_bias':null", &r);
    dy_api_request_free(&r);

    bad(CMPL, "'presence_penalty':0.5", "presence_penalty", "unsupported_value");
    bad(CHAT, "'frequency_penalty':-1", "frequency_penalty", "unsupported_value");
    bad(CHAT, "'frequency_penalty':-3", "frequency_penalty", "decimal_below_min_value");
    bad(CHAT, "'presence_penalty':'a'", "presence_penalty", "invalid_type");
    bad(CMPL, "'repetition_penalty':1.1", "repetition_penalty", "unsupported_value");
    bad(CMPL, "'repetition_penalty':0", "repetition_penalty", "decimal_below_min_value");
    bad(CMPL, "'logit_bias':{'50256':-100}", "logit_bias", "unsupported_parameter");
    bad(CHAT, "'tools':[{'type':'function','function':{'name':'f g'}}]", "tools[0].function.name",
        "invalid_value");
    bad(CHAT, "'tool_choice':'required'", "tool_choice", "invalid_value");
    bad(CHAT, "'response_format':{'type':'json'}", "response_format.type", "invalid_value");
    bad(CMPL, "'suffix':'end'", "suffix", "unsupported_parameter");
}

static void test_dyad_extension(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CMPL, "'n':5,'dyad':{'select':'majority','answer_regex':'answer is (\\\\d+)'}", &r);
    assert_int_equal(r.select, DY_SELECT_MAJORITY);
    assert_string_equal(r.answer_regex, "answer is (\\d+)");
    dy_api_request_free(&r);
    ok(CHAT, "'dyad':{'select':'logprob'}", &r);
    assert_int_equal(r.select, DY_SELECT_LOGPROB);
    dy_api_request_free(&r);
    ok(CHAT, "'dyad':{'select':null}", &r);
    assert_int_equal(r.select, DY_SELECT_NONE);
    dy_api_request_free(&r);

    bad(CMPL, "'dyad':'majority'", "dyad", "invalid_type");
    bad(CMPL, "'dyad':{'selct':'majority'}", "dyad.selct", "unknown_parameter");
    bad(CMPL, "'dyad':{'select':'best'}", "dyad.select", "invalid_value");
    bad(CMPL, "'dyad':{'select':1}", "dyad.select", "invalid_type");
    bad(CMPL, "'dyad':{'select':'majority','answer_regex':'(unclosed'}", "dyad.answer_regex",
        "invalid_value");
    bad(CMPL, "'dyad':{'select':'majority','answer_regex':[]}", "dyad.answer_regex",
        "invalid_type");
    bad(CMPL, "'dyad':{'answer_regex':'x'}", "dyad.answer_regex", "invalid_value");
    bad(CMPL, "'dyad':{'select':'logprob','answer_regex':'x'}", "dyad.answer_regex",
        "invalid_value");
    char big[1100], extra[1300];
    memset(big, 'a', 1025);
    big[1025] = 0;
    snprintf(extra, sizeof extra, "'dyad':{'select':'majority','answer_regex':'%s'}", big);
    bad(CMPL, extra, "dyad.answer_regex", "string_above_max_length");
}

/* ==== structured output ==== */

#define PERSON "{'type':'object','properties':{'name':{'type':'string'},'age':{'type':'integer'}}," \
               "'required':['name','age']}"

/* Parses `extra` and checks the format and its grammar: text has none, the JSON formats a
 * whole grammar (with its root rule) whose length is given. */
static void expect_format(dy_api_kind k, const char *extra, dy_api_format format)
{
    dy_api_request r;
    ok(k, extra, &r);
    assert_int_equal(r.format, format);
    if (format == DY_FORMAT_TEXT)
        assert_null(r.grammar);
    else {
        assert_non_null(r.grammar);
        assert_int_equal(r.grammar_len, strlen(r.grammar));
        assert_non_null(strstr(r.grammar, "root ::="));
    }
    dy_api_request_free(&r);
    assert_null(r.grammar);
}

static void test_response_format(void **st)
{
    (void)st;
    expect_format(CHAT, "'response_format':{'type':'text'}", DY_FORMAT_TEXT);
    expect_format(CHAT, "'response_format':null", DY_FORMAT_TEXT);
    expect_format(CHAT, "'response_format':{'type':'json_object'}", DY_FORMAT_JSON_OBJECT);
    expect_format(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'person-1_x',"
                        "'description':'a person','strict':true,'schema':" PERSON "}}",
                  DY_FORMAT_JSON_SCHEMA);
    /* strict false and null optional fields: the schema is enforced all the same */
    expect_format(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p',"
                        "'strict':false,'description':null,'schema':" PERSON "}}",
                  DY_FORMAT_JSON_SCHEMA);
    /* the schema's own keys are in the grammar */
    dy_api_request r;
    ok(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p','schema':" PERSON
             "}}", &r);
    assert_non_null(strstr(r.grammar, "age"));
    dy_api_request_free(&r);
    /* completions: the same object as dyad.grammar; chat's field is not one of its own */
    expect_format(CMPL, "'dyad':{'grammar':{'type':'json_schema','json_schema':{'name':'p',"
                        "'schema':" PERSON "}}}", DY_FORMAT_JSON_SCHEMA);
    expect_format(CMPL, "'dyad':{'grammar':{'type':'json_object'},'select':'logprob'},'n':3",
                  DY_FORMAT_JSON_OBJECT);
    expect_format(CMPL, "'response_format':{'type':'json_object'}", DY_FORMAT_TEXT);
}

static void test_response_format_errors(void **st)
{
    (void)st;
    const char *rf = "response_format", *js = "response_format.json_schema";
    bad(CHAT, "'response_format':'json'", rf, "invalid_type");
    bad(CHAT, "'response_format':{}", "response_format.type", "missing_required_parameter");
    bad(CHAT, "'response_format':{'type':3}", "response_format.type", "invalid_type");
    bad(CHAT, "'response_format':{'type':'yaml'}", "response_format.type", "invalid_value");
    bad(CHAT, "'response_format':{'type':'json_schema'}", js, "missing_required_parameter");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':[]}", js, "invalid_type");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'schema':" PERSON "}}",
        "response_format.json_schema.name", "missing_required_parameter");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':7,'schema':{}}}",
        "response_format.json_schema.name", "invalid_type");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'','schema':{}}}",
        "response_format.json_schema.name", "invalid_value");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'a b','schema':{}}}",
        "response_format.json_schema.name", "invalid_value");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'caf\\u00e9',"
              "'schema':{}}}", "response_format.json_schema.name", "invalid_value");
    char name[80], extra[256];
    memset(name, 'n', 65);
    name[65] = 0;
    snprintf(extra, sizeof extra, "'response_format':{'type':'json_schema','json_schema':"
             "{'name':'%s','schema':{}}}", name);
    bad(CHAT, extra, "response_format.json_schema.name", "invalid_value");
    name[64] = 0; /* 64 is allowed */
    snprintf(extra, sizeof extra, "'response_format':{'type':'json_schema','json_schema':"
             "{'name':'%s','schema':{'type':'object'}}}", name);
    dy_api_request r;
    ok(CHAT, extra, &r);
    dy_api_request_free(&r);
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p'}}",
        "response_format.json_schema.schema", "missing_required_parameter");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p','schema':'x'}}",
        "response_format.json_schema.schema", "invalid_type");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p','strict':'yes',"
              "'schema':{}}}", "response_format.json_schema.strict", "invalid_type");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p','description':1,"
              "'schema':{}}}", "response_format.json_schema.description", "invalid_type");
    /* the compiler's refusals, with the keyword's path */
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p','schema':"
              "{'type':'object','properties':{'age':{'type':'integer','multipleOf':7}}}}}",
        "response_format.json_schema.schema.properties.age.multipleOf", NULL);
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p','schema':"
              "{'type':'object','required':3}}}", "response_format.json_schema.schema.required",
        "invalid_value");
    /* a path longer than the 64 bytes other params need */
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p','schema':"
              "{'type':'object','properties':{'address':{'type':'object','properties':"
              "{'street':{'type':'string','format':'email'}}}}}}}",
        "response_format.json_schema.schema.properties.address.properties.street.format",
        "unsupported_parameter");
    bad(CHAT, "'response_format':{'type':'json_schema','json_schema':{'name':'p','schema':"
              "{'type':'array','items':{'type':'string'},'minItems':3,'maxItems':1}}}",
        "response_format.json_schema.schema.minItems", "invalid_value");
    /* completions: the same errors under dyad.grammar */
    bad(CMPL, "'dyad':{'grammar':'json'}", "dyad.grammar", "invalid_type");
    bad(CHAT, "'dyad':{'grammar':{'type':'json_object'}}", "dyad.grammar", "invalid_value");
    bad(CHAT, "'response_format':{'type':'json_object'},'dyad':{'grammar':{'type':'json_object'}}",
        "dyad.grammar", "invalid_value");
    bad(CMPL, "'dyad':{'grammar':{'type':'json_schema'}}", "dyad.grammar.json_schema",
        "missing_required_parameter");
    bad(CMPL, "'dyad':{'grammar':{'type':'json_schema','json_schema':{'name':'p','schema':"
              "{'type':'object','properties':{'age':{'type':'integer','multipleOf':7}}}}}}",
        "dyad.grammar.json_schema.schema.properties.age.multipleOf", NULL);
}

/* --max-schema-bytes counts the schema as compact JSON, whatever the body's spacing. */
static void test_max_schema_bytes(void **st)
{
    (void)st;
    dy_api_limits l = lim();
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}";
    l.max_schema_bytes = strlen(schema);
    char body[1024];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
             "\"hi\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
             "\"p\",\"schema\":{ \"type\" : \"object\",  \"properties\": {\"a\":{\"type\":"
             "\"string\"}}}}}}");
    dy_api_request r;
    dy_api_error e;
    assert_int_equal(parse_raw(CHAT, body, strlen(body), &l, &r, &e), 0);
    assert_non_null(r.grammar);
    dy_api_request_free(&r);
    l.max_schema_bytes--;
    expect_error_raw(CHAT, body, strlen(body), &l, 400, "response_format.json_schema.schema",
                     "invalid_value");
    assert_int_equal(dy_api_limits_default(0).max_schema_bytes, 65536);
}

static void test_unknown_fields_ignored(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CHAT, "'metadata':{'a':[1,{'b':null}]},'store':false,'min_tokens':3,'modalities':['text']", &r);
    assert_string_equal(r.model, "m");
    dy_api_request_free(&r);
}

/* ==== bad bodies ==== */

static void test_bad_json(void **st)
{
    (void)st;
    dy_api_limits l = lim();
    const char *cases[] = {
        "{\"model\":\"m\",\"prompt\":\"p\"",         /* truncated */
        "{\"model\":\"m\",\"prompt\":\"p\"} x",      /* trailing garbage */
        "{\"model\":\"m\",\"model\":\"n\",\"prompt\":\"p\"}", /* duplicate key */
        "{\"model\":\"m\",\"prompt\":\"a\\u0000b\"}", /* NUL in a string */
        "{\"model\":\"m\",\"prompt\":\"\\ud800\"}",  /* lone surrogate */
        "{\"model\":\"m\",\"prompt\":\"p\",}",       /* trailing comma */
        "{'model':'m'}",                              /* single quotes */
        "",                                           /* empty */
        "[1,2]", "\"x\"", "3", "null",                /* not an object */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_error_raw(CMPL, cases[i], strlen(cases[i]), &l, 400, "", NULL);
    expect_error_raw(CMPL, NULL, 0, &l, 400, "", NULL);
    /* invalid UTF-8: a raw 0xff byte, and an overlong encoding of '/' */
    const char *bad_utf8[] = {"{\"model\":\"m\",\"prompt\":\"a\xff\"}",
                              "{\"model\":\"m\",\"prompt\":\"a\xc0\xaf\"}"};
    for (int i = 0; i < 2; i++)
        expect_error_raw(CMPL, bad_utf8[i], strlen(bad_utf8[i]), &l, 400, "", NULL);
    /* a NUL byte inside the body (the length says there is more) */
    const char nul[] = "{\"model\":\"m\",\"prompt\":\"p\"}\0{}";
    expect_error_raw(CMPL, nul, sizeof nul - 1, &l, 400, "", NULL);
}

static void test_deep_nesting(void **st)
{
    (void)st;
    dy_api_limits l = lim();
    /* deeper than our limit (64) but within jansson's: rejected by us, even in an unknown field */
    char body[4096];
    int p = snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",\"x\":");
    for (int i = 0; i < 100; i++)
        body[p++] = '[';
    for (int i = 0; i < 100; i++)
        body[p++] = ']';
    body[p++] = '}';
    expect_error_raw(CMPL, body, (size_t)p, &l, 400, "", NULL);
    /* 63 levels below the top object are fine */
    p = snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",\"x\":");
    for (int i = 0; i < 63; i++)
        body[p++] = '[';
    for (int i = 0; i < 63; i++)
        body[p++] = ']';
    body[p++] = '}';
    dy_api_request r;
    dy_api_error e;
    assert_int_equal(dy_api_parse(body, (size_t)p, CMPL, &l, &r, &e), 0);
    dy_api_request_free(&r);
    /* far deeper than jansson's own limit: a parse error, not a stack overflow */
    size_t n = 200000;
    char *deep = malloc(n);
    memset(deep, '[', n);
    expect_error_raw(CMPL, deep, n, &l, 400, "", NULL);
    free(deep);
}

static void test_body_too_large(void **st)
{
    (void)st;
    dy_api_limits l = lim();
    l.max_body_bytes = 16;
    const char *b = "{\"model\":\"m\",\"prompt\":\"p\"}";
    expect_error_raw(CMPL, b, strlen(b), &l, 413, "", "request_too_large");
    l.max_body_bytes = strlen(b);
    dy_api_request r;
    dy_api_error e;
    assert_int_equal(dy_api_parse(b, strlen(b), CMPL, &l, &r, &e), 0);
    dy_api_request_free(&r);
}

/* Values inside this layer's ranges that the sampler (engine/sampler.c, the check the worker
 * applies) refuses once they are single precision: refused here, naming the field. */
static void test_sampling_as_the_worker_sees_it(void **st)
{
    (void)st;
    dy_api_request r;
    bad(CMPL, "'top_p':1e-300", "top_p", "invalid_value");
    bad(CHAT, "'top_p':1e-46", "top_p", "invalid_value");
    bad(CHAT, "'top_p':1e-300,'stream':true", "top_p", "invalid_value");
    ok(CMPL, "'top_p':1e-30,'min_p':1e-300,'temperature':1e-300", &r); /* > 0, or 0 is valid */
    assert_true(r.sampling.top_p > 0 && r.sampling.min_p == 0 && r.sampling.temperature == 0);
    assert_null(dy_sampling_check(&r.sampling));
    dy_api_request_free(&r);
}

/* The sequence limit names what makes a request large; dyad serve lowers it to --max-queue. */
static void test_sequence_limit(void **st)
{
    (void)st;
    dy_api_limits l = lim();
    l.max_sequences = 4;
    char *b = J("{'model':'m','prompt':'p','n':5}");
    expect_error_raw(CMPL, b, strlen(b), &l, 400, "n", "invalid_value");
    free(b);
    b = J("{'model':'m','prompt':'p','n':2,'best_of':5}");
    expect_error_raw(CMPL, b, strlen(b), &l, 400, "best_of", "invalid_value");
    free(b);
    b = J("{'model':'m','prompt':['a','b','c'],'n':2}");
    expect_error_raw(CMPL, b, strlen(b), &l, 400, "n", "invalid_value");
    free(b);
    b = J("{'model':'m','messages':[{'role':'user','content':'hi'}],'n':4}");
    dy_api_request r;
    dy_api_error e;
    assert_int_equal(dy_api_parse(b, strlen(b), CHAT, &l, &r, &e), 0);
    dy_api_request_free(&r);
    free(b);
}

/* ==== after tokenization ==== */

static void test_max_new_tokens(void **st)
{
    (void)st;
    dy_api_limits l = lim();
    dy_api_error e;
    dy_api_request r;
    ok(CMPL, "", &r);
    assert_int_equal(dy_api_max_new_tokens(&r, 10, &l, &e), 16);
    assert_int_equal(dy_api_max_new_tokens(&r, CTX - 16, &l, &e), 16);
    assert_int_equal(dy_api_max_new_tokens(&r, CTX - 15, &l, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "context_length_exceeded");
    assert_string_equal(e.param, "prompt");
    assert_int_equal(dy_api_max_new_tokens(&r, 0, &l, &e), -1);
    assert_string_equal(e.param, "prompt");
    dy_api_request_free(&r);

    /* Parsed (echo-only scoring), but no worker generates 0 tokens. */
    ok(CMPL, "'max_tokens':0", &r);
    assert_int_equal(dy_api_max_new_tokens(&r, 10, &l, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "max_tokens");
    assert_string_equal(e.code, "integer_below_min_value");
    dy_api_request_free(&r);

    ok(CHAT, "", &r);
    assert_int_equal(dy_api_max_new_tokens(&r, 500, &l, &e), CTX - 500);
    assert_int_equal(dy_api_max_new_tokens(&r, CTX - 1, &l, &e), 1);
    assert_int_equal(dy_api_max_new_tokens(&r, CTX, &l, &e), -1);
    assert_string_equal(e.code, "context_length_exceeded");
    assert_string_equal(e.param, "messages");
    dy_api_request_free(&r);

    ok(CHAT, "'max_tokens':100", &r);
    assert_int_equal(dy_api_max_new_tokens(&r, 400, &l, &e), 100);
    assert_int_equal(dy_api_max_new_tokens(&r, 413, &l, &e), -1);
    assert_non_null(strstr(e.message, "513 tokens"));
    dy_api_request_free(&r);
}

/* ==== errors ==== */

static json_t *error_obj(const dy_api_error *e, json_t **root)
{
    char *s = dy_api_error_json(e);
    assert_non_null(s);
    *root = json_loads(s, 0, NULL);
    free(s);
    assert_non_null(*root);
    assert_int_equal(json_object_size(*root), 1);
    json_t *er = json_object_get(*root, "error");
    assert_int_equal(json_object_size(er), 4);
    return er;
}

static void check_error(const dy_api_error *e, int status, const char *type, const char *code,
                        const char *param)
{
    json_t *root, *er = error_obj(e, &root);
    assert_int_equal(e->status, status);
    assert_string_equal(json_string_value(json_object_get(er, "type")), type);
    if (code)
        assert_string_equal(json_string_value(json_object_get(er, "code")), code);
    else
        assert_true(json_is_null(json_object_get(er, "code")));
    if (param)
        assert_string_equal(json_string_value(json_object_get(er, "param")), param);
    else
        assert_true(json_is_null(json_object_get(er, "param")));
    assert_true(json_string_length(json_object_get(er, "message")) > 0);
    json_decref(root);
}

static void test_error_objects(void **st)
{
    (void)st;
    dy_api_error e;
    dy_api_error_unauthorized(&e);
    check_error(&e, 401, "invalid_request_error", "invalid_api_key", NULL);
    dy_api_error_model_not_found(&e, "gpt-4");
    check_error(&e, 404, "invalid_request_error", "model_not_found", "model");
    assert_non_null(strstr(e.message, "gpt-4"));
    dy_api_error_route_not_found(&e, "POST", "/v1/embeddings");
    check_error(&e, 404, "invalid_request_error", NULL, NULL);
    assert_string_equal(e.message, "Invalid URL (POST /v1/embeddings)");
    dy_api_error_method_not_allowed(&e, "GET", "/v1/completions");
    check_error(&e, 405, "invalid_request_error", "method_not_allowed", NULL);
    dy_api_error_too_large(&e, 1024);
    check_error(&e, 413, "invalid_request_error", "request_too_large", NULL);
    dy_api_error_queue_full(&e);
    check_error(&e, 429, "requests", "rate_limit_exceeded", NULL);
    dy_api_error_unavailable(&e, "workers are starting.");
    check_error(&e, 503, "server_error", "service_unavailable", NULL);
    dy_api_error_internal(&e, "worker died");
    check_error(&e, 500, "server_error", NULL, NULL);
    dy_api_error_set(&e, 400, "invalid_request_error", "x", "p", "quote \" and \\ and \n");
    check_error(&e, 400, "invalid_request_error", "x", "p");

    /* a message truncated in the middle of a character is still valid JSON (U+FFFD) */
    char model[400];
    for (int i = 0; i < 199; i++)
        memcpy(model + 2 * i, "\xc3\xa9", 2);
    model[398] = 0;
    dy_api_error_model_not_found(&e, model);
    assert_int_equal(strlen(e.message), sizeof e.message - 1);
    check_error(&e, 404, "invalid_request_error", "model_not_found", "model");
}

/* ==== responses ==== */

/* Follows a path like "choices.0.logprobs.tokens.1" through objects and arrays. */
static json_t *at(json_t *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok && j;
         tok = strtok_r(NULL, ".", &save))
        j = json_is_array(j) ? json_array_get(j, (size_t)atoi(tok)) : json_object_get(j, tok);
    return j;
}

static const char *s_at(json_t *j, const char *path)
{
    json_t *v = at(j, path);
    if (!json_is_string(v))
        fail_msg("no string at %s", path);
    return json_string_value(v);
}

static long long i_at(json_t *j, const char *path)
{
    json_t *v = at(j, path);
    if (!json_is_integer(v))
        fail_msg("no integer at %s", path);
    return json_integer_value(v);
}

static double r_at(json_t *j, const char *path)
{
    json_t *v = at(j, path);
    if (!json_is_number(v))
        fail_msg("no number at %s", path);
    return json_number_value(v);
}

static json_t *load(char *s)
{
    assert_non_null(s);
    assert_null(strchr(s, '\n')); /* compact: one line, so it fits an SSE data: line */
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    assert_non_null(j);
    return j;
}

static void test_completion_response(void **st)
{
    (void)st;
    dy_api_meta m = {CMPL, "cmpl-abc", 1700000000, "stories", NULL};
    dy_api_alt top0[] = {{"Once", 4, -0.1f}, {"One", 3, -2.5f}, {"Once", 4, -7.0f}};
    dy_api_token_lp lps[] = {
        {"Hi", 2, 0, true, 0, NULL, 0},            /* echoed first token: no logprob */
        {"Once", 4, -0.1f, false, 2, top0, 3},
        {" upon", 5, -0.25f, false, 6, NULL, 0},
    };
    dy_api_choice ch[] = {
        {0, "HiOnce upon", 11, DY_END_LENGTH, true, lps, 3, false, NULL, 0, false},
        {1, "x", 1, DY_END_STOP, false, NULL, 0, false, NULL, 0, false},
    };
    dy_api_usage u = {5, 7, 3};
    json_t *dyad = json_pack("{s:i,s:f}", "worker", 2, "overlap", 0.75);
    json_t *j = load(dy_api_response_json(&m, ch, 2, &u, dyad));
    assert_int_equal(dyad->refcount, 1); /* borrowed, not stolen */
    json_decref(dyad);

    assert_string_equal(s_at(j, "id"), "cmpl-abc");
    assert_string_equal(s_at(j, "object"), "text_completion");
    assert_int_equal(i_at(j, "created"), 1700000000);
    assert_string_equal(s_at(j, "model"), "stories");
    assert_null(at(j, "system_fingerprint"));
    assert_int_equal(json_array_size(at(j, "choices")), 2);
    assert_int_equal(i_at(j, "choices.0.index"), 0);
    assert_string_equal(s_at(j, "choices.0.text"), "HiOnce upon");
    assert_string_equal(s_at(j, "choices.0.finish_reason"), "length");
    assert_string_equal(s_at(j, "choices.1.finish_reason"), "stop");
    assert_true(json_is_null(at(j, "choices.1.logprobs")));
    assert_string_equal(s_at(j, "choices.0.logprobs.tokens.1"), "Once");
    assert_true(json_is_null(at(j, "choices.0.logprobs.token_logprobs.0")));
    assert_true(fabs(r_at(j, "choices.0.logprobs.token_logprobs.2") + 0.25) < 1e-6);
    assert_true(json_is_null(at(j, "choices.0.logprobs.top_logprobs.0")));
    json_t *d = at(j, "choices.0.logprobs.top_logprobs.1");
    assert_int_equal(json_object_size(d), 2); /* the duplicate "Once" keeps the first */
    assert_true(fabs(r_at(d, "Once") + 0.1) < 1e-6);
    assert_true(fabs(r_at(d, "One") + 2.5) < 1e-6);
    assert_int_equal(json_object_size(at(j, "choices.0.logprobs.top_logprobs.2")), 0);
    assert_int_equal(i_at(j, "choices.0.logprobs.text_offset.2"), 6);
    assert_int_equal(i_at(j, "usage.prompt_tokens"), 5);
    assert_int_equal(i_at(j, "usage.completion_tokens"), 7);
    assert_int_equal(i_at(j, "usage.total_tokens"), 12);
    assert_int_equal(i_at(j, "usage.prompt_tokens_details.cached_tokens"), 3);
    assert_int_equal(i_at(j, "dyad.worker"), 2);
    json_decref(j);

    /* no usage and no dyad object: both left out */
    j = load(dy_api_response_json(&m, ch + 1, 1, NULL, NULL));
    assert_null(at(j, "usage"));
    assert_null(at(j, "dyad"));
    json_decref(j);
}

static void test_chat_response(void **st)
{
    (void)st;
    dy_api_meta m = {CHAT, "chatcmpl-1", 42, "llama", "fp_dyad"};
    dy_api_alt alts[] = {{"Hello", 5, -0.01f}, {"Hi", 2, -4.6f}};
    dy_api_token_lp lps[] = {{"Hello", 5, -0.01f, false, 0, alts, 2},
                             {"\xe2\x80", 2, -1.0f, false, 0, NULL, 0}}; /* half a character */
    dy_api_choice ch = {0, "Hello!", 6, DY_END_STOP, true, lps, 2, false, NULL, 0, false};
    dy_api_usage u = {9, 2, 0};
    json_t *j = load(dy_api_response_json(&m, &ch, 1, &u, NULL));
    assert_string_equal(s_at(j, "object"), "chat.completion");
    assert_string_equal(s_at(j, "system_fingerprint"), "fp_dyad");
    assert_string_equal(s_at(j, "choices.0.message.role"), "assistant");
    assert_string_equal(s_at(j, "choices.0.message.content"), "Hello!");
    assert_string_equal(s_at(j, "choices.0.finish_reason"), "stop");
    assert_string_equal(s_at(j, "choices.0.logprobs.content.0.token"), "Hello");
    assert_true(fabs(r_at(j, "choices.0.logprobs.content.0.logprob") + 0.01) < 1e-6);
    assert_int_equal(json_array_size(at(j, "choices.0.logprobs.content.0.bytes")), 5);
    assert_int_equal(i_at(j, "choices.0.logprobs.content.0.bytes.0"), 'H');
    assert_string_equal(s_at(j, "choices.0.logprobs.content.0.top_logprobs.1.token"), "Hi");
    assert_int_equal(i_at(j, "choices.0.logprobs.content.0.top_logprobs.1.bytes.1"), 'i');
    /* invalid UTF-8: U+FFFD in the string, the real bytes in "bytes" */
    assert_string_equal(s_at(j, "choices.0.logprobs.content.1.token"), "\xef\xbf\xbd\xef\xbf\xbd");
    assert_int_equal(i_at(j, "choices.0.logprobs.content.1.bytes.0"), 0xe2);
    assert_int_equal(i_at(j, "choices.0.logprobs.content.1.bytes.1"), 0x80);
    assert_int_equal(json_array_size(at(j, "choices.0.logprobs.content.1.top_logprobs")), 0);
    assert_int_equal(i_at(j, "usage.total_tokens"), 11);
    json_decref(j);
}

static void test_text_sanitised_and_nonfinite(void **st)
{
    (void)st;
    dy_api_meta m = {CMPL, "c", 0, "m", NULL};
    dy_api_token_lp lp = {"a", 1, -INFINITY, false, 0, NULL, 0};
    dy_api_choice ch = {0, "ok \xff\xe2\x82 end", 10, DY_END_STOP, true, &lp, 1, false, NULL, 0, false};
    json_t *j = load(dy_api_response_json(&m, &ch, 1, NULL, NULL));
    assert_string_equal(s_at(j, "choices.0.text"), "ok \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd end");
    assert_true(r_at(j, "choices.0.logprobs.token_logprobs.0") == -9999.0);
    json_decref(j);
    /* a NUL byte inside the text survives as \u0000 */
    dy_api_choice z = {0, "a\0b", 3, DY_END_STOP, false, NULL, 0, false, NULL, 0, false};
    char *s = dy_api_response_json(&m, &z, 1, NULL, NULL);
    assert_non_null(strstr(s, "\"a\\u0000b\""));
    free(s);
}

static void test_chat_stream_chunks(void **st)
{
    (void)st;
    dy_api_meta m = {CHAT, "chatcmpl-s", 7, "llama", NULL};
    dy_api_choice first = {0, NULL, 0, DY_END_NONE, false, NULL, 0, true, NULL, 0, false};
    json_t *j = load(dy_api_chunk_json(&m, &first, 1, true));
    assert_string_equal(s_at(j, "object"), "chat.completion.chunk");
    assert_string_equal(s_at(j, "id"), "chatcmpl-s");
    assert_int_equal(json_object_size(at(j, "choices.0.delta")), 2);
    assert_string_equal(s_at(j, "choices.0.delta.role"), "assistant");
    assert_string_equal(s_at(j, "choices.0.delta.content"), "");
    assert_true(json_is_null(at(j, "choices.0.finish_reason")));
    assert_true(json_is_null(at(j, "choices.0.logprobs")));
    assert_true(json_is_null(at(j, "usage"))); /* present and null with include_usage */
    json_decref(j);

    dy_api_alt alt = {"Hi", 2, -0.5f};
    dy_api_token_lp lp = {"Hi", 2, -0.5f, false, 0, &alt, 1};
    dy_api_choice mid[] = {{0, "Hi", 2, DY_END_NONE, true, &lp, 1, false, NULL, 0, false},
                           {1, " there", 6, DY_END_NONE, false, NULL, 0, false, NULL, 0, false}};
    j = load(dy_api_chunk_json(&m, mid, 2, false));
    assert_null(at(j, "usage")); /* absent without include_usage */
    assert_int_equal(json_object_size(at(j, "choices.0.delta")), 1);
    assert_string_equal(s_at(j, "choices.0.delta.content"), "Hi");
    assert_string_equal(s_at(j, "choices.0.logprobs.content.0.token"), "Hi");
    assert_int_equal(i_at(j, "choices.1.index"), 1);
    assert_string_equal(s_at(j, "choices.1.delta.content"), " there");
    json_decref(j);

    dy_api_choice last = {0, NULL, 0, DY_END_LENGTH, false, NULL, 0, false, NULL, 0, false};
    json_t *dyad = json_pack("{s:s}", "selected", "majority");
    j = load(dy_api_chunk_json_dyad(&m, &last, 1, true, dyad));
    assert_int_equal(dyad->refcount, 1);
    json_decref(dyad);
    assert_int_equal(json_object_size(at(j, "choices.0.delta")), 0);
    assert_string_equal(s_at(j, "choices.0.finish_reason"), "length");
    assert_string_equal(s_at(j, "dyad.selected"), "majority");
    json_decref(j);

    dy_api_usage u = {3, 4, 1};
    j = load(dy_api_usage_chunk_json(&m, &u));
    assert_string_equal(s_at(j, "object"), "chat.completion.chunk");
    assert_true(json_is_array(at(j, "choices")));
    assert_int_equal(json_array_size(at(j, "choices")), 0);
    assert_int_equal(i_at(j, "usage.total_tokens"), 7);
    assert_int_equal(i_at(j, "usage.prompt_tokens_details.cached_tokens"), 1);
    json_decref(j);
}

static void test_completion_stream_chunks(void **st)
{
    (void)st;
    dy_api_meta m = {CMPL, "cmpl-s", 7, "stories", NULL};
    dy_api_choice c = {0, " upon", 5, DY_END_NONE, false, NULL, 0, true, NULL, 0, false};
    json_t *j = load(dy_api_chunk_json(&m, &c, 1, false));
    assert_string_equal(s_at(j, "object"), "text_completion");
    assert_string_equal(s_at(j, "choices.0.text"), " upon");
    assert_true(json_is_null(at(j, "choices.0.finish_reason")));
    assert_true(json_is_null(at(j, "choices.0.logprobs")));
    assert_null(at(j, "choices.0.delta"));
    assert_null(at(j, "usage"));
    json_decref(j);
    dy_api_choice end = {0, NULL, 0, DY_END_STOP, false, NULL, 0, false, NULL, 0, false};
    j = load(dy_api_chunk_json(&m, &end, 1, true));
    assert_string_equal(s_at(j, "choices.0.text"), "");
    assert_string_equal(s_at(j, "choices.0.finish_reason"), "stop");
    assert_true(json_is_null(at(j, "usage")));
    json_decref(j);
    dy_api_usage u = {1, 2, 0};
    j = load(dy_api_usage_chunk_json(&m, &u));
    assert_string_equal(s_at(j, "object"), "text_completion");
    assert_int_equal(json_array_size(at(j, "choices")), 0);
    json_decref(j);
}

/* The names of how a request ended, as clients, metrics labels and the request log show
 * them, and OpenAI's finish_reason, which knows only "stop" and "length". */
static void test_end_names(void **st)
{
    (void)st;
    assert_string_equal(dy_end_name(DY_END_STOP), "stop");
    assert_string_equal(dy_end_name(DY_END_LENGTH), "length");
    assert_string_equal(dy_end_name(DY_END_CANCELLED), "cancelled");
    assert_string_equal(dy_end_name(DY_END_ERROR), "error");
    assert_string_equal(dy_end_name(DY_END_REJECTED), "rejected");
    assert_string_equal(dy_end_name(DY_END_NONE), "none");
    dy_api_meta m = {CMPL, "cmpl-e", 7, "stories", NULL};
    const dy_end ends[] = {DY_END_STOP, DY_END_LENGTH, DY_END_CANCELLED, DY_END_ERROR};
    const char *const reasons[] = {"stop", "length", "stop", "stop"};
    for (int i = 0; i < 4; i++) {
        dy_api_choice c = {0, "x", 1, ends[i], false, NULL, 0, false, NULL, 0, false};
        json_t *j = load(dy_api_response_json(&m, &c, 1, NULL, NULL));
        assert_string_equal(s_at(j, "choices.0.finish_reason"), reasons[i]);
        json_decref(j);
    }
}

static void test_sse_frame(void **st)
{
    (void)st;
    char *f = dy_sse_frame("{\"a\":1}");
    assert_string_equal(f, "data: {\"a\":1}\n\n");
    free(f);
    assert_null(dy_sse_frame(NULL));
    assert_string_equal(DY_SSE_DONE, "data: [DONE]\n\n");
    /* an error mid-stream goes out as a data frame holding the error object */
    dy_api_error e;
    dy_api_error_internal(&e, "worker lost");
    char *js = dy_api_error_json(&e);
    f = dy_sse_frame(js);
    assert_int_equal(strncmp(f, "data: {\"error\":", 15), 0);
    assert_int_equal(strcmp(f + strlen(f) - 2, "\n\n"), 0);
    free(js);
    free(f);
}

static void test_utf8_sendable(void **st)
{
    (void)st;
    assert_int_equal(dy_utf8_sendable("abc", 3), 3);
    assert_int_equal(dy_utf8_sendable("", 0), 0);
    assert_int_equal(dy_utf8_sendable("a\xe2\x82", 3), 1);       /* € missing its last byte */
    assert_int_equal(dy_utf8_sendable("a\xe2\x82\xac", 4), 4);   /* complete */
    assert_int_equal(dy_utf8_sendable("\xf0\x9f\x98", 3), 0);    /* emoji, 3 of 4 */
    assert_int_equal(dy_utf8_sendable("\xc3", 1), 0);
    assert_int_equal(dy_utf8_sendable("a\xe0\x80", 3), 3);       /* can never complete: send */
    assert_int_equal(dy_utf8_sendable("a\x80", 2), 2);           /* stray continuation */
    assert_int_equal(dy_utf8_sendable("\xc3\xa9\xc3", 3), 2);
    assert_int_equal(dy_utf8_sendable("a\xff", 2), 2);
}

static void test_models_json(void **st)
{
    (void)st;
    dy_api_model ms[] = {{"stories260K", 1700000000, NULL}, {"llama-3-8b", 5, "me"}};
    json_t *j = load(dy_api_models_json(ms, 2));
    assert_string_equal(s_at(j, "object"), "list");
    assert_int_equal(json_array_size(at(j, "data")), 2);
    assert_string_equal(s_at(j, "data.0.id"), "stories260K");
    assert_string_equal(s_at(j, "data.0.object"), "model");
    assert_int_equal(i_at(j, "data.0.created"), 1700000000);
    assert_string_equal(s_at(j, "data.0.owned_by"), "dyad");
    assert_string_equal(s_at(j, "data.1.owned_by"), "me");
    json_decref(j);
    j = load(dy_api_model_json(&ms[1]));
    assert_string_equal(s_at(j, "id"), "llama-3-8b");
    assert_string_equal(s_at(j, "object"), "model");
    json_decref(j);
    j = load(dy_api_models_json(NULL, 0));
    assert_int_equal(json_array_size(at(j, "data")), 0);
    json_decref(j);
}

static void test_limits_default(void **st)
{
    (void)st;
    dy_api_limits l = dy_api_limits_default(4096);
    assert_int_equal(l.max_context, 4096);
    assert_int_equal(l.max_stop, 4);
    assert_true(l.max_n >= 1 && l.max_sequences >= l.max_n);
    assert_true(l.max_body_bytes > 0);
    assert_int_equal(dy_api_limits_default(0).max_context, 2048);
}


/* The answer's size bound, by hand: tokens of 10 bytes, the worst JSON escape (6 per byte);
 * a logprob entry is 64 + (6 + 4) x 10 = 164 bytes, for the token and each alternative. */
static void test_response_bound(void **st)
{
    (void)st;
    dy_api_limits l = lim();
    l.max_token_bytes = 10;
    l.max_response_bytes = 100000;
    dy_api_request r;
    dy_api_error e;
    ok(DY_API_CHAT, "'n':2,'max_tokens':100", &r);
    /* 1024 + 512 x 2 choices + 60 x 200 tokens */
    assert_int_equal(dy_api_response_bound(&r, 200, &l), 1024 + 1024 + 12000);
    assert_int_equal(dy_api_check_response_size(&r, 200, &l, &e), 0);
    dy_api_request_free(&r);
    ok(DY_API_CHAT, "'n':2,'max_tokens':100,'logprobs':true,'top_logprobs':3", &r);
    /* per token 60 + 164 x 4 = 716 */
    assert_int_equal(dy_api_response_bound(&r, 200, &l), 1024 + 1024 + 716 * 200);
    assert_int_equal(dy_api_check_response_size(&r, 200, &l, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "top_logprobs");
    assert_string_equal(e.code, "response_too_large");
    r.stream = true; /* a stream is not built whole */
    assert_int_equal(dy_api_check_response_size(&r, 200, &l, &e), 0);
    dy_api_request_free(&r);
    ok(DY_API_COMPLETIONS, "'n':3,'max_tokens':500", &r);
    l.max_response_bytes = 50000; /* 1024 + 1536 + 60 x 1500 = 92560 */
    assert_int_equal(dy_api_check_response_size(&r, 1500, &l, &e), -1);
    assert_string_equal(e.param, "n");
    l.max_response_bytes = 0; /* no bound */
    assert_int_equal(dy_api_check_response_size(&r, 1500, &l, &e), 0);
    dy_api_request_free(&r);
}

/* ==== tools ==== */

#define WEATHER "{'type':'function','function':{'name':'get_weather','description':'d'," \
                "'parameters':{'type':'object','properties':{'city':{'type':'string'}}," \
                "'required':['city']},'strict':true}}"

static void test_tools(void **st)
{
    (void)st;
    dy_api_request r;
    ok(CHAT, "'tools':[" WEATHER ",{'type':'function','function':{'name':'now'}}]", &r);
    assert_int_equal(r.n_tools, 2);
    assert_int_equal(r.tool_choice, DY_TOOLS_AUTO); /* the default with tools */
    assert_true(r.parallel_tool_calls);
    assert_string_equal(r.tools[0].name, "get_weather");
    assert_string_equal(r.tools[0].description, "d");
    assert_string_equal(r.tools[0].parameters,
                        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                        "\"required\":[\"city\"]}");
    assert_non_null(strstr(r.tool_rules[0], "tool0 ::="));
    assert_null(r.tools[1].description);
    assert_null(r.tools[1].parameters); /* none: the arguments are {} */
    assert_non_null(strstr(r.tool_rules[1], "tool1 ::="));
    assert_null(r.grammar); /* gen.c builds a forced call's grammar for the family */
    dy_api_request_free(&r);

    ok(CHAT, "'tools':[" WEATHER "],'tool_choice':{'type':'function','function':{'name':'get_weather'}},"
             "'parallel_tool_calls':false", &r);
    assert_int_equal(r.tool_choice, DY_TOOLS_FUNCTION);
    assert_int_equal(r.tool_forced, 0);
    assert_false(r.parallel_tool_calls);
    dy_api_request_free(&r);
    ok(CHAT, "'tools':[" WEATHER "],'tool_choice':'required'", &r);
    assert_int_equal(r.tool_choice, DY_TOOLS_REQUIRED);
    dy_api_request_free(&r);
    ok(CHAT, "'tools':[" WEATHER "],'tool_choice':'none'", &r);
    assert_int_equal(r.tool_choice, DY_TOOLS_NONE);
    dy_api_request_free(&r);
    ok(CHAT, "'tool_choice':'auto'", &r); /* auto without tools is none */
    assert_int_equal(r.tool_choice, DY_TOOLS_NONE);
    dy_api_request_free(&r);

    /* a round trip: the assistant's calls and the tool's answer */
    ok_body(CHAT, "{'model':'m','tools':[" WEATHER "],'messages':[{'role':'user','content':'w?'},"
                  "{'role':'assistant','content':null,'tool_calls':[{'id':'call_1','type':'function',"
                  "'function':{'name':'get_weather','arguments':'{\\\"city\\\": \\\"Paris\\\"}'}}]},"
                  "{'role':'tool','tool_call_id':'call_1','content':'sunny'}]}", &r);
    assert_int_equal(r.messages[1].n_calls, 1);
    assert_string_equal(r.messages[1].calls[0].id, "call_1");
    assert_string_equal(r.messages[1].calls[0].name, "get_weather");
    assert_string_equal(r.messages[1].calls[0].arguments, "{\"city\": \"Paris\"}");
    assert_string_equal(r.messages[1].content, "");
    assert_string_equal(r.messages[2].tool_call_id, "call_1");
    dy_api_request_free(&r);
}

static void test_tools_errors(void **st)
{
    (void)st;
    bad(CHAT, "'tools':{}", "tools", "invalid_type");
    bad(CHAT, "'tools':[3]", "tools[0]", "invalid_type");
    bad(CHAT, "'tools':[{'function':{'name':'f'}}]", "tools[0].type", "missing_required_parameter");
    bad(CHAT, "'tools':[{'type':'fn','function':{'name':'f'}}]", "tools[0].type", "invalid_value");
    bad(CHAT, "'tools':[{'type':'function'}]", "tools[0].function", "missing_required_parameter");
    bad(CHAT, "'tools':[{'type':'function','function':{}}]", "tools[0].function.name",
        "missing_required_parameter");
    bad(CHAT, "'tools':[{'type':'function','function':{'name':''}}]", "tools[0].function.name",
        "invalid_value");
    bad(CHAT, "'tools':[{'type':'function','function':{'name':'f'}},{'type':'function','function':"
              "{'name':'f'}}]", "tools[1].function.name", "invalid_value");
    bad(CHAT, "'tools':[{'type':'function','function':{'name':'f','description':1}}]",
        "tools[0].function.description", "invalid_type");
    bad(CHAT, "'tools':[{'type':'function','function':{'name':'f','strict':'yes'}}]",
        "tools[0].function.strict", "invalid_type");
    bad(CHAT, "'tools':[{'type':'function','function':{'name':'f','parameters':[]}}]",
        "tools[0].function.parameters", "invalid_type");
    bad(CHAT, "'tools':[{'type':'function','function':{'name':'f','parameters':{'type':'string'}}}]",
        "tools[0].function.parameters.type", "invalid_value");
    bad(CHAT, "'tools':[{'type':'function','function':{'name':'f','parameters':{'type':'object',"
              "'properties':{'a':{'type':'number','multipleOf':3}}}}}]",
        "tools[0].function.parameters.properties.a.multipleOf", "unsupported_parameter");
    bad(CHAT, "'tool_choice':'always'", "tool_choice", "invalid_value");
    bad(CHAT, "'tool_choice':3", "tool_choice", "invalid_type");
    bad(CHAT, "'tools':[" WEATHER "],'tool_choice':{'type':'function','function':{'name':'other'}}",
        "tool_choice.function.name", "invalid_value");
    bad(CHAT, "'tools':[" WEATHER "],'tool_choice':{'type':'function'}", "tool_choice.function",
        "missing_required_parameter");
    bad(CHAT, "'tools':[" WEATHER "],'tool_choice':{'type':'x','function':{'name':'f'}}",
        "tool_choice.type", "invalid_value");
    bad(CHAT, "'tools':[" WEATHER "],'parallel_tool_calls':1", "parallel_tool_calls", "invalid_type");
    bad(CHAT, "'tools':[" WEATHER "],'tool_choice':'required','response_format':{'type':'json_object'}",
        "tool_choice", "invalid_value");
    /* messages */
    bad_body(CHAT, "{'model':'m','messages':[{'role':'tool','content':'x'}]}",
             "messages[0].tool_call_id", "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'tool','content':'x','tool_call_id':4}]}",
             "messages[0].tool_call_id", "invalid_type");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'tool','tool_call_id':'c'}]}",
             "messages[0].content", "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'assistant','tool_calls':{}}]}",
             "messages[0].tool_calls", "invalid_type");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'user','content':'q'},{'role':'assistant',"
                   "'tool_calls':[{'type':'function','function':{'name':'f','arguments':'{}'}}]}]}",
             "messages[1].tool_calls[0].id", "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'assistant','tool_calls':[{'id':'c',"
                   "'type':'tool','function':{'name':'f','arguments':'{}'}}]}]}",
             "messages[0].tool_calls[0].type", "invalid_value");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'assistant','tool_calls':[{'id':'c'}]}]}",
             "messages[0].tool_calls[0].function", "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'assistant','tool_calls':[{'id':'c',"
                   "'function':{'arguments':'{}'}}]}]}",
             "messages[0].tool_calls[0].function.name", "missing_required_parameter");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'assistant','tool_calls':[{'id':'c',"
                   "'function':{'name':'f','arguments':'[1]'}}]}]}",
             "messages[0].tool_calls[0].function.arguments", "invalid_value");
    bad_body(CHAT, "{'model':'m','messages':[{'role':'assistant','tool_calls':[{'id':'c',"
                   "'function':{'name':'f','arguments':{}}}]}]}",
             "messages[0].tool_calls[0].function.arguments", "invalid_type");
}

/* message.tool_calls, content null and finish_reason "tool_calls"; the streamed deltas. */
static void test_tool_call_responses(void **st)
{
    (void)st;
    dy_api_meta m = {DY_API_CHAT, "chatcmpl-1", 5, "stories", NULL};
    dy_api_tool_call tc = {0, "call_ab", "f", "{\"a\":1}"};
    dy_api_choice ch = {.index = 0, .finish = DY_END_STOP, .tool_calls = &tc, .n_tool_calls = 1,
                        .finish_tool_calls = true};
    dy_api_usage u = {1, 2, 0};
    json_t *j = load(dy_api_response_json(&m, &ch, 1, &u, NULL));
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0), *msg = json_object_get(c0, "message");
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "tool_calls");
    assert_true(json_is_null(json_object_get(msg, "content")));
    json_t *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(call, "id")), "call_ab");
    assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
    assert_null(json_object_get(call, "index")); /* only deltas number their calls */
    json_t *fn = json_object_get(call, "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "f");
    assert_string_equal(json_string_value(json_object_get(fn, "arguments")), "{\"a\":1}");
    json_decref(j);
    /* content before the calls stays */
    ch.text = "Let me see.";
    ch.len = 11;
    j = load(dy_api_response_json(&m, &ch, 1, &u, NULL));
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "Let me see.");
    json_decref(j);
    /* a delta piece: its index and the arguments only */
    dy_api_tool_call piece = {1, NULL, NULL, "{\"a\""};
    dy_api_choice d = {.index = 0, .tool_calls = &piece, .n_tool_calls = 1};
    j = load(dy_api_chunk_json(&m, &d, 1, false));
    json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    assert_null(json_object_get(delta, "content"));
    call = json_array_get(json_object_get(delta, "tool_calls"), 0);
    assert_int_equal(json_integer_value(json_object_get(call, "index")), 1);
    assert_null(json_object_get(call, "id"));
    assert_null(json_object_get(json_object_get(call, "function"), "name"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
                        "{\"a\"");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_defaults),
        cmocka_unit_test(test_chat_defaults),
        cmocka_unit_test(test_required_fields),
        cmocka_unit_test(test_prompt_forms),
        cmocka_unit_test(test_prompt_errors),
        cmocka_unit_test(test_messages_forms),
        cmocka_unit_test(test_messages_errors),
        cmocka_unit_test(test_max_tokens),
        cmocka_unit_test(test_sampling_params),
        cmocka_unit_test(test_stop),
        cmocka_unit_test(test_stream_options),
        cmocka_unit_test(test_n_and_best_of),
        cmocka_unit_test(test_sampling_as_the_worker_sees_it),
        cmocka_unit_test(test_sequence_limit),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_echo_user_ignore_eos),
        cmocka_unit_test(test_unsupported_params),
        cmocka_unit_test(test_dyad_extension),
        cmocka_unit_test(test_response_format),
        cmocka_unit_test(test_response_format_errors),
        cmocka_unit_test(test_tools),
        cmocka_unit_test(test_tools_errors),
        cmocka_unit_test(test_tool_call_responses),
        cmocka_unit_test(test_max_schema_bytes),
        cmocka_unit_test(test_unknown_fields_ignored),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_body_too_large),
        cmocka_unit_test(test_max_new_tokens),
        cmocka_unit_test(test_error_objects),
        cmocka_unit_test(test_completion_response),
        cmocka_unit_test(test_chat_response),
        cmocka_unit_test(test_text_sanitised_and_nonfinite),
        cmocka_unit_test(test_chat_stream_chunks),
        cmocka_unit_test(test_completion_stream_chunks),
        cmocka_unit_test(test_end_names),
        cmocka_unit_test(test_sse_frame),
        cmocka_unit_test(test_utf8_sendable),
        cmocka_unit_test(test_models_json),
        cmocka_unit_test(test_limits_default),
        cmocka_unit_test(test_response_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
