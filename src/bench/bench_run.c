/* bench_run.c — see bench_run.h. Owns the launch schedule of one phase and the progress line. */
#include "bench/bench_run.h"
#include "util/clock.h"
#include "util/progress.h"

#include <math.h>
#include <stdio.h>

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

/* The phase's progress line: requests done of those it will send, else the time of a timed
 * run, else just the count. */
static dy_progress *start_progress(const phase *p)
{
    if (!p->c->progress)
        return NULL;
    char label[64];
    snprintf(label, sizeof label, "dyad bench%s%s%s", p->c->label ? " " : "",
             p->c->label ? p->c->label : "", p->warmup ? " warmup" : "");
    long bound = send_bound(p);
    bool by_time = bound < 0 && p->c->duration_s > 0;
    return dy_progress_new(stderr, true, label, by_time ? DY_PROGRESS_SECONDS : DY_PROGRESS_COUNT,
                           "requests", by_time ? p->c->duration_s : (double)bound, dy_now());
}

static void show_progress(phase *p, dy_progress *pg, double now_ms)
{
    double now = dy_now();
    if (!dy_progress_wants(pg, now))
        return;
    bool by_time = send_bound(p) < 0 && p->c->duration_s > 0;
    char note[96], done[32] = "";
    if (by_time)
        snprintf(done, sizeof done, "%ld done, ", p->done);
    snprintf(note, sizeof note, "%s%ld failed, %d in flight", done, p->failed,
             dyb_client_in_flight(p->c->client));
    dy_progress_update(pg, by_time ? fmin(now_ms / 1000, p->c->duration_s) : (double)p->done,
                       note, now);
}

/* Runs a phase to its end; returns its duration in ms, or -1 with err set. */
static double run_phase(phase *p, char *err, size_t errlen)
{
    p->t0 = 1e3 * dy_now();
    dyb_arrivals_init(&p->next, p->c->wl, p->timed, p->c->rate, p->c->burstiness, p->c->seed,
                      p->warmup);
    dy_progress *pg = start_progress(p);
    double end = -1;
    for (;;) {
        double now = 1e3 * dy_now() - p->t0;
        int wait = launch_due(p, now, err, errlen);
        if (wait < 0)
            goto out;
        if (*p->c->stop) {
            dyb_client_abort(p->c->client);
            break;
        }
        if (dyb_client_in_flight(p->c->client) == 0 && !more_to_send(p, now))
            break;
        dyb_client_poll(p->c->client, wait, on_done, p);
        if (p->oom) {
            snprintf(err, errlen, "out of memory while collecting results");
            goto out;
        }
        show_progress(p, pg, 1e3 * dy_now() - p->t0);
    }
    end = 1e3 * dy_now() - p->t0;
out:
    dy_progress_finish(pg);
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
