/* roofline_avx512.c — the peak loops that need AVX-512 (see roofline.h): int8 dpbusd on 256-
 * and 512-bit registers, and 512-bit FMA. Enough independent accumulators (10 or 12) cover
 * the latency × throughput of the cores that have these instructions. */
#include "engine/roofline.h"

#include <immintrin.h>

int dy_int8_loop_avx512vnni_256(long iters)
{
    const __m256i x = _mm256_set1_epi8(1), w = _mm256_set1_epi8(3);
    __m256i acc[10];
    for (int k = 0; k < 10; k++)
        acc[k] = _mm256_set1_epi32(k);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 10
        for (int k = 0; k < 10; k++)
            acc[k] = _mm256_dpbusd_epi32(acc[k], x, w);
    }
    __m256i s = acc[0];
    for (int k = 1; k < 10; k++)
        s = _mm256_add_epi32(s, acc[k]);
    return _mm256_extract_epi32(s, 0) ^ _mm256_extract_epi32(s, 7); /* xor: a sum may overflow */
}

int dy_int8_loop_avx512(long iters)
{
    const __m512i x = _mm512_set1_epi8(1), w = _mm512_set1_epi8(3);
    __m512i acc[12];
    for (int k = 0; k < 12; k++)
        acc[k] = _mm512_set1_epi32(k);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int k = 0; k < 12; k++)
            acc[k] = _mm512_dpbusd_epi32(acc[k], x, w);
    }
    __m512i s = acc[0];
    for (int k = 1; k < 12; k++)
        s = _mm512_xor_si512(s, acc[k]);
    /* Lanes combined by xor: their sum may overflow an int (undefined in C, not in SIMD). */
    const __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    return _mm256_extract_epi32(h, 0) ^ _mm256_extract_epi32(h, 7);
}

float dy_fma_loop_avx512(long iters)
{
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 acc[12];
    for (int k = 0; k < 12; k++)
        acc[k] = _mm512_set1_ps((float)k);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int k = 0; k < 12; k++)
            acc[k] = _mm512_fmadd_ps(acc[k], m, c);
    }
    __m512 s = acc[0];
    for (int k = 1; k < 12; k++)
        s = _mm512_add_ps(s, acc[k]);
    return _mm512_reduce_add_ps(s);
}

/* The 512-bit read loop: four sums of one cache line each per step. */
uint64_t dy_read_sum_avx512(const uint64_t *p, size_t words, int passes)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (int pass = 0; pass < passes; pass++)
        for (size_t i = 0; i + 32 <= words; i += 32) {
            s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
            s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + i + 8));
            s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p + i + 16));
            s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p + i + 24));
        }
    const __m512i s = _mm512_xor_si512(_mm512_xor_si512(s0, s1), _mm512_xor_si512(s2, s3));
    return (uint64_t)_mm512_reduce_add_epi64(s);
}
