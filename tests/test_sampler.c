/* test_sampler.c — sampling: greedy picks the argmax; a seed repeats exactly; different
 * streams differ; top-k / top-p / min-p never pick a filtered token; draws follow the
 * softmax; log-probabilities and the top-N list are right; bad settings are named. */
#include "testutil.h"
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define V 50

static void make_logits(float *l)
{
    for (int i = 0; i < V; i++)
        l[i] = (float)((i * 37) % V) / 10.0f; /* a permutation: one clear best (i with 49) */
}

static void test_greedy(void **st)
{
    (void)st;
    float l[V];
    make_logits(l);
    dy_sampler *s = dy_sampler_new(V);
    dy_sampling cfg = dy_sampling_default();
    cfg.temperature = 0;
    dy_rng r;
    dy_rng_seed(&r, 1, 0);
    int32_t best = dy_argmax(l, V);
    assert_true(l[best] == 4.9f);
    assert_int_equal(dy_sample(s, &cfg, &r, l), best);
    dy_sampler_free(s);
}

static void draw(dy_sampler *s, const dy_sampling *cfg, uint64_t seed, uint64_t stream,
                 const float *l, int32_t *out, int n)
{
    dy_rng r;
    dy_rng_seed(&r, seed, stream);
    for (int i = 0; i < n; i++)
        out[i] = dy_sample(s, cfg, &r, l);
}

static void test_seed_repeats_streams_differ(void **st)
{
    (void)st;
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = 0.0f; /* uniform: draws are all chance */
    dy_sampler *s = dy_sampler_new(V);
    dy_sampling cfg = dy_sampling_default();
    int32_t a[64], b[64], c[64];
    draw(s, &cfg, 42, 0, l, a, 64);
    draw(s, &cfg, 42, 0, l, b, 64);
    draw(s, &cfg, 42, 1, l, c, 64);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    dy_sampler_free(s);
}

static void test_filters(void **st)
{
    (void)st;
    float l[V];
    make_logits(l);
    dy_sampler *s = dy_sampler_new(V);
    dy_rng r;
    dy_rng_seed(&r, 7, 0);
    dy_sampling k = dy_sampling_default();
    k.top_k = 3;
    for (int i = 0; i < 500; i++)
        assert_true(l[dy_sample(s, &k, &r, l)] >= 4.7f - 1e-6f);
    dy_sampling mp = dy_sampling_default();
    mp.min_p = 0.5f; /* keeps p >= 0.5 p_max: logit >= 4.9 - ln 2 */
    for (int i = 0; i < 500; i++)
        assert_true(l[dy_sample(s, &mp, &r, l)] >= 4.9f - logf(2.0f) - 1e-5f);
    dy_sampling tp = dy_sampling_default();
    tp.top_p = 0.3f;
    tp.temperature = 0.2f; /* sharpen: the best token holds > 30% of the mass */
    for (int i = 0; i < 200; i++)
        assert_int_equal(dy_sample(s, &tp, &r, l), dy_argmax(l, V));
    dy_sampler_free(s);
}

/* With two tokens of logits 0 and ln 3, the second should come up ~75% of the time. */
static void test_draws_follow_softmax(void **st)
{
    (void)st;
    float l[2] = {0.0f, logf(3.0f)};
    dy_sampler *s = dy_sampler_new(2);
    dy_sampling cfg = dy_sampling_default();
    dy_rng r;
    dy_rng_seed(&r, 3, 0);
    int ones = 0, n = 20000;
    for (int i = 0; i < n; i++)
        ones += dy_sample(s, &cfg, &r, l);
    assert_true(fabs(ones / (double)n - 0.75) < 0.015);
    dy_sampler_free(s);
}

static void test_logprobs(void **st)
{
    (void)st;
    float l[4] = {1.0f, 3.0f, 2.0f, 0.0f};
    dy_sampler *s = dy_sampler_new(4);
    int32_t ids[3];
    float lps[3];
    double z = exp(1) + exp(3) + exp(2) + exp(0);
    float lp = dy_logprob(s, l, 2, 3, ids, lps);
    assert_true(fabs(lp - (2 - log(z))) < 1e-5);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 0);
    assert_true(fabs(lps[0] - (3 - log(z))) < 1e-5);
    dy_sampler_free(s);
}

static void test_check(void **st)
{
    (void)st;
    dy_sampling c = dy_sampling_default();
    assert_null(dy_sampling_check(&c));
    c.top_p = 0;
    assert_string_equal(dy_sampling_check(&c), "top_p");
    c = dy_sampling_default();
    c.temperature = -1;
    assert_string_equal(dy_sampling_check(&c), "temperature");
    c = dy_sampling_default();
    c.min_p = 2;
    assert_string_equal(dy_sampling_check(&c), "min_p");
}

/* ---- the sampler against a plain reference: sort everything, filter, draw in sorted order */

typedef struct {
    float p;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *a, const void *b)
{
    const ref_cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->id - y->id;
}

static int32_t ref_sample(const dy_sampling *cfg, dy_rng *rng, const float *l, int n_vocab,
                          ref_cand *c)
{
    for (int i = 0; i < n_vocab; i++)
        c[i] = (ref_cand){l[i] / cfg->temperature, i};
    /* the documented order: sorted when top-k or top-p is on, else id order */
    bool sorted = (cfg->top_k > 0 && cfg->top_k < n_vocab) || cfg->top_p < 1;
    if (sorted)
        qsort(c, (size_t)n_vocab, sizeof *c, ref_cmp);
    int n = cfg->top_k > 0 && cfg->top_k < n_vocab ? cfg->top_k : n_vocab;
    float max = c[0].p;
    for (int i = 0; i < n; i++)
        max = c[i].p > max ? c[i].p : max;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (c[i].p = expf(c[i].p - max));
    for (int i = 0; i < n; i++)
        c[i].p = (float)(c[i].p / sum);
    int m = n;
    if (cfg->min_p > 0) {
        m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].p >= cfg->min_p * (float)(1.0 / sum))
                c[m++] = c[i];
    }
    n = m;
    double total = 0;
    if (cfg->top_p < 1)
        for (m = 0; m < n && total < cfg->top_p;)
            total += c[m++].p;
    else
        for (int i = 0; i < n; i++)
            total += c[i].p;
    n = m;
    double r = dy_rng_float(rng) * total, acc = 0;
    for (int i = 0; i < n; i++)
        if (r < (acc += c[i].p))
            return c[i].id;
    return c[n - 1].id;
}

/* A 32,000-token vocabulary (where sorting it all costs milliseconds) with a wide spread of
 * logits: the sampler, sorting lazily and only when a filter needs the order, draws exactly
 * what a plain reference draws, under every filter. */
static void test_matches_full_sort(void **st)
{
    (void)st;
    enum { NV = 32000, DRAWS = 400 };
    float *l = malloc(sizeof(float) * NV);
    ref_cand *c = malloc(sizeof(ref_cand) * NV);
    dy_sampler *s = dy_sampler_new(NV);
    uint64_t x = 7;
    for (int i = 0; i < NV; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((x >> 40) % 20000) / 1000.0f - 10.0f; /* -10 .. 10 */
    }
    const dy_sampling cfgs[] = {
        {1.0f, 0, 1.0f, 0.0f, 0}, {0.7f, 40, 1.0f, 0.0f, 0}, {1.0f, 0, 0.9f, 0.0f, 0},
        {0.8f, 0, 0.95f, 0.05f, 0}, {1.5f, 0, 1.0f, 0.1f, 0}, {1.0f, 100, 0.5f, 0.0f, 0},
        {1.0f, 0, 1.0f, 0.02f, 0},
    };
    int mismatches = 0, total = 0;
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        dy_rng a, b;
        dy_rng_seed(&a, 99, k);
        dy_rng_seed(&b, 99, k);
        for (int d = 0; d < DRAWS; d++, total++)
            mismatches += dy_sample(s, &cfgs[k], &a, l) != ref_sample(&cfgs[k], &b, l, NV, c);
    }
    assert_int_equal(mismatches, 0);
    assert_true(total == 7 * DRAWS);
    dy_sampler_free(s);
    free(c);
    free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_matches_full_sort),
        cmocka_unit_test(test_seed_repeats_streams_differ),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_draws_follow_softmax),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
