/* test_forward.c — the step contract: batched equals sequential. A P-token prefill in one
 * step gives the logits of P one-token steps; B sequences decoded in one step give the
 * logits each gets alone; a prompt split into chunks at any boundary gives the logits of
 * one chunk; scattered KV blocks give the logits of contiguous ones; scalar and SIMD
 * kernels agree. Run on the bundled f32 model and on llama.cpp-quantized files. With an f16 or
 * q8_0 KV cache: the same logits at every kernel level, logits near the f32 cache's, and with
 * f16 the greedy ids of llama.cpp's files unchanged. */
#include "testutil.h"
#include "engine/forward.h"
#include "engine/model.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 16
#define MAXLEN 96

typedef struct {
    dy_model *m;
    dy_kv_pool *kv;
    dy_engine *e;
    int V;
} fixture;

static fixture *open_fixture_kv(const char *path, int n_blocks, int threads, dy_kv_type t);

static fixture *open_fixture_abs(const char *path, int n_blocks, int threads)
{
    return open_fixture_kv(path, n_blocks, threads, DY_KV_F32);
}

static fixture *open_fixture(const char *rel, int n_blocks, int threads)
{
    return open_fixture_abs(tu_path(rel), n_blocks, threads);
}

/* tu_path of a formatted relative path. */
static const char *tu_path2(const char *fmt, const char *arg)
{
    char rel[256];
    snprintf(rel, sizeof rel, fmt, arg);
    return tu_path(rel);
}

static fixture *open_fixture_kv(const char *path, int n_blocks, int threads, dy_kv_type t)
{
    char err[512];
    fixture *f = calloc(1, sizeof *f);
    f->m = dy_model_load(path, NULL, err, sizeof err);
    if (!f->m)
        fail_msg("%s", err);
    f->V = f->m->hp.vocab_size;
    const dy_kv_shape shape = dy_model_kv_shape(f->m, BS, t);
    f->kv = dy_kv_pool_make(n_blocks, &shape, NULL);
    assert_non_null(f->kv);
    f->e = dy_engine_new(f->m, f->kv, threads, 256, err, sizeof err);
    if (!f->e)
        fail_msg("%s", err);
    return f;
}

static void close_fixture(fixture *f)
{
    dy_engine_free(f->e);
    dy_kv_pool_free(f->kv);
    dy_model_free(f->m);
    free(f);
}

static void prompt_ids(int32_t *ids, int n, int V, unsigned salt)
{
    ids[0] = 1;
    for (int i = 1; i < n; i++)
        ids[i] = (int32_t)((i * 131u + salt * 17u + 7) % (unsigned)(V - 3)) + 3;
}

static void step_ok(fixture *f, const dy_span *s, int n, float *logits)
{
    char err[512];
    if (dy_engine_step(f->e, s, n, logits, err, sizeof err) != 0)
        fail_msg("step failed: %s", err);
}

static void assert_close(const float *a, const float *b, int n, double rel, const char *what)
{
    double maxdiff = 0, maxabs = 0;
    for (int i = 0; i < n; i++) {
        maxdiff = fmax(maxdiff, fabs((double)a[i] - b[i]));
        maxabs = fmax(maxabs, fabs((double)b[i]));
    }
    if (maxdiff > rel * fmax(maxabs, 1.0))
        fail_msg("%s: max |diff| %.3g exceeds %.1g × max |logit| %.3g", what, maxdiff, rel, maxabs);
}

/* Logits at every position of one sequence, one token per step. */
static void one_by_one(fixture *f, const int32_t *ids, int n, const int32_t *blocks, float *out)
{
    for (int p = 0; p < n; p++) {
        dy_span s = {ids + p, 1, p, blocks, (n + BS - 1) / BS, 1};
        step_ok(f, &s, 1, out + (size_t)p * f->V);
    }
}

static void check_prefill_equals_steps(const char *model, double tol)
{
    fixture *f = open_fixture(model, 16, 2);
    int n = 40;
    int32_t ids[64], blocks[4] = {0, 1, 2, 3};
    prompt_ids(ids, n, f->V, 1);
    float *seq = malloc(sizeof(float) * n * f->V), *bat = malloc(sizeof(float) * n * f->V);
    one_by_one(f, ids, n, blocks, seq);
    dy_span s = {ids, n, 0, blocks, 4, n};
    step_ok(f, &s, 1, bat);
    assert_close(bat, seq, n * f->V, tol, model);
    free(seq);
    free(bat);
    close_fixture(f);
}

static void test_prefill_equals_steps_f32(void **st) { (void)st; check_prefill_equals_steps("models/stories260K.bin", 1e-4); }
static void test_prefill_equals_steps_q8_0(void **st) { (void)st; check_prefill_equals_steps("tests/data/quant/model-q8_0.gguf", 1e-4); }
static void test_prefill_equals_steps_q4_k(void **st) { (void)st; check_prefill_equals_steps("tests/data/quant/model-q4_k_m.gguf", 1e-4); }

/* Every split of the prompt into two chunks gives the last logits of the whole. */
static void test_chunk_boundaries(void **st)
{
    (void)st;
    fixture *f = open_fixture("models/stories260K.bin", 16, 2);
    int n = 37;
    int32_t ids[64], blocks[3] = {0, 1, 2};
    prompt_ids(ids, n, f->V, 2);
    float *whole = malloc(sizeof(float) * f->V), *split = malloc(sizeof(float) * f->V);
    dy_span s = {ids, n, 0, blocks, 3, 1};
    step_ok(f, &s, 1, whole);
    for (int cut = 1; cut < n; cut++) {
        dy_span a = {ids, cut, 0, blocks, 3, 0};
        dy_span b = {ids + cut, n - cut, cut, blocks, 3, 1};
        step_ok(f, &a, 1, NULL);
        step_ok(f, &b, 1, split);
        char what[64];
        snprintf(what, sizeof what, "split at %d", cut);
        assert_close(split, whole, f->V, 1e-4, what);
    }
    free(whole);
    free(split);
    close_fixture(f);
}

/* B sequences of different lengths decoded in one step = each decoded alone. Also mixes
 * a prefill chunk into the same step, as continuous batching does. */
static void check_batch_equals_alone(const char *model)
{
    enum { B = 5 };
    fixture *f = open_fixture(model, 64, 2);
    int len[B] = {3, 17, 16, 40, 9};
    int32_t ids[B][64], tables[B][4];
    float *alone = malloc(sizeof(float) * B * f->V), *together = malloc(sizeof(float) * B * f->V);
    for (int b = 0; b < B; b++) {
        prompt_ids(ids[b], len[b] + 1, f->V, (unsigned)b + 3);
        for (int k = 0; k < 4; k++)
            tables[b][k] = b * 4 + k;
        dy_span s = {ids[b], len[b], 0, tables[b], 4, 1};
        step_ok(f, &s, 1, together);
        dy_span d = {ids[b] + len[b], 1, len[b], tables[b], 4, 1};
        step_ok(f, &d, 1, alone + (size_t)b * f->V);
    }
    dy_span spans[B + 1];
    for (int b = 0; b < B; b++)
        spans[b] = (dy_span){ids[b] + len[b], 1, len[b], tables[b], 4, 1};
    /* a fresh sequence's 20-token prefill chunk rides along without logits */
    int32_t extra[20], extra_blocks[2] = {40, 41};
    prompt_ids(extra, 20, f->V, 99);
    spans[B] = (dy_span){extra, 20, 0, extra_blocks, 2, 0};
    step_ok(f, spans, B + 1, together);
    assert_close(together, alone, B * f->V, 1e-4, model);
    free(alone);
    free(together);
    close_fixture(f);
}

static void test_batch_equals_alone_f32(void **st) { (void)st; check_batch_equals_alone("models/stories260K.bin"); }
static void test_batch_equals_alone_q4_0(void **st) { (void)st; check_batch_equals_alone("tests/data/quant/model-q4_0.gguf"); }
static void test_batch_equals_alone_q6_k(void **st) { (void)st; check_batch_equals_alone("tests/data/quant/model-q6_k.gguf"); }

/* Blocks scattered over the pool in any order give the logits of contiguous blocks. */
static void test_scattered_blocks(void **st)
{
    (void)st;
    fixture *f = open_fixture("models/stories260K.bin", 32, 1);
    int n = 60;
    int32_t ids[64], contiguous[4] = {0, 1, 2, 3}, scattered[4] = {29, 7, 18, 3};
    prompt_ids(ids, n, f->V, 5);
    float *a = malloc(sizeof(float) * n * f->V), *b = malloc(sizeof(float) * n * f->V);
    dy_span s1 = {ids, n, 0, contiguous, 4, n};
    step_ok(f, &s1, 1, a);
    dy_span s2 = {ids, n, 0, scattered, 4, n};
    step_ok(f, &s2, 1, b);
    assert_memory_equal(a, b, sizeof(float) * n * f->V);
    free(a);
    free(b);
    close_fixture(f);
}

static void test_scalar_matches_simd(void **st)
{
    (void)st;
    const char *models[] = {"models/stories260K.bin", "tests/data/quant/model-q8_0.gguf",
                            "tests/data/quant/model-q4_k_m.gguf", "tests/data/quant/model-q5_k_m.gguf",
                            "tests/data/quant/model-f16.gguf"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        fixture *f = open_fixture(models[i], 8, 2);
        if (dy_engine_simd(f->e) == DY_SIMD_SCALAR) {
            close_fixture(f);
            skip();
        }
        int n = 24;
        int32_t ids[32], blocks[2] = {0, 1};
        prompt_ids(ids, n, f->V, 7);
        float *a = malloc(sizeof(float) * n * f->V), *b = malloc(sizeof(float) * n * f->V);
        dy_span s = {ids, n, 0, blocks, 2, n};
        step_ok(f, &s, 1, a);
        dy_engine_set_simd(f->e, DY_SIMD_SCALAR);
        step_ok(f, &s, 1, b);
        assert_close(a, b, n * f->V, 1e-4, models[i]);
        free(a);
        free(b);
        close_fixture(f);
    }
}

static void test_bad_spans(void **st)
{
    (void)st;
    fixture *f = open_fixture("models/stories260K.bin", 4, 1);
    char err[512];
    int32_t ids[4] = {1, 2, 3, 4}, blocks[2] = {0, 1}, bad_block[1] = {9};
    int32_t bad_tok[1] = {512};
    float logits[512];
    dy_span past_blocks = {ids, 4, 30, blocks, 2, 1};
    assert_int_equal(dy_engine_step(f->e, &past_blocks, 1, logits, err, sizeof err), -1);
    assert_non_null(strstr(err, "exceed"));
    dy_span oob_block = {ids, 1, 0, bad_block, 1, 1};
    assert_int_equal(dy_engine_step(f->e, &oob_block, 1, logits, err, sizeof err), -1);
    dy_span oob_tok = {bad_tok, 1, 0, blocks, 2, 1};
    assert_int_equal(dy_engine_step(f->e, &oob_tok, 1, logits, err, sizeof err), -1);
    assert_non_null(strstr(err, "vocabulary"));
    dy_span too_many_logits = {ids, 2, 0, blocks, 2, 3};
    assert_int_equal(dy_engine_step(f->e, &too_many_logits, 1, logits, err, sizeof err), -1);
    close_fixture(f);
}

/* Parses the integer array after "key": in a JSON text (test data only). */
static int json_ints(const char *json, const char *key, int32_t *out, int cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p || !(p = strchr(p, '[')))
        return -1;
    int n = 0;
    for (p++; *p && *p != ']' && n < cap;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        out[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

/* The BF16 file is stored xz-compressed; unpack it once into the build tree. */
static const char *bf16_model(void)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/model-bf16.gguf", DYAD_BINARY_DIR);
    if (!tu_exists(path)) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "xz -dc '%s' > '%s.tmp' && mv '%s.tmp' '%s'",
                 tu_path("tests/data/quant/model-bf16.gguf.xz"), path, path, path);
        if (system(cmd) != 0)
            fail_msg("cannot unpack the bf16 model (is xz-utils installed?)");
    }
    return path;
}

/* llama.cpp's greedy ids on each of its quantized files (tests/data/quant/README.md), with
 * the KV cache in type kv. */
static void check_llamacpp_greedy(dy_kv_type kv)
{
    const char *types[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        char model[512], ref[256];
        if (!strcmp(types[i], "bf16"))
            snprintf(model, sizeof model, "%s", bf16_model());
        else
            snprintf(model, sizeof model, "%s", tu_path2("tests/data/quant/model-%s.gguf", types[i]));
        snprintf(ref, sizeof ref, "tests/data/quant/model-%s.greedy.json", types[i]);
        char *json = tu_read_file(tu_path(ref), NULL);
        assert_non_null(json);
        int32_t prompt[16], want[80];
        int np = json_ints(json, "prompt_ids", prompt, 16);
        int ng = json_ints(json, "generated_ids", want, 80);
        assert_int_equal(np, 5);
        assert_int_equal(ng, 64);
        free(json);
        fixture *f = open_fixture_kv(model, 8, 2, kv);
        int32_t blocks[5] = {0, 1, 2, 3, 4};
        float *logits = malloc(sizeof(float) * f->V);
        dy_span s = {prompt, np, 0, blocks, 5, 1};
        step_ok(f, &s, 1, logits);
        for (int k = 0; k < ng; k++) {
            int32_t next = 0;
            for (int v = 1; v < f->V; v++)
                if (logits[v] > logits[next])
                    next = v;
            if (next != want[k])
                fail_msg("%s, %s KV: token %d is %d (logit %.6g), llama.cpp gives %d (%.6g)",
                         types[i], dy_kv_type_name(kv), k, next, logits[next], want[k],
                         logits[want[k]]);
            dy_span d = {&next, 1, np + k, blocks, 5, 1};
            step_ok(f, &d, 1, logits);
        }
        free(logits);
        close_fixture(f);
    }
}

static void test_llamacpp_greedy_quant(void **st)
{
    (void)st;
    check_llamacpp_greedy(DY_KV_F32);
}

static void test_llamacpp_greedy_f16_kv(void **st)
{
    (void)st;
    check_llamacpp_greedy(DY_KV_F16);
}

/* Logits of a 40-token prompt (every position) and 8 decode steps with the KV cache in type t,
 * at kernel level simd. */
static float *kv_type_logits(const char *rel, dy_kv_type t, bool scalar, int *n_out, int *V)
{
    fixture *f = open_fixture_kv(tu_path(rel), 4, 2, t);
    if (scalar)
        dy_engine_set_simd(f->e, DY_SIMD_SCALAR);
    enum { P = 40, D = 8 };
    int32_t ids[P + D], blocks[4] = {3, 0, 2, 1};
    prompt_ids(ids, P + D, f->V, 3);
    float *out = malloc(sizeof(float) * (size_t)(P + D) * f->V);
    dy_span s = {ids, P, 0, blocks, 4, P};
    step_ok(f, &s, 1, out);
    for (int k = 0; k < D; k++) {
        dy_span d = {&ids[P + k], 1, P + k, blocks, 4, 1};
        step_ok(f, &d, 1, out + (size_t)(P + k) * f->V);
    }
    *n_out = P + D;
    *V = f->V;
    close_fixture(f);
    return out;
}

/* An f16 or q8_0 cache: the scalar and SIMD levels give the same bits (decoding a row is
 * exact), and the logits stay near the f32 cache's: the largest difference over every
 * position, relative to the largest |logit|, within bound, and the top token the same at all
 * but max_other_top positions. The bounds are end to end, through every layer (and, for the
 * q8_0 model, through activations re-quantised after attention, where a small change can flip
 * a rounding): 1e-2 for f16 (an 11-bit mantissa), 1e-1 for q8_0 (a step of max|x| / 127 per
 * head and position). */
static void check_kv_type_logits(const char *rel, dy_kv_type t, double bound, int max_other_top)
{
    int n, V;
    float *ref = kv_type_logits(rel, DY_KV_F32, false, &n, &V);
    float *simd = kv_type_logits(rel, t, false, &n, &V);
    float *scalar = kv_type_logits(rel, t, true, &n, &V);
    assert_memory_equal(simd, scalar, sizeof(float) * (size_t)n * V);
    double maxdiff = 0, maxabs = 0;
    int same_top = 0;
    for (int p = 0; p < n; p++) {
        const float *a = simd + (size_t)p * V, *b = ref + (size_t)p * V;
        int ta = 0, tb = 0;
        for (int v = 0; v < V; v++) {
            maxdiff = fmax(maxdiff, fabs((double)a[v] - b[v]));
            maxabs = fmax(maxabs, fabs((double)b[v]));
            ta = a[v] > a[ta] ? v : ta;
            tb = b[v] > b[tb] ? v : tb;
        }
        same_top += ta == tb;
    }
    print_message("%s, %s KV: largest logit difference %.3g of max |logit| %.3g; the same top "
                  "token at %d of %d positions\n", rel, dy_kv_type_name(t), maxdiff, maxabs,
                  same_top, n);
    if (!(maxdiff <= bound * maxabs))
        fail_msg("%s, %s KV: logits differ from the f32 cache's by %.3g (bound %.3g)", rel,
                 dy_kv_type_name(t), maxdiff, bound * maxabs);
    if (n - same_top > max_other_top)
        fail_msg("%s, %s KV: another top token at %d positions (at most %d)", rel,
                 dy_kv_type_name(t), n - same_top, max_other_top);
    free(ref);
    free(simd);
    free(scalar);
}

static void test_kv_f16_logits(void **st)
{
    (void)st;
    check_kv_type_logits("models/stories260K.bin", DY_KV_F16, 1e-2, 0);
    check_kv_type_logits("tests/data/quant/model-q8_0.gguf", DY_KV_F16, 1e-2, 0);
}

static void test_kv_q8_0_logits(void **st)
{
    (void)st;
    check_kv_type_logits("models/stories260K.bin", DY_KV_Q8_0, 1e-1, 4);
    check_kv_type_logits("tests/data/quant/model-q8_0.gguf", DY_KV_Q8_0, 1e-1, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_equals_steps_f32),
        cmocka_unit_test(test_prefill_equals_steps_q8_0),
        cmocka_unit_test(test_prefill_equals_steps_q4_k),
        cmocka_unit_test(test_chunk_boundaries),
        cmocka_unit_test(test_batch_equals_alone_f32),
        cmocka_unit_test(test_batch_equals_alone_q4_0),
        cmocka_unit_test(test_batch_equals_alone_q6_k),
        cmocka_unit_test(test_scattered_blocks),
        cmocka_unit_test(test_scalar_matches_simd),
        cmocka_unit_test(test_bad_spans),
        cmocka_unit_test(test_llamacpp_greedy_quant),
        cmocka_unit_test(test_llamacpp_greedy_f16_kv),
        cmocka_unit_test(test_kv_f16_logits),
        cmocka_unit_test(test_kv_q8_0_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
