/* kernels.c — owns the matmul entry points: SIMD detection, activation conversion, the dispatch
 * to the AVX2 code (kernels_avx2.c) or the 512-bit code (kernels_zmm.c) and the portable scalar
 * reference kernels.
 *
 * The scalar kernels follow the same plan as the AVX2 ones, in plain C: for each output row,
 * walk the row in chunks, decode a chunk once (to f32, or to integers and a scale), and use it
 * for every activation row; the arithmetic is ggml's integer dot products (Q8_0/Q4_0 against
 * Q8_0, the K-quants against Q8_K with bsums for the mins).
 *
 * All levels give the same bits: integer sums are exact, and the scalar code performs the AVX2
 * code's float operations in the same order (an exact fma where that uses an fma, the same
 * 8-lane split and pairwise reduction for float weights; the 512-bit float kernels keep that
 * split, two rows' 8 lanes to a register). That matters beyond tidiness:
 * activations are re-quantised before every matmul, so a last-bit difference can flip a
 * rounding there and grow through the layers; with equal bits DYAD_SIMD=scalar reproduces the
 * AVX2 logits exactly. */
#include "engine/kernels.h"
#include "engine/kernels_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* clang's __builtin_cpu_supports does not know "f16c", so that bit comes from cpuid. */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

dy_simd dy_simd_detect(void)
{
    const char *env = getenv("DYAD_SIMD");
    if (env && strcasecmp(env, "scalar") == 0)
        return DY_SIMD_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !cpu_has_f16c())
        return DY_SIMD_SCALAR;
    if (env && strcasecmp(env, "avx2") == 0)
        return DY_SIMD_AVX2;
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512vl"))
        return DY_SIMD_AVX2;
    if (env && strcasecmp(env, "avx512vnni") == 0)
        return DY_SIMD_AVX512_VNNI;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        return DY_SIMD_AVX512;
    return DY_SIMD_AVX512_VNNI;
#else
    return DY_SIMD_SCALAR;
#endif
}

const char *dy_simd_name(dy_simd s)
{
    switch (s) {
    case DY_SIMD_AVX2: return "avx2";
    case DY_SIMD_AVX512_VNNI: return "avx512vnni";
    case DY_SIMD_AVX512: return "avx512";
    default: return "scalar";
    }
}

dy_type dy_act_type(dy_type t)
{
    switch (t) {
    case DY_Q8_0:
    case DY_Q4_0:
        return DY_Q8_0;
    case DY_Q4_K:
    case DY_Q5_K:
    case DY_Q6_K:
        return DY_Q8_K;
    default:
        return DY_F32;
    }
}

size_t dy_act_bytes(dy_type t, int64_t cols, int B)
{
    return (size_t)B * dy_type_row_bytes(dy_act_type(t), cols);
}

void dy_act_convert(dy_simd simd, dy_type t, const float *X, int64_t ldx, int64_t cols, int b0,
                    int b1, void *act)
{
    const dy_type at = dy_act_type(t);
    const size_t rb = dy_type_row_bytes(at, cols);
    for (int b = b0; b < b1; b++) {
        const float *x = X + (int64_t)b * ldx;
        void *dst = (uint8_t *)act + (size_t)b * rb;
        if (simd == DY_SIMD_AVX512 && at == DY_Q8_0)
            dy_zmm_act_q8_0(x, dst, cols);
        else if (simd == DY_SIMD_AVX512 && at == DY_Q8_K)
            dy_zmm_act_q8_k(x, dst, cols);
        else if (dy_simd_has_avx2(simd) && at == DY_Q8_0)
            dy_avx2_act_q8_0(x, dst, cols);
        else if (dy_simd_has_avx2(simd) && at == DY_Q8_K)
            dy_avx2_act_q8_k(x, dst, cols);
        else
            dy_quantize_row(at, x, dst, cols);
    }
}

/* ------------------------------------------------------------------ exact fma */

#include "engine/fmaf.h"

/* ------------------------------------------------------------------ K-quant unpacking */

static void kq_unpack_q4_k(const dy_block_q4_k *x, dy_kq_unpacked *u)
{
    for (int j = 0; j < 4; j++) { /* 32 bytes hold 64 elements: low nibbles, then high */
        for (int l = 0; l < 32; l++) {
            u->q[64 * j + l] = x->qs[32 * j + l] & 0xF;
            u->q[64 * j + 32 + l] = x->qs[32 * j + l] >> 4;
        }
    }
    for (int s = 0; s < 8; s++) {
        uint8_t sc, m;
        dy_scale_min_k4(s, x->scales, &sc, &m);
        u->sc[2 * s] = u->sc[2 * s + 1] = sc;
        u->mn[2 * s] = u->mn[2 * s + 1] = m;
    }
    u->d = dy_f16_to_f32(x->d);
    u->dmin = dy_f16_to_f32(x->dmin);
}

static void kq_unpack_q5_k(const dy_block_q5_k *x, dy_kq_unpacked *u)
{
    for (int j = 0; j < 4; j++) {
        for (int l = 0; l < 32; l++) {
            const int h = x->qh[l] >> (2 * j);
            u->q[64 * j + l] = (uint8_t)((x->qs[32 * j + l] & 0xF) | ((h & 1) << 4));
            u->q[64 * j + 32 + l] = (uint8_t)((x->qs[32 * j + l] >> 4) | ((h & 2) << 3));
        }
    }
    for (int s = 0; s < 8; s++) {
        uint8_t sc, m;
        dy_scale_min_k4(s, x->scales, &sc, &m);
        u->sc[2 * s] = u->sc[2 * s + 1] = sc;
        u->mn[2 * s] = u->mn[2 * s + 1] = m;
    }
    u->d = dy_f16_to_f32(x->d);
    u->dmin = dy_f16_to_f32(x->dmin);
}

/* Q6_K values stay unsigned (q+32, 0..63): the -32 becomes a "min" of 32·scale per group,
 * which the Q8_K bsums cancel exactly, and dmin = d. */
static void kq_unpack_q6_k(const dy_block_q6_k *x, dy_kq_unpacked *u)
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        uint8_t *q = u->q + 128 * h;
        for (int l = 0; l < 32; l++) {
            q[l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
            q[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            q[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            q[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
    for (int g = 0; g < 16; g++) {
        u->sc[g] = x->scales[g];
        u->mn[g] = (int16_t)(32 * x->scales[g]);
    }
    u->d = u->dmin = dy_f16_to_f32(x->d);
}

void dy_kq_unpack(dy_type t, const void *block, dy_kq_unpacked *u)
{
    switch (t) {
    case DY_Q4_K: kq_unpack_q4_k(block, u); break;
    case DY_Q5_K: kq_unpack_q5_k(block, u); break;
    case DY_Q6_K: kq_unpack_q6_k(block, u); break;
    default: assert(!"not a K-quant"); break;
    }
}

/* ------------------------------------------------------------------ scalar kernels */

enum { SCALAR_BCHUNK = 64, FLOAT_CHUNK = 256 };

/* F32 / F16 / BF16 weights against f32 activations, summed like the AVX2 tile: 8 lanes, lane j
 * taking the columns ≡ j (mod 8) by fma, added pairwise ((0+1)+(2+3))+((4+5)+(6+7)), then the
 * columns past the last multiple of 8 one by one. */
static void scalar_float(const dy_mat *W, const float *act, int B, float *Y, int64_t ldy,
                         int64_t r0, int64_t r1)
{
    const int64_t n = W->cols, n8 = n / 8 * 8;
    const size_t esize = dy_type_block_bytes(W->type);
    float w[FLOAT_CHUNK], lanes[SCALAR_BCHUNK][8];
    for (int b0 = 0; b0 < B; b0 += SCALAR_BCHUNK) {
        const int nb = B - b0 < SCALAR_BCHUNK ? B - b0 : SCALAR_BCHUNK;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
            memset(lanes, 0, sizeof lanes);
            for (int64_t k = 0; k < n8; k += FLOAT_CHUNK) { /* FLOAT_CHUNK is a multiple of 8 */
                const int kn = n8 - k < FLOAT_CHUNK ? (int)(n8 - k) : FLOAT_CHUNK;
                dy_dequant_row(W->type, row + (size_t)k * esize, w, kn);
                for (int b = 0; b < nb; b++) {
                    const float *x = act + (int64_t)(b0 + b) * n + k;
                    float l[8];
                    memcpy(l, lanes[b], sizeof l);
                    for (int i = 0; i < kn; i += 8)
                        for (int j = 0; j < 8; j++)
                            l[j] = dy_fmaf(w[i + j], x[i + j], l[j]);
                    memcpy(lanes[b], l, sizeof l);
                }
            }
            if (n8 < n)
                dy_dequant_row(W->type, row + (size_t)n8 * esize, w, n - n8);
            for (int b = 0; b < nb; b++) {
                const float *l = lanes[b], *x = act + (int64_t)(b0 + b) * n;
                float y = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
                for (int64_t k = n8; k < n; k++)
                    y = dy_fmaf(w[k - n8], x[k], y);
                Y[(int64_t)(b0 + b) * ldy + r] = y;
            }
        }
    }
}

/* One Q8_0 or Q4_0 block as signed integers and its scale. */
static float unpack_q8_block(dy_type t, const uint8_t *blk, int8_t w[DY_QK])
{
    if (t == DY_Q8_0) {
        const dy_block_q8_0 *x = (const dy_block_q8_0 *)blk;
        memcpy(w, x->qs, DY_QK);
        return dy_f16_to_f32(x->d);
    }
    const dy_block_q4_0 *x = (const dy_block_q4_0 *)blk;
    for (int j = 0; j < DY_QK / 2; j++) {
        w[j] = (int8_t)((x->qs[j] & 0xF) - 8);
        w[j + DY_QK / 2] = (int8_t)((x->qs[j] >> 4) - 8);
    }
    return dy_f16_to_f32(x->d);
}

/* Q8_0 / Q4_0 weights against Q8_0 activations: integer block dots times dw·dx. */
static void scalar_q8(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy,
                      int64_t r0, int64_t r1)
{
    const int64_t nblk = W->cols / DY_QK;
    const size_t wbb = dy_type_block_bytes(W->type);
    const size_t arb = dy_type_row_bytes(DY_Q8_0, W->cols);
    int8_t w[DY_QK];
    float acc[SCALAR_BCHUNK];
    for (int b0 = 0; b0 < B; b0 += SCALAR_BCHUNK) {
        const int nb = B - b0 < SCALAR_BCHUNK ? B - b0 : SCALAR_BCHUNK;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
            memset(acc, 0, sizeof acc);
            for (int64_t i = 0; i < nblk; i++) {
                const float dw = unpack_q8_block(W->type, row + (size_t)i * wbb, w);
                for (int b = 0; b < nb; b++) {
                    const dy_block_q8_0 *x =
                        (const dy_block_q8_0 *)((const uint8_t *)act + (size_t)(b0 + b) * arb) + i;
                    int sumi = 0;
                    for (int j = 0; j < DY_QK; j++)
                        sumi += w[j] * x->qs[j];
                    acc[b] = dy_fmaf((float)sumi, dw * dy_f16_to_f32(x->d), acc[b]);
                }
            }
            for (int b = 0; b < nb; b++)
                Y[(int64_t)(b0 + b) * ldy + r] = acc[b];
        }
    }
}

/* K-quant weights against Q8_K activations (the formula is in kernels_impl.h). */
static void scalar_kq(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy,
                      int64_t r0, int64_t r1)
{
    const int64_t nsb = W->cols / DY_QK_K;
    const size_t wbb = dy_type_block_bytes(W->type);
    const size_t arb = dy_type_row_bytes(DY_Q8_K, W->cols);
    dy_kq_unpacked u;
    float acc[SCALAR_BCHUNK];
    for (int b0 = 0; b0 < B; b0 += SCALAR_BCHUNK) {
        const int nb = B - b0 < SCALAR_BCHUNK ? B - b0 : SCALAR_BCHUNK;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
            memset(acc, 0, sizeof acc);
            for (int64_t i = 0; i < nsb; i++) {
                dy_kq_unpack(W->type, row + (size_t)i * wbb, &u);
                for (int b = 0; b < nb; b++) {
                    const dy_block_q8_k *x =
                        (const dy_block_q8_k *)((const uint8_t *)act + (size_t)(b0 + b) * arb) + i;
                    int sumi = 0, summ = 0;
                    for (int g = 0; g < 16; g++) {
                        int s = 0;
                        for (int l = 0; l < 16; l++)
                            s += u.q[16 * g + l] * x->qs[16 * g + l];
                        sumi += u.sc[g] * s;
                        summ += u.mn[g] * x->bsums[g];
                    }
                    if (W->type == DY_Q6_K) { /* dmin = d: one scaling, as in AVX2 */
                        acc[b] = dy_fmaf((float)(sumi - summ), u.d * x->d, acc[b]);
                    } else {
                        acc[b] = dy_fmaf((float)sumi, u.d * x->d, acc[b]);
                        acc[b] = dy_fmaf(-(float)summ, u.dmin * x->d, acc[b]);
                    }
                }
            }
            for (int b = 0; b < nb; b++)
                Y[(int64_t)(b0 + b) * ldy + r] = acc[b];
        }
    }
}

void dy_matmul_rows(dy_simd simd, const dy_mat *W, const void *act, int B, float *Y,
                    int64_t ldy, int64_t r0, int64_t r1)
{
    dy_matmul_rows_pf(simd, W, act, B, Y, ldy, r0, r1, r1);
}

void dy_matmul_rows_pf(dy_simd simd, const dy_mat *W, const void *act, int B, float *Y,
                       int64_t ldy, int64_t r0, int64_t r1, int64_t pf_end)
{
    if (B <= 0 || r1 <= r0)
        return;
    if (pf_end > W->rows)
        pf_end = W->rows;
    if (simd == DY_SIMD_AVX512) {
        dy_zmm_matmul(W, act, B, Y, ldy, r0, r1, pf_end);
        return;
    }
    if (dy_simd_has_avx2(simd)) {
        dy_avx2_matmul(W, act, B, Y, ldy, r0, r1, pf_end, simd);
        return;
    }
    switch (dy_act_type(W->type)) {
    case DY_Q8_0: scalar_q8(W, act, B, Y, ldy, r0, r1); break;
    case DY_Q8_K: scalar_kq(W, act, B, Y, ldy, r0, r1); break;
    default: scalar_float(W, act, B, Y, ldy, r0, r1); break;
    }
}
