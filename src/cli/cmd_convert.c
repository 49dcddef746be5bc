/* cmd_convert.c — `dyad convert IN OUT`: a llama2.c checkpoint (with its tokenizer.bin) or a
 * GGUF file, written as GGUF, optionally re-quantized with --type. Owns the mapping from
 * both inputs to a list of tensors to copy or convert, the llama2.c vocabulary's translation
 * into GGUF tokenizer metadata, and the command line. The GGUF format itself is
 * engine/gguf_write.h's business. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/threadpool.h"
#include "util/clock.h"
#include "util/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: dyad convert IN OUT [--type TYPE] [--tokenizer tokenizer.bin] [--threads N]\n"
    "                    [--verbose]\n"
    "\n"
    "Writes IN, a llama2.c checkpoint or a GGUF file, to OUT as GGUF. On a terminal, stderr\n"
    "shows a progress line while it writes.\n";

typedef struct {
    const char *in, *out, *tokenizer;
    bool have_type, verbose;
    dy_type type;
    int threads;
} conv_opts;

/* One tensor of the input and what it becomes. */
typedef struct {
    char name[DY_GGUF_WRITE_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[DY_GGUF_MAX_DIMS];
    dy_type src_type, dst_type;
    const uint8_t *src;
} conv_tensor;

typedef struct {
    conv_tensor *t;
    size_t n, cap;
    bool oom;
} conv_list;

static void list_add(conv_list *l, const char *name, uint32_t n_dims, const int64_t *ne,
                     dy_type type, const void *src)
{
    if (l->oom)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        conv_tensor *p = realloc(l->t, cap * sizeof *p);
        if (!p) {
            l->oom = true;
            return;
        }
        l->t = p;
        l->cap = cap;
    }
    conv_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < DY_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->src_type = t->dst_type = type;
    t->src = src;
}

static void add_mat(conv_list *l, const char *name, const dy_mat *m)
{
    int64_t ne[2] = {m->cols, m->rows};
    list_add(l, name, 2, ne, m->type, m->data);
}

static void add_vec(conv_list *l, const char *name, const float *v, int64_t n)
{
    list_add(l, name, 1, &n, DY_F32, v);
}

static int64_t rows_of(const conv_tensor *t)
{
    int64_t r = 1;
    for (uint32_t d = 1; d < t->n_dims; d++)
        r *= t->ne[d];
    return r;
}

/* ---------------------------------------------------------------- llama2.c input */

/* Every tensor of a loaded llama2.c model under its GGUF name; output.weight is written
 * even when the checkpoint ties it to the embedding. */
static void list_llama2c(conv_list *l, const dy_model *m)
{
    char name[DY_GGUF_WRITE_MAX_NAME];
    add_mat(l, "token_embd.weight", &m->tok_embd);
    for (int i = 0; i < m->hp.n_layers; i++) {
        const dy_layer *ly = &m->layers[i];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s ".weight", i), name)
        add_vec(l, NAME("attn_norm"), ly->attn_norm, m->hp.dim);
        add_mat(l, NAME("attn_q"), &ly->wq);
        add_mat(l, NAME("attn_k"), &ly->wk);
        add_mat(l, NAME("attn_v"), &ly->wv);
        add_mat(l, NAME("attn_output"), &ly->wo);
        add_vec(l, NAME("ffn_norm"), ly->ffn_norm, m->hp.dim);
        add_mat(l, NAME("ffn_gate"), &ly->w_gate);
        add_mat(l, NAME("ffn_down"), &ly->w_down);
        add_mat(l, NAME("ffn_up"), &ly->w_up);
#undef NAME
    }
    add_vec(l, "output_norm.weight", m->out_norm, m->hp.dim);
    add_mat(l, "output.weight", &m->output);
}

/* llama.cpp's token types. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 };

static bool is_byte_token(const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEFabcdef";
    return n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && s[3] && s[4] &&
           strchr(hex, s[3]) && strchr(hex, s[4]);
}

/* llama2.c's exporter wrote BOS/EOS as "\n<s>\n" / "\n</s>\n" and SentencePiece's ▁ as a
 * plain space; GGUF wants the SentencePiece texts back. Writes into out (room for 3n+8). */
static size_t spm_text(int id, const char *s, size_t n, char *out)
{
    if (id == 1 && n == 5 && memcmp(s, "\n<s>\n", 5) == 0)
        return (size_t)sprintf(out, "<s>");
    if (id == 2 && n == 6 && memcmp(s, "\n</s>\n", 6) == 0)
        return (size_t)sprintf(out, "</s>");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(out + k, "\xe2\x96\x81", 3); /* U+2581 ▁ */
            k += 3;
        } else {
            out[k++] = s[i];
        }
    }
    return k;
}

typedef struct {
    dy_gguf_str *text;
    float *score;
    int32_t *type;
    char *blob;
} l2c_vocab;

static void vocab_free(l2c_vocab *v)
{
    free(v->text);
    free(v->score);
    free(v->type);
    free(v->blob);
}

/* Parses tokenizer.bin (int32 max_token_length, then per token: f32 score, int32 length,
 * bytes). dy_model_load has already validated the file against the vocabulary size; the
 * bounds are checked again here so this never depends on that. */
static bool vocab_parse(const char *path, const uint8_t *d, size_t size, int n, l2c_vocab *v,
                        char *err, size_t errlen)
{
    v->text = calloc((size_t)n, sizeof *v->text);
    v->score = calloc((size_t)n, sizeof *v->score);
    v->type = calloc((size_t)n, sizeof *v->type);
    v->blob = malloc(3 * size + 8 * (size_t)n + 16);
    if (!v->text || !v->score || !v->type || !v->blob) {
        snprintf(err, errlen, "%s: out of memory", path);
        return false;
    }
    size_t pos = 4, k = 0;
    for (int i = 0; i < n; i++) {
        int32_t len;
        if (size - pos < 8 || (memcpy(&len, d + pos + 4, 4), len < 0) ||
            size - pos - 8 < (size_t)len) {
            snprintf(err, errlen, "%s: offset %zu: truncated at token %d of %d", path, pos, i, n);
            return false;
        }
        memcpy(&v->score[i], d + pos, 4);
        const char *s = (const char *)d + pos + 8;
        v->text[i].ptr = v->blob + k;
        v->text[i].len = spm_text(i, s, (size_t)len, v->blob + k);
        k += v->text[i].len + 1;
        v->type[i] = i == 0 ? TT_UNKNOWN : i <= 2 ? TT_CONTROL
                   : is_byte_token(s, (size_t)len) ? TT_BYTE : TT_NORMAL;
        pos += 8 + (size_t)len;
    }
    return true;
}

static bool read_file(const char *path, uint8_t **data, size_t *size, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    *data = n >= 4 ? malloc((size_t)n) : NULL;
    bool ok = *data && fseek(f, 0, SEEK_SET) == 0 && fread(*data, 1, (size_t)n, f) == (size_t)n;
    if (f)
        fclose(f);
    if (!ok) {
        free(*data);
        *data = NULL;
        snprintf(err, errlen, "%s: cannot read the file", path);
        return false;
    }
    *size = (size_t)n;
    return true;
}

/* The tokenizer.* metadata for a llama2.c vocabulary: Llama 2's SentencePiece conventions. */
static bool set_llama2c_vocab(dy_gguf_writer *w, const char *path, int n, char *err, size_t errlen)
{
    uint8_t *d;
    size_t size;
    l2c_vocab v = {0};
    if (!read_file(path, &d, &size, err, errlen))
        return false;
    bool ok = vocab_parse(path, d, size, n, &v, err, errlen);
    if (ok) {
        dy_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
        dy_gguf_writer_set_arr_strn(w, "tokenizer.ggml.tokens", v.text, (size_t)n);
        dy_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", v.score, (size_t)n);
        dy_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", v.type, (size_t)n);
        dy_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
        dy_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
        dy_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        dy_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
        dy_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    }
    vocab_free(&v);
    free(d);
    return ok;
}

/* general.name: the input's file name without directory and extension. */
static void set_name_from_path(dy_gguf_writer *w, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char name[256];
    snprintf(name, sizeof name, "%s", base);
    char *dot = strrchr(name, '.');
    if (dot && dot != name)
        *dot = 0;
    dy_gguf_writer_set_str(w, "general.name", name);
}

static bool prepare_llama2c(const conv_opts *o, dy_model **m, dy_gguf_writer *w, conv_list *l,
                            char *err, size_t errlen)
{
    *m = dy_model_load(o->in, o->tokenizer, err, errlen);
    if (!*m)
        return false;
    dy_gguf_writer_set_llama_hparams(w, &(*m)->hp);
    set_name_from_path(w, o->in);
    dy_gguf_writer_set_u32(w, "general.file_type",
                           dy_gguf_llama_file_type(o->have_type ? o->type : DY_F32));
    if (!set_llama2c_vocab(w, o->tokenizer, (*m)->hp.vocab_size, err, errlen))
        return false;
    list_llama2c(l, *m);
    return true;
}

/* ---------------------------------------------------------------- GGUF input */

/* Everything of the input is kept: every metadata entry (in order) and every tensor. */
static bool prepare_gguf(const conv_opts *o, dy_gguf_file **g, dy_gguf_writer *w, conv_list *l,
                         char *err, size_t errlen)
{
    *g = dy_gguf_open(o->in, err, errlen);
    if (!*g)
        return false;
    for (uint64_t i = 0; i < (*g)->n_kv; i++)
        dy_gguf_writer_set_kv(w, &(*g)->kv[i]);
    if (o->have_type)
        dy_gguf_writer_set_u32(w, "general.file_type", dy_gguf_llama_file_type(o->type));
    for (uint64_t i = 0; i < (*g)->n_tensors; i++) {
        const dy_gguf_tensor *t = &(*g)->tensors[i];
        char name[DY_GGUF_WRITE_MAX_NAME];
        if (t->name.len >= sizeof name) {
            snprintf(err, errlen, "%s: tensor name '%.*s' is too long for GGUF writers",
                     o->in, (int)t->name.len, t->name.ptr);
            return false;
        }
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        list_add(l, name, t->n_dims, t->ne, (dy_type)t->type, t->data);
    }
    return true;
}

/* ---------------------------------------------------------------- writing */

typedef struct {
    const conv_tensor *t;
    size_t row_bytes;
} dequant_ctx;

static void dequant_fill(void *p, int64_t row, float *dst)
{
    const dequant_ctx *c = p;
    dy_dequant_row(c->t->src_type, c->t->src + (size_t)row * c->row_bytes, dst, c->t->ne[0]);
}

/* With --type, matrices (2+ dims) become the type or its fallback; vectors (norms) stay. */
static void choose_types(const conv_opts *o, conv_list *l)
{
    for (size_t i = 0; o->have_type && i < l->n; i++)
        if (l->t[i].n_dims >= 2)
            l->t[i].dst_type = dy_gguf_fallback_type(o->type, l->t[i].ne[0]);
}

static bool add_tensors(dy_gguf_writer *w, const conv_list *l)
{
    bool ok = true;
    for (size_t i = 0; ok && i < l->n; i++) {
        const conv_tensor *t = &l->t[i];
        uint64_t nbytes = dy_gguf_tensor_bytes(t->dst_type, t->n_dims, t->ne);
        ok = dy_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->dst_type,
                                       t->dst_type == t->src_type ? t->src : NULL, nbytes);
    }
    return ok;
}

/* Writes the file: copied tensors go straight from the input's mapping, converted ones are
 * streamed row by row (dequantize to f32, quantize to the new type). */
static bool write_out(const conv_opts *o, dy_gguf_writer *w, const conv_list *l, char *err,
                      size_t errlen)
{
    if (!dy_gguf_writer_begin(w, o->out, err, errlen))
        return false;
    dy_pool *pool = o->threads > 1 ? dy_pool_new(o->threads) : NULL;
    bool ok = true;
    for (size_t i = 0; ok && i < l->n; i++) {
        const conv_tensor *t = &l->t[i];
        if (t->dst_type == t->src_type)
            continue;
        dequant_ctx c = {t, dy_type_row_bytes(t->src_type, t->ne[0])};
        ok = dy_gguf_writer_stream_rows(w, pool, t->dst_type, t->ne[0], rows_of(t), dequant_fill,
                                        &c, err, errlen);
    }
    dy_pool_free(pool);
    return ok && dy_gguf_writer_finish(w, err, errlen);
}

/* One line: what was converted to what (fallbacks show as a second type). */
static void summary(const conv_opts *o, const conv_list *l)
{
    size_t by_type[DY_BF16 + 1] = {0}, converted = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->t[i].dst_type != l->t[i].src_type && l->t[i].dst_type <= DY_BF16) {
            by_type[l->t[i].dst_type]++;
            converted++;
        }
    char types[256] = "";
    size_t k = 0;
    for (int t = 0; t <= DY_BF16 && k < sizeof types; t++)
        if (by_type[t])
            k += (size_t)snprintf(types + k, sizeof types - k, "%s%zu %s", k ? ", " : ": ",
                                  by_type[t], dy_type_name((uint32_t)t));
    struct stat st;
    double mib = stat(o->out, &st) == 0 ? (double)st.st_size / (1 << 20) : 0;
    fprintf(stderr, "dyad convert: wrote %s (%.1f MiB): %zu tensors, %zu converted%s\n", o->out,
            mib, l->n, converted, types);
}

static bool is_gguf(const char *path)
{
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(magic, "GGUF", 4) == 0;
}

static int convert(const conv_opts *o)
{
    char err[1024] = "";
    dy_gguf_writer *w = dy_gguf_writer_new();
    conv_list l = {0};
    dy_model *m = NULL;
    dy_gguf_file *g = NULL;
    bool ok = w != NULL;
    if (ok && access(o->in, R_OK) != 0) {
        snprintf(err, sizeof err, "%s: cannot open: %s", o->in, strerror(errno));
        ok = false;
    } else if (ok) {
        ok = is_gguf(o->in) ? prepare_gguf(o, &g, w, &l, err, sizeof err)
                            : prepare_llama2c(o, &m, w, &l, err, sizeof err);
    }
    if (ok && l.oom) {
        snprintf(err, sizeof err, "%s: out of memory", o->in);
        ok = false;
    }
    if (ok) {
        choose_types(o, &l);
        /* A bad tensor or key is reported by begin() with the writer's message. */
        add_tensors(w, &l);
        dy_progress *pg = dy_progress_new(stderr, isatty(STDERR_FILENO) == 1, "dyad convert",
                                          DY_PROGRESS_BYTES, NULL, 0, dy_now());
        dy_gguf_writer_set_progress(w, pg);
        ok = write_out(o, w, &l, err, sizeof err);
        dy_progress_finish(pg);
    }
    if (ok && o->verbose)
        summary(o, &l);
    if (!ok)
        fprintf(stderr, "dyad convert: %s\n", *err ? err : "out of memory");
    dy_gguf_writer_free(w);
    free(l.t);
    dy_model_free(m);
    dy_gguf_close(g);
    return ok ? 0 : 1;
}

/* ---------------------------------------------------------------- command line */

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

static bool set_type(void *ctx, const char *v, char *err, size_t errlen)
{
    conv_opts *o = ctx;
    o->have_type = true;
    if (dy_type_parse(v, &o->type) && dy_type_is_weight(o->type))
        return true;
    snprintf(err, errlen, "unknown weight type '%s'", v);
    return false;
}

/* CLI_GO when parsed, else the exit status (2 for a usage error, 0 after --help). */
static int parse(int argc, char **argv, conv_opts *o)
{
    const char *pos[2] = {NULL, NULL};
    dy_opt_positional in_out = {pos, 2, 0};
    const dy_opt t[] = {
        {.name = "type", .kind = DY_OPT_CALL, .call = set_type, .ctx = o, .meta = "TYPE",
         .help = "store weight matrices as f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k. "
                 "Matrices whose rows do not fit the type's blocks fall back to q8_0, else "
                 "f16; 1-D tensors keep their type.", .shown_default = "as in IN"},
        {.name = "tokenizer", .kind = DY_OPT_STR, .dst = &o->tokenizer, .meta = "FILE",
         .help = "the llama2.c tokenizer.bin (required for a llama2.c checkpoint)"},
        {.name = "threads", .kind = DY_OPT_INT, .dst = &o->threads, .meta = "N",
         .help = "threads for quantizing", .min = 1, .max = 1024, .def = default_threads(),
         .shown_default = "all cores"},
        {.name = "verbose", .kind = DY_OPT_FLAG, .dst = &o->verbose,
         .help = "print a summary to stderr"},
    };
    const int n = (int)(sizeof t / sizeof t[0]);
    int rc = cli_parse("convert", usage, NULL, t, n, argc, argv, &in_out);
    if (rc == CLI_GO && in_out.n < 2) {
        fprintf(stderr, "dyad convert: needs IN and OUT\n");
        rc = 2;
    }
    if (rc == 2)
        dy_opts_help(stderr, usage, t, n, NULL);
    o->in = pos[0];
    o->out = pos[1];
    return rc;
}

/* A llama2.c checkpoint must come with its tokenizer; a GGUF carries its own. */
static bool check_inputs(const conv_opts *o)
{
    bool gguf = is_gguf(o->in);
    if (!gguf && !o->tokenizer && access(o->in, R_OK) == 0) {
        fprintf(stderr, "dyad convert: %s is not GGUF: a llama2.c checkpoint needs "
                "--tokenizer tokenizer.bin\n", o->in);
        return false;
    }
    if (gguf && o->tokenizer) {
        fprintf(stderr, "dyad convert: --tokenizer applies to llama2.c checkpoints; %s is GGUF "
                "and keeps its own vocabulary\n", o->in);
        return false;
    }
    return true;
}

int cmd_convert(int argc, char **argv)
{
    conv_opts o = {0};
    int rc = parse(argc, argv, &o);
    if (rc != CLI_GO)
        return rc;
    if (!check_inputs(&o))
        return 2;
    return convert(&o);
}
