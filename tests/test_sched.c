/* test_sched.c — continuous batching. Pure tests drive plan/commit with made-up samples:
 * decode tokens for every running sequence plus prompt chunks under the budget, first come
 * first served, chunked prefill, prefix-cache hits, preemption of the youngest when the pool
 * runs out, blocks released on finish. An engine test then runs the scheduler's plans on the
 * real model and checks that every request's greedy tokens equal those it gets alone. */
#include "testutil.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>

#define BS 4

typedef struct {
    dy_kv_pool *pool;
    dy_kv_cache *kv;
    dy_sched *s;
} rig;

static rig make_rig(int blocks, int budget, int max_running)
{
    rig r;
    r.pool = dy_kv_pool_new(blocks, BS, 1, 2);
    r.kv = dy_kv_cache_new(r.pool, 42);
    dy_sched_config cfg = {budget, max_running, false};
    r.s = dy_sched_new(&cfg, r.kv);
    assert_non_null(r.s);
    return r;
}

static void free_rig(rig *r)
{
    dy_sched_free(r->s);
    dy_kv_cache_free(r->kv);
    dy_kv_pool_free(r->pool);
}

static void prompt(int32_t *t, int n, int salt)
{
    for (int i = 0; i < n; i++)
        t[i] = 100 + salt * 1000 + i;
}

/* One step: plan, sample token 7 for each item wanting logits, commit. */
static const dy_plan *step(rig *r)
{
    const dy_plan *p;
    dy_sched_plan(r->s, &p);
    int32_t sampled[64];
    for (int i = 0; i < 64; i++)
        sampled[i] = 7;
    dy_sched_commit(r->s, sampled);
    return p;
}

static void test_chunked_prefill_then_decode(void **st)
{
    (void)st;
    rig r = make_rig(32, 8, 4);
    int32_t t[20];
    prompt(t, 20, 1);
    dy_seq *q = dy_sched_add(r.s, 1, t, 20, 64, NULL);
    const dy_plan *p = step(&r);
    assert_int_equal(p->n_items, 1);
    assert_int_equal(p->items[0].n, 8);
    assert_false(p->items[0].logits);
    p = step(&r);
    assert_int_equal(p->items[0].start, 8);
    p = step(&r); /* last 4 prompt tokens: logits, a token is appended */
    assert_int_equal(p->items[0].n, 4);
    assert_true(p->items[0].logits);
    assert_int_equal(q->n_tokens, 21);
    p = step(&r);
    assert_int_equal(p->n_decode, 1);
    assert_int_equal(p->items[0].start, 20);
    assert_int_equal(q->n_tokens, 22);
    free_rig(&r);
}

static void test_decode_and_prefill_mix_fcfs(void **st)
{
    (void)st;
    rig r = make_rig(64, 10, 8);
    int32_t a[6], b[12], c[5];
    prompt(a, 6, 1);
    prompt(b, 12, 2);
    prompt(c, 5, 3);
    dy_seq *qa = dy_sched_add(r.s, 1, a, 6, 64, NULL);
    const dy_plan *p = step(&r); /* a's whole prompt */
    assert_int_equal(p->n_tokens, 6);
    dy_seq *qb = dy_sched_add(r.s, 2, b, 12, 64, NULL);
    dy_seq *qc = dy_sched_add(r.s, 3, c, 5, 64, NULL);
    p = step(&r); /* a decodes 1, b gets a 9-token chunk, c waits its turn (FCFS) */
    assert_int_equal(p->n_items, 2);
    assert_ptr_equal(p->items[0].seq, qa);
    assert_int_equal(p->items[0].n, 1);
    assert_ptr_equal(p->items[1].seq, qb);
    assert_int_equal(p->items[1].n, 9);
    p = step(&r); /* a 1, b's last 3, c 5 */
    assert_int_equal(p->n_items, 3);
    assert_ptr_equal(p->items[2].seq, qc);
    assert_int_equal(p->items[1].n, 3);
    assert_int_equal(p->items[2].n, 5);
    assert_int_equal(p->n_tokens, 9);
    assert_int_equal(dy_sched_n_running(r.s), 3);
    free_rig(&r);
}

static void test_prefix_cache_hit(void **st)
{
    (void)st;
    rig r = make_rig(64, 64, 8);
    int32_t t[18];
    prompt(t, 18, 4);
    dy_seq *q1 = dy_sched_add(r.s, 1, t, 18, 64, NULL);
    step(&r);
    dy_sched_finish(r.s, q1);
    /* Same first 16 tokens, different tail: 4 full blocks are cached. */
    t[17] = 5;
    dy_seq *q2 = dy_sched_add(r.s, 2, t, 18, 64, NULL);
    const dy_plan *p = step(&r);
    assert_int_equal(q2->n_cached, 16);
    assert_int_equal(p->items[0].start, 16);
    assert_int_equal(p->items[0].n, 2);
    dy_sched_finish(r.s, q2);
    /* Exactly the cached length: the last block is recomputed, never shared for writing. */
    dy_seq *q3 = dy_sched_add(r.s, 3, t, 16, 64, NULL);
    p = step(&r);
    assert_int_equal(q3->n_cached, 12);
    assert_int_equal(p->items[0].n, 4);
    free_rig(&r);
}

/* The load a worker reports: a waiting prompt counts without its cached prefix (what the
 * router counts for it), a running one by what is left of it. */
static void test_queued_prefill_tokens(void **st)
{
    (void)st;
    rig r = make_rig(64, 8, 8);
    int32_t t[18];
    prompt(t, 18, 6);
    dy_seq *q1 = dy_sched_add(r.s, 1, t, 18, 64, NULL);
    assert_int_equal(dy_sched_queued_prefill_tokens(r.s), 18);
    step(&r); /* 8 of 18 computed */
    assert_int_equal(dy_sched_queued_prefill_tokens(r.s), 10);
    step(&r);
    step(&r);
    assert_int_equal(dy_sched_queued_prefill_tokens(r.s), 0); /* decoding */
    dy_sched_finish(r.s, q1);
    t[17] = 5; /* 4 full blocks (16 tokens) cached */
    uint64_t lookups = dy_kv_cache_get_stats(r.kv).lookups;
    dy_sched_add(r.s, 2, t, 18, 64, NULL);
    assert_int_equal(dy_sched_queued_prefill_tokens(r.s), 2);
    assert_int_equal(dy_kv_cache_get_stats(r.kv).lookups, lookups); /* looked at, not taken */
    assert_int_equal(dy_kv_cache_available(r.kv), 64);
    free_rig(&r);
}

/* With the prefix cache off (for measurements), a repeated prompt is computed in full. */
static void test_prefix_cache_off(void **st)
{
    (void)st;
    dy_kv_pool *pool = dy_kv_pool_new(64, BS, 1, 2);
    dy_kv_cache *kv = dy_kv_cache_new(pool, 42);
    dy_sched_config cfg = {64, 8, true};
    dy_sched *s = dy_sched_new(&cfg, kv);
    rig r = {pool, kv, s};
    int32_t t[18];
    prompt(t, 18, 4);
    for (int i = 0; i < 2; i++) {
        dy_seq *q = dy_sched_add(r.s, (uint64_t)i, t, 18, 64, NULL);
        const dy_plan *p = step(&r);
        assert_int_equal(q->n_cached, 0);
        assert_int_equal(p->items[0].n, 18);
        dy_sched_finish(r.s, q);
    }
    assert_int_equal(dy_kv_cache_indexed(kv), 0);
    free_rig(&r);
}

static void test_preempts_youngest_and_recovers(void **st)
{
    (void)st;
    rig r = make_rig(6, 64, 8); /* 24 positions in all */
    int32_t a[7], b[7];
    prompt(a, 7, 1);
    prompt(b, 7, 2);
    dy_seq *qa = dy_sched_add(r.s, 1, a, 7, 64, NULL);
    dy_seq *qb = dy_sched_add(r.s, 2, b, 7, 64, NULL);
    step(&r); /* both prefill: 2 blocks each */
    int preempted = 0;
    for (int i = 0; i < 30 && qa->n_tokens < 20; i++)
        preempted += step(&r)->n_preempted;
    assert_true(preempted >= 1);
    assert_int_equal(qb->state, DY_SEQ_WAITING); /* the younger one gave way */
    assert_true(qb->n_preemptions >= 1);
    dy_sched_finish(r.s, qa);
    for (int i = 0; i < 10; i++)
        step(&r);
    assert_int_equal(qb->state, DY_SEQ_RUNNING);
    assert_true(qb->n_tokens > 9);
    dy_sched_finish(r.s, qb);
    assert_int_equal(dy_kv_cache_available(r.kv), 6);
    free_rig(&r);
}

static void test_limits_and_starvation(void **st)
{
    (void)st;
    rig r = make_rig(16, 16, 2);
    int32_t t[70];
    prompt(t, 70, 9);
    assert_null(dy_sched_add(r.s, 1, t, 70, 64, NULL)); /* longer than its context */
    assert_null(dy_sched_add(r.s, 1, t, 0, 64, NULL));
    assert_null(dy_sched_add(r.s, 1, t, 64, 128, NULL)); /* more blocks than the pool */
    /* max_running 2: the third waits, then runs when one finishes */
    dy_seq *q[3];
    for (int i = 0; i < 3; i++)
        q[i] = dy_sched_add(r.s, (uint64_t)i, t, 4, 64, NULL);
    step(&r);
    assert_int_equal(dy_sched_n_running(r.s), 2);
    assert_int_equal(q[2]->state, DY_SEQ_WAITING);
    dy_sched_finish(r.s, q[0]);
    step(&r);
    assert_int_equal(q[2]->state, DY_SEQ_RUNNING);
    free_rig(&r);
}

/* Remote prefill on a decode worker: blocks set aside after the cached prefix; KV_READY
 * leaves one position (the last prompt token) to compute here; a failed prefill computes
 * the rest locally into the same blocks; no room means local prefill. */
static void test_remote_prefill(void **st)
{
    (void)st;
    rig r = make_rig(16, 64, 8);
    int32_t t[18];
    prompt(t, 18, 5);
    dy_seq *q = dy_sched_add_remote(r.s, 1, t, 18, 64, NULL);
    assert_int_equal(q->state, DY_SEQ_REMOTE);
    assert_int_equal(q->n_blocks, 5);             /* positions 0..16 */
    assert_int_equal(dy_sched_n_waiting(r.s), 0);
    const dy_plan *p = step(&r);
    assert_int_equal(p->n_items, 0);               /* not schedulable before its KV */
    dy_sched_remote_ready(r.s, q, true);
    p = step(&r);
    assert_int_equal(p->n_items, 1);
    assert_int_equal(p->items[0].start, 17);
    assert_int_equal(p->items[0].n, 1);
    assert_true(p->items[0].logits);
    dy_sched_finish(r.s, q);

    /* The first 16 tokens are now cached: a failed remote prefill redoes only the rest. */
    dy_seq *q2 = dy_sched_add_remote(r.s, 2, t, 18, 64, NULL);
    assert_int_equal(q2->n_cached, 16);
    assert_int_equal(q2->state, DY_SEQ_REMOTE);
    dy_sched_remote_ready(r.s, q2, false);
    p = step(&r);
    assert_int_equal(p->items[0].start, 16);
    assert_int_equal(p->items[0].n, 2);
    dy_sched_finish(r.s, q2);

    /* Nothing to receive (all but the last token cached) → local. */
    dy_seq *q3 = dy_sched_add_remote(r.s, 3, t, 17, 64, NULL);
    assert_int_equal(q3->state, DY_SEQ_WAITING);
    dy_sched_finish(r.s, q3);
    assert_int_equal(dy_kv_cache_available(r.kv), 16);
    free_rig(&r);
}



/* A lower tier holds blocks 1 and 2 of a prompt whose block 0 is cached: only they are set
 * aside and filled from outside; once ready they are published, and the rest of the prompt
 * is computed here. A failed load recomputes from the cached prefix. */
static void test_loading_from_lower_tier(void **st)
{
    (void)st;
    rig r = make_rig(16, 64, 8);
    int32_t t[18];
    prompt(t, 18, 6);
    dy_seq *a = dy_sched_add(r.s, 1, t, 5, 64, NULL); /* caches block 0 */
    step(&r);
    dy_sched_finish(r.s, a);
    dy_seq *q = dy_sched_add_loading(r.s, 2, t, 18, 64, 3, NULL);
    assert_int_equal(q->state, DY_SEQ_REMOTE);
    assert_int_equal(q->n_published, 1);           /* block 0 from the prefix cache */
    assert_int_equal(q->n_blocks, 3);              /* blocks 1 and 2 set aside */
    assert_int_equal(step(&r)->n_items, 0);
    dy_sched_remote_ready(r.s, q, true);
    assert_int_equal(q->n_computed, 12);
    uint64_t h[3];
    dy_kv_cache_hash_blocks(r.kv, t, 3, h);
    assert_int_equal(dy_kv_cache_peek(r.kv, h, 3), 3); /* published at once */
    const dy_plan *p = step(&r);
    assert_int_equal(p->n_items, 1);
    assert_int_equal(p->items[0].start, 12);
    assert_int_equal(p->items[0].n, 6);
    dy_sched_finish(r.s, q);

    /* Blocks beyond the last full block before the last token are never asked for. */
    int32_t u[18];
    prompt(u, 18, 7);
    dy_seq *w = dy_sched_add_loading(r.s, 3, u, 9, 64, 5, NULL);
    assert_int_equal(w->state, DY_SEQ_REMOTE);
    assert_int_equal(w->n_blocks, 2);              /* positions 0..7; token 8 computed here */
    dy_sched_remote_ready(r.s, w, false);          /* the load failed */
    p = step(&r);
    assert_int_equal(p->items[0].start, 0);
    assert_int_equal(p->items[0].n, 9);
    dy_sched_finish(r.s, w);

    /* Already cached: no load, an ordinary waiting sequence. */
    dy_seq *c = dy_sched_add_loading(r.s, 4, t, 18, 64, 3, NULL);
    assert_int_equal(c->state, DY_SEQ_WAITING);
    dy_sched_finish(r.s, c);
    assert_int_equal(dy_kv_cache_available(r.kv), 16);
    free_rig(&r);
}

/* ---------------------------------------------------------------- repeated sampling */

static int total_prompt_tokens(const dy_plan *p)
{
    int n = 0;
    for (int i = 0; i < p->n_items; i++)
        if (p->items[i].start < p->items[i].seq->n_prompt)
            n += p->items[i].n;
    return n;
}

/* Four samples of a 10-token prompt: the leader computes positions 0..8 once; then each
 * sample shares the two full blocks, gets its own copy of the partly filled third block,
 * and computes the last prompt token in the same step. */
static void test_fork_shares_prompt_blocks(void **st)
{
    (void)st;
    rig r = make_rig(32, 64, 8);
    int32_t t[10];
    prompt(t, 10, 1);
    dy_seq *lead = dy_sched_add(r.s, 1, t, 10, 40, NULL);
    dy_seq *f[3];
    for (int i = 0; i < 3; i++) {
        f[i] = dy_sched_fork(r.s, lead, 2 + (uint64_t)i, NULL);
        assert_non_null(f[i]);
        assert_int_equal(f[i]->state, DY_SEQ_FORK);
    }
    assert_int_equal(dy_sched_n_waiting(r.s), 1);
    const dy_plan *p = step(&r);
    assert_int_equal(p->n_items, 1);
    assert_int_equal(p->items[0].n, 9);
    assert_false(p->items[0].logits);
    int computed = total_prompt_tokens(p);
    p = step(&r);
    computed += total_prompt_tokens(p);
    assert_int_equal(p->n_items, 4);
    assert_int_equal(p->n_copies, 3);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(p->items[i].start, 9);
        assert_int_equal(p->items[i].n, 1);
        assert_true(p->items[i].logits);
    }
    assert_int_equal(computed, 9 + 4); /* not 4 × 10 */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f[i]->state, DY_SEQ_RUNNING);
        assert_int_equal(f[i]->n_blocks, 3);
        assert_int_equal(f[i]->blocks[0], lead->blocks[0]);
        assert_int_equal(f[i]->blocks[1], lead->blocks[1]);
        assert_int_not_equal(f[i]->blocks[2], lead->blocks[2]);
        assert_int_equal(p->copies[i].src, lead->blocks[2]);
        assert_int_equal(p->copies[i].dst, f[i]->blocks[2]);
        assert_int_equal(f[i]->n_tokens, 11);
    }
    assert_int_equal(r.pool->refcount[lead->blocks[0]], 4);
    /* Forked blocks are freed when the last sample ends, not before. */
    int32_t shared = lead->blocks[0];
    dy_sched_finish(r.s, lead);
    dy_sched_finish(r.s, f[0]);
    dy_sched_finish(r.s, f[1]);
    assert_int_equal(r.pool->refcount[shared], 1);
    dy_sched_finish(r.s, f[2]);
    assert_int_equal(r.pool->refcount[shared], 0);
    assert_int_equal(dy_kv_cache_available(r.kv), 32);
    free_rig(&r);
}

/* A prompt whose fork point falls on a block boundary shares every block: nothing to copy. */
static void test_fork_on_block_boundary(void **st)
{
    (void)st;
    rig r = make_rig(32, 64, 8);
    int32_t t[9];
    prompt(t, 9, 2);
    dy_seq *lead = dy_sched_add(r.s, 1, t, 9, 40, NULL);
    dy_seq *f = dy_sched_fork(r.s, lead, 2, NULL);
    step(&r);
    const dy_plan *p = step(&r);
    assert_int_equal(p->n_copies, 0);
    assert_int_equal(p->n_items, 2);
    assert_int_equal(f->n_blocks, 3); /* two shared, one new for position 8 */
    assert_int_equal(f->blocks[1], lead->blocks[1]);
    assert_int_not_equal(f->blocks[2], lead->blocks[2]);
    dy_sched_finish(r.s, f);
    dy_sched_finish(r.s, lead);
    assert_int_equal(dy_kv_cache_available(r.kv), 32);
    free_rig(&r);
}

/* The leader is cancelled before the fork: the next sample leads; a cancelled waiting
 * sample simply disappears. A one-token prompt has nothing to share. */
static void test_fork_leader_cancelled(void **st)
{
    (void)st;
    rig r = make_rig(32, 64, 8);
    int32_t t[10];
    prompt(t, 10, 3);
    dy_seq *lead = dy_sched_add(r.s, 1, t, 10, 40, NULL);
    dy_seq *a = dy_sched_fork(r.s, lead, 2, NULL);
    dy_seq *b = dy_sched_fork(r.s, lead, 3, NULL);
    dy_seq *c = dy_sched_fork(r.s, lead, 4, NULL);
    dy_sched_finish(r.s, lead);
    assert_int_equal(a->state, DY_SEQ_WAITING);
    assert_ptr_equal(a->forks, b);
    assert_ptr_equal(b->leader, a);
    dy_sched_finish(r.s, b);
    assert_ptr_equal(a->forks, c);
    const dy_plan *p = step(&r);
    assert_int_equal(p->n_items, 1);
    assert_int_equal(p->items[0].n, 9);
    p = step(&r);
    assert_int_equal(p->n_items, 2);
    assert_int_equal(c->blocks[0], a->blocks[0]);
    assert_null(dy_sched_fork(r.s, a, 9, NULL)); /* past the fork point */
    dy_sched_finish(r.s, a);
    dy_sched_finish(r.s, c);
    dy_seq *one = dy_sched_add(r.s, 5, t, 1, 40, NULL);
    dy_seq *two = dy_sched_fork(r.s, one, 6, NULL);
    assert_int_equal(two->state, DY_SEQ_WAITING);
    p = step(&r);
    assert_int_equal(p->n_items, 2);
    dy_sched_free(r.s); /* frees what is left, forks included */
    r.s = NULL;
    assert_int_equal(dy_kv_cache_available(r.kv), 32);
    dy_kv_cache_free(r.kv);
    dy_kv_pool_free(r.pool);
}

/* No block left for a sample's copy: it queues as an ordinary sequence and, once blocks
 * free up, finds the leader's full blocks in the prefix cache. */
static void test_fork_without_room_falls_back(void **st)
{
    (void)st;
    rig r = make_rig(4, 64, 8);
    int32_t t[10];
    prompt(t, 10, 4);
    dy_seq *lead = dy_sched_add(r.s, 1, t, 10, 12, NULL);
    dy_seq *f = dy_sched_fork(r.s, lead, 2, NULL);
    step(&r);                          /* the leader holds 3 of the 4 blocks */
    dy_seq *g = dy_sched_fork(r.s, lead, 3, NULL);
    assert_non_null(g);
    const dy_plan *p = step(&r);       /* f takes the last block for its copy; g gets none */
    assert_int_equal(p->n_copies, 1);
    assert_int_equal(f->state, DY_SEQ_RUNNING);
    assert_int_equal(g->state, DY_SEQ_WAITING);
    assert_int_equal(g->n_blocks, 0);
    dy_sched_finish(r.s, lead);
    dy_sched_finish(r.s, f);
    p = step(&r);
    assert_int_equal(p->n_items, 1);
    assert_ptr_equal(p->items[0].seq, g);
    assert_int_equal(p->items[0].start, 8); /* two blocks from the cache */
    assert_int_equal(g->n_cached, 0);       /* it shared nothing at the fork */
    dy_sched_finish(r.s, g);
    free_rig(&r);
}

/* Disaggregated: the prompt's KV arrives once for the leader; the samples fork it. */
static void test_fork_after_remote_prefill(void **st)
{
    (void)st;
    rig r = make_rig(32, 64, 8);
    int32_t t[10];
    prompt(t, 10, 5);
    dy_seq *lead = dy_sched_add_remote(r.s, 1, t, 10, 40, NULL);
    assert_int_equal(lead->state, DY_SEQ_REMOTE);
    dy_seq *f = dy_sched_fork(r.s, lead, 2, NULL);
    assert_int_equal(step(&r)->n_items, 0);
    dy_sched_remote_ready(r.s, lead, true);
    const dy_plan *p = step(&r);
    assert_int_equal(p->n_items, 2);
    assert_int_equal(p->n_copies, 1);
    assert_int_equal(total_prompt_tokens(p), 2);
    assert_int_equal(f->blocks[0], lead->blocks[0]);
    assert_int_equal(dy_kv_cache_indexed(r.kv), 2); /* the received full blocks published */
    dy_sched_finish(r.s, f);
    dy_sched_finish(r.s, lead);
    free_rig(&r);
}

/* ---------------------------------------------------------------- on the real engine */

#define N_REQ 6

static void greedy_alone(dy_model *m, const int32_t *p, int n, int gen, int32_t *out)
{
    char err[256];
    dy_kv_pool *pool = dy_kv_pool_new(16, 16, m->hp.n_layers, m->hp.n_kv_heads * m->hp.head_dim);
    dy_engine *e = dy_engine_new(m, pool, 1, 256, err, sizeof err);
    int32_t blocks[16];
    for (int i = 0; i < 16; i++)
        blocks[i] = dy_kv_alloc(pool);
    float *logits = malloc(sizeof(float) * m->hp.vocab_size);
    dy_span s = {p, n, 0, blocks, 16, 1};
    assert_int_equal(dy_engine_step(e, &s, 1, logits, err, sizeof err), 0);
    for (int k = 0; k < gen; k++) {
        out[k] = dy_argmax(logits, m->hp.vocab_size);
        dy_span d = {&out[k], 1, n + k, blocks, 16, 1};
        assert_int_equal(dy_engine_step(e, &d, 1, logits, err, sizeof err), 0);
    }
    free(logits);
    dy_engine_free(e);
    dy_kv_pool_free(pool);
}

/* Requests sharing a prefix, arriving over time, in a pool small enough to force
 * preemption: each must produce exactly its solo greedy tokens. */
static void test_engine_batched_equals_alone(void **st)
{
    (void)st;
    char err[256];
    dy_model *m = dy_model_load(tu_path("models/stories260K.bin"), NULL, err, sizeof err);
    assert_non_null(m);
    const int gen = 40, V = m->hp.vocab_size;
    int32_t prompts[N_REQ][40], want[N_REQ][40];
    int len[N_REQ];
    for (int r = 0; r < N_REQ; r++) {
        len[r] = 20 + 3 * r;
        prompts[r][0] = 1;
        for (int i = 1; i < len[r]; i++)
            prompts[r][i] = i < 17 ? 300 + i : 20 + (r * 37 + i * 11) % 400; /* shared 17 */
        greedy_alone(m, prompts[r], len[r], gen, want[r]);
    }
    dy_kv_pool *pool = dy_kv_pool_new(14, 16, m->hp.n_layers, m->hp.n_kv_heads * m->hp.head_dim);
    dy_kv_cache *kv = dy_kv_cache_new(pool, m->fingerprint);
    dy_sched_config cfg = {24, 8, false};
    dy_sched *s = dy_sched_new(&cfg, kv);
    dy_engine *e = dy_engine_new(m, pool, 2, 64, err, sizeof err);
    float *logits = malloc(sizeof(float) * V * 64);
    dy_seq *seq[N_REQ] = {0};
    int done = 0, added = 0, steps = 0;
    uint64_t preempted = 0;
    while (done < N_REQ) {
        if (added < N_REQ && steps % 3 == 0) {
            seq[added] = dy_sched_add(s, (uint64_t)added, prompts[added], len[added], 256, NULL);
            added++;
        }
        steps++;
        const dy_plan *p;
        if (dy_sched_plan(s, &p) == 0)
            continue;
        preempted += (uint64_t)p->n_preempted;
        dy_span spans[64];
        int n_logits = 0;
        for (int i = 0; i < p->n_items; i++) {
            const dy_plan_item *it = &p->items[i];
            spans[i] = (dy_span){it->seq->tokens + it->start, it->n, it->start, it->seq->blocks,
                                 it->seq->n_blocks, it->logits};
            n_logits += it->logits;
        }
        assert_int_equal(dy_engine_step(e, spans, p->n_items, logits, err, sizeof err), 0);
        int32_t sampled[64];
        for (int i = 0; i < n_logits; i++)
            sampled[i] = dy_argmax(logits + (size_t)i * V, V);
        dy_sched_commit(s, sampled);
        for (int r = 0; r < N_REQ; r++)
            if (seq[r] && seq[r]->n_tokens - seq[r]->n_prompt >= gen) {
                for (int k = 0; k < gen; k++)
                    if (seq[r]->tokens[seq[r]->n_prompt + k] != want[r][k])
                        fail_msg("request %d token %d: %d batched, %d alone", r, k,
                                 seq[r]->tokens[seq[r]->n_prompt + k], want[r][k]);
                dy_sched_finish(s, seq[r]);
                seq[r] = NULL;
                done++;
            }
        assert_true(steps < 2000);
    }
    assert_true(preempted > 0); /* the pool was small enough to exercise preemption */
    assert_true(dy_kv_cache_get_stats(kv).hit_blocks > 0); /* the shared prefix was reused */
    assert_int_equal(dy_kv_cache_available(kv), 14);
    free(logits);
    dy_engine_free(e);
    dy_sched_free(s);
    dy_kv_cache_free(kv);
    dy_kv_pool_free(pool);
    dy_model_free(m);
}

/* Four greedy samples of one prompt, forked after the leader's prefill (the partly filled
 * block copied as the plan says): every sample must produce the tokens the prompt gives
 * alone — a missed or wrong copy would change them. */
static void test_engine_forked_samples_equal_alone(void **st)
{
    (void)st;
    char err[256];
    dy_model *m = dy_model_load(tu_path("models/stories260K.bin"), NULL, err, sizeof err);
    assert_non_null(m);
    const int gen = 24, V = m->hp.vocab_size, n = 20, n_samples = 4;
    int32_t p[20], want[24];
    p[0] = 1;
    for (int i = 1; i < n; i++)
        p[i] = 40 + (i * 13) % 300;
    greedy_alone(m, p, n, gen, want);
    dy_kv_pool *pool = dy_kv_pool_new(32, 16, m->hp.n_layers, m->hp.n_kv_heads * m->hp.head_dim);
    dy_kv_cache *kv = dy_kv_cache_new(pool, m->fingerprint);
    dy_sched_config cfg = {64, 8, false};
    dy_sched *s = dy_sched_new(&cfg, kv);
    dy_engine *e = dy_engine_new(m, pool, 1, 64, err, sizeof err);
    float *logits = malloc(sizeof(float) * V * 8);
    dy_seq *seq[4];
    seq[0] = dy_sched_add(s, 0, p, n, 256, NULL);
    for (int i = 1; i < n_samples; i++)
        seq[i] = dy_sched_fork(s, seq[0], (uint64_t)i, NULL);
    int copies = 0;
    for (int steps = 0; seq[0]->n_tokens - n < gen; steps++) {
        assert_true(steps < 100);
        const dy_plan *pl;
        assert_true(dy_sched_plan(s, &pl) > 0);
        for (int c = 0; c < pl->n_copies; c++)
            dy_kv_copy_block(pool, pl->copies[c].dst, pl->copies[c].src);
        copies += pl->n_copies;
        dy_span spans[8];
        int n_logits = 0;
        for (int i = 0; i < pl->n_items; i++) {
            const dy_plan_item *it = &pl->items[i];
            spans[i] = (dy_span){it->seq->tokens + it->start, it->n, it->start, it->seq->blocks,
                                 it->seq->n_blocks, it->logits};
            n_logits += it->logits;
        }
        assert_int_equal(dy_engine_step(e, spans, pl->n_items, logits, err, sizeof err), 0);
        int32_t sampled[8];
        for (int i = 0; i < n_logits; i++)
            sampled[i] = dy_argmax(logits + (size_t)i * V, V);
        dy_sched_commit(s, sampled);
    }
    assert_int_equal(copies, n_samples - 1);
    for (int i = 0; i < n_samples; i++) {
        assert_int_equal(seq[i]->n_tokens, n + gen);
        assert_memory_equal(seq[i]->tokens + n, want, sizeof want);
    }
    free(logits);
    dy_engine_free(e);
    dy_sched_free(s);
    assert_int_equal(dy_kv_cache_available(kv), 32);
    dy_kv_cache_free(kv);
    dy_kv_pool_free(pool);
    dy_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_prefill_then_decode),
        cmocka_unit_test(test_decode_and_prefill_mix_fcfs),
        cmocka_unit_test(test_prefix_cache_hit),
        cmocka_unit_test(test_queued_prefill_tokens),
        cmocka_unit_test(test_prefix_cache_off),
        cmocka_unit_test(test_preempts_youngest_and_recovers),
        cmocka_unit_test(test_limits_and_starvation),
        cmocka_unit_test(test_remote_prefill),
        cmocka_unit_test(test_loading_from_lower_tier),
        cmocka_unit_test(test_fork_shares_prompt_blocks),
        cmocka_unit_test(test_fork_on_block_boundary),
        cmocka_unit_test(test_fork_leader_cancelled),
        cmocka_unit_test(test_fork_without_room_falls_back),
        cmocka_unit_test(test_fork_after_remote_prefill),
        cmocka_unit_test(test_engine_forked_samples_equal_alone),
        cmocka_unit_test(test_engine_batched_equals_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
