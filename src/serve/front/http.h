/* http.h — the HTTP frontend of `dyad serve` on libmicrohttpd: routes, authentication,
 * body limits, and the transport of generation requests (gen.h turns an OpenAI request into
 * a job for the workers and the job's events into the answer): one JSON body, or an SSE
 * stream flushed per token. A connection gets its own thread; a client that goes away
 * cancels its sequences at once. */
#ifndef DYAD_HTTP_H
#define DYAD_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include "engine/tokenizer.h"
#include "serve/front/autoscale.h"
#include "serve/front/metrics.h"
#include "serve/front/openai.h"
#include "serve/front/reqlog.h"
#include "serve/front/fleet.h"

typedef struct {
    const char *host;
    int port;
    const char *api_key;     /* NULL: no authentication */
    const char *model_id;    /* the name /v1/models reports and requests must use */
    const dy_tokenizer *tok;
    dy_chat_family chat;
    dy_api_limits limits;
    int max_connections;
    int connection_timeout_s; /* idle connections are closed after this */
    dy_fleet *workers;
    dy_metrics *metrics;
    dy_reqlog *reqlog;        /* NULL: no request log */
    dy_loadwin *loadwin;      /* NULL: no planner watches the traffic */
    dy_autoscale *autoscale;  /* NULL: the pools are fixed (no /v1/admin/pools) */
    int64_t started;          /* unix time, for /v1/models */
} dy_http_config;

typedef struct dy_http dy_http;

/* Starts listening; NULL and a message on failure (port in use, ...). */
dy_http *dy_http_start(const dy_http_config *cfg, char *err, size_t errlen);
/* Stops accepting new connections (in-flight requests continue). */
void dy_http_quiesce(dy_http *h);
/* Closes every connection and frees h. */
void dy_http_stop(dy_http *h);
/* The port actually bound (when cfg->port was 0). */
int dy_http_port(const dy_http *h);

#endif
