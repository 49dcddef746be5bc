/* test_forward_threads.c — the step on several threads gives the bits of the step on one: a
 * prompt prefilled in one step, a step of several spans (prompts of different lengths), and
 * a batched decode of those sequences, with 2, 3 and 5 threads against 1, on the bundled
 * stories260K and on a generated model with grouped-query heads and q8_0 weights. Every part
 * of the step is split across threads (matrix rows, attention units, the elementwise work by
 * token), and each output is computed by the same float operations whoever computes it. */
#include "testutil.h"
#include "engine/forward.h"
#include "engine/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 16
#define N_SEQ 9       /* sequences of the multi-span step and of the batched decode */
#define PREFILL 77    /* the long prompt: several KV blocks and attention units, uneven rows */
#define MAX_BLOCKS 8  /* per sequence */

typedef struct {
    float *prefill;  /* PREFILL rows of logits */
    float *spans;    /* N_SEQ rows: the last position of each prompt */
    float *decode;   /* N_SEQ rows */
} outputs;

static void step_ok(dy_engine *e, const dy_span *s, int n, float *logits)
{
    char err[512];
    if (dy_engine_step(e, s, n, logits, err, sizeof err) != 0)
        fail_msg("step failed: %s", err);
}

static int32_t token(int i, int salt, int V)
{
    return (int32_t)((i * 131u + (unsigned)salt * 17u + 7) % (unsigned)(V - 3)) + 3;
}

/* The three steps on an engine of n_threads threads; the logits into o. */
static void run_steps(const char *path, int n_threads, outputs *o)
{
    char err[512];
    dy_model *m = dy_model_load(path, NULL, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    const int V = m->hp.vocab_size;
    const dy_kv_shape shape = dy_model_kv_shape(m, BS, DY_KV_F32);
    dy_kv_pool *kv = dy_kv_pool_make((N_SEQ + 1) * MAX_BLOCKS, &shape, NULL);
    assert_non_null(kv);
    dy_engine *e = dy_engine_new(m, kv, n_threads, 256, err, sizeof err);
    if (!e)
        fail_msg("%s", err);
    int32_t blocks[N_SEQ + 1][MAX_BLOCKS];
    for (int s = 0; s <= N_SEQ; s++)
        for (int b = 0; b < MAX_BLOCKS; b++)
            blocks[s][b] = s * MAX_BLOCKS + b;

    int32_t ids[PREFILL];
    for (int i = 0; i < PREFILL; i++)
        ids[i] = token(i, 0, V);
    dy_span long_prompt = {ids, PREFILL, 0, blocks[N_SEQ], MAX_BLOCKS, PREFILL};
    step_ok(e, &long_prompt, 1, o->prefill);

    /* prompts of 1 + 3s tokens, all in one step, then one decode step of them all */
    int32_t prompts[N_SEQ][1 + 3 * N_SEQ], next[N_SEQ];
    dy_span spans[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
        for (int i = 0; i < 1 + 3 * s; i++)
            prompts[s][i] = token(i, s + 1, V);
        next[s] = token(100, s + 1, V);
        spans[s] = (dy_span){prompts[s], 1 + 3 * s, 0, blocks[s], MAX_BLOCKS, 1};
    }
    step_ok(e, spans, N_SEQ, o->spans);
    for (int s = 0; s < N_SEQ; s++)
        spans[s] = (dy_span){&next[s], 1, 1 + 3 * s, blocks[s], MAX_BLOCKS, 1};
    step_ok(e, spans, N_SEQ, o->decode);

    dy_engine_free(e);
    dy_kv_pool_free(kv);
    dy_model_free(m);
}

static outputs alloc_outputs(int V)
{
    outputs o = {malloc(sizeof(float) * PREFILL * (size_t)V),
                 malloc(sizeof(float) * N_SEQ * (size_t)V), malloc(sizeof(float) * N_SEQ * (size_t)V)};
    assert_true(o.prefill && o.spans && o.decode);
    return o;
}

static void free_outputs(outputs *o)
{
    free(o->prefill);
    free(o->spans);
    free(o->decode);
}

static void check_threads_match_one(const char *path)
{
    char err[512];
    dy_model *m = dy_model_load(path, NULL, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    const int V = m->hp.vocab_size;
    dy_model_free(m);
    outputs one = alloc_outputs(V), many = alloc_outputs(V);
    run_steps(path, 1, &one);
    const int threads[] = {2, 3, 5};
    for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
        run_steps(path, threads[i], &many);
        if (memcmp(one.prefill, many.prefill, sizeof(float) * PREFILL * (size_t)V))
            fail_msg("%s: prefill logits on %d threads differ from 1 thread's", path, threads[i]);
        if (memcmp(one.spans, many.spans, sizeof(float) * N_SEQ * (size_t)V))
            fail_msg("%s: multi-span logits on %d threads differ from 1 thread's", path, threads[i]);
        if (memcmp(one.decode, many.decode, sizeof(float) * N_SEQ * (size_t)V))
            fail_msg("%s: batched decode logits on %d threads differ from 1 thread's", path,
                     threads[i]);
    }
    free_outputs(&one);
    free_outputs(&many);
}

static void test_stories260k(void **st)
{
    (void)st;
    check_threads_match_one(tu_path("models/stories260K.gguf"));
}

/* `dyad gen-model --shape tiny` (4 query heads on 2 KV heads), made once in the build tree. */
static void test_generated_gqa_q8_0(void **st)
{
    (void)st;
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/gen-tiny-q8_0.gguf", DYAD_BINARY_DIR);
    if (!tu_exists(path)) {
        snprintf(cmd, sizeof cmd, "'%s/dyad' gen-model --shape tiny --type q8_0 --threads 1 "
                 "-o '%s.tmp' && mv '%s.tmp' '%s'", DYAD_BINARY_DIR, path, path, path);
        if (system(cmd) != 0)
            fail_msg("cannot generate %s", path);
    }
    check_threads_match_one(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_generated_gqa_q8_0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
