/* forward.c — the llama forward pass over a step of spans (see forward.h). Read top to
 * bottom: the small kernels, the parallel phases (matrix products, attention, the work done
 * token by token), then dy_engine_step, which is the whole transformer in one screen. Every
 * phase runs on all the pool's threads. */
#include "engine/forward.h"
#include "engine/attention.h"
#include "engine/kv_codec.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dy_engine {
    const dy_model *m;
    dy_kv_pool *kv;
    dy_pool *pool;
    dy_simd simd;
    int max_tokens;
    /* Scratch, sized for max_tokens tokens. */
    float *x;      /* residual stream  [T][dim] */
    float *xb;     /* normed input     [T][max(dim, q_dim)] */
    float *q;      /* queries          [T][q_dim] */
    float *k, *v;  /* new keys, values [T][kv_dim] */
    float *att;    /* attention output [T][q_dim] */
    float *hg, *hu;/* FFN gate and up  [T][hidden] */
    float *scores; /* attention scratch, per thread */
    size_t scores_per_thread;
    void *act[2];  /* converted activations, two formats at most per phase */
    size_t act_cap;
    float *inv_freq; /* RoPE: n_rot / 2 frequencies */
    dy_tok_slot *slots;
    int32_t *tok;    /* the step's token ids [T] */
    int *logit_src;  /* row of x each logits row is computed from [T] */
    /* Phase timing (dy_engine_time_phases): off while clock is NULL. */
    double (*clock)(void);
    dy_phase_times *times;
    double lap_start; /* when the phase being timed began */
};

/* The time since the last lap goes to phase p (nothing is read while timing is off). */
static void lap(dy_engine *e, dy_phase p)
{
    if (!e->clock)
        return;
    const double now = e->clock();
    e->times->s[p] += now - e->lap_start;
    e->lap_start = now;
}

/* ---------------------------------------------------------------- small kernels */

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    ss = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++)
        out[i] = w[i] * (ss * x[i]);
}

/* Rotates the first n_rot dimensions of each head in adjacent pairs (x[2i], x[2i+1]): the
 * layout of llama2.c checkpoints and of GGUF llama files. */
static void rope(float *x, int n_heads, int head_dim, int n_rot, const float *inv_freq, int pos)
{
    for (int i = 0; i < n_rot; i += 2) {
        float val = (float)pos * inv_freq[i / 2];
        float c = cosf(val), s = sinf(val);
        for (int h = 0; h < n_heads; h++) {
            float *p = x + h * head_dim + i;
            float v0 = p[0], v1 = p[1];
            p[0] = v0 * c - v1 * s;
            p[1] = v0 * s + v1 * c;
        }
    }
}

static inline float silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* ---------------------------------------------------------------- parallel matmul */

/* Up to three products that share one input (Q, K, V; or gate and up) in one phase.
 *
 * Each thread has a home range of every matrix's rows (the same share, in multiples of 8 rows
 * so SIMD tiles stay whole), cut into chunks of CHUNK_ROWS. A thread computes its own chunks in
 * order from the front (one contiguous stream of weights, which the kernels prefetch ahead of
 * use across chunk boundaries), then takes chunks from the back of the other threads' ranges
 * until none are left. Static shares alone left the faster thread idle for part of every
 * decode step (the caller starts first; other processes take cores on a shared machine;
 * docs/engine.md, "Kernel choices"); stealing from the back keeps the owners' streams
 * contiguous. */
#define CHUNK_ROWS 64
#define MAX_POOL 256 /* dy_engine_new's thread limit */

typedef struct {
    dy_engine *e;
    int n;
    const dy_mat *w[3];
    float *out[3];
    const void *act[3];
    int B;
    /* [matrix][home thread]: chunks [front, back) of the home range not yet taken, packed as
     * front | back << 32 so that both ends are claimed with one compare-and-swap */
    _Atomic uint64_t left[3][MAX_POOL];
} matmul_job;

static void home_range(const dy_mat *w, int t, int nth, int64_t *r0, int64_t *r1)
{
    const int64_t rows = w->rows, per = ((rows + nth - 1) / nth + 7) / 8 * 8;
    *r0 = per * t < rows ? per * t : rows;
    *r1 = *r0 + per < rows ? *r0 + per : rows;
}

/* Takes the front (owner) or back (thief) chunk of a home range; -1 when none is left. */
static int64_t take_chunk(_Atomic uint64_t *left, bool back)
{
    uint64_t v = atomic_load_explicit(left, memory_order_relaxed);
    for (;;) {
        const uint64_t f = v & 0xffffffffu, b = v >> 32;
        if (f >= b)
            return -1;
        const uint64_t nv = back ? v - ((uint64_t)1 << 32) : v + 1;
        if (atomic_compare_exchange_weak_explicit(left, &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int64_t)(back ? b - 1 : f);
    }
}

static void matmul_chunk(matmul_job *j, int i, int home, int nth, int64_t c, bool own)
{
    int64_t r0, r1;
    home_range(j->w[i], home, nth, &r0, &r1);
    const int64_t c0 = r0 + c * CHUNK_ROWS, c1 = c0 + CHUNK_ROWS < r1 ? c0 + CHUNK_ROWS : r1;
    dy_matmul_rows_pf(j->e->simd, j->w[i], j->act[i], j->B, j->out[i], j->w[i]->rows, c0, c1,
                      own ? r1 : c1);
}

static void matmul_phase(void *ctx, int ith, int nth)
{
    matmul_job *j = ctx;
    for (int i = 0; i < j->n; i++)
        for (int64_t c; (c = take_chunk(&j->left[i][ith], false)) >= 0;)
            matmul_chunk(j, i, ith, nth, c, true);
    for (int d = 1; d < nth; d++) {
        const int victim = (ith + d) % nth;
        for (int i = 0; i < j->n; i++)
            for (int64_t c; (c = take_chunk(&j->left[i][victim], true)) >= 0;)
                matmul_chunk(j, i, victim, nth, c, false);
    }
}

typedef struct {
    dy_engine *e;
    dy_type type;
    const float *X;
    int64_t cols;
    int B;
    void *act;
} convert_job;

static void convert_phase(void *ctx, int ith, int nth)
{
    convert_job *j = ctx;
    int per = (j->B + nth - 1) / nth;
    int b0 = per * ith, b1 = b0 + per < j->B ? b0 + per : j->B;
    if (b0 < b1)
        dy_act_convert(j->e->simd, j->type, j->X, j->cols, j->cols, b0, b1, j->act);
}

static void convert_act(dy_engine *e, dy_type wt, const float *X, int64_t cols, int B, void *act)
{
    convert_job cj = {e, wt, X, cols, B, act};
    if (B >= 16)
        dy_pool_run(e->pool, convert_phase, &cj);
    else
        convert_phase(&cj, 0, 1);
}

/* out[i] = X · w[i]ᵀ for n matrices with the same input width, X holding B rows. */
static void matmul(dy_engine *e, int n, const dy_mat *const *w, float *const *out, const float *X,
                   int B)
{
    matmul_job j; /* not zeroed whole: left[][] is 6 KB, and only n × nth entries are used */
    j.e = e;
    j.n = n;
    j.B = B;
    const int nth = dy_pool_size(e->pool);
    dy_type converted[2];
    int n_conv = 0;
    for (int i = 0; i < n; i++) {
        j.w[i] = w[i];
        j.out[i] = out[i];
        dy_type at = dy_act_type(w[i]->type);
        int slot = -1;
        for (int c = 0; c < n_conv; c++)
            if (dy_act_type(converted[c]) == at)
                slot = c;
        if (slot < 0) {
            slot = n_conv++;
            converted[slot] = w[i]->type;
            convert_act(e, w[i]->type, X, w[i]->cols, B, e->act[slot]);
        }
        j.act[i] = e->act[slot];
        for (int t = 0; t < nth; t++) {
            int64_t r0, r1;
            home_range(w[i], t, nth, &r0, &r1);
            atomic_init(&j.left[i][t], (uint64_t)((r1 - r0 + CHUNK_ROWS - 1) / CHUNK_ROWS) << 32);
        }
    }
    dy_pool_run(e->pool, matmul_phase, &j);
    lap(e, DY_PHASE_MATMUL);
}

static void matmul1(dy_engine *e, const dy_mat *w, float *out, const float *X, int B)
{
    matmul(e, 1, &w, &out, X, B);
}

/* ---------------------------------------------------------------- attention */

static void attn_phase(void *ctx, int ith, int nth)
{
    dy_attention(ctx, ith, nth);
}

/* ---------------------------------------------------------------- work by rows */

/* The step's elementwise work (embedding, norms, RoPE, SiLU·gate, residual adds) is done a
 * token (a row) at a time, each row by the same float operations whichever thread has it, so
 * splitting rows across the pool changes no bit. A prefill chunk's rows are its tokens, a
 * batched decode's its sequences. Steps of fewer than PAR_ROWS rows stay on the caller: the
 * work is a few microseconds, about what waking the pool costs. */
#define PAR_ROWS 4

typedef void (*rows_fn)(dy_engine *e, const void *arg, int t0, int t1);

typedef struct {
    dy_engine *e;
    rows_fn fn;
    const void *arg;
    int T;
} rows_job;

static void rows_phase(void *ctx, int ith, int nth)
{
    const rows_job *j = ctx;
    const int per = (j->T + nth - 1) / nth, t0 = per * ith, t1 = t0 + per < j->T ? t0 + per : j->T;
    if (t0 < t1)
        j->fn(j->e, j->arg, t0, t1);
}

/* fn(e, arg, t0, t1) over rows [0, T), split across the pool; timed as "the rest". */
static void for_rows(dy_engine *e, int T, rows_fn fn, const void *arg)
{
    rows_job j = {e, fn, arg, T};
    if (T >= PAR_ROWS)
        dy_pool_run(e->pool, rows_phase, &j);
    else
        fn(e, arg, 0, T);
    lap(e, DY_PHASE_REST);
}

static void embed_rows(dy_engine *e, const void *arg, int t0, int t1)
{
    (void)arg;
    const dy_mat *emb = &e->m->tok_embd;
    for (int t = t0; t < t1; t++)
        dy_dequant_row(emb->type, (const char *)emb->data + (size_t)e->tok[t] * emb->row_bytes,
                       e->x + (size_t)t * emb->cols, emb->cols);
}

/* xb = rmsnorm(x) · w */
static void norm_rows(dy_engine *e, const void *w, int t0, int t1)
{
    const size_t dim = (size_t)e->m->hp.dim;
    for (int t = t0; t < t1; t++)
        rmsnorm(e->xb + t * dim, e->x + t * dim, w, (int)dim, e->m->hp.rms_eps);
}

/* x += xb (the residual add after a block), then xb = rmsnorm(x) · w for the next block */
static void residual_norm_rows(dy_engine *e, const void *w, int t0, int t1)
{
    const size_t dim = (size_t)e->m->hp.dim;
    for (int t = t0; t < t1; t++) {
        for (size_t i = t * dim; i < (t + 1) * dim; i++)
            e->x[i] += e->xb[i];
        if (w)
            rmsnorm(e->xb + t * dim, e->x + t * dim, w, (int)dim, e->m->hp.rms_eps);
    }
}

/* RoPE on the new queries and keys, then the keys and values into each token's slot of its
 * block table, in the pool's element type (each token writes only its own slot). */
static void rope_store_rows(dy_engine *e, const void *layer, int t0, int t1)
{
    const dy_hparams *hp = &e->m->hp;
    const int l = *(const int *)layer, hd = hp->head_dim, bs = e->kv->block_size;
    const size_t qd = (size_t)hp->n_heads * hd, kvd = (size_t)hp->n_kv_heads * hd;
    for (int t = t0; t < t1; t++) {
        const dy_tok_slot *s = &e->slots[t];
        rope(e->q + t * qd, hp->n_heads, hd, hp->n_rot, e->inv_freq, s->pos);
        rope(e->k + t * kvd, hp->n_kv_heads, hd, hp->n_rot, e->inv_freq, s->pos);
        const int32_t b = s->blocks[s->pos / bs];
        const size_t off = (size_t)(s->pos % bs) * e->kv->row_bytes;
        dy_kv_encode_row(e->kv->type, e->k + t * kvd, (int)kvd, hd, dy_kv_key_rows(e->kv, b, l) + off);
        dy_kv_encode_row(e->kv->type, e->v + t * kvd, (int)kvd, hd, dy_kv_value_rows(e->kv, b, l) + off);
    }
}

/* hg = silu(hg) · hu */
static void swiglu_rows(dy_engine *e, const void *arg, int t0, int t1)
{
    (void)arg;
    const size_t hidden = (size_t)e->m->hp.hidden_dim;
    for (size_t i = t0 * hidden; i < t1 * hidden; i++)
        e->hg[i] = silu(e->hg[i]) * e->hu[i];
}

/* xb's logits rows: the final norm of the rows of x that want logits, gathered */
static void out_norm_rows(dy_engine *e, const void *arg, int o0, int o1)
{
    (void)arg;
    const size_t dim = (size_t)e->m->hp.dim;
    for (int o = o0; o < o1; o++)
        rmsnorm(e->xb + o * dim, e->x + (size_t)e->logit_src[o] * dim, e->m->out_norm, (int)dim,
                e->m->hp.rms_eps);
}

/* ---------------------------------------------------------------- the step */

static int check_spans(const dy_engine *e, const dy_span *spans, int n, int *T, int *n_out,
                       char *err, size_t errlen)
{
    const dy_hparams *hp = &e->m->hp;
    *T = 0;
    *n_out = 0;
    for (int i = 0; i < n; i++) {
        const dy_span *s = &spans[i];
        int end = s->pos + s->n_tokens;
        if (s->n_tokens <= 0 || s->pos < 0 || s->n_logits < 0 || s->n_logits > s->n_tokens) {
            snprintf(err, errlen, "span %d: bad token count %d, position %d or logits %d", i,
                     s->n_tokens, s->pos, s->n_logits);
            return -1;
        }
        if (end > hp->ctx_len || end > s->n_blocks * e->kv->block_size) {
            snprintf(err, errlen, "span %d: positions up to %d exceed the context length %d or "
                     "its %d KV blocks", i, end, hp->ctx_len, s->n_blocks);
            return -1;
        }
        for (int b = 0; b < (end + e->kv->block_size - 1) / e->kv->block_size; b++)
            if (s->blocks[b] < 0 || s->blocks[b] >= e->kv->n_blocks) {
                snprintf(err, errlen, "span %d: KV block id %d out of range", i, s->blocks[b]);
                return -1;
            }
        for (int t = 0; t < s->n_tokens; t++)
            if (s->tokens[t] < 0 || s->tokens[t] >= hp->vocab_size) {
                snprintf(err, errlen, "span %d: token id %d is outside the vocabulary (%d)", i,
                         s->tokens[t], hp->vocab_size);
                return -1;
            }
        *T += s->n_tokens;
        *n_out += s->n_logits;
    }
    if (*T > e->max_tokens) {
        snprintf(err, errlen, "step of %d tokens exceeds the engine's limit of %d", *T,
                 e->max_tokens);
        return -1;
    }
    return 0;
}

/* Per-token bookkeeping: each token's id and KV slot, and the rows that want logits. */
static void gather_tokens(dy_engine *e, const dy_span *spans, int n)
{
    int t = 0, out = 0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < spans[i].n_tokens; j++, t++) {
            e->tok[t] = spans[i].tokens[j];
            e->slots[t].blocks = spans[i].blocks;
            e->slots[t].pos = spans[i].pos + j;
        }
        for (int j = t - spans[i].n_logits; j < t; j++)
            e->logit_src[out++] = j;
    }
}

static void layer_forward(dy_engine *e, int l, int T)
{
    const dy_hparams *hp = &e->m->hp;
    const dy_layer *ly = &e->m->layers[l];

    for_rows(e, T, norm_rows, ly->attn_norm); /* xb = rmsnorm(x) */
    const dy_mat *qkv[3] = {&ly->wq, &ly->wk, &ly->wv};
    float *qkv_out[3] = {e->q, e->k, e->v};
    matmul(e, 3, qkv, qkv_out, e->xb, T);
    for_rows(e, T, rope_store_rows, &l);
    dy_attn aj = {e->kv, l, hp->n_heads, hp->n_kv_heads, hp->head_dim, T, e->slots, e->q,
                  e->att, e->scores, e->scores_per_thread, e->simd};
    dy_pool_run(e->pool, attn_phase, &aj);
    lap(e, DY_PHASE_ATTENTION);
    matmul1(e, &ly->wo, e->xb, e->att, T);

    for_rows(e, T, residual_norm_rows, ly->ffn_norm); /* x += xb; xb = rmsnorm(x) */
    const dy_mat *gu[2] = {&ly->w_gate, &ly->w_up};
    float *gu_out[2] = {e->hg, e->hu};
    matmul(e, 2, gu, gu_out, e->xb, T);
    for_rows(e, T, swiglu_rows, NULL); /* hg = silu(hg) · hu */
    matmul1(e, &ly->w_down, e->xb, e->hg, T);
    for_rows(e, T, residual_norm_rows, NULL); /* x += xb */
}

int dy_engine_step(dy_engine *e, const dy_span *spans, int n_spans, float *logits, char *err,
                   size_t errlen)
{
    int T, n_out;
    if (check_spans(e, spans, n_spans, &T, &n_out, err, errlen) != 0)
        return -1;
    if (e->clock)
        e->lap_start = e->clock();
    gather_tokens(e, spans, n_spans);
    for_rows(e, T, embed_rows, NULL);
    for (int l = 0; l < e->m->hp.n_layers; l++)
        layer_forward(e, l, T);
    for_rows(e, n_out, out_norm_rows, NULL);
    if (n_out > 0)
        matmul1(e, &e->m->output, logits, e->xb, n_out);
    return 0;
}

/* ---------------------------------------------------------------- lifetime */

static size_t act_bytes_needed(const dy_model *m, int T)
{
    size_t need = dy_act_bytes(m->output.type, m->output.cols, T);
    for (int l = 0; l < m->hp.n_layers; l++) {
        const dy_layer *ly = &m->layers[l];
        const dy_mat *all[7] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_down,
                                &ly->w_up};
        for (int i = 0; i < 7; i++) {
            size_t b = dy_act_bytes(all[i]->type, all[i]->cols, T);
            if (b > need)
                need = b;
        }
    }
    return need;
}

dy_engine *dy_engine_new(const dy_model *m, dy_kv_pool *kv, int n_threads, int max_step_tokens,
                         char *err, size_t errlen)
{
    const dy_hparams *hp = &m->hp;
    const int kvd = hp->n_kv_heads * hp->head_dim, qd = hp->n_heads * hp->head_dim;
    if (kv->n_layers != hp->n_layers || kv->kv_dim != kvd ||
        (kv->type != DY_KV_F32 && kv->head_dim != hp->head_dim)) {
        snprintf(err, errlen, "KV pool shape (%d layers × %d) does not match the model (%d × %d)",
                 kv->n_layers, kv->kv_dim, hp->n_layers, kvd);
        return NULL;
    }
    if (n_threads < 1 || n_threads > 256 || max_step_tokens < 1 || max_step_tokens > 65536) {
        snprintf(err, errlen, "bad engine size: %d threads, %d tokens per step", n_threads,
                 max_step_tokens);
        return NULL;
    }
    dy_engine *e = calloc(1, sizeof *e);
    if (!e)
        goto oom;
    e->m = m;
    e->kv = kv;
    e->simd = dy_simd_detect();
    e->max_tokens = max_step_tokens;
    size_t T = (size_t)max_step_tokens;
    size_t wide = (size_t)(hp->dim > qd ? hp->dim : qd);
    /* xb also holds the gathered rows for the logits, at most T of them. */
    e->x = malloc(sizeof(float) * T * hp->dim);
    e->xb = malloc(sizeof(float) * T * wide);
    e->q = malloc(sizeof(float) * T * qd);
    e->k = malloc(sizeof(float) * T * kvd);
    e->v = malloc(sizeof(float) * T * kvd);
    e->att = malloc(sizeof(float) * T * qd);
    e->hg = malloc(sizeof(float) * T * hp->hidden_dim);
    e->hu = malloc(sizeof(float) * T * hp->hidden_dim);
    e->scores_per_thread = dy_attention_scratch_floats(hp->ctx_len, hp->head_dim);
    e->scores = malloc(sizeof(float) * (size_t)n_threads * e->scores_per_thread);
    e->act_cap = act_bytes_needed(m, max_step_tokens);
    e->act[0] = aligned_alloc(64, (e->act_cap + 63) / 64 * 64);
    e->act[1] = aligned_alloc(64, (e->act_cap + 63) / 64 * 64);
    e->inv_freq = malloc(sizeof(float) * (size_t)(hp->n_rot / 2));
    e->slots = malloc(sizeof *e->slots * T);
    e->tok = malloc(sizeof *e->tok * T);
    e->logit_src = malloc(sizeof *e->logit_src * T);
    if (!e->tok || !e->logit_src || !e->x || !e->xb || !e->q || !e->k || !e->v || !e->att || !e->hg || !e->hu || !e->scores ||
        !e->act[0] || !e->act[1] || !e->inv_freq || !e->slots)
        goto oom;
    for (int i = 0; i < hp->n_rot; i += 2)
        e->inv_freq[i / 2] = 1.0f / powf(hp->rope_base, (float)i / (float)hp->n_rot);
    e->pool = dy_pool_new(n_threads);
    if (!e->pool)
        goto oom;
    return e;
oom:
    snprintf(err, errlen, "out of memory for an engine of %d tokens per step", max_step_tokens);
    dy_engine_free(e);
    return NULL;
}

void dy_engine_free(dy_engine *e)
{
    if (!e)
        return;
    dy_pool_free(e->pool);
    free(e->x);
    free(e->xb);
    free(e->q);
    free(e->k);
    free(e->v);
    free(e->att);
    free(e->hg);
    free(e->hu);
    free(e->scores);
    free(e->act[0]);
    free(e->act[1]);
    free(e->inv_freq);
    free(e->slots);
    free(e->tok);
    free(e->logit_src);
    free(e);
}

dy_kv_shape dy_model_kv_shape(const dy_model *m, int block_size, dy_kv_type t)
{
    const dy_hparams *hp = &m->hp;
    return (dy_kv_shape){block_size, hp->n_layers, hp->n_kv_heads * hp->head_dim, hp->head_dim, t};
}

void dy_engine_run(dy_engine *e, dy_pool_fn fn, void *ctx)
{
    dy_pool_run(e->pool, fn, ctx);
}

void dy_engine_time_phases(dy_engine *e, double (*clock)(void), dy_phase_times *out)
{
    e->clock = out ? clock : NULL;
    e->times = out;
}

int dy_engine_max_step_tokens(const dy_engine *e) { return e->max_tokens; }
int dy_engine_threads(const dy_engine *e) { return dy_pool_size(e->pool); }
dy_simd dy_engine_simd(const dy_engine *e) { return e->simd; }
void dy_engine_set_simd(dy_engine *e, dy_simd simd) { e->simd = simd; }
