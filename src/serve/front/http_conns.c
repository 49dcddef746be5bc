/* http_conns.c — see http_conns.h. Read in order: the registry of open connections, the
 * answers written here, the phases http.c moves a connection through, the watchdog. */
#include "serve/front/http_conns.h"
#include "serve/front/openai.h"
#include "util/buf.h"
#include "util/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Connections accepted past --max-connections only to be answered 503: while they last, a
 * client over the limit is told so instead of waiting in the listen queue. */
#define REFUSAL_RESERVE 64
/* After an answer written here, how long the connection stays open reading what the client
 * still sends (its request, usually already on the way): closing a socket with unread input
 * resets it, and a reset can destroy the answer before the client reads it. */
#define LINGER_S 1.0
/* How often the watchdog looks at the deadlines. */
#define CHECK_EVERY_S 0.05

typedef enum {
    WAIT_HEADERS,  /* for a request's line and headers: header deadline */
    READ_BODY,     /* the headers are in, the body is being read: body deadline */
    ANSWERING,     /* http.c answers it: no deadline */
    ANSWERED_HERE, /* answered by this file; closed at the end of its linger */
} phase;

typedef struct watched {
    struct watched *prev, *next;
    int fd;
    phase ph;
    double deadline; /* dy_now() seconds; 0: none */
    bool counted;    /* one of the --max-connections served */
} watched;

struct dy_http_conns {
    dy_http_conns_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a request ended or a connection closed; or stop */
    watched *head;          /* every open connection */
    int served;             /* open connections counted against --max-connections */
    bool draining, stop;
    pthread_t watchdog;
};

int dy_http_connection_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The registered connection of c, NULL if there is none (it could not be registered). */
static watched *watched_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static double deadline_in(double now, double seconds)
{
    return seconds > 0 ? now + seconds : 0;
}

/* ---------------------------------------------------------------- answers written here */

/* A whole HTTP/1.1 response with the error's JSON body, written at once (the socket is
 * non-blocking, and a fresh or idle one has room for it); then no more is sent, and the
 * connection lingers, no longer counted against the limit. Best effort: a client that reads
 * nothing gets only the close. */
static void answer_here(dy_http_conns *t, watched *w, const dy_api_error *e, bool retry_after,
                        double now)
{
    char *json = dy_api_error_json(e);
    if (json) {
        dy_buf b = {0};
        dy_buf_printf(&b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n%s\r\n%s", e->status,
                      MHD_get_reason_phrase_for((unsigned)e->status), strlen(json),
                      retry_after ? "Retry-After: 1\r\n" : "", json);
        if (dy_buf_cstr(&b))
            (void)send(w->fd, b.data, b.len, MSG_DONTWAIT | MSG_NOSIGNAL);
        dy_buf_free(&b);
        free(json);
    }
    shutdown(w->fd, SHUT_WR);
    t->served -= w->counted;
    w->counted = false;
    w->ph = ANSWERED_HERE;
    w->deadline = now + LINGER_S;
}

/* A new connection the server will not serve: 503, and why. */
static bool refused_at_start(dy_http_conns *t, watched *w, double now)
{
    dy_api_error e;
    if (t->draining)
        dy_api_error_unavailable(&e, "the server is shutting down.");
    else if (t->served >= t->cfg.max_connections)
        dy_api_error_unavailable(&e, "all connections (--max-connections) are in use; "
                                     "retry shortly.");
    else
        return false;
    answer_here(t, w, &e, !t->draining, now);
    return true;
}

/* A connection past its deadline: 408 while its request is still coming in; closed at the
 * end of its linger once answered. */
static void expire(dy_http_conns *t, watched *w, double now)
{
    if (w->ph == ANSWERED_HERE) {
        shutdown(w->fd, SHUT_RDWR); /* libmicrohttpd sees the end and closes it */
        w->deadline = 0;
        return;
    }
    bool headers = w->ph == WAIT_HEADERS;
    dy_api_error e;
    dy_api_error_set(&e, 408, "invalid_request_error", "request_timeout", NULL,
                     "The request's %s did not arrive within %g s (%s).",
                     headers ? "headers" : "body",
                     headers ? t->cfg.header_timeout_s : t->cfg.body_timeout_s,
                     headers ? "--header-timeout" : "--body-timeout");
    answer_here(t, w, &e, false, now);
}

/* ---------------------------------------------------------------- the registry */

static void link_watched(dy_http_conns *t, watched *w)
{
    w->next = t->head;
    if (t->head)
        t->head->prev = w;
    t->head = w;
}

static void unlink_watched(dy_http_conns *t, watched *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        t->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
}

static void connection_started(dy_http_conns *t, struct MHD_Connection *c, void **socket_context)
{
    int fd = dy_http_connection_fd(c);
    watched *w = calloc(1, sizeof *w);
    if (!w) /* served unwatched: no deadlines, not counted (its client still gets answers) */
        return;
    w->fd = fd;
    *socket_context = w;
    double now = dy_now();
    pthread_mutex_lock(&t->mu);
    link_watched(t, w);
    if (!refused_at_start(t, w, now)) {
        w->counted = true;
        t->served++;
        w->ph = WAIT_HEADERS;
        w->deadline = deadline_in(now, t->cfg.header_timeout_s);
    }
    pthread_mutex_unlock(&t->mu);
}

static void connection_closed(dy_http_conns *t, void **socket_context)
{
    watched *w = *socket_context;
    if (!w)
        return;
    pthread_mutex_lock(&t->mu);
    unlink_watched(t, w);
    t->served -= w->counted;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mu);
    free(w);
    *socket_context = NULL;
}

void dy_http_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        connection_started(cls, c, socket_context);
    else
        connection_closed(cls, socket_context);
}

/* ---------------------------------------------------------------- phases */

/* Moves c's connection to phase `to` with a deadline `seconds` from now (0: none), unless it
 * was answered here; false then. */
static bool move(dy_http_conns *t, struct MHD_Connection *c, phase to, double seconds)
{
    watched *w = watched_of(c);
    if (!w) /* unwatched (connection_started had no memory): always ours */
        return true;
    pthread_mutex_lock(&t->mu);
    bool ours = w->ph != ANSWERED_HERE;
    if (ours) {
        w->ph = to;
        w->deadline = deadline_in(dy_now(), seconds);
    }
    pthread_mutex_unlock(&t->mu);
    return ours;
}

bool dy_http_conns_headers_in(dy_http_conns *t, struct MHD_Connection *c)
{
    return move(t, c, READ_BODY, t->cfg.body_timeout_s);
}

bool dy_http_conns_reading(dy_http_conns *t, struct MHD_Connection *c)
{
    watched *w = watched_of(c);
    pthread_mutex_lock(&t->mu);
    bool ours = !w || w->ph != ANSWERED_HERE;
    pthread_mutex_unlock(&t->mu);
    return ours;
}

bool dy_http_conns_answering(dy_http_conns *t, struct MHD_Connection *c)
{
    return move(t, c, ANSWERING, 0);
}

void dy_http_conns_request_done(dy_http_conns *t, struct MHD_Connection *c)
{
    /* A kept-alive connection first waits idle (libmicrohttpd closes it after
     * idle_timeout_s of silence); its next request's headers are due at most
     * header_timeout_s after that. */
    double wait = t->cfg.header_timeout_s > 0 ? t->cfg.idle_timeout_s + t->cfg.header_timeout_s
                                              : 0;
    move(t, c, WAIT_HEADERS, wait);
    pthread_mutex_lock(&t->mu);
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mu);
}

/* ---------------------------------------------------------------- draining */

void dy_http_conns_drain(dy_http_conns *t)
{
    pthread_mutex_lock(&t->mu);
    t->draining = true;
    pthread_mutex_unlock(&t->mu);
}

bool dy_http_conns_draining(dy_http_conns *t)
{
    pthread_mutex_lock(&t->mu);
    bool d = t->draining;
    pthread_mutex_unlock(&t->mu);
    return d;
}

static bool requests_open(const dy_http_conns *t)
{
    for (const watched *w = t->head; w; w = w->next)
        if (w->ph == READ_BODY || w->ph == ANSWERING)
            return true;
    return false;
}

bool dy_http_conns_wait_answered(dy_http_conns *t, double timeout_s)
{
    double deadline = dy_now() + timeout_s;
    pthread_mutex_lock(&t->mu);
    while (requests_open(t) && dy_now() < deadline)
        dy_cond_wait_until(&t->changed, &t->mu, deadline);
    bool done = !requests_open(t);
    pthread_mutex_unlock(&t->mu);
    return done;
}

/* ---------------------------------------------------------------- the watchdog */

static void *watchdog_main(void *arg)
{
    dy_http_conns *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        double now = dy_now();
        for (watched *w = t->head; w; w = w->next)
            if (w->deadline > 0 && now >= w->deadline)
                expire(t, w, now);
        dy_cond_wait_for(&t->changed, &t->mu, CHECK_EVERY_S);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

unsigned dy_http_conns_accept_limit(const dy_http_conns_config *cfg)
{
    return (unsigned)cfg->max_connections + REFUSAL_RESERVE;
}

dy_http_conns *dy_http_conns_new(const dy_http_conns_config *cfg)
{
    dy_http_conns *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->cfg = *cfg;
    pthread_mutex_init(&t->mu, NULL);
    if (dy_cond_init(&t->changed) != 0) {
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    if (pthread_create(&t->watchdog, NULL, watchdog_main, t) != 0) {
        pthread_cond_destroy(&t->changed);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    return t;
}

void dy_http_conns_free(dy_http_conns *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->watchdog, NULL);
    while (t->head) { /* none once the daemon has stopped; freed all the same */
        watched *w = t->head;
        t->head = w->next;
        free(w);
    }
    pthread_cond_destroy(&t->changed);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
