/* http_conns.h — the HTTP frontend's connections as libmicrohttpd hands them over, and the
 * limits on them that libmicrohttpd does not keep itself (#18):
 *
 *   - deadlines: a request's line and headers, and then its body, must arrive within a total
 *     time. libmicrohttpd's --timeout is an idle timeout that every byte restarts, so a client
 *     sending a header line every few seconds held its connection forever (slowloris). A
 *     watchdog thread answers a connection past its deadline 408 and closes it.
 *   - the connection limit: past --max-connections, libmicrohttpd stops accepting and new
 *     clients wait unanswered in the listen queue. It is given a reserve of connections above
 *     the limit instead; each of these is answered 503 (with Retry-After) as it arrives.
 *   - the drain: while the server shuts down, every new connection is answered 503.
 *
 * These answers are written to the socket directly, with Connection: close: libmicrohttpd can
 * queue a response only once a request's headers are in, and these connections have none yet.
 * Each connection is registered while open with the phase of its current request (waiting
 * for the headers, reading the body, being answered); http.c moves it along. */
#ifndef DYAD_HTTP_CONNS_H
#define DYAD_HTTP_CONNS_H

#include <microhttpd.h>
#include <stdbool.h>

typedef struct {
    int max_connections;     /* served at once */
    double header_timeout_s; /* the request line and headers, from the connection's start; 0: none */
    double body_timeout_s;   /* the body, from the end of its headers; 0: none */
    double idle_timeout_s;   /* a kept-alive connection may wait this long for its next request
                              * (libmicrohttpd's idle timeout) before its header deadline starts */
} dy_http_conns_config;

typedef struct dy_http_conns dy_http_conns;

/* The socket of a connection, -1 if libmicrohttpd does not say. */
int dy_http_connection_fd(struct MHD_Connection *c);

/* Starts the watchdog; NULL if memory or a thread is short. */
dy_http_conns *dy_http_conns_new(const dy_http_conns_config *cfg);
/* Stops the watchdog and frees t; call after MHD_stop_daemon (every connection closed). */
void dy_http_conns_free(dy_http_conns *t);
/* What libmicrohttpd's MHD_OPTION_CONNECTION_LIMIT must be: the limit and its reserve. */
unsigned dy_http_conns_accept_limit(const dy_http_conns_config *cfg);

/* MHD_OPTION_NOTIFY_CONNECTION's callback (cls: the dy_http_conns): registers a connection
 * (answering it 503 at once when over the limit or draining) and forgets a closed one. */
void dy_http_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe);

/* A request's headers are in: its body's deadline starts. False if the connection was already
 * answered here (over its deadline, over the limit, draining): the caller drops it (MHD_NO). */
bool dy_http_conns_headers_in(dy_http_conns *t, struct MHD_Connection *c);
/* False if the connection was answered here while its body was being read. */
bool dy_http_conns_reading(dy_http_conns *t, struct MHD_Connection *c);
/* The request is about to be answered: no deadline applies while it is. False as above. */
bool dy_http_conns_answering(dy_http_conns *t, struct MHD_Connection *c);
/* The request ended (MHD_OPTION_NOTIFY_COMPLETED): a kept-alive connection waits for its
 * next request's headers. */
void dy_http_conns_request_done(dy_http_conns *t, struct MHD_Connection *c);

/* From now on every new connection is answered 503 ("shutting down"). */
void dy_http_conns_drain(dy_http_conns *t);
bool dy_http_conns_draining(dy_http_conns *t);
/* Waits, at most timeout_s, until no request is being read or answered; false if some still
 * were at the end. */
bool dy_http_conns_wait_answered(dy_http_conns *t, double timeout_s);

#endif
