/* vec.h — the f32 vector work of attention: one chunk of keys and values against a handful of
 * queries, as a step of an online ("flash") softmax. AVX2+FMA when the engine runs that level,
 * portable scalar code otherwise (the same split as kernels.h). */
#ifndef DYAD_VEC_H
#define DYAD_VEC_H

#include "engine/kernels.h"

/* Keys per chunk at most (dy_attn_chunk's n). */
#define DY_ATTN_CHUNK 64

/* One query's running state. After all chunks, the attention output is o / l. */
typedef struct {
    const float *q; /* head_dim floats */
    float *o;       /* head_dim floats: Σ exp(s - m)·v over the keys seen so far (start at 0) */
    float m;        /* the largest scaled score seen so far (start at -INFINITY) */
    float l;        /* Σ exp(s - m) over the keys seen so far (start at 0) */
    int nvalid;     /* of the current chunk's n keys, the first nvalid are visible (causal) */
} dy_attn_query;

/* For each of the nq queries, folds in keys/values 0 … nvalid-1 of a chunk: key j is the
 * head_dim floats at k + j·stride, value j at v + j·stride, score = scale·(q · key j). The
 * queries share the chunk, so it is read from memory once and from L1 after that. */
void dy_attn_chunk(dy_simd simd, dy_attn_query *qs, int nq, const float *k, const float *v,
                   size_t stride, int n, int head_dim, float scale);

/* The AVX2 version (vec_avx2.c); callers go through the function above. */
void dy_attn_chunk_avx2(dy_attn_query *qs, int nq, const float *k, const float *v,
                        size_t stride, int n, int head_dim, float scale);

#endif
