/* bench_client.h — the HTTP side of the load generator: many concurrent streaming requests to
 * an OpenAI-compatible server from one thread, through libcurl's multi interface (its
 * connection cache keeps connections alive between requests). Each request's SSE stream is
 * parsed as it arrives and timed with the monotonic clock at the moment its bytes are read.
 * Failures (unreachable server, HTTP error status, an error inside the stream) finish the
 * request with a message, using the server's own error message when it sends one. */
#ifndef DYAD_BENCH_CLIENT_H
#define DYAD_BENCH_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include "bench/bench_request.h"
#include "bench/bench_stream.h"
#include "bench/bench_workload.h"

typedef struct {
    const char *base_url;  /* http://host:port (a trailing "/" or "/v1" is accepted) */
    const char *api_key;   /* sent as "Authorization: Bearer KEY"; NULL: none */
    dyb_body_config body;  /* what each request asks for */
    double timeout_s;      /* per request; 0: none */
} dyb_client_config;

/* A finished request; the result's arrays are freed by the client after the call. */
typedef void (*dyb_done_cb)(void *user, dyb_result *r);

typedef struct dyb_client dyb_client;

/* Process-wide libcurl setup; call once before any client, pair with dyb_http_cleanup. */
int dyb_http_init(void);
void dyb_http_cleanup(void);

dyb_client *dyb_client_new(const dyb_client_config *c, char *err, size_t errlen);
void dyb_client_free(dyb_client *c);
/* Sends request `index` now. -1 if it could not even be started (out of memory). */
int dyb_client_start(dyb_client *c, const dyb_request *r, long index);
int dyb_client_in_flight(const dyb_client *c);
/* Moves every transfer forward, waiting up to timeout_ms for the network when nothing is
 * ready; calls done for each request that finished. */
void dyb_client_poll(dyb_client *c, int timeout_ms, dyb_done_cb done, void *user);
/* Drops every request in flight without reporting it (Ctrl-C). */
void dyb_client_abort(dyb_client *c);

/* GET {base}{path}: 0 with the body in *body (malloc'd, *len bytes and a NUL after), 1 when
 * the server answered with an error status (its message in err), -1 when it could not be
 * reached (message in err). */
int dyb_http_get(const char *base_url, const char *path, const char *api_key, double timeout_s,
                 char **body, size_t *len, char *err, size_t errlen);
/* GET {base}/v1/models. Returns 0 with the first model id in *first (malloc'd; NULL when the
 * list is empty), 1 when the server answered with an error (message in err), -1 when it
 * could not be reached (message in err). */
int dyb_fetch_models(const char *base_url, const char *api_key, double timeout_s, char **first,
                     char *err, size_t errlen);

#endif
