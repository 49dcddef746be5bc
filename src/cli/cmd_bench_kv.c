/* cmd_bench_kv.c — `dyad bench kv`: what an f16 or q8_0 KV cache costs in quality against the
 * f32 cache. Two engines of one model, one per cache type, are fed the same tokens: a prompt
 * (BOS, then synthetic ids), then the f32 engine's greedy choices one at a time (teacher
 * forcing). At each generated position it compares the two engines' logits: the largest and
 * the root-mean-square difference, and whether their top tokens agree. Until the first
 * disagreement both engines have seen the same tokens, so that position is also where free
 * greedy generation with the quantized cache would first leave the f32 text; the f32 cache's
 * margin there (its top logit minus its logit of the other cache's top token) says how close a
 * call it was. A benchmark of
 * numbers, not of time: prints, asserts nothing. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "engine/forward.h"
#include "engine/model.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char kv_usage[] =
    "usage: dyad bench kv [--model PATH] [--kv-type f16|q8_0] [--prompt N] [--tokens N]\n"
    "Logits with the KV cache in --kv-type against the f32 cache's, over a prompt of N tokens\n"
    "and N greedy tokens after it (the f32 cache's choices fed to both). One JSON object.\n";

typedef struct {
    const char *model, *tokenizer;
    int kv_type, prompt, tokens, threads;
} kv_opts;

/* One engine with a pool of one type, holding one sequence of up to len positions. */
typedef struct {
    dy_kv_pool *kv;
    dy_engine *e;
    int32_t *blocks;
    int n_blocks;
    float *logits;
} side;

static int side_new(side *s, dy_model *m, dy_kv_type t, int len, int threads, char *err,
                    size_t errlen)
{
    const int bs = 16;
    s->n_blocks = (len + bs - 1) / bs;
    const dy_kv_shape shape = dy_model_kv_shape(m, bs, t);
    s->kv = dy_kv_pool_make(s->n_blocks, &shape, NULL);
    s->blocks = malloc(sizeof(int32_t) * (size_t)s->n_blocks);
    s->logits = malloc(sizeof(float) * (size_t)m->hp.vocab_size);
    if (!s->kv || !s->blocks || !s->logits) {
        snprintf(err, errlen, "out of memory for %d positions", len);
        return -1;
    }
    for (int i = 0; i < s->n_blocks; i++)
        s->blocks[i] = dy_kv_alloc(s->kv);
    s->e = dy_engine_new(m, s->kv, threads, 512, err, errlen);
    return s->e ? 0 : -1;
}

static void side_free(side *s)
{
    dy_engine_free(s->e);
    dy_kv_pool_free(s->kv);
    free(s->blocks);
    free(s->logits);
}

/* Runs tokens [pos, pos + n) through the side (in steps of the engine's size); the logits of
 * the last one land in s->logits. */
static int feed(side *s, const int32_t *tokens, int pos, int n, char *err, size_t errlen)
{
    const int chunk = dy_engine_max_step_tokens(s->e);
    for (int p = 0; p < n; p += chunk) {
        const int k = n - p < chunk ? n - p : chunk;
        dy_span sp = {tokens + p, k, pos + p, s->blocks, s->n_blocks, 1};
        if (dy_engine_step(s->e, &sp, 1, s->logits, err, errlen) != 0)
            return -1;
    }
    return 0;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        best = x[i] > x[best] ? i : best;
    return best;
}

typedef struct {
    double max_err, sum_sq, max_abs;
    long n_values;
    int agree, first_diff;
    double first_margin; /* there: f32's logit of its top token minus of the other's top */
} quality;

static void compare(quality *q, const float *ref, const float *got, int V, int k)
{
    for (int v = 0; v < V; v++) {
        const double d = (double)got[v] - ref[v];
        q->max_err = fmax(q->max_err, fabs(d));
        q->max_abs = fmax(q->max_abs, fabs((double)ref[v]));
        q->sum_sq += d * d;
    }
    q->n_values += V;
    const int a = argmax(ref, V), b = argmax(got, V);
    if (a == b)
        q->agree++;
    else if (q->first_diff < 0) {
        q->first_diff = k;
        q->first_margin = (double)ref[a] - ref[b];
    }
}

static int run(const kv_opts *o, dy_model *m, quality *q, char *err, size_t errlen)
{
    const int len = o->prompt + o->tokens, V = m->hp.vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)len);
    side a = {0}, b = {0};
    int rc = -1;
    if (!ids) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    ids[0] = 1; /* BOS */
    for (int i = 1; i < o->prompt; i++)
        ids[i] = (int32_t)((i * 7919u + 13) % (unsigned)(V - 3)) + 3;
    if (side_new(&a, m, DY_KV_F32, len, o->threads, err, errlen) != 0 ||
        side_new(&b, m, (dy_kv_type)o->kv_type, len, o->threads, err, errlen) != 0 ||
        feed(&a, ids, 0, o->prompt, err, errlen) != 0 ||
        feed(&b, ids, 0, o->prompt, err, errlen) != 0)
        goto out;
    *q = (quality){.first_diff = -1};
    for (int k = 0; k < o->tokens; k++) {
        compare(q, a.logits, b.logits, V, k);
        if (k + 1 == o->tokens)
            break;
        int32_t next = argmax(a.logits, V);
        if (feed(&a, &next, o->prompt + k, 1, err, errlen) != 0 ||
            feed(&b, &next, o->prompt + k, 1, err, errlen) != 0)
            goto out;
    }
    rc = 0;
out:
    side_free(&a);
    side_free(&b);
    free(ids);
    return rc;
}

static void print_json(const kv_opts *o, const dy_model *m, const quality *q)
{
    json_t *j = json_object();
    json_object_set_new(j, "model", json_string(m->path));
    json_object_set_new(j, "kv_type", json_string(dy_kv_type_name((dy_kv_type)o->kv_type)));
    json_object_set_new(j, "prompt_tokens", json_integer(o->prompt));
    json_object_set_new(j, "generated_tokens", json_integer(o->tokens));
    json_object_set_new(j, "top1_agreement", json_real((double)q->agree / o->tokens));
    json_object_set_new(j, "first_disagreement", json_integer(q->first_diff));
    if (q->first_diff >= 0)
        json_object_set_new(j, "first_disagreement_f32_margin", json_real(q->first_margin));
    json_object_set_new(j, "max_logit_error", json_real(q->max_err));
    json_object_set_new(j, "rms_logit_error", json_real(sqrt(q->sum_sq / (double)q->n_values)));
    json_object_set_new(j, "max_abs_logit", json_real(q->max_abs));
    char *s = json_dumps(j, JSON_COMPACT);
    if (s)
        puts(s);
    free(s);
    json_decref(j);
}

int cmd_bench_kv(int argc, char **argv)
{
    kv_opts o = {0};
    const dy_opt t[] = {
        {.name = "model", .kind = DY_OPT_STR, .dst = &o.model, .meta = "PATH",
         .help = "GGUF file or llama2.c checkpoint", .shown_default = "the bundled stories260K"},
        {.name = "tokenizer", .kind = DY_OPT_STR, .dst = &o.tokenizer, .meta = "PATH",
         .help = "llama2.c tokenizer.bin for checkpoints (not needed: ids are synthetic)"},
        {.name = "kv-type", .kind = DY_OPT_ENUM, .dst = &o.kv_type, .meta = "T",
         .help = "the cache type compared with f32", .names = dy_kv_type_names(),
         .def = DY_KV_F16},
        {.name = "prompt", .kind = DY_OPT_INT, .dst = &o.prompt, .meta = "N",
         .help = "prompt tokens (BOS, then synthetic ids)", .min = 1, .max = 65536, .def = 1},
        {.name = "tokens", .kind = DY_OPT_INT, .dst = &o.tokens, .meta = "N",
         .help = "greedy tokens compared", .min = 1, .max = 65536, .def = 256},
        {.name = "threads", .kind = DY_OPT_INT, .dst = &o.threads, .meta = "N",
         .help = "engine threads", .min = 1, .max = 256, .def = 2},
    };
    int rc = cli_parse("bench kv", kv_usage, NULL, t, (int)(sizeof t / sizeof t[0]), argc, argv,
                       NULL);
    if (rc != CLI_GO)
        return rc;
    char def[4096], err[512];
    if (!o.model) {
        snprintf(def, sizeof def, "%s/stories260K.bin", dyad_model_dir());
        o.model = def;
    }
    dy_model *m = dy_model_load(o.model, NULL, err, sizeof err);
    if (!m) {
        fprintf(stderr, "dyad bench kv: %s\n", err);
        return 1;
    }
    if (o.prompt + o.tokens > m->hp.ctx_len)
        m->hp.ctx_len = o.prompt + o.tokens; /* RoPE extends; this measures numbers */
    quality q;
    rc = run(&o, m, &q, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "dyad bench kv: %s\n", err);
    else
        print_json(&o, m, &q);
    dy_model_free(m);
    return rc == 0 ? 0 : 1;
}
