/* attention.h — causal grouped-query attention over the paged KV pool for one layer of a
 * step: every (token, head) of the step attends to positions 0 … pos of its own sequence,
 * reading keys and values block by block through the sequence's block table. */
#ifndef DYAD_ATTENTION_H
#define DYAD_ATTENTION_H

#include <stddef.h>
#include <stdint.h>
#include "engine/kernels.h"
#include "kv/kv_pool.h"

/* Where a token of the step lives: its sequence's block table and its position. */
typedef struct {
    const int32_t *blocks;
    int pos;
} dy_tok_slot;

typedef struct {
    const dy_kv_pool *kv;
    int layer;
    int n_heads, n_kv_heads, head_dim;
    int T;                      /* tokens in the step */
    const dy_tok_slot *slots;   /* T entries */
    const float *q;             /* [T][n_heads × head_dim], RoPE applied */
    float *out;                 /* [T][n_heads × head_dim] */
    float *scratch;             /* per thread: dy_attention_scratch_floats() floats each */
    size_t scratch_floats;
    dy_simd simd;
} dy_attn;

/* Scratch floats one thread needs for sequences of up to max_len positions. */
size_t dy_attention_scratch_floats(int max_len, int head_dim);
/* Thread ith of nth computes its share of the step's (token, head) pairs. Results agree with
 * a softmax over exact scores to float rounding (the order of the sums differs with the
 * kernel level and with how the step's tokens are grouped). */
void dy_attention(const dy_attn *a, int ith, int nth);

#endif
