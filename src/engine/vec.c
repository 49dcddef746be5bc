/* vec.c — see vec.h. The portable code performs vec_avx2.c's float operations in the same
 * order (an exact fma where that uses an fma, the same 8-lane splits and reduction trees, the
 * same exp polynomial), so both kernel levels give the same bits: activations are re-quantised
 * after attention, where a last-bit difference could flip a rounding and grow through the
 * layers (kernels.c explains the same choice for the matrix products). */
#include "engine/vec.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/fmaf.h"

/* q · key: lane l sums the dimensions ≡ l (mod 8) below hd8 by fma, the lanes are added
 * ((0+1)+(2+3))+((4+5)+(6+7)), then the dimensions past hd8 (summed from 0 by fma). */
static float score_dot(const float *q, const float *k, int hd, int hd8)
{
    float l[8] = {0};
    for (int d = 0; d < hd8; d += 8)
        for (int i = 0; i < 8; i++)
            l[i] = dy_fmaf(q[d + i], k[d + i], l[i]);
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    if (hd8 < hd) {
        float t = 0;
        for (int d = hd8; d < hd; d++)
            t = dy_fmaf(q[d], k[d], t);
        s += t;
    }
    return s;
}

/* vec_avx2.c's exp_ps, one lane. */
static float exp_poly(float x)
{
    x = x < -87.3365448f ? -87.3365448f : x;
    const float fx = rintf(x * 1.44269504088896341f);
    float r = dy_fmaf(-fx, 0.693359375f, x);
    r = dy_fmaf(-fx, -2.12194440e-4f, r);
    float y = 1.9875691500e-4f;
    y = dy_fmaf(y, r, 1.3981999507e-3f);
    y = dy_fmaf(y, r, 8.3334519073e-3f);
    y = dy_fmaf(y, r, 4.1665795894e-2f);
    y = dy_fmaf(y, r, 1.6666665459e-1f);
    y = dy_fmaf(y, r, 5.0000001201e-1f);
    y = dy_fmaf(y, r * r, r + 1.0f);
    const uint32_t bits = (uint32_t)((int32_t)fx + 127) << 23;
    float p2;
    memcpy(&p2, &bits, sizeof p2);
    return y * p2;
}

void dy_attn_chunk(dy_simd simd, dy_attn_query *qs, int nq, const float *k, const float *v,
                   size_t stride, int n, int hd, float scale)
{
    if (dy_simd_has_avx2(simd)) {
        dy_attn_chunk_avx2(qs, nq, k, v, stride, n, hd, scale);
        return;
    }
    (void)n;
    const int hd8 = hd & ~7, hd64 = hd8 & ~63;
    float s[DY_ATTN_CHUNK];
    for (int i = 0; i < nq; i++) {
        dy_attn_query *a = &qs[i];
        const int nv = a->nvalid;
        if (nv <= 0)
            continue;
        float cm = -INFINITY;
        for (int j = 0; j < nv; j++) {
            s[j] = score_dot(a->q, k + (size_t)j * stride, hd, hd8) * scale;
            cm = s[j] > cm ? s[j] : cm;
        }
        if (cm > a->m) {
            if (a->m != -INFINITY) {
                const float corr = expf(a->m - cm);
                a->l *= corr;
                for (int d = 0; d < hd; d++)
                    a->o[d] *= corr;
            }
            a->m = cm;
        }
        /* weights, and their sum as 8 lanes (lane j mod 8) added ((0+4)+(2+6))+((1+5)+(3+7)) */
        float lane[8] = {0};
        for (int j = 0; j < nv; j++) {
            s[j] = exp_poly(s[j] - a->m);
            lane[j % 8] += s[j];
        }
        a->l += ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
        /* values: one fma chain per dimension in the 64-wide blocks; below hd8 past those,
         * even and odd keys in two chains added at the end; past hd8, one fma chain */
        for (int d = 0; d < hd; d++) {
            const float *vd = v + d;
            float acc = a->o[d];
            if (d < hd64 || d >= hd8) {
                for (int j = 0; j < nv; j++)
                    acc = dy_fmaf(s[j], vd[(size_t)j * stride], acc);
            } else {
                float odd = 0;
                int j = 0;
                for (; j + 2 <= nv; j += 2) {
                    acc = dy_fmaf(s[j], vd[(size_t)j * stride], acc);
                    odd = dy_fmaf(s[j + 1], vd[(size_t)(j + 1) * stride], odd);
                }
                if (j < nv)
                    acc = dy_fmaf(s[j], vd[(size_t)j * stride], acc);
                acc += odd;
            }
            a->o[d] = acc;
        }
    }
}
