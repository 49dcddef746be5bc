/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *tu_path(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", DYAD_SOURCE_DIR, rel);
    return buf;
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    rewind(f);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (len)
        *len = (size_t)n;
    return buf;
}

int tu_exists(const char *path)
{
    return access(path, R_OK) == 0;
}

uint64_t tu_rng_u64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

float tu_rng_uniform(uint64_t *s)
{
    return ((float)(tu_rng_u64(s) >> 40) + 0.5f) / (float)(1 << 24);
}

float tu_rng_normal(uint64_t *s)
{
    const float u1 = tu_rng_uniform(s), u2 = tu_rng_uniform(s);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

void tu_fill_pattern(void *p, size_t n, unsigned salt)
{
    for (size_t i = 0; i < n; i++)
        ((uint8_t *)p)[i] = (uint8_t)(i * 31u + salt);
}

static double tu_step_cost(void *ctx, const dy_step_shape *sh)
{
    (void)ctx;
    return 1e-3 + 1e-5 * sh->prefill_tokens + 1e-4 * sh->decode_seqs;
}

static double tu_xfer_cost(void *ctx, int64_t bytes)
{
    (void)ctx;
    (void)bytes;
    return 5e-4;
}

const dy_step_costs tu_sim_costs = {tu_step_cost, tu_xfer_cost, NULL};

static double tu_plan_step(void *ctx, const dy_step_shape *s)
{
    (void)ctx;
    return 1e-3 + 1e-4 * s->prefill_tokens + 5e-4 * s->decode_seqs;
}

static double tu_plan_xfer(void *ctx, int64_t bytes)
{
    (void)ctx;
    return bytes > 0 ? 2.5e-4 : 0;
}

const dy_step_costs tu_plan_costs = {tu_plan_step, tu_plan_xfer, NULL};
