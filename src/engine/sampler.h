/* sampler.h — choosing the next token from logits: greedy, or temperature with top-k,
 * top-p (nucleus) and min-p filters, drawn from a per-request random stream so that a
 * request with a seed is reproducible; and the log-probabilities of the chosen token and
 * its top-N alternatives. Pure: no allocation after dy_sampler_new, no global state. */
#ifndef DYAD_SAMPLER_H
#define DYAD_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
    uint64_t seed;
} dy_sampling;

/* Defaults: temperature 1, no filters, seed 0. */
dy_sampling dy_sampling_default(void);
/* NULL if valid, else a message naming the bad field. */
const char *dy_sampling_check(const dy_sampling *s);

/* A random stream (xoshiro256**), seeded by splitmix64 from (seed, stream): sample i of a
 * request uses stream i, so n samples of one seeded request differ yet repeat exactly. */
typedef struct {
    uint64_t s[4];
} dy_rng;
void dy_rng_seed(dy_rng *r, uint64_t seed, uint64_t stream);
uint64_t dy_rng_next(dy_rng *r);
/* Uniform in [0, 1). */
float dy_rng_float(dy_rng *r);

typedef struct dy_sampler dy_sampler;
dy_sampler *dy_sampler_new(int vocab_size);
void dy_sampler_free(dy_sampler *s);

/* Picks a token from logits (not modified). */
int32_t dy_sample(dy_sampler *s, const dy_sampling *cfg, dy_rng *rng, const float *logits);

/* Log-softmax of the raw logits at `id`; with n_top > 0 also the n_top most likely ids and
 * their log-probabilities, most likely first. */
float dy_logprob(dy_sampler *s, const float *logits, int32_t id, int n_top, int32_t *top_ids,
                 float *top_lps);

/* Index of the largest logit (the first one on ties). */
int32_t dy_argmax(const float *logits, int n);

#endif
