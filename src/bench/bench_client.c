/* bench_client.c — see bench_client.h. Owns the curl multi handle, the shared request headers,
 * and one transfer per request in flight (its easy handle, body, SSE parser and stream).
 * What goes into a request body, and how an error body is read, is bench_request.c's. */
#include "bench/bench_client.h"
#include "util/clock.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench/bench_request.h"
#include "bench/bench_sse.h"

#define MAX_EVENT_BYTES (16u << 20) /* a longer SSE line means a broken stream */
#define MAX_ERROR_BODY 65536        /* of an error answer, this much is kept for its message */

typedef struct xfer {
    CURL *easy;
    struct xfer *prev, *next;
    char *body;
    long index, isl, osl;
    dyb_sse sse;
    dyb_stream st;
    double now;        /* when the bytes being parsed arrived */
    bool checked;      /* status and content type looked at */
    bool raw;          /* not an event stream: the body is kept to explain the failure */
    long status;
    char *raw_body;
    size_t raw_len;
    char curl_err[CURL_ERROR_SIZE];
} xfer;

struct dyb_client {
    dyb_client_config c;
    char *url;
    CURLM *multi;
    struct curl_slist *headers; /* shared by every request; lives as long as the client */
    xfer *head;
    int n;
};

int dyb_http_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void dyb_http_cleanup(void)
{
    curl_global_cleanup();
}

static void curl_message(CURLcode rc, const char *detail, const char *url, char *out, size_t n)
{
    const char *what = curl_easy_strerror(rc);
    const char *d = detail && *detail ? detail : what;
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
        snprintf(out, n, "cannot connect to %s: %s (is the server running?)", url, d);
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
        snprintf(out, n, "cannot resolve the host of %s: %s", url, d);
        break;
    case CURLE_OPERATION_TIMEDOUT:
        snprintf(out, n, "timed out: %s", d);
        break;
    case CURLE_GOT_NOTHING:
        snprintf(out, n, "the server closed the connection without an answer");
        break;
    default:
        snprintf(out, n, "%s: %s", what, d);
    }
}

/* ---- transfers ------------------------------------------------------------------------------- */

static void on_event(void *user, const char *event, const char *data, size_t len)
{
    xfer *x = user;
    if (!strcmp(event, "error")) /* a few servers name error events */
        dyb_stream_fail(&x->st, "server error in the stream: %.300s", data);
    else
        dyb_stream_event(&x->st, data, len, x->now);
}

static void check_answer(xfer *x)
{
    char *ct = NULL;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
    curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ct);
    x->raw = x->status < 200 || x->status > 299 ||
             (ct && strncasecmp(ct, "text/event-stream", 17) != 0);
    x->checked = true;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *user)
{
    xfer *x = user;
    size_t n = size * nmemb;
    x->now = 1e3 * dy_now();
    if (!x->checked)
        check_answer(x);
    if (x->raw) {
        size_t k = x->raw_len + n > MAX_ERROR_BODY ? MAX_ERROR_BODY - x->raw_len : n;
        char *b = k ? realloc(x->raw_body, x->raw_len + k + 1) : x->raw_body;
        if (b) {
            memcpy(b + x->raw_len, ptr, k);
            x->raw_len += k;
            b[x->raw_len] = 0;
            x->raw_body = b;
        }
        return n;
    }
    if (dyb_sse_feed(&x->sse, ptr, n, on_event, x) != 0) {
        dyb_stream_fail(&x->st, "an SSE line or event longer than %u bytes", MAX_EVENT_BYTES);
        return 0; /* aborts the transfer */
    }
    return n;
}

static void xfer_free(xfer *x)
{
    if (x->easy)
        curl_easy_cleanup(x->easy);
    free(x->body);
    free(x->raw_body);
    dyb_sse_free(&x->sse);
    dyb_stream_free(&x->st);
    free(x);
}

static int setup_easy(dyb_client *c, xfer *x)
{
    CURL *e = x->easy;
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_URL, c->url);
    bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
    bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(x->body));
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_err);
    bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    bad |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(c->c.timeout_s * 1000));
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    bad |= curl_easy_setopt(e, CURLOPT_PROXY, ""); /* a proxy would be measured too */
    return bad ? -1 : 0;
}

int dyb_client_start(dyb_client *c, const dyb_request *r, long index)
{
    xfer *x = calloc(1, sizeof *x);
    if (!x)
        return -1;
    x->index = index;
    x->isl = r->isl;
    x->osl = r->osl;
    dyb_sse_init(&x->sse, MAX_EVENT_BYTES);
    if (!(x->body = dyb_request_body(&c->c.body, r)) || !(x->easy = curl_easy_init()) ||
        setup_easy(c, x) != 0) {
        xfer_free(x);
        return -1;
    }
    /* The clock starts as the request is handed to curl, as vLLM's starts before its POST. */
    dyb_stream_init(&x->st, 1e3 * dy_now());
    if (curl_multi_add_handle(c->multi, x->easy) != CURLM_OK) {
        xfer_free(x);
        return -1;
    }
    x->next = c->head;
    if (c->head)
        c->head->prev = x;
    c->head = x;
    c->n++;
    return 0;
}

static void unlink_xfer(dyb_client *c, xfer *x)
{
    curl_multi_remove_handle(c->multi, x->easy);
    if (x->prev)
        x->prev->next = x->next;
    else
        c->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    c->n--;
}

static void finish(dyb_client *c, xfer *x, CURLcode rc, dyb_done_cb done, void *user)
{
    double now = 1e3 * dy_now();
    char msg[600];
    if (rc != CURLE_OK) {
        curl_message(rc, x->curl_err, c->url, msg, sizeof msg);
        dyb_stream_fail(&x->st, "%s", msg); /* an earlier stream error, if any, wins */
    } else if (x->raw || !x->checked) {
        if (!x->checked)
            check_answer(x);
        dyb_error_text(x->raw_body, x->raw_len, msg, sizeof msg);
        if (x->status >= 200 && x->status <= 299)
            dyb_stream_fail(&x->st, "HTTP %ld but not an event stream (does the server stream?): "
                            "%.300s", x->status, msg);
        else
            dyb_stream_fail(&x->st, "HTTP %ld: %.500s", x->status, msg);
    } else
        dyb_sse_finish(&x->sse, on_event, x);
    dyb_result r = {.index = x->index, .prompt_tokens = x->isl, .requested = x->osl};
    dyb_stream_result(&x->st, now, &r);
    done(user, &r);
    dyb_result_free(&r);
}

void dyb_client_poll(dyb_client *c, int timeout_ms, dyb_done_cb done, void *user)
{
    int running = 0;
    curl_multi_poll(c->multi, NULL, 0, timeout_ms, NULL);
    curl_multi_perform(c->multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(c->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        xfer *x = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        CURLcode rc = m->data.result;
        unlink_xfer(c, x);
        finish(c, x, rc, done, user);
        xfer_free(x);
    }
}

int dyb_client_in_flight(const dyb_client *c)
{
    return c->n;
}

void dyb_client_abort(dyb_client *c)
{
    while (c->head) {
        xfer *x = c->head;
        unlink_xfer(c, x);
        xfer_free(x);
    }
}

/* ---- the client ------------------------------------------------------------------------------ */

static struct curl_slist *make_headers(const char *api_key, bool stream)
{
    struct curl_slist *h = NULL, *t;
    const char *fixed[] = {"Content-Type: application/json",
                           stream ? "Accept: text/event-stream" : "Accept: application/json",
                           "Expect:"}; /* no 100-continue round trip before long prompts */
    for (int i = 0; i < 3; i++) {
        if (!(t = curl_slist_append(h, fixed[i])))
            goto fail;
        h = t;
    }
    if (api_key) {
        size_t n = strlen(api_key) + 32;
        char *line = malloc(n);
        if (!line)
            goto fail;
        snprintf(line, n, "Authorization: Bearer %s", api_key);
        t = curl_slist_append(h, line);
        free(line);
        if (!t)
            goto fail;
        h = t;
    }
    return h;
fail:
    curl_slist_free_all(h);
    return NULL;
}

dyb_client *dyb_client_new(const dyb_client_config *cfg, char *err, size_t errlen)
{
    dyb_client *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->c = *cfg;
    c->url = dyb_endpoint_url(cfg->base_url, cfg->body.endpoint == DYB_EP_CHAT
                                                  ? "/v1/chat/completions" : "/v1/completions");
    c->multi = curl_multi_init();
    c->headers = make_headers(cfg->api_key, true);
    if (!c->url || !c->multi || !c->headers) {
        snprintf(err, errlen, "cannot set up libcurl");
        dyb_client_free(c);
        return NULL;
    }
    /* Keep every connection open between requests, however many were in flight at once. */
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 4096L);
    return c;
}

void dyb_client_free(dyb_client *c)
{
    if (!c)
        return;
    if (c->multi) {
        dyb_client_abort(c);
        curl_multi_cleanup(c->multi);
    }
    curl_slist_free_all(c->headers);
    free(c->url);
    free(c);
}

/* ---- GET -------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len;
} membuf;

static size_t to_mem(char *ptr, size_t size, size_t nmemb, void *user)
{
    membuf *m = user;
    size_t n = size * nmemb;
    if (m->len + n > (8u << 20))
        return 0;
    char *b = realloc(m->buf, m->len + n + 1);
    if (!b)
        return 0;
    memcpy(b + m->len, ptr, n);
    m->len += n;
    b[m->len] = 0;
    m->buf = b;
    return n;
}

static char *first_model_id(const membuf *m)
{
    json_t *o = m->buf ? json_loadb(m->buf, m->len, 0, NULL) : NULL;
    json_t *id = json_object_get(json_array_get(json_object_get(o, "data"), 0), "id");
    char *s = json_is_string(id) ? strdup(json_string_value(id)) : NULL;
    json_decref(o);
    return s;
}

int dyb_http_get(const char *base_url, const char *path, const char *api_key, double timeout_s,
                 char **body, size_t *len, char *err, size_t errlen)
{
    *body = NULL;
    *len = 0;
    char *url = dyb_endpoint_url(base_url, path), ebuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *h = make_headers(api_key, false);
    CURL *e = curl_easy_init();
    membuf m = {0};
    int rc = -1;
    long status = 0;
    if (!url || !h || !e) {
        snprintf(err, errlen, "cannot set up libcurl");
        goto out;
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, to_mem);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    CURLcode cr = curl_easy_perform(e);
    if (cr != CURLE_OK) {
        curl_message(cr, ebuf, url, err, errlen);
        goto out;
    }
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status > 299) {
        char msg[400];
        dyb_error_text(m.buf, m.len, msg, sizeof msg);
        snprintf(err, errlen, "GET %s: HTTP %ld: %s", url, status, msg);
        rc = 1;
        goto out;
    }
    *body = m.buf;
    *len = m.len;
    m.buf = NULL;
    rc = 0;
out:
    if (e)
        curl_easy_cleanup(e);
    curl_slist_free_all(h);
    free(url);
    free(m.buf);
    return rc;
}

int dyb_fetch_models(const char *base_url, const char *api_key, double timeout_s, char **first,
                     char *err, size_t errlen)
{
    *first = NULL;
    membuf m = {0};
    int rc = dyb_http_get(base_url, "/v1/models", api_key, timeout_s, &m.buf, &m.len, err, errlen);
    if (rc == 0)
        *first = first_model_id(&m);
    free(m.buf);
    return rc;
}
