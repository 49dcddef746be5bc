/* kernels.h — the matrix products of the forward pass: Y = X · Wᵀ for a weight matrix W of
 * any supported type against f32 activations X holding B rows. A prefill chunk of P tokens
 * and a decode step of B sequences are both one call with B rows (never B matrix-vector
 * products). Activations are first converted once per call into the weight type's partner
 * format (Q8_0 for Q8_0/Q4_0, Q8_K for the K-quants, f32 otherwise), then each thread
 * computes a range of output rows for all B inputs, so every weight byte is read once per
 * call. AVX2+FMA code (with AVX-512 VNNI, and 512-bit AVX-512 kernels) is chosen at run time;
 * the scalar code is the portable reference. */
#ifndef DYAD_KERNELS_H
#define DYAD_KERNELS_H

#include "engine/quant.h"

/* Kernel levels, each the one before plus more: the portable C code; the AVX2+FMA+F16C
 * kernels; those kernels with AVX-512 VNNI (on 256-bit registers) for their integer products;
 * those with 512-bit kernels (AVX-512 F/BW/VL/VNNI on zmm registers) where they are faster.
 * Every level gives the same bits. */
typedef enum {
    DY_SIMD_SCALAR = 0,
    DY_SIMD_AVX2 = 1,
    DY_SIMD_AVX512_VNNI = 2,
    DY_SIMD_AVX512 = 3
} dy_simd;

/* The best level this CPU runs, capped by the environment variable DYAD_SIMD: "scalar" (the
 * portable code), "avx2" (no AVX-512) or "avx512vnni" (no 512-bit registers); unset or any
 * other value: the best. Read when an engine or a measurement starts, and passed down from
 * there, never per call. */
dy_simd dy_simd_detect(void);
/* "scalar", "avx2", "avx512vnni" or "avx512". */
const char *dy_simd_name(dy_simd s);
static inline bool dy_simd_has_avx2(dy_simd s)
{
    return s >= DY_SIMD_AVX2;
}

/* A weight matrix: rows × cols, row-major, each row `row_bytes` bytes of type `type`;
 * cols is the input dimension. The data is usually memory-mapped from the model file. */
typedef struct {
    dy_type type;
    int64_t rows, cols;
    size_t row_bytes;
    const void *data;
} dy_mat;

/* The activation format that weights of type t are multiplied against. */
dy_type dy_act_type(dy_type t);
/* Bytes needed to hold B rows of `cols` activations converted for weights of type t. */
size_t dy_act_bytes(dy_type t, int64_t cols, int B);
/* Convert rows [b0, b1) of X (B × cols f32, row stride ldx) into act (laid out for B rows). */
void dy_act_convert(dy_simd simd, dy_type t, const float *X, int64_t ldx, int64_t cols,
                    int b0, int b1, void *act);
/* Y[b*ldy + r] = dot(W row r, X row b) for r in [r0, r1) and b in [0, B); act comes from
 * dy_act_convert over all B rows. Threads call this on disjoint row ranges. */
void dy_matmul_rows(dy_simd simd, const dy_mat *W, const void *act, int B, float *Y,
                    int64_t ldy, int64_t r0, int64_t r1);
/* The same; rows [r1, pf_end) are the ones this thread will likely compute next, so the
 * kernels may prefetch them while computing the last rows of the range (memory-bound decode
 * otherwise stalls at the start of every range). pf_end ≤ W->rows. */
void dy_matmul_rows_pf(dy_simd simd, const dy_mat *W, const void *act, int B, float *Y,
                       int64_t ldy, int64_t r0, int64_t r1, int64_t pf_end);

#endif
