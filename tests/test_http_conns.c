/* test_http_conns.c — the HTTP frontend's connection limits (serve/front/http_conns.h) on a
 * real libmicrohttpd daemon over loopback, with a handler that moves connections through
 * their phases as http.c does and answers "ok" (GET /slow: after 0.5 s). Each test starts
 * its own daemon with short deadlines, talks raw HTTP over sockets and reads the answer
 * bytes: a total header and body deadline (408, however often bytes come), 503 with
 * Retry-After past the connection limit and during a drain, and no deadline on an idle
 * kept-alive connection or an answer that takes long. */
#include "testutil.h"
#include "serve/front/http_conns.h"
#include "util/clock.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEADER_S 0.3
#define BODY_S 0.3

typedef struct {
    dy_http_conns *conns;
    struct MHD_Daemon *d;
    int port;
} daemon_t;

static enum MHD_Result reply_ok(struct MHD_Connection *c)
{
    static char ok[] = "ok";
    struct MHD_Response *r = MHD_create_response_from_buffer(2, ok, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result q = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return q;
}

/* http.c's on_request, reduced to the calls into http_conns. */
static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *data,
                               size_t *size, void **con_cls)
{
    (void)method, (void)version, (void)data;
    dy_http_conns *t = cls;
    static const char started = 1;
    if (!*con_cls) {
        *con_cls = (void *)&started;
        return dy_http_conns_headers_in(t, c) ? MHD_YES : MHD_NO;
    }
    if (*size > 0) {
        *size = 0;
        return dy_http_conns_reading(t, c) ? MHD_YES : MHD_NO;
    }
    if (!dy_http_conns_answering(t, c))
        return MHD_NO;
    if (!strcmp(url, "/slow"))
        usleep(500 * 1000);
    return reply_ok(c);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    dy_http_conns_request_done(cls, c);
    *con_cls = NULL;
}

static daemon_t start(int max_connections)
{
    dy_http_conns_config cfg = {max_connections, HEADER_S, BODY_S, 10};
    daemon_t d = {dy_http_conns_new(&cfg), NULL, 0};
    assert_non_null(d.conns);
    struct sockaddr_in addr = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    d.d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                               MHD_USE_ITC, 0, NULL, NULL, handler, d.conns,
                           MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                           MHD_OPTION_CONNECTION_LIMIT, dy_http_conns_accept_limit(&cfg),
                           MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                           MHD_OPTION_NOTIFY_CONNECTION, dy_http_conns_notify, d.conns,
                           MHD_OPTION_NOTIFY_COMPLETED, completed, d.conns, MHD_OPTION_END);
    assert_non_null(d.d);
    d.port = MHD_get_daemon_info(d.d, MHD_DAEMON_INFO_BIND_PORT)->port;
    return d;
}

static void stop(daemon_t *d)
{
    MHD_stop_daemon(d->d);
    dy_http_conns_free(d->conns);
}

static int dial(const daemon_t *d)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    return fd;
}

static void say(int fd, const char *s)
{
    assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* What the server sends within `seconds`, until it closes, sending `trickle` (if any) every
 * 0.05 s meanwhile; *took: when the first byte came (or the wait ended). */
static char *answer(int fd, double seconds, const char *trickle, double *took)
{
    static char buf[4096];
    size_t len = 0;
    double t0 = dy_now();
    *took = -1;
    while (dy_now() - t0 < seconds && len + 1 < sizeof buf) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) {
            if (trickle && !len)
                send(fd, trickle, strlen(trickle), MSG_NOSIGNAL);
            continue;
        }
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            break;
        if (!len)
            *took = dy_now() - t0;
        len += (size_t)n;
    }
    buf[len] = 0;
    if (*took < 0)
        *took = dy_now() - t0;
    return buf;
}

static void test_header_deadline(void **state)
{
    (void)state;
    daemon_t d = start(8);
    int fd = dial(&d);
    say(fd, "GET /x HTTP/1.1\r\nHost: t\r\n");
    double took;
    char *a = answer(fd, 3, "X-Slow: 1\r\n", &took); /* a header line every 50 ms */
    assert_true(strstr(a, "HTTP/1.1 408 ") == a);
    assert_non_null(strstr(a, "Connection: close\r\n"));
    assert_non_null(strstr(a, "\"code\":\"request_timeout\""));
    assert_non_null(strstr(a, "--header-timeout"));
    assert_true(took >= HEADER_S - 0.05 && took < HEADER_S + 1);
    close(fd);
    stop(&d);
}

static void test_body_deadline(void **state)
{
    (void)state;
    daemon_t d = start(8);
    int fd = dial(&d);
    say(fd, "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n{");
    double took;
    char *a = answer(fd, 3, " ", &took);
    assert_true(strstr(a, "HTTP/1.1 408 ") == a);
    assert_non_null(strstr(a, "--body-timeout"));
    assert_true(took >= BODY_S - 0.05 && took < BODY_S + 1);
    close(fd);
    stop(&d);
}

static void test_limit_answers_503(void **state)
{
    (void)state;
    daemon_t d = start(2);
    int a = dial(&d), b = dial(&d);
    usleep(100 * 1000); /* both accepted */
    int over = dial(&d);
    double took;
    char *r = answer(over, 1, NULL, &took); /* at once, before it sends anything */
    assert_true(strstr(r, "HTTP/1.1 503 ") == r);
    assert_non_null(strstr(r, "Retry-After: 1\r\n"));
    assert_non_null(strstr(r, "--max-connections"));
    assert_true(took < 0.5);
    close(over);
    close(a);
    close(b);
    usleep(100 * 1000); /* the server sees them close */
    int next = dial(&d);
    say(next, "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    r = answer(next, 1, NULL, &took);
    assert_true(strstr(r, "HTTP/1.1 200 ") == r);
    close(next);
    stop(&d);
}

static void test_drain_answers_503(void **state)
{
    (void)state;
    daemon_t d = start(8);
    int slow = dial(&d);
    say(slow, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    usleep(100 * 1000);
    dy_http_conns_drain(d.conns);
    assert_true(dy_http_conns_draining(d.conns));
    int late = dial(&d);
    double took;
    char *r = answer(late, 1, NULL, &took);
    assert_true(strstr(r, "HTTP/1.1 503 ") == r);
    assert_non_null(strstr(r, "shutting down"));
    assert_null(strstr(r, "Retry-After"));
    close(late);
    assert_false(dy_http_conns_wait_answered(d.conns, 0.05)); /* /slow is still answering */
    assert_true(dy_http_conns_wait_answered(d.conns, 3));
    r = answer(slow, 1, NULL, &took);
    assert_true(strstr(r, "HTTP/1.1 200 ") == r);
    close(slow);
    stop(&d);
}

static void test_idle_and_long_answers_are_spared(void **state)
{
    (void)state;
    daemon_t d = start(8);
    int fd = dial(&d);
    double took;
    say(fd, "GET /x HTTP/1.1\r\nHost: t\r\n\r\n");
    char *r = answer(fd, 2 * HEADER_S, NULL, &took); /* then idle past the header deadline */
    assert_true(strstr(r, "HTTP/1.1 200 ") == r);
    /* answered after longer than both deadlines */
    say(fd, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    r = answer(fd, 1, NULL, &took);
    assert_true(strstr(r, "HTTP/1.1 200 ") == r);
    assert_true(took > 0.4);
    close(fd);
    stop(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_deadline),
        cmocka_unit_test(test_body_deadline),
        cmocka_unit_test(test_limit_answers_503),
        cmocka_unit_test(test_drain_answers_503),
        cmocka_unit_test(test_idle_and_long_answers_are_spared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
