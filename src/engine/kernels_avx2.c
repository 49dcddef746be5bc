/* kernels_avx2.c — the AVX2+FMA+F16C kernels (built with -mavx2 -mfma -mf16c; kernels.c calls
 * in here only when dy_simd_detect said the CPU has them).
 *
 * Plan, per weight type family:
 *  - F32/F16/BF16: register tiles of 4 weight rows × up to 3 activation rows (12 FMA
 *    accumulators); F16/BF16 weights are widened to f32 as they are loaded, once per tile.
 *  - Q8_0/Q4_0 against Q8_0 and K-quants against Q8_K: tiles of 8 weight rows. Integer products
 *    use ggml's AVX2 recipe (maddubs on an unsigned×signed pair, madd to 32 bits); the 8 rows'
 *    partial sums are reduced by one hadd tree whose lane r is row r, so the float scaling is
 *    one fma per (activation row, block) for all 8 rows at once. Two ways through a tile:
 *     direct: for a few activation rows (decode), each is multiplied straight from the weight
 *       bytes, decoding in registers (the tile stays in L1 for the next activation row);
 *     shared: for more, each 256-column chunk of the 8 rows is decoded once into a small
 *       scratch (values as bytes, 16-bit scale vectors, f32 block scales) and every activation
 *       row runs over it, so decoding is paid once per call, not once per activation row.
 *    With AVX-512 VNNI (DY_SIMD_AVX512_VNNI; 256-bit registers only) the int8 products use
 *    vpdpbusd / vpdpwssd, and the Q8_0/Q4_0 shared path becomes "packed": each block of a tile
 *    is transposed once so that lane r of a register holds row r, and no reduction tree is
 *    needed. Those variants live in kernels_avx512.c, the only file built for that ISA.
 * Activation rows are walked in chunks of BCH so that chunk stays in L2 while every weight row
 * tile streams past it once; for decode (B small) every weight byte is read from memory once,
 * and the next tile is prefetched in software while the current one is computed (see
 * "prefetching": without it a thread streamed a quarter of the memory bandwidth).
 * The shapes (tile sizes, direct/shared crossovers, loop orders) were chosen by measurement on
 * Zen 4; see the comments where a choice is not obvious. */
#include "engine/kernels_simd.h"

#include <math.h>
#include <stdlib.h>

enum { BCH_F = 48 }; /* activation rows per chunk (float paths; a multiple of the tile's 3) */

/* ------------------------------------------------------------------ reductions */

/* Lane r of the result is the sum of the 8 lanes of v[r] (r = 0..3). */
ALWAYS_INLINE __m128 hsum4_ps(__m256 a, __m256 b, __m256 c, __m256 d)
{
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* ------------------------------------------------------------------ F32 / F16 / BF16 */

ALWAYS_INLINE __m256 load8_w(dy_type t, const void *row, int64_t k)
{
    if (t == DY_F32)
        return _mm256_loadu_ps((const float *)row + k);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k));
    if (t == DY_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

ALWAYS_INLINE float load1_w(dy_type t, const void *row, int64_t k)
{
    if (t == DY_F32)
        return ((const float *)row)[k];
    const uint16_t h = dy_rd16((const uint16_t *)row + k);
    return t == DY_F16 ? _cvtsh_ss(h) : dy_bf16_to_f32(h);
}

/* out[b][r] = dot(w[r], x[b]) over n columns, 4 weight rows × NB (≤ 3) activation rows. */
ALWAYS_INLINE void float_tile(dy_type t, int NB, const void *const w[4], const float *const x[3],
                              int64_t n, float out[3][4], pf_range pf)
{
    const size_t es = t == DY_F32 ? 4 : 2;
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
        for (int b = 0; b < NB; b++)
            acc[r][b] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        if (pf.base != pf.end)
            prefetch_slice(pf, 4 * es * (size_t)k, 4 * 8 * es);
        __m256 xv[3];
#pragma GCC unroll 3
        for (int b = 0; b < NB; b++)
            xv[b] = _mm256_loadu_ps(x[b] + k);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m256 wv = load8_w(t, w[r], k);
#pragma GCC unroll 3
            for (int b = 0; b < NB; b++)
                acc[r][b] = _mm256_fmadd_ps(wv, xv[b], acc[r][b]);
        }
    }
#pragma GCC unroll 3
    for (int b = 0; b < NB; b++)
        _mm_storeu_ps(out[b], hsum4_ps(acc[0][b], acc[1][b], acc[2][b], acc[3][b]));
    for (; k < n; k++) /* columns past the last multiple of 8 (fmaf: as the scalar code) */
        for (int r = 0; r < 4; r++)
            for (int b = 0; b < NB; b++)
                out[b][r] = fmaf(load1_w(t, w[r], k), x[b][k], out[b][r]);
}

ALWAYS_INLINE void float_rows(dy_type t, const dy_mat *W, const float *act, int B, float *Y,
                              int64_t ldy, int64_t r0, int64_t r1, int64_t pf_end)
{
    const int64_t n = W->cols;
    for (int b0 = 0; b0 < B; b0 += BCH_F) {
        const int bend = imin(B, b0 + BCH_F);
        for (int64_t r = r0; r < r1; r += 4) {
            const int nr = (int)i64min(4, r1 - r);
            const void *w[4];
            for (int i = 0; i < 4; i++) /* a short last tile repeats its last row */
                w[i] = (const uint8_t *)W->data + (size_t)(r + imin(i, nr - 1)) * W->row_bytes;
            const pf_range pf = next_tile(W, r, pf_end, 4);
            for (int b = b0; b < bend; b += 3) {
                const int nb = imin(3, bend - b);
                const pf_range p = b == b0 ? pf : no_prefetch();
                const float *x[3];
                for (int i = 0; i < 3; i++)
                    x[i] = act + (int64_t)(b + imin(i, nb - 1)) * n;
                float out[3][4];
                if (nb == 3)
                    float_tile(t, 3, w, x, n, out, p);
                else if (nb == 2)
                    float_tile(t, 2, w, x, n, out, p);
                else
                    float_tile(t, 1, w, x, n, out, p);
                for (int bi = 0; bi < nb; bi++)
                    for (int ri = 0; ri < nr; ri++)
                        Y[(int64_t)(b + bi) * ldy + r + ri] = out[bi][ri];
            }
        }
    }
}

static void f32_rows(const dy_mat *W, const float *act, int B, float *Y, int64_t ldy,
                     int64_t r0, int64_t r1, int64_t pf_end)
{
    float_rows(DY_F32, W, act, B, Y, ldy, r0, r1, pf_end);
}

static void f16_rows(const dy_mat *W, const float *act, int B, float *Y, int64_t ldy,
                     int64_t r0, int64_t r1, int64_t pf_end)
{
    float_rows(DY_F16, W, act, B, Y, ldy, r0, r1, pf_end);
}

static void bf16_rows(const dy_mat *W, const float *act, int B, float *Y, int64_t ldy,
                      int64_t r0, int64_t r1, int64_t pf_end)
{
    float_rows(DY_BF16, W, act, B, Y, ldy, r0, r1, pf_end);
}

/* ------------------------------------------------------------------ Q8_0 / Q4_0 × Q8_0 */

/* Up to this many activation rows, each one is multiplied straight from the weights (decoding
 * in registers, the tile staying in L1 between them); above it, the chunk decoded once into
 * scratch is shared by all of them. The crossovers were measured on Zen 4 at 2048×2048
 * (docs/engine.md, "Kernel choices"). */
static int direct_max(dy_type t, bool vnni)
{
    if (t == DY_Q8_0 && vnni) /* the direct VNNI path is cheaper; the packed one pays its packing */
        return 4;
    switch (t) {
    case DY_Q4_0: return 3;
    case DY_Q8_0:
    case DY_Q6_K: return 2;
    default: return 1; /* Q4_K, Q5_K: their shared path is already cheaper at B = 2 */
    }
}

/* 8 int32 partial sums of Σ w·x over one block; |x| and sign(w, x) make the unsigned×signed
 * pair maddubs needs (|x|, |w| ≤ 127, so the int16 pair sums cannot saturate). */
ALWAYS_INLINE __m256i dot_q8(__m256i ax, __m256i x, __m256i w)
{
    const __m256i p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* 8·Σx of a block in every int32 lane (removes the +8 of q4_0_nibbles). */
ALWAYS_INLINE __m256i q4_0_offset(__m256i x)
{
    __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), x),
                                  _mm256_set1_epi16(1));
    s = _mm256_hadd_epi32(s, s);
    s = _mm256_hadd_epi32(s, s);
    return _mm256_add_epi32(s, _mm256_permute2x128_si256(s, s, 0x01));
}

/* Block i of Q4_0 rows a and b against activation block x: [row a: 4 int32 partials | row b: 4].
 * Both rows' 16 nibble bytes share one register; low nibbles (elements 0..15) meet xlo, high
 * ones xhi (x's halves broadcast to both lanes). 4-bit × 8-bit pair sums fit int16 twice over,
 * so the two maddubs results are added before widening. */
ALWAYS_INLINE __m256i q4_0_pair(const uint8_t *qa, const uint8_t *qb, __m256i xlo, __m256i xhi)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qb),
                                       _mm_loadu_si128((const __m128i *)qa));
    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* Lane order of q4_0_direct's sums: rows 0, 2, 4, 6, 1, 3, 5, 7. */
static const int q4_pair_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

/* Lane r: dot(Q4_0 row r, one Q8_0 activation row), in q4_pair_order until the final permute. */
static __m256 q4_0_direct(const uint8_t *const rows[8], int64_t nblk, size_t bb,
                          const dy_block_q8_0 *x, pf_range pf)
{
    const uint8_t *prow[8];
    for (int r = 0; r < 8; r++)
        prow[r] = rows[q4_pair_order[r]];
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; i++) {
        const size_t off = (size_t)i * bb;
        prefetch_slice(pf, 8 * off, 8 * bb);
        const __m256i xv = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m256i xlo = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(xv));
        const __m256i xhi = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(xv, 1));
        __m256i q[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            q[k] = q4_0_pair(rows[2 * k] + off + 2, rows[2 * k + 1] + off + 2, xlo, xhi);
        const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]), _mm256_hadd_epi32(q[2], q[3]));
        const __m256 dx = _mm256_set1_ps(_cvtsh_ss(x[i].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s, q4_0_offset(xv))),
                              _mm256_mul_ps(f16x8(prow, off), dx), acc);
    }
    return _mm256_permutevar8x32_ps(acc, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Lane r: dot(Q8_0 row r, one Q8_0 activation row), straight from the weights. */
static __m256 q8_0_direct(const uint8_t *const rows[8], int64_t nblk, size_t bb,
                          const dy_block_q8_0 *x, pf_range pf)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; i++) {
        const size_t off = (size_t)i * bb;
        prefetch_slice(pf, 8 * off, 8 * bb);
        const __m256i xv = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m256i ax = _mm256_sign_epi8(xv, xv);
        __m256i p[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            p[r] = dot_q8(ax, xv, _mm256_loadu_si256((const __m256i *)(rows[r] + off + 2)));
        const __m256 dx = _mm256_set1_ps(_cvtsh_ss(x[i].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(p)),
                              _mm256_mul_ps(f16x8(rows, off), dx), acc);
    }
    return acc;
}

typedef struct {
    __m256 dw[KC / DY_QK];              /* per block of the chunk: the 8 rows' scales */
    __m256i wsum[KC / DY_QK];           /* VNNI: per block, 128 × Σ of each row's values */
    int8_t w[8][KC] __attribute__((aligned(32))); /* Q4_0 only: the values as int8 */
} q8_scratch;

/* acc[b] (lane r) += Σ over nblk blocks of dot(weight row r, activation row b). wp[r] points at
 * the first block's 32 values of row r, successive blocks wstride bytes apart. */
static void q8_chunk(const int8_t *const wp[8], size_t wstride, const __m256 *dw, int nblk,
                     const uint8_t *act, size_t arb, int nb, __m256 *acc)
{
    for (int b = 0; b < nb; b++) {
        const dy_block_q8_0 *x = (const dy_block_q8_0 *)(act + (size_t)b * arb);
        __m256 a = acc[b];
        for (int i = 0; i < nblk; i++) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)x[i].qs);
            const __m256i ax = _mm256_sign_epi8(xv, xv);
            __m256i p[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                p[r] = dot_q8(ax, xv, _mm256_loadu_si256((const __m256i *)(wp[r] + i * wstride)));
            const __m256 dx = _mm256_set1_ps(_cvtsh_ss(x[i].d));
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(p)), _mm256_mul_ps(dw[i], dx), a);
        }
        acc[b] = a;
    }
}

/* One 8-row tile against nb activation rows through the scratch: per 256 columns, decode the
 * rows once (scales; Q4_0 values to int8), then run every activation row over them. */
static void q8_tile_shared(dy_type t, const uint8_t *const rows[8], int64_t nblk, size_t bb,
                           const uint8_t *act, size_t arb, int nb, __m256 *acc, pf_range pf,
                           bool vnni)
{
    q8_scratch s;
    for (int b = 0; b < nb; b++)
        acc[b] = _mm256_setzero_ps();
    for (int64_t k = 0; k < nblk; k += KC / DY_QK) {
        const int nk = (int)i64min(KC / DY_QK, nblk - k);
        const int8_t *wp[8];
        prefetch_slice(pf, 8 * (size_t)k * bb, 8 * (size_t)nk * bb);
        for (int i = 0; i < nk; i++)
            s.dw[i] = f16x8(rows, (size_t)(k + i) * bb);
        for (int r = 0; r < 8; r++) {
            const uint8_t *blk = rows[r] + k * bb;
            if (t == DY_Q4_0) {
                for (int i = 0; i < nk; i++) {
                    const __m256i q = q4_0_nibbles(blk + i * bb + 2);
                    _mm256_store_si256((__m256i *)(s.w[r] + DY_QK * i),
                                       _mm256_sub_epi8(q, _mm256_set1_epi8(8)));
                }
                wp[r] = s.w[r];
            } else {
                wp[r] = (const int8_t *)blk + 2;
            }
        }
        const size_t wstride = t == DY_Q4_0 ? DY_QK : bb;
        if (vnni) {
            for (int i = 0; i < nk; i++)
                s.wsum[i] = dy_avx512_q8_wsum(wp, (size_t)i * wstride);
            dy_avx512_q8_chunk(wp, wstride, s.dw, s.wsum, nk, act + k * sizeof(dy_block_q8_0),
                               arb, nb, acc);
        } else {
            q8_chunk(wp, wstride, s.dw, nk, act + k * sizeof(dy_block_q8_0), arb, nb, acc);
        }
    }
}

static void q8_rows(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy, int64_t r0,
                    int64_t r1, int64_t pf_end, bool vnni)
{
    const int64_t nblk = W->cols / DY_QK;
    const size_t bb = dy_type_block_bytes(W->type);
    const size_t arb = dy_type_row_bytes(DY_Q8_0, W->cols);
    if (vnni && B > direct_max(W->type, true)) {
        dy_avx512_q8_rows_packed(W->type, W, act, B, Y, ldy, r0, r1, pf_end);
        return;
    }
    __m256 acc[BCH];
    for (int b0 = 0; b0 < B; b0 += BCH) {
        const int nb = imin(BCH, B - b0);
        const uint8_t *abase = (const uint8_t *)act + (size_t)b0 * arb;
        for (int64_t r = r0; r < r1; r += 8) {
            const uint8_t *rows[8];
            const int nr = tile_rows(W, r, r1, rows);
            const pf_range pf = next_tile(W, r, pf_end, 8);
            if (nb > direct_max(W->type, vnni)) {
                q8_tile_shared(W->type, rows, nblk, bb, abase, arb, nb, acc, pf, vnni);
            } else {
                for (int b = 0; b < nb; b++) {
                    const dy_block_q8_0 *x = (const dy_block_q8_0 *)(abase + (size_t)b * arb);
                    const pf_range p = b == 0 ? pf : no_prefetch();
                    acc[b] = W->type == DY_Q4_0 ? q4_0_direct(rows, nblk, bb, x, p)
                             : vnni             ? dy_avx512_q8_0_direct(rows, nblk, bb, x, p)
                                                : q8_0_direct(rows, nblk, bb, x, p);
                }
            }
            store_tile(acc, b0, nb, Y, ldy, r, nr);
        }
    }
}

/* ------------------------------------------------------------------ K-quants × Q8_K */

/* int16 lane j of each half of sc, in all 16 lanes. */
ALWAYS_INLINE __m256i bcast16(__m256i sc, int j)
{
    return _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j))));
}

/* Q6_K: the scale vector of 32-column chunk j (groups 2j and 2j+1, 8 lanes each), from the int32
 * lanes of lo (groups 0-3 | 8-11) and hi (groups 4-7 | 12-15) made by unpacking the scales
 * with themselves. */
ALWAYS_INLINE __m256i q6_scale(__m256i lo, __m256i hi, int j)
{
    const int a = (j & 4) + 2 * (j & 1);
    const __m256i idx = _mm256_setr_epi32(a, a, a, a, a + 1, a + 1, a + 1, a + 1);
    return _mm256_permutevar8x32_epi32((j & 2) ? hi : lo, idx);
}

/* The fifth bit (qh bit c) of chunk c's Q5_K values, as 16 or 0 per byte. */
ALWAYS_INLINE __m256i q5_bit(__m256i qh, int c)
{
    const __m256i t = c < 4 ? _mm256_slli_epi16(qh, 4 - c) : _mm256_srli_epi16(qh, c - 4);
    return _mm256_and_si256(t, _mm256_set1_epi8(0x10));
}

/* Q6_K's four 32-value chunks of half h, as q+32 (0..63). */
ALWAYS_INLINE void q6_values(const dy_block_q6_k *w, int h, __m256i q[4])
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h));
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h + 32));
    const __m256i hb = _mm256_loadu_si256((const __m256i *)(w->qh + 32 * h));
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
}

/* Lane r: Σ_j scale_j·Σ q·x for Q4_K rows against one Q8_K block; *msum lane r: the row's
 * mins · bsums. Column-chunk outer, row inner: x is loaded once per chunk, only the 8 row sums
 * stay live, and the scales come from a small table by vpbroadcastd (faster than kq_row's
 * row-at-a-time order for Q4_K; slower for Q5_K, whose fifth bits add registers: docs/engine.md,
 * "Kernel choices"). */
static __m256i q4k_direct_sb(const uint8_t *const rows[8], size_t off, const dy_block_q8_k *x,
                             __m128i bsp, __m256i *msum)
{
    Q4K_DIRECT_SB_BODY(madd_acc)
}

/* One Q5_K or Q6_K row's super-block against one Q8_K block, decoded in registers: returns 8
 * int32 lanes summing to Σ_g sc_g·Σ q·x; for Q5_K *m gets 4 lanes summing to Σ mins·bsums, Q6_K
 * folds its offset (32·sc·bsums) into the result instead since its dmin is d. */
ALWAYS_INLINE __m256i kq_row(dy_type t, const uint8_t *blk, const dy_block_q8_k *x, __m128i bsp,
                             __m256i bs, __m128i *m)
{
    __m256i s = _mm256_setzero_si256();
    if (t == DY_Q6_K) {
        const dy_block_q6_k *w = (const dy_block_q6_k *)blk;
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w->scales));
        const __m256i lo = _mm256_unpacklo_epi16(sc, sc), hi = _mm256_unpackhi_epi16(sc, sc);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6_values(w, h, q);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(x->qs + 128 * h + 32 * k));
                s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xv),
                                                          q6_scale(lo, hi, 4 * h + k)));
            }
        }
        *m = _mm_setzero_si128();
        return _mm256_sub_epi32(s, _mm256_madd_epi16(_mm256_slli_epi16(sc, 5), bs));
    }
    /* Q5_K: 32 bytes of low bits hold chunks 2j (low nibbles) and 2j+1 (high nibbles) */
    const dy_block_q5_k *w = (const dy_block_q5_k *)blk;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m128i mins;
    const __m256i sc = k4_scales(w->scales, &mins);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)w->qh);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * j));
        const __m256i ql = _mm256_or_si256(_mm256_and_si256(v, m4), q5_bit(qh, 2 * j));
        const __m256i qv = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                           q5_bit(qh, 2 * j + 1));
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(x->qs + 64 * j));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(x->qs + 64 * j + 32));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(ql, x0), bcast16(sc, 2 * j)));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(qv, x1), bcast16(sc, 2 * j + 1)));
    }
    *m = _mm_madd_epi16(mins, bsp);
    return s;
}

/* Lane r: dot(weight row r, one Q8_K activation row), decoding the weights in registers. */
ALWAYS_INLINE __m256 kq_direct(dy_type t, const uint8_t *const rows[8], int64_t nsb, size_t bb,
                               const dy_block_q8_k *x, pf_range pf, dy_simd simd)
{
    const size_t d_off = t == DY_Q6_K ? offsetof(dy_block_q6_k, d) : 0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++, x++) {
        const size_t off = (size_t)i * bb;
        prefetch_slice(pf, 8 * off, 8 * bb);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
        const __m128i bsp = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        __m256i sum, msum;
        if (t == DY_Q4_K) {
            sum = simd == DY_SIMD_AVX512       ? dy_zmm_q4k_direct_sb(rows, off, x, bsp, &msum)
                  : simd >= DY_SIMD_AVX512_VNNI ? dy_avx512_q4k_direct_sb(rows, off, x, bsp, &msum)
                                                : q4k_direct_sb(rows, off, x, bsp, &msum);
        } else { /* rows in pairs, reduced as they finish (hsum8_epi32 in steps) */
            __m256i h[4];
            __m128i hm[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m128i ma, mb;
                const __m256i pa = kq_row(t, rows[2 * k] + off, x, bsp, bs, &ma);
                const __m256i pb = kq_row(t, rows[2 * k + 1] + off, x, bsp, bs, &mb);
                h[k] = _mm256_hadd_epi32(pa, pb);
                hm[k] = _mm_hadd_epi32(ma, mb);
            }
            const __m256i h01 = _mm256_hadd_epi32(h[0], h[1]), h23 = _mm256_hadd_epi32(h[2], h[3]);
            sum = _mm256_add_epi32(_mm256_permute2x128_si256(h01, h23, 0x20),
                                   _mm256_permute2x128_si256(h01, h23, 0x31));
            msum = _mm256_set_m128i(_mm_hadd_epi32(hm[2], hm[3]), _mm_hadd_epi32(hm[0], hm[1]));
        }
        const __m256 dx = _mm256_set1_ps(x->d);
        const __m256 d = _mm256_mul_ps(f16x8(rows, off + d_off), dx);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), d, acc);
        if (t != DY_Q6_K) {
            const __m256 dmin = _mm256_mul_ps(f16x8(rows, off + 2), dx);
            acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), dmin, acc);
        }
    }
    return acc;
}

/* Decodes row r of the tile into the scratch (values, scale vectors, mins). */
ALWAYS_INLINE void kq_unpack_row(dy_type t, const uint8_t *blk, kq_scratch *s, int r)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (t == DY_Q6_K) {
        const dy_block_q6_k *w = (const dy_block_q6_k *)blk;
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6_values(w, h, q);
            for (int k = 0; k < 4; k++)
                _mm256_store_si256((__m256i *)(s->q[r] + 128 * h + 32 * k), q[k]);
        }
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w->scales));
        const __m256i lo = _mm256_unpacklo_epi16(sc, sc), hi = _mm256_unpackhi_epi16(sc, sc);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            s->sc[r][j] = q6_scale(lo, hi, j);
        s->mn[r] = _mm256_slli_epi16(sc, 5);
        return;
    }
    const dy_block_q4_k *w4 = (const dy_block_q4_k *)blk;
    const dy_block_q5_k *w5 = (const dy_block_q5_k *)blk;
    __m128i mins;
    const __m256i sc = k4_scales(t == DY_Q4_K ? w4->scales : w5->scales, &mins);
    const uint8_t *qs = t == DY_Q4_K ? w4->qs : w5->qs;
    const __m256i qh = t == DY_Q5_K ? _mm256_loadu_si256((const __m256i *)w5->qh)
                                    : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
        __m256i ql = _mm256_and_si256(v, m4), qv = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (t == DY_Q5_K) {
            ql = _mm256_or_si256(ql, q5_bit(qh, 2 * j));
            qv = _mm256_or_si256(qv, q5_bit(qh, 2 * j + 1));
        }
        _mm256_store_si256((__m256i *)(s->q[r] + 64 * j), ql);
        _mm256_store_si256((__m256i *)(s->q[r] + 64 * j + 32), qv);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        s->sc[r][j] = bcast16(sc, j);
    /* groups 2j and 2j+1 share sub-block j's min */
    s->mn[r] = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
}

void dy_avx2_kq_unpack8(dy_type t, const uint8_t *const rows[8], size_t off, kq_scratch *s)
{
    switch (t) { /* one inlined copy per type */
    case DY_Q4_K: for (int r = 0; r < 8; r++) kq_unpack_row(DY_Q4_K, rows[r] + off, s, r); break;
    case DY_Q5_K: for (int r = 0; r < 8; r++) kq_unpack_row(DY_Q5_K, rows[r] + off, s, r); break;
    default: for (int r = 0; r < 8; r++) kq_unpack_row(DY_Q6_K, rows[r] + off, s, r); break;
    }
}

ALWAYS_INLINE void kq_superblock(dy_type t, const kq_scratch *s, __m256 d, __m256 dmin,
                                 const uint8_t *act, size_t arb, int nb, __m256 *acc)
{
    KQ_SUPERBLOCK_BODY(madd_acc)
}

/* One 8-row tile against nb activation rows through the scratch, a super-block at a time. */
ALWAYS_INLINE void kq_tile_shared(dy_type t, const uint8_t *const rows[8], int64_t nsb, size_t bb,
                                  const uint8_t *act, size_t arb, int nb, __m256 *acc, pf_range pf,
                                  dy_simd simd)
{
    const size_t d_off = t == DY_Q6_K ? offsetof(dy_block_q6_k, d) : 0;
    const size_t dmin_off = t == DY_Q6_K ? d_off : 2;
    kq_scratch s;
    for (int b = 0; b < nb; b++)
        acc[b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const size_t off = (size_t)i * bb;
        prefetch_slice(pf, 8 * off, 8 * bb);
        for (int r = 0; r < 8; r++)
            kq_unpack_row(t, rows[r] + off, &s, r);
        if (simd == DY_SIMD_AVX512)
            dy_zmm_kq_superblock(t, &s, f16x8(rows, off + d_off), f16x8(rows, off + dmin_off),
                                 act + i * sizeof(dy_block_q8_k), arb, nb, acc);
        else if (simd == DY_SIMD_AVX512_VNNI)
            dy_avx512_kq_superblock(t, &s, f16x8(rows, off + d_off), f16x8(rows, off + dmin_off),
                                    act + i * sizeof(dy_block_q8_k), arb, nb, acc);
        else
            kq_superblock(t, &s, f16x8(rows, off + d_off), f16x8(rows, off + dmin_off),
                          act + i * sizeof(dy_block_q8_k), arb, nb, acc);
    }
}

ALWAYS_INLINE void kq_rows_t(dy_type t, const dy_mat *W, const void *act, int B, float *Y,
                             int64_t ldy, int64_t r0, int64_t r1, int64_t pf_end, dy_simd simd)
{
    const int64_t nsb = W->cols / DY_QK_K;
    const size_t bb = dy_type_block_bytes(t);
    const size_t arb = dy_type_row_bytes(DY_Q8_K, W->cols);
    __m256 acc[BCH];
    for (int b0 = 0; b0 < B; b0 += BCH) {
        const int nb = imin(BCH, B - b0);
        const uint8_t *abase = (const uint8_t *)act + (size_t)b0 * arb;
        for (int64_t r = r0; r < r1; r += 8) {
            const uint8_t *rows[8];
            const int nr = tile_rows(W, r, r1, rows);
            const pf_range pf = next_tile(W, r, pf_end, 8);
            if (nb > direct_max(t, false))
                kq_tile_shared(t, rows, nsb, bb, abase, arb, nb, acc, pf, simd);
            else
                for (int b = 0; b < nb; b++)
                    acc[b] = kq_direct(t, rows, nsb, bb,
                                       (const dy_block_q8_k *)(abase + (size_t)b * arb),
                                       b == 0 ? pf : no_prefetch(), simd);
            store_tile(acc, b0, nb, Y, ldy, r, nr);
        }
    }
}

static void q4k_rows(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy, int64_t r0,
                     int64_t r1, int64_t pf_end, dy_simd simd)
{
    kq_rows_t(DY_Q4_K, W, act, B, Y, ldy, r0, r1, pf_end, simd);
}

static void q5k_rows(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy, int64_t r0,
                     int64_t r1, int64_t pf_end, dy_simd simd)
{
    kq_rows_t(DY_Q5_K, W, act, B, Y, ldy, r0, r1, pf_end, simd);
}

static void q6k_rows(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy, int64_t r0,
                     int64_t r1, int64_t pf_end, dy_simd simd)
{
    kq_rows_t(DY_Q6_K, W, act, B, Y, ldy, r0, r1, pf_end, simd);
}

/* ------------------------------------------------------------------ activation conversion */

/* roundf on 8 lanes (halfway cases away from zero), exactly: trunc, then step by ±1 when the
 * dropped fraction is at least one half. */
ALWAYS_INLINE __m256 round_away(__m256 v)
{
    const __m256 signbit = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(signbit, _mm256_sub_ps(v, t));
    const __m256 step = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, signbit));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(up, step));
}

/* 4 × 8 int32 (each within int8 range; larger ones saturate) → 32 int8 in element order. */
ALWAYS_INLINE __m256i pack_i8(__m256i a, __m256i b, __m256i c, __m256i d)
{
    const __m256i abcd = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

ALWAYS_INLINE float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

ALWAYS_INLINE __m256 abs_ps(__m256 v)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

/* Same bytes as quantize_row_q8_0_ref (dy_quantize_row), 8 lanes at a time. */
void dy_avx2_act_q8_0(const float *x, void *dst, int64_t n)
{
    dy_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / DY_QK; i++, x += DY_QK) {
        __m256 v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm256_loadu_ps(x + 8 * k);
        const float amax = hmax_ps(_mm256_max_ps(_mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])),
                                                 _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3]))));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dy_f32_to_f16(d);
        const __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[k], idv)));
        _mm256_storeu_si256((__m256i *)y[i].qs, pack_i8(q[0], q[1], q[2], q[3]));
    }
}

/* Same bytes as quantize_row_q8_K_ref: scale from the first value of largest magnitude (sign
 * included), round to nearest even (cvtps under the default MXCSR, like nearest_int). */
void dy_avx2_act_q8_k(const float *x, void *dst, int64_t n)
{
    dy_block_q8_k *y = dst;
    for (int64_t i = 0; i < n / DY_QK_K; i++, x += DY_QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < DY_QK_K / 8; k++)
            m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax_ps(m);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0;
        for (int k = 0; k < DY_QK_K / 8; k++) {
            const __m256 eq = _mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + 8 * k)),
                                            _mm256_set1_ps(amax), _CMP_EQ_OQ);
            const int mask = _mm256_movemask_ps(eq);
            if (mask) {
                first = 8 * k + __builtin_ctz((unsigned)mask);
                break;
            }
        }
        const float iscale = -127.f / x[first];
        const __m256 is = _mm256_set1_ps(iscale);
        for (int k = 0; k < DY_QK_K / 32; k++) {
            __m256i q[4];
            for (int l = 0; l < 4; l++)
                q[l] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * k + 8 * l), is));
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), pack_i8(q[0], q[1], q[2], q[3]));
        }
        for (int g = 0; g < DY_QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ------------------------------------------------------------------ dispatch */

void dy_avx2_matmul(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy, int64_t r0,
                    int64_t r1, int64_t pf_end, dy_simd simd)
{
    const bool vnni = simd >= DY_SIMD_AVX512_VNNI;
    switch (W->type) {
    case DY_F32: f32_rows(W, act, B, Y, ldy, r0, r1, pf_end); break;
    case DY_F16: f16_rows(W, act, B, Y, ldy, r0, r1, pf_end); break;
    case DY_BF16: bf16_rows(W, act, B, Y, ldy, r0, r1, pf_end); break;
    case DY_Q8_0:
    case DY_Q4_0: q8_rows(W, act, B, Y, ldy, r0, r1, pf_end, vnni); break;
    case DY_Q4_K: q4k_rows(W, act, B, Y, ldy, r0, r1, pf_end, simd); break;
    case DY_Q5_K: q5k_rows(W, act, B, Y, ldy, r0, r1, pf_end, simd); break;
    case DY_Q6_K: q6k_rows(W, act, B, Y, ldy, r0, r1, pf_end, simd); break;
    default: break;
    }
}
