/* test_quant.c — weight formats: dequantisation bit-exact with llama.cpp's reference rows
 * (tests/data/quant), quantise→dequantise round trips within each format's error bound,
 * f16/bf16 conversion edge cases, and the type table (names, block and row sizes). */
#include "engine/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;




static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ------------------------------------------------------------------ reference rows */

/* Taken from tests/data/quant/dequant_index.json: the byte offset of each tensor's data in its
 * GGUF file, its type and row length. The expected rows are model-<file>.<tensor>.rows0-1.f32. */
static const struct {
    const char *file;
    const char *tensor;
    dy_type type;
    long offset;
    int64_t row_len;
} ref_rows[] = {
    {"f32", "blk.0.attn_q.weight", DY_F32, 539104, 256},
    {"f32", "blk.0.ffn_down.weight", DY_F32, 2112992, 768},
    {"f32", "output.weight", DY_F32, 13130208, 256},
    {"f16", "blk.0.attn_q.weight", DY_F16, 736768, 256},
    {"f16", "blk.0.ffn_down.weight", DY_F16, 933376, 768},
    {"f16", "output.weight", DY_F16, 13824, 256},
    {"bf16", "blk.0.attn_q.weight", DY_BF16, 736768, 256},
    {"bf16", "blk.0.ffn_down.weight", DY_BF16, 933376, 768},
    {"bf16", "output.weight", DY_BF16, 13824, 256},
    {"q8_0", "blk.0.attn_q.weight", DY_Q8_0, 398848, 256},
    {"q8_0", "blk.0.ffn_down.weight", DY_Q8_0, 503296, 768},
    {"q8_0", "output.weight", DY_Q8_0, 13824, 256},
    {"q6_k", "blk.0.attn_q.weight", DY_Q6_K, 311552, 256},
    {"q6_k", "blk.0.ffn_down.weight", DY_Q6_K, 392192, 768},
    {"q6_k", "output.weight", DY_Q6_K, 13824, 256},
    {"q5_k_m", "blk.0.attn_q.weight", DY_Q5_K, 281088, 256},
    {"q5_k_m", "blk.0.ffn_down.weight", DY_Q5_K, 348672, 768},
    {"q5_k_m", "output.weight", DY_Q6_K, 13824, 256},
    {"q4_k_m", "blk.0.attn_q.weight", DY_Q4_K, 252416, 256},
    {"q4_k_m", "blk.0.ffn_down.weight", DY_Q4_K, 307712, 768},
    {"q4_k_m", "output.weight", DY_Q6_K, 13824, 256},
    {"q4_0", "blk.0.attn_q.weight", DY_Q4_0, 252416, 256},
    {"q4_0", "blk.0.ffn_down.weight", DY_Q4_0, 307712, 768},
    {"q4_0", "output.weight", DY_Q6_K, 13824, 256},
};
#define N_REF_ROWS (sizeof ref_rows / sizeof ref_rows[0])

/* The bf16 model only ships xz-compressed: decompress it once through `xz -dc`. */
static uint8_t *bf16_model;
static size_t bf16_model_len;

static const uint8_t *load_bf16_model(void)
{
    if (bf16_model)
        return bf16_model;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "xz -dc '%s'", tu_path("tests/data/quant/model-bf16.gguf.xz"));
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t cap = 8u << 20, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, p)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    if (pclose(p) != 0 || !buf || len == 0) {
        free(buf);
        return NULL;
    }
    bf16_model = buf;
    bf16_model_len = len;
    return bf16_model;
}

/* Reads `len` bytes at `offset` of the reference file for entry i (malloc'd), or NULL. */
static uint8_t *read_ref_bytes(size_t i, size_t len)
{
    uint8_t *out = malloc(len);
    assert_non_null(out);
    if (ref_rows[i].type == DY_BF16) {
        const uint8_t *m = load_bf16_model();
        if (!m || (size_t)ref_rows[i].offset + len > bf16_model_len) {
            free(out);
            return NULL;
        }
        memcpy(out, m + ref_rows[i].offset, len);
        return out;
    }
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/quant/model-%s.gguf", ref_rows[i].file);
    FILE *f = fopen(tu_path(rel), "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, ref_rows[i].offset, SEEK_SET), 0);
    assert_int_equal(fread(out, 1, len, f), len);
    fclose(f);
    return out;
}

static void test_dequant_matches_reference(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_REF_ROWS; i++) {
        const int64_t n = 2 * ref_rows[i].row_len;
        assert_true(dy_type_row_ok(ref_rows[i].type, ref_rows[i].row_len));
        const size_t row_bytes = dy_type_row_bytes(ref_rows[i].type, ref_rows[i].row_len);
        uint8_t *raw = read_ref_bytes(i, 2 * row_bytes);
        if (!raw) {
            fprintf(stderr, "skip %s %s: cannot read (xz missing?)\n", ref_rows[i].file,
                    ref_rows[i].tensor);
            continue;
        }
        char rel[256];
        snprintf(rel, sizeof rel, "tests/data/quant/model-%s.%s.rows0-1.f32", ref_rows[i].file,
                 ref_rows[i].tensor);
        size_t elen = 0;
        char *expect = tu_read_file(tu_path(rel), &elen);
        assert_non_null(expect);
        assert_int_equal(elen, (size_t)n * sizeof(float));

        float *got = malloc((size_t)n * sizeof(float));
        assert_non_null(got);
        /* row by row, as the engine does, and both rows in one call */
        dy_dequant_row(ref_rows[i].type, raw, got, ref_rows[i].row_len);
        dy_dequant_row(ref_rows[i].type, raw + row_bytes, got + ref_rows[i].row_len,
                       ref_rows[i].row_len);
        if (memcmp(got, expect, elen) != 0)
            fail_msg("%s %s (%s): dequantised rows differ from llama.cpp's", ref_rows[i].file,
                     ref_rows[i].tensor, dy_type_name(ref_rows[i].type));
        memset(got, 0, elen);
        dy_dequant_row(ref_rows[i].type, raw, got, n);
        assert_memory_equal(got, expect, elen);

        /* Q8_0 and Q4_0 reproduce their bytes when re-quantised: the block maximum maps back
         * to ±127 / -8 exactly, so the reference quantiser finds the same scale. */
        if (ref_rows[i].type == DY_Q8_0 || ref_rows[i].type == DY_Q4_0) {
            uint8_t *again = malloc(2 * row_bytes);
            assert_non_null(again);
            dy_quantize_row(ref_rows[i].type, got, again, n);
            assert_memory_equal(again, raw, 2 * row_bytes);
            free(again);
        }
        free(got);
        free(expect);
        free(raw);
    }
}

/* ------------------------------------------------------------------ round trips */

static void fill_test_row(float *x, int64_t n, int kind)
{
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = 0.02f * tu_rng_normal(&rng_state); break;              /* weights-like */
        case 1: x[i] = tu_rng_normal(&rng_state) + (i % 97 == 0 ? 8.f : 0); break; /* outliers */
        case 2: x[i] = 3.0f * tu_rng_uniform(&rng_state) + 0.5f; break;       /* all positive */
        case 3: x[i] = -0.05f * tu_rng_uniform(&rng_state); break;            /* all negative, small */
        default: x[i] = (i / 40) % 3 == 0 ? 0.f : tu_rng_normal(&rng_state); break; /* zero blocks */
        }
    }
}

/* For each block: the largest error must stay below `frac` of the block's range (max|x| for
 * the symmetric formats), and over the row the RMS error below `rms_frac` of the row's RMS. */
static void check_round_trip(dy_type t, double frac, double rms_frac)
{
    const int64_t n = 1024;
    float x[1024], y[1024];
    uint8_t q[4096];
    const int64_t be = dy_type_block_elems(t);
    for (int kind = 0; kind < 5; kind++) {
        fill_test_row(x, n, kind);
        memset(q, 0xAB, sizeof q);
        dy_quantize_row(t, x, q, n);
        dy_dequant_row(t, q, y, n);
        double se = 0, sx = 0;
        const int64_t gb = be < 32 ? 32 : be; /* error groups: the block, at least 32 */
        for (int64_t b0 = 0; b0 < n; b0 += gb) {
            double lo = 0, hi = 0, emax = 0;
            for (int64_t i = b0; i < b0 + gb; i++) {
                lo = fmin(lo, x[i]);
                hi = fmax(hi, x[i]);
                emax = fmax(emax, fabs((double)y[i] - x[i]));
                se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
                sx += (double)x[i] * x[i];
            }
            const double range = fmax(hi - lo, fmax(-lo, hi));
            if (emax > frac * range + 1e-30)
                fail_msg("%s kind %d block %lld: max error %g > %g·range %g", dy_type_name(t),
                         kind, (long long)(b0 / gb), emax, frac, range);
        }
        if (sx > 0 && sqrt(se / sx) > rms_frac)
            fail_msg("%s kind %d: relative RMS error %g > %g", dy_type_name(t), kind,
                     sqrt(se / sx), rms_frac);
        if (kind == 4 && be <= 32) /* all-zero blocks stay exactly zero */
            for (int64_t i = 0; i < 40 && i < n; i++)
                assert_true(y[i] == 0.0f);
    }
}

static void test_round_trips(void **state)
{
    (void)state;
    check_round_trip(DY_F32, 0, 0);
    check_round_trip(DY_F16, 1.0 / 2048, 1.0 / 2048);
    check_round_trip(DY_BF16, 1.0 / 256, 1.0 / 256);
    /* bounds: the worst over 1000 random rows of these kinds, with some margin */
    check_round_trip(DY_Q8_0, 0.6 / 127, 0.012);
    check_round_trip(DY_Q4_0, 1.01 / 8, 0.2);
    check_round_trip(DY_Q4_K, 0.10, 0.13);
    check_round_trip(DY_Q5_K, 0.06, 0.065);
    check_round_trip(DY_Q6_K, 0.03, 0.04);
    check_round_trip(DY_Q8_K, 0.6 / 127, 0.025);
}

static void test_quantize_zero_and_constant(void **state)
{
    (void)state;
    static const dy_type types[] = {DY_Q8_0, DY_Q4_0, DY_Q4_K, DY_Q5_K, DY_Q6_K, DY_Q8_K};
    float x[512], y[512];
    uint8_t q[2048];
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        memset(x, 0, sizeof x);
        dy_quantize_row(types[t], x, q, 512);
        dy_dequant_row(types[t], q, y, 512);
        for (int i = 0; i < 512; i++)
            assert_true(y[i] == 0.0f);
        for (int i = 0; i < 512; i++)
            x[i] = 0.75f;
        dy_quantize_row(types[t], x, q, 512);
        dy_dequant_row(types[t], q, y, 512);
        for (int i = 0; i < 512; i++)
            assert_true(fabsf(y[i] - 0.75f) <= 0.75f * 0.02f);
    }
}

/* ------------------------------------------------------------------ f16 / bf16 */

static double f16_value(uint16_t h) /* independent decoder, in double */
{
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0)
        return s * ldexp(m, -24);
    if (e == 31)
        return m ? NAN : s * INFINITY;
    return s * ldexp(1024 + m, e - 25);
}

static void test_f16_edges(void **state)
{
    (void)state;
    assert_int_equal(dy_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(dy_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(dy_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(dy_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(dy_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(dy_f32_to_f16(65519.996f), 0x7bff);
    assert_int_equal(dy_f32_to_f16(65520.0f), 0x7c00); /* tie at the top rounds to inf */
    assert_int_equal(dy_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(dy_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(dy_f32_to_f16(INFINITY), 0x7c00);
    const uint16_t hn = dy_f32_to_f16(NAN);
    assert_true((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0 && (hn & 0x200));
    assert_int_equal(dy_f32_to_f16(float_of(0x7f800001)) & 0x7e00, 0x7e00); /* sNaN → quiet */
    assert_int_equal(dy_f32_to_f16(0x1p-14f), 0x0400);  /* smallest normal */
    assert_int_equal(dy_f32_to_f16(0x1p-24f), 0x0001);  /* smallest subnormal */
    assert_int_equal(dy_f32_to_f16(0x1p-25f), 0x0000);  /* tie → even (0) */
    assert_int_equal(dy_f32_to_f16(0x1.000002p-25f), 0x0001);
    assert_int_equal(dy_f32_to_f16(0x3p-25f), 0x0002);  /* 1.5 units: tie → even (2) */
    assert_int_equal(dy_f32_to_f16(0x5p-25f), 0x0002);  /* 2.5 units: tie → even (2) */
    assert_int_equal(dy_f32_to_f16(-0x1p-26f), 0x8000);
    assert_int_equal(dy_f32_to_f16(0x1.ff8p-15f), 0x03ff); /* largest subnormal */
    assert_int_equal(dy_f32_to_f16(0x1.ffcp-15f), 0x0400); /* tie: rounds up into the normals */
    assert_int_equal(dy_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);       /* tie → even */
    assert_int_equal(dy_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);       /* tie → even */
    assert_int_equal(dy_f32_to_f16(float_of(0x3f801001)), 0x3c01); /* just above the tie */
    assert_true(dy_f16_to_f32(0x7c00) == INFINITY);
    assert_true(dy_f16_to_f32(0xfc00) == -INFINITY);
    assert_true(isnan(dy_f16_to_f32(0x7e00)) && isnan(dy_f16_to_f32(0x7c01)));
    assert_true(dy_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(signbit(dy_f16_to_f32(0x8000)));

    /* every half decodes to its exact value and encodes back to itself (NaNs: quiet) */
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float f = dy_f16_to_f32((uint16_t)h);
        const double v = f16_value((uint16_t)h);
        if (isnan(v)) {
            assert_true(isnan(f));
            assert_int_equal(dy_f32_to_f16(f), h | 0x200);
            continue;
        }
        assert_true((double)f == v);
        assert_int_equal(dy_f32_to_f16(f), h);
    }
    /* random floats: the result is the nearest half, ties to even */
    for (int i = 0; i < 200000; i++) {
        float f = float_of((uint32_t)tu_rng_u64(&rng_state));
        if (isnan(f))
            continue;
        if (i & 1) /* concentrate on the half range */
            f = ldexpf(tu_rng_uniform(&rng_state) * 2 - 1, (int)(tu_rng_u64(&rng_state) % 44) - 27);
        const uint16_t h = dy_f32_to_f16(f);
        const double v = f16_value(h), x = f;
        if (isinf(v)) {
            assert_true(fabs(x) >= 65520.0);
            continue;
        }
        const uint16_t up = (uint16_t)(h + 1), dn = (uint16_t)(h - 1);
        const double vu = (h & 0x7fff) == 0x7bff ? 65536.0 * (h & 0x8000 ? -1 : 1) : f16_value(up);
        const double vd = (h & 0x7fff) == 0 ? -v : f16_value(dn);
        const double err = fabs(v - x);
        assert_true(err <= fabs(vu - x) && err <= fabs(vd - x));
        if (err == fabs(vu - x) || ((h & 0x7fff) != 0 && err == fabs(vd - x)))
            assert_true((h & 1) == 0 || err == 0);
    }
}

static void test_bf16_edges(void **state)
{
    (void)state;
    assert_int_equal(dy_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(dy_f32_to_bf16(-1.0f), 0xbf80);
    assert_int_equal(dy_f32_to_bf16(float_of(0x3f808000)), 0x3f80); /* tie → even */
    assert_int_equal(dy_f32_to_bf16(float_of(0x3f818000)), 0x3f82); /* tie → even */
    assert_int_equal(dy_f32_to_bf16(float_of(0x3f808001)), 0x3f81);
    assert_int_equal(dy_f32_to_bf16(float_of(0x7f7fffff)), 0x7f80); /* rounds to inf */
    assert_int_equal(dy_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(dy_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(dy_f32_to_bf16(float_of(0x7f800001)), 0x7fc0); /* nan made quiet */
    assert_int_equal(dy_f32_to_bf16(float_of(0xffc12345)), 0xffc1);
    assert_int_equal(dy_f32_to_bf16(float_of(0x00010000)), 0x0001); /* subnormals kept */
    assert_int_equal(dy_f32_to_bf16(-0.0f), 0x8000);
    assert_true(dy_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(bits_of(dy_bf16_to_f32(0x1234)) == 0x12340000u);
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float f = dy_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            assert_int_equal(dy_f32_to_bf16(f), h | 0x40);
        else
            assert_int_equal(dy_f32_to_bf16(f), h);
    }
}

/* ------------------------------------------------------------------ type table */

static void test_type_table(void **state)
{
    (void)state;
    static const struct {
        dy_type t;
        const char *name;
        int64_t elems;
        size_t bytes;
        bool weight;
    } tab[] = {
        {DY_F32, "f32", 1, 4, true},       {DY_F16, "f16", 1, 2, true},
        {DY_BF16, "bf16", 1, 2, true},     {DY_Q8_0, "q8_0", 32, 34, true},
        {DY_Q4_0, "q4_0", 32, 18, true},   {DY_Q4_K, "q4_k", 256, 144, true},
        {DY_Q5_K, "q5_k", 256, 176, true}, {DY_Q6_K, "q6_k", 256, 210, true},
        {DY_Q8_K, "q8_k", 256, 292, false},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        assert_string_equal(dy_type_name(tab[i].t), tab[i].name);
        assert_int_equal(dy_type_block_elems(tab[i].t), tab[i].elems);
        assert_int_equal(dy_type_block_bytes(tab[i].t), tab[i].bytes);
        assert_int_equal(dy_type_is_weight(tab[i].t), tab[i].weight);
        dy_type parsed;
        assert_true(dy_type_parse(tab[i].name, &parsed));
        assert_int_equal(parsed, tab[i].t);
        assert_true(dy_type_row_ok(tab[i].t, 4096));
        assert_int_equal(dy_type_row_bytes(tab[i].t, 4096), 4096 / tab[i].elems * tab[i].bytes);
        assert_false(dy_type_row_ok(tab[i].t, 0));
        assert_false(dy_type_row_ok(tab[i].t, -256));
        if (tab[i].elems > 1)
            assert_false(dy_type_row_ok(tab[i].t, tab[i].elems + 16));
    }
    dy_type parsed;
    assert_true(dy_type_parse("Q4_K", &parsed) && parsed == DY_Q4_K);
    assert_true(dy_type_parse("BF16", &parsed) && parsed == DY_BF16);
    assert_false(dy_type_parse("q4_1", &parsed));
    assert_false(dy_type_parse("", &parsed));
    assert_string_equal(dy_type_name(3), "unknown");
    assert_string_equal(dy_type_name(999), "unknown");
    assert_false(dy_type_is_weight(3));
    assert_false(dy_type_is_weight(DY_Q8_K));
    assert_int_equal(dy_type_block_elems((dy_type)3), 0);
    assert_false(dy_type_row_ok((dy_type)3, 256));
    assert_int_equal(dy_type_row_bytes(DY_Q6_K, 768), 630);
    assert_int_equal(dy_type_row_bytes(DY_Q4_0, 768), 432);
    assert_int_equal(dy_type_row_bytes(DY_Q8_0, 256), 272);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_f16_edges),
        cmocka_unit_test(test_bf16_edges),
        cmocka_unit_test(test_dequant_matches_reference),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_quantize_zero_and_constant),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(bf16_model);
    return rc;
}
