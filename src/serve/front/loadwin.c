/* loadwin.c — see loadwin.h. */
#include "serve/front/loadwin.h"
#include "util/stats.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double v[DY_LOADWIN_SAMPLES];
    int n;
    double sum;
    long count;
} series;

struct dy_loadwin {
    pthread_mutex_t mu;
    dy_loadwin_figures f;
    series ttft, itl;
};

dy_loadwin *dy_loadwin_new(void)
{
    dy_loadwin *w = calloc(1, sizeof *w);
    if (w)
        pthread_mutex_init(&w->mu, NULL);
    return w;
}

void dy_loadwin_free(dy_loadwin *w)
{
    if (!w)
        return;
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void dy_loadwin_arrival(dy_loadwin *w, int64_t prompt_tokens, int64_t max_tokens)
{
    pthread_mutex_lock(&w->mu);
    w->f.arrived++;
    w->f.prompt_tokens += (double)prompt_tokens;
    w->f.max_tokens += (double)max_tokens;
    pthread_mutex_unlock(&w->mu);
}

static void add(series *s, double x)
{
    if (s->n < DY_LOADWIN_SAMPLES)
        s->v[s->n++] = x;
    s->sum += x;
    s->count++;
}

void dy_loadwin_ended(dy_loadwin *w, int64_t prompt_tokens, int64_t cached_tokens,
                      int64_t output_tokens, double ttft_s, double itl_s)
{
    pthread_mutex_lock(&w->mu);
    w->f.ended++;
    w->f.ended_prompt_tokens += (double)prompt_tokens;
    w->f.ended_cached_tokens += (double)cached_tokens;
    w->f.ended_output_tokens += (double)output_tokens;
    add(&w->ttft, ttft_s);
    if (itl_s >= 0)
        add(&w->itl, itl_s);
    pthread_mutex_unlock(&w->mu);
}

/* The 90th percentile of the kept samples (sorted in place), as dyad bench computes it. */
static double p90(series *s)
{
    dy_sort_doubles(s->v, (size_t)s->n);
    return dy_percentile(s->v, (size_t)s->n, 90);
}

dy_loadwin_figures dy_loadwin_take(dy_loadwin *w)
{
    pthread_mutex_lock(&w->mu);
    dy_loadwin_figures f = w->f;
    f.ttft_mean_s = w->ttft.count ? w->ttft.sum / (double)w->ttft.count : 0;
    f.itl_mean_s = w->itl.count ? w->itl.sum / (double)w->itl.count : 0;
    f.ttft_p90_s = p90(&w->ttft);
    f.itl_p90_s = p90(&w->itl);
    memset(&w->f, 0, sizeof w->f);
    w->ttft.n = w->itl.n = 0;
    w->ttft.sum = w->itl.sum = 0;
    w->ttft.count = w->itl.count = 0;
    pthread_mutex_unlock(&w->mu);
    return f;
}
