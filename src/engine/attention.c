/* attention.c — see attention.h. Flash-attention style: the work is cut into units of (a run
 * of consecutive tokens of one sequence, a group of query heads sharing one KV head); a unit
 * walks its sequence's keys and values a chunk at a time (a chunk lies within one KV block)
 * and folds each chunk into every one of its queries with an online softmax (vec.h). So each
 * key and value row is read from memory once per unit and used for up to UNIT_QUERIES queries
 * from L1, and no scratch grows with the context.
 *
 * An f16 or q8_0 pool is read a chunk at a time too: the unit's head's rows of the chunk are
 * decoded into the thread's scratch (2 × DY_ATTN_CHUNK × head_dim floats, in L1/L2) and the
 * f32 chunk kernel runs on them. Memory traffic is the pool's bytes (a half or about a
 * quarter of f32's); the decode is a few instructions per value, once per unit, shared by
 * the unit's queries, and it is exact, so all kernel levels still give the same bits. */
#include "engine/attention.h"
#include "engine/kv_codec.h"
#include "engine/vec.h"

#include <math.h>
#include <string.h>

/* Queries per unit at most: tokens × heads. 16 queries of head_dim 128 keep their outputs,
 * and a 16-position chunk of keys and values, within L1. */
#define UNIT_QUERIES 16

size_t dy_attention_scratch_floats(int max_len, int head_dim)
{
    (void)max_len;
    /* a decoded chunk of keys and one of values (quantised pools; f32 pools read in place) */
    return 2 * (size_t)DY_ATTN_CHUNK * (size_t)head_dim;
}

/* Does token t continue the run that token t-1 is in (same sequence, next position)? */
static int continues(const dy_attn *a, int t)
{
    return t > 0 && a->slots[t].blocks == a->slots[t - 1].blocks &&
           a->slots[t].pos == a->slots[t - 1].pos + 1;
}

/* A chunk of keys and values: this KV head's rows of them, from a position to the end of its
 * block, DY_ATTN_CHUNK rows at most (a unit's last chunk uses fewer). */
typedef struct {
    const uint8_t *k, *v;
    int n;
} kv_chunk;

/* The chunk at position p of the sequence whose blocks are given. */
static kv_chunk chunk_at(const dy_attn *a, const int32_t *blocks, int p, int kvh)
{
    const int bs = a->kv->block_size, in_block = p % bs;
    const size_t off = (size_t)in_block * a->kv->row_bytes +
                       (size_t)kvh * dy_kv_head_bytes(a->kv->type, a->head_dim);
    const int n = bs - in_block < DY_ATTN_CHUNK ? bs - in_block : DY_ATTN_CHUNK;
    return (kv_chunk){dy_kv_key_rows(a->kv, blocks[p / bs], a->layer) + off,
                      dy_kv_value_rows(a->kv, blocks[p / bs], a->layer) + off, n};
}

/* Asks for the keys and values of chunk c (the next one) while the current chunk is
 * computed: blocks are scattered in the pool, so the hardware prefetcher, which follows one
 * stream within a page, loses the way at every block, and a long context's decode then waits
 * on DRAM a block at a time. */
static void prefetch_chunk(const dy_attn *a, kv_chunk c)
{
    const size_t row = a->kv->row_bytes, head = dy_kv_head_bytes(a->kv->type, a->head_dim);
    for (int i = 0; i < c.n; i++)
        for (size_t h = 0; h < head; h += 64) {
            __builtin_prefetch(c.k + (size_t)i * row + h);
            __builtin_prefetch(c.v + (size_t)i * row + h);
        }
}

/* Tokens [t0, t0+nt) (one sequence, consecutive positions) × heads [h0, h0+nh) (one KV
 * head). */
static void attend_unit(const dy_attn *a, float *scratch, int t0, int nt, int h0, int nh)
{
    const int hd = a->head_dim;
    const size_t row = a->kv->row_bytes;
    const int kvh = h0 / (a->n_heads / a->n_kv_heads);
    const size_t qstride = (size_t)a->n_heads * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const int32_t *blocks = a->slots[t0].blocks;
    const int pos0 = a->slots[t0].pos, last = pos0 + nt - 1;
    dy_attn_query qs[UNIT_QUERIES];
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < nh; h++) {
            dy_attn_query *q = &qs[t * nh + h];
            const size_t off = (size_t)(t0 + t) * qstride + (size_t)(h0 + h) * hd;
            q->q = a->q + off;
            q->o = a->out + off;
            q->m = -INFINITY;
            q->l = 0.0f;
            memset(q->o, 0, sizeof(float) * (size_t)hd);
        }
    const int nq = nt * nh;
    kv_chunk cur = chunk_at(a, blocks, 0, kvh);
    for (int p = 0; p <= last;) {
        const int n = cur.n < last + 1 - p ? cur.n : last + 1 - p;
        for (int t = 0; t < nt; t++) {
            int vis = pos0 + t + 1 - p; /* keys p … pos are visible to the token at pos */
            vis = vis < 0 ? 0 : vis > n ? n : vis;
            for (int h = 0; h < nh; h++)
                qs[t * nh + h].nvalid = vis;
        }
        kv_chunk next = {NULL, NULL, 0};
        if (p + n <= last) { /* prefetched now, computed on the next pass */
            next = chunk_at(a, blocks, p + n, kvh);
            prefetch_chunk(a, next);
        }
        if (a->kv->type == DY_KV_F32) {
            dy_attn_chunk(a->simd, qs, nq, (const float *)(const void *)cur.k,
                          (const float *)(const void *)cur.v, row / sizeof(float), n, hd, scale);
        } else {
            float *kf = scratch, *vf = scratch + (size_t)DY_ATTN_CHUNK * hd;
            dy_kv_decode_head(a->simd, a->kv->type, cur.k, row, n, hd, kf);
            dy_kv_decode_head(a->simd, a->kv->type, cur.v, row, n, hd, vf);
            dy_attn_chunk(a->simd, qs, nq, kf, vf, (size_t)hd, n, hd, scale);
        }
        p += n;
        cur = next;
    }
    for (int i = 0; i < nq; i++) {
        const float inv = 1.0f / qs[i].l;
        for (int d = 0; d < hd; d++)
            qs[i].o[d] *= inv;
    }
}

void dy_attention(const dy_attn *a, int ith, int nth)
{
    const int group = a->n_heads / a->n_kv_heads;
    const int nh = group < UNIT_QUERIES ? group : UNIT_QUERIES;
    const int run_max = UNIT_QUERIES / nh;
    /* Units are numbered KV head by KV head (a thread's units of one head then share keys in
     * L2) and dealt out in a snake order (0 1 … n-1 n-1 … 1 0 0 1 …): a prompt's runs cost more
     * the later they come, and plain round-robin would give the last thread the dearest run of
     * every round. */
    int u = 0;
    for (int kvh = 0; kvh < a->n_kv_heads; kvh++) {
        const int hend = (kvh + 1) * group;
        for (int h0 = kvh * group; h0 < hend; h0 += nh)
            for (int t0 = 0; t0 < a->T;) {
                int nt = 1;
                while (nt < run_max && t0 + nt < a->T && continues(a, t0 + nt))
                    nt++;
                const int round = u / nth, slot = u % nth;
                u++;
                if ((round % 2 == 0 ? slot : nth - 1 - slot) == ith)
                    attend_unit(a, a->scratch + (size_t)ith * a->scratch_floats, t0, nt, h0,
                                h0 + nh <= hend ? nh : hend - h0);
                t0 += nt;
            }
    }
}
