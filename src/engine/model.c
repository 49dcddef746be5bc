/* model.c — loading a llama-family model from GGUF or from a llama2.c checkpoint (see
 * model.h). The two loaders fill the same dy_model; everything after loading is format-blind. */
#include "engine/model.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Sanity limits on hyper-parameters: far above any model this engine targets, low enough
 * that products of them cannot overflow the size arithmetic below. */
static bool hparams_ok(const dy_hparams *hp, const char *path, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (hp->dim <= 0 || hp->dim > 65536) bad = "embedding width";
    else if (hp->hidden_dim <= 0 || hp->hidden_dim > 262144) bad = "FFN width";
    else if (hp->n_layers <= 0 || hp->n_layers > 1024) bad = "layer count";
    else if (hp->n_heads <= 0 || hp->n_heads > 1024) bad = "head count";
    else if (hp->n_kv_heads <= 0 || hp->n_kv_heads > hp->n_heads ||
             hp->n_heads % hp->n_kv_heads != 0) bad = "KV head count";
    else if (hp->head_dim <= 0 || hp->head_dim > 1024 || hp->head_dim % 2 != 0) bad = "head size";
    else if (hp->vocab_size <= 0 || hp->vocab_size > (1 << 22)) bad = "vocabulary size";
    else if (hp->ctx_len <= 0 || hp->ctx_len > (1 << 22)) bad = "context length";
    else if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0) bad = "RoPE dimension count";
    else if (!(hp->rope_base > 0) || !isfinite(hp->rope_base)) bad = "RoPE base";
    else if (!(hp->rms_eps > 0) || !(hp->rms_eps < 1)) bad = "RMS epsilon";
    if (bad) {
        seterr(err, errlen, "%s: invalid hyper-parameters: bad %s (dim %d, hidden %d, layers %d, "
               "heads %d/%d, head size %d, vocab %d, context %d, rot %d)", path, bad, hp->dim,
               hp->hidden_dim, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->head_dim,
               hp->vocab_size, hp->ctx_len, hp->n_rot);
        return false;
    }
    return true;
}

static dy_mat f32_mat(const float *data, int64_t rows, int64_t cols)
{
    dy_mat m = {DY_F32, rows, cols, (size_t)cols * sizeof(float), data};
    return m;
}

static uint64_t fingerprint(const dy_model *m)
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, &m->hp, sizeof m->hp);
    XXH3_64bits_update(st, m->tok_embd.data, m->tok_embd.row_bytes);
    if (m->tok)
        for (int i = 0; i < dy_tokenizer_vocab_size(m->tok); i++) {
            const char *s = dy_tokenizer_token_text(m->tok, i);
            XXH3_64bits_update(st, s, strlen(s) + 1);
        }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* ---------------------------------------------------------------- llama2.c checkpoints */

/* The legacy llama2.c header: seven int32s, then f32 tensors in a fixed order. */
typedef struct {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
} llama2c_header;

static bool load_llama2c(dy_model *m, char *err, size_t errlen)
{
    llama2c_header h;
    if (m->map_size < sizeof h) {
        seterr(err, errlen, "%s: offset 0: file too small (%zu bytes) for a llama2.c header",
               m->path, m->map_size);
        return false;
    }
    memcpy(&h, m->map, sizeof h);
    bool shared = h.vocab_size > 0;
    dy_hparams *hp = &m->hp;
    hp->dim = h.dim;
    hp->hidden_dim = h.hidden_dim;
    hp->n_layers = h.n_layers;
    hp->n_heads = h.n_heads;
    hp->n_kv_heads = h.n_kv_heads;
    hp->vocab_size = h.vocab_size == INT32_MIN ? 0 : abs(h.vocab_size);
    hp->ctx_len = h.seq_len;
    hp->head_dim = h.n_heads > 0 ? h.dim / h.n_heads : 0;
    hp->n_rot = hp->head_dim;
    hp->rope_base = 10000.0f;
    hp->rms_eps = 1e-5f;
    if (h.n_heads > 0 && h.dim % h.n_heads != 0)
        hp->head_dim = 0;
    if (!hparams_ok(hp, m->path, err, errlen))
        return false;

    const int64_t dim = hp->dim, hid = hp->hidden_dim, L = hp->n_layers, V = hp->vocab_size;
    const int64_t kvd = (int64_t)hp->n_kv_heads * hp->head_dim, hs = hp->head_dim;
    /* Floats in file order: embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
     * rms_final, freq_cis_real, freq_cis_imag, [wcls]. */
    int64_t need = V * dim + L * dim + L * dim * dim + 2 * L * kvd * dim + L * dim * dim +
                   L * dim + 3 * L * hid * dim + dim + (int64_t)hp->ctx_len * hs;
    if (!shared)
        need += V * dim;
    int64_t have = (int64_t)((m->map_size - sizeof h) / sizeof(float));
    if (need != have) {
        seterr(err, errlen, "%s: offset %zu: the header (dim %d, hidden %d, layers %d, vocab %d, "
               "seq_len %d) needs %lld bytes of weights, the file has %lld", m->path, sizeof h,
               hp->dim, hp->hidden_dim, hp->n_layers, hp->vocab_size, hp->ctx_len,
               (long long)need * 4, (long long)(m->map_size - sizeof h));
        return false;
    }
    const float *p = (const float *)((const char *)m->map + sizeof h);
    m->tok_embd = f32_mat(p, V, dim); p += V * dim;
    const float *rms_att = p; p += L * dim;
    const float *wq = p; p += L * dim * dim;
    const float *wk = p; p += L * kvd * dim;
    const float *wv = p; p += L * kvd * dim;
    const float *wo = p; p += L * dim * dim;
    const float *rms_ffn = p; p += L * dim;
    const float *w1 = p; p += L * hid * dim;
    const float *w2 = p; p += L * dim * hid;
    const float *w3 = p; p += L * hid * dim;
    m->out_norm = p; p += dim;
    p += (int64_t)hp->ctx_len * hs; /* freq_cis_real + freq_cis_imag: RoPE is computed instead */
    m->output = shared ? m->tok_embd : f32_mat(p, V, dim);

    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) {
        seterr(err, errlen, "%s: out of memory", m->path);
        return false;
    }
    for (int64_t l = 0; l < L; l++) {
        dy_layer *ly = &m->layers[l];
        ly->attn_norm = rms_att + l * dim;
        ly->ffn_norm = rms_ffn + l * dim;
        ly->wq = f32_mat(wq + l * dim * dim, dim, dim);
        ly->wk = f32_mat(wk + l * kvd * dim, kvd, dim);
        ly->wv = f32_mat(wv + l * kvd * dim, kvd, dim);
        ly->wo = f32_mat(wo + l * dim * dim, dim, dim);
        ly->w_gate = f32_mat(w1 + l * hid * dim, hid, dim);
        ly->w_down = f32_mat(w2 + l * dim * hid, dim, hid);
        ly->w_up = f32_mat(w3 + l * hid * dim, hid, dim);
    }
    return true;
}

/* ---------------------------------------------------------------- GGUF */

static bool get_int(const dy_gguf_file *g, const char *key, int *out, bool required, char *err,
                    size_t errlen)
{
    int64_t v;
    if (!dy_gguf_get_i64(g, key, &v)) {
        if (required || dy_gguf_find(g, key))
            seterr(err, errlen, "%s: metadata '%s' is %s", g->path, key,
                   dy_gguf_find(g, key) ? "not an integer" : "missing");
        return !required && !dy_gguf_find(g, key);
    }
    if (v < INT32_MIN || v > INT32_MAX) {
        seterr(err, errlen, "%s: metadata '%s' = %lld is out of range", g->path, key, (long long)v);
        return false;
    }
    *out = (int)v;
    return true;
}

static bool get_float(const dy_gguf_file *g, const char *key, float *out, char *err, size_t errlen)
{
    double v;
    if (dy_gguf_get_f64(g, key, &v)) {
        *out = (float)v;
        return true;
    }
    if (!dy_gguf_find(g, key))
        return true; /* optional: keep the default */
    seterr(err, errlen, "%s: metadata '%s' is not a float", g->path, key);
    return false;
}

static bool gguf_hparams(const dy_gguf_file *g, dy_hparams *hp, char *err, size_t errlen)
{
    char *arch = dy_gguf_get_str(g, "general.architecture");
    if (!arch || strcmp(arch, "llama") != 0) {
        seterr(err, errlen, "%s: general.architecture is '%s'; dyad runs 'llama' models", g->path,
               arch ? arch : "(missing)");
        free(arch);
        return false;
    }
    free(arch);
    memset(hp, 0, sizeof *hp);
    hp->rope_base = 10000.0f;
    hp->rms_eps = 1e-5f;
    if (!get_int(g, "llama.embedding_length", &hp->dim, true, err, errlen) ||
        !get_int(g, "llama.feed_forward_length", &hp->hidden_dim, true, err, errlen) ||
        !get_int(g, "llama.block_count", &hp->n_layers, true, err, errlen) ||
        !get_int(g, "llama.attention.head_count", &hp->n_heads, true, err, errlen) ||
        !get_int(g, "llama.context_length", &hp->ctx_len, true, err, errlen))
        return false;
    hp->n_kv_heads = hp->n_heads;
    hp->head_dim = hp->n_heads > 0 && hp->dim % hp->n_heads == 0 ? hp->dim / hp->n_heads : 0;
    if (!get_int(g, "llama.attention.head_count_kv", &hp->n_kv_heads, false, err, errlen) ||
        !get_int(g, "llama.attention.key_length", &hp->head_dim, false, err, errlen))
        return false;
    hp->n_rot = hp->head_dim;
    if (!get_int(g, "llama.rope.dimension_count", &hp->n_rot, false, err, errlen) ||
        !get_float(g, "llama.rope.freq_base", &hp->rope_base, err, errlen) ||
        !get_float(g, "llama.attention.layer_norm_rms_epsilon", &hp->rms_eps, err, errlen))
        return false;
    const dy_gguf_tensor *emb = dy_gguf_find_tensor(g, "token_embd.weight");
    if (!emb) {
        seterr(err, errlen, "%s: tensor 'token_embd.weight' is missing", g->path);
        return false;
    }
    hp->vocab_size = emb->n_dims == 2 && emb->ne[1] <= INT32_MAX ? (int)emb->ne[1] : 0;
    return hparams_ok(hp, g->path, err, errlen);
}

/* Finds a 2-D weight tensor with the expected shape (ne0 = input, ne1 = output). */
static bool gguf_mat(const dy_gguf_file *g, const char *name, int64_t rows, int64_t cols,
                     dy_mat *out, char *err, size_t errlen)
{
    const dy_gguf_tensor *t = dy_gguf_find_tensor(g, name);
    if (!t) {
        seterr(err, errlen, "%s: tensor '%s' is missing", g->path, name);
        return false;
    }
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows) {
        seterr(err, errlen, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld] "
               "from the hyper-parameters", g->path, name, (long long)t->ne[0],
               (long long)t->ne[1], (long long)t->ne[2], (long long)cols, (long long)rows);
        return false;
    }
    out->type = (dy_type)t->type;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = dy_type_row_bytes(out->type, cols);
    out->data = t->data;
    return true;
}

/* Copies a norm vector (any type) into owned f32 storage. */
static bool gguf_vec(const dy_gguf_file *g, const char *name, int64_t n, float *dst, char *err,
                     size_t errlen)
{
    const dy_gguf_tensor *t = dy_gguf_find_tensor(g, name);
    if (!t) {
        seterr(err, errlen, "%s: tensor '%s' is missing", g->path, name);
        return false;
    }
    if (t->n_dims != 1 || t->ne[0] != n) {
        seterr(err, errlen, "%s: tensor '%s' has %u dims and %lld elements, expected a vector of "
               "%lld", g->path, name, t->n_dims, (long long)t->ne[0], (long long)n);
        return false;
    }
    dy_dequant_row((dy_type)t->type, t->data, dst, n);
    return true;
}

static bool load_gguf_layer(dy_model *m, int l, float *norms, char *err, size_t errlen)
{
    const dy_gguf_file *g = m->gguf;
    const dy_hparams *hp = &m->hp;
    const int64_t dim = hp->dim, hid = hp->hidden_dim;
    const int64_t qd = (int64_t)hp->n_heads * hp->head_dim;
    const int64_t kvd = (int64_t)hp->n_kv_heads * hp->head_dim;
    dy_layer *ly = &m->layers[l];
    char name[96];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s ".weight", l), name)
    if (!gguf_vec(g, NAME("attn_norm"), dim, norms, err, errlen) ||
        !gguf_vec(g, NAME("ffn_norm"), dim, norms + dim, err, errlen) ||
        !gguf_mat(g, NAME("attn_q"), qd, dim, &ly->wq, err, errlen) ||
        !gguf_mat(g, NAME("attn_k"), kvd, dim, &ly->wk, err, errlen) ||
        !gguf_mat(g, NAME("attn_v"), kvd, dim, &ly->wv, err, errlen) ||
        !gguf_mat(g, NAME("attn_output"), dim, qd, &ly->wo, err, errlen) ||
        !gguf_mat(g, NAME("ffn_gate"), hid, dim, &ly->w_gate, err, errlen) ||
        !gguf_mat(g, NAME("ffn_down"), dim, hid, &ly->w_down, err, errlen) ||
        !gguf_mat(g, NAME("ffn_up"), hid, dim, &ly->w_up, err, errlen))
        return false;
#undef NAME
    ly->attn_norm = norms;
    ly->ffn_norm = norms + dim;
    return true;
}

static bool load_gguf(dy_model *m, const char *tokenizer_path, char *err, size_t errlen)
{
    m->gguf = dy_gguf_open(m->path, err, errlen);
    if (!m->gguf || !gguf_hparams(m->gguf, &m->hp, err, errlen))
        return false;
    const dy_hparams *hp = &m->hp;
    const int64_t dim = hp->dim;
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    m->norms = malloc(sizeof(float) * (size_t)dim * (2 * (size_t)hp->n_layers + 1));
    if (!m->layers || !m->norms) {
        seterr(err, errlen, "%s: out of memory", m->path);
        return false;
    }
    if (!gguf_mat(m->gguf, "token_embd.weight", hp->vocab_size, dim, &m->tok_embd, err, errlen))
        return false;
    for (int l = 0; l < hp->n_layers; l++)
        if (!load_gguf_layer(m, l, m->norms + 2 * l * dim, err, errlen))
            return false;
    float *out_norm = m->norms + 2 * (int64_t)hp->n_layers * dim;
    if (!gguf_vec(m->gguf, "output_norm.weight", dim, out_norm, err, errlen))
        return false;
    m->out_norm = out_norm;
    m->output = m->tok_embd;
    if (dy_gguf_find_tensor(m->gguf, "output.weight") &&
        !gguf_mat(m->gguf, "output.weight", hp->vocab_size, dim, &m->output, err, errlen))
        return false;
    if (!tokenizer_path && dy_gguf_find(m->gguf, "tokenizer.ggml.model")) {
        m->tok = dy_tokenizer_from_gguf(m->gguf, err, errlen);
        if (!m->tok)
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------- common */

static bool map_file(dy_model *m, char *err, size_t errlen)
{
    int fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        seterr(err, errlen, "%s: cannot open: %s", m->path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        seterr(err, errlen, "%s: not a regular, non-empty file", m->path);
        close(fd);
        return false;
    }
    m->map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        seterr(err, errlen, "%s: mmap failed: %s", m->path, strerror(errno));
        return false;
    }
    m->map_size = (size_t)st.st_size;
    return true;
}

static bool is_gguf_file(const char *path)
{
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(magic, "GGUF", 4) == 0;
}

dy_model *dy_model_load(const char *path, const char *tokenizer_path, char *err, size_t errlen)
{
    dy_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        seterr(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    bool ok;
    if (is_gguf_file(path)) {
        m->kind = DY_FILE_GGUF;
        ok = load_gguf(m, tokenizer_path, err, errlen);
    } else {
        m->kind = DY_FILE_LLAMA2C;
        ok = map_file(m, err, errlen) && load_llama2c(m, err, errlen);
    }
    if (ok && tokenizer_path) {
        m->tok = dy_tokenizer_from_llama2c(tokenizer_path, m->hp.vocab_size, err, errlen);
        ok = m->tok != NULL;
    }
    if (ok && m->tok && dy_tokenizer_vocab_size(m->tok) != m->hp.vocab_size) {
        seterr(err, errlen, "%s: the tokenizer has %d tokens but the model's vocabulary is %d",
               tokenizer_path ? tokenizer_path : path, dy_tokenizer_vocab_size(m->tok),
               m->hp.vocab_size);
        ok = false;
    }
    if (!ok) {
        dy_model_free(m);
        return NULL;
    }
    m->fingerprint = fingerprint(m);
    return m;
}

void dy_model_free(dy_model *m)
{
    if (!m)
        return;
    dy_tokenizer_free(m->tok);
    dy_gguf_close(m->gguf);
    if (m->map)
        munmap(m->map, m->map_size);
    free(m->layers);
    free(m->norms);
    free(m->path);
    free(m);
}

static uint64_t mat_bytes(const dy_mat *w)
{
    return (uint64_t)w->rows * w->row_bytes;
}

uint64_t dy_model_weight_bytes(const dy_model *m)
{
    uint64_t b = m->tok_embd.row_bytes + mat_bytes(&m->output);
    for (int l = 0; l < m->hp.n_layers; l++) {
        const dy_layer *ly = &m->layers[l];
        b += mat_bytes(&ly->wq) + mat_bytes(&ly->wk) + mat_bytes(&ly->wv) + mat_bytes(&ly->wo) +
             mat_bytes(&ly->w_gate) + mat_bytes(&ly->w_down) + mat_bytes(&ly->w_up);
    }
    return b;
}

dy_type dy_model_weight_type(const dy_model *m)
{
    return m->layers[0].wq.type;
}
