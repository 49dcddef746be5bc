/* kernels_simd.h — private to kernels_avx2.c and kernels_avx512.c (the only files built with
 * AVX2): the register-level pieces both use — chunk sizes, reductions, software prefetching,
 * 8-row tile plumbing, Q4_0 and K-quant scale decoding, the K-quant scratch and the loop bodies
 * that the AVX-512 VNNI variants repeat with one instruction swapped — and the entry points of
 * the AVX-512 VNNI kernels. */
#ifndef DYAD_KERNELS_SIMD_H
#define DYAD_KERNELS_SIMD_H

#include "engine/kernels_impl.h"

#include <immintrin.h>
#include <stddef.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum {
    BCH = 64, /* activation rows per chunk (quantised paths) */
    KC = 256, /* columns decoded per step of the quantised paths */
};

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int64_t i64min(int64_t a, int64_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ reductions */

/* Lane r of the result is the sum of the 8 int32 lanes of p[r] (r = 0..7). */
ALWAYS_INLINE __m256i hsum8_epi32(const __m256i p[8])
{
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    /* a = [rows 0-3, low 128 bits | rows 0-3, high 128 bits]; b likewise for rows 4-7 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* ------------------------------------------------------------------ prefetching */

/* With few activation rows the kernels are limited by how fast weights arrive from memory. A
 * tile reads its rows side by side (8 or 4 short interleaved streams, restarted every tile),
 * which the hardware prefetchers follow poorly: a thread streams Q8_0 weights from DRAM at a
 * fraction of its rate from cache. So while a tile is computed, the next tile of the thread's
 * row range (contiguous bytes, the rows being adjacent) is prefetched in order, in slices
 * proportional to the progress through the current one, which brings one thread near its
 * cache rate and lets two saturate the memory. A next tile larger than PF_L1_MAX is
 * prefetched into L2 only (prefetcht1): into L1 it would evict the current tile before use
 * (long Q8_0 rows showed it). Figures: docs/engine.md, "Kernel choices". */
enum { PF_L1_MAX = 8 * 1024 };

typedef struct {
    const uint8_t *base, *end; /* the next tile's bytes; base == end: nothing to prefetch */
    bool to_l2;
} pf_range;

static inline pf_range no_prefetch(void)
{
    return (pf_range){NULL, NULL, false};
}

/* The tile after the one at row r (tiles of `tile` rows), clipped to rows below pf_end. */
static inline pf_range next_tile(const dy_mat *W, int64_t r, int64_t pf_end, int tile)
{
    const int64_t a = r + tile, b = i64min(a + tile, pf_end);
    if (a >= b)
        return no_prefetch();
    const uint8_t *d = W->data;
    return (pf_range){d + (size_t)a * W->row_bytes, d + (size_t)b * W->row_bytes,
                      (size_t)tile * W->row_bytes > PF_L1_MAX};
}

/* Prefetches bytes [from, from + len) of the range (clipped to it), a cache line at a time. A
 * slice's last partial line is the next slice's first. */
ALWAYS_INLINE void prefetch_slice(pf_range pf, size_t from, size_t len)
{
    const uint8_t *p = pf.base + from, *e = pf.base + from + len;
    if (e > pf.end)
        e = pf.end;
    if (pf.to_l2)
        for (; p < e; p += 64)
            _mm_prefetch((const char *)p, _MM_HINT_T1);
    else
        for (; p < e; p += 64)
            _mm_prefetch((const char *)p, _MM_HINT_T0);
}

/* ------------------------------------------------------------------ shared tile plumbing */

/* Row pointers of an 8-row tile; a short last tile repeats its last row (results dropped). */
static inline int tile_rows(const dy_mat *W, int64_t r, int64_t r1, const uint8_t *rows[8])
{
    const int nr = (int)i64min(8, r1 - r);
    for (int i = 0; i < 8; i++)
        rows[i] = (const uint8_t *)W->data + (size_t)(r + imin(i, nr - 1)) * W->row_bytes;
    return nr;
}

/* Y[b][r..r+nr) = lanes of acc[b - b0]. */
static inline void store_tile(const __m256 *acc, int b0, int nb, float *Y, int64_t ldy,
                              int64_t r, int nr)
{
    for (int b = 0; b < nb; b++) {
        float *y = Y + (int64_t)(b0 + b) * ldy + r;
        if (nr == 8) {
            _mm256_storeu_ps(y, acc[b]);
        } else {
            float tmp[8];
            _mm256_storeu_ps(tmp, acc[b]);
            memcpy(y, tmp, (size_t)nr * sizeof(float));
        }
    }
}

/* The f16 at rows[r] + off for the 8 rows, as f32 lanes. (vpinsrw was the faster of the two
 * tried here, against packing the halves with integer shifts and moving them over in two
 * qwords.) */
ALWAYS_INLINE __m256 f16x8(const uint8_t *const rows[8], size_t off)
{
    const __m128i h = _mm_setr_epi16(
        (short)dy_rd16(rows[0] + off), (short)dy_rd16(rows[1] + off),
        (short)dy_rd16(rows[2] + off), (short)dy_rd16(rows[3] + off),
        (short)dy_rd16(rows[4] + off), (short)dy_rd16(rows[5] + off),
        (short)dy_rd16(rows[6] + off), (short)dy_rd16(rows[7] + off));
    return _mm256_cvtph_ps(h);
}

/* Q4_0 block values as unsigned nibbles q+8 (0..15): low nibbles in the low half, high nibbles
 * in the high half, from one broadcast load. */
ALWAYS_INLINE __m256i q4_0_nibbles(const uint8_t *qs)
{
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    const __m256i v4 = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(v4, _mm256_set1_epi8(0x0F));
}

/* Q4_K/Q5_K: the 8 six-bit scales and mins (ggml's get_scale_min_k4, 4 bytes at a time), as
 * int16: returns the scales in both 128-bit halves, *mins the mins. */
ALWAYS_INLINE __m256i k4_scales(const uint8_t scales[12], __m128i *mins)
{
    /* 32-bit lanes of the 12 bytes: u0 u1 u2. Wanted, as bytes: [scales 0-3 | scales 4-7 |
     * mins 0-3 | mins 4-7] = [u0 & 3f | (u2 & 0f) | (u0 >> 6 & 03) << 4 | u1 & 3f |
     * (u2 >> 4 & 0f) | (u1 >> 6 & 03) << 4]. The 4 bytes read past the scales are in the block. */
    const __m128i v = _mm_loadu_si128((const __m128i *)scales);
    const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); /* u0 u2 u1 u2 */
    const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); /* u0 u0 u1 u1 */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_or_si128(lo, hi));
    *mins = _mm256_extracti128_si256(sm, 1);
    return _mm256_permute4x64_epi64(sm, 0x44);
}

/* Q4_K row decoding for q4k_direct_sb: the 8 sub-block scales as int32 (two int16 copies, so
 * one vpbroadcastd makes a chunk's madd multiplier) into scl; returns the row's mins · bsums
 * as 4 int32 lanes. */
ALWAYS_INLINE __m128i k4_row_scales(const uint8_t scales[12], int32_t scl[8], __m128i bsp)
{
    __m128i mins;
    const __m256i sc = k4_scales(scales, &mins);
    const __m256i sc32 = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(sc));
    _mm256_store_si256((__m256i *)scl, _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16)));
    return _mm_madd_epi16(mins, bsp);
}

/* The scale set-up of q4k_direct_sb and its zmm form for the 8 rows' super-block at offset
 * off: each row's sub-block scales into scl[r] (k4_row_scales); returns lane r: row r's
 * mins · bsums. */
ALWAYS_INLINE __m256i q4k_sb_scales(const uint8_t *const rows[8], size_t off, __m128i bsp,
                                    int32_t scl[8][8])
{
    __m128i hm[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const uint8_t *a = rows[2 * k] + off, *b = rows[2 * k + 1] + off;
        const size_t so = offsetof(dy_block_q4_k, scales);
        hm[k] = _mm_hadd_epi32(k4_row_scales(a + so, scl[2 * k], bsp),
                               k4_row_scales(b + so, scl[2 * k + 1], bsp));
    }
    return _mm256_set_m128i(_mm_hadd_epi32(hm[2], hm[3]), _mm_hadd_epi32(hm[0], hm[1]));
}

/* p += madd(a, b): what one vpdpwssd does with AVX-512 VNNI. */
ALWAYS_INLINE __m256i madd_acc(__m256i p, __m256i a, __m256i b)
{
    return _mm256_add_epi32(p, _mm256_madd_epi16(a, b));
}

/* The body of q4k_direct_sb (see kernels_avx2.c), with MADD_ACC for p += madd(a, b). */
#define Q4K_DIRECT_SB_BODY(MADD_ACC)                                                            \
    const __m256i m4 = _mm256_set1_epi8(0x0F);                                                  \
    int32_t scl[8][8] __attribute__((aligned(32)));                                             \
    *msum = q4k_sb_scales(rows, off, bsp, scl);                                                 \
    __m256i p[8];                                                                               \
    _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) p[r] = _mm256_setzero_si256();          \
    for (int c = 0; c < 4; c++) { /* 32 bytes: chunk 2c in the low nibbles, 2c+1 in the high */ \
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(x->qs + 64 * c));              \
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(x->qs + 64 * c + 32));         \
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)                                     \
        {                                                                                       \
            const dy_block_q4_k *w = (const dy_block_q4_k *)(rows[r] + off);                    \
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * c));            \
            const __m256i ql = _mm256_and_si256(v, m4);                                         \
            const __m256i qv = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);                   \
            const __m256i s0 = _mm256_set1_epi32(scl[r][2 * c]);                                \
            const __m256i s1 = _mm256_set1_epi32(scl[r][2 * c + 1]);                            \
            p[r] = MADD_ACC(p[r], _mm256_maddubs_epi16(ql, x0), s0);                            \
            p[r] = MADD_ACC(p[r], _mm256_maddubs_epi16(qv, x1), s1);                            \
        }                                                                                       \
    }                                                                                           \
    return hsum8_epi32(p);

/* 8 weight rows of one super-block in the form of dy_kq_unpacked, laid out for the tile. */
typedef struct {
    uint8_t q[8][DY_QK_K] __attribute__((aligned(32)));
    __m256i sc[8][8]; /* [row][32-column chunk j]: 16 int16, group 2j's scale ×8, 2j+1's ×8 */
    __m256i mn[8];    /* [row]: the 16 group mins as int16 */
} kq_scratch;

/* acc[b] (lane r) += dot(super-block of weight row r, Q8_K block of activation row b). Q6_K's
 * offset term is folded into the integer sum (its dmin is d), as in kq_direct. */
#define KQ_SUPERBLOCK_BODY(MADD_ACC)                                                                     \
    for (int b = 0; b < nb; b++) {                                                                       \
        const dy_block_q8_k *x = (const dy_block_q8_k *)(act + (size_t)b * arb);                         \
        __m256i p[8], m[8];                                                                              \
        _Pragma("GCC unroll 8")                                                                          \
        for (int r = 0; r < 8; r++)                                                                      \
            p[r] = _mm256_setzero_si256();                                                               \
        for (int j = 0; j < 8; j++) {                                                                    \
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));                    \
            _Pragma("GCC unroll 8")                                                                      \
            for (int r = 0; r < 8; r++) {                                                                \
                const __m256i q = _mm256_load_si256((const __m256i *)(s->q[r] + 32 * j));                \
                const __m256i p16 = _mm256_maddubs_epi16(q, xv); /* q ≤ 63: no saturation */             \
                p[r] = MADD_ACC(p[r], p16, s->sc[r][j]);                                                 \
            }                                                                                            \
        }                                                                                                \
        const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);                                \
        const __m256 dx = _mm256_set1_ps(x->d);                                                          \
        if (t == DY_Q6_K) {                                                                              \
            _Pragma("GCC unroll 8")                                                                      \
            for (int r = 0; r < 8; r++)                                                                  \
                p[r] = _mm256_sub_epi32(p[r], _mm256_madd_epi16(s->mn[r], bs));                          \
            acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(p)), _mm256_mul_ps(d, dx), acc[b]);  \
            continue;                                                                                    \
        }                                                                                                \
        _Pragma("GCC unroll 8")                                                                          \
        for (int r = 0; r < 8; r++)                                                                      \
            m[r] = _mm256_madd_epi16(s->mn[r], bs);                                                      \
        __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(p)), _mm256_mul_ps(d, dx), acc[b]);    \
        acc[b] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(hsum8_epi32(m)), _mm256_mul_ps(dmin, dx), a);       \
    }

/* ------------------------------------------------------------------ packed Q8_0 blocks */

/* The packed int8 paths (kernels_avx512.c, and kernels_zmm.c with two of these side by side):
 * blocks of 8 weight rows transposed so that lane r of a register is row r; see
 * dy_avx512_q8_rows_packed. Activation blocks are tabled PK_BLOCKS at a time. */
enum { PK_BLOCKS = KC / DY_QK };

/* 32 bytes of each of 8 rows (wp[r] + off), transposed as int32 and each byte xor-ed with
 * bias: out[g] lane r = bytes 4g … 4g+3 of row r. */
ALWAYS_INLINE void pack_block8(const int8_t *const wp[8], size_t off, __m256i out[8], char bias8)
{
    __m256i v[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        v[r] = _mm256_loadu_si256((const __m256i *)(wp[r] + off));
    /* 8×8 transpose of int32: v[r] lane g → out[g] lane r */
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
    }
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        u[4 * k] = _mm256_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        u[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    /* u[0..3]: rows 0-3, groups (0,4), (1,5), (2,6), (3,7) in the two halves; u[4..7]: rows 4-7 */
    const __m256i bias = _mm256_set1_epi8(bias8);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        out[g] = _mm256_xor_si256(_mm256_permute2x128_si256(u[g], u[g + 4], 0x20), bias);
        out[g + 4] = _mm256_xor_si256(_mm256_permute2x128_si256(u[g], u[g + 4], 0x31), bias);
    }
}

/* Lane r of block i of the tile: row r's values (wp[r] + i·wstride), offset to unsigned (w + 128)
 * and packed: out[g] lane r = bytes 4g … 4g+3 of row r. */
static inline void q8_pack_block(const int8_t *const wp[8], size_t off, __m256i out[8])
{
    pack_block8(wp, off, out, (char)0x80);
}

/* For activation rows [0, nb) of the chunk and blocks [k, k+nk): xs = 128·Σx, dx = the scale. */
static inline void q8_act_table(const uint8_t *act, size_t arb, int nb, int64_t k, int nk,
                                int32_t xs[][PK_BLOCKS], float dx[][PK_BLOCKS])
{
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int b = 0; b < nb; b++) {
        const dy_block_q8_0 *x = (const dy_block_q8_0 *)(act + (size_t)b * arb) + k;
        __m256i p[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const __m256i xv = i < nk ? _mm256_loadu_si256((const __m256i *)x[i].qs)
                                      : _mm256_setzero_si256();
            p[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, xv), ones16);
        }
        _mm256_storeu_si256((__m256i *)xs[b], _mm256_slli_epi32(hsum8_epi32(p), 7));
        for (int i = 0; i < nk; i++)
            dx[b][i] = _cvtsh_ss(x[i].d);
    }
}

/* ------------------------------------------------------------------ the AVX-512 VNNI kernels */

/* In kernels_avx512.c; called only at DY_SIMD_AVX512_VNNI. Each is the AVX2 kernel of the
 * same name in kernels_avx2.c with vpdpbusd / vpdpwssd for its int8 / int16 products, and
 * gives the same bits. */
__m256 dy_avx512_q8_0_direct(const uint8_t *const rows[8], int64_t nblk, size_t bb,
                             const dy_block_q8_0 *x, pf_range pf);
__m256i dy_avx512_q8_wsum(const int8_t *const wp[8], size_t off);
void dy_avx512_q8_chunk(const int8_t *const wp[8], size_t wstride, const __m256 *dw,
                        const __m256i *wsum, int nblk, const uint8_t *act, size_t arb, int nb,
                        __m256 *acc);
/* The packed path for many activation rows (no AVX2 counterpart). */
void dy_avx512_q8_rows_packed(dy_type t, const dy_mat *W, const void *act, int B, float *Y,
                              int64_t ldy, int64_t r0, int64_t r1, int64_t pf_end);
__m256i dy_avx512_q4k_direct_sb(const uint8_t *const rows[8], size_t off,
                                const dy_block_q8_k *x, __m128i bsp, __m256i *msum);
void dy_avx512_kq_superblock(dy_type t, const kq_scratch *s, __m256 d, __m256 dmin,
                             const uint8_t *act, size_t arb, int nb, __m256 *acc);

/* In kernels_zmm.c; called only at DY_SIMD_AVX512: kq_superblock on 512-bit registers (same
 * bits). */
void dy_zmm_kq_superblock(dy_type t, const kq_scratch *s, __m256 d, __m256 dmin,
                          const uint8_t *act, size_t arb, int nb, __m256 *acc);
/* dy_avx512_q4k_direct_sb (few activation rows: decode) with two 32-byte chunks to a zmm. */
__m256i dy_zmm_q4k_direct_sb(const uint8_t *const rows[8], size_t off, const dy_block_q8_k *x,
                             __m128i bsp, __m256i *msum);
/* In kernels_avx2.c, for kernels_zmm.c: the 8 rows' super-block at offset off, decoded into s
 * as kq_tile_shared does. */
void dy_avx2_kq_unpack8(dy_type t, const uint8_t *const rows[8], size_t off, kq_scratch *s);

#endif
