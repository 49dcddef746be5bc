/* recent.c — see recent.h. A ring of window_s buckets indexed by the second they hold; a
 * bucket still holding an older second is cleared when a new one writes into it, and skipped
 * when read. */
#include "serve/front/recent.h"
#include "util/stats.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { K_TTFT, K_TPOT, K_ITL, K_N };

typedef struct {
    int64_t sec; /* the second it holds; INT64_MIN: none yet */
    double requests, failed, good, output_tokens, prompt_tokens, cached_tokens;
    double predicted_blocks, transfers, xfer_bytes, xfer_s, moved_ttft_s;
    int n[K_N];
    float v[K_N][DY_RECENT_SAMPLES];
} bucket;

struct dy_recent {
    dy_recent_config cfg;
    double start;
    int64_t start_sec;
    pthread_mutex_t mu;
    bucket *b;
};

static int64_t second_of(double t)
{
    return (int64_t)floor(t);
}

dy_recent *dy_recent_new(const dy_recent_config *c, double now)
{
    if (c->window_s < 1 || c->window_s > DY_RECENT_MAX_WINDOW_S || !(c->slo_ttft_s >= 0) ||
        !(c->slo_tpot_s >= 0))
        return NULL;
    dy_recent *r = calloc(1, sizeof *r);
    if (!r || !(r->b = calloc((size_t)c->window_s, sizeof *r->b))) {
        free(r);
        return NULL;
    }
    r->cfg = *c;
    r->start = now;
    r->start_sec = second_of(now);
    for (int i = 0; i < c->window_s; i++)
        r->b[i].sec = INT64_MIN;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void dy_recent_free(dy_recent *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->mu);
    free(r->b);
    free(r);
}

const dy_recent_config *dy_recent_config_of(const dy_recent *r)
{
    return &r->cfg;
}

static bucket *slot_of(dy_recent *r, int64_t sec)
{
    int64_t n = r->cfg.window_s;
    return &r->b[((sec % n) + n) % n];
}

/* The bucket of `now`'s second, cleared if it held an older one (mu held). */
static bucket *bucket_now(dy_recent *r, double now)
{
    int64_t sec = second_of(now);
    bucket *b = slot_of(r, sec);
    if (b->sec != sec) {
        memset(b, 0, sizeof *b);
        b->sec = sec;
    }
    return b;
}

static void sample(bucket *b, int kind, double v)
{
    if (b->n[kind] < DY_RECENT_SAMPLES)
        b->v[kind][b->n[kind]++] = (float)v;
}

/* Both objectives met (a request with one token has no gap to miss the second by). */
static bool meets(const dy_recent_config *c, const dy_recent_request *q)
{
    return !q->failed && q->ttft_s >= 0 && q->ttft_s <= c->slo_ttft_s && q->tpot_s <= c->slo_tpot_s;
}

void dy_recent_ended(dy_recent *r, double now, const dy_recent_request *q)
{
    const bool objectives = r->cfg.slo_ttft_s > 0 && r->cfg.slo_tpot_s > 0;
    pthread_mutex_lock(&r->mu);
    bucket *b = bucket_now(r, now);
    b->requests++;
    b->failed += q->failed;
    b->good += objectives && meets(&r->cfg, q);
    b->prompt_tokens += (double)q->prompt_tokens;
    b->cached_tokens += (double)q->cached_tokens;
    b->output_tokens += (double)q->output_tokens;
    b->predicted_blocks += (double)q->predicted_blocks;
    b->transfers += q->transfers;
    b->xfer_bytes += (double)q->xfer_bytes;
    b->xfer_s += q->xfer_s;
    if (q->transfers > 0 && q->ttft_s >= 0)
        b->moved_ttft_s += q->ttft_s;
    if (q->ttft_s >= 0)
        sample(b, K_TTFT, q->ttft_s);
    if (q->tpot_s >= 0)
        sample(b, K_TPOT, q->tpot_s);
    pthread_mutex_unlock(&r->mu);
}

void dy_recent_itl(dy_recent *r, double now, double gap_s)
{
    pthread_mutex_lock(&r->mu);
    sample(bucket_now(r, now), K_ITL, gap_s);
    pthread_mutex_unlock(&r->mu);
}

/* ---------------------------------------------------------------- reading */

typedef struct {
    double *v[K_N];
    size_t n[K_N];
} samples;

static void add_bucket(dy_recent_figures *f, samples *s, const bucket *b)
{
    f->requests += b->requests;
    f->failed += b->failed;
    f->good += b->good;
    f->output_tokens += b->output_tokens;
    f->prompt_tokens += b->prompt_tokens;
    f->cached_tokens += b->cached_tokens;
    f->predicted_blocks += b->predicted_blocks;
    f->transfers += b->transfers;
    f->xfer_bytes += b->xfer_bytes;
    f->xfer_s += b->xfer_s;
    f->moved_ttft_s += b->moved_ttft_s;
    for (int k = 0; k < K_N; k++)
        if (s->v[k])
            for (int i = 0; i < b->n[k]; i++)
                s->v[k][s->n[k]++] = b->v[k][i];
}

static dy_recent_pct percentiles(double *v, size_t n)
{
    dy_recent_pct p = {0, 0, (int)n};
    if (!v || n == 0)
        return (dy_recent_pct){0, 0, 0};
    dy_sort_doubles(v, n);
    p.p50 = dy_percentile(v, n, 50);
    p.p90 = dy_percentile(v, n, 90);
    return p;
}

static void finish(dy_recent_figures *f, const dy_recent_config *c)
{
    const double span = f->span_s > 0.1 ? f->span_s : 0.1; /* a young window's first moments */
    f->requests_per_s = f->requests / span;
    f->output_tokens_per_s = f->output_tokens / span;
    f->transfers_per_s = f->transfers / span;
    f->xfer_bytes_per_s = f->xfer_bytes / span;
    f->goodput = c->slo_ttft_s > 0 && c->slo_tpot_s > 0 && f->requests > 0
                     ? f->good / f->requests : -1;
}

dy_recent_figures dy_recent_between(dy_recent *r, double now, int from_ago, int to_ago)
{
    dy_recent_figures f = {0};
    if (from_ago > r->cfg.window_s)
        from_ago = r->cfg.window_s; /* older seconds were overwritten */
    if (to_ago < 0)
        to_ago = 0;
    if (from_ago <= to_ago) {
        finish(&f, &r->cfg);
        return f;
    }
    samples s = {{NULL}, {0}};
    const size_t cap = (size_t)(from_ago - to_ago) * DY_RECENT_SAMPLES;
    for (int k = 0; k < K_N; k++)
        s.v[k] = malloc(cap * sizeof *s.v[k]); /* NULL: that kind has no percentiles */
    const int64_t cur = second_of(now), lo = cur - from_ago + 1, hi = cur - to_ago + 1;
    /* The time the buckets cover: the current second only as far as it has gone, the
     * window's first one only from its start, so a rate is not diluted by time not lived. */
    const double from_t = (double)lo > r->start ? (double)lo : r->start;
    const double to_t = (double)hi < now ? (double)hi : now;
    f.span_s = to_t > from_t ? to_t - from_t : 0;
    pthread_mutex_lock(&r->mu);
    for (int64_t sec = lo < r->start_sec ? r->start_sec : lo; sec < hi; sec++) {
        const bucket *b = slot_of(r, sec);
        if (b->sec == sec)
            add_bucket(&f, &s, b);
    }
    pthread_mutex_unlock(&r->mu);
    f.ttft = percentiles(s.v[K_TTFT], s.n[K_TTFT]);
    f.tpot = percentiles(s.v[K_TPOT], s.n[K_TPOT]);
    f.itl = percentiles(s.v[K_ITL], s.n[K_ITL]);
    for (int k = 0; k < K_N; k++)
        free(s.v[k]);
    finish(&f, &r->cfg);
    return f;
}
