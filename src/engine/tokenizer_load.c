/* tokenizer_load.c — building a dy_tokenizer: from GGUF tokenizer.ggml.* metadata (tokens,
 * scores, token types, merges, special ids, add_bos/add_eos/add_space_prefix, the chat
 * template) or from a llama2.c tokenizer.bin (every length checked, errors name the file
 * and byte offset), plus what is derived from the vocabulary: the text→id map, byte tokens,
 * end-of-generation ids and the special tokens matched verbatim in input. Defaults and
 * overrides follow llama.cpp's llama_vocab::load. */
#include "engine/tokenizer.h"
#include "engine/tokenizer_impl.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS (1 << 24)

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- construction ---------------------------------------------------------------- */

/* A tokenizer with room for n tokens whose texts take `text_bytes` (NULs excluded). */
static dy_tokenizer *tok_alloc(int n, size_t text_bytes)
{
    dy_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n_vocab = n;
    t->blob = malloc(text_bytes + (size_t)n);
    t->off = malloc((size_t)n * sizeof *t->off);
    t->len = malloc((size_t)n * sizeof *t->len);
    t->score = calloc((size_t)n, sizeof *t->score);
    t->attr = calloc((size_t)n, sizeof *t->attr);
    t->bos = t->eos = t->unk = t->pad = -1;
    if (!t->blob || !t->off || !t->len || !t->score || !t->attr) {
        dy_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* Stores token i's text at *pos in the blob. */
static void put_text(dy_tokenizer *t, int i, const char *s, size_t len, size_t *pos)
{
    t->off[i] = *pos;
    t->len[i] = (uint32_t)len;
    memcpy(t->blob + *pos, s, len);
    t->blob[*pos + len] = 0;
    *pos += len + 1;
}

static int32_t find_token(const dy_tokenizer *t, const char *text)
{
    return dy_tok_map_get(&t->vocab, text, strlen(text));
}

static bool add_eog(dy_tokenizer *t, int32_t id)
{
    if (id < 0)
        return false;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    if (t->n_eog < (int)(sizeof t->eog / sizeof t->eog[0]))
        t->eog[t->n_eog++] = id;
    return true;
}

/* End-of-generation tokens: EOS, EOT/EOM from the metadata, and the usual turn-end texts
 * (which llama.cpp forces to control type). */
static void find_eog(dy_tokenizer *t, int32_t eot, int32_t eom)
{
    static const char *const names[] = {"<|eot_id|>", "<|im_end|>",  "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|eom_id|>", "<EOT>"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = find_token(t, names[i]);
        if (add_eog(t, id))
            t->attr[id] = (uint8_t)((t->attr[id] & (TOK_LSTRIP | TOK_RSTRIP)) | TOK_CONTROL);
    }
    add_eog(t, t->eos);
    add_eog(t, eot);
    add_eog(t, eom);
}

typedef struct {
    uint32_t len;
    int32_t id;
} len_id;

static int by_len_desc(const void *a, const void *b)
{
    const len_id *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Control, user-defined and unknown tokens, longest first: matched in raw input text. */
static bool collect_specials(dy_tokenizer *t)
{
    int n = 0;
    for (int i = 0; i < t->n_vocab; i++)
        n += (t->attr[i] & (TOK_CONTROL | TOK_USER_DEFINED | TOK_UNKNOWN)) != 0;
    len_id *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    t->special = malloc((size_t)(n ? n : 1) * sizeof *t->special);
    if (!v || !t->special) {
        free(v);
        return false;
    }
    n = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (TOK_CONTROL | TOK_USER_DEFINED | TOK_UNKNOWN))
            v[n++] = (len_id){t->len[i], i};
    qsort(v, (size_t)n, sizeof *v, by_len_desc);
    for (int i = 0; i < n; i++)
        t->special[i] = v[i].id;
    t->n_special = n;
    free(v);
    return true;
}

static void set_attr(dy_tokenizer *t, const char *text, uint8_t flag, bool on)
{
    int32_t id = find_token(t, text);
    if (id >= 0)
        t->attr[id] = (uint8_t)(on ? t->attr[id] | flag : t->attr[id] & ~flag);
}

/* Whitespace stripping around special tokens that llama.cpp sets by model name. */
static void name_attrs(dy_tokenizer *t, const char *model_name, const char *pre)
{
    if (pre && strstr(pre, "jina-v2-")) {
        set_attr(t, "<mask>", TOK_LSTRIP, true);
        return;
    }
    char lower[256] = "";
    for (size_t i = 0; model_name && model_name[i] && i + 1 < sizeof lower; i++)
        lower[i] = (char)tolower((unsigned char)model_name[i]), lower[i + 1] = 0;
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3"))
        return;
    for (int i = 0; i < t->n_special; i++)
        t->attr[t->special[i]] |= TOK_RSTRIP;
    set_attr(t, "</s>", TOK_RSTRIP, true);
    set_attr(t, "<unk>", TOK_RSTRIP, false);
    set_attr(t, "<s>", TOK_RSTRIP, false);
    set_attr(t, "<|endoftext|>", TOK_RSTRIP, false);
}

/* Everything derived from the texts and attributes: lookup map, byte tokens, specials. */
static bool finish(dy_tokenizer *t, int32_t eot, int32_t eom)
{
    if (!dy_tok_map_init(&t->vocab, (size_t)t->n_vocab))
        return false;
    for (int i = 0; i < t->n_vocab; i++)
        if (!dy_tok_map_put(&t->vocab, t->blob + t->off[i], t->len[i], i, true))
            return false;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_token[b] = find_token(t, name);
    }
    int32_t *ids[] = {&t->bos, &t->eos, &t->unk, &t->pad, &eot, &eom};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (*ids[i] >= t->n_vocab)
            *ids[i] = -1;
    find_eog(t, eot, eom);
    return collect_specials(t);
}

/* ---- GGUF -------------------------------------------------------------------------- */

/* A special id from metadata; ids out of range keep the default, as in llama.cpp. */
static void read_id(const dy_gguf_file *g, const char *key, int n, int32_t *id)
{
    uint64_t v;
    if (dy_gguf_get_u64(g, key, &v) && v < (uint64_t)n)
        *id = (int32_t)v;
}

static void read_bool(const dy_gguf_file *g, const char *key, bool *b)
{
    bool v;
    if (dy_gguf_get_bool(g, key, &v))
        *b = v;
}

/* An optional array of n elements of type `type`: NULL if absent, error if malformed. */
static const dy_gguf_kv *optional_arr(const dy_gguf_file *g, const char *key, dy_gguf_vtype type,
                                      uint64_t n, char *err, size_t errlen, bool *bad)
{
    const dy_gguf_kv *kv = dy_gguf_find(g, key);
    if (!kv)
        return NULL;
    if (kv->type != DY_GGUF_ARRAY || kv->v.arr.type != type) {
        set_err(err, errlen, "%s: %s has the wrong type", g->path, key);
        *bad = true;
        return NULL;
    }
    if (kv->v.arr.n != n) {
        set_err(err, errlen, "%s: %s has %llu entries for %llu tokens", g->path, key,
                (unsigned long long)kv->v.arr.n, (unsigned long long)n);
        *bad = true;
        return NULL;
    }
    return kv;
}

static bool load_gguf_tokens(dy_tokenizer *t, const dy_gguf_kv *toks, const dy_gguf_kv *scores,
                             const dy_gguf_kv *types)
{
    size_t pos = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        dy_gguf_str s = toks->v.arr.strings[i];
        char empty[32];
        if (s.len == 0) { /* llama.cpp renames empty tokens so they never match */
            s.len = (uint64_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            s.ptr = empty;
        }
        put_text(t, i, s.ptr, (size_t)s.len, &pos);
        if (scores) {
            memcpy(&t->score[i], scores->v.arr.data + 4 * (size_t)i, 4);
            if (isnan(t->score[i]))
                return false;
        }
        int32_t type = 1;
        if (types)
            memcpy(&type, types->v.arr.data + 4 * (size_t)i, 4);
        static const uint8_t by_type[] = {0, TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL,
                                          TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE};
        t->attr[i] = type >= 0 && type <= 6 ? by_type[type] : 0;
    }
    return true;
}

/* The merges list ("left right", rank = index; the first occurrence of a pair wins). */
static bool load_merges(dy_tokenizer *t, const dy_gguf_kv *m)
{
    size_t total = 0;
    for (uint64_t i = 0; i < m->v.arr.n; i++)
        total += (size_t)m->v.arr.strings[i].len;
    t->merge_blob = malloc(total ? total : 1);
    if (!t->merge_blob || !dy_tok_map_init(&t->merges, (size_t)m->v.arr.n))
        return false;
    size_t pos = 0;
    for (uint64_t i = 0; i < m->v.arr.n; i++) {
        dy_gguf_str s = m->v.arr.strings[i];
        memcpy(t->merge_blob + pos, s.ptr, (size_t)s.len);
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', (size_t)s.len - 1) : NULL;
        if (sp && i <= INT32_MAX &&
            !dy_tok_map_put(&t->merges, t->merge_blob + pos, (size_t)s.len, (int32_t)i, false))
            return false;
        pos += (size_t)s.len;
    }
    return true;
}

/* Vocabulary kind, pre-tokenizer and the defaults that depend on them. */
static bool setup_kind(dy_tokenizer *t, const dy_gguf_file *g, const char *model, const char *pre,
                       char *err, size_t errlen)
{
    if (strcmp(model, "llama") == 0) {
        t->kind = DY_VOCAB_SPM;
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_bos = t->add_space_prefix = t->spm_escape = true;
        return true;
    }
    t->kind = DY_VOCAB_BPE;
    t->bos = t->eos = 11; /* llama.cpp's defaults for gpt2 vocabularies */
    const dy_gguf_kv *m = dy_gguf_get_arr(g, "tokenizer.ggml.merges", DY_GGUF_STRING);
    if (!m) {
        set_err(err, errlen, "%s: tokenizer.ggml.merges is missing or not a string array",
                g->path);
        return false;
    }
    if (!load_merges(t, m)) {
        set_err(err, errlen, "%s: out of memory for the merges", g->path);
        return false;
    }
    char perr[200];
    t->pretok = dy_pretok_new(pre, &t->ignore_merges, &t->add_bos, perr, sizeof perr);
    if (!t->pretok) {
        set_err(err, errlen, "%s: tokenizer.ggml.pre: %s", g->path, perr);
        return false;
    }
    dy_bpe_init_alphabet(t);
    return true;
}

static dy_tokenizer *from_gguf(const dy_gguf_file *g, const char *model, const char *pre,
                               char *err, size_t errlen)
{
    if (strcmp(model, "llama") != 0 && strcmp(model, "gpt2") != 0) {
        set_err(err, errlen, "%s: tokenizer.ggml.model '%s' is not supported (llama, gpt2)",
                g->path, model);
        return NULL;
    }
    const dy_gguf_kv *toks = dy_gguf_get_arr(g, "tokenizer.ggml.tokens", DY_GGUF_STRING);
    if (!toks || toks->v.arr.n == 0 || toks->v.arr.n > MAX_TOKENS) {
        set_err(err, errlen, "%s: tokenizer.ggml.tokens is missing, empty, too long or not a "
                "string array", g->path);
        return NULL;
    }
    uint64_t n = toks->v.arr.n;
    bool bad = false;
    const dy_gguf_kv *scores = optional_arr(g, "tokenizer.ggml.scores", DY_GGUF_FLOAT32, n, err,
                                            errlen, &bad);
    const dy_gguf_kv *types = bad ? NULL
                                  : optional_arr(g, "tokenizer.ggml.token_type", DY_GGUF_INT32, n,
                                                 err, errlen, &bad);
    if (bad)
        return NULL;
    size_t bytes = 0;
    for (uint64_t i = 0; i < n; i++)
        bytes += toks->v.arr.strings[i].len ? (size_t)toks->v.arr.strings[i].len : 24;
    dy_tokenizer *t = tok_alloc((int)n, bytes);
    if (!t) {
        set_err(err, errlen, "%s: out of memory for %llu tokens", g->path, (unsigned long long)n);
        return NULL;
    }
    if (!load_gguf_tokens(t, toks, scores, types)) {
        set_err(err, errlen, "%s: tokenizer.ggml.scores holds a NaN", g->path);
        dy_tokenizer_free(t);
        return NULL;
    }
    if (!setup_kind(t, g, model, pre, err, errlen)) {
        dy_tokenizer_free(t);
        return NULL;
    }
    read_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    read_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    read_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
    int32_t eot = -1, eom = -1;
    read_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos);
    read_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos);
    read_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk);
    read_id(g, "tokenizer.ggml.padding_token_id", t->n_vocab, &t->pad);
    read_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab, &eot);
    read_id(g, "tokenizer.ggml.eom_token_id", t->n_vocab, &eom);
    if (!finish(t, eot, eom)) {
        set_err(err, errlen, "%s: out of memory building the tokenizer", g->path);
        dy_tokenizer_free(t);
        return NULL;
    }
    char *name = dy_gguf_get_str(g, "general.name");
    name_attrs(t, name, pre);
    free(name);
    t->chat_template = dy_gguf_get_str(g, "tokenizer.chat_template");
    return t;
}

dy_tokenizer *dy_tokenizer_from_gguf(const dy_gguf_file *g, char *err, size_t errlen)
{
    if (!g) {
        set_err(err, errlen, "no GGUF file");
        return NULL;
    }
    char *model = dy_gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) {
        set_err(err, errlen, "%s: tokenizer.ggml.model is missing or not a string", g->path);
        return NULL;
    }
    char *pre = dy_gguf_get_str(g, "tokenizer.ggml.pre");
    dy_tokenizer *t = from_gguf(g, model, pre, err, errlen);
    free(model);
    free(pre);
    return t;
}

/* ---- llama2.c tokenizer.bin ---------------------------------------------------------- */

static unsigned char *read_whole(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = buf ? (size_t)n : 0;
    return buf;
}

/* Checks the file's layout; on success *text_bytes is the total length of the texts. */
static bool check_llama2c(const char *path, const unsigned char *d, size_t size, int n,
                          size_t *text_bytes, char *err, size_t errlen)
{
    int32_t max_len;
    if (size < 4) {
        set_err(err, errlen, "%s: offset 0: file too short for max_token_length (%zu bytes)",
                path, size);
        return false;
    }
    memcpy(&max_len, d, 4);
    if (max_len <= 0 || max_len > (1 << 20)) {
        set_err(err, errlen, "%s: offset 0: max_token_length %d is out of range", path, max_len);
        return false;
    }
    size_t pos = 4;
    *text_bytes = 0;
    for (int i = 0; i < n; i++) {
        float score;
        int32_t len;
        if (size - pos < 8) {
            set_err(err, errlen, "%s: offset %zu: truncated: token %d of %d needs its score "
                    "and length (8 bytes), %zu left", path, pos, i, n, size - pos);
            return false;
        }
        memcpy(&score, d + pos, 4);
        memcpy(&len, d + pos + 4, 4);
        if (isnan(score)) {
            set_err(err, errlen, "%s: offset %zu: token %d has a NaN score", path, pos, i);
            return false;
        }
        if (len < 0 || len > max_len) {
            set_err(err, errlen, "%s: offset %zu: token %d has length %d (max_token_length %d)",
                    path, pos + 4, i, len, max_len);
            return false;
        }
        pos += 8;
        if (size - pos < (size_t)len) {
            set_err(err, errlen, "%s: offset %zu: truncated: token %d needs %d bytes, %zu left",
                    path, pos, i, len, size - pos);
            return false;
        }
        pos += (size_t)len;
        *text_bytes += (size_t)len;
    }
    if (pos != size) {
        set_err(err, errlen, "%s: offset %zu: %zu bytes after the last of %d tokens (is the "
                "vocabulary size right?)", path, pos, size - pos, n);
        return false;
    }
    return true;
}

/* Texts and scores from a checked file; attributes as llama2.c implies them. */
static void load_llama2c_tokens(dy_tokenizer *t, const unsigned char *d)
{
    size_t pos = 4, tpos = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        int32_t len;
        memcpy(&t->score[i], d + pos, 4);
        memcpy(&len, d + pos + 4, 4);
        pos += 8;
        put_text(t, i, (const char *)d + pos, (size_t)len, &tpos);
        pos += (size_t)len;
        if (i == 0)
            t->attr[i] = TOK_UNKNOWN;
        else if (i == 1 || i == 2)
            t->attr[i] = TOK_CONTROL;
        else
            t->attr[i] = dy_tok_is_byte_text((const char *)d + pos - len, (size_t)len) ? TOK_BYTE
                                                                                : TOK_NORMAL;
    }
}

dy_tokenizer *dy_tokenizer_from_llama2c(const char *path, int vocab_size, char *err,
                                        size_t errlen)
{
    if (vocab_size < 3 || vocab_size > MAX_TOKENS) {
        set_err(err, errlen, "%s: vocabulary size %d is out of range", path, vocab_size);
        return NULL;
    }
    size_t size, text_bytes;
    unsigned char *d = read_whole(path, &size);
    if (!d) {
        set_err(err, errlen, "%s: cannot read the file", path);
        return NULL;
    }
    dy_tokenizer *t = NULL;
    if (check_llama2c(path, d, size, vocab_size, &text_bytes, err, errlen)) {
        t = tok_alloc(vocab_size, text_bytes);
        if (t) {
            load_llama2c_tokens(t, d);
            t->kind = DY_VOCAB_SPM;
            t->bos = 1, t->eos = 2, t->unk = 0;
            t->add_bos = t->add_space_prefix = true; /* spaces are stored as ' ' */
            if (!finish(t, -1, -1)) {
                dy_tokenizer_free(t);
                t = NULL;
            }
        }
        if (!t)
            set_err(err, errlen, "%s: out of memory for %d tokens", path, vocab_size);
    }
    free(d);
    return t;
}
