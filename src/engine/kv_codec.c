/* kv_codec.c — see kv_codec.h: the scalar code, and the choice of level. */
#include "engine/kv_codec.h"
#include "engine/quant.h"

#include <math.h>
#include <string.h>

static void encode_q8_0(const float *x, int head_dim, uint8_t *dst)
{
    float amax = 0.0f;
    for (int i = 0; i < head_dim; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    memcpy(dst, &d, sizeof d);
    int8_t *q = (int8_t *)(dst + sizeof d);
    for (int i = 0; i < head_dim; i++) {
        float r = roundf(x[i] * id);
        q[i] = (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
    }
}

void dy_kv_encode_row(dy_kv_type t, const float *x, int kv_dim, int head_dim, uint8_t *dst)
{
    switch (t) {
    case DY_KV_F16:
        for (int i = 0; i < kv_dim; i++) {
            const uint16_t h = dy_f32_to_f16(x[i]);
            memcpy(dst + 2 * (size_t)i, &h, sizeof h);
        }
        return;
    case DY_KV_Q8_0:
        for (int h = 0; h < kv_dim / head_dim; h++)
            encode_q8_0(x + (size_t)h * head_dim, head_dim,
                        dst + (size_t)h * dy_kv_head_bytes(t, head_dim));
        return;
    default:
        memcpy(dst, x, sizeof(float) * (size_t)kv_dim);
    }
}

void dy_kv_decode_head(dy_simd simd, dy_kv_type t, const uint8_t *src, size_t stride, int n,
                       int head_dim, float *out)
{
    if (dy_simd_has_avx2(simd)) {
        dy_kv_decode_head_avx2(t, src, stride, n, head_dim, out);
        return;
    }
    for (int j = 0; j < n; j++, src += stride, out += head_dim) {
        if (t == DY_KV_F16) {
            for (int i = 0; i < head_dim; i++) {
                uint16_t h;
                memcpy(&h, src + 2 * (size_t)i, sizeof h);
                out[i] = dy_f16_to_f32(h);
            }
        } else if (t == DY_KV_Q8_0) {
            float d;
            memcpy(&d, src, sizeof d);
            const int8_t *q = (const int8_t *)(src + sizeof d);
            for (int i = 0; i < head_dim; i++)
                out[i] = d * (float)q[i];
        } else
            memcpy(out, src, sizeof(float) * (size_t)head_dim);
    }
}
