/* test_json.c — the frontend's JSON discipline (serve/front/json.h): the builder's own rules,
 * then every response, chunk, error object, vote table and request-log line built while
 * jansson's allocator fails after N allocations (from then on, or only that once), for
 * N = 0, 1, ... until a build meets no failure. Each result must be the one built with memory
 * to spare, or no result (a 500, an error event ending the stream, no log line): never one
 * with fields missing. */
#include "testutil.h"
#include "serve/front/gen.h"
#include "serve/front/json.h"
#include "serve/front/openai.h"
#include "serve/front/select.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- a failing allocator */

/* jansson takes plain function pointers, so the plan is the one piece of state they share. */
static struct {
    long left;      /* allocations that still succeed; -1: all of them */
    bool once;      /* fail only one allocation, then allocate freely again */
    long failures;  /* allocations refused since fail_after */
} plan = {-1, false, 0};

static void *plan_malloc(size_t n)
{
    if (plan.left == 0) {
        plan.failures++;
        if (plan.once)
            plan.left = -1;
        return NULL;
    }
    if (plan.left > 0)
        plan.left--;
    return malloc(n);
}

static void fail_after(long n, bool once)
{
    plan.left = n;
    plan.once = once;
    plan.failures = 0;
}

static void allocate_freely(void)
{
    plan.left = -1;
}

static int setup(void **st)
{
    (void)st;
    json_set_alloc_funcs(plan_malloc, free);
    return 0;
}

/* The sweep gives up on a builder that never stops meeting failures. */
#define MAX_ALLOCS 100000L

/* ---------------------------------------------------------------- the builder */

static void test_builder_records_failures(void **st)
{
    (void)st;
    dy_jb b = {0};
    json_t *o = json_object();
    dy_jb_set(&b, o, "a", json_integer(1));
    assert_false(b.failed);
    dy_jb_set(&b, o, "b", NULL); /* whatever made the value failed */
    assert_true(b.failed);
    assert_null(dy_jb_tree(&b, o)); /* o is released (ASan sees a leak otherwise) */

    dy_jb c = {0};
    dy_jb_set(&c, NULL, "a", json_integer(1)); /* the value is released too */
    assert_true(c.failed);
    dy_jb d = {0};
    dy_jb_append(&d, NULL, json_string("x"));
    assert_true(d.failed);
    assert_null(dy_jb_dump(&d, json_object(), JSON_COMPACT));
    dy_jb e = {0};
    assert_null(dy_jb_tree(&e, NULL)); /* a root that was never made */
    assert_true(e.failed);
}

static void test_builder_whole_tree(void **st)
{
    (void)st;
    dy_jb b = {0};
    json_t *o = json_object(), *a = json_array();
    dy_jb_append(&b, a, json_integer(1));
    dy_jb_append(&b, a, dy_json_str(NULL));
    dy_jb_set(&b, o, "list", a);
    dy_jb_set_first(&b, o, "k", 1, json_integer(1));
    dy_jb_set_first(&b, o, "k", 1, json_integer(2)); /* the first value stays */
    dy_jb_set_first(&b, o, "x\xffy", 3, json_true()); /* a key that is not UTF-8 */
    char *s = dy_jb_dump(&b, o, JSON_COMPACT);
    assert_false(b.failed);
    assert_string_equal(s, "{\"list\":[1,\"\"],\"k\":1,\"x\xEF\xBF\xBDy\":true}");
    free(s);
}

static void test_strings_become_utf8(void **st)
{
    (void)st;
    json_t *j = dy_json_strn("ok \xff\xe2\x82 end", 10);
    assert_string_equal(json_string_value(j), "ok \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD end");
    json_decref(j);
    j = dy_json_strn("a\0b", 3); /* NUL inside is kept: the length is the string's */
    assert_int_equal(json_string_length(j), 3);
    json_decref(j);
    j = dy_json_str("\xe2\x82\xac");
    assert_string_equal(json_string_value(j), "\xe2\x82\xac");
    json_decref(j);
}

/* ---------------------------------------------------------------- pure builders */

typedef char *(*build_fn)(const void *ctx);

/* Builds with the allocator failing after N = 0, 1, ... allocations until a build meets no
 * failure: every build is the reference text exactly, or NULL. */
static void sweep(build_fn build, const void *ctx)
{
    allocate_freely();
    char *ref = build(ctx);
    assert_non_null(ref);
    for (int once = 0; once < 2; once++) {
        long nulls = 0, n = 0;
        for (;; n++) {
            assert_true(n < MAX_ALLOCS);
            fail_after(n, once);
            char *s = build(ctx);
            long failures = plan.failures;
            allocate_freely();
            if (s)
                assert_string_equal(s, ref);
            else
                nulls++;
            free(s);
            if (failures == 0)
                break;
        }
        assert_true(n > 0 && nulls > 0); /* the builder does allocate, and fails whole */
    }
    free(ref);
}

static const dy_api_alt alts[] = {{"Once", 4, -0.1f}, {"One", 3, -2.5f}, {"\xff", 1, -3.0f}};
static const dy_api_token_lp lps[] = {
    {"Hi", 2, 0, true, 0, NULL, 0},
    {"Once", 4, -0.1f, false, 2, alts, 3},
    {" up\xe2\x82", 5, -0.25f, false, 6, alts, 2},
};

static json_t *dyad_fixture(void)
{
    return json_pack("{s:[{s:i, s:i, s:n}]}", "choices", "index", 0, "worker", 1, "prefill_worker");
}

static char *build_response(const void *ctx)
{
    const dy_api_meta *m = ctx;
    dy_api_choice ch[] = {
        {0, "HiOnce up\xe2\x82", 11, DY_END_LENGTH, true, lps, 3, false, NULL, 0, false},
        {1, "x", 1, DY_END_CANCELLED, false, NULL, 0, false, NULL, 0, false},
    };
    dy_api_usage u = {5, 7, 3};
    long left = plan.left;
    allocate_freely(); /* the caller's dyad object is not under test here */
    json_t *dyad = dyad_fixture();
    plan.left = left;
    char *s = dy_api_response_json(m, ch, 2, &u, dyad);
    json_decref(dyad);
    return s;
}

static char *build_chunk(const void *ctx)
{
    const dy_api_meta *m = ctx;
    dy_api_choice ch[] = {{0, "Hi", 2, DY_END_NONE, true, lps + 1, 2, true, NULL, 0, false},
                          {1, NULL, 0, DY_END_STOP, false, NULL, 0, false, NULL, 0, false}};
    return dy_api_chunk_json(m, ch, 2, true);
}

static char *build_usage_chunk(const void *ctx)
{
    dy_api_usage u = {5, 7, 3};
    return dy_api_usage_chunk_json(ctx, &u);
}

static char *build_error(const void *ctx)
{
    (void)ctx;
    dy_api_error e;
    dy_api_error_set(&e, 400, "invalid_request_error", "invalid_type", "messages[0].content",
                     "bad \xff input");
    return dy_api_error_json(&e);
}

static char *build_models(const void *ctx)
{
    (void)ctx;
    dy_api_model m[] = {{"stories", 1700000000, NULL}, {"other", 1, "me"}};
    return dy_api_models_json(m, 2);
}

static char *build_vote(const void *ctx)
{
    json_t *j = dy_vote_json(ctx);
    allocate_freely(); /* the tree is under test, not its text */
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

static void test_api_builders_fail_whole(void **st)
{
    (void)st;
    dy_api_meta cmpl = {DY_API_COMPLETIONS, "cmpl-abc", 1700000000, "stories", "fp"};
    dy_api_meta chat = {DY_API_CHAT, "chatcmpl-abc", 1700000000, "stories", NULL};
    sweep(build_response, &cmpl);
    sweep(build_response, &chat);
    sweep(build_chunk, &cmpl);
    sweep(build_chunk, &chat);
    sweep(build_usage_chunk, &chat);
    sweep(build_error, NULL);
    sweep(build_models, NULL);
}

static void test_vote_table_fails_whole(void **st)
{
    (void)st;
    char err[128];
    dy_vote *v = dy_vote_new(NULL, 5, err, sizeof err);
    const char *texts[] = {"so 41", "42", "it is 42", "none", "7"};
    for (int i = 0; i < 5; i++)
        dy_vote_add(v, i, texts[i], strlen(texts[i]));
    sweep(build_vote, v);
    dy_vote_free(v);
}

/* ---------------------------------------------------------------- whole requests (gen.c) */

/* Same shape: objects with the same keys, arrays of the same length, scalars of the same
 * type — what "no field missing" means where values (times, ids) differ between runs. */
static bool same_shape(json_t *a, json_t *b)
{
    if (json_typeof(a) != json_typeof(b))
        return json_is_number(a) && json_is_number(b);
    if (json_is_object(a)) {
        const char *k;
        json_t *v;
        if (json_object_size(a) != json_object_size(b))
            return false;
        json_object_foreach(a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !same_shape(v, w))
                return false;
        }
    }
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same_shape(json_array_get(a, i), json_array_get(b, i)))
                return false;
    }
    return true;
}

/* A response or chunk without what differs between two identical requests (id, created). */
static json_t *load_stable(const char *s)
{
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    json_object_del(j, "id");
    json_object_del(j, "created");
    return j;
}

typedef struct {
    dy_api_limits limits;
    dy_metrics *metrics;
    dy_reqlog *log;
    char log_path[64];
} server;

static void server_open(server *s)
{
    s->limits = dy_api_limits_default(256);
    s->metrics = dy_metrics_new("stories260K");
    snprintf(s->log_path, sizeof s->log_path, "/tmp/dyad_test_json_XXXXXX");
    int fd = mkstemp(s->log_path);
    assert_true(fd >= 0);
    close(fd);
    char err[256];
    s->log = dy_reqlog_open(s->log_path, err, sizeof err);
    assert_non_null(s->log);
}

static void server_close(server *s)
{
    dy_reqlog_close(s->log);
    dy_metrics_free(s->metrics);
    unlink(s->log_path);
}

/* A request whose samples have all ended, as if its workers had answered: sample i says
 * texts[i % 3] in two tokens; sample 0 was prefilled on another worker. */
static dy_gen *ended_request(server *s, const char *body)
{
    static const char *const texts[][2] = {{"4", "2"}, {"4", "1"}, {" 4", "2"}};
    dy_gen_env env = {.tok = NULL, .chat = DY_CHAT_PLAIN, .limits = &s->limits, .model_id = "m",
                      .workers = NULL, .metrics = s->metrics, .reqlog = s->log};
    dy_api_error err;
    allocate_freely();
    dy_gen *g = dy_gen_new(&env, body, strlen(body), DY_API_COMPLETIONS, 7, &err);
    assert_non_null(g);
    dy_job *j = dy_gen_job(g);
    for (int i = 0; i < j->n_choices; i++) {
        dy_choice *c = &j->choices[i];
        c->worker = i % 2;
        c->overlap_blocks = 1;
        if (i == 0) {
            c->prefill_worker = 2;
            c->xfer_bytes = 4096;
            c->xfer_seconds = 0.001;
            c->prefill_seconds = 0.01;
        }
        for (int k = 0; k < 2; k++) {
            const char *t = texts[i % 3][k];
            dy_msg_token tok = {.id = c->seq_id, .token = 5 + k, .logprob = -0.5f * (float)(k + i),
                                .text = t, .text_len = (uint32_t)strlen(t)};
            assert_true(dy_choice_push_token(c, &tok, dy_now()));
        }
        dy_msg_done d = {.id = c->seq_id, .finish = DY_END_LENGTH, .prompt_tokens = 3,
                         .completion_tokens = 2, .queue_us = 150, .text = ".", .text_len = 1};
        dy_choice_finish(c, &d);
    }
    return g;
}

/* Every line of the request log has the reference line's shape. */
static void log_lines_whole(const char *path, json_t *ref)
{
    size_t len;
    char *text = tu_read_file(path, &len), *save = NULL;
    assert_non_null(text);
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        assert_true(same_shape(j, ref));
        json_decref(j);
    }
    free(text);
}

static json_t *first_log_line(const char *path)
{
    size_t len;
    char *text = tu_read_file(path, &len);
    assert_non_null(text);
    char *nl = strchr(text, '\n');
    assert_non_null(nl);
    *nl = 0;
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    free(text);
    return j;
}

static void answer_fails_whole(const char *body)
{
    server s;
    server_open(&s);
    dy_gen *g = ended_request(&s, body);
    int status = 0;
    char *ref_text = dy_gen_answer(g, &status);
    assert_int_equal(status, 200);
    dy_gen_free(g);
    json_t *ref = load_stable(ref_text), *ref_line = first_log_line(s.log_path);
    assert_non_null(json_object_get(ref, "dyad"));
    char *oom = NULL;
    {
        dy_api_error e;
        dy_api_error_internal(&e, "out of memory");
        oom = dy_api_error_json(&e);
    }
    for (int once = 0; once < 2; once++) {
        long n = 0, failed = 0;
        for (;; n++) {
            assert_true(n < MAX_ALLOCS);
            g = ended_request(&s, body);
            fail_after(n, once);
            char *text = dy_gen_answer(g, &status);
            long failures = plan.failures;
            allocate_freely();
            if (status == 200) {
                json_t *j = load_stable(text);
                assert_true(json_equal(j, ref));
                json_decref(j);
            } else {
                assert_int_equal(status, 500);
                failed++;
                if (once || text) /* only one allocation failed: the error itself is built */
                    assert_string_equal(text, oom);
            }
            free(text);
            dy_gen_free(g);
            if (failures == 0)
                break;
        }
        assert_true(n > 0 && failed > 0);
    }
    log_lines_whole(s.log_path, ref_line);
    free(oom);
    free(ref_text);
    json_decref(ref);
    json_decref(ref_line);
    server_close(&s);
}

static void test_answer_fails_whole(void **st)
{
    (void)st;
    answer_fails_whole("{\"model\":\"m\",\"prompt\":[1,2,3],\"max_tokens\":4,\"n\":2}");
    answer_fails_whole("{\"model\":\"m\",\"prompt\":[1,2,3],\"max_tokens\":4,\"n\":3,"
                       "\"dyad\":{\"select\":\"majority\"}}");
    answer_fails_whole("{\"model\":\"m\",\"prompt\":[[1,2],[3]],\"max_tokens\":4,\"n\":1,"
                       "\"best_of\":3}");
}

/* Every SSE frame of a request that has ended, in order ("[DONE]" as such). */
typedef struct {
    char *frames[64];
    int n;
} stream_frames;

static void take_stream(dy_gen *g, stream_frames *out)
{
    dy_job *j = dy_gen_job(g);
    char buf[1 << 16];
    size_t len = 0;
    pthread_mutex_lock(&j->mu);
    for (int round = 0; !dy_gen_stream_over(g) && round < 100; round++) {
        if (dy_gen_votes(g)) { /* as http.c's stream_reader: votes are counted unlocked */
            pthread_mutex_unlock(&j->mu);
            dy_gen_progress(g);
            pthread_mutex_lock(&j->mu);
        }
        dy_gen_collect(g);
        len += dy_gen_take(g, buf + len, sizeof buf - 1 - len);
    }
    pthread_mutex_unlock(&j->mu);
    buf[len] = 0;
    out->n = 0;
    for (char *p = buf; *p;) {
        assert_int_equal(strncmp(p, "data: ", 6), 0);
        char *end = strstr(p, "\n\n");
        assert_non_null(end);
        assert_true(out->n < 64);
        out->frames[out->n++] = strndup(p + 6, (size_t)(end - p - 6));
        p = end + 2;
    }
}

static void frames_free(stream_frames *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->frames[i]);
    f->n = 0;
}

static bool frame_equal(const char *a, const char *b)
{
    if (!strcmp(a, "[DONE]") || !strcmp(b, "[DONE]"))
        return !strcmp(a, b);
    json_t *x = load_stable(a), *y = load_stable(b);
    bool eq = json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return eq;
}

static void stream_fails_whole(const char *body)
{
    server s;
    server_open(&s);
    stream_frames ref, got;
    dy_gen *g = ended_request(&s, body);
    take_stream(g, &ref);
    dy_gen_record(g);
    dy_gen_free(g);
    assert_true(ref.n >= 3);
    assert_string_equal(ref.frames[ref.n - 1], "[DONE]");
    json_t *ref_line = first_log_line(s.log_path);
    dy_api_error e;
    dy_api_error_internal(&e, "out of memory");
    char *oom = dy_api_error_json(&e);
    for (int once = 0; once < 2; once++) {
        long n = 0, failed = 0;
        for (;; n++) {
            assert_true(n < MAX_ALLOCS);
            g = ended_request(&s, body);
            fail_after(n, once);
            take_stream(g, &got);
            dy_gen_record(g);
            long failures = plan.failures;
            allocate_freely();
            /* What came is the reference up to a point, then the stream's end: [DONE] only
             * as the reference's own last frame or after the error event. */
            int k = 0;
            while (k < got.n && k < ref.n && frame_equal(got.frames[k], ref.frames[k]))
                k++;
            if (k < got.n) {
                failed++;
                assert_string_equal(got.frames[k], oom);
                assert_true(got.n == k + 2 && !strcmp(got.frames[k + 1], "[DONE]"));
            } else if (k < ref.n) {
                failed++;
                assert_false(once); /* only when even the error event could not be built */
            }
            frames_free(&got);
            dy_gen_free(g);
            if (failures == 0)
                break;
        }
        assert_true(n > 0 && failed > 0);
    }
    log_lines_whole(s.log_path, ref_line);
    frames_free(&ref);
    free(oom);
    json_decref(ref_line);
    server_close(&s);
}

static void test_stream_fails_whole(void **st)
{
    (void)st;
    stream_fails_whole("{\"model\":\"m\",\"prompt\":[1,2,3],\"max_tokens\":4,\"n\":2,"
                       "\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
    stream_fails_whole("{\"model\":\"m\",\"prompt\":[1,2,3],\"max_tokens\":4,\"n\":3,"
                       "\"stream\":true,\"dyad\":{\"select\":\"majority\"}}");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builder_records_failures),
        cmocka_unit_test(test_builder_whole_tree),
        cmocka_unit_test(test_strings_become_utf8),
        cmocka_unit_test(test_api_builders_fail_whole),
        cmocka_unit_test(test_vote_table_fails_whole),
        cmocka_unit_test(test_answer_fails_whole),
        cmocka_unit_test(test_stream_fails_whole),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
