/* cmd_gen_model.c — `dyad gen-model`: writes a llama model with random weights in a given
 * shape and weight type, for benchmarks and tests of models larger than any we ship. Owns
 * the shapes, the deterministic weight generator and the command line; the vocabulary (and
 * so the tokenizer) is copied from a real GGUF vocab file so that llama.cpp loads the
 * result and real text tokenizes. Weights are generated and quantized a few rows at a time
 * and streamed to the file, so even the 1b f32 model (4.4 GB) never sits in memory. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/threadpool.h"
#include "util/clock.h"
#include "util/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: dyad gen-model --shape SHAPE -o OUT.gguf [--type TYPE] [--seed S] [--vocab FILE]\n"
    "                      [--threads N]\n"
    "\n"
    "Writes a llama model with random weights (normal, std 0.02; norms 1). On a terminal,\n"
    "stderr shows a progress line while it writes.\n";

#define DEFAULT_VOCAB DYAD_SOURCE_DIR "/tests/data/vocab/ggml-vocab-llama-spm.gguf"
#define WEIGHT_STD 0.02f

typedef struct {
    const char *name;
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, ctx_len;
} gen_shape;

#define N_SHAPES 4
/* tiny: every row length a multiple of 256, so each type is tested without fallbacks. */
static const gen_shape shapes[N_SHAPES] = {
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
    int shape_index; /* -1: none given */
    const char *shape_names[N_SHAPES + 1];
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
        dy_progress *pg = dy_progress_new(stderr, isatty(STDERR_FILENO) == 1, "dyad gen-model",
                                          DY_PROGRESS_BYTES, NULL, 0, dy_now());
        dy_gguf_writer_set_progress(w, pg);
        ok = dy_gguf_writer_begin(w, o->out, err, sizeof err) &&
             write_weights(w, o, &hp, err, sizeof err) &&
             dy_gguf_writer_finish(w, err, sizeof err);
        dy_progress_finish(pg);
    }
    if (!ok)
        fprintf(stderr, "dyad gen-model: %s\n", *err ? err : "out of memory");
    dy_gguf_writer_free(w);
    free(ones);
    dy_gguf_close(vocab);
    return ok ? 0 : 1;
}

/* ---------------------------------------------------------------- command line */

static bool set_type(void *ctx, const char *v, char *err, size_t errlen)
{
    gen_opts *o = ctx;
    if (dy_type_parse(v, &o->type) && dy_type_is_weight(o->type))
        return true;
    snprintf(err, errlen, "unknown weight type '%s'", v);
    return false;
}

static int default_threads(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
}

int cmd_gen_model(int argc, char **argv)
{
    gen_opts o = {.type = DY_F32};
    for (int i = 0; i < N_SHAPES; i++)
        o.shape_names[i] = shapes[i].name;
    const dy_opt t[] = {
        {.name = "shape", .kind = DY_OPT_ENUM, .dst = &o.shape_index, .meta = "SHAPE",
         .help = "tiny (dim 256, 2 layers), 15m, 110m (the llama2.c stories shapes) or 1b "
                 "(TinyLlama-1.1B: dim 2048, 22 layers, 32/4 heads, FFN 5632)",
         .names = o.shape_names, .def = -1},
        {.name = "output", .short_name = 'o', .kind = DY_OPT_STR, .dst = &o.out,
         .meta = "OUT.gguf", .help = "the file to write"},
        {.name = "type", .kind = DY_OPT_CALL, .call = set_type, .ctx = &o, .meta = "TYPE",
         .help = "f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k; matrices whose rows do not "
                 "fit the type's blocks fall back to q8_0, else f16",
         .shown_default = dy_type_name(o.type)},
        {.name = "seed", .kind = DY_OPT_U64, .dst = &o.seed, .meta = "S",
         .help = "weights are a function of the seed", .def = 1},
        {.name = "vocab", .kind = DY_OPT_STR, .dst = &o.vocab, .meta = "FILE",
         .help = "GGUF whose tokenizer.* metadata is copied", .def_str = DEFAULT_VOCAB,
         .shown_default = "Llama 2's 32000-token vocab, tests/data/vocab/"
                          "ggml-vocab-llama-spm.gguf in the source tree"},
        {.name = "threads", .kind = DY_OPT_INT, .dst = &o.threads, .meta = "N",
         .help = "threads for generating and quantizing", .min = 1, .max = 1024,
         .def = default_threads(), .shown_default = "all cores"},
        {.name = "ctx", .kind = DY_OPT_INT, .dst = &o.ctx, .meta = "N",
         .help = "context length to record instead of the shape's (e.g. 4096 for long-prompt "
                 "benchmarks; RoPE extends, the weights are random anyway)",
         .min = 16, .max = 1 << 20, .shown_default = ""},
    };
    const int n = (int)(sizeof t / sizeof t[0]);
    int rc = cli_parse("gen-model", usage, NULL, t, n, argc, argv, NULL);
    if (rc == CLI_GO && (o.shape_index < 0 || !o.out)) {
        fprintf(stderr, "dyad gen-model: needs --shape and -o\n");
        rc = 2;
    }
    if (rc == 2)
        dy_opts_help(stderr, usage, t, n, NULL);
    if (rc != CLI_GO)
        return rc;
    o.shape = &shapes[o.shape_index];
    return generate(&o);
}
