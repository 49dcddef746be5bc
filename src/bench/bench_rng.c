/* bench_rng.c — see bench_rng.h. */
#include "bench/bench_rng.h"

#include <math.h>

static uint64_t finalize(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t dyb_mix(uint64_t a, uint64_t b)
{
    return finalize(a ^ finalize(b + 0x9e3779b97f4a7c15ULL));
}

dyb_rng dyb_rng_keyed(uint64_t seed, uint64_t domain, uint64_t key)
{
    return (dyb_rng){dyb_mix(dyb_mix(seed, domain), key)};
}

uint64_t dyb_rng_next(dyb_rng *r)
{
    return finalize(r->s += 0x9e3779b97f4a7c15ULL);
}

double dyb_rng_uniform(dyb_rng *r)
{
    return ((double)(dyb_rng_next(r) >> 11) + 0.5) * 0x1.0p-53;
}

uint64_t dyb_rng_below(dyb_rng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the short last bucket */
    uint64_t x;
    do
        x = dyb_rng_next(r);
    while (x >= limit);
    return x % n;
}

double dyb_rng_normal(dyb_rng *r)
{
    double u = dyb_rng_uniform(r), v = dyb_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

double dyb_rng_gamma(dyb_rng *r, double shape, double scale)
{
    if (shape < 1.0) /* Gamma(a) = Gamma(a + 1) · U^(1/a) */
        return dyb_rng_gamma(r, shape + 1.0, scale) * pow(dyb_rng_uniform(r), 1.0 / shape);
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = dyb_rng_normal(r), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = dyb_rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v * scale;
    }
}

double dyb_interarrival_ms(dyb_rng *r, double rate, double burstiness)
{
    if (rate <= 0 || !isfinite(rate))
        return 0;
    double theta = 1.0 / (rate * burstiness);
    return 1000.0 * dyb_rng_gamma(r, burstiness, theta);
}
