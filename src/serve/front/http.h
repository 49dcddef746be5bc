/* http.h — the HTTP frontend of `dyad serve` on libmicrohttpd: routes, authentication,
 * body limits, and the transport of generation requests (gen.h turns an OpenAI request into
 * a job for the workers and the job's events into the answer): one JSON body, or an SSE
 * stream flushed per token. A connection gets its own thread; a client that goes away
 * cancels its sequences at once. Deadlines on reading a request, the connection limit and
 * the drain's refusals are http_conns.h's. It keeps the rolling view of the traffic (recent.h)
 * that GET /v1/dyad/status reports (status.h) and GET /dashboard draws. */
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
    double header_timeout_s;  /* a request's line and headers must be in by then (0: no limit) */
    double body_timeout_s;    /* and its body this long after its headers (0: no limit) */
    dy_fleet *workers;
    dy_metrics *metrics;
    dy_reqlog *reqlog;        /* NULL: no request log */
    dy_loadwin *loadwin;      /* NULL: no planner watches the traffic */
    dy_autoscale *autoscale;  /* NULL: the pools are fixed (no /v1/admin/pools) */
    int64_t started;          /* unix time, for /v1/models */
    double slo_ttft_s, slo_tpot_s; /* --slo's objectives, for the status page; 0: none */
} dy_http_config;

typedef struct dy_http dy_http;

/* Starts listening; NULL and a message on failure (port in use, ...). */
dy_http *dy_http_start(const dy_http_config *cfg, char *err, size_t errlen);
/* Starts the drain: in-flight requests continue; every new request, on a new connection or a
 * kept-alive one, is answered 503 (the server is shutting down). */
void dy_http_drain(dy_http *h);
/* Lets the answers still being sent go out (bounded), then closes every connection and frees
 * h. */
void dy_http_stop(dy_http *h);
/* The port actually bound (when cfg->port was 0). */
int dy_http_port(const dy_http *h);

#endif
