/* test_kernels.c — the matmul: for every weight type and every SIMD level the CPU has (scalar,
 * avx2, avx512vnni, avx512), random quantised weights against random activations at awkward
 * sizes, checked against an f64 product of the dequantised operands and against the
 * unquantised product within the format's bound; every level gives the scalar level's bits;
 * activation conversion is identical at every level; partial row ranges touch only their rows. */
#include "engine/kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;



static const dy_type weight_types[] = {DY_F32, DY_F16, DY_BF16, DY_Q8_0, DY_Q4_0,
                                       DY_Q4_K, DY_Q5_K, DY_Q6_K};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

/* Columns per type: not a multiple of the float tile width (8), of the 256-column decode
 * chunk of Q8_0/Q4_0, and more than one K super-block. */
static int64_t test_cols(dy_type t)
{
    switch (dy_type_block_elems(t)) {
    case 1: return 300;
    case 32: return 352;
    default: return 768;
    }
}

/* How far the product may stray from the exact product of the unquantised operands, as a
 * fraction of |w|·|x| (the bound Cauchy–Schwarz gives for relative errors of that size). */
static double format_tolerance(dy_type t)
{
    switch (t) {
    case DY_F32: return 1e-5;
    case DY_F16: return 2e-3;
    case DY_BF16: return 1e-2;
    case DY_Q8_0: return 2e-2;
    case DY_Q4_0: return 0.2;
    case DY_Q4_K: return 0.15;
    case DY_Q5_K: return 0.08;
    default: return 0.05; /* Q6_K */
    }
}

typedef struct {
    dy_type type;
    int64_t rows, cols;
    float *wf;       /* original weights, rows × cols */
    uint8_t *wq;     /* quantised */
    double *wd;      /* dequantised, rows × cols */
    dy_mat W;
} weights;

static void make_weights(weights *w, dy_type t, int64_t rows, int64_t cols)
{
    w->type = t;
    w->rows = rows;
    w->cols = cols;
    const size_t rb = dy_type_row_bytes(t, cols);
    w->wf = malloc((size_t)(rows * cols) * sizeof(float));
    w->wq = malloc((size_t)rows * rb);
    w->wd = malloc((size_t)(rows * cols) * sizeof(double));
    float *tmp = malloc((size_t)cols * sizeof(float));
    assert_true(w->wf && w->wq && w->wd && tmp);
    for (int64_t i = 0; i < rows * cols; i++)
        w->wf[i] = 0.05f * tu_rng_normal(&rng_state) + (i % 61 == 0 ? 0.3f : 0.0f);
    for (int64_t r = 0; r < rows; r++) {
        dy_quantize_row(t, w->wf + r * cols, w->wq + (size_t)r * rb, cols);
        dy_dequant_row(t, w->wq + (size_t)r * rb, tmp, cols);
        for (int64_t i = 0; i < cols; i++)
            w->wd[r * cols + i] = tmp[i];
    }
    free(tmp);
    w->W = (dy_mat){.type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = w->wq};
}

static void free_weights(weights *w)
{
    free(w->wf);
    free(w->wq);
    free(w->wd);
}

static bool have_avx2(void)
{
    return dy_simd_has_avx2(dy_simd_detect());
}

/* The SIMD levels above scalar that this CPU runs, in order (DYAD_SIMD may cap them). */
static int simd_levels(dy_simd out[3])
{
    int n = 0;
    for (int l = DY_SIMD_AVX2; l <= (int)dy_simd_detect(); l++)
        out[n++] = (dy_simd)l;
    return n;
}

/* Random activations X (B × ldx), converted for W's type at the given SIMD level. */
static void *convert_acts(dy_simd simd, dy_type t, const float *X, int64_t ldx, int64_t cols,
                          int B)
{
    void *act = malloc(dy_act_bytes(t, cols, B) + 1);
    assert_non_null(act);
    dy_act_convert(simd, t, X, ldx, cols, 0, B, act);
    return act;
}

/* One case: W (rows × cols, type t) times B activation rows, over row range [r0, r1), at each
 * of the nl levels lv (the references are computed once for all of them). */
static void run_case(const dy_simd *lv, int nl, const weights *w, int B, int64_t r0, int64_t r1)
{
    const int64_t cols = w->cols, ldx = cols + 5, ldy = w->rows + 3;
    const dy_type at = dy_act_type(w->type);
    float *X = malloc((size_t)(B * ldx) * sizeof(float));
    float *Y = malloc((size_t)(nl * B * ldy) * sizeof(float));
    double *xd = malloc((size_t)cols * sizeof(double));
    float *tmp = malloc((size_t)cols * sizeof(float));
    void *act[4];
    assert_true(X && Y && xd && tmp && nl <= 4);
    for (int64_t i = 0; i < B * ldx; i++)
        X[i] = tu_rng_normal(&rng_state);
    for (int64_t i = 0; i < nl * B * ldy; i++)
        Y[i] = NAN; /* sentinel: untouched entries must stay NaN */
    for (int l = 0; l < nl; l++) {
        act[l] = convert_acts(lv[l], w->type, X, ldx, cols, B);
        dy_matmul_rows(lv[l], &w->W, act[l], B, Y + (int64_t)l * B * ldy, ldy, r0, r1);
    }

    const size_t arb = dy_type_row_bytes(at, cols);
    for (int b = 0; b < B; b++) {
        /* every level's conversion gives these bytes (test_act_convert_agrees) */
        dy_dequant_row(at, (uint8_t *)act[0] + (size_t)b * arb, tmp, cols);
        double xnorm = 0;
        for (int64_t i = 0; i < cols; i++) {
            xd[i] = tmp[i];
            xnorm += (double)X[b * ldx + i] * X[b * ldx + i];
        }
        for (int64_t r = 0; r < w->rows + 3; r++) {
            const bool outside = r < r0 || r >= r1;
            double exact_q = 0, sum_abs = 0, exact = 0, wnorm = 0;
            for (int64_t i = 0; !outside && i < cols; i++) {
                exact_q += w->wd[r * cols + i] * xd[i];
                sum_abs += fabs(w->wd[r * cols + i] * xd[i]);
                exact += (double)w->wf[r * cols + i] * X[b * ldx + i];
                wnorm += (double)w->wf[r * cols + i] * w->wf[r * cols + i];
            }
            const double tol = format_tolerance(w->type) * sqrt(wnorm * xnorm);
            for (int l = 0; l < nl; l++) {
                const float y = Y[(int64_t)l * B * ldy + b * ldy + r];
                const char *tn = dy_type_name(w->type), *ln = dy_simd_name(lv[l]);
                if (outside) {
                    if (!isnan(y))
                        fail_msg("%s/%s B=%d: row %lld outside [%lld,%lld) was written", tn, ln,
                                 B, (long long)r, (long long)r0, (long long)r1);
                    continue;
                }
                /* against the dequantised operands: only float rounding separates them */
                if (!(fabs(y - exact_q) <= 2e-5 * sum_abs + 1e-6))
                    fail_msg("%s/%s B=%d row %lld b %d: got %.9g, dequantised product %.9g", tn,
                             ln, B, (long long)r, b, y, exact_q);
                /* against the unquantised operands: within the format's error */
                if (!(fabs(y - exact) <= tol))
                    fail_msg("%s/%s B=%d row %lld b %d: got %.9g, exact %.9g (tol %.3g)", tn, ln,
                             B, (long long)r, b, y, exact, tol);
            }
        }
    }
    for (int l = 0; l < nl; l++)
        free(act[l]);
    free(X);
    free(Y);
    free(xd);
    free(tmp);
}

static void test_matmul_all_types(const dy_simd *lv, int nl)
{
    /* 150: more than one 144-row chunk of the 512-bit float kernel, which takes f32 and f16
     * rows this short only from 128 (f32) or 64 (f16) activation rows on */
    static const int Bs[] = {1, 2, 3, 5, 8, 17, 64, 70, 150};
    for (size_t t = 0; t < N_WEIGHT_TYPES; t++) {
        rng_state = 0x1234567ull + t;
        weights w;
        make_weights(&w, weight_types[t], 37, test_cols(weight_types[t]));
        for (size_t i = 0; i < sizeof Bs / sizeof Bs[0]; i++)
            if (Bs[i] <= 70 || dy_type_block_elems(w.type) == 1)
                run_case(lv, nl, &w, Bs[i], 0, w.rows);
        /* partial row ranges, as threads call it */
        run_case(lv, nl, &w, 5, 3, 4);
        run_case(lv, nl, &w, 17, 5, 30);
        run_case(lv, nl, &w, 3, 29, 37);
        run_case(lv, nl, &w, 2, 10, 10); /* empty */
        run_case(lv, nl, &w, 40, 9, 22);
        free_weights(&w);
    }
    /* float rows wider than the 512-bit kernel's 4096-column packing step (its accumulators
     * spill between steps), and not a multiple of 8 */
    for (size_t t = 0; t < 3; t++) {
        rng_state = 0x7654321ull + t;
        weights w;
        make_weights(&w, weight_types[t], 11, 4100);
        run_case(lv, nl, &w, 33, 0, w.rows);
        free_weights(&w);
    }
}

static void test_matmul_scalar(void **state)
{
    (void)state;
    const dy_simd scalar = DY_SIMD_SCALAR;
    test_matmul_all_types(&scalar, 1);
}

/* Every level above scalar that the CPU has. */
static void test_matmul_simd(void **state)
{
    (void)state;
    dy_simd lv[3];
    const int n = simd_levels(lv);
    if (n == 0)
        skip();
    test_matmul_all_types(lv, n);
}

/* Activation conversion: identical bytes at every level, by row subranges as well. */
static void test_act_convert_agrees(void **state)
{
    (void)state;
    if (!have_avx2())
        skip();
    rng_state = 77;
    const int B = 9;
    const int64_t cols = 512, ldx = 515;
    float *X = malloc((size_t)(B * ldx) * sizeof(float));
    assert_non_null(X);
    for (int64_t i = 0; i < B * ldx; i++)
        X[i] = tu_rng_normal(&rng_state) * (i % 3 ? 1.0f : 1e-3f);
    for (int64_t i = 0; i < 32; i++)
        X[ldx + i] = 0; /* an all-zero block */
    X[2 * ldx + 7] = -40.f, X[2 * ldx + 9] = 40.f; /* tie in magnitude: the first one counts */
    X[3 * ldx + 5] = 127.5f / 127.f * 0.5f;
    /* a block whose scale is exactly 1 (max 127): ties at .5 in both halves of the block, which
     * roundf takes away from zero (round-to-even would not) */
    X[4 * ldx + 0] = 127.f, X[4 * ldx + 3] = 2.5f, X[4 * ldx + 9] = -0.5f;
    X[4 * ldx + 20] = 20.5f, X[4 * ldx + 30] = -6.5f;
    dy_simd lv[3];
    const int nl = simd_levels(lv);
    for (size_t t = 0; t < N_WEIGHT_TYPES; t++) {
        const dy_type wt = weight_types[t];
        const size_t n = dy_act_bytes(wt, cols, B);
        uint8_t *a = malloc(n), *s = malloc(n), *parts = malloc(n);
        assert_true(a && s && parts);
        dy_act_convert(DY_SIMD_SCALAR, wt, X, ldx, cols, 0, B, s);
        for (int l = 0; l < nl; l++) {
            dy_act_convert(lv[l], wt, X, ldx, cols, 0, B, a);
            dy_act_convert(lv[l], wt, X, ldx, cols, 0, 4, parts);
            dy_act_convert(lv[l], wt, X, ldx, cols, 4, B, parts);
            assert_memory_equal(a, s, n);
            assert_memory_equal(a, parts, n);
        }
        /* and the scalar conversion is the reference quantiser, row by row */
        const size_t arb = dy_type_row_bytes(dy_act_type(wt), cols);
        for (int b = 0; b < B; b++) {
            dy_quantize_row(dy_act_type(wt), X + b * ldx, parts + b * arb, cols);
            assert_memory_equal(parts + b * arb, s + b * arb, arb);
        }
        free(a);
        free(s);
        free(parts);
    }
    free(X);
}

/* Scalar and every SIMD level give the same bits (the scalar code performs the AVX2 float
 * operations in the same order, and the 512-bit float kernel keeps that order), for every type,
 * with few activation rows (AVX2 "direct" path), many ("shared" / "packed" path) and, for float
 * rows, enough for the 512-bit kernel (wide rows from 32 activation rows, short ones from 128). Real forward passes depend on this: activations are re-quantised between
 * layers, so last-bit differences would otherwise grow into visible logit differences. */
static void check_scalar_simd_identical(const dy_simd *lv, int nl, int64_t rows,
                                        int64_t cols_scale)
{
    static const int Bs[] = {1, 2, 3, 4, 5, 19, 40, 70, 130};
    for (size_t t = 0; t < N_WEIGHT_TYPES; t++) {
        const bool float_rows = dy_type_block_elems(weight_types[t]) == 1;
        if (cols_scale > 2 && !float_rows) /* the wide case is for the float kernels */
            continue;
        rng_state = 99 + t;
        weights w;
        make_weights(&w, weight_types[t], rows, cols_scale * test_cols(weight_types[t]));
        const int64_t cols = w.cols;
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++) {
            const int B = Bs[bi];
            /* 40 and 130 run the 512-bit float kernel (from 32 rows), on wide and short rows;
             * short tiles suffice for them */
            if ((B == 40 || B > 70) && (!float_rows || rows > 32))
                continue;
            float *X = malloc((size_t)(B * cols) * sizeof(float));
            float *Ys = malloc((size_t)(B * w.rows) * sizeof(float));
            float *Ya = malloc((size_t)(B * w.rows) * sizeof(float));
            assert_true(X && Ys && Ya);
            for (int64_t i = 0; i < B * cols; i++)
                X[i] = tu_rng_normal(&rng_state);
            void *act = convert_acts(DY_SIMD_SCALAR, w.type, X, cols, cols, B);
            dy_matmul_rows(DY_SIMD_SCALAR, &w.W, act, B, Ys, w.rows, 0, w.rows);
            for (int l = 0; l < nl; l++) {
                dy_matmul_rows(lv[l], &w.W, act, B, Ya, w.rows, 0, w.rows);
                for (int64_t i = 0; i < B * w.rows; i++)
                    if (memcmp(&Ys[i], &Ya[i], sizeof(float)) != 0)
                        fail_msg("%s B=%d: scalar %.9g vs %s %.9g at %lld", dy_type_name(w.type),
                                 B, Ys[i], dy_simd_name(lv[l]), Ya[i], (long long)i);
            }
            free(act);
            free(X);
            free(Ys);
            free(Ya);
        }
        free_weights(&w);
    }
}

/* 21 rows: short tiles; 170: several 64-row groups of the packed VNNI path and a last group
 * of three 16-row tiles (a pair and a short single one, as the 512-bit path takes them);
 * 4× the columns (1200 for float rows): past the width where the 512-bit float kernel starts.
 * At every level above scalar that the CPU has. */
static void test_scalar_simd_identical(void **state)
{
    (void)state;
    dy_simd lv[3];
    const int n = simd_levels(lv);
    if (n == 0)
        skip();
    check_scalar_simd_identical(lv, n, 21, 2);
    check_scalar_simd_identical(lv, n, 170, 2);
    check_scalar_simd_identical(lv, n, 13, 4);
}

static void test_act_type_and_bytes(void **state)
{
    (void)state;
    assert_int_equal(dy_act_type(DY_F32), DY_F32);
    assert_int_equal(dy_act_type(DY_F16), DY_F32);
    assert_int_equal(dy_act_type(DY_BF16), DY_F32);
    assert_int_equal(dy_act_type(DY_Q8_0), DY_Q8_0);
    assert_int_equal(dy_act_type(DY_Q4_0), DY_Q8_0);
    assert_int_equal(dy_act_type(DY_Q4_K), DY_Q8_K);
    assert_int_equal(dy_act_type(DY_Q5_K), DY_Q8_K);
    assert_int_equal(dy_act_type(DY_Q6_K), DY_Q8_K);
    assert_int_equal(dy_act_bytes(DY_F16, 300, 3), 3 * 300 * 4);
    assert_int_equal(dy_act_bytes(DY_Q4_0, 512, 2), 2 * 16 * 34);
    assert_int_equal(dy_act_bytes(DY_Q6_K, 512, 5), 5 * 2 * 292);
    assert_string_equal(dy_simd_name(DY_SIMD_SCALAR), "scalar");
    assert_string_equal(dy_simd_name(DY_SIMD_AVX2), "avx2");
    assert_string_equal(dy_simd_name(DY_SIMD_AVX512_VNNI), "avx512vnni");
    assert_string_equal(dy_simd_name(DY_SIMD_AVX512), "avx512");
    const char *was = getenv("DYAD_SIMD");
    char *saved = was ? strdup(was) : NULL;
    unsetenv("DYAD_SIMD");
    const dy_simd best = dy_simd_detect();
    setenv("DYAD_SIMD", "scalar", 1);
    assert_int_equal(dy_simd_detect(), DY_SIMD_SCALAR);
    /* "avx2" caps the level at AVX2; it never raises it */
    setenv("DYAD_SIMD", "avx2", 1);
    assert_int_equal(dy_simd_detect(), best < DY_SIMD_AVX2 ? best : DY_SIMD_AVX2);
    /* "avx512vnni": no 512-bit registers */
    setenv("DYAD_SIMD", "AVX512vnni", 1);
    assert_int_equal(dy_simd_detect(), best < DY_SIMD_AVX512_VNNI ? best : DY_SIMD_AVX512_VNNI);
    setenv("DYAD_SIMD", "any other value", 1);
    assert_int_equal(dy_simd_detect(), best);
    if (saved)
        setenv("DYAD_SIMD", saved, 1);
    else
        unsetenv("DYAD_SIMD");
    free(saved);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_act_type_and_bytes),
        cmocka_unit_test(test_act_convert_agrees),
        cmocka_unit_test(test_matmul_scalar),
        cmocka_unit_test(test_matmul_simd),
        cmocka_unit_test(test_scalar_simd_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
