/* nats_conn.c — one connection to a cluster's NATS server (see nats_conn.h): the URL check
 * (pure, always built), and with libnats the connect loop with its backoff and the client's
 * reconnect settings and callbacks. */
#include "serve/cluster/nats_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define URL_MAX 1024
#define MAX_SERVERS 32 /* in one URL list */
#define SCHEME "nats://"

static bool host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '-' || c == '_';
}

/* Whether host[0..n) is a name, an IPv4 address or an [IPv6] address. */
static bool host_ok(const char *host, size_t n)
{
    bool bracketed = n >= 3 && host[0] == '[' && host[n - 1] == ']';
    size_t from = bracketed ? 1 : 0, to = bracketed ? n - 1 : n;
    if (from == to)
        return false;
    for (size_t i = from; i < to; i++)
        if (!host_char(host[i]) && !(bracketed && host[i] == ':'))
            return false;
    return true;
}

/* Whether port[0..n) is a number from 1 to 65535. */
static bool port_ok(const char *port, size_t n)
{
    long value = 0;
    for (size_t i = 0; i < n; i++) {
        if (port[i] < '0' || port[i] > '9')
            return false;
        value = value * 10 + (port[i] - '0');
        if (value > 65535)
            return false;
    }
    return n > 0 && value >= 1;
}

/* One "nats://HOST:PORT" of n bytes at s. */
static bool check_one(const char *s, size_t n, char *err, size_t errlen)
{
    size_t scheme = strlen(SCHEME);
    int shown = n > 200 ? 200 : (int)n;
    if (n < scheme || strncmp(s, SCHEME, scheme)) {
        snprintf(err, errlen, "'%.*s': must be nats://HOST:PORT", shown, s);
        return false;
    }
    const char *host = s + scheme, *colon = NULL;
    for (const char *p = host; p < s + n; p++)
        if (*p == ':')
            colon = p; /* the last one: an [IPv6] host holds others */
    if (!colon || !host_ok(host, (size_t)(colon - host))) {
        snprintf(err, errlen, "'%.*s': must be nats://HOST:PORT (HOST a name or an address)",
                 shown, s);
        return false;
    }
    if (!port_ok(colon + 1, (size_t)(s + n - colon - 1))) {
        snprintf(err, errlen, "'%.*s': the port must be a number from 1 to 65535", shown, s);
        return false;
    }
    return true;
}

bool dy_nats_url_check(const char *url, char *err, size_t errlen)
{
    if (!url || !*url) {
        snprintf(err, errlen, "no URL: give nats://HOST:PORT");
        return false;
    }
    size_t len = strlen(url);
    if (len > URL_MAX) {
        snprintf(err, errlen, "the URL is longer than %d bytes", URL_MAX);
        return false;
    }
    int max_commas = MAX_SERVERS - 1;
    for (const char *s = url;;) { /* one server, or several separated by commas */
        const char *comma = strchr(s, ',');
        if (comma && --max_commas < 0) {
            snprintf(err, errlen, "more than %d servers", MAX_SERVERS);
            return false;
        }
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        if (!check_one(s, n, err, errlen))
            return false;
        if (!comma)
            return true;
        s = comma + 1;
    }
}

#ifdef DYAD_HAVE_NATS
#include "util/clock.h"

#include <math.h>
#include <time.h>

#define BACKOFF_FIRST_S 0.25
#define BACKOFF_MAX_S 5.0
#define TRY_MAX_S 2.0         /* one try's TCP connect and first PING */
#define RECONNECT_WAIT_MS 500 /* between rounds over the server list, once connected */
#define RECONNECT_JITTER_MS 250
/* What is published while reconnecting is held up to this; past it a publish fails at once
 * (the caller sees NATS_INSUFFICIENT_BUFFER) rather than growing without bound. */
#define RECONNECT_BUF_BYTES (8 << 20)

void dy_nats_reason(natsStatus s, char *out, size_t cap)
{
    natsStatus last_status = NATS_OK;
    const char *last = nats_GetLastError(&last_status);
    const char *text = natsStatus_GetText(s);
    if (last && last[0] == '(' && strstr(last, "): ")) /* "(conn.c:2088): ": the client's own */
        last = strstr(last, "): ") + 3;
    /* The thread's last error says more ("stream not found") when it is this failure's. */
    if (last && *last && last_status == s && strcmp(last, text))
        snprintf(out, cap, "%s (%s)", text, last);
    else
        snprintf(out, cap, "%s", text);
}

/* What the client's callbacks need; the client frees it through the closed callback, the
 * last one it calls for a connection. */
typedef struct {
    void (*on_change)(void *ctx, bool up);
    void *ctx;
} conn_state;

/* A disconnect that closing causes is not news: the owner is closing it. */
static void on_disconnected(natsConnection *nc, void *closure)
{
    conn_state *c = closure;
    if (c->on_change && !natsConnection_IsClosed(nc))
        c->on_change(c->ctx, false);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    conn_state *c = closure;
    if (c->on_change && !natsConnection_IsClosed(nc))
        c->on_change(c->ctx, true);
}

static void on_closed(natsConnection *nc, void *closure)
{
    (void)nc;
    free(closure);
}

/* The servers of a checked URL list, split at its commas. */
static natsStatus set_servers(natsOptions *opts, const char *url)
{
    char store[URL_MAX + 1];
    const char *servers[MAX_SERVERS];
    int n = 0;
    snprintf(store, sizeof store, "%s", url);
    for (char *save = NULL, *tok = strtok_r(store, ",", &save); tok && n < MAX_SERVERS;
         tok = strtok_r(NULL, ",", &save))
        servers[n++] = tok;
    return natsOptions_SetServers(opts, servers, n); /* it copies them */
}

static natsStatus set_options(natsOptions *opts, const dy_nats_opts *o, conn_state *c)
{
    natsStatus s = set_servers(opts, o->url);
    if (s == NATS_OK && o->name)
        s = natsOptions_SetName(opts, o->name);
    /* The first connection is ours to retry (with a line per failed try); once connected the
     * client reconnects by itself, forever. */
    if (s == NATS_OK)
        s = natsOptions_SetRetryOnFailedConnect(opts, false, NULL, NULL);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(opts, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(opts, RECONNECT_WAIT_MS);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectJitter(opts, RECONNECT_JITTER_MS, RECONNECT_JITTER_MS);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectBufSize(opts, RECONNECT_BUF_BYTES);
    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(opts, on_disconnected, c);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(opts, on_reconnected, c);
    if (s == NATS_OK)
        s = natsOptions_SetClosedCB(opts, on_closed, c);
    return s;
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Tries until one succeeds or timeout_s has passed; each failure is a line on stderr. */
static natsConnection *connect_loop(natsOptions *opts, const dy_nats_opts *o, char *err,
                                    size_t errlen)
{
    const char *who = o->who ? o->who : "dyad";
    double deadline = dy_now() + (o->timeout_s > 0 ? o->timeout_s : 0);
    double wait = BACKOFF_FIRST_S;
    int servers = 1; /* a try goes through every server of the list, each with the timeout */
    for (const char *p = o->url; (p = strchr(p, ',')); p++)
        servers++;
    for (int attempt = 1;; attempt++) {
        double left = deadline - dy_now();
        double try_s = TRY_MAX_S;
        if (o->timeout_s > 0)
            try_s = fmin(TRY_MAX_S, fmax(left / servers, 0.05));
        natsConnection *nc = NULL;
        natsStatus s = natsOptions_SetTimeout(opts, (int64_t)ceil(try_s * 1e3));
        if (s == NATS_OK)
            s = natsConnection_Connect(&nc, opts);
        if (s == NATS_OK)
            return nc;
        char why[256];
        dy_nats_reason(s, why, sizeof why);
        snprintf(err, errlen, "cannot connect to %s: %s", o->url, why);
        left = deadline - dy_now();
        if (left <= 0) {
            fprintf(stderr, "%s: %s (try %d; giving up after %g s)\n", who, err, attempt,
                    o->timeout_s);
            return NULL;
        }
        double pause = fmin(wait, left);
        fprintf(stderr, "%s: %s (try %d; again in %.2f s)\n", who, err, attempt, pause);
        sleep_s(pause);
        wait = fmin(wait * 2, BACKOFF_MAX_S);
    }
}

natsConnection *dy_nats_connect(const dy_nats_opts *o, char *err, size_t errlen)
{
    if (!dy_nats_url_check(o->url, err, errlen))
        return NULL;
    conn_state *c = calloc(1, sizeof *c);
    natsOptions *opts = NULL;
    if (!c || natsOptions_Create(&opts) != NATS_OK) {
        free(c);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->on_change = o->on_change;
    c->ctx = o->ctx;
    natsStatus s = set_options(opts, o, c);
    natsConnection *nc = NULL;
    if (s == NATS_OK)
        nc = connect_loop(opts, o, err, errlen);
    else {
        char why[256];
        dy_nats_reason(s, why, sizeof why);
        snprintf(err, errlen, "%s: %s", o->url, why);
    }
    natsOptions_Destroy(opts); /* the connection keeps its own copy */
    if (!nc)
        free(c); /* no connection was made, so no callback will ever see it */
    return nc;
}

uint64_t dy_nats_reconnects(natsConnection *nc)
{
    natsStatistics *st = NULL;
    uint64_t in_msgs = 0, in_bytes = 0, out_msgs = 0, out_bytes = 0, reconnects = 0;
    if (natsStatistics_Create(&st) == NATS_OK && natsConnection_GetStats(nc, st) == NATS_OK)
        natsStatistics_GetCounts(st, &in_msgs, &in_bytes, &out_msgs, &out_bytes, &reconnects);
    if (st)
        natsStatistics_Destroy(st);
    return reconnects;
}

void dy_nats_close(natsConnection *nc)
{
    if (!nc)
        return;
    natsConnection_Close(nc);
    natsConnection_Destroy(nc);
}

void dy_nats_unsubscribe(natsSubscription **sub, double timeout_s)
{
    if (!*sub)
        return;
    if (natsSubscription_Drain(*sub) != NATS_OK ||
        natsSubscription_WaitForDrainCompletion(*sub, (int64_t)(timeout_s * 1e3)) != NATS_OK)
        natsSubscription_Unsubscribe(*sub);
    natsSubscription_Destroy(*sub);
    *sub = NULL;
}
#endif
