/* roofline.c — see roofline.h. */
#include "engine/roofline.h"
#include "util/clock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    dy_simd simd;
    const uint64_t *buf;
    size_t words;
    int passes; /* reads of the whole buffer per repetition */
    uint64_t sink[64];
} read_job;

static uint64_t read_sum_scalar(const uint64_t *p, size_t words, int passes)
{
    uint64_t s[8] = {0};
    for (int pass = 0; pass < passes; pass++)
        for (size_t i = 0; i + 8 <= words; i += 8)
            for (int k = 0; k < 8; k++)
                s[k] += p[i + k];
    return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

/* Each thread streams its own slice with the widest loads of the kernel level, as the decode
 * kernels read weights: a loop of narrower loads is bound by the core, not the memory. */
static void read_phase(void *ctx, int ith, int nth)
{
    read_job *j = ctx;
    size_t per = j->words / (size_t)nth, w0 = per * (size_t)ith;
    const uint64_t *p = j->buf + w0;
    switch (dy_roofline_width(j->simd)) {
    case 256: j->sink[ith % 64] = dy_read_sum_avx2(p, per, j->passes); break;
    case 512: j->sink[ith % 64] = dy_read_sum_avx512(p, per, j->passes); break;
    default: j->sink[ith % 64] = read_sum_scalar(p, per, j->passes);
    }
}

double dy_measure_read_gbps(dy_pool *pool, dy_simd simd, size_t bytes, int reps)
{
    read_job j = {.simd = simd};
    j.words = bytes / 8;
    const size_t gib = (size_t)1 << 30;
    j.passes = bytes >= gib ? 1 : (int)(gib / (bytes ? bytes : 1));
    uint64_t *buf = malloc(j.words * 8);
    if (!buf)
        return 0.0;
    memset(buf, 1, j.words * 8); /* touch every page before timing */
    j.buf = buf;
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        double t0 = dy_now();
        dy_pool_run(pool, read_phase, &j);
        double gbps = (double)(j.words * 8) * j.passes / (dy_now() - t0) / 1e9;
        if (gbps > best)
            best = gbps;
    }
    free(buf);
    return best;
}

/* Parses a sysfs cache size ("32768K", "1M", "512"). */
static size_t parse_cache_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    if (*end == 'K')
        v <<= 10;
    else if (*end == 'M')
        v <<= 20;
    else if (*end == 'G')
        v <<= 30;
    return (size_t)v;
}

size_t dy_llc_bytes(void)
{
    size_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], level[16] = "", size[32] = "";
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        bool ok = fgets(level, sizeof level, f) != NULL;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!ok || !(f = fopen(path, "r")))
            continue;
        ok = fgets(size, sizeof size, f) != NULL;
        fclose(f);
        if (ok && atoi(level) >= best_level) {
            best_level = atoi(level);
            best = parse_cache_size(size);
        }
    }
    return best;
}

int dy_roofline_width(dy_simd simd)
{
    switch (simd) {
    case DY_SIMD_AVX2:
    case DY_SIMD_AVX512_VNNI: return 256;
    case DY_SIMD_AVX512: return 512;
    default: return 0;
    }
}

typedef struct {
    dy_simd simd;
    long iters;
    float sink[64];
    int isink[64];
} fma_job;

static float fma_loop_scalar(long iters)
{
    float a[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 8; i++)
            a[i] = a[i] * 0.999999f + 1e-7f;
    return a[0] + a[7];
}

static int int8_loop_scalar(long iters)
{
    int32_t acc[8] = {0};
    uint8_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 8; i++)
            acc[i] += x[i] * (int8_t)(3 - i);
    return acc[0] + acc[7];
}

static void fma_phase(void *ctx, int ith, int nth)
{
    (void)nth;
    fma_job *j = ctx;
    switch (dy_roofline_width(j->simd)) {
    case 256: j->sink[ith % 64] = dy_fma_loop_avx2(j->iters); break;
    case 512: j->sink[ith % 64] = dy_fma_loop_avx512(j->iters); break;
    default: j->sink[ith % 64] = fma_loop_scalar(j->iters);
    }
}

static void int8_phase(void *ctx, int ith, int nth)
{
    (void)nth;
    fma_job *j = ctx;
    if (j->simd == DY_SIMD_AVX512)
        j->isink[ith % 64] = dy_int8_loop_avx512(j->iters);
    else if (j->simd == DY_SIMD_AVX512_VNNI)
        j->isink[ith % 64] = dy_int8_loop_avx512vnni_256(j->iters);
    else if (j->simd == DY_SIMD_AVX2)
        j->isink[ith % 64] = dy_int8_loop_avx2(j->iters);
    else
        j->isink[ith % 64] = int8_loop_scalar(j->iters);
}

/* Runs phase on every thread `reps` times; returns the best rate of `ops_per_thread`. */
static double best_rate(dy_pool *pool, void (*phase)(void *, int, int), fma_job *j,
                        double ops_per_thread, int reps)
{
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        double t0 = dy_now();
        dy_pool_run(pool, phase, j);
        double g = ops_per_thread * dy_pool_size(pool) / (dy_now() - t0) / 1e9;
        if (g > best)
            best = g;
    }
    return best;
}

double dy_measure_fma_gflops(dy_pool *pool, dy_simd simd, int reps)
{
    fma_job j = {.simd = simd, .iters = 20 * 1000 * 1000};
    double per_round;
    switch (dy_roofline_width(simd)) {
    case 256: per_round = 2.0 * 8 * 10; break;
    case 512: per_round = 2.0 * 16 * 12; break;
    default: per_round = 2.0 * 8;
    }
    return best_rate(pool, fma_phase, &j, per_round * j.iters, reps);
}

double dy_measure_int8_gops(dy_pool *pool, dy_simd simd, int reps)
{
    fma_job j = {.simd = simd, .iters = 10 * 1000 * 1000};
    double per_round = simd == DY_SIMD_AVX512      ? 2.0 * 64 * 12
                       : simd == DY_SIMD_AVX512_VNNI ? 2.0 * 32 * 10
                       : simd == DY_SIMD_AVX2      ? 2.0 * 32 * 8
                                                   : 2.0 * 8;
    return best_rate(pool, int8_phase, &j, per_round * j.iters, reps);
}
