/* test_attention.c — attention over the paged KV pool against an f64 reference (scores,
 * softmax and weighted sum in double) on random data: scattered block tables, grouped-query
 * heads, head dimensions and lengths that are not multiples of 8 or 16, blocks longer than a
 * chunk, several sequences and prefill runs in one step, peaked and flat softmaxes. Scalar and
 * AVX2 give the same bits, and so does any split of the work over threads. The same keys and
 * values stored as f16 or q8_0 give the f32 result within each format's bound, at every kernel
 * level the CPU has, each level with the same bits. */
#include "engine/attention.h"
#include "engine/kv_codec.h"
#include "testutil.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;



typedef struct {
    int pos, n; /* the step holds positions pos … pos+n-1 of the sequence */
} seq_spec;

typedef struct {
    const char *name;
    int n_heads, n_kv_heads, head_dim, block_size;
    float q_scale; /* larger: a more peaked softmax */
    int n_seqs;
    seq_spec seqs[4];
} attn_case;

typedef struct {
    const attn_case *c;
    dy_kv_pool *kv;
    int32_t *tables[4];
    dy_tok_slot *slots;
    float *q;
    int T;
} setup;

/* A pool with every sequence's positions filled (blocks taken in a shuffled order), and the
 * step's queries. */
static void make_setup(setup *s, const attn_case *c)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    const int kvd = c->n_kv_heads * c->head_dim, bs = c->block_size;
    int need = 0;
    for (int i = 0; i < c->n_seqs; i++) {
        need += (c->seqs[i].pos + c->seqs[i].n + bs - 1) / bs;
        s->T += c->seqs[i].n;
    }
    const int n_blocks = need + 7;
    s->kv = dy_kv_pool_new(n_blocks, bs, 2, kvd);
    assert_non_null(s->kv);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++)
        ids[i] = dy_kv_alloc(s->kv);
    for (int i = n_blocks - 1; i > 0; i--) { /* scatter */
        const int j = (int)(tu_rng_u64(&rng_state) % (uint64_t)(i + 1));
        const int32_t t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    int next = 0;
    s->slots = malloc(sizeof(dy_tok_slot) * (size_t)s->T);
    s->q = malloc(sizeof(float) * (size_t)s->T * c->n_heads * c->head_dim);
    assert_true(ids && s->slots && s->q);
    int t = 0;
    for (int i = 0; i < c->n_seqs; i++) {
        const int len = c->seqs[i].pos + c->seqs[i].n, nb = (len + bs - 1) / bs;
        s->tables[i] = malloc(sizeof(int32_t) * (size_t)nb);
        for (int b = 0; b < nb; b++)
            s->tables[i][b] = ids[next++];
        for (int layer = 0; layer < 2; layer++)
            for (int p = 0; p < len; p++) {
                const int32_t b = s->tables[i][p / bs];
                float *k = dy_kv_keys(s->kv, b, layer) + (size_t)(p % bs) * kvd;
                float *v = dy_kv_values(s->kv, b, layer) + (size_t)(p % bs) * kvd;
                for (int d = 0; d < kvd; d++) {
                    /* keys drift with the position, so later chunks raise the running max */
                    k[d] = tu_rng_normal(&rng_state) + 0.002f * (float)p;
                    v[d] = tu_rng_normal(&rng_state);
                }
            }
        for (int j = 0; j < c->seqs[i].n; j++, t++) {
            s->slots[t].blocks = s->tables[i];
            s->slots[t].pos = c->seqs[i].pos + j;
        }
    }
    for (size_t i = 0; i < (size_t)s->T * c->n_heads * c->head_dim; i++)
        s->q[i] = c->q_scale * tu_rng_normal(&rng_state);
    free(ids);
}

static void free_setup(setup *s)
{
    for (int i = 0; i < 4; i++)
        free(s->tables[i]);
    free(s->slots);
    free(s->q);
    dy_kv_pool_free(s->kv);
}

/* Runs layer 1's attention over kv split over nth "threads" (called one after another). */
static float *run_attention_on(const setup *s, const dy_kv_pool *kv, dy_simd simd, int nth)
{
    const attn_case *c = s->c;
    const size_t n = (size_t)s->T * c->n_heads * c->head_dim;
    float *out = malloc(sizeof(float) * n);
    const size_t sf = dy_attention_scratch_floats(1024, c->head_dim);
    float *scratch = malloc(sizeof(float) * sf * (size_t)nth);
    assert_true(out && scratch);
    for (size_t i = 0; i < n; i++)
        out[i] = NAN; /* every output must be written */
    dy_attn a = {kv, 1, c->n_heads, c->n_kv_heads, c->head_dim, s->T, s->slots, s->q,
                 out, scratch, sf, simd};
    for (int ith = 0; ith < nth; ith++)
        dy_attention(&a, ith, nth);
    free(scratch);
    return out;
}

static float *run_attention(const setup *s, dy_simd simd, int nth)
{
    return run_attention_on(s, s->kv, simd, nth);
}

/* The setup's f32 pool, every row of every block and layer stored in type t. */
static dy_kv_pool *typed_copy(const setup *s, dy_kv_type t)
{
    const attn_case *c = s->c;
    const dy_kv_pool *f = s->kv;
    const dy_kv_shape shape = {f->block_size, f->n_layers, f->kv_dim, c->head_dim, t};
    dy_kv_pool *p = dy_kv_pool_make(f->n_blocks, &shape, NULL);
    assert_non_null(p);
    for (int b = 0; b < f->n_blocks; b++)
        for (int l = 0; l < f->n_layers; l++)
            for (int r = 0; r < f->block_size; r++) {
                const size_t off = (size_t)r * f->kv_dim;
                dy_kv_encode_row(t, dy_kv_keys(f, b, l) + off, f->kv_dim, c->head_dim,
                                 dy_kv_key_rows(p, b, l) + (size_t)r * p->row_bytes);
                dy_kv_encode_row(t, dy_kv_values(f, b, l) + off, f->kv_dim, c->head_dim,
                                 dy_kv_value_rows(p, b, l) + (size_t)r * p->row_bytes);
            }
    return p;
}

/* The f64 reference for every (token, head), compared with out. */
static void check_reference(const setup *s, const float *out)
{
    const attn_case *c = s->c;
    const int hd = c->head_dim, kvd = c->n_kv_heads * hd, bs = c->block_size;
    const int group = c->n_heads / c->n_kv_heads;
    double worst = 0;
    for (int t = 0; t < s->T; t++) {
        const int pos = s->slots[t].pos;
        double *w = malloc(sizeof(double) * (size_t)(pos + 1));
        double *ref = malloc(sizeof(double) * (size_t)hd);
        for (int h = 0; h < c->n_heads; h++) {
            const float *q = s->q + ((size_t)t * c->n_heads + h) * hd;
            const int kvh = h / group;
            double max = -INFINITY, sum = 0, vmax = 0;
            for (int p = 0; p <= pos; p++) {
                const int32_t b = s->slots[t].blocks[p / bs];
                const float *k = dy_kv_keys(s->kv, b, 1) + (size_t)(p % bs) * kvd + (size_t)kvh * hd;
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[i] * k[i];
                w[p] = d / sqrt((double)hd);
                max = fmax(max, w[p]);
            }
            for (int p = 0; p <= pos; p++)
                sum += (w[p] = exp(w[p] - max));
            for (int i = 0; i < hd; i++)
                ref[i] = 0;
            for (int p = 0; p <= pos; p++) {
                const int32_t b = s->slots[t].blocks[p / bs];
                const float *v = dy_kv_values(s->kv, b, 1) + (size_t)(p % bs) * kvd + (size_t)kvh * hd;
                for (int i = 0; i < hd; i++) {
                    ref[i] += w[p] / sum * v[i];
                    vmax = fmax(vmax, fabs(v[i]));
                }
            }
            const float *o = out + ((size_t)t * c->n_heads + h) * hd;
            for (int i = 0; i < hd; i++) {
                const double err = fabs(o[i] - ref[i]) / vmax;
                if (!(err <= 1e-5))
                    fail_msg("%s: token %d head %d dim %d: %.9g, reference %.9g", c->name, t, h,
                             i, o[i], ref[i]);
                worst = fmax(worst, err);
            }
        }
        free(w);
        free(ref);
    }
    print_message("%-28s worst error %.2g of max |v|\n", c->name, worst);
}

static const attn_case cases[] = {
    {"prefill 77, hd 64", 4, 4, 64, 16, 1.0f, 1, {{0, 77}}},
    {"gqa 8/2, hd 48, bs 5", 8, 2, 48, 5, 1.0f, 3, {{123, 1}, {40, 19}, {0, 1}}},
    {"mqa 3/1, hd 12, bs 7", 3, 1, 12, 7, 2.0f, 2, {{9, 30}, {3, 2}}},
    {"hd 128, bs 100, decode 250", 2, 2, 128, 100, 1.0f, 2, {{250, 1}, {130, 3}}},
    {"group 24, hd 8", 24, 1, 8, 16, 1.0f, 1, {{20, 21}}},
    {"peaked, hd 72, gqa 4/1", 4, 1, 72, 16, 8.0f, 2, {{0, 40}, {64, 9}}},
    {"hd 20, gqa 6/3", 6, 3, 20, 3, 3.0f, 4, {{0, 1}, {17, 5}, {1, 1}, {33, 2}}},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static void test_reference_scalar(void **st)
{
    (void)st;
    for (size_t i = 0; i < N_CASES; i++) {
        setup s;
        make_setup(&s, &cases[i]);
        float *out = run_attention(&s, DY_SIMD_SCALAR, 2);
        check_reference(&s, out);
        free(out);
        free_setup(&s);
    }
}

static void test_reference_avx2(void **st)
{
    (void)st;
    if (!dy_simd_has_avx2(dy_simd_detect()))
        skip();
    for (size_t i = 0; i < N_CASES; i++) {
        setup s;
        make_setup(&s, &cases[i]);
        float *out = run_attention(&s, DY_SIMD_AVX2, 2);
        check_reference(&s, out);
        free(out);
        free_setup(&s);
    }
}

/* Same bits at both kernel levels and for 1, 2 or 3 threads. */
static void test_identical_bits(void **st)
{
    (void)st;
    const bool avx2 = dy_simd_has_avx2(dy_simd_detect());
    for (size_t i = 0; i < N_CASES; i++) {
        setup s;
        make_setup(&s, &cases[i]);
        const size_t n = (size_t)s.T * cases[i].n_heads * cases[i].head_dim;
        float *one = run_attention(&s, DY_SIMD_SCALAR, 1);
        float *three = run_attention(&s, DY_SIMD_SCALAR, 3);
        assert_memory_equal(one, three, sizeof(float) * n);
        if (avx2) {
            float *a1 = run_attention(&s, DY_SIMD_AVX2, 1);
            float *a2 = run_attention(&s, DY_SIMD_AVX2, 2);
            for (size_t j = 0; j < n; j++)
                if (memcmp(&a1[j], &one[j], sizeof(float)) != 0)
                    fail_msg("%s: scalar %.9g vs avx2 %.9g at %zu", cases[i].name, one[j], a1[j], j);
            assert_memory_equal(a1, a2, sizeof(float) * n);
            free(a1);
            free(a2);
        }
        free(one);
        free(three);
        free_setup(&s);
    }
}

/* Attention over an f16 or q8_0 copy of the keys and values against the f32 result, at every
 * kernel level up to the CPU's: within bound × q_scale × max |v| at each output, and the same
 * bits at every level and thread split. A key's error moves its score in proportion to |q|
 * (the case's q_scale), and a more peaked softmax passes that on more strongly, hence the
 * factor. bound: 1e-3 for f16 (keys and values within 2^-11 relative); 1.5e-2 for q8_0 (within
 * max|x| / 254 of their head at their position). */
static void check_typed(dy_kv_type t, double bound)
{
    const dy_simd top = dy_simd_detect();
    for (size_t i = 0; i < N_CASES; i++) {
        setup s;
        make_setup(&s, &cases[i]);
        dy_kv_pool *typed = typed_copy(&s, t);
        const size_t n = (size_t)s.T * cases[i].n_heads * cases[i].head_dim;
        float *ref = run_attention(&s, DY_SIMD_SCALAR, 1);
        float *first = run_attention_on(&s, typed, DY_SIMD_SCALAR, 1);
        double vmax = 0, worst = 0;
        for (int b = 0; b < s.kv->n_blocks; b++)
            for (int j = 0; j < s.kv->block_size * s.kv->kv_dim; j++)
                vmax = fmax(vmax, fabs(dy_kv_values(s.kv, b, 1)[j]));
        for (size_t j = 0; j < n; j++) {
            const double err = fabs((double)first[j] - ref[j]) / vmax;
            if (!(err <= bound * cases[i].q_scale))
                fail_msg("%s, %s KV: output %zu is %.9g, f32 gives %.9g", cases[i].name,
                         dy_kv_type_name(t), j, first[j], ref[j]);
            worst = fmax(worst, err);
        }
        print_message("%-28s %s KV: worst difference %.2g of max |v|\n", cases[i].name,
                      dy_kv_type_name(t), worst);
        for (int lv = DY_SIMD_SCALAR; lv <= (int)top; lv++)
            for (int nth = 1; nth <= 3; nth++) {
                float *o = run_attention_on(&s, typed, (dy_simd)lv, nth);
                if (memcmp(o, first, sizeof(float) * n) != 0)
                    fail_msg("%s, %s KV: level %s with %d threads differs from scalar",
                             cases[i].name, dy_kv_type_name(t), dy_simd_name((dy_simd)lv), nth);
                free(o);
            }
        free(ref);
        free(first);
        dy_kv_pool_free(typed);
        free_setup(&s);
    }
}

static void test_f16_kv(void **st)
{
    (void)st;
    check_typed(DY_KV_F16, 1e-3);
}

static void test_q8_0_kv(void **st)
{
    (void)st;
    check_typed(DY_KV_Q8_0, 1.5e-2);
}

/* An f32 pool of dy_kv_pool_make reads exactly as one of dy_kv_pool_new. */
static void test_f32_kv_make(void **st)
{
    (void)st;
    setup s;
    make_setup(&s, &cases[1]);
    dy_kv_pool *made = typed_copy(&s, DY_KV_F32);
    const size_t n = (size_t)s.T * cases[1].n_heads * cases[1].head_dim;
    float *a = run_attention(&s, dy_simd_detect(), 2);
    float *b = run_attention_on(&s, made, dy_simd_detect(), 2);
    assert_memory_equal(a, b, sizeof(float) * n);
    free(a);
    free(b);
    dy_kv_pool_free(made);
    free_setup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_scalar),
        cmocka_unit_test(test_reference_avx2),
        cmocka_unit_test(test_identical_bits),
        cmocka_unit_test(test_f16_kv),
        cmocka_unit_test(test_q8_0_kv),
        cmocka_unit_test(test_f32_kv_make),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
