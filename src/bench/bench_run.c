/* bench_run.c — see bench_run.h. Owns the launch schedule of one phase and the progress line. */
#include "bench/bench_run.h"
#include "util/clock.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_WAIT_MS 50 /* longest sleep: bounds the Ctrl-C and progress-line latency */

/* One phase (warmup or measured): its rule and where it is. */
typedef struct {
    const dyb_run_config *c;
    dyb_stats *stats;      /* NULL in warmup: nothing is recorded */
    bool warmup;
    bool closed, timed;    /* launch rule: in-flight cap only / trace times / else gaps */
    int cap;               /* in-flight cap; 0: none */
    long limit;            /* requests to send; -1: none */
    double t0;             /* phase start (monotonic ms) */
    long sent, done, failed;
    dyb_arrivals next;     /* the next arrival, ms after t0 (open loop and trace) */
    bool oom;
    double last_draw;
} phase;

static void on_done(void *user, dyb_result *r)
{
    phase *p = user;
    r->send_ms -= p->t0;
    p->done++;
    p->failed += !r->ok;
    if (p->stats && dyb_stats_add(p->stats, r) != 0)
        p->oom = true;
}

/* How many requests this phase sends at most (-1: no bound): the limit, and a trace's rows
 * (warmup wraps around the trace instead). */
static long send_bound(const phase *p)
{
    long rows = dyb_workload_rows(p->c->wl);
    if (p->warmup || rows < 0)
        return p->limit;
    return p->limit < 0 || rows < p->limit ? rows : p->limit;
}

/* May another request be sent (ignoring the in-flight cap and the arrival time)? */
static bool more_to_send(const phase *p, double now)
{
    long bound = send_bound(p);
    if (*p->c->stop || (bound >= 0 && p->sent >= bound))
        return false;
    double d = p->c->duration_s * 1000;
    return d <= 0 || (p->closed ? now : p->next.next_ms) < d;
}

void dyb_arrivals_init(dyb_arrivals *a, const dyb_workload *wl, bool timed, double rate,
                       double burstiness, uint64_t seed, bool warmup)
{
    *a = (dyb_arrivals){.wl = wl, .timed = timed, .rate = rate, .burstiness = burstiness,
                        .gaps = dyb_rng_keyed(seed, DYB_DOMAIN_ARRIVAL, warmup),
                        .next_ms = timed ? dyb_workload_arrival_ms(wl, 0) : 0};
}

void dyb_arrivals_advance(dyb_arrivals *a)
{
    a->index++;
    if (a->timed)
        a->next_ms = dyb_workload_arrival_ms(a->wl, a->index);
    else
        a->next_ms += dyb_interarrival_ms(&a->gaps, a->rate, a->burstiness);
}

static void schedule_next(phase *p)
{
    if (!p->closed)
        dyb_arrivals_advance(&p->next);
}

static int launch(phase *p, char *err, size_t errlen)
{
    dyb_request r;
    if (dyb_workload_make(p->c->wl, p->sent, p->warmup, &r) != 0 ||
        dyb_client_start(p->c->client, &r, p->sent) != 0) {
        dyb_request_free(&r);
        snprintf(err, errlen, "cannot start request %ld: out of memory", p->sent);
        return -1;
    }
    dyb_request_free(&r);
    p->sent++;
    schedule_next(p);
    return 0;
}

/* Sends everything due now; returns the ms until the next arrival (or MAX_WAIT_MS). */
static int launch_due(phase *p, double now, char *err, size_t errlen)
{
    while (more_to_send(p, now) &&
           (p->cap == 0 || dyb_client_in_flight(p->c->client) < p->cap)) {
        if (!p->closed && p->next.next_ms > now)
            return (int)fmin(MAX_WAIT_MS, ceil(p->next.next_ms - now));
        if (launch(p, err, errlen) != 0)
            return -1;
    }
    return MAX_WAIT_MS;
}

static void draw_progress(phase *p, double now, bool final)
{
    if (!p->c->progress || (!final && now - p->last_draw < 200))
        return;
    p->last_draw = now;
    long bound = send_bound(p);
    double dur = p->c->duration_s * 1000;
    double frac = bound > 0 ? (double)p->done / (double)bound : dur > 0 ? now / dur : -1;
    char total[32] = "", bar[32] = "";
    if (bound >= 0)
        snprintf(total, sizeof total, "/%ld", bound);
    if (frac >= 0) { /* [#####...............] by requests done, else by time */
        int k = (int)(fmin(frac, 1) * 20);
        bar[0] = '[';
        memset(bar + 1, '#', (size_t)k);
        memset(bar + 1 + k, '.', (size_t)(20 - k));
        memcpy(bar + 21, "] ", 3);
    }
    fprintf(stderr, "\r\033[K%s%s: %s%ld%s done, %ld failed, %d in flight, %.1f s", p->c->label,
            p->warmup ? " warmup" : "", bar, p->done, total, p->failed,
            dyb_client_in_flight(p->c->client), now / 1000);
    if (final)
        fputs("\r\033[K", stderr);
    fflush(stderr);
}

/* Runs a phase to its end; returns its duration in ms, or -1 with err set. */
static double run_phase(phase *p, char *err, size_t errlen)
{
    p->t0 = 1e3 * dy_now();
    dyb_arrivals_init(&p->next, p->c->wl, p->timed, p->c->rate, p->c->burstiness, p->c->seed,
                      p->warmup);
    for (;;) {
        double now = 1e3 * dy_now() - p->t0;
        int wait = launch_due(p, now, err, errlen);
        if (wait < 0)
            return -1;
        if (*p->c->stop) {
            dyb_client_abort(p->c->client);
            break;
        }
        if (dyb_client_in_flight(p->c->client) == 0 && !more_to_send(p, now))
            break;
        dyb_client_poll(p->c->client, wait, on_done, p);
        if (p->oom) {
            snprintf(err, errlen, "out of memory while collecting results");
            return -1;
        }
        draw_progress(p, 1e3 * dy_now() - p->t0, false);
    }
    double end = 1e3 * dy_now() - p->t0;
    draw_progress(p, end, true);
    return end;
}

int dyb_run(const dyb_run_config *c, dyb_stats *stats, dyb_run_outcome *out, char *err,
            size_t errlen)
{
    *out = (dyb_run_outcome){0};
    if (c->warmup > 0) {
        phase w = {.c = c, .warmup = true, .closed = true, .limit = c->warmup,
                   .cap = c->concurrency > 0 ? c->concurrency : 1};
        if (run_phase(&w, err, errlen) < 0)
            return -1;
    }
    bool open = c->rate > 0;
    phase m = {.c = c, .stats = stats, .closed = !open && !c->timed, .timed = !open && c->timed,
               .limit = c->requests, .cap = c->concurrency};
    if (m.closed && m.cap == 0)
        m.cap = 1;
    double ms = *c->stop ? 0 : run_phase(&m, err, errlen);
    if (ms < 0)
        return -1;
    out->duration_s = ms / 1000;
    out->interrupted = *c->stop != 0;
    return 0;
}
