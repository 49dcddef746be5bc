/* kv_codec.h — the engine's side of the KV element types (kv/kv_pool.h describes their
 * layout): writing a position's f32 keys or values into a pool row, and reading a chunk of one
 * head's rows back as f32 for attention. Reading is exact (f16 → f32 and d·q are exact or one
 * correctly rounded product), so every kernel level reads the same floats. */
#ifndef DYAD_KV_CODEC_H
#define DYAD_KV_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include "engine/kernels.h"
#include "kv/kv_pool.h"

/* Writes kv_dim floats x (n_kv_heads heads of head_dim) as one row of type t at dst.
 * f16 rounds to nearest even; q8_0 rounds each x / d to the nearest integer, so every stored
 * value is within d/2 = max|x of its head| / 254 of x (and f16 within 2^-11 relative). */
void dy_kv_encode_row(dy_kv_type t, const float *x, int kv_dim, int head_dim, uint8_t *dst);

/* Reads n rows of one head (head_dim values each) as f32: row j's head segment starts at
 * src + j·stride bytes; out gets n × head_dim floats. */
void dy_kv_decode_head(dy_simd simd, dy_kv_type t, const uint8_t *src, size_t stride, int n,
                       int head_dim, float *out);

/* The AVX2 version (kv_codec_avx2.c); callers go through the function above. */
void dy_kv_decode_head_avx2(dy_kv_type t, const uint8_t *src, size_t stride, int n,
                            int head_dim, float *out);

#endif
