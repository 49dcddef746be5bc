/* vec_avx2.c — AVX2+FMA version of vec.h's attention chunk. Scores are computed 8 keys at a
 * time (8 accumulators over the head dimension, reduced together by one hadd tree, so there is
 * no horizontal sum per key), exponentials 8 lanes at a time with a polynomial, and the values
 * are summed into the output held in registers, 64 dimensions at a time. vec.c performs the
 * same float operations in the same order, so both levels give the same bits. */
#include "engine/vec.h"

#include <immintrin.h>
#include <math.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

ALWAYS_INLINE float hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Lane r of the result is the sum of the 8 lanes of v[r]. */
ALWAYS_INLINE __m256 hsum8(const __m256 v[8])
{
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

/* e^x for x ≤ 0 (what softmax needs), within about 2 ulp of expf: x = n·ln2 + r with |r| ≤
 * ln2/2 (ln2 in two parts), e^r by Cephes' degree-7 polynomial, 2^n into the exponent. Below
 * -87.3 the result is 2^-126 (≈1e-38) instead of a denormal: nothing a softmax sum notices. */
ALWAYS_INLINE __m256 exp_ps(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3365448f));
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

/* q · key for one key (the chunk's last few, past the last multiple of 8): the same lanes and
 * reduction order as one lane of dot8, so every score is computed alike. */
ALWAYS_INLINE float dot1(const float *q, const float *k, int hd, int hd8)
{
    __m256 acc = _mm256_setzero_ps();
    for (int d = 0; d < hd8; d += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc);
    float l[8];
    _mm256_storeu_ps(l, acc);
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    if (hd8 < hd) {
        float t = 0;
        for (int d = hd8; d < hd; d++)
            t = fmaf(q[d], k[d], t);
        s += t;
    }
    return s;
}

/* Scores of keys j … j+7 (lane r: key j+r), unscaled. */
ALWAYS_INLINE __m256 dot8(const float *q, const float *k, size_t stride, int hd, int hd8)
{
    __m256 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        acc[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd8; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            acc[r] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + r * stride + d), acc[r]);
    }
    __m256 s = hsum8(acc);
    if (hd8 < hd) {
        float t[8];
        for (int r = 0; r < 8; r++) {
            t[r] = 0;
            for (int d = hd8; d < hd; d++)
                t[r] = fmaf(q[d], k[r * stride + d], t[r]);
        }
        s = _mm256_add_ps(s, _mm256_loadu_ps(t));
    }
    return s;
}

/* o[0 … 8·NV) += Σ_j p[j]·v_j[0 … 8·NV), with the NV output vectors in registers; two sets of
 * accumulators (even and odd keys) when NV is small, so enough FMA chains are in flight. */
ALWAYS_INLINE void pv(int NV, float *o, const float *v, size_t stride, const float *p, int nv)
{
    __m256 a[8], b[8];
#pragma GCC unroll 8
    for (int r = 0; r < NV; r++) {
        a[r] = _mm256_loadu_ps(o + 8 * r);
        b[r] = _mm256_setzero_ps();
    }
    int j = 0;
    if (NV <= 4) {
        for (; j + 2 <= nv; j += 2) {
            const __m256 p0 = _mm256_broadcast_ss(p + j), p1 = _mm256_broadcast_ss(p + j + 1);
            const float *v0 = v + (size_t)j * stride, *v1 = v0 + stride;
#pragma GCC unroll 4
            for (int r = 0; r < NV; r++) {
                a[r] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v0 + 8 * r), a[r]);
                b[r] = _mm256_fmadd_ps(p1, _mm256_loadu_ps(v1 + 8 * r), b[r]);
            }
        }
    }
    for (; j < nv; j++) {
        const __m256 pj = _mm256_broadcast_ss(p + j);
        const float *vj = v + (size_t)j * stride;
#pragma GCC unroll 8
        for (int r = 0; r < NV; r++)
            a[r] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * r), a[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NV; r++)
        _mm256_storeu_ps(o + 8 * r, NV <= 4 ? _mm256_add_ps(a[r], b[r]) : a[r]);
}

void dy_attn_chunk_avx2(dy_attn_query *qs, int nq, const float *k, const float *v,
                        size_t stride, int n, int hd, float scale)
{
    (void)n;
    const int hd8 = hd & ~7;
    const __m256 vscale = _mm256_set1_ps(scale);
    float s[DY_ATTN_CHUNK + 8] __attribute__((aligned(32)));
    for (int i = 0; i < nq; i++) {
        dy_attn_query *a = &qs[i];
        const int nv = a->nvalid;
        if (nv <= 0)
            continue;
        const float *q = a->q;
        float *o = a->o;
        /* scores and their max */
        __m256 vmax = _mm256_set1_ps(-INFINITY);
        int j = 0;
        for (; j + 8 <= nv; j += 8) {
            const __m256 sv = _mm256_mul_ps(dot8(q, k + (size_t)j * stride, stride, hd, hd8), vscale);
            _mm256_store_ps(s + j, sv);
            vmax = _mm256_max_ps(vmax, sv);
        }
        float cm = hmax(vmax);
        for (; j < nv; j++) {
            s[j] = dot1(q, k + (size_t)j * stride, hd, hd8) * scale;
            cm = s[j] > cm ? s[j] : cm;
        }
        /* a larger max rescales what came before */
        if (cm > a->m) {
            if (a->m != -INFINITY) {
                const float corr = expf(a->m - cm);
                const __m256 vc = _mm256_set1_ps(corr);
                a->l *= corr;
                int d = 0;
                for (; d + 8 <= hd; d += 8)
                    _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), vc));
                for (; d < hd; d++)
                    o[d] *= corr;
            }
            a->m = cm;
        }
        /* weights exp(s - m), the lanes past nv zeroed */
        const __m256 mv = _mm256_set1_ps(a->m);
        for (int t = nv; t < ((nv + 7) & ~7); t++)
            s[t] = a->m;
        __m256 lsum = _mm256_setzero_ps();
        for (j = 0; j < nv; j += 8) {
            __m256 p = exp_ps(_mm256_sub_ps(_mm256_load_ps(s + j), mv));
            if (j + 8 > nv) {
                const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                p = _mm256_and_ps(p, _mm256_castsi256_ps(
                                         _mm256_cmpgt_epi32(_mm256_set1_epi32(nv - j), lane)));
            }
            _mm256_store_ps(s + j, p);
            lsum = _mm256_add_ps(lsum, p);
        }
        a->l += hsum(lsum);
        /* values */
        int d = 0;
        for (; d + 64 <= hd8; d += 64)
            pv(8, o + d, v + d, stride, s, nv);
        if (d + 32 <= hd8) {
            pv(4, o + d, v + d, stride, s, nv);
            d += 32;
        }
        if (d + 16 <= hd8) {
            pv(2, o + d, v + d, stride, s, nv);
            d += 16;
        }
        if (d + 8 <= hd8) {
            pv(1, o + d, v + d, stride, s, nv);
            d += 8;
        }
        for (; d < hd; d++) {
            float acc = o[d];
            for (j = 0; j < nv; j++)
                acc = fmaf(s[j], v[(size_t)j * stride + d], acc);
            o[d] = acc;
        }
    }
}
