/* quant.h — weight formats: ggml's tensor types and block layouts (F32, F16, BF16, Q8_0,
 * Q4_0, Q4_K, Q5_K, Q6_K), row sizes, dequantisation, quantisation, and conversions
 * between f32 and the half-precision formats. Everything here is pure arithmetic on
 * byte buffers: no allocation, no I/O. The layouts are bit-exact with ggml's so that GGUF
 * files written by llama.cpp load as they are. */
#ifndef DYAD_QUANT_H
#define DYAD_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* The numeric values are ggml's `enum ggml_type`, as stored in GGUF tensor infos. */
typedef enum {
    DY_F32 = 0,
    DY_F16 = 1,
    DY_Q4_0 = 2,
    DY_Q8_0 = 8,
    DY_Q4_K = 12,
    DY_Q5_K = 13,
    DY_Q6_K = 14,
    DY_Q8_K = 15, /* activations only: the partner of the K-quants in dot products */
    DY_BF16 = 30,
} dy_type;

#define DY_QK 32   /* elements per block of Q8_0 / Q4_0 */
#define DY_QK_K 256 /* elements per super-block of the K-quants and Q8_K */

/* True for the types dyad can load as weights (all of the above but Q8_K). */
bool dy_type_is_weight(uint32_t type);
/* "f32", "q4_k", ...; "unknown" for anything else (never NULL). */
const char *dy_type_name(uint32_t type);
/* Parses "f32", "q8_0", ... (case-insensitive); returns false if unknown. */
bool dy_type_parse(const char *name, dy_type *out);
/* Elements per block: 1 for F32/F16/BF16, 32 for Q8_0/Q4_0, 256 for the K types. */
int64_t dy_type_block_elems(dy_type t);
/* Bytes per block (e.g. 34 for Q8_0, 144 for Q4_K, 210 for Q6_K). */
size_t dy_type_block_bytes(dy_type t);
/* Bytes of a row of n elements; n must be a multiple of the block size (check first with
 * dy_type_row_ok). */
size_t dy_type_row_bytes(dy_type t, int64_t n);
bool dy_type_row_ok(dy_type t, int64_t n);

/* Half-precision scalars, round-to-nearest-even like ggml's. */
float dy_f16_to_f32(uint16_t h);
uint16_t dy_f32_to_f16(float f);
float dy_bf16_to_f32(uint16_t h);
uint16_t dy_f32_to_bf16(float f);

/* Dequantise n elements (n a multiple of the block size) of type t into f32. Bit-exact with
 * ggml's to_float. */
void dy_dequant_row(dy_type t, const void *src, float *dst, int64_t n);
/* Quantise n f32 elements into type t (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q8_K),
 * with ggml's reference rounding. */
void dy_quantize_row(dy_type t, const float *src, void *dst, int64_t n);

#endif
