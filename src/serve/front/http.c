/* http.c — see http.h. Read in order: connection context and body collection, the small
 * routes (health, models, metrics, status, the dashboard), then generation's transport: a
 * request (gen.c) becomes a job for the workers, answered as one JSON body or as an SSE
 * stream produced by a content-reader callback; last, dispatch and the daemon's start, drain
 * and stop. The connections' deadlines and limits are http_conns.c's. */
#include "serve/front/http.h"
#include "serve/front/dashboard.h"
#include "serve/front/gen.h"
#include "serve/front/http_conns.h"
#include "serve/front/json.h"
#include "serve/front/recent.h"
#include "serve/front/status.h"
#include "util/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Once the workers have stopped, how long the answers of the requests they cut get to go out
 * before every connection is closed. */
#define ANSWER_GRACE_S 5.0
/* The rolling view's window: the status page's charts span it. */
#define RECENT_WINDOW_S 300

/* The dashboard's only sources are itself: its inline script and styles, and fetches back to
 * this server (the status document); no frame may embed it. */
static const char dashboard_csp[] =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

struct dy_http {
    dy_http_config cfg;
    struct MHD_Daemon *d;
    dy_http_conns *conns;
    dy_recent *recent;
    double started;   /* dy_now() at the start */
    uint64_t next_id; /* response ids; guarded by mu */
    pthread_mutex_t mu;
};

/* ---------------------------------------------------------------- responses */

/* The answer when memory runs out on the way to another: a static body, so that the client
 * still gets a response (a closed connection would be lost work to it). */
static const char out_of_memory_body[] =
    "{\"error\":{\"message\":\"Internal error: out of memory\",\"type\":\"server_error\","
    "\"param\":null,\"code\":null}}";

static enum MHD_Result send_out_of_memory(struct MHD_Connection *c)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        sizeof out_of_memory_body - 1, (void *)out_of_memory_body, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ok = MHD_queue_response(c, 500, r);
    MHD_destroy_response(r);
    return ok;
}

/* close: the connection closes after the answer (its framing cannot be trusted). */
static enum MHD_Result send_body(struct MHD_Connection *c, int status, const char *type,
                                 char *body, bool close)
{
    if (!body)
        return send_out_of_memory(c);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return send_out_of_memory(c);
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (close)
        MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type,
                                 char *body)
{
    return send_body(c, status, type, body, false);
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, char *json)
{
    return send_text(c, status, "application/json", json);
}

/* A client's text as a JSON string (a placeholder when it is not UTF-8). */
static json_t *text_or(const char *s)
{
    json_t *j = json_string(s);
    return j ? j : json_string("(not UTF-8)");
}

/* The request log's line for a refused request (NULL if it could not be built whole). */
static json_t *rejected_entry(const char *url, const dy_api_error *e)
{
    dy_jb b = {0};
    json_t *o = json_object(), *err = json_object();
    dy_jb_set(&b, o, "path", text_or(url));
    dy_jb_set(&b, o, "status", json_integer(e->status));
    dy_jb_set(&b, o, "outcome", json_string(dy_end_name(DY_END_REJECTED)));
    dy_jb_set(&b, err, "type", json_string(e->type));
    dy_jb_set(&b, err, "code", json_string(e->code));
    dy_jb_set(&b, err, "param", json_string(e->param));
    dy_jb_set(&b, err, "message", text_or(e->message));
    dy_jb_set(&b, o, "error", err);
    return dy_jb_tree(&b, o);
}

/* A refused request: counted, logged, and answered with an OpenAI-style error object. */
static enum MHD_Result refuse(dy_http *h, struct MHD_Connection *c, const char *url,
                              const dy_api_error *e, bool close)
{
    dy_metrics_request(h->cfg.metrics, DY_END_REJECTED);
    if (h->cfg.reqlog)
        dy_reqlog_write(h->cfg.reqlog, rejected_entry(url, e));
    return send_body(c, e->status, "application/json", dy_api_error_json(e), close);
}

static enum MHD_Result send_error(dy_http *h, struct MHD_Connection *c, const char *url,
                                  const dy_api_error *e)
{
    return refuse(h, c, url, e, false);
}

/* ---------------------------------------------------------------- connection context */

typedef struct {
    char *body;
    size_t len, cap;
    bool too_large;
    bool no_memory; /* the body could not be kept: read to its end, then a 500 */
} conn_ctx;

static void body_append(conn_ctx *x, const char *data, size_t n, size_t limit)
{
    if (x->too_large || x->no_memory)
        return;
    if (x->len + n > limit) {
        x->too_large = true;
        return;
    }
    if (x->len + n + 1 > x->cap) {
        size_t cap = (x->len + n + 1) * 2;
        if (cap > limit + 1)
            cap = limit + 1;
        char *b = realloc(x->body, cap);
        if (!b) {
            x->no_memory = true;
            return;
        }
        x->body = b;
        x->cap = cap;
    }
    memcpy(x->body + x->len, data, n);
    x->len += n;
    x->body[x->len] = 0;
}

/* The context of a request that could not get its own (out of memory): answered with a 500
 * at once, its body ignored. Never written to or freed. */
static conn_ctx no_ctx;

static void request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    dy_http *h = cls;
    dy_http_conns_request_done(h->conns, c);
    conn_ctx *x = *con_cls;
    if (x && x != &no_ctx) {
        free(x->body);
        free(x);
        *con_cls = NULL;
    }
}

/* ---------------------------------------------------------------- framing */

/* The Content-Length headers of a request: the first value, and whether another differs. */
typedef struct {
    const char *first;
    bool conflict;
} lengths;

static enum MHD_Result note_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    lengths *l = cls;
    if (!key || strcasecmp(key, "Content-Length") != 0)
        return MHD_YES;
    if (!l->first)
        l->first = value ? value : "";
    else if (strcmp(l->first, value ? value : "") != 0)
        l->conflict = true;
    return MHD_YES;
}

/* Two different Content-Length headers: where the body ends is ambiguous, and a proxy in
 * front may have read the other one (request smuggling), so the request is refused (RFC 9110,
 * 8.6) and its connection closed. libmicrohttpd itself takes the first. */
static bool conflicting_lengths(struct MHD_Connection *c)
{
    lengths l = {NULL, false};
    MHD_get_connection_values(c, MHD_HEADER_KIND, note_length, &l);
    return l.conflict;
}

/* ---------------------------------------------------------------- small routes */

/* Equal without an early exit: the time taken depends on the key's length only, so a client
 * cannot find the key byte by byte from how fast it is refused. */
static bool same_secret(const char *given, const char *key)
{
    size_t n = strlen(key), m = strlen(given);
    volatile unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? given[i] : 0);
    return diff == 0;
}

/* "Authorization: Bearer KEY"; the scheme's name is case-insensitive (RFC 9110, 11.1). */
static bool authorized(const dy_http *h, struct MHD_Connection *c)
{
    if (!h->cfg.api_key)
        return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!a || strncasecmp(a, "Bearer", 6) != 0 || a[6] != ' ')
        return false;
    a += 6;
    while (*a == ' ')
        a++;
    return same_secret(a, h->cfg.api_key);
}

/* Liveness is for anyone (a load balancer's probe carries no key); the workers' process ids
 * are the host's business, so with --api-key only a client with the key sees them. */
static enum MHD_Result route_health(dy_http *h, struct MHD_Connection *c)
{
    bool pids = authorized(h, c);
    dy_worker_info w[64];
    int n = dy_fleet_info(h->cfg.workers, w, 64), alive = 0;
    size_t cap = 96 + 96 * (size_t)n, len = 0;
    char *body = malloc(cap);
    if (!body)
        return send_out_of_memory(c);
    for (int i = 0; i < n; i++)
        alive += w[i].alive;
    len += (size_t)snprintf(body, cap, "{\"status\":\"%s\",\"workers\":[",
                            alive ? "ok" : "unavailable");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(body + len, cap - len, "%s{\"id\":%d,", i ? "," : "", i);
        if (pids)
            len += (size_t)snprintf(body + len, cap - len, "\"pid\":%d,", (int)w[i].pid);
        len += (size_t)snprintf(body + len, cap - len, "\"up\":%s,\"state\":\"%s\","
                                "\"restarts\":%llu}", w[i].alive ? "true" : "false",
                                dy_plan_slot_state_name(w[i].state),
                                (unsigned long long)w[i].restarts);
    }
    snprintf(body + len, cap - len, "]}");
    return send_json(c, alive ? 200 : 503, body);
}

static enum MHD_Result route_models(dy_http *h, struct MHD_Connection *c, const char *url)
{
    dy_api_model m = {h->cfg.model_id, h->cfg.started, "dyad"};
    if (!strcmp(url, "/v1/models"))
        return send_json(c, 200, dy_api_models_json(&m, 1));
    if (!strcmp(url + strlen("/v1/models/"), h->cfg.model_id))
        return send_json(c, 200, dy_api_model_json(&m));
    dy_api_error e;
    dy_api_error_model_not_found(&e, url + strlen("/v1/models/"));
    return send_error(h, c, url, &e);
}

static enum MHD_Result route_metrics(dy_http *h, struct MHD_Connection *c)
{
    dy_worker_info w[64];
    int n = dy_fleet_info(h->cfg.workers, w, 64);
    dy_xfer_totals x = dy_fleet_xfer_totals(h->cfg.workers);
    dy_router_totals rt = dy_fleet_router_totals(h->cfg.workers);
    char *text = dy_metrics_render(h->cfg.metrics, w, n, &x, &rt);
    if (text && h->cfg.autoscale) {
        dy_buf t = {0};
        dy_buf_append_str(&t, text);
        free(text);
        dy_autoscale_render(h->cfg.autoscale, &t);
        text = dy_buf_cstr(&t) ? (char *)t.data : NULL;
        if (!text)
            dy_buf_free(&t);
    }
    return send_text(c, 200, "text/plain; version=0.0.4; charset=utf-8", text);
}

/* Queues r as a 200 with the header pairs (name, value, ..., NULL), and lets go of it. */
static enum MHD_Result send_ok_with(struct MHD_Connection *c, struct MHD_Response *r,
                                    const char *const *headers)
{
    for (; headers[0]; headers += 2)
        MHD_add_response_header(r, headers[0], headers[1]);
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result route_status(dy_http *h, struct MHD_Connection *c)
{
    static const char *const headers[] = {"Content-Type", "application/json",
                                          "Cache-Control", "no-store", NULL};
    dy_status_env e = {h->cfg.model_id, h->cfg.workers, h->recent, h->cfg.autoscale, h->started};
    char *json = dy_status_json(&e, dy_now());
    struct MHD_Response *r = json ? MHD_create_response_from_buffer(strlen(json), json,
                                                                    MHD_RESPMEM_MUST_FREE)
                                  : NULL;
    if (!r) {
        free(json);
        return MHD_NO;
    }
    return send_ok_with(c, r, headers);
}

/* The page is the binary's own bytes: nothing is copied or freed. */
static enum MHD_Result route_dashboard(struct MHD_Connection *c)
{
    static const char *const headers[] = {
        "Content-Type", "text/html; charset=utf-8", "Content-Security-Policy", dashboard_csp,
        "X-Content-Type-Options", "nosniff", "Referrer-Policy", "no-referrer",
        "Cache-Control", "no-cache", NULL};
    struct MHD_Response *r = MHD_create_response_from_buffer(
        dy_dashboard_html_len, (void *)dy_dashboard_html, MHD_RESPMEM_PERSISTENT);
    return r ? send_ok_with(c, r, headers) : MHD_NO;
}

/* POST /v1/admin/pools: {"aggregated": N} or {"prefill": P, "decode": D} (absent sizes are 0),
 * the target pools by hand (docs/planner.md). */
static enum MHD_Result route_pools_set(dy_http *h, struct MHD_Connection *c, const conn_ctx *x)
{
    dy_api_error e;
    const char *url = "/v1/admin/pools";
    json_error_t jerr;
    json_t *o = json_loadb(x->body ? x->body : "", x->len, 0, &jerr);
    dy_pool_sizes t = {{0, 0, 0}};
    const char *bad = !json_is_object(o) ? "the body must be a JSON object" : NULL;
    const char *key;
    json_t *v;
    if (!bad)
        json_object_foreach(o, key, v) {
            int k = -1;
            for (int r = DY_POOL_AGG; r <= DY_POOL_DECODE; r++)
                if (!strcmp(key, dy_autoscale_role_name(r)))
                    k = r;
            if (k < 0 || !json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > 1024) {
                bad = k < 0 ? "unknown field (use aggregated, prefill and decode)"
                            : "a pool size must be an integer in [0, 1024]";
                break;
            }
            t.n[k] = (int)json_integer_value(v);
        }
    char msg[256];
    if (!bad && dy_autoscale_set_target(h->cfg.autoscale, &t, msg, sizeof msg) != 0)
        bad = msg;
    json_decref(o);
    if (bad) {
        dy_api_error_set(&e, 400, "invalid_request_error", NULL, "pools", "%s", bad);
        return send_error(h, c, url, &e);
    }
    return send_json(c, 200, dy_autoscale_json(h->cfg.autoscale));
}

static enum MHD_Result route_pools(dy_http *h, struct MHD_Connection *c, bool post,
                                   const conn_ctx *x)
{
    dy_api_error e;
    if (!h->cfg.autoscale) {
        dy_api_error_set(&e, 400, "invalid_request_error", "resizing_off", NULL,
                         "the pools are fixed: start dyad serve with --cores N to resize them");
        return send_error(h, c, "/v1/admin/pools", &e);
    }
    if (post)
        return route_pools_set(h, c, x);
    return send_json(c, 200, dy_autoscale_json(h->cfg.autoscale));
}

/* ---------------------------------------------------------------- waiting for a job */

/* True if the client has closed its side (checked while it waits for tokens). */
static bool fd_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd pf = {fd, POLLRDHUP, 0};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Waits on the job's condition for at most ms milliseconds (mu held). */
static void wait_job(dy_job *j, int ms)
{
    dy_cond_wait_for(&j->cv, &j->mu, ms / 1e3);
}

/* ---------------------------------------------------------------- one JSON answer */

static enum MHD_Result answer_whole(dy_http *h, dy_gen *g, struct MHD_Connection *c)
{
    dy_job *j = dy_gen_job(g);
    int fd = dy_http_connection_fd(c);
    bool cancelled = false;
    /* Nothing moves on the connection while the answer is computed, which may take longer
     * than the idle timeout (a long queue): suspend the timeout meanwhile (a client that goes
     * away is seen by fd_gone). Setting it again restarts its clock. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    pthread_mutex_lock(&j->mu);
    while (!dy_job_all_done(j)) {
        wait_job(j, 200);
        if (!cancelled && !dy_job_all_done(j)) {
            pthread_mutex_unlock(&j->mu);
            dy_gen_progress(g);
            if (fd_gone(fd)) {
                dy_fleet_cancel(h->cfg.workers, j);
                cancelled = true;
            }
            pthread_mutex_lock(&j->mu);
        }
    }
    pthread_mutex_unlock(&j->mu);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned int)h->cfg.connection_timeout_s);
    int status;
    char *json = dy_gen_answer(g, &status);
    enum MHD_Result r = cancelled ? MHD_NO /* nobody to answer */ : send_json(c, status, json);
    if (cancelled)
        free(json);
    dy_gen_free(g);
    return r;
}

/* ---------------------------------------------------------------- an SSE stream */

typedef struct {
    dy_http *h;
    dy_gen *g;
    int client_fd;  /* to notice a client that left while we wait for tokens */
    double last_sent; /* monotonic seconds: when the reader last returned bytes */
} stream;

/* An SSE comment, which clients ignore: sent when no token came for a third of the idle
 * timeout, so a request that waits long for its first token (a long queue) or between two
 * tokens keeps its connection (and proxies in between keep theirs). A client that stops
 * reading stops the comments from going out too, and is then timed out as before. */
static const char keep_alive[] = ": keep-alive\n\n";

static bool keep_alive_due(const stream *st)
{
    double every = st->h->cfg.connection_timeout_s / 3.0;
    return dy_now() - st->last_sent >= (every < 0.2 ? 0.2 : every);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    dy_job *j = dy_gen_job(st->g);
    pthread_mutex_lock(&j->mu);
    size_t n;
    while ((n = dy_gen_take(st->g, buf, max)) == 0) {
        if (dy_gen_stream_over(st->g)) {
            pthread_mutex_unlock(&j->mu);
            dy_gen_record(st->g);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (dy_gen_votes(st->g)) { /* cancelling samples takes the pool's lock, which
                                    * comes before the job's: let go of the job's first */
            pthread_mutex_unlock(&j->mu);
            dy_gen_progress(st->g);
            pthread_mutex_lock(&j->mu);
        }
        dy_gen_collect(st->g);
        if ((n = dy_gen_take(st->g, buf, max)) > 0)
            break;
        if (dy_gen_stream_over(st->g))
            continue;
        /* A sample that ended after the votes were counted is counted on the next turn. */
        wait_job(j, dy_gen_votes_pending(st->g) ? 1 : 200);
        if (fd_gone(st->client_fd)) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR; /* stream_free cancels */
        }
        if (keep_alive_due(st) && max >= sizeof keep_alive - 1) {
            memcpy(buf, keep_alive, sizeof keep_alive - 1);
            n = sizeof keep_alive - 1;
            break;
        }
    }
    pthread_mutex_unlock(&j->mu);
    st->last_sent = dy_now();
    return (ssize_t)n;
}

/* Called when the stream ends or the client goes away; cancels what still runs. */
static void stream_free(void *cls)
{
    stream *st = cls;
    dy_job *j = dy_gen_job(st->g);
    pthread_mutex_lock(&j->mu);
    bool unfinished = !dy_job_all_done(j);
    pthread_mutex_unlock(&j->mu);
    if (unfinished) {
        dy_fleet_cancel(st->h->cfg.workers, j);
        /* The workers answer a cancel within a step; wait (bounded) so the outcome counts. */
        pthread_mutex_lock(&j->mu);
        for (int i = 0; i < 25 && !dy_job_all_done(j); i++)
            wait_job(j, 200);
        pthread_mutex_unlock(&j->mu);
    }
    dy_gen_record(st->g);
    dy_gen_free(st->g);
    free(st);
}

static enum MHD_Result answer_stream(dy_http *h, dy_gen *g, struct MHD_Connection *c)
{
    stream *st = malloc(sizeof *st);
    struct MHD_Response *r = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                                    stream_reader, st, stream_free)
                                : NULL;
    if (!r) {
        dy_fleet_cancel(h->cfg.workers, dy_gen_job(g));
        dy_gen_free(g);
        free(st);
        return send_out_of_memory(c);
    }
    *st = (stream){h, g, dy_http_connection_fd(c), dy_now()};
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result route_generate(dy_http *h, struct MHD_Connection *c, dy_api_kind kind,
                                      const conn_ctx *x)
{
    dy_api_error e;
    const char *path = kind == DY_API_CHAT ? "/v1/chat/completions" : "/v1/completions";
    dy_gen_env env = {h->cfg.tok, h->cfg.chat, &h->cfg.limits, h->cfg.model_id, h->cfg.workers,
                      h->cfg.metrics, h->cfg.reqlog, h->cfg.loadwin, h->recent};
    pthread_mutex_lock(&h->mu);
    uint64_t serial = h->next_id++;
    pthread_mutex_unlock(&h->mu);
    dy_gen *g = dy_gen_new(&env, x->body ? x->body : "", x->len, kind, serial, &e);
    if (!g)
        return send_error(h, c, path, &e);
    char msg[256];
    dy_submit_result rc = dy_fleet_submit(h->cfg.workers, dy_gen_job(g), msg, sizeof msg);
    if (rc != DY_SUBMIT_OK) {
        if (rc == DY_SUBMIT_QUEUE_FULL)
            dy_api_error_queue_full(&e);
        else if (rc == DY_SUBMIT_NO_MEMORY)
            dy_api_error_internal(&e, msg);
        else
            dy_api_error_unavailable(&e, msg);
        dy_gen_free(g);
        return send_error(h, c, path, &e);
    }
    return dy_gen_streams(g) ? answer_stream(h, g, c) : answer_whole(h, g, c);
}

/* ---------------------------------------------------------------- dispatch */

/* The refusal a request gets from its URL, method and headers alone (an unknown route or
 * method, a missing or wrong API key); false if none. Checked once, when the headers arrive
 * and before the body is read, so an unauthenticated client cannot make the frontend buffer a
 * body (#18). */
static bool refused_by_headers(const dy_http *h, struct MHD_Connection *c, const char *url,
                               const char *method, dy_api_error *e)
{
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    bool gen_route = !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions");
    bool get_route = !strcmp(url, "/health") || !strcmp(url, "/metrics") ||
                     !strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11) ||
                     !strcmp(url, "/v1/dyad/status") || !strcmp(url, "/dashboard");
    bool admin_route = !strcmp(url, "/v1/admin/pools");
    if (!gen_route && !get_route && !admin_route) {
        dy_api_error_route_not_found(e, method, url);
        return true;
    }
    if ((gen_route && !post) || (get_route && !get) || (admin_route && !get && !post)) {
        dy_api_error_method_not_allowed(e, method, url);
        return true;
    }
    /* The page carries no data (its script asks for the key), so it needs none. */
    bool open_route = !strcmp(url, "/health") || !strcmp(url, "/dashboard");
    if (!open_route && !authorized(h, c)) {
        dy_api_error_unauthorized(e);
        return true;
    }
    return false;
}

/* A request whose headers passed refused_by_headers (on_request checks them when they arrive)
 * and whose body is in. */
static enum MHD_Result route(dy_http *h, struct MHD_Connection *c, const char *url,
                             const char *method, const conn_ctx *x)
{
    dy_api_error e;
    if (x->no_memory)
        return send_out_of_memory(c);
    if (!strcmp(url, "/health"))
        return route_health(h, c);
    if (!strcmp(url, "/metrics"))
        return route_metrics(h, c);
    if (!strcmp(url, "/v1/dyad/status"))
        return route_status(h, c);
    if (!strcmp(url, "/dashboard"))
        return route_dashboard(c);
    bool admin_route = !strcmp(url, "/v1/admin/pools");
    if (admin_route && !x->too_large)
        return route_pools(h, c, !strcmp(method, "POST"), x);
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11))
        return route_models(h, c, url);
    if (x->too_large) {
        dy_api_error_too_large(&e, h->cfg.limits.max_body_bytes);
        return send_error(h, c, url, &e);
    }
    return route_generate(h, c, !strcmp(url, "/v1/completions") ? DY_API_COMPLETIONS : DY_API_CHAT, x);
}

/* The refusal a request gets before its body is read, answered at once and its connection
 * closed (a client still sending a large body may see the close before the answer): during a
 * drain, on ambiguous framing, or refused_by_headers'. False if none. */
static bool refused_early(const dy_http *h, struct MHD_Connection *c, const char *url,
                          const char *method, dy_api_error *e)
{
    if (dy_http_conns_draining(h->conns)) {
        dy_api_error_unavailable(e, "the server is shutting down.");
        return true;
    }
    if (conflicting_lengths(c)) {
        dy_api_error_set(e, 400, "invalid_request_error", "invalid_value", NULL,
                         "The request has Content-Length headers with different values.");
        return true;
    }
    return refused_by_headers(h, c, url, method, e);
}

/* A body declared over the limit. A small excess is read and dropped, then answered with a
 * 413 the client can read: a client that sends its whole body before reading (most do) would
 * see a reset instead if the connection closed under it. Past DRAIN_EXCESS_BYTES, or when
 * the client waits for "100 Continue" first, the 413 goes out at once and the connection
 * closes: nobody waits for gigabytes it will drop (#18 item 7). True for the latter. */
#define DRAIN_EXCESS_BYTES (16u << 20)

static bool declared_too_large(const dy_http *h, struct MHD_Connection *c, conn_ctx *x)
{
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (!cl)
        return false;
    errno = 0;
    unsigned long long n = strtoull(cl, NULL, 10); /* MHD has checked it is a number */
    size_t limit = h->cfg.limits.max_body_bytes;
    if (errno == 0 && n <= limit)
        return false;
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
    if (errno != 0 || n - limit > DRAIN_EXCESS_BYTES ||
        (expect && !strcasecmp(expect, "100-continue")))
        return true;
    x->too_large = true; /* read and dropped, then the 413 */
    return false;
}

/* A request's headers are in (the first call for it): refused now, or its body is read next. */
static enum MHD_Result on_headers(dy_http *h, struct MHD_Connection *c, const char *url,
                                  const char *method, void **con_cls)
{
    if (!dy_http_conns_headers_in(h->conns, c))
        return MHD_NO; /* already answered past its header deadline */
    conn_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        *con_cls = &no_ctx;
        return dy_http_conns_answering(h->conns, c) ? send_out_of_memory(c) : MHD_NO;
    }
    *con_cls = x;
    dy_api_error e;
    if (refused_early(h, c, url, method, &e))
        return dy_http_conns_answering(h->conns, c) ? refuse(h, c, url, &e, true) : MHD_NO;
    if (declared_too_large(h, c, x)) {
        dy_api_error_too_large(&e, h->cfg.limits.max_body_bytes);
        return dy_http_conns_answering(h->conns, c) ? refuse(h, c, url, &e, true) : MHD_NO;
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    (void)version;
    dy_http *h = cls;
    conn_ctx *x = *con_cls;
    if (!x)
        return on_headers(h, c, url, method, con_cls);
    if (x == &no_ctx) { /* answered already */
        *data_size = 0;
        return MHD_YES;
    }
    if (*data_size > 0) {
        if (!dy_http_conns_reading(h->conns, c)) /* answered past its body deadline */
            return MHD_NO;
        body_append(x, data, *data_size, h->cfg.limits.max_body_bytes);
        *data_size = 0;
        return MHD_YES;
    }
    if (!dy_http_conns_answering(h->conns, c))
        return MHD_NO;
    return route(h, c, url, method, x);
}

dy_http *dy_http_start(const dy_http_config *cfg, char *err, size_t errlen)
{
    dy_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->cfg = *cfg;
    h->next_id = 1;
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "--host '%s' is not an IPv4 address", cfg->host);
        free(h);
        return NULL;
    }
    dy_http_conns_config cc = {cfg->max_connections, cfg->header_timeout_s, cfg->body_timeout_s,
                               cfg->connection_timeout_s};
    if (!(h->conns = dy_http_conns_new(&cc))) {
        snprintf(err, errlen, "out of memory");
        free(h);
        return NULL;
    }
    h->started = dy_now();
    dy_recent_config rc = {RECENT_WINDOW_S, cfg->slo_ttft_s, cfg->slo_tpot_s};
    if (!(h->recent = dy_recent_new(&rc, h->started))) {
        snprintf(err, errlen, "out of memory");
        dy_http_conns_free(h->conns);
        free(h);
        return NULL;
    }
    pthread_mutex_init(&h->mu, NULL);
    h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_ITC | MHD_USE_ERROR_LOG,
                            (uint16_t)cfg->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_CONNECTION_LIMIT, dy_http_conns_accept_limit(&cc),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_s,
                            MHD_OPTION_NOTIFY_CONNECTION, dy_http_conns_notify, h->conns,
                            MHD_OPTION_NOTIFY_COMPLETED, request_completed, h,
                            MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errlen, "cannot listen on %s:%d (port in use?)", cfg->host, cfg->port);
        dy_http_conns_free(h->conns);
        dy_recent_free(h->recent);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return NULL;
    }
    return h;
}

/* The daemon keeps accepting during the drain, so that new clients get their 503 instead of
 * waiting in a listen queue nobody takes from (MHD_quiesce_daemon hands the listening socket
 * back open). */
void dy_http_drain(dy_http *h)
{
    dy_http_conns_drain(h->conns);
}

void dy_http_stop(dy_http *h)
{
    /* MHD_stop_daemon shuts every connection's socket at once, so an answer still being
     * written (a request the drain deadline cut) would be lost, the client left without one. */
    if (!dy_http_conns_wait_answered(h->conns, ANSWER_GRACE_S))
        fprintf(stderr, "dyad serve: some answers were not taken within %.0f s; closing their "
                "connections\n", ANSWER_GRACE_S);
    MHD_stop_daemon(h->d);
    dy_http_conns_free(h->conns);
    dy_recent_free(h->recent);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int dy_http_port(const dy_http *h)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : 0;
}
