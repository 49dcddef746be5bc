/* sampler.c — see sampler.h. Filters are applied in the usual order: temperature scales the
 * logits, then top-k, softmax, min-p (relative to the best), top-p over the survivors from the
 * most likely down, and one draw. Candidates are sorted only when a filter needs the order,
 * and then lazily (sort_head). */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float p;
    int32_t id;
} cand;

struct dy_sampler {
    int vocab;
    cand *c;
};

dy_sampling dy_sampling_default(void)
{
    dy_sampling s = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0};
    return s;
}

const char *dy_sampling_check(const dy_sampling *s)
{
    if (!(s->temperature >= 0.0f && s->temperature <= 100.0f))
        return "temperature";
    if (s->top_k < 0)
        return "top_k";
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return "top_p";
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f))
        return "min_p";
    return NULL;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void dy_rng_seed(dy_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t dy_rng_next(dy_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float dy_rng_float(dy_rng *r)
{
    return (float)(dy_rng_next(r) >> 40) / 16777216.0f;
}

dy_sampler *dy_sampler_new(int vocab_size)
{
    dy_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->vocab = vocab_size;
    s->c = malloc(sizeof *s->c * (size_t)vocab_size);
    if (!s->c) {
        free(s);
        return NULL;
    }
    return s;
}

void dy_sampler_free(dy_sampler *s)
{
    if (!s)
        return;
    free(s->c);
    free(s);
}

int32_t dy_argmax(const float *logits, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

static int by_p_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->id - y->id; /* stable order for equal values keeps draws reproducible */
}

/* Moves the k largest candidates to the front (sorted) and returns k; the rest follow in no
 * particular order (c stays a permutation, so a later call can sort a longer head). */
static int keep_top(cand *c, int n, int k)
{
    if (k <= 0 || k >= n) {
        qsort(c, (size_t)n, sizeof *c, by_p_desc);
        return n;
    }
    /* Partial selection: a k-sized sorted prefix, then insert better candidates. */
    qsort(c, (size_t)k, sizeof *c, by_p_desc);
    for (int i = k; i < n; i++) {
        if (by_p_desc(&c[i], &c[k - 1]) >= 0)
            continue;
        int j = k - 1;
        cand x = c[i];
        c[i] = c[k - 1]; /* the one pushed out of the head takes x's place */
        while (j > 0 && by_p_desc(&x, &c[j - 1]) < 0) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
    return k;
}

/* Makes sure c[0..len) (at most n) is the sorted head of c[0..n): the draw and top-p walk the
 * candidates from the most likely down, and usually stop within a few dozen, so the vocabulary
 * is sorted only as far as needed — a full sort of 32,000 candidates costs milliseconds per
 * token. *sorted tracks how much of the head is in order already. */
static void sort_head(cand *c, int n, int *sorted, int len)
{
    if (*sorted >= n || *sorted >= len)
        return;
    /* A head of 64, then 256; past that (a flat distribution, where the draw lands deep) the
     * insertion into the head would cost more than sorting everything once. */
    int want = *sorted == 0 && len <= 64 ? 64 : len <= 256 && *sorted < 256 ? 256 : n;
    *sorted = keep_top(c, n, want < n ? want : n);
}

int32_t dy_sample(dy_sampler *s, const dy_sampling *cfg, dy_rng *rng, const float *logits)
{
    if (cfg->temperature <= 0.0f)
        return dy_argmax(logits, s->vocab);
    cand *c = s->c;
    for (int i = 0; i < s->vocab; i++) {
        c[i].p = logits[i] / cfg->temperature;
        c[i].id = i;
    }
    int n = s->vocab, sorted = 0;
    if (cfg->top_k > 0 && cfg->top_k < n)
        n = sorted = keep_top(c, n, cfg->top_k);
    /* softmax over the survivors; sums in double: over 32,000 terms float sums drift enough
     * to move a draw across a boundary */
    float max = c[0].p;
    double sum = 0.0;
    for (int i = 1; i < n; i++)
        max = c[i].p > max ? c[i].p : max;
    for (int i = 0; i < n; i++) {
        c[i].p = expf(c[i].p - max);
        sum += c[i].p;
    }
    for (int i = 0; i < n; i++)
        c[i].p = (float)(c[i].p / sum);
    if (cfg->min_p > 0.0f) { /* keep p >= min_p × the best (expf(0) / sum); order is kept */
        float floor = cfg->min_p * (float)(1.0 / sum);
        int m = 0, best = 0;
        for (int i = 0; i < n; i++) {
            best = c[i].p > c[best].p ? i : best;
            if (c[i].p >= floor)
                c[m++] = c[i];
        }
        if (m == 0) /* rounding: keep the best */
            c[m++] = c[best];
        if (sorted > m)
            sorted = m;
        n = m;
    }
    double total = 0.0;
    if (cfg->top_p < 1.0f) {
        int m = 0;
        while (m < n && total < cfg->top_p) {
            sort_head(c, n, &sorted, m + 1);
            total += c[m++].p;
        }
        n = m;
    } else {
        for (int i = 0; i < n; i++)
            total += c[i].p;
    }
    /* The draw walks the survivors from the most likely down when top-k or top-p ordered them,
     * else in id order: the same distribution, without sorting 32,000 candidates of a flat
     * one (which cost more than the whole decode step of a small model). */
    const bool ordered = sorted > 0 || cfg->top_p < 1.0f;
    double r = dy_rng_float(rng) * total, acc = 0.0;
    for (int i = 0; i < n; i++) {
        if (ordered)
            sort_head(c, n, &sorted, i + 1);
        acc += c[i].p;
        if (r < acc)
            return c[i].id;
    }
    if (ordered)
        sort_head(c, n, &sorted, n);
    return c[n - 1].id;
}

float dy_logprob(dy_sampler *s, const float *logits, int32_t id, int n_top, int32_t *top_ids,
                 float *top_lps)
{
    float max = logits[dy_argmax(logits, s->vocab)];
    double sum = 0.0;
    for (int i = 0; i < s->vocab; i++)
        sum += exp((double)(logits[i] - max));
    float lse = max + (float)log(sum);
    if (n_top > 0) {
        if (n_top > s->vocab)
            n_top = s->vocab;
        for (int i = 0; i < s->vocab; i++) {
            s->c[i].p = logits[i];
            s->c[i].id = i;
        }
        keep_top(s->c, s->vocab, n_top);
        for (int i = 0; i < n_top; i++) {
            top_ids[i] = s->c[i].id;
            top_lps[i] = s->c[i].p - lse;
        }
    }
    return logits[id] - lse;
}
