/* vec.h — the f32 vector operations of attention: dot products of a query with keys, and
 * the weighted sum of values. AVX2+FMA when the engine runs that level, portable scalar code
 * otherwise (the same split as kernels.h). */
#ifndef DYAD_VEC_H
#define DYAD_VEC_H

#include "engine/kernels.h"

/* sum a[i]·b[i] over n floats */
float dy_vec_dot(dy_simd simd, const float *a, const float *b, int n);
/* y[i] += a · x[i] over n floats */
void dy_vec_axpy(dy_simd simd, float *y, float a, const float *x, int n);

/* The AVX2 versions (vec_avx2.c); callers go through the functions above. */
float dy_vec_dot_avx2(const float *a, const float *b, int n);
void dy_vec_axpy_avx2(float *y, float a, const float *x, int n);

#endif
