/* fmaf.h — a correctly rounded float fused multiply-add for the scalar kernels (kernels.c,
 * vec.c), which must match the AVX2 FMA bit for bit. Where fmaf is a hardware instruction it
 * is used as is; otherwise libm's is far too slow for an inner loop, so: the product of two
 * floats is exact in double, the double sum is made round-to-odd using its exact error
 * (TwoSum), and a round-to-odd double (29 more bits than a float) rounds to the correctly
 * rounded float. */
#ifndef DYAD_FMAF_H
#define DYAD_FMAF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef FP_FAST_FMAF
#define dy_fmaf fmaf
#else
static inline float dy_fmaf(float a, float b, float c)
{
    const double p = (double)a * b, t = p + c;
    const double bv = t - p, e = (p - (t - bv)) + (c - bv);
    uint64_t u;
    memcpy(&u, &t, sizeof u);
    if (e != 0 && !(u & 1)) { /* inexact and even: step to the odd neighbour on e's side */
        u += (e > 0) == (t > 0) ? 1 : (uint64_t)-1;
        double odd;
        memcpy(&odd, &u, sizeof odd);
        return (float)odd;
    }
    return (float)t;
}
#endif

#endif
