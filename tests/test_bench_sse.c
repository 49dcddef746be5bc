/* test_bench_sse.c — the SSE parser and the reading of OpenAI streaming chunks: the same byte
 * stream gives the same events however it is split into reads (every split point, byte by
 * byte), with LF, CRLF and CR line ends, comments and multi-line data; a stream's chunks give
 * TTFT, ITL and token counts, including chunks that carry several tokens, usage-less servers,
 * and errors inside the stream. */
#include "testutil.h"
#include "bench/bench_sse.h"
#include "bench/bench_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char log[4096]; /* "event|data\n" per event */
    int n;
} events;

static void collect(void *user, const char *event, const char *data, size_t len)
{
    events *e = user;
    size_t k = strlen(e->log);
    snprintf(e->log + k, sizeof e->log - k, "%s|%.*s\n", event, (int)len, data);
    e->n++;
}

/* Feeds `text` in pieces cut at `cuts` (sorted offsets) and returns the events. */
static events feed_cut(const char *text, const size_t *cuts, int n_cuts)
{
    events e = {{0}, 0};
    dyb_sse p;
    dyb_sse_init(&p, 1 << 20);
    size_t pos = 0, len = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        assert_int_equal(dyb_sse_feed(&p, text + pos, end - pos, collect, &e), 0);
        pos = end;
    }
    dyb_sse_finish(&p, collect, &e);
    dyb_sse_free(&p);
    return e;
}

static const char *const stream_text =
    ": keep-alive comment\n"
    "\n"
    "data: {\"a\":1}\n"
    "\n"
    "data:{\"b\":2}\r\n"
    "\r\n"
    "event: error\n"
    "data: line one\n"
    "data: line two\n"
    "id: 7\n"
    "\n"
    "data: cr only\r\r"
    "data: [DONE]\n\n";

static const char *const expected =
    "message|{\"a\":1}\n"
    "message|{\"b\":2}\n"
    "error|line one\nline two\n"
    "message|cr only\n"
    "message|[DONE]\n";

static void test_sse_whole_and_every_split(void **st)
{
    (void)st;
    events e = feed_cut(stream_text, NULL, 0);
    assert_string_equal(e.log, expected);
    assert_int_equal(e.n, 5);
    size_t len = strlen(stream_text);
    for (size_t a = 1; a < len; a++) { /* one cut anywhere, including inside CRLF */
        events f = feed_cut(stream_text, &a, 1);
        assert_string_equal(f.log, expected);
    }
    for (size_t a = 1; a < len; a += 3) /* two cuts */
        for (size_t b = a + 1; b < len; b += 5) {
            size_t cuts[2] = {a, b};
            events f = feed_cut(stream_text, cuts, 2);
            assert_string_equal(f.log, expected);
        }
    size_t *all = malloc(len * sizeof *all); /* byte by byte */
    for (size_t i = 0; i + 1 < len; i++)
        all[i] = i + 1;
    events g = feed_cut(stream_text, all, (int)len - 1);
    assert_string_equal(g.log, expected);
    free(all);
}

static void test_sse_edge_cases(void **st)
{
    (void)st;
    /* a final event without its blank line is still delivered at the end of the stream */
    events e = feed_cut("data: tail", NULL, 0);
    assert_string_equal(e.log, "message|tail\n");
    /* a blank line with no data dispatches nothing; "data" without a colon is an empty line */
    e = feed_cut("\n\nevent: x\n\ndata\n\n", NULL, 0);
    assert_string_equal(e.log, "message|\n");
    /* a line past the limit is an error */
    dyb_sse p;
    dyb_sse_init(&p, 8);
    events f = {{0}, 0};
    assert_int_equal(dyb_sse_feed(&p, "data: 0123456789", 16, collect, &f), -1);
    dyb_sse_free(&p);
}

/* Feeds one SSE payload at time t. */
static void ev(dyb_stream *s, const char *json, double t)
{
    dyb_stream_event(s, json, strlen(json), t);
}

static void test_stream_completions_with_usage(void **st)
{
    (void)st;
    dyb_stream s;
    dyb_stream_init(&s, 1000);
    ev(&s, "{\"choices\":[{\"text\":\"\"}]}", 1010); /* empty text is not a token */
    ev(&s, "{\"choices\":[{\"text\":\" a\"}]}", 1050);
    ev(&s, "{\"choices\":[{\"text\":\" b\"}]}", 1060);
    ev(&s, "{\"choices\":[{\"text\":\" c\"}]}", 1080);
    ev(&s, "{\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3}}", 1081);
    ev(&s, "[DONE]", 1082);
    dyb_result r = {.prompt_tokens = 10};
    dyb_stream_result(&s, 1090, &r);
    assert_true(r.ok);
    assert_float_equal(r.ttft_ms, 50, 1e-9);
    assert_float_equal(r.e2e_ms, 82, 1e-9); /* ends at [DONE] */
    assert_int_equal(r.output_tokens, 3);
    assert_int_equal(r.prompt_tokens, 12);
    assert_int_equal(r.n_itl, 2);
    assert_float_equal(r.itl[0], 10, 1e-9);
    assert_float_equal(r.itl[1], 20, 1e-9);
    dyb_result_free(&r);
    dyb_stream_free(&s);
}

static void test_stream_chat_and_no_usage(void **st)
{
    (void)st;
    dyb_stream s;
    dyb_stream_init(&s, 0);
    ev(&s, "{\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}", 5);
    ev(&s, "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}", 20);
    ev(&s, "{\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}", 30);
    ev(&s, "{\"choices\":[{\"delta\":{\"content\":\"!\"}}]}", 45);
    dyb_result r = {0};
    dyb_stream_result(&s, 50, &r); /* no [DONE]: the stream's end counts */
    assert_true(r.ok);
    assert_float_equal(r.ttft_ms, 20, 1e-9);
    assert_float_equal(r.e2e_ms, 50, 1e-9);
    assert_int_equal(r.output_tokens, 3); /* counted chunks */
    assert_int_equal(r.n_itl, 2);
    dyb_result_free(&r);
    dyb_stream_free(&s);
}

/* dyad's extension object on the finishing chunk says where the prompt was prefilled and what
 * moving its KV cost; a malformed report counts as placed but not moved. */
static void test_stream_dyad_kv_transfer(void **st)
{
    (void)st;
    const char *finals[] = {
        "{\"choices\":[{\"text\":\"b\",\"finish_reason\":\"length\"}],\"dyad\":{\"choices\":"
        "[{\"index\":0,\"worker\":1,\"prefill_worker\":0,\"kv_transfer\":{\"bytes\":37748736,"
        "\"seconds\":0.027,\"prefill_seconds\":0.7}}]}}",
        "{\"choices\":[{\"text\":\"b\"}],\"dyad\":{\"choices\":[{\"index\":0,\"worker\":1,"
        "\"prefill_worker\":null}]}}",
        "{\"choices\":[{\"text\":\"b\"}],\"dyad\":{\"choices\":[{\"prefill_worker\":0,"
        "\"kv_transfer\":{\"bytes\":-5,\"seconds\":0.1}}]}}",
        "{\"choices\":[{\"text\":\"b\"}],\"dyad\":[1,2]}",
    };
    const bool placed[] = {true, true, true, false}, moved[] = {true, false, false, false};
    for (int i = 0; i < 4; i++) {
        dyb_stream s;
        dyb_stream_init(&s, 0);
        ev(&s, "{\"choices\":[{\"text\":\"a\"}]}", 10);
        ev(&s, finals[i], 20);
        dyb_result r = {0};
        dyb_stream_result(&s, 30, &r);
        assert_true(r.ok);
        assert_int_equal(r.placed, placed[i]);
        assert_int_equal(r.kv_moved, moved[i]);
        if (moved[i]) {
            assert_float_equal(r.kv_bytes, 37748736, 0);
            assert_float_equal(r.kv_ms, 27, 1e-9);
        }
        dyb_result_free(&r);
        dyb_stream_free(&s);
    }
}

/* Chunks of several tokens: k tokens in a chunk count as k gaps of gap/k. */
static void test_stream_multi_token_chunks(void **st)
{
    (void)st;
    /* only a final usage: 7 tokens in 3 chunks; the 6 tokens after the first chunk are spread
     * over the 2 gaps (3 each) */
    dyb_stream s;
    dyb_stream_init(&s, 0);
    ev(&s, "{\"choices\":[{\"text\":\"a\"}]}", 10);
    ev(&s, "{\"choices\":[{\"text\":\"bcd\"}]}", 40);
    ev(&s, "{\"choices\":[{\"text\":\"efg\"}]}", 70);
    ev(&s, "{\"choices\":[],\"usage\":{\"completion_tokens\":7}}", 71);
    dyb_result r = {0};
    dyb_stream_result(&s, 72, &r);
    assert_int_equal(r.output_tokens, 7);
    assert_int_equal(r.n_itl, 6);
    double sum = 0;
    for (size_t i = 0; i < r.n_itl; i++) {
        assert_float_equal(r.itl[i], 10, 1e-9);
        sum += r.itl[i];
    }
    assert_float_equal(sum, 60, 1e-9); /* last chunk − first chunk */
    dyb_result_free(&r);
    dyb_stream_free(&s);
    /* usage on every chunk (continuous usage): each chunk's count is known */
    dyb_stream_init(&s, 0);
    ev(&s, "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":1}}", 10);
    ev(&s, "{\"choices\":[{\"text\":\"bc\"}],\"usage\":{\"completion_tokens\":3}}", 30);
    ev(&s, "{\"choices\":[{\"text\":\"d\"}],\"usage\":{\"completion_tokens\":4}}", 35);
    dyb_result q = {0};
    dyb_stream_result(&s, 40, &q);
    assert_int_equal(q.output_tokens, 4);
    assert_int_equal(q.n_itl, 3);
    assert_float_equal(q.itl[0], 10, 1e-9);
    assert_float_equal(q.itl[1], 10, 1e-9);
    assert_float_equal(q.itl[2], 5, 1e-9);
    dyb_result_free(&q);
    dyb_stream_free(&s);
}

static void test_stream_errors(void **st)
{
    (void)st;
    dyb_stream s;
    dyb_stream_init(&s, 0);
    ev(&s, "{\"choices\":[{\"text\":\"a\"}]}", 10);
    ev(&s, "{\"error\":{\"message\":\"engine exploded\",\"code\":500}}", 20);
    dyb_result r = {0};
    dyb_stream_result(&s, 30, &r);
    assert_false(r.ok);
    assert_non_null(strstr(r.error, "engine exploded"));
    dyb_result_free(&r);
    dyb_stream_free(&s);

    dyb_stream_init(&s, 0);
    ev(&s, "{not json", 10);
    dyb_result q = {0};
    dyb_stream_result(&s, 30, &q);
    assert_false(q.ok);
    assert_non_null(strstr(q.error, "not a JSON object"));
    dyb_result_free(&q);
    dyb_stream_free(&s);

    dyb_stream_init(&s, 0);
    ev(&s, "[DONE]", 10);
    dyb_result e = {0};
    dyb_stream_result(&s, 30, &e);
    assert_false(e.ok);
    assert_non_null(strstr(e.error, "without any generated text"));
    dyb_result_free(&e);
    dyb_stream_free(&s);
}

/* The parser and the stream together, on a realistic stream cut at every byte. */
static void on_payload(void *user, const char *event, const char *data, size_t len)
{
    (void)event;
    dyb_stream_event(user, data, len, 0);
}

static void test_parser_feeds_stream_split_everywhere(void **st)
{
    (void)st;
    const char *text = "data: {\"choices\":[{\"text\":\"x\"}]}\r\n\r\n: ping\r\n\r\n"
                       "data: {\"choices\":[{\"text\":\"y\"}]}\r\n\r\n"
                       "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,"
                       "\"completion_tokens\":2}}\r\n\r\ndata: [DONE]\r\n\r\n";
    size_t len = strlen(text);
    for (size_t cut = 0; cut <= len; cut++) {
        dyb_sse p;
        dyb_stream s;
        dyb_sse_init(&p, 1 << 20);
        dyb_stream_init(&s, 0);
        assert_int_equal(dyb_sse_feed(&p, text, cut, on_payload, &s), 0);
        assert_int_equal(dyb_sse_feed(&p, text + cut, len - cut, on_payload, &s), 0);
        dyb_sse_finish(&p, on_payload, &s);
        assert_int_equal(s.n_chunks, 2);
        assert_int_equal(s.usage_completion, 2);
        assert_int_equal(s.usage_prompt, 5);
        assert_true(s.done);
        assert_null(s.error);
        dyb_stream_free(&s);
        dyb_sse_free(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse_whole_and_every_split),
        cmocka_unit_test(test_sse_edge_cases),
        cmocka_unit_test(test_stream_completions_with_usage),
        cmocka_unit_test(test_stream_chat_and_no_usage),
        cmocka_unit_test(test_stream_multi_token_chunks),
        cmocka_unit_test(test_stream_dyad_kv_transfer),
        cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_parser_feeds_stream_split_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
