/* cmd_gen_model.c — `dyad gen-model`: writes a llama model with random weights in a given
 * shape and weight type, for benchmarks and tests of models larger than any we ship. Owns
 * the shapes, the deterministic weight generator and the command line; the vocabulary (and
 * so the tokenizer) is copied from a real GGUF vocab file so that llama.cpp loads the
 * result and real text tokenizes. Weights are generated and quantized a few rows at a time
 * and streamed to the file, so even the 1b f32 model (4.4 GB) never sits in memory. */
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: dyad gen-model --shape SHAPE -o OUT.gguf [--type TYPE] [--seed S] [--vocab FILE]\n"
    "                      [--threads N]\n"
    "\n"
    "Writes a llama model with random weights (normal, std 0.02; norms 1).\n"
    "  --shape SHAPE   tiny (dim 256, 2 layers), 15m, 110m (the llama2.c stories shapes) or\n"
    "                  1b (TinyLlama-1.1B: dim 2048, 22 layers, 32/4 heads, FFN 5632)\n"
    "  --type TYPE     f32 (default), f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k; matrices whose\n"
    "                  rows do not fit the type's blocks fall back to q8_0, else f16\n"
    "  --seed S        weights are a function of the seed (default 1)\n"
    "  --vocab FILE    GGUF whose tokenizer.* metadata is copied (default: Llama 2's 32000-token\n"
    "                  vocab, tests/data/vocab/ggml-vocab-llama-spm.gguf in the source tree)\n"
    "  --threads N     threads for generating and quantizing (default: all cores)\n"
    "  --ctx N         context length to record instead of the shape's (e.g. 4096 for long-prompt\n"
    "                  benchmarks; RoPE extends, the weights are random anyway)\n";

#define DEFAULT_VOCAB DYAD_SOURCE_DIR "/tests/data/vocab/ggml-vocab-llama-spm.gguf"
#define WEIGHT_STD 0.02f

typedef struct {
    const char *name;
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, ctx_len;
} gen_shape;

/* tiny: every row length a multiple of 256, so each type is tested without fallbacks. */
static const gen_shape shapes[] = {
    {"tiny", 256, 512, 2, 4, 2, 128},
    {"15m", 288, 768, 6, 6, 6, 256},
    {"110m", 768, 2048, 12, 12, 12, 1024},
    {"1b", 2048, 5632, 22, 32, 4, 2048},
};

typedef struct {
    const gen_shape *shape;
    const char *out, *vocab;
    dy_type type;
    uint64_t seed;
    int threads;
    int ctx;  /* 0: the shape's */
} gen_opts;

/* ---------------------------------------------------------------- random weights */

/* splitmix64: a fast, well-mixed 64-bit generator; one call per weight. */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* An approximately standard normal value from one 64-bit draw: the sum of its four 16-bit
 * lanes (Irwin-Hall, 4 terms), centred and scaled to unit variance. Bounded at ±3.46σ, which
 * is all random test weights need, and several times cheaper than Box-Muller. */
static float normal_from(uint64_t u)
{
    const float mean = 4 * 32767.5f, inv_std = 1.0f / 37837.23f; /* sqrt(4·(65536²−1)/12) */
    uint32_t s = (uint32_t)(u & 0xffff) + (uint32_t)((u >> 16) & 0xffff) +
                 (uint32_t)((u >> 32) & 0xffff) + (uint32_t)(u >> 48);
    return ((float)s - mean) * inv_std;
}

typedef struct {
    uint64_t seed;
    uint64_t tensor; /* index in the file: each tensor has its own stream */
    int64_t cols;
    float std;
} gen_ctx;

/* Row `row` depends only on (seed, tensor, row), so rows can be made on any thread in any
 * order and the file is the same whatever --threads is. */
static void gen_fill(void *p, int64_t row, float *dst)
{
    const gen_ctx *c = p;
    uint64_t s = c->seed;
    s = splitmix64(&s) ^ c->tensor;
    s = splitmix64(&s) ^ (uint64_t)row;
    splitmix64(&s);
    for (int64_t i = 0; i < c->cols; i++)
        dst[i] = c->std * normal_from(splitmix64(&s));
}

/* ---------------------------------------------------------------- the model */

static dy_hparams shape_hparams(const gen_shape *sh, int vocab_size)
{
    dy_hparams hp = {
        .dim = sh->dim, .hidden_dim = sh->hidden_dim, .n_layers = sh->n_layers,
        .n_heads = sh->n_heads, .n_kv_heads = sh->n_kv_heads, .head_dim = sh->dim / sh->n_heads,
        .vocab_size = vocab_size, .ctx_len = sh->ctx_len, .rope_base = 10000.0f,
        .rms_eps = 1e-5f,
    };
    hp.n_rot = hp.head_dim;
    return hp;
}

/* Adds a weight matrix of rows × cols (ne = {cols, rows}), streamed later. */
static void add_matrix(dy_gguf_writer *w, const char *name, int64_t rows, int64_t cols,
                       dy_type want)
{
    int64_t ne[2] = {cols, rows};
    dy_type t = dy_gguf_fallback_type(want, cols);
    dy_gguf_writer_add_tensor(w, name, 2, ne, t, NULL, dy_gguf_tensor_bytes(t, 2, ne));
}

static void add_norm(dy_gguf_writer *w, const char *name, const float *ones, int64_t n)
{
    dy_gguf_writer_add_tensor(w, name, 1, &n, DY_F32, ones, (uint64_t)n * sizeof(float));
}

/* Every tensor, in file order: embedding, the blocks, output norm and output. */
static void add_tensors(dy_gguf_writer *w, const dy_hparams *hp, dy_type type, const float *ones)
{
    const int64_t dim = hp->dim, hid = hp->hidden_dim, V = hp->vocab_size;
    const int64_t qd = (int64_t)hp->n_heads * hp->head_dim;
    const int64_t kvd = (int64_t)hp->n_kv_heads * hp->head_dim;
    char name[DY_GGUF_WRITE_MAX_NAME];
    add_matrix(w, "token_embd.weight", V, dim, type);
    for (int l = 0; l < hp->n_layers; l++) {
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s ".weight", l), name)
        add_norm(w, NAME("attn_norm"), ones, dim);
        add_matrix(w, NAME("attn_q"), qd, dim, type);
        add_matrix(w, NAME("attn_k"), kvd, dim, type);
        add_matrix(w, NAME("attn_v"), kvd, dim, type);
        add_matrix(w, NAME("attn_output"), dim, qd, type);
        add_norm(w, NAME("ffn_norm"), ones, dim);
        add_matrix(w, NAME("ffn_gate"), hid, dim, type);
        add_matrix(w, NAME("ffn_down"), dim, hid, type);
        add_matrix(w, NAME("ffn_up"), hid, dim, type);
#undef NAME
    }
    add_norm(w, "output_norm.weight", ones, dim);
    add_matrix(w, "output.weight", V, dim, type);
}

static bool set_metadata(dy_gguf_writer *w, const gen_opts *o, const dy_hparams *hp,
                         const dy_gguf_file *vocab)
{
    char name[64];
    snprintf(name, sizeof name, "dyad-random-%s", o->shape->name);
    dy_gguf_writer_set_llama_hparams(w, hp);
    dy_gguf_writer_set_str(w, "general.name", name);
    dy_gguf_writer_set_u32(w, "general.file_type", dy_gguf_llama_file_type(o->type));
    return dy_gguf_writer_copy_tokenizer(w, vocab);
}

/* The matrices are streamed in file order; norms (which carry their data) are written by
 * the writer as it passes them. */
static bool write_weights(dy_gguf_writer *w, const gen_opts *o, const dy_hparams *hp, char *err,
                          size_t errlen)
{
    const int64_t dim = hp->dim, hid = hp->hidden_dim, V = hp->vocab_size;
    const int64_t qd = (int64_t)hp->n_heads * hp->head_dim;
    const int64_t kvd = (int64_t)hp->n_kv_heads * hp->head_dim;
    /* rows × cols of the matrices in the order add_tensors adds them. */
    const int64_t layer[7][2] = {{qd, dim}, {kvd, dim}, {kvd, dim}, {dim, qd},
                                 {hid, dim}, {dim, hid}, {hid, dim}};
    dy_pool *pool = o->threads > 1 ? dy_pool_new(o->threads) : NULL;
    bool ok = true;
    int n_mats = 2 + 7 * hp->n_layers;
    for (int i = 0; ok && i < n_mats; i++) {
        const int64_t *rc = i == 0 || i == n_mats - 1 ? (const int64_t[2]){V, dim}
                                                      : layer[(i - 1) % 7];
        gen_ctx c = {o->seed, (uint64_t)dy_gguf_writer_current(w), rc[1], WEIGHT_STD};
        ok = dy_gguf_writer_stream_rows(w, pool, dy_gguf_fallback_type(o->type, rc[1]), rc[1],
                                        rc[0], gen_fill, &c, err, errlen);
    }
    dy_pool_free(pool);
    return ok;
}

static int generate(const gen_opts *o)
{
    char err[1024] = "";
    dy_gguf_file *vocab = dy_gguf_open(o->vocab, err, sizeof err);
    const dy_gguf_kv *toks =
        vocab ? dy_gguf_get_arr(vocab, "tokenizer.ggml.tokens", DY_GGUF_STRING) : NULL;
    if (vocab && !toks)
        snprintf(err, sizeof err, "%s: no tokenizer.ggml.tokens: not a GGUF vocabulary",
                 o->vocab);
    dy_gguf_writer *w = toks ? dy_gguf_writer_new() : NULL;
    float *ones = w ? malloc(sizeof(float) * (size_t)o->shape->dim) : NULL;
    bool ok = ones != NULL;
    if (ok) {
        for (int i = 0; i < o->shape->dim; i++)
            ones[i] = 1.0f;
        dy_hparams hp = shape_hparams(o->shape, (int)toks->v.arr.n);
        if (o->ctx)
            hp.ctx_len = o->ctx;
        set_metadata(w, o, &hp, vocab);
        add_tensors(w, &hp, o->type, ones);
        ok = dy_gguf_writer_begin(w, o->out, err, sizeof err) &&
             write_weights(w, o, &hp, err, sizeof err) &&
             dy_gguf_writer_finish(w, err, sizeof err);
    }
    if (!ok)
        fprintf(stderr, "dyad gen-model: %s\n", *err ? err : "out of memory");
    dy_gguf_writer_free(w);
    free(ones);
    dy_gguf_close(vocab);
    return ok ? 0 : 1;
}

/* ---------------------------------------------------------------- command line */

static const gen_shape *find_shape(const char *name)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, name))
            return &shapes[i];
    fprintf(stderr, "dyad gen-model: --shape: unknown shape '%s' (tiny, 15m, 110m, 1b)\n", name);
    return NULL;
}

static bool parse_type(const char *val, dy_type *out)
{
    if (dy_type_parse(val, out) && dy_type_is_weight(*out))
        return true;
    fprintf(stderr, "dyad gen-model: --type: unknown weight type '%s'\n", val);
    return false;
}

/* One option at argv[*i]; false (with *bad set) on an error. */
static bool parse_one(int argc, char **argv, int *i, gen_opts *o, bool *bad)
{
    const char *val;
    if (arg_take("gen-model", argc, argv, i, "--shape", &val, bad))
        return (o->shape = find_shape(val)) != NULL || !(*bad = true);
    if (arg_take("gen-model", argc, argv, i, "--type", &val, bad))
        return parse_type(val, &o->type) || !(*bad = true);
    if (arg_take("gen-model", argc, argv, i, "-o", &val, bad) ||
        arg_take("gen-model", argc, argv, i, "--output", &val, bad))
        return (o->out = val), true;
    if (arg_take("gen-model", argc, argv, i, "--seed", &val, bad))
        return arg_u64("gen-model", "--seed", val, &o->seed) || !(*bad = true);
    if (arg_take("gen-model", argc, argv, i, "--vocab", &val, bad))
        return (o->vocab = val), true;
    if (arg_take("gen-model", argc, argv, i, "--threads", &val, bad))
        return arg_int("gen-model", "--threads", val, 1, 1024, &o->threads) || !(*bad = true);
    if (arg_take("gen-model", argc, argv, i, "--ctx", &val, bad))
        return arg_int("gen-model", "--ctx", val, 16, 1 << 20, &o->ctx) || !(*bad = true);
    if (!*bad)
        fprintf(stderr, "dyad gen-model: unknown argument '%s'\n", argv[*i]);
    *bad = true;
    return false;
}

int cmd_gen_model(int argc, char **argv)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    gen_opts o = {.type = DY_F32, .seed = 1, .vocab = DEFAULT_VOCAB,
                  .threads = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu};
    bool bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        parse_one(argc, argv, &i, &o, &bad);
    }
    if (!bad && (!o.shape || !o.out)) {
        fprintf(stderr, "dyad gen-model: needs --shape and -o\n");
        bad = true;
    }
    if (bad) {
        fputs(usage, stderr);
        return 2;
    }
    return generate(&o);
}
