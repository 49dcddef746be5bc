/* bench_agentic.c — see bench_agentic.h. One loop: agents whose tool has returned send their
 * next turn, background requests go out at their arrival times, /metrics is sampled, and the
 * client is polled until the next of those is due. */
#include "bench/bench_agentic.h"
#include "bench/bench_rng.h"
#include "util/clock.h"
#include "util/progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BG_BASE 1000000000L  /* request indices of the background traffic start here */
#define MAX_TURNS 1000       /* an agent's turn is index % MAX_TURNS */
#define SAMPLE_MS 500        /* /metrics sampling period */
#define MAX_WAIT_MS 50

enum { DOMAIN_AGENT = 101, DOMAIN_BACKGROUND = 102 }; /* keyed streams of dyb_rng */

typedef struct {
    char name[64];
    int32_t *tokens;
    long len, cap;
    int turn;            /* the turn in flight, or the next to send */
    bool in_flight, done;
    double next_ms;      /* when the next turn goes out (ms after the start) */
    double tool_ms;      /* the tool that runs after the turn in flight */
    dyb_rng rng;
} agent;

typedef struct {
    double *v;
    size_t n, cap;
    bool oom;
} series;

typedef struct {
    const dyb_agentic_config *c;
    dyb_client *client;
    agent *agents;
    int live;            /* agents not done */
    double t0;           /* ms, monotonic */
    series first, next, bg_ttft, bg_tpot;
    double bg_tokens, tool_sum;
    long tools_drawn;
    dyb_agentic_report *out;
} run;

static void push(series *s, double x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        double *v = realloc(s->v, sizeof *v * cap);
        if (!v) {
            s->oom = true;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

static double now_ms(const run *x)
{
    return 1e3 * dy_now() - x->t0;
}

/* ---------------------------------------------------------------- checks and draws */

bool dyb_agentic_check(const dyb_agentic_config *c, char *err, size_t errlen)
{
    const char *bad = c->sessions < 1 ? "--sessions must be at least 1"
                      : c->turns < 1 || c->turns >= MAX_TURNS ? "--turns must be 1 to 999"
                      : c->isl < 1 ? "--isl must be at least 1"
                      : c->osl < 1 ? "--osl must be at least 1"
                      : c->turn_tokens < 0 ? "--turn-tokens must not be negative"
                      : !(c->tool_ms >= 0) ? "--tool-ms must not be negative"
                      : !(c->tool_error > -1) ? "--tool-error must be above -1"
                      : c->tool_dist == DYB_TOOL_PARETO && !(c->tool_sigma > 1)
                          ? "--tool-shape must be above 1 for pareto (a finite mean)"
                      : c->tool_dist == DYB_TOOL_LOGNORMAL && !(c->tool_sigma >= 0)
                          ? "--tool-shape must not be negative for lognormal"
                      : !(c->background_rate >= 0) ? "--background-rate must not be negative"
                      : c->vocab_size < 4 ? "--vocab-size must be at least 4"
                      : NULL;
    if (bad)
        snprintf(err, errlen, "%s", bad);
    return !bad;
}

double dyb_tool_draw(const dyb_agentic_config *c, dyb_rng *r)
{
    const double m = c->tool_ms;
    if (m <= 0)
        return 0;
    switch (c->tool_dist) {
    case DYB_TOOL_LOGNORMAL: { /* the mean stays m whatever σ */
        double s = c->tool_sigma;
        return exp(log(m) - s * s / 2 + s * dyb_rng_normal(r));
    }
    case DYB_TOOL_PARETO: { /* shape α > 1, scale chosen so the mean is m: heavy-tailed */
        double a = c->tool_sigma, xm = m * (a - 1) / a;
        return xm / pow(dyb_rng_uniform(r), 1 / a);
    }
    default:
        return m;
    }
}

/* ---------------------------------------------------------------- /metrics */

double dyb_prom_sum(const char *text, const char *name, const char *label, const char *label2,
                    int *count)
{
    double sum = 0;
    int n = 0;
    size_t k = strlen(name);
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char line[512];
        if (len < sizeof line && p[0] != '#' && !strncmp(p, name, k) && (p[k] == '{' || p[k] == ' ')) {
            memcpy(line, p, len);
            line[len] = 0;
            const char *sp = strrchr(line, ' ');
            if (sp && (!label || strstr(line, label)) && (!label2 || strstr(line, label2))) {
                sum += strtod(sp + 1, NULL);
                n++;
            }
        }
        p = end ? end + 1 : NULL;
    }
    if (count)
        *count = n;
    return sum;
}

static void read_moves(const char *t, dyb_tier_moves *m)
{
    const char *B = "dyad_kv_tier_bytes_total", *S = "dyad_kv_tier_seconds_total";
    m->host_in = dyb_prom_sum(t, B, "tier=\"host\"", "direction=\"in\"", NULL);
    m->host_out = dyb_prom_sum(t, B, "tier=\"host\"", "direction=\"out\"", NULL);
    m->disk_in = dyb_prom_sum(t, B, "tier=\"disk\"", "direction=\"in\"", NULL);
    m->disk_out = dyb_prom_sum(t, B, "tier=\"disk\"", "direction=\"out\"", NULL);
    m->host_seconds = dyb_prom_sum(t, S, "tier=\"host\"", NULL, NULL);
    m->disk_seconds = dyb_prom_sum(t, S, "tier=\"disk\"", NULL, NULL);
    m->prefetched_blocks = dyb_prom_sum(t, "dyad_kv_hold_prefetched_blocks_total", NULL, NULL, NULL);
    const char *P = "dyad_kv_tier_prompts_total";
    m->loaded_prompts = dyb_prom_sum(t, P, "outcome=\"loaded\"", NULL, NULL);
    m->recomputed_prompts = dyb_prom_sum(t, P, "outcome=\"recomputed\"", NULL, NULL);
    m->failed_loads = dyb_prom_sum(t, P, "outcome=\"load_failed\"", NULL, NULL);
    m->load_seconds = dyb_prom_sum(t, "dyad_kv_tier_load_seconds_sum", NULL, NULL, NULL);
    m->loads = dyb_prom_sum(t, "dyad_kv_tier_load_seconds_count", NULL, NULL, NULL);
}

/* What the counters moved by between two scrapes. */
static void moves_between(const char *before, const char *after, dyb_tier_moves *d)
{
    dyb_tier_moves b, a;
    read_moves(before, &b);
    read_moves(after, &a);
    *d = (dyb_tier_moves){a.host_in - b.host_in, a.host_out - b.host_out, a.disk_in - b.disk_in,
                          a.disk_out - b.disk_out, a.host_seconds - b.host_seconds,
                          a.disk_seconds - b.disk_seconds,
                          a.prefetched_blocks - b.prefetched_blocks,
                          a.loaded_prompts - b.loaded_prompts,
                          a.recomputed_prompts - b.recomputed_prompts,
                          a.failed_loads - b.failed_loads, a.load_seconds - b.load_seconds,
                          a.loads - b.loads};
}

/* The server's /metrics text (malloc'd), or NULL when it has none. */
static char *scrape(const run *x)
{
    char *body = NULL, err[256];
    size_t len;
    if (dyb_http_get(x->c->url, "/metrics", x->c->api_key, 10, &body, &len, err, sizeof err) != 0)
        return NULL;
    return body;
}

static void sample_occupancy(run *x)
{
    char *t = scrape(x);
    int n = 0;
    double sum = t ? dyb_prom_sum(t, "dyad_kv_cache_usage_ratio", NULL, NULL, &n) : 0;
    free(t);
    if (n == 0)
        return;
    dyb_agentic_report *o = x->out;
    double occ = sum / n;
    o->occupancy_mean += (occ - o->occupancy_mean) / (double)++o->occupancy_samples;
    o->occupancy_max = occ > o->occupancy_max ? occ : o->occupancy_max;
}

/* ---------------------------------------------------------------- sending */

static void note_error(run *x, const dyb_result *r)
{
    if (!x->out->first_error[0])
        snprintf(x->out->first_error, sizeof x->out->first_error, "%s",
                 r->error ? r->error : "failed");
}

/* Agent i's next turn: its prompt so far, and when the next one will come if asked. */
static int send_turn(run *x, int i)
{
    const dyb_agentic_config *c = x->c;
    agent *a = &x->agents[i];
    bool last = a->turn == c->turns - 1;
    a->tool_ms = last ? 0 : dyb_tool_draw(c, &a->rng);
    if (!last) {
        x->tool_sum += a->tool_ms;
        x->tools_drawn++;
    }
    dyb_request r = {.isl = a->len, .osl = c->osl, .tokens = a->tokens, .session = a->name};
    if (!last && c->hint != DYB_HINT_NONE) {
        double ms = c->hint == DYB_HINT_ORACLE ? a->tool_ms : a->tool_ms * (1 + c->tool_error);
        r.hold = true;
        r.hold_ms = (long)fmin(fmax(ms, 0), 86400000.0);
    }
    a->in_flight = true;
    return dyb_client_start(x->client, &r, (long)i * MAX_TURNS + a->turn);
}

static int send_background(run *x, long k)
{
    const dyb_agentic_config *c = x->c;
    dyb_request r = {.isl = c->background_isl, .osl = c->background_osl};
    r.tokens = malloc(sizeof *r.tokens * (size_t)r.isl);
    if (!r.tokens)
        return -1;
    dyb_rng g = dyb_rng_keyed(c->seed, DOMAIN_BACKGROUND, (uint64_t)k);
    dyb_fill_tokens(&g, r.tokens, r.isl, c->vocab_size);
    int rc = dyb_client_start(x->client, &r, BG_BASE + k);
    dyb_request_free(&r);
    return rc;
}

/* The tool's result joins the conversation: the next prompt is this one plus it. */
static bool grow(run *x, agent *a)
{
    long n = x->c->turn_tokens;
    if (a->len + n > a->cap) {
        long cap = (a->len + n) * 2;
        int32_t *t = realloc(a->tokens, sizeof *t * (size_t)cap);
        if (!t)
            return false;
        a->tokens = t;
        a->cap = cap;
    }
    dyb_fill_tokens(&a->rng, a->tokens + a->len, n, x->c->vocab_size);
    a->len += n;
    return true;
}

static void on_done(void *user, dyb_result *r)
{
    run *x = user;
    dyb_agentic_report *o = x->out;
    if (r->index >= BG_BASE) {
        o->background_done += r->ok;
        o->background_failed += !r->ok;
        if (!r->ok) {
            note_error(x, r);
            return;
        }
        push(&x->bg_ttft, r->ttft_ms);
        if (r->output_tokens > 1)
            push(&x->bg_tpot, (r->e2e_ms - r->ttft_ms) / (double)(r->output_tokens - 1));
        x->bg_tokens += (double)r->output_tokens;
        return;
    }
    agent *a = &x->agents[r->index / MAX_TURNS];
    int turn = (int)(r->index % MAX_TURNS);
    a->in_flight = false;
    if (r->ok) {
        o->turns_done++;
        push(turn == 0 ? &x->first : &x->next, r->ttft_ms);
    } else {
        o->turns_failed++;
        note_error(x, r);
    }
    if (++a->turn >= x->c->turns || !grow(x, a)) {
        a->done = true;
        x->live--;
        return;
    }
    a->next_ms = now_ms(x) + a->tool_ms;
}

/* ---------------------------------------------------------------- the run */

static int setup(run *x, char *err, size_t errlen)
{
    const dyb_agentic_config *c = x->c;
    x->agents = calloc((size_t)c->sessions, sizeof *x->agents);
    if (!x->agents) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < c->sessions; i++) {
        agent *a = &x->agents[i];
        a->rng = dyb_rng_keyed(c->seed, DOMAIN_AGENT, (uint64_t)i);
        snprintf(a->name, sizeof a->name, "agent-%llu-%d", (unsigned long long)c->seed, i);
        a->cap = c->isl + (long)c->turns * c->turn_tokens;
        if (!(a->tokens = malloc(sizeof *a->tokens * (size_t)a->cap))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        dyb_fill_tokens(&a->rng, a->tokens, c->isl, c->vocab_size);
        a->len = c->isl;
        /* agents do not start in step: each at a random point of one tool time */
        a->next_ms = dyb_rng_uniform(&a->rng) * c->tool_ms;
    }
    x->live = c->sessions;
    x->client = dyb_client_new(&(dyb_client_config){c->url, c->api_key, c->body, c->timeout_s},
                               err, errlen);
    return x->client ? 0 : -1;
}

static void teardown(run *x)
{
    for (int i = 0; x->agents && i < x->c->sessions; i++)
        free(x->agents[i].tokens);
    free(x->agents);
    dyb_client_free(x->client);
    series *all[4] = {&x->first, &x->next, &x->bg_ttft, &x->bg_tpot};
    for (int i = 0; i < 4; i++)
        free(all[i]->v);
}

static void show_progress(const run *x, dy_progress *pg)
{
    const double now = dy_now();
    if (!dy_progress_wants(pg, now))
        return;
    const dyb_agentic_report *o = x->out;
    char note[96];
    snprintf(note, sizeof note, "%ld failed, %ld background", o->turns_failed,
             o->background_done + o->background_failed);
    dy_progress_update(pg, (double)(o->turns_done + o->turns_failed), note, now);
}

/* Sends what is due; returns the ms until something else is, at most MAX_WAIT_MS. */
static double send_due(run *x, double now, double *bg_next, long *bg_sent, double *sample_next,
                       int *rc)
{
    const dyb_agentic_config *c = x->c;
    double wait = MAX_WAIT_MS;
    for (int i = 0; i < c->sessions && *rc == 0; i++) {
        agent *a = &x->agents[i];
        if (a->done || a->in_flight)
            continue;
        if (a->next_ms <= now)
            *rc = send_turn(x, i);
        else
            wait = fmin(wait, a->next_ms - now);
    }
    dyb_rng gaps = dyb_rng_keyed(c->seed, DYB_DOMAIN_ARRIVAL, (uint64_t)*bg_sent);
    while (*rc == 0 && c->background_rate > 0 && *bg_next <= now) {
        *rc = send_background(x, (*bg_sent)++);
        *bg_next += dyb_interarrival_ms(&gaps, c->background_rate, 1.0);
    }
    if (c->background_rate > 0)
        wait = fmin(wait, *bg_next - now);
    if (now >= *sample_next) {
        sample_occupancy(x);
        *sample_next += SAMPLE_MS;
    }
    return fmax(0, fmin(wait, *sample_next - now));
}

int dyb_agentic_run(const dyb_agentic_config *c, dyb_agentic_report *out, char *err,
                    size_t errlen)
{
    *out = (dyb_agentic_report){.occupancy_mean = 0, .occupancy_max = -1, .load_share = -1};
    run x = {.c = c, .out = out};
    char *before = NULL;
    int rc = setup(&x, err, errlen);
    if (rc == 0) {
        before = scrape(&x);
        out->metrics = before != NULL;
        x.t0 = 1e3 * dy_now();
        double bg_next = 0, sample_next = 0;
        long bg_sent = 0;
        dy_progress *pg = dy_progress_new(stderr, c->progress, "dyad bench agentic",
                                          DY_PROGRESS_COUNT, "turns",
                                          (double)c->sessions * c->turns, dy_now());
        while (!*c->stop && (x.live > 0 || dyb_client_in_flight(x.client) > 0)) {
            double wait = x.live > 0 ? send_due(&x, now_ms(&x), &bg_next, &bg_sent, &sample_next,
                                                &rc)
                                     : MAX_WAIT_MS;
            if (rc != 0) {
                snprintf(err, errlen, "cannot start a request: out of memory");
                break;
            }
            dyb_client_poll(x.client, (int)ceil(wait), on_done, &x);
            show_progress(&x, pg);
        }
        dy_progress_finish(pg);
        if (*c->stop)
            dyb_client_abort(x.client);
        out->duration_s = now_ms(&x) / 1e3;
    }
    if (rc == 0 && (x.first.oom || x.next.oom || x.bg_ttft.oom || x.bg_tpot.oom)) {
        snprintf(err, errlen, "out of memory while collecting results");
        rc = -1;
    }
    if (rc == 0) {
        out->first_ttft = dyb_dist_of(x.first.v, x.first.n);
        out->next_ttft = dyb_dist_of(x.next.v, x.next.n);
        out->bg_ttft = dyb_dist_of(x.bg_ttft.v, x.bg_ttft.n);
        out->bg_tpot = dyb_dist_of(x.bg_tpot.v, x.bg_tpot.n);
        out->bg_tokens_per_s = out->duration_s > 0 ? x.bg_tokens / out->duration_s : 0;
        out->tool_mean_ms = x.tools_drawn ? x.tool_sum / (double)x.tools_drawn : 0;
        char *after = before ? scrape(&x) : NULL;
        if (after)
            moves_between(before, after, &out->moved);
        const dyb_tier_moves *m = &out->moved;
        out->load_share = m->loads > 0 && out->next_ttft.mean > 0
                              ? m->load_seconds * 1e3 / m->loads / out->next_ttft.mean
                              : -1;
        free(after);
        if (out->occupancy_samples == 0)
            out->occupancy_mean = -1;
    }
    free(before);
    teardown(&x);
    return rc;
}
