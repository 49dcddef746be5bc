/* attention.c — see attention.h. Scores are computed key by key (dot products over the
 * head dimension), softmaxed, and the values summed with those weights. */
#include "engine/attention.h"
#include "engine/vec.h"

#include <math.h>
#include <string.h>

size_t dy_attention_scratch_floats(int max_len, int head_dim)
{
    (void)head_dim;
    return (size_t)max_len;
}

static void softmax(float *x, int n)
{
    float max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] /= sum;
}

/* One (token, head) pair. */
static void attend_one(const dy_attn *a, int t, int h, float *scores)
{
    const int hd = a->head_dim, kvd = a->n_kv_heads * hd, bs = a->kv->block_size;
    const int kvh = h / (a->n_heads / a->n_kv_heads);
    const float *q = a->q + (size_t)t * a->n_heads * hd + (size_t)h * hd;
    const dy_tok_slot *s = &a->slots[t];
    const float scale = 1.0f / sqrtf((float)hd);
    for (int p = 0; p <= s->pos; p++) {
        const float *k = dy_kv_keys(a->kv, s->blocks[p / bs], a->layer) + (size_t)(p % bs) * kvd;
        scores[p] = dy_vec_dot(a->simd, q, k + (size_t)kvh * hd, hd) * scale;
    }
    softmax(scores, s->pos + 1);
    float *out = a->out + (size_t)t * a->n_heads * hd + (size_t)h * hd;
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int p = 0; p <= s->pos; p++) {
        const float *v = dy_kv_values(a->kv, s->blocks[p / bs], a->layer) + (size_t)(p % bs) * kvd;
        dy_vec_axpy(a->simd, out, scores[p], v + (size_t)kvh * hd, hd);
    }
}

void dy_attention(const dy_attn *a, int ith, int nth)
{
    float *scores = a->scratch + (size_t)ith * a->scratch_floats;
    for (int i = ith; i < a->T * a->n_heads; i += nth)
        attend_one(a, i / a->n_heads, i % a->n_heads, scores);
}
