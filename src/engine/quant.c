/* quant.c — owns the weight formats: type names and sizes, f16/bf16 scalars, and ggml's block
 * layouts with their dequantisers (bit-exact with ggml's to_float) and reference quantisers
 * (ggml's quantize_row_*_ref: same search, same rounding, same float operation order).
 * The matmul kernels live in kernels.c / kernels_avx2.c; they share the block structs in
 * kernels_impl.h. */
#include "engine/quant.h"
#include "engine/kernels_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------ types and sizes */

static const struct {
    dy_type type;
    const char *name;
    int64_t elems;
    size_t bytes;
} type_info[] = {
    {DY_F32, "f32", 1, 4},
    {DY_F16, "f16", 1, 2},
    {DY_BF16, "bf16", 1, 2},
    {DY_Q8_0, "q8_0", DY_QK, sizeof(dy_block_q8_0)},
    {DY_Q4_0, "q4_0", DY_QK, sizeof(dy_block_q4_0)},
    {DY_Q4_K, "q4_k", DY_QK_K, sizeof(dy_block_q4_k)},
    {DY_Q5_K, "q5_k", DY_QK_K, sizeof(dy_block_q5_k)},
    {DY_Q6_K, "q6_k", DY_QK_K, sizeof(dy_block_q6_k)},
    {DY_Q8_K, "q8_k", DY_QK_K, sizeof(dy_block_q8_k)},
};
#define N_TYPES (sizeof type_info / sizeof type_info[0])

static int type_index(uint32_t t)
{
    for (size_t i = 0; i < N_TYPES; i++)
        if ((uint32_t)type_info[i].type == t)
            return (int)i;
    return -1;
}

bool dy_type_is_weight(uint32_t type)
{
    return type_index(type) >= 0 && type != DY_Q8_K;
}

const char *dy_type_name(uint32_t type)
{
    int i = type_index(type);
    return i < 0 ? "unknown" : type_info[i].name;
}

bool dy_type_parse(const char *name, dy_type *out)
{
    for (size_t i = 0; name && i < N_TYPES; i++) {
        if (strcasecmp(name, type_info[i].name) == 0) {
            *out = type_info[i].type;
            return true;
        }
    }
    return false;
}

int64_t dy_type_block_elems(dy_type t)
{
    int i = type_index(t);
    return i < 0 ? 0 : type_info[i].elems;
}

size_t dy_type_block_bytes(dy_type t)
{
    int i = type_index(t);
    return i < 0 ? 0 : type_info[i].bytes;
}

bool dy_type_row_ok(dy_type t, int64_t n)
{
    int64_t be = dy_type_block_elems(t);
    return be > 0 && n > 0 && n % be == 0;
}

size_t dy_type_row_bytes(dy_type t, int64_t n)
{
    int64_t be = dy_type_block_elems(t);
    return be > 0 ? (size_t)(n / be) * dy_type_block_bytes(t) : 0;
}

/* ------------------------------------------------------------------ f16 / bf16 scalars */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float dy_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) /* inf / nan: keep the payload */
        return f32_from_bits(sign | 0x7f800000 | (man << 13));
    if (exp == 0) { /* zero / subnormal: man · 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest, ties to even, in integer arithmetic so it does not depend on the FPU
 * mode; same results as F16C's vcvtps2ph with imm 0 (which ggml uses on x86). */
uint16_t dy_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000) /* nan: quiet it, keep the top payload bits (as F16C does) */
        return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000) /* >= 65520 rounds past the largest half (65504) */
        return sign | 0x7c00;
    if (ax >= 0x38800000) { /* normal half: rebias the exponent, round 13 dropped bits */
        uint32_t m = ax - (112u << 23);
        m += 0xfff + ((m >> 13) & 1);
        return (uint16_t)(sign | (m >> 13));
    }
    uint32_t exp = ax >> 23;
    if (exp < 102) /* below half of the smallest subnormal (2^-25) */
        return sign;
    /* subnormal half: value / 2^-24 = mant >> (126 - exp), rounded to even */
    uint32_t mant = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exp;
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++; /* may carry into the smallest normal, which is the right encoding */
    return (uint16_t)(sign | q);
}

float dy_bf16_to_f32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

/* ggml's conversion: round to nearest even, nan made quiet, subnormals kept. */
uint16_t dy_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* ------------------------------------------------------------------ dequantisation */

static void dequant_q8_0(const dy_block_q8_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = dy_f16_to_f32(x[i].d);
        for (int j = 0; j < DY_QK; j++)
            y[i * DY_QK + j] = x[i].qs[j] * d;
    }
}

static void dequant_q4_0(const dy_block_q4_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = dy_f16_to_f32(x[i].d);
        for (int j = 0; j < DY_QK / 2; j++) {
            const int x0 = (x[i].qs[j] & 0x0F) - 8;
            const int x1 = (x[i].qs[j] >> 4) - 8;
            y[i * DY_QK + j] = x0 * d;
            y[i * DY_QK + j + DY_QK / 2] = x1 * d;
        }
    }
}

static void dequant_q4_k(const dy_block_q4_k *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = x[i].qs;
        const float d = dy_f16_to_f32(x[i].d);
        const float min = dy_f16_to_f32(x[i].dmin);
        for (int j = 0; j < 8; j += 2) { /* 64 elements per 32 bytes: low nibbles, then high */
            uint8_t sc, m;
            dy_scale_min_k4(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            dy_scale_min_k4(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
        }
    }
}

static void dequant_q5_k(const dy_block_q5_k *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = dy_f16_to_f32(x[i].d);
        const float min = dy_f16_to_f32(x[i].dmin);
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 8; j += 2) {
            uint8_t sc, m;
            dy_scale_min_k4(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            dy_scale_min_k4(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

static void dequant_q6_k(const dy_block_q6_k *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = dy_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < DY_QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int8_t q1 = (int8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

static void dequant_q8_k(const dy_block_q8_k *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < DY_QK_K; j++)
            y[i * DY_QK_K + j] = x[i].d * x[i].qs[j];
}

void dy_dequant_row(dy_type t, const void *src, float *dst, int64_t n)
{
    const int64_t nb = dy_type_block_elems(t) ? n / dy_type_block_elems(t) : 0;
    switch (t) {
    case DY_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case DY_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = dy_f16_to_f32(dy_rd16((const uint16_t *)src + i));
        break;
    case DY_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = dy_bf16_to_f32(dy_rd16((const uint16_t *)src + i));
        break;
    case DY_Q8_0: dequant_q8_0(src, dst, nb); break;
    case DY_Q4_0: dequant_q4_0(src, dst, nb); break;
    case DY_Q4_K: dequant_q4_k(src, dst, nb); break;
    case DY_Q5_K: dequant_q5_k(src, dst, nb); break;
    case DY_Q6_K: dequant_q6_k(src, dst, nb); break;
    case DY_Q8_K: dequant_q8_k(src, dst, nb); break;
    }
}

/* ------------------------------------------------------------------ reference quantisers */

#define GROUP_MAX_EPS 1e-15f

/* ggml's nearest_int: round to nearest even through the float adder (|f| < 2^22). */
static inline int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

static void quantize_q8_0(const float *x, dy_block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += DY_QK) {
        float amax = 0.0f;
        for (int j = 0; j < DY_QK; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dy_f32_to_f16(d);
        for (int j = 0; j < DY_QK; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void quantize_q4_0(const float *x, dy_block_q4_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += DY_QK) {
        float amax = 0.0f, max = 0.0f; /* max keeps its sign: the scale maps it to -8 */
        for (int j = 0; j < DY_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dy_f32_to_f16(d);
        for (int j = 0; j < DY_QK / 2; j++) {
            const int x0 = imin(15, (int8_t)(x[j] * id + 8.5f));
            const int x1 = imin(15, (int8_t)(x[j + DY_QK / 2] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(x0 | (x1 << 4));
        }
    }
}

/* ggml's make_qx_quants (symmetric, nmax levels each side), used by Q6_K with rmse_type 1 and
 * no importance weights: tries 19 scales around -nmax/max and keeps the best weighted fit. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ggml's make_qkx2_quants: asymmetric levels 0..nmax with a min (returned negated in
 * *the_min); scans nstep+1 candidate scales and keeps the best weighted least-squares fit. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs 8 six-bit scales and mins the way get_scale_min_k4 reads them. */
static void pack_scale_min_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t out[12])
{
    memset(out, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] = ls[j];
            out[j + 4] = lm[j];
        } else {
            out[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            out[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            out[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits 8 sub-blocks of 32 with make_qkx2_quants,
 * quantises their scales/mins to 6 bits against the super-block d/dmin, writes d, dmin,
 * scales, and re-quantises the values (L, 0..nmax) against the rounded scales. */
static void quantize_k_scales(const float *x, int nmax, float rmin, float rdelta, int nstep,
                              uint16_t *d_out, uint16_t *dmin_out, uint8_t scales_out[12],
                              uint8_t L[DY_QK_K])
{
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0; /* the min is subtracted, so scales are positive */
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, rdelta, nstep);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        lm[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_min * mins[j]));
    }
    pack_scale_min_k4(ls, lm, scales_out);
    *d_out = dy_f32_to_f16(max_scale / 63.f);
    *dmin_out = dy_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        dy_scale_min_k4(j, scales_out, &sc, &m);
        const float d = dy_f16_to_f32(*d_out) * sc;
        if (!d)
            continue;
        const float dm = dy_f16_to_f32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ii++) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

static void quantize_q4_k(const float *x, dy_block_q4_k *y, int64_t nb)
{
    uint8_t L[DY_QK_K];
    for (int64_t i = 0; i < nb; i++, x += DY_QK_K) {
        quantize_k_scales(x, 15, -1.f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < DY_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void quantize_q5_k(const float *x, dy_block_q5_k *y, int64_t nb)
{
    uint8_t L[DY_QK_K];
    for (int64_t i = 0; i < nb; i++, x += DY_QK_K) {
        quantize_k_scales(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, DY_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < DY_QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}

static void quantize_q6_k(const float *x, dy_block_q6_k *y, int64_t nb)
{
    int8_t L[DY_QK_K];
    float scales[DY_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += DY_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < DY_QK_K / 16; ib++) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = dy_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < DY_QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < DY_QK_K / 16; j++) {
            float d = dy_f16_to_f32(y[i].d) * y[i].scales[j];
            if (!d)
                continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(imax(-32, imin(31, l)) + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < DY_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

static void quantize_q8_k(const float *x, dy_block_q8_k *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += DY_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < DY_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (!amax) { /* ggml leaves bsums alone here; zero them so the block is defined */
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < DY_QK_K; j++)
            y[i].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < DY_QK_K / 16; j++) {
            int sum = 0;
            for (int ii = 0; ii < 16; ii++)
                sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void dy_quantize_row(dy_type t, const float *src, void *dst, int64_t n)
{
    const int64_t nb = dy_type_block_elems(t) ? n / dy_type_block_elems(t) : 0;
    switch (t) {
    case DY_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case DY_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = dy_f32_to_f16(src[i]);
            memcpy((uint16_t *)dst + i, &h, sizeof h);
        }
        break;
    case DY_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = dy_f32_to_bf16(src[i]);
            memcpy((uint16_t *)dst + i, &h, sizeof h);
        }
        break;
    case DY_Q8_0: quantize_q8_0(src, dst, nb); break;
    case DY_Q4_0: quantize_q4_0(src, dst, nb); break;
    case DY_Q4_K: quantize_q4_k(src, dst, nb); break;
    case DY_Q5_K: quantize_q5_k(src, dst, nb); break;
    case DY_Q6_K: quantize_q6_k(src, dst, nb); break;
    case DY_Q8_K: quantize_q8_k(src, dst, nb); break;
    }
}
