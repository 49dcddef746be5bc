/* test_sampler.c — sampling: greedy picks the argmax; a seed repeats exactly; different
 * streams differ; top-k / top-p / min-p never pick a filtered token; draws follow the
 * softmax; log-probabilities and the top-N list are right; bad settings are named. */
#include "testutil.h"
#include "engine/sampler.h"

#include <math.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_seed_repeats_streams_differ),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_draws_follow_softmax),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
