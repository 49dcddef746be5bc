/* kernels_zmm.c — the 512-bit level (DY_SIMD_AVX512, "avx512"): the kernels that use zmm
 * registers (AVX-512 F/BW/VL/VNNI). The only file built with -mavx512f -mavx512bw; kernels.c
 * calls in here only at DY_SIMD_AVX512, which dy_simd_detect picks when the CPU has all four.
 * What this level does not replace it hands to the 256-bit code (kernels_avx2.c with its
 * AVX-512 VNNI variants), so the level is a superset of avx512vnni.
 *
 * F32 / F16 / BF16 weights, many activation rows (prefill): a register tile of 8 weight rows
 * × 6 activation rows in 24 zmm accumulators. Each accumulator holds two weight rows' 8-lane
 * partial sums side by side ([row 2p | row 2p+1] for one activation row), so lane j of each
 * half takes the columns ≡ j (mod 8) by fma in column order: exactly the sums of the AVX2 and
 * scalar kernels, reduced in the same pairwise order, hence the same bits at every level. The
 * 8 rows of a 512-column chunk are first packed into a scratch in that paired form (widened to
 * f32 once there for F16/BF16), which every activation row of the chunk then reads with plain
 * loads; an activation's 8 columns are broadcast to both halves by one load. Per 8 columns the
 * tile does 24 FMAs against 10 loads (the AVX2 tile: 12 against 7), and the F16/BF16
 * conversion is paid once per chunk of up to 144 activation rows instead of once per 3. (Figures:
 * docs/engine.md, "Kernel choices".) */
#include "engine/kernels_simd.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

enum {
    ZP = 4,     /* row pairs per tile (8 weight rows) */
    ZB = 6,     /* activation rows per register tile */
    ZBCH = 144, /* activation rows per chunk (a multiple of ZB); the packing is paid per chunk */
    ZKC = 4096, /* columns packed per step (a multiple of 8): past it, accumulators spill */
};

/* Whether this kernel beats the AVX2 one (which needs no packing) for B activation rows:
 * from 32 rows the packing is paid back at every width. (On Zen 4, which splits a 512-bit FMA
 * in two, the two tie on matrices of up to 1024 columns; on an Ice Lake Xeon, with two
 * 512-bit FMA units, this one is ahead there too. Crossovers measured with bench/kernel_micro:
 * docs/engine.md, "Kernel choices".) */
static bool zmm_float_wins(int B)
{
    return B >= 32;
}

/* Lane r of the result is the sum of the 8 lanes of row r's accumulator, r = 0..3, in the
 * order ((0+1)+(2+3))+((4+5)+(6+7)) of the scalar and AVX2 kernels. */
ALWAYS_INLINE __m256 upper8(__m512 v)
{
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

ALWAYS_INLINE __m128 zhsum4_ps(__m256 a, __m256 b, __m256 c, __m256 d)
{
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* Columns [k, k+8) of rows a and b as f32, side by side. */
ALWAYS_INLINE __m512 pair8(dy_type t, const uint8_t *a, const uint8_t *b, int64_t k)
{
    if (t == DY_F32)
        return _mm512_castpd_ps(_mm512_insertf64x4(
            _mm512_castpd256_pd512(_mm256_loadu_pd((const double *)((const float *)a + k))),
            _mm256_loadu_pd((const double *)((const float *)b + k)), 1));
    const __m256i h = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)((const uint16_t *)b + k)),
                                       _mm_loadu_si128((const __m128i *)((const uint16_t *)a + k)));
    if (t == DY_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

ALWAYS_INLINE float load1(dy_type t, const uint8_t *row, int64_t k)
{
    if (t == DY_F32)
        return ((const float *)row)[k];
    const uint16_t h = dy_rd16((const uint16_t *)row + k);
    return t == DY_F16 ? _cvtsh_ss(h) : dy_bf16_to_f32(h);
}

/* wp[s][p] = columns [k + 8s, k + 8s + 8) of rows 2p and 2p+1, for s < kc / 8. */
ALWAYS_INLINE void pack_chunk(dy_type t, const uint8_t *const rows[8], int64_t k, int kc,
                              __m512 *wp)
{
    for (int s = 0; s < kc / 8; s++)
#pragma GCC unroll 4
        for (int p = 0; p < ZP; p++)
            wp[s * ZP + p] = pair8(t, rows[2 * p], rows[2 * p + 1], k + 8 * (int64_t)s);
}

/* acc[p][b] += the packed chunk's rows 2p, 2p+1 against activation row b (columns x[b] ...),
 * b < NB. */
ALWAYS_INLINE void float_tile(int NB, const __m512 *wp, int steps, const float *const x[ZB],
                              __m512 acc[ZP][ZBCH], int bt)
{
    __m512 a[ZP][ZB];
#pragma GCC unroll 4
    for (int p = 0; p < ZP; p++)
#pragma GCC unroll 6
        for (int b = 0; b < NB; b++)
            a[p][b] = acc[p][bt + b];
    for (int s = 0; s < steps; s++) {
        __m512 w[ZP];
#pragma GCC unroll 4
        for (int p = 0; p < ZP; p++)
            w[p] = wp[s * ZP + p];
#pragma GCC unroll 6
        for (int b = 0; b < NB; b++) {
            const __m512 xv = _mm512_castpd_ps(
                _mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(x[b] + 8 * s))));
#pragma GCC unroll 4
            for (int p = 0; p < ZP; p++)
                a[p][b] = _mm512_fmadd_ps(w[p], xv, a[p][b]);
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < ZP; p++)
#pragma GCC unroll 6
        for (int b = 0; b < NB; b++)
            acc[p][bt + b] = a[p][b];
}

/* The chunk's activation rows [bt, bt + nb) (nb ≤ ZB) over the packed columns [k, k + kc). */
static void float_tiles(const __m512 *wp, int kc, const float *act, int64_t n, int64_t k,
                        int bt, int nb, __m512 acc[ZP][ZBCH])
{
    const float *x[ZB];
    for (int i = 0; i < ZB; i++)
        x[i] = act + (int64_t)(bt + imin(i, nb - 1)) * n + k;
    switch (nb) {
    case 6: float_tile(6, wp, kc / 8, x, acc, bt); break;
    case 5: float_tile(5, wp, kc / 8, x, acc, bt); break;
    case 4: float_tile(4, wp, kc / 8, x, acc, bt); break;
    case 3: float_tile(3, wp, kc / 8, x, acc, bt); break;
    case 2: float_tile(2, wp, kc / 8, x, acc, bt); break;
    default: float_tile(1, wp, kc / 8, x, acc, bt); break;
    }
}

/* Y[b][r .. r+nr) from the accumulators, plus the columns past the last multiple of 8 one by
 * one (fmaf: as the scalar code). */
ALWAYS_INLINE void float_store(dy_type t, const uint8_t *const rows[8], __m512 acc[ZP][ZBCH],
                               const float *act, int64_t n, int b0, int nb, float *Y, int64_t ldy,
                               int64_t r, int nr)
{
    const int64_t n8 = n / 8 * 8;
    for (int b = 0; b < nb; b++) {
        float out[8];
        for (int h = 0; h < 2; h++) {
            const __m512 u = acc[2 * h][b], v = acc[2 * h + 1][b];
            _mm_storeu_ps(out + 4 * h,
                          zhsum4_ps(_mm512_castps512_ps256(u), upper8(u), _mm512_castps512_ps256(v),
                                    upper8(v)));
        }
        const float *x = act + (int64_t)(b0 + b) * n;
        for (int64_t k = n8; k < n; k++)
            for (int i = 0; i < nr; i++)
                out[i] = fmaf(load1(t, rows[i], k), x[k], out[i]);
        memcpy(Y + (int64_t)(b0 + b) * ldy + r, out, (size_t)nr * sizeof(float));
    }
}

ALWAYS_INLINE void float_rows(dy_type t, const dy_mat *W, const float *act, int B, float *Y,
                              int64_t ldy, int64_t r0, int64_t r1, int64_t pf_end)
{
    const int64_t n = W->cols, n8 = n / 8 * 8;
    const size_t es = t == DY_F32 ? 4 : 2;
    __m512 acc[ZP][ZBCH];       /* 36 KB */
    __m512 wp[ZKC / 8 * ZP];    /* 128 KB: the packed rows of up to ZKC columns */
    for (int b0 = 0; b0 < B; b0 += ZBCH) {
        const int nbc = imin(ZBCH, B - b0);
        const float *abase = act + (int64_t)b0 * n;
        for (int64_t r = r0; r < r1; r += 8) {
            const uint8_t *rows[8];
            const int nr = tile_rows(W, r, r1, rows);
            const pf_range pf = b0 == 0 ? next_tile(W, r, pf_end, 8) : no_prefetch();
            for (int p = 0; p < ZP; p++)
                for (int b = 0; b < nbc; b++)
                    acc[p][b] = _mm512_setzero_ps();
            for (int64_t k = 0; k < n8; k += ZKC) {
                const int kc = (int)i64min(ZKC, n8 - k);
                if (pf.base != pf.end)
                    prefetch_slice(pf, 8 * es * (size_t)k, 8 * es * (size_t)kc);
                pack_chunk(t, rows, k, kc, wp);
                for (int bt = 0; bt < nbc; bt += ZB)
                    float_tiles(wp, kc, abase, n, k, bt, imin(ZB, nbc - bt), acc);
            }
            float_store(t, rows, acc, act, n, b0, nbc, Y, ldy, r, nr);
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

/* ------------------------------------------------------------------ Q8_0 / Q4_0 × Q8_0, packed */

/* The packed path of kernels_avx512.c (dy_avx512_q8_rows_packed) with 16-row tiles: a zmm
 * register holds two 8-row packed blocks side by side, lane r being row r of 16, so one
 * vpdpbusd of an activation's 4 broadcast bytes serves 16 weight rows, and the per (activation
 * row, block) work around the products (broadcasts, the offset, the conversion and the scaling
 * fma) is shared by twice the rows. Lane r performs the float operations of lane r mod 8 of the
 * 8-row path in the same order: the same bits. Loop order as there: a group of ZPK_TILES tiles
 * (64 rows), a chunk of BCH activation rows, PK_BLOCKS blocks at a time. */
enum { ZPK_TILES = 4 };

/* Row pointers of a 16-row tile; a short last tile repeats its last row (results dropped). */
static inline int tile_rows16(const dy_mat *W, int64_t r, int64_t r1, const uint8_t *rows[16])
{
    const int nr = (int)i64min(16, r1 - r);
    for (int i = 0; i < 16; i++)
        rows[i] = (const uint8_t *)W->data + (size_t)(r + imin(i, nr - 1)) * W->row_bytes;
    return nr;
}

ALWAYS_INLINE __m512i join_si256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

ALWAYS_INLINE __m512 join_ps256(__m256 lo, __m256 hi)
{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                                               _mm256_castps_pd(hi), 1));
}

/* acc[b] (lane r) += dot(block of row r, block of activation row b), the block packed in w. */
static void q8_packed_block16(const __m512i w[8], __m512 dw, const uint8_t *act, size_t arb,
                              int nb, const int32_t *xs, const float *dx, size_t tstride,
                              __m512 *acc)
{
    for (int b = 0; b < nb; b++) {
        const int8_t *xq = ((const dy_block_q8_0 *)(act + (size_t)b * arb))->qs;
        /* One chain that starts from −128·Σx: the integer sum is exact in any order, and
         * the activation rows' iterations are independent, so the core overlaps the chains
         * of several b instead of paying an add and a subtract per block. */
        __m512i sum = _mm512_set1_epi32(-xs[(size_t)b * tstride]);
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            int32_t x0, x1;
            memcpy(&x0, xq + 4 * g, 4);
            memcpy(&x1, xq + 4 * g + 16, 4);
            sum = _mm512_dpbusd_epi32(sum, w[g], _mm512_set1_epi32(x0));
            sum = _mm512_dpbusd_epi32(sum, w[g + 4], _mm512_set1_epi32(x1));
        }
        const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(dx[(size_t)b * tstride]));
        acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[b]);
    }
}

/* q8_packed_block16 for two tiles at once (32 weight rows): each broadcast of an activation's
 * 4 bytes feeds two vpdpbusd, and the activation's offset and scale are loaded once for both,
 * which halves the loads per product (the single-tile loop is bound by its loads). Each lane
 * performs the same operations as in q8_packed_block16: the same bits. */
static void q8_packed_block32(const __m512i wa[8], const __m512i wb[8], __m512 dwa, __m512 dwb,
                              const uint8_t *act, size_t arb, int nb, const int32_t *xs,
                              const float *dx, size_t tstride, __m512 *acca, __m512 *accb)
{
    for (int b = 0; b < nb; b++) {
        const int8_t *xq = ((const dy_block_q8_0 *)(act + (size_t)b * arb))->qs;
        const __m512i off = _mm512_set1_epi32(-xs[(size_t)b * tstride]);
        __m512i sa = off, sb = off;
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            int32_t x0, x1;
            memcpy(&x0, xq + 4 * g, 4);
            memcpy(&x1, xq + 4 * g + 16, 4);
            const __m512i v0 = _mm512_set1_epi32(x0), v1 = _mm512_set1_epi32(x1);
            sa = _mm512_dpbusd_epi32(sa, wa[g], v0);
            sb = _mm512_dpbusd_epi32(sb, wb[g], v0);
            sa = _mm512_dpbusd_epi32(sa, wa[g + 4], v1);
            sb = _mm512_dpbusd_epi32(sb, wb[g + 4], v1);
        }
        const __m512 d = _mm512_set1_ps(dx[(size_t)b * tstride]);
        acca[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa), _mm512_mul_ps(dwa, d), acca[b]);
        accb[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sb), _mm512_mul_ps(dwb, d), accb[b]);
    }
}

/* One 16-row tile's block i, packed into w with its 16 scales in *dw. */
ALWAYS_INLINE void q8_pack_tile_block(const uint8_t *const rows[16], const int8_t *const wp[16],
                                      size_t woff, size_t so, __m512i w[8], __m512 *dw)
{
    __m256i lo[8], hi[8];
    q8_pack_block(wp, woff, lo);
    q8_pack_block(wp + 8, woff, hi);
    for (int g = 0; g < 8; g++)
        w[g] = join_si256(lo[g], hi[g]);
    *dw = join_ps256(f16x8(rows, so), f16x8(rows + 8, so));
}

/* Y[b][r .. r+nr) = lanes of acc[b - b0]. */
static void store_tile16(const __m512 *acc, int b0, int nb, float *Y, int64_t ldy, int64_t r,
                         int nr)
{
    for (int b = 0; b < nb; b++) {
        float *y = Y + (int64_t)(b0 + b) * ldy + r;
        if (nr == 16) {
            _mm512_storeu_ps(y, acc[b]);
        } else {
            float tmp[16];
            _mm512_storeu_ps(tmp, acc[b]);
            memcpy(y, tmp, (size_t)nr * sizeof(float));
        }
    }
}

/* Rows [k, k + nk) of the tile's blocks as int8 values: Q8_0 in place, Q4_0 decoded into q4. */
static void q8_tile_values(dy_type t, const uint8_t *const rows[16], int64_t k, int nk,
                           size_t bb, int8_t q4[16][PK_BLOCKS * DY_QK], const int8_t *wp[16])
{
    for (int rr = 0; rr < 16; rr++) {
        const uint8_t *blk = rows[rr] + k * bb;
        if (t != DY_Q4_0) {
            wp[rr] = (const int8_t *)blk + 2;
            continue;
        }
        for (int i = 0; i < nk; i++) {
            const __m256i q = q4_0_nibbles(blk + i * bb + 2);
            _mm256_store_si256((__m256i *)(q4[rr] + DY_QK * i),
                               _mm256_sub_epi8(q, _mm256_set1_epi8(8)));
        }
        wp[rr] = q4[rr];
    }
}

static void q8_rows_packed16(dy_type t, const dy_mat *W, const void *act, int B, float *Y,
                             int64_t ldy, int64_t r0, int64_t r1, int64_t pf_end)
{
    const int64_t nblk = W->cols / DY_QK;
    const size_t bb = dy_type_block_bytes(t);
    const size_t arb = dy_type_row_bytes(DY_Q8_0, W->cols);
    const size_t wstride = t == DY_Q4_0 ? DY_QK : bb;
    __m512 acc[ZPK_TILES][BCH];
    int32_t xs[BCH][PK_BLOCKS] __attribute__((aligned(32)));
    float dx[BCH][PK_BLOCKS];
    int8_t q4[2][16][PK_BLOCKS * DY_QK] __attribute__((aligned(32)));
    for (int64_t g0 = r0; g0 < r1; g0 += 16 * ZPK_TILES) {
        const int64_t g1 = i64min(r1, g0 + 16 * ZPK_TILES);
        const int ntiles = (int)((g1 - g0 + 15) / 16);
        for (int b0 = 0; b0 < B; b0 += BCH) {
            const int nb = imin(BCH, B - b0);
            const uint8_t *abase = (const uint8_t *)act + (size_t)b0 * arb;
            for (int tl = 0; tl < ntiles; tl++)
                for (int b = 0; b < nb; b++)
                    acc[tl][b] = _mm512_setzero_ps();
            for (int64_t k = 0; k < nblk; k += PK_BLOCKS) {
                const int nk = (int)i64min(PK_BLOCKS, nblk - k);
                q8_act_table(abase, arb, nb, k, nk, xs, dx);
                for (int tl = 0; tl < ntiles; tl += 2) {
                    const int nt = imin(2, ntiles - tl); /* tiles done together */
                    const uint8_t *rows[2][16];
                    const int8_t *wp[2][16];
                    for (int u = 0; u < nt; u++) {
                        const int64_t r = g0 + 16 * (tl + u);
                        tile_rows16(W, r, r1, rows[u]);
                        if (b0 == 0)
                            prefetch_slice(next_tile(W, r, pf_end, 16), 16 * (size_t)k * bb,
                                           16 * (size_t)nk * bb);
                        q8_tile_values(t, rows[u], k, nk, bb, q4[u], wp[u]);
                    }
                    for (int i = 0; i < nk; i++) {
                        const size_t woff = (size_t)i * wstride, so = (size_t)(k + i) * bb;
                        const uint8_t *a = abase + (k + i) * sizeof(dy_block_q8_0);
                        __m512i wa[8], wb[8];
                        __m512 dwa, dwb;
                        q8_pack_tile_block(rows[0], wp[0], woff, so, wa, &dwa);
                        if (nt == 1) {
                            q8_packed_block16(wa, dwa, a, arb, nb, &xs[0][i], &dx[0][i],
                                              PK_BLOCKS, acc[tl]);
                            continue;
                        }
                        q8_pack_tile_block(rows[1], wp[1], woff, so, wb, &dwb);
                        q8_packed_block32(wa, wb, dwa, dwb, a, arb, nb, &xs[0][i], &dx[0][i],
                                          PK_BLOCKS, acc[tl], acc[tl + 1]);
                    }
                }
            }
            for (int tl = 0; tl < ntiles; tl++) {
                const int64_t r = g0 + 16 * tl;
                store_tile16(acc[tl], b0, nb, Y, ldy, r, (int)i64min(16, r1 - r));
            }
        }
    }
}

/* Above this many activation rows, the 16-row packed path (measured: docs/engine.md). */
static int zmm_q8_direct_max(dy_type t)
{
    return t == DY_Q4_0 ? 3 : 4;
}

/* ------------------------------------------------------------------ K-quants × Q8_K */

/* Q4K_DIRECT_SB_BODY (kernels_simd.h) with chunks 2cc and 2cc+1 of a row side by side in a
 * zmm: one load, mask and shift decode 128 values, and the activations are paired once per
 * super-block for all 8 rows. Each group's scale is picked from the row's 8 by a permute. The
 * two halves of a row's sums are added (exact integers) before the same reduction, so the
 * result is the 256-bit body's. */
__m256i dy_zmm_q4k_direct_sb(const uint8_t *const rows[8], size_t off, const dy_block_q8_k *x,
                             __m128i bsp, __m256i *msum)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    int32_t scl[8][8] __attribute__((aligned(32)));
    *msum = q4k_sb_scales(rows, off, bsp, scl);
    /* pair cc: chunk 2cc's low nibbles meet x[128cc, +32), its high ones x[128cc+32, +32);
     * chunk 2cc+1's meet x[128cc+64, +32) and x[128cc+96, +32). Scales likewise: groups 4cc and
     * 4cc+2 for the low nibbles, 4cc+1 and 4cc+3 for the high ones. */
    __m512i xlo[2], xhi[2], ilo[2], ihi[2];
    for (int cc = 0; cc < 2; cc++) {
        const int8_t *q = x->qs + 128 * cc;
        xlo[cc] = join_si256(_mm256_loadu_si256((const __m256i *)q),
                             _mm256_loadu_si256((const __m256i *)(q + 64)));
        xhi[cc] = join_si256(_mm256_loadu_si256((const __m256i *)(q + 32)),
                             _mm256_loadu_si256((const __m256i *)(q + 96)));
        ilo[cc] = join_si256(_mm256_set1_epi32(4 * cc), _mm256_set1_epi32(4 * cc + 2));
        ihi[cc] = join_si256(_mm256_set1_epi32(4 * cc + 1), _mm256_set1_epi32(4 * cc + 3));
    }
    __m256i p[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        const dy_block_q4_k *w = (const dy_block_q4_k *)(rows[r] + off);
        const __m512i sc = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)scl[r]));
        __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int cc = 0; cc < 2; cc++) {
            const __m512i v = _mm512_loadu_si512(w->qs + 64 * cc);
            const __m512i ql = _mm512_and_si512(v, m4);
            const __m512i qv = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(ql, xlo[cc]),
                                      _mm512_permutexvar_epi32(ilo[cc], sc));
            acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(qv, xhi[cc]),
                                      _mm512_permutexvar_epi32(ihi[cc], sc));
        }
        p[r] = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
    }
    return hsum8_epi32(p);
}

/* kq_superblock (kernels_avx2.c, KQ_SUPERBLOCK_BODY) with two 32-column chunks to a zmm: the
 * scratch's values and scale vectors of chunks 2j and 2j+1 are adjacent, as are the
 * activation's, so each row takes 4 maddubs + vpdpwssd pairs instead of 8; the two halves of
 * a row's sums are added (exact integers) before the same reduction and float scaling. */
void dy_zmm_kq_superblock(dy_type t, const kq_scratch *s, __m256 d, __m256 dmin,
                          const uint8_t *act, size_t arb, int nb, __m256 *acc)
{
    for (int b = 0; b < nb; b++) {
        const dy_block_q8_k *x = (const dy_block_q8_k *)(act + (size_t)b * arb);
        __m512i p[8];
        __m256i h[8], m[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            p[r] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const __m512i xv = _mm512_loadu_si512(x->qs + 64 * j);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                const __m512i q = _mm512_loadu_si512(s->q[r] + 64 * j);
                const __m512i sc = _mm512_loadu_si512(&s->sc[r][2 * j]);
                p[r] = _mm512_dpwssd_epi32(p[r], _mm512_maddubs_epi16(q, xv), sc);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            h[r] = _mm256_add_epi32(_mm512_castsi512_si256(p[r]), _mm512_extracti64x4_epi64(p[r], 1));
        const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
        const __m256 dx = _mm256_set1_ps(x->d);
        if (t == DY_Q6_K) {
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                h[r] = _mm256_sub_epi32(h[r], _mm256_madd_epi16(s->mn[r], bs));
            acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(h)), _mm256_mul_ps(d, dx), acc[b]);
            continue;
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            m[r] = _mm256_madd_epi16(s->mn[r], bs);
        const __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(h)), _mm256_mul_ps(d, dx), acc[b]);
        acc[b] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(m)), _mm256_mul_ps(dmin, dx), a);
    }
}

/* ---- K-quants, packed: no reduction tree ----
 * As for Q8_0: a 16-row tile's super-block is decoded (dy_avx2_kq_unpack8, the values unsigned
 * 0..63) and transposed once, zmm register g holding bytes 4g … 4g+3 of the 16 rows in its
 * int32 lanes; vpdpbusd against the activation's bytes 4g … 4g+3 broadcast then adds row r's
 * 4 products to lane r. Four of them make a 16-element group's sum, which vpmulld scales by
 * the rows' group scales (a table, lane r = row r) into the row sums; the mins term is 8
 * vpdpwssd of the rows' (min, min) pairs against the activation's bsums pairs. The integer
 * sums are those of kq_superblock, and the float operations per lane the same: same bits. */
typedef struct {
    __m512i q[64];     /* [g]: bytes 4g … 4g+3 of the 16 rows */
    __m512i sc[16];    /* [group]: the rows' scales, int32 */
    __m512i mn[8];     /* [k]: the rows' mins of groups 2k, 2k+1, as an int16 pair */
    __m512 d, dmin;    /* the rows' f16 scales as f32 */
} kq_packed;

/* Lanes 8h … 8h+7 of the table rows from the 8-row scratch s (rows 8h … 8h+7 of the tile). */
static void kq_pack_half(const kq_scratch *s, int h, int32_t sc[16][16], int32_t mn[8][16])
{
    for (int r = 0; r < 8; r++) {
        int16_t scv[8][16], mnv[16];
        memcpy(scv, s->sc[r], sizeof scv);
        memcpy(mnv, &s->mn[r], sizeof mnv);
        for (int j = 0; j < 8; j++) { /* chunk j: group 2j in lanes 0-7, 2j+1 in lanes 8-15 */
            sc[2 * j][8 * h + r] = scv[j][0];
            sc[2 * j + 1][8 * h + r] = scv[j][8];
        }
        for (int k = 0; k < 8; k++)
            mn[k][8 * h + r] = (int32_t)(((uint32_t)(uint16_t)mnv[2 * k + 1] << 16) |
                                         (uint16_t)mnv[2 * k]);
    }
}

static void kq_pack_tile(dy_type t, const uint8_t *const rows[16], size_t off, kq_packed *p)
{
    const size_t d_off = t == DY_Q6_K ? offsetof(dy_block_q6_k, d) : 0;
    const size_t dmin_off = t == DY_Q6_K ? d_off : 2;
    kq_scratch s[2];
    int32_t sc[16][16] __attribute__((aligned(64))), mn[8][16] __attribute__((aligned(64)));
    for (int h = 0; h < 2; h++) {
        dy_avx2_kq_unpack8(t, rows + 8 * h, off, &s[h]);
        kq_pack_half(&s[h], h, sc, mn);
    }
    for (int c = 0; c < 8; c++) { /* 32-byte chunk c: groups g = 8c … 8c+7 */
        const int8_t *lo[8], *hi[8];
        for (int r = 0; r < 8; r++) {
            lo[r] = (const int8_t *)s[0].q[r];
            hi[r] = (const int8_t *)s[1].q[r];
        }
        __m256i a[8], b[8];
        pack_block8(lo, 32 * (size_t)c, a, 0);
        pack_block8(hi, 32 * (size_t)c, b, 0);
        for (int g = 0; g < 8; g++)
            p->q[8 * c + g] = join_si256(a[g], b[g]);
    }
    for (int g = 0; g < 16; g++)
        p->sc[g] = _mm512_load_si512(sc[g]);
    for (int k = 0; k < 8; k++)
        p->mn[k] = _mm512_load_si512(mn[k]);
    p->d = join_ps256(f16x8(rows, off + d_off), f16x8(rows + 8, off + d_off));
    p->dmin = join_ps256(f16x8(rows, off + dmin_off), f16x8(rows + 8, off + dmin_off));
}

ALWAYS_INLINE __m512i bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc[b] (lane r) += dot(super-block of row r, Q8_K block of activation row b) for the NB (1 or
 * 2) rows from b0: two at a time, each packed register loaded once serves both. */
ALWAYS_INLINE void kq_packed_rows(int NB, dy_type t, const kq_packed *p, const uint8_t *act,
                                  size_t arb, int b0, __m512 *acc)
{
    const dy_block_q8_k *x[2];
    __m512i sum[2], msum[2];
#pragma GCC unroll 2
    for (int j = 0; j < NB; j++) {
        x[j] = (const dy_block_q8_k *)(act + (size_t)(b0 + j) * arb);
        sum[j] = msum[j] = _mm512_setzero_si512();
    }
#pragma GCC unroll 16
    for (int g = 0; g < 16; g++) {
        __m512i s[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i q = p->q[4 * g + k];
#pragma GCC unroll 2
            for (int j = 0; j < NB; j++)
                s[j] = _mm512_dpbusd_epi32(s[j], q, bcast4(x[j]->qs + 16 * g + 4 * k));
        }
#pragma GCC unroll 2
        for (int j = 0; j < NB; j++)
            sum[j] = _mm512_add_epi32(sum[j], _mm512_mullo_epi32(s[j], p->sc[g]));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
#pragma GCC unroll 2
        for (int j = 0; j < NB; j++)
            msum[j] = _mm512_dpwssd_epi32(msum[j], p->mn[k], bcast4(x[j]->bsums + 2 * k));
#pragma GCC unroll 2
    for (int j = 0; j < NB; j++) {
        __m512 *a = &acc[b0 + j];
        const __m512 dx = _mm512_set1_ps(x[j]->d);
        if (t == DY_Q6_K) { /* dmin = d: one scaling, as in kq_superblock */
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sum[j], msum[j])),
                                 _mm512_mul_ps(p->d, dx), *a);
            continue;
        }
        const __m512 y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j]), _mm512_mul_ps(p->d, dx), *a);
        *a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[j]), _mm512_mul_ps(p->dmin, dx), y);
    }
}

/* acc[b] (lane r) += dot(super-block of row r, Q8_K block of activation row b), b < nb. */
ALWAYS_INLINE void kq_packed_superblock(dy_type t, const kq_packed *p, const uint8_t *act,
                                        size_t arb, int nb, __m512 *acc)
{
    int b = 0;
    for (; b + 2 <= nb; b += 2)
        kq_packed_rows(2, t, p, act, arb, b, acc);
    if (b < nb)
        kq_packed_rows(1, t, p, act, arb, b, acc);
}

ALWAYS_INLINE void kq_rows_packed16(dy_type t, const dy_mat *W, const void *act, int B, float *Y,
                                    int64_t ldy, int64_t r0, int64_t r1, int64_t pf_end)
{
    const int64_t nsb = W->cols / DY_QK_K;
    const size_t bb = dy_type_block_bytes(t);
    const size_t arb = dy_type_row_bytes(DY_Q8_K, W->cols);
    __m512 acc[ZPK_TILES][BCH];
    kq_packed p;
    for (int64_t g0 = r0; g0 < r1; g0 += 16 * ZPK_TILES) {
        const int64_t g1 = i64min(r1, g0 + 16 * ZPK_TILES);
        const int ntiles = (int)((g1 - g0 + 15) / 16);
        for (int b0 = 0; b0 < B; b0 += BCH) {
            const int nb = imin(BCH, B - b0);
            const uint8_t *abase = (const uint8_t *)act + (size_t)b0 * arb;
            for (int tl = 0; tl < ntiles; tl++)
                for (int b = 0; b < nb; b++)
                    acc[tl][b] = _mm512_setzero_ps();
            for (int64_t i = 0; i < nsb; i++) {
                for (int tl = 0; tl < ntiles; tl++) {
                    const int64_t r = g0 + 16 * tl;
                    const uint8_t *rows[16];
                    tile_rows16(W, r, r1, rows);
                    if (b0 == 0)
                        prefetch_slice(next_tile(W, r, pf_end, 16), 16 * (size_t)i * bb,
                                       16 * bb);
                    kq_pack_tile(t, rows, (size_t)i * bb, &p);
                    kq_packed_superblock(t, &p, abase + i * sizeof(dy_block_q8_k), arb, nb,
                                         acc[tl]);
                }
            }
            for (int tl = 0; tl < ntiles; tl++) {
                const int64_t r = g0 + 16 * tl;
                store_tile16(acc[tl], b0, nb, Y, ldy, r, (int)i64min(16, r1 - r));
            }
        }
    }
}

static void q4k_rows_packed16(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy,
                              int64_t r0, int64_t r1, int64_t pf_end)
{
    kq_rows_packed16(DY_Q4_K, W, act, B, Y, ldy, r0, r1, pf_end);
}

static void q5k_rows_packed16(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy,
                              int64_t r0, int64_t r1, int64_t pf_end)
{
    kq_rows_packed16(DY_Q5_K, W, act, B, Y, ldy, r0, r1, pf_end);
}

static void q6k_rows_packed16(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy,
                              int64_t r0, int64_t r1, int64_t pf_end)
{
    kq_rows_packed16(DY_Q6_K, W, act, B, Y, ldy, r0, r1, pf_end);
}

/* Above this many activation rows, the packed K-quant path: its decoding and transposing, once
 * per tile and chunk, costs about what a dozen activation rows do (measured: docs/engine.md). */
enum { ZKQ_SHARED_MAX = 16 };

/* ------------------------------------------------------------------ activation conversion */

/* roundf on 16 lanes (halfway cases away from zero), exactly: trunc, then step by ±1 where the
 * dropped fraction is at least one half. */
ALWAYS_INLINE __m512 round_away16(__m512 v)
{
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
    const __m512 step = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(_mm512_set1_ps(1.0f)),
        _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u))));
    const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm512_mask_add_ps(t, up, t, step);
}

/* Same bytes as quantize_row_q8_0_ref (dy_quantize_row), a block in two registers. */
void dy_zmm_act_q8_0(const float *x, void *dst, int64_t n)
{
    dy_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / DY_QK; i++, x += DY_QK) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = dy_f32_to_f16(d);
        const __m512 idv = _mm512_set1_ps(id);
        const __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(round_away16(_mm512_mul_ps(v0, idv))));
        const __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(round_away16(_mm512_mul_ps(v1, idv))));
        _mm_storeu_si128((__m128i *)y[i].qs, q0);
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), q1);
    }
}

/* Same bytes as quantize_row_q8_K_ref: scale from the first value of largest magnitude (sign
 * included), round to nearest even (cvtps under the default MXCSR, like nearest_int); a
 * register is one 16-value group, so its bsum is one reduction. */
void dy_zmm_act_q8_k(const float *x, void *dst, int64_t n)
{
    dy_block_q8_k *y = dst;
    for (int64_t i = 0; i < n / DY_QK_K; i++, x += DY_QK_K) {
        __m512 m = _mm512_setzero_ps();
        for (int k = 0; k < DY_QK_K / 16; k++)
            m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)));
        const float amax = _mm512_reduce_max_ps(m);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0;
        for (int k = 0; k < DY_QK_K / 16; k++) {
            const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)),
                                                    _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (eq) {
                first = 16 * k + __builtin_ctz((unsigned)eq);
                break;
            }
        }
        const float iscale = -127.f / x[first];
        const __m512 is = _mm512_set1_ps(iscale);
        for (int g = 0; g < DY_QK_K / 16; g++) {
            const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), is));
            const __m128i q8 = _mm512_cvtsepi32_epi8(q);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * g), q8);
            y[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q8));
        }
        y[i].d = 1 / iscale;
    }
}

/* ------------------------------------------------------------------ dispatch */

void dy_zmm_matmul(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy, int64_t r0,
                   int64_t r1, int64_t pf_end)
{
    if (zmm_float_wins(B)) {
        switch (W->type) {
        case DY_F32: f32_rows(W, act, B, Y, ldy, r0, r1, pf_end); return;
        case DY_F16: f16_rows(W, act, B, Y, ldy, r0, r1, pf_end); return;
        case DY_BF16: bf16_rows(W, act, B, Y, ldy, r0, r1, pf_end); return;
        default: break;
        }
    }
    if ((W->type == DY_Q8_0 || W->type == DY_Q4_0) && B > zmm_q8_direct_max(W->type)) {
        q8_rows_packed16(W->type, W, act, B, Y, ldy, r0, r1, pf_end);
        return;
    }
    if (B > ZKQ_SHARED_MAX) {
        switch (W->type) {
        case DY_Q4_K: q4k_rows_packed16(W, act, B, Y, ldy, r0, r1, pf_end); return;
        case DY_Q5_K: q5k_rows_packed16(W, act, B, Y, ldy, r0, r1, pf_end); return;
        case DY_Q6_K: q6k_rows_packed16(W, act, B, Y, ldy, r0, r1, pf_end); return;
        default: break;
        }
    }
    dy_avx2_matmul(W, act, B, Y, ldy, r0, r1, pf_end, DY_SIMD_AVX512);
}
