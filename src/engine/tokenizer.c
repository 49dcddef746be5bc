/* tokenizer.c — the dy_tokenizer API once loaded (loading is tokenizer_load.c): accessors,
 * tokenization (special tokens cut out of the input first, then the SPM encoder of
 * tokenizer_spm.c or the byte-level BPE of tokenizer_bpe.c on the text between them),
 * token → piece decoding, and freeing. Behaviour follows llama.cpp's llama-vocab.cpp, so
 * ids match llama-tokenize exactly. */
#include "engine/tokenizer.h"
#include "engine/tokenizer_impl.h"
#include "util/buf.h"

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's visible space */

void dy_tokenizer_free(dy_tokenizer *t)
{
    if (!t)
        return;
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->score);
    free(t->attr);
    dy_tok_map_free(&t->vocab);
    dy_tok_map_free(&t->merges);
    free(t->merge_blob);
    free(t->special);
    dy_pretok_free(t->pretok);
    free(t->chat_template);
    free(t);
}

/* ---- accessors ---------------------------------------------------------------------- */

int dy_tokenizer_vocab_size(const dy_tokenizer *t) { return t->n_vocab; }
dy_vocab_kind dy_tokenizer_kind(const dy_tokenizer *t) { return t->kind; }
int32_t dy_tokenizer_bos(const dy_tokenizer *t) { return t->bos; }
int32_t dy_tokenizer_eos(const dy_tokenizer *t) { return t->eos; }
bool dy_tokenizer_add_bos(const dy_tokenizer *t) { return t->add_bos && t->bos >= 0; }
const char *dy_tokenizer_chat_template(const dy_tokenizer *t) { return t->chat_template; }

bool dy_tokenizer_is_eog(const dy_tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

const char *dy_tokenizer_token_text(const dy_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    return t->blob + t->off[id];
}

int dy_tokenizer_max_token_bytes(const dy_tokenizer *t)
{
    uint32_t most = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->len[i] > most)
            most = t->len[i];
    return (int)most;
}

/* ---- tokenize ----------------------------------------------------------------------- */

/* A piece of the input: raw text [off, off+len), or a special token (id >= 0). */
typedef struct {
    int32_t id;
    size_t off, len;
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
    bool failed;
} frag_vec;

static void frag_push(frag_vec *a, int32_t id, size_t off, size_t len)
{
    if (a->failed || (id < 0 && len == 0))
        return;
    if (a->n == a->cap && !dy_array_reserve((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) {
        a->failed = true;
        return;
    }
    a->v[a->n++] = (frag){id, off, len};
}

static bool contains(const frag_vec *a, const char *text, const char *tok, size_t tl)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].id < 0 && memmem(text + a->v[i].off, a->v[i].len, tok, tl))
            return true;
    return false;
}

/* Cuts every occurrence of special token id out of the raw fragment f. */
static void split_raw(const dy_tokenizer *t, int32_t id, const char *text, frag f, frag_vec *out)
{
    const char *tok = t->blob + t->off[id];
    size_t tl = t->len[id];
    size_t base = f.off, blen = f.len;
    while (blen > 0) {
        const char *m = memmem(text + base, blen, tok, tl);
        if (!m) {
            frag_push(out, -1, base, blen);
            return;
        }
        size_t mo = (size_t)(m - text), left = mo - base;
        if (t->attr[id] & TOK_LSTRIP)
            while (left > 0 && isspace((unsigned char)text[base + left - 1]))
                left--;
        frag_push(out, -1, base, left);
        frag_push(out, id, mo, tl);
        base = mo + tl;
        blen = f.off + f.len - base;
        if (t->attr[id] & TOK_RSTRIP)
            while (blen > 0 && isspace((unsigned char)text[base]))
                base++, blen--;
    }
}

/* llama.cpp's tokenizer_st_partition: each special token in turn (longest first) is cut
 * out of the raw fragments. Control and unknown tokens only when parse_special;
 * user-defined ones always. */
static bool partition(const dy_tokenizer *t, const char *text, size_t len, bool parse_special,
                      frag_vec *out)
{
    frag_push(out, -1, 0, len);
    for (int s = 0; s < t->n_special && !out->failed; s++) {
        int32_t id = t->special[s];
        if (!parse_special && (t->attr[id] & (TOK_CONTROL | TOK_UNKNOWN)))
            continue;
        if (t->len[id] == 0 || !contains(out, text, t->blob + t->off[id], t->len[id]))
            continue;
        frag_vec next = {0};
        for (size_t i = 0; i < out->n; i++) {
            if (out->v[i].id >= 0)
                frag_push(&next, out->v[i].id, out->v[i].off, out->v[i].len);
            else
                split_raw(t, id, text, out->v[i], &next);
        }
        free(out->v);
        *out = next;
    }
    return !out->failed;
}

/* SPM input: an optional leading space, then spaces written as the vocabulary stores them. */
static bool spm_fragment(const dy_tokenizer *t, const char *s, size_t n, bool prefix,
                         dy_tok_vec *out)
{
    size_t per = t->spm_escape ? 3 : 1;
    char *buf = malloc((n + 1) * per);
    if (!buf)
        return false;
    size_t k = 0;
    for (size_t i = 0; i < n + prefix; i++) {
        char c = i < (size_t)prefix ? ' ' : s[i - prefix];
        if (c == ' ' && t->spm_escape) {
            memcpy(buf + k, SPACE_MARK, 3);
            k += 3;
        } else {
            buf[k++] = c;
        }
    }
    bool ok = dy_spm_encode(t, buf, k, out);
    free(buf);
    return ok;
}

static bool encode(const dy_tokenizer *t, const char *text, const frag_vec *frags, dy_tok_vec *out)
{
    bool prev_special = true; /* SPM: the first text gets the space prefix */
    for (size_t i = 0; i < frags->n; i++) {
        const frag *f = &frags->v[i];
        bool ok = true;
        if (f->id >= 0)
            dy_tok_vec_push(out, f->id);
        else if (t->kind == DY_VOCAB_SPM)
            ok = spm_fragment(t, text + f->off, f->len, t->add_space_prefix && prev_special, out);
        else
            ok = dy_bpe_encode(t, text + f->off, f->len, out);
        if (!ok)
            return false;
        prev_special = f->id >= 0;
    }
    return !out->failed;
}

int dy_tokenize(const dy_tokenizer *t, const char *text, size_t len, bool add_bos,
                bool parse_special, int32_t *ids, int cap)
{
    if (!t || (!text && len > 0))
        return -1;
    frag_vec frags = {0};
    dy_tok_vec out = {0};
    if (add_bos && t->bos >= 0)
        dy_tok_vec_push(&out, t->bos);
    bool ok = partition(t, text, len, parse_special, &frags) && encode(t, text, &frags, &out);
    if (add_bos && t->add_eos && t->eos >= 0)
        dy_tok_vec_push(&out, t->eos);
    int n = ok && !out.failed && out.n <= (size_t)INT_MAX ? (int)out.n : -1;
    for (int i = 0; i < n && i < cap; i++)
        ids[i] = out.v[i];
    free(frags.v);
    free(out.v);
    return n;
}

/* ---- decode ------------------------------------------------------------------------- */

static int put_bytes(char *buf, int cap, const char *s, size_t n)
{
    if (n > (size_t)INT_MAX)
        n = INT_MAX;
    if (cap > 0)
        memcpy(buf, s, (size_t)cap < n ? (size_t)cap : n);
    if ((size_t)cap > n)
        buf[n] = 0;
    return (int)n;
}

/* An SPM text piece: U+2581 → ' ', minus the leading space if `strip`. */
static int spm_piece(const dy_tokenizer *t, const char *s, size_t n, bool strip, char *buf,
                     int cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        char c = s[i];
        size_t step = 1;
        if (t->spm_escape && n - i >= 3 && memcmp(s + i, SPACE_MARK, 3) == 0)
            c = ' ', step = 3;
        i += step;
        if (strip && k == 0 && c == ' ') {
            strip = false;
            continue;
        }
        strip = false;
        if (k < (size_t)cap)
            buf[k] = c;
        k++;
    }
    if (k < (size_t)cap)
        buf[k] = 0;
    return k > (size_t)INT_MAX ? INT_MAX : (int)k;
}

int dy_token_to_piece(const dy_tokenizer *t, int32_t prev, int32_t id, char *buf, int cap)
{
    if (cap < 0)
        cap = 0;
    if (!t || id < 0 || id >= t->n_vocab)
        return put_bytes(buf, cap, "", 0);
    const char *s = t->blob + t->off[id];
    size_t n = t->len[id];
    uint8_t a = t->attr[id];
    if (a & (TOK_CONTROL | TOK_UNKNOWN))
        return put_bytes(buf, cap, "", 0);
    if (a & TOK_USER_DEFINED)
        return put_bytes(buf, cap, s, n);
    if (t->kind == DY_VOCAB_BPE) {
        if (!(a & TOK_NORMAL))
            return put_bytes(buf, cap, "", 0);
        size_t k = dy_bpe_decode(t, s, n, buf, (size_t)cap);
        if (k < (size_t)cap)
            buf[k] = 0;
        return k > (size_t)INT_MAX ? INT_MAX : (int)k;
    }
    if ((a & TOK_BYTE) && dy_tok_is_byte_text(s, n)) {
        char c = (char)strtol(s + 3, NULL, 16);
        return put_bytes(buf, cap, &c, 1);
    }
    if (!(a & TOK_NORMAL))
        return put_bytes(buf, cap, "", 0);
    bool strip = t->add_space_prefix && t->bos >= 0 && prev == t->bos;
    return spm_piece(t, s, n, strip, buf, cap);
}
