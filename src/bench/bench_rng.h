/* bench_rng.h — deterministic random numbers for the load generator. Every random choice of a
 * benchmark (prompt tokens, lengths, group membership, arrival gaps) draws from a stream keyed
 * by (--seed, purpose, index), so request i has the same prompt whatever the timing, the
 * concurrency or the order in which requests finish. splitmix64: tiny state, any 64-bit seed is
 * a good seed, and streams keyed by hashing never overlap in practice. */
#ifndef DYAD_BENCH_RNG_H
#define DYAD_BENCH_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s;
} dyb_rng;

/* Purposes of keyed streams (mixed into the key so that, e.g., the block with hash id 7 and
 * request 7 do not get the same tokens). */
enum {
    DYB_DOMAIN_REQUEST = 1, /* per-request lengths, group choice and unique tokens */
    DYB_DOMAIN_GROUP,       /* a shared-prefix group's prefix tokens */
    DYB_DOMAIN_BLOCK,       /* a trace block's tokens, keyed by its hash id */
    DYB_DOMAIN_WARMUP,      /* warmup requests: fresh tokens, never shared with measured ones */
    DYB_DOMAIN_ARRIVAL,     /* open-loop inter-arrival gaps */
};

/* A 64-bit hash of (a, b): the seed of a keyed stream. */
uint64_t dyb_mix(uint64_t a, uint64_t b);
/* The stream for (seed, domain, key). */
dyb_rng dyb_rng_keyed(uint64_t seed, uint64_t domain, uint64_t key);

uint64_t dyb_rng_next(dyb_rng *r);
/* Uniform in the open interval (0, 1). */
double dyb_rng_uniform(dyb_rng *r);
/* Uniform integer in [0, n), without modulo bias; n > 0. */
uint64_t dyb_rng_below(dyb_rng *r, uint64_t n);
double dyb_rng_normal(dyb_rng *r);
/* Gamma(shape, scale) by Marsaglia–Tsang; mean shape·scale. shape > 0, scale > 0. */
double dyb_rng_gamma(dyb_rng *r, double shape, double scale);

/* The gap before the next arrival of an open loop at `rate` requests/s, in ms: gamma with shape
 * `burstiness` and mean 1000/rate, as vLLM's benchmark draws it (burstiness 1 = Poisson
 * arrivals; < 1 burstier, > 1 more regular). A rate of 0 means "all at once": gap 0. */
double dyb_interarrival_ms(dyb_rng *r, double rate, double burstiness);

#endif
