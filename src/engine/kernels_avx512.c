/* kernels_avx512.c — the AVX-512 VNNI variants of the int8 kernels (the only file built with
 * -mavx512vnni -mavx512vl on top of the AVX2 flags; kernels_avx2.c calls in here only at
 * DY_SIMD_AVX512_VNNI, which dy_simd_detect picks when the CPU has both).
 *
 * Where the CPU also has AVX-512 VNNI and VL (Zen 4, Ice Lake and later), the int8 products
 * of the Q8_0/Q4_0 paths use vpdpbusd on 256-bit registers: one instruction for the four
 * products and the int32 accumulation that maddubs + madd do in two (and without their int16
 * intermediate, so the activations can be made unsigned by an offset instead of the sign
 * trick); the K-quant paths keep maddubs (their sub-block scales ride on the madd) and fold
 * madd + add into vpdpwssd. Integer sums are exact either way and the float operations are
 * unchanged, so the results are the same bits. (What it gained: docs/engine.md, "Kernel
 * choices".) */
#include "engine/kernels_simd.h"

#include <string.h>

/* q8_0_direct with vpdpbusd for maddubs + madd (sign trick kept: each weight is used once). */
__m256 dy_avx512_q8_0_direct(const uint8_t *const rows[8], int64_t nblk, size_t bb,
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
        for (int r = 0; r < 8; r++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(rows[r] + off + 2));
            p[r] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, _mm256_sign_epi8(w, xv));
        }
        const __m256 dx = _mm256_set1_ps(_cvtsh_ss(x[i].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(p)),
                              _mm256_mul_ps(f16x8(rows, off), dx), acc);
    }
    return acc;
}

/* q8_chunk with vpdpbusd: activations offset to unsigned (x + 128, one xor per block shared by
 * the 8 rows), and the offset's contribution 128·Σw taken off after the reduction. */
void dy_avx512_q8_chunk(const int8_t *const wp[8], size_t wstride, const __m256 *dw,
                        const __m256i *wsum, int nblk, const uint8_t *act, size_t arb, int nb,
                        __m256 *acc)
{
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int b = 0; b < nb; b++) {
        const dy_block_q8_0 *x = (const dy_block_q8_0 *)(act + (size_t)b * arb);
        __m256 a = acc[b];
        for (int i = 0; i < nblk; i++) {
            const __m256i xu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[i].qs), bias);
            __m256i p[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(wp[r] + i * wstride));
                p[r] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), xu, w);
            }
            const __m256i sum = _mm256_sub_epi32(hsum8_epi32(p), wsum[i]);
            const __m256 dx = _mm256_set1_ps(_cvtsh_ss(x[i].d));
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw[i], dx), a);
        }
        acc[b] = a;
    }
}

/* Lane r: 128 × Σ of row r's 32 values (the VNNI path's offset correction). */
__m256i dy_avx512_q8_wsum(const int8_t *const wp[8], size_t off)
{
    __m256i p[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        p[r] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1),
                                   _mm256_loadu_si256((const __m256i *)(wp[r] + off)));
    return _mm256_slli_epi32(hsum8_epi32(p), 7);
}

/* ---- the VNNI shared path: weights packed so no reduction is needed ----
 * For many activation rows the reduction tree of q8_chunk (8 row vectors → one vector of 8
 * sums, per activation row and block) costs more shuffles than the products themselves. Here
 * each block of an 8-row tile is repacked once into 8 registers, register g holding bytes
 * 4g … 4g+3 of rows 0 … 7 in its 8 int32 lanes, offset to unsigned (w + 128). vpdpbusd against
 * the activation's bytes 4g … 4g+3 broadcast to every lane then adds row r's 4 products to
 * lane r: after the block's 8 groups, lane r is Σ (w+128)·x for row r, and 128·Σx (the same for
 * every row, from a small table per activation row) is taken off. Loop order: a group of up to
 * 8 tiles (64 rows, whose weights stay in L2), a chunk of BCH activation rows, 8 blocks at a
 * time (their activation scales and sums tabled), then per tile and block the 8 packed
 * registers against every activation row of the chunk. */
enum { PK_TILES = 8 };

/* acc[b] (lane r) += dot(block of row r, block of activation row b) for the chunk's rows, with
 * the block packed in w. */
static void q8_packed_block(const __m256i w[8], __m256 dw, const uint8_t *act, size_t arb,
                            int nb, const int32_t *xs, const float *dx, size_t tstride,
                            __m256 *acc)
{
    for (int b = 0; b < nb; b++) {
        const int8_t *xq = ((const dy_block_q8_0 *)(act + (size_t)b * arb))->qs;
        __m256i p0 = _mm256_setzero_si256(), p1 = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            int32_t x0, x1;
            memcpy(&x0, xq + 4 * g, 4);
            memcpy(&x1, xq + 4 * g + 16, 4);
            p0 = _mm256_dpbusd_epi32(p0, w[g], _mm256_set1_epi32(x0));
            p1 = _mm256_dpbusd_epi32(p1, w[g + 4], _mm256_set1_epi32(x1));
        }
        const __m256i sum = _mm256_sub_epi32(_mm256_add_epi32(p0, p1),
                                             _mm256_set1_epi32(xs[(size_t)b * tstride]));
        const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(dx[(size_t)b * tstride]));
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale, acc[b]);
    }
}

void dy_avx512_q8_rows_packed(dy_type t, const dy_mat *W, const void *act, int B, float *Y,
                              int64_t ldy, int64_t r0, int64_t r1, int64_t pf_end)
{
    const int64_t nblk = W->cols / DY_QK;
    const size_t bb = dy_type_block_bytes(t);
    const size_t arb = dy_type_row_bytes(DY_Q8_0, W->cols);
    __m256 acc[PK_TILES][BCH];
    int32_t xs[BCH][PK_BLOCKS] __attribute__((aligned(32)));
    float dx[BCH][PK_BLOCKS];
    int8_t q4[8][PK_BLOCKS * DY_QK] __attribute__((aligned(32))); /* Q4_0 values as int8 */
    __m256i w[8];
    for (int64_t g0 = r0; g0 < r1; g0 += 8 * PK_TILES) {
        const int64_t g1 = i64min(r1, g0 + 8 * PK_TILES);
        const int ntiles = (int)((g1 - g0 + 7) / 8);
        for (int b0 = 0; b0 < B; b0 += BCH) {
            const int nb = imin(BCH, B - b0);
            const uint8_t *abase = (const uint8_t *)act + (size_t)b0 * arb;
            for (int tl = 0; tl < ntiles; tl++)
                for (int b = 0; b < nb; b++)
                    acc[tl][b] = _mm256_setzero_ps();
            for (int64_t k = 0; k < nblk; k += PK_BLOCKS) {
                const int nk = (int)i64min(PK_BLOCKS, nblk - k);
                q8_act_table(abase, arb, nb, k, nk, xs, dx);
                for (int tl = 0; tl < ntiles; tl++) {
                    const int64_t r = g0 + 8 * tl;
                    const uint8_t *rows[8];
                    tile_rows(W, r, r1, rows);
                    if (b0 == 0)
                        prefetch_slice(next_tile(W, r, pf_end, 8), 8 * (size_t)k * bb,
                                       8 * (size_t)nk * bb);
                    const int8_t *wp[8];
                    for (int rr = 0; rr < 8; rr++) {
                        const uint8_t *blk = rows[rr] + k * bb;
                        if (t == DY_Q4_0) {
                            for (int i = 0; i < nk; i++) {
                                const __m256i q = q4_0_nibbles(blk + i * bb + 2);
                                _mm256_store_si256((__m256i *)(q4[rr] + DY_QK * i),
                                                   _mm256_sub_epi8(q, _mm256_set1_epi8(8)));
                            }
                            wp[rr] = q4[rr];
                        } else {
                            wp[rr] = (const int8_t *)blk + 2;
                        }
                    }
                    const size_t wstride = t == DY_Q4_0 ? DY_QK : bb;
                    for (int i = 0; i < nk; i++) {
                        q8_pack_block(wp, (size_t)i * wstride, w);
                        q8_packed_block(w, f16x8(rows, (size_t)(k + i) * bb),
                                        abase + (k + i) * sizeof(dy_block_q8_0), arb, nb,
                                        &xs[0][i], &dx[0][i], PK_BLOCKS, acc[tl]);
                    }
                }
            }
            for (int tl = 0; tl < ntiles; tl++) {
                const int64_t r = g0 + 8 * tl;
                store_tile(acc[tl], b0, nb, Y, ldy, r, (int)i64min(8, r1 - r));
            }
        }
    }
}

/* q4k_direct_sb with vpdpwssd for madd + add. */
__m256i dy_avx512_q4k_direct_sb(const uint8_t *const rows[8], size_t off,
                                const dy_block_q8_k *x, __m128i bsp, __m256i *msum)
{
    Q4K_DIRECT_SB_BODY(_mm256_dpwssd_epi32)
}

/* kq_superblock with vpdpwssd for madd + add. */
void dy_avx512_kq_superblock(dy_type t, const kq_scratch *s, __m256 d, __m256 dmin,
                             const uint8_t *act, size_t arb, int nb, __m256 *acc)
{
    KQ_SUPERBLOCK_BODY(_mm256_dpwssd_epi32)
}
