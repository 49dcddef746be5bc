/* roofline.c — see roofline.h. */
#include "engine/roofline.h"
#include "util/clock.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint64_t *buf;
    size_t words;
    uint64_t sink[64];
} read_job;

/* Integer sums vectorise without reassociation concerns, so this loop streams at full rate. */
static void read_phase(void *ctx, int ith, int nth)
{
    read_job *j = ctx;
    size_t per = j->words / (size_t)nth, w0 = per * (size_t)ith;
    const uint64_t *p = j->buf + w0;
    uint64_t s[8] = {0};
    for (size_t i = 0; i + 8 <= per; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += p[i + k];
    j->sink[ith % 64] = s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

double dy_measure_read_gbps(dy_pool *pool, size_t bytes, int reps)
{
    read_job j = {0};
    j.words = bytes / 8;
    uint64_t *buf = malloc(j.words * 8);
    if (!buf)
        return 0.0;
    memset(buf, 1, j.words * 8); /* touch every page before timing */
    j.buf = buf;
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        double t0 = dy_now();
        dy_pool_run(pool, read_phase, &j);
        double gbps = (double)(j.words * 8) / (dy_now() - t0) / 1e9;
        if (gbps > best)
            best = gbps;
    }
    free(buf);
    return best;
}

typedef struct {
    dy_simd simd;
    long iters;
    float sink[64];
} fma_job;

static float fma_loop_scalar(long iters)
{
    float a[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 8; i++)
            a[i] = a[i] * 0.999999f + 1e-7f;
    return a[0] + a[7];
}

static void fma_phase(void *ctx, int ith, int nth)
{
    (void)nth;
    fma_job *j = ctx;
    j->sink[ith % 64] = dy_simd_has_avx2(j->simd) ? dy_fma_loop_avx2(j->iters)
                                                : fma_loop_scalar(j->iters);
}

double dy_measure_fma_gflops(dy_pool *pool, dy_simd simd, int reps)
{
    fma_job j = {.simd = simd, .iters = 20 * 1000 * 1000};
    double flops_per_thread = dy_simd_has_avx2(simd) ? 2.0 * 8 * 10 * j.iters : 2.0 * 8 * j.iters;
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        double t0 = dy_now();
        dy_pool_run(pool, fma_phase, &j);
        double g = flops_per_thread * dy_pool_size(pool) / (dy_now() - t0) / 1e9;
        if (g > best)
            best = g;
    }
    return best;
}
