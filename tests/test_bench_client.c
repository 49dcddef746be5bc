/* test_bench_client.c — the HTTP client and the run loop against a small in-process server
 * (a thread per connection, HTTP/1.1 keep-alive, SSE sent in 7-byte pieces): requests carry
 * the OpenAI fields the bench promises (token-id prompt, max_tokens, stream, include_usage,
 * ignore_eos), streams are measured, connections are reused, an HTTP error's message and an
 * unreachable server are reported, and closed-loop, open-loop and trace-replay runs complete
 * their requests. Pure helpers (endpoint URL, text prompts) are checked too. */
#include "testutil.h"
#include "bench/bench_client.h"
#include "bench/bench_run.h"
#include "bench/bench_stats.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the mock server -------------------------------------------------------------------------- */

typedef struct {
    int fd, port;
    pthread_t th;
    atomic_int connections, requests;
    pthread_mutex_t mu;
    char last_body[16384];
} mock;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static int send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads one request (headers and body) into buf; returns the body or NULL at EOF. */
static char *read_request(int fd, char *buf, size_t cap, char *path, size_t path_cap)
{
    size_t len = 0;
    char *end = NULL;
    while (!(end = strstr(buf, "\r\n\r\n"))) {
        ssize_t k = recv(fd, buf + len, cap - 1 - len, 0);
        if (k <= 0)
            return NULL;
        len += (size_t)k;
        buf[len] = 0;
    }
    sscanf(buf, "%*s %255s", path);
    (void)path_cap;
    char *cl = strcasestr(buf, "Content-Length:");
    size_t body_len = cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0;
    char *body = end + 4;
    while ((size_t)(buf + len - body) < body_len) {
        ssize_t k = recv(fd, buf + len, cap - 1 - len, 0);
        if (k <= 0)
            return NULL;
        len += (size_t)k;
    }
    body[body_len] = 0;
    return body;
}

static void respond_json(int fd, int status, const char *json)
{
    char head[256];
    int n = snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n", status, strlen(json));
    send_all(fd, head, (size_t)n);
    send_all(fd, json, strlen(json));
}

/* An SSE answer of max_tokens chunks, a usage chunk and [DONE], written in small pieces. */
static void respond_stream(int fd, json_t *req)
{
    long k = (long)json_integer_value(json_object_get(req, "max_tokens"));
    long p = (long)json_array_size(json_object_get(req, "prompt"));
    size_t cap = 256 + (size_t)k * 64, len = 0;
    char *s = malloc(cap);
    len += (size_t)snprintf(s + len, cap - len, ": ping\r\n\r\n");
    for (long i = 0; i < k; i++)
        len += (size_t)snprintf(s + len, cap - len, "data: {\"choices\":[{\"text\":\" t%ld\"}]}"
                                "\r\n\r\n", i);
    len += (size_t)snprintf(s + len, cap - len, "data: {\"choices\":[],\"usage\":{"
                            "\"prompt_tokens\":%ld,\"completion_tokens\":%ld}}\r\n\r\n"
                            "data: [DONE]\r\n\r\n", p, k);
    char head[256];
    int n = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     "Content-Length: %zu\r\n\r\n", len);
    send_all(fd, head, (size_t)n);
    for (size_t off = 0; off < len; off += 7) {
        send_all(fd, s + off, len - off < 7 ? len - off : 7);
        if (off % 49 == 0)
            sleep_ms(1);
    }
    free(s);
}

typedef struct {
    mock *m;
    int fd;
} conn;

static void *conn_main(void *arg)
{
    conn c = *(conn *)arg;
    free(arg);
    char *buf = malloc(1 << 20), path[256];
    for (;;) {
        buf[0] = 0;
        char *body = read_request(c.fd, buf, 1 << 20, path, sizeof path);
        if (!body)
            break;
        atomic_fetch_add(&c.m->requests, 1);
        if (!strcmp(path, "/v1/models")) {
            respond_json(c.fd, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"mock-model\"}]}");
            continue;
        }
        pthread_mutex_lock(&c.m->mu);
        snprintf(c.m->last_body, sizeof c.m->last_body, "%s", body);
        pthread_mutex_unlock(&c.m->mu);
        json_t *req = json_loads(body, 0, NULL);
        const char *model = json_string_value(json_object_get(req, "model"));
        if (model && !strcmp(model, "missing"))
            respond_json(c.fd, 404, "{\"error\":{\"message\":\"The model `missing` does not "
                                    "exist.\",\"type\":\"NotFoundError\"}}");
        else
            respond_stream(c.fd, req);
        json_decref(req);
    }
    free(buf);
    close(c.fd);
    return NULL;
}

static void *accept_main(void *arg)
{
    mock *m = arg;
    for (;;) {
        int fd = accept(m->fd, NULL, NULL);
        if (fd < 0)
            break;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        atomic_fetch_add(&m->connections, 1);
        conn *c = malloc(sizeof *c);
        *c = (conn){m, fd};
        pthread_t th;
        pthread_create(&th, NULL, conn_main, c);
        pthread_detach(th);
    }
    return NULL;
}

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 64), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

static mock *mock_start(void)
{
    mock *m = calloc(1, sizeof *m);
    m->fd = listen_any(&m->port);
    pthread_mutex_init(&m->mu, NULL);
    pthread_create(&m->th, NULL, accept_main, m);
    return m;
}

static void mock_stop(mock *m)
{
    shutdown(m->fd, SHUT_RDWR);
    close(m->fd);
    pthread_join(m->th, NULL);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static char *mock_url(const mock *m)
{
    static char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/", m->port);
    return url;
}

/* ---- client tests ----------------------------------------------------------------------------- */

typedef struct {
    dyb_stats stats;
    int done;
    char first_error[512];
} sink;

static void on_done(void *user, dyb_result *r)
{
    sink *s = user;
    s->done++;
    if (!r->ok && !s->first_error[0])
        snprintf(s->first_error, sizeof s->first_error, "%s", r->error);
    assert_int_equal(dyb_stats_add(&s->stats, r), 0);
}

static dyb_client_config client_config(const char *url, const char *model)
{
    return (dyb_client_config){url, "secret", {model, DYB_EP_COMPLETIONS, false, true, NULL}, 30};
}

static void drain(dyb_client *c, sink *s)
{
    for (int i = 0; i < 2000 && dyb_client_in_flight(c) > 0; i++)
        dyb_client_poll(c, 50, on_done, s);
    assert_int_equal(dyb_client_in_flight(c), 0);
}

static void test_models_and_streams_with_keepalive(void **st)
{
    (void)st;
    mock *m = mock_start();
    char err[512], *model = NULL;
    assert_int_equal(dyb_fetch_models(mock_url(m), NULL, 5, &model, err, sizeof err), 0);
    assert_string_equal(model, "mock-model");
    dyb_client_config cc = client_config(mock_url(m), model);
    dyb_client *c = dyb_client_new(&cc, err, sizeof err);
    assert_non_null(c);
    int before = atomic_load(&m->connections);
    int32_t ids[5] = {3, 4, 5, 6, 7};
    dyb_request r = {.isl = 5, .osl = 6, .tokens = ids};
    sink s = {0};
    dyb_stats_init(&s.stats);
    for (int round = 0; round < 4; round++) { /* 4 rounds of 3 concurrent requests */
        for (int i = 0; i < 3; i++)
            assert_int_equal(dyb_client_start(c, &r, round * 3 + i), 0);
        drain(c, &s);
    }
    assert_int_equal(s.done, 12);
    assert_int_equal(s.stats.failed, 0);
    assert_int_equal(s.stats.n_ok, 12);
    assert_int_equal(s.stats.output_tokens, 72);
    assert_int_equal(s.stats.input_tokens, 60);
    assert_int_equal(s.stats.n_itl, 12 * 5);
    assert_true(atomic_load(&m->connections) - before <= 3); /* kept alive */
    /* the request carried what the bench promises */
    pthread_mutex_lock(&m->mu);
    json_t *o = json_loads(m->last_body, 0, NULL);
    pthread_mutex_unlock(&m->mu);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "model")), "mock-model");
    assert_int_equal(json_array_size(json_object_get(o, "prompt")), 5);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(o, "prompt"), 4)), 7);
    assert_int_equal(json_integer_value(json_object_get(o, "max_tokens")), 6);
    assert_true(json_is_true(json_object_get(o, "stream")));
    assert_true(json_is_true(json_object_get(json_object_get(o, "stream_options"),
                                             "include_usage")));
    assert_true(json_is_true(json_object_get(o, "ignore_eos")));
    json_decref(o);
    dyb_stats_free(&s.stats);
    dyb_client_free(c);
    free(model);
    mock_stop(m);
}

static void test_http_error_message(void **st)
{
    (void)st;
    mock *m = mock_start();
    char err[512];
    dyb_client_config cc = client_config(mock_url(m), "missing");
    dyb_client *c = dyb_client_new(&cc, err, sizeof err);
    int32_t ids[2] = {3, 4};
    dyb_request r = {.isl = 2, .osl = 2, .tokens = ids};
    sink s = {0};
    dyb_stats_init(&s.stats);
    assert_int_equal(dyb_client_start(c, &r, 0), 0);
    drain(c, &s);
    assert_int_equal(s.stats.failed, 1);
    assert_string_equal(s.first_error, "HTTP 404: The model `missing` does not exist.");
    dyb_stats_free(&s.stats);
    dyb_client_free(c);
    mock_stop(m);
}

static void test_unreachable_server(void **st)
{
    (void)st;
    int port, fd = listen_any(&port);
    close(fd); /* nothing listens there now */
    char url[64], err[512], *model = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    assert_int_equal(dyb_fetch_models(url, NULL, 5, &model, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot connect"));
    dyb_client_config cc = client_config(url, "m");
    dyb_client *c = dyb_client_new(&cc, err, sizeof err);
    int32_t ids[1] = {3};
    dyb_request r = {.isl = 1, .osl = 1, .tokens = ids};
    sink s = {0};
    dyb_stats_init(&s.stats);
    assert_int_equal(dyb_client_start(c, &r, 0), 0);
    drain(c, &s);
    assert_int_equal(s.stats.failed, 1);
    assert_non_null(strstr(s.first_error, "cannot connect"));
    dyb_stats_free(&s.stats);
    dyb_client_free(c);
}

/* ---- run loop tests --------------------------------------------------------------------------- */

static volatile sig_atomic_t no_stop;

static void run_with(mock *m, dyb_workload *w, int conc, double rate, bool timed, long n,
                     dyb_stats *stats, dyb_run_outcome *out)
{
    char err[512];
    dyb_client_config cc = client_config(mock_url(m), "mock-model");
    dyb_client *c = dyb_client_new(&cc, err, sizeof err);
    dyb_run_config rc = {w, c, conc, rate, 1, timed, n, 0, 2, 5, false, "t", &no_stop};
    assert_int_equal(dyb_run(&rc, stats, out, err, sizeof err), 0);
    dyb_client_free(c);
}

static void test_run_closed_open_and_trace(void **st)
{
    (void)st;
    mock *m = mock_start();
    char err[512];
    dyb_workload_config wc = {.isl = 16, .osl = 4, .vocab_size = 1000, .time_scale = 1,
                              .length_scale = 1};
    dyb_workload *w = dyb_workload_new(&wc, err, sizeof err);
    dyb_stats s;
    dyb_run_outcome out;

    int before = atomic_load(&m->requests);
    dyb_stats_init(&s);
    run_with(m, w, 3, 0, false, 10, &s, &out);
    assert_int_equal(s.n_ok, 10); /* warmup (2) not counted... */
    assert_int_equal(atomic_load(&m->requests) - before, 12); /* ...but sent */
    assert_int_equal(s.output_tokens, 40);
    assert_false(out.interrupted);
    dyb_stats_free(&s);

    dyb_stats_init(&s);
    run_with(m, w, 0, 50, false, 10, &s, &out); /* 10 arrivals at 50/s: about 0.2 s */
    assert_int_equal(s.n_ok, 10);
    assert_true(out.duration_s > 0.05 && out.duration_s < 5);
    dyb_stats_free(&s);
    dyb_workload_free(w);

    /* a trace: three rows at 0, 150 and 300 ms (time-scaled by 1) */
    char path[] = "/tmp/dyad_test_bench_XXXXXX";
    int fd = mkstemp(path);
    const char *trace =
        "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 3, \"hash_ids\": [1]}\n"
        "{\"timestamp\": 150, \"input_length\": 20, \"output_length\": 3, \"hash_ids\": [1]}\n"
        "{\"timestamp\": 300, \"input_length\": 20, \"output_length\": 3, \"hash_ids\": [2]}\n";
    assert_int_equal(write(fd, trace, strlen(trace)), (ssize_t)strlen(trace));
    close(fd);
    wc.trace = path;
    w = dyb_workload_new(&wc, err, sizeof err);
    assert_non_null(w);
    dyb_stats_init(&s);
    run_with(m, w, 0, 0, true, -1, &s, &out);
    assert_int_equal(s.n_ok, 3);
    assert_true(out.duration_s >= 0.3); /* the last row is sent at 300 ms */
    dyb_stats_free(&s);
    dyb_workload_free(w);
    unlink(path);
    mock_stop(m);
}

static void test_pure_helpers(void **st)
{
    (void)st;
    const char *bases[4] = {"http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/"};
    for (int i = 0; i < 4; i++) {
        char *u = dyb_endpoint_url(bases[i], "/v1/completions");
        assert_string_equal(u, "http://h:1/v1/completions");
        free(u);
    }
    int32_t a[4] = {3, 4, 5, 6}, b[4] = {3, 4, 9, 9};
    char *ta = dyb_prompt_text(a, 4), *tb = dyb_prompt_text(b, 4);
    size_t common = 0;
    while (ta[common] && ta[common] == tb[common])
        common++;
    char *t2 = dyb_prompt_text(a, 2);
    assert_true(common >= strlen(t2)); /* equal ids, equal text prefix */
    assert_int_equal(strncmp(ta, t2, strlen(t2)), 0);
    free(t2);
    free(ta);
    free(tb);
    /* chat requests carry the words as one user message */
    dyb_body_config cc = {"m", DYB_EP_CHAT, false, false, NULL};
    dyb_request r = {.isl = 4, .osl = 9, .tokens = a};
    char *body = dyb_request_body(&cc, &r);
    json_t *o = json_loads(body, 0, NULL);
    json_t *msg = json_array_get(json_object_get(o, "messages"), 0);
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "user");
    assert_int_equal(json_integer_value(json_object_get(o, "max_tokens")), 9);
    assert_null(json_object_get(o, "ignore_eos"));
    assert_null(json_object_get(o, "prompt"));
    json_decref(o);
    free(body);
    /* --response-format: chat's response_format, completions' dyad.grammar */
    json_t *rf = json_pack("{s:s}", "type", "json_object");
    cc.response_format = rf;
    body = dyb_request_body(&cc, &r);
    o = json_loads(body, 0, NULL);
    assert_true(json_equal(json_object_get(o, "response_format"), rf));
    json_decref(o);
    free(body);
    cc.endpoint = DYB_EP_COMPLETIONS;
    body = dyb_request_body(&cc, &r);
    o = json_loads(body, 0, NULL);
    assert_true(json_equal(json_object_get(json_object_get(o, "dyad"), "grammar"), rf));
    assert_null(json_object_get(o, "response_format"));
    json_decref(o);
    free(body);
    /* an agent's turn: dyad.session and dyad.hold, beside the grammar */
    r.session = "agent-3";
    r.hold = true;
    r.hold_ms = 750;
    body = dyb_request_body(&cc, &r);
    o = json_loads(body, 0, NULL);
    json_t *dy = json_object_get(o, "dyad");
    assert_string_equal(json_string_value(json_object_get(dy, "session")), "agent-3");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(dy, "hold"),
                                                        "expected_ms")), 750);
    assert_true(json_equal(json_object_get(dy, "grammar"), rf));
    json_decref(o);
    free(body);
    json_decref(rf);
    /* error bodies: the server's message, whatever shape it has */
    const char *bodies[5][2] = {
        {"{\"error\":{\"message\":\"bad\\nthing\",\"code\":400}}", "bad thing"},
        {"{\"error\":\"plain\"}", "plain"},
        {"{\"detail\":\"fastapi says\"}", "fastapi says"},
        {"Internal Server Error\r\n", "Internal Server Error"},
        {"", "(empty body)"},
    };
    for (int i = 0; i < 5; i++) {
        char out[128];
        dyb_error_text(bodies[i][0], strlen(bodies[i][0]), out, sizeof out);
        assert_string_equal(out, bodies[i][1]);
    }
}

int main(void)
{
    assert_int_equal(dyb_http_init(), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models_and_streams_with_keepalive),
        cmocka_unit_test(test_http_error_message),
        cmocka_unit_test(test_unreachable_server),
        cmocka_unit_test(test_run_closed_open_and_trace),
        cmocka_unit_test(test_pure_helpers),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dyb_http_cleanup();
    return rc;
}
