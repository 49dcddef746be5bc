/* roofline_avx2.c — the FMA peak loop, compiled for AVX2+FMA (see roofline.h). Ten
 * independent accumulators, held in named registers, cover the FMA latency × throughput of
 * current cores (two FMA ports × four or five cycles). */
#include "engine/roofline.h"

#include <immintrin.h>

float dy_fma_loop_avx2(long iters)
{
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2);
    __m256 a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5);
    __m256 a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8);
    __m256 a9 = _mm256_set1_ps(9);
    for (long n = 0; n < iters; n++) {
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(a8, a9));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

/* The int8 product of the AVX2 kernels: maddubs (u8 × s8 pairs summed to s16), madd against
 * ones (to s32), add. The empty asm tells the compiler the inputs change every round, so it
 * cannot hoist the products out of the loop; it emits no instruction. */
int dy_int8_loop_avx2(long iters)
{
    const __m256i w = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    __m256i x[8], acc[8];
    for (int k = 0; k < 8; k++) {
        x[k] = _mm256_set1_epi8((char)(k + 1));
        acc[k] = _mm256_setzero_si256();
    }
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __asm__("" : "+x"(x[k]));
            acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(x[k], w), ones));
        }
    }
    __m256i s = acc[0];
    for (int k = 1; k < 8; k++)
        s = _mm256_add_epi32(s, acc[k]);
    return _mm256_extract_epi32(s, 0) ^ _mm256_extract_epi32(s, 7); /* xor: a sum may overflow */
}

/* Four independent 64-bit sums of 256-bit loads: two loads a cycle keep a core's share of
 * DRAM or the last-level cache busy without the adds becoming the limit. */
uint64_t dy_read_sum_avx2(const uint64_t *p, size_t words, int passes)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (int pass = 0; pass < passes; pass++)
        for (size_t i = 0; i + 16 <= words; i += 16) {
            s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(p + i)));
            s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
            s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
            s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
        }
    const __m256i s = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
    return (uint64_t)_mm256_extract_epi64(s, 0) ^ (uint64_t)_mm256_extract_epi64(s, 3);
}
