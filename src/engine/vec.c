/* vec.c — see vec.h. The scalar dot keeps four partial sums, the same association the
 * compiler may not introduce on its own. */
#include "engine/vec.h"

float dy_vec_dot(dy_simd simd, const float *a, const float *b, int n)
{
    if (simd == DY_SIMD_AVX2)
        return dy_vec_dot_avx2(a, b, n);
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void dy_vec_axpy(dy_simd simd, float *y, float a, const float *x, int n)
{
    if (simd == DY_SIMD_AVX2) {
        dy_vec_axpy_avx2(y, a, x, n);
        return;
    }
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}
