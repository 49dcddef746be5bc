/* kv_codec_avx2.c — AVX2+F16C reading of KV rows (kv_codec.h): 8 values per instruction
 * (vcvtph2ps for f16; sign-extend, convert and one multiply by the row's scale for q8_0), the
 * same floats as the scalar code. */
#include "engine/kv_codec.h"
#include "engine/quant.h"

#include <immintrin.h>
#include <string.h>

static void decode_f16_row(const uint8_t *src, int hd, float *out)
{
    int i = 0;
    for (; i + 8 <= hd; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
    for (; i < hd; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * (size_t)i, sizeof h);
        out[i] = dy_f16_to_f32(h);
    }
}

static void decode_q8_0_row(const uint8_t *src, int hd, float *out)
{
    float d;
    memcpy(&d, src, sizeof d);
    const int8_t *q = (const int8_t *)(src + sizeof d);
    const __m256 vd = _mm256_set1_ps(d);
    int i = 0;
    for (; i + 8 <= hd; i += 8) {
        const __m256i w = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(w)));
    }
    for (; i < hd; i++)
        out[i] = d * (float)q[i];
}

void dy_kv_decode_head_avx2(dy_kv_type t, const uint8_t *src, size_t stride, int n,
                            int head_dim, float *out)
{
    for (int j = 0; j < n; j++, src += stride, out += head_dim) {
        if (t == DY_KV_F16)
            decode_f16_row(src, head_dim, out);
        else if (t == DY_KV_Q8_0)
            decode_q8_0_row(src, head_dim, out);
        else
            memcpy(out, src, sizeof(float) * (size_t)head_dim);
    }
}
