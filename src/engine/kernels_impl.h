/* kernels_impl.h — private to quant.c, kernels.c and kernels_{avx2,avx512,zmm}.c: ggml's block
 * layouts as C structs, the "unpacked" form the matmul tiles work on, and the entry points of
 * the AVX2 code. Nothing outside those files should include this. */
#ifndef DYAD_KERNELS_IMPL_H
#define DYAD_KERNELS_IMPL_H

#include "engine/kernels.h"

#include <assert.h>
#include <string.h>

/* ---- ggml block layouts (byte-exact; the static asserts pin the sizes) ---- */

typedef struct {
    uint16_t d;          /* f16 scale */
    int8_t qs[DY_QK];    /* values */
} dy_block_q8_0;

typedef struct {
    uint16_t d;              /* f16 scale */
    uint8_t qs[DY_QK / 2];   /* element j in the low nibble of qs[j], j+16 in the high; value q-8 */
} dy_block_q4_0;

typedef struct {
    uint16_t d, dmin;        /* f16 super-block scales for the 6-bit scales and mins */
    uint8_t scales[12];      /* 8 scales + 8 mins, 6 bits each (see get_scale_min_k4) */
    uint8_t qs[DY_QK_K / 2]; /* 4-bit values, 64 elements per 32 bytes (low nibbles first) */
} dy_block_q4_k;

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[DY_QK_K / 8]; /* 5th bits */
    uint8_t qs[DY_QK_K / 2]; /* low 4 bits, same order as Q4_K */
} dy_block_q5_k;

typedef struct {
    uint8_t ql[DY_QK_K / 2];      /* low 4 bits */
    uint8_t qh[DY_QK_K / 4];      /* high 2 bits */
    int8_t scales[DY_QK_K / 16];  /* one per 16 elements */
    uint16_t d;                   /* f16 super-block scale */
} dy_block_q6_k;

typedef struct {
    float d;
    int8_t qs[DY_QK_K];
    int16_t bsums[DY_QK_K / 16]; /* sum of each group of 16 qs */
} dy_block_q8_k;

static_assert(sizeof(dy_block_q8_0) == 34, "q8_0 block");
static_assert(sizeof(dy_block_q4_0) == 18, "q4_0 block");
static_assert(sizeof(dy_block_q4_k) == 144, "q4_k block");
static_assert(sizeof(dy_block_q5_k) == 176, "q5_k block");
static_assert(sizeof(dy_block_q6_k) == 210, "q6_k block");
static_assert(sizeof(dy_block_q8_k) == 292, "q8_k block");

/* ggml's 6-bit scale/min unpacking for Q4_K and Q5_K sub-block j (0..7). */
static inline void dy_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static inline uint16_t dy_rd16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ---- K-quant super-block in the one form all three K types reduce to ----
 * For a weight super-block w and a Q8_K block x:
 *   dot = d·dx·Σ_g sc[g]·Σ_{i∈g} q[i]·x[i]  −  dmin·dx·Σ_g mn[g]·bsums[g]
 * with q unsigned (0..63), g the 16 groups of 16 elements. Q4_K/Q5_K: sc, mn are the 6-bit
 * sub-block scale and min (repeated for both halves of a 32-element sub-block); Q6_K stores
 * q+32 so mn = 32·sc and dmin = d. */
typedef struct {
    uint8_t q[DY_QK_K];
    int16_t sc[DY_QK_K / 16];
    int16_t mn[DY_QK_K / 16];
    float d, dmin;
} dy_kq_unpacked;

void dy_kq_unpack(dy_type t, const void *block, dy_kq_unpacked *u);

/* ---- AVX2 entry points (kernels_avx2.c; only called when the CPU has AVX2+FMA+F16C) ---- */
void dy_avx2_act_q8_0(const float *x, void *dst, int64_t n);
void dy_avx2_act_q8_k(const float *x, void *dst, int64_t n);
/* simd ≥ DY_SIMD_AVX2: at DY_SIMD_AVX512_VNNI and above, also the AVX-512 VNNI kernels; at
 * DY_SIMD_AVX512, the 512-bit K-quant products inside the shared path (same bits). */
void dy_avx2_matmul(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy,
                    int64_t r0, int64_t r1, int64_t pf_end, dy_simd simd);

/* ---- the 512-bit level (kernels_zmm.c; only called at DY_SIMD_AVX512) ----
 * Its own kernels where it has them, the AVX2 code with its AVX-512 VNNI variants otherwise. */
void dy_zmm_matmul(const dy_mat *W, const void *act, int B, float *Y, int64_t ldy, int64_t r0,
                   int64_t r1, int64_t pf_end);
/* The activation conversions of dy_avx2_act_q8_0 / _q8_k on 512-bit registers (same bytes). */
void dy_zmm_act_q8_0(const float *x, void *dst, int64_t n);
void dy_zmm_act_q8_k(const float *x, void *dst, int64_t n);

#endif
