/* tokenizer_bpe.c — byte-level BPE (GGUF `gpt2` vocabularies): the pre-tokenizer named by
 * tokenizer.ggml.pre splits the text with PCRE2 regexes, each piece's bytes are spelled in
 * GPT-2's printable byte alphabet, and merges are applied lowest rank first — as llama.cpp's
 * llm_tokenizer_bpe does. Also maps token texts back to bytes for decoding. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/tokenizer_impl.h"
#include "util/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whitespace as llama.cpp's unicode tables define it (PCRE2's \s lacks U+0085). */
#define WS "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define NOT_WS_L_N "[^" WS "\\p{L}\\p{N}]"

#define RE_GPT2                                                                           \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?" NOT_WS_L_N "+|[" WS "]+(?![^" WS "])" \
    "|[" WS "]+"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* Llama 3 (and Qwen 2 with single digits): letters may take one leading non-letter. */
#define RE_LLAMA3_LIKE(digits)                                                            \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" digits "| ?" NOT_WS_L_N       \
                    "+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

#define MAX_REGEX 4

typedef struct {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *regex[MAX_REGEX];
    bool ignore_merges, add_bos;
} pretok_def;

/* The pre-tokenizers of llama.cpp's llm_tokenizer_bpe that dyad knows; each regex further
 * splits the pieces the previous one produced. */
static const pretok_def pretok_defs[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"gpt-2|gpt2|phi-2|roberta-bpe|mpt|olmo|jais|gigachat|jina-es|jina-de|jina-v1-en|"
     "jina-v2-es|jina-v2-de|jina-v2-code",
     {RE_GPT2}, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3", {RE_LLAMA3_LIKE("{1,3}")}, true, true},
    {"dbrx|smaug-bpe", {RE_LLAMA3_LIKE("{1,3}")}, false, false},
    {"qwen2|stablelm2|megrez", {RE_LLAMA3_LIKE("")}, false, false},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2},
     false, false},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, false},
};

struct dy_pretok {
    int n;
    pcre2_code *re[MAX_REGEX];
};

static bool name_in_list(const char *name, const char *list)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        p += len + (bar != NULL);
    }
    return false;
}

void dy_pretok_free(dy_pretok *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++)
        pcre2_code_free(p->re[i]);
    free(p);
}

dy_pretok *dy_pretok_new(const char *name, bool *ignore_merges, bool *add_bos, char *err,
                         size_t errlen)
{
    if (!name || !*name)
        name = "default";
    const pretok_def *def = NULL;
    for (size_t i = 0; i < sizeof pretok_defs / sizeof pretok_defs[0] && !def; i++)
        if (name_in_list(name, pretok_defs[i].names))
            def = &pretok_defs[i];
    if (!def) {
        snprintf(err, errlen, "unknown pre-tokenizer '%s'", name);
        return NULL;
    }
    dy_pretok *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int i = 0; i < MAX_REGEX && def->regex[i]; i++) {
        int code;
        PCRE2_SIZE at;
        p->re[i] = pcre2_compile((PCRE2_SPTR)def->regex[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at,
                                 NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            snprintf(err, errlen, "pre-tokenizer '%s': regex %d: %s at %zu", name, i,
                     (const char *)msg, (size_t)at);
            dy_pretok_free(p);
            return NULL;
        }
        p->n = i + 1;
        pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE); /* optional: falls back if it fails */
    }
    *ignore_merges = def->ignore_merges;
    *add_bos = def->add_bos;
    return p;
}

typedef struct {
    size_t *v; /* start, length pairs */
    size_t n, cap;
    bool failed;
} span_vec;

static void span_push(span_vec *a, size_t start, size_t len)
{
    if (a->failed || len == 0)
        return;
    if (a->n + 2 > a->cap && !dy_array_reserve((void **)&a->v, &a->cap, a->n + 2, sizeof *a->v)) {
        a->failed = true;
        return;
    }
    a->v[a->n++] = start;
    a->v[a->n++] = len;
}

/* Splits text[start, start+len) by re: every match is a piece, and so is every run of text
 * between matches. The regex sees only this span, as in llama.cpp. */
static bool split_span(const pcre2_code *re, pcre2_match_data *md, const char *text,
                       size_t start, size_t len, span_vec *out)
{
    PCRE2_SPTR subject = (PCRE2_SPTR)(text + start);
    size_t pos = 0, last = 0;
    while (pos < len) {
        int rc = pcre2_match(re, subject, len, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return false;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: step over one character */
            size_t step = dy_tok_utf8_len((unsigned char)text[start + ms]);
            pos = ms + (step < len - ms ? step : len - ms);
            continue;
        }
        span_push(out, start + last, ms - last);
        span_push(out, start + ms, me - ms);
        pos = last = me;
    }
    span_push(out, start + last, len - last);
    return !out->failed;
}

int dy_pretok_split(const dy_pretok *p, const char *text, size_t len, size_t **offs)
{
    *offs = NULL;
    span_vec cur = {0};
    span_push(&cur, 0, len);
    for (int i = 0; i < p->n && !cur.failed; i++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re[i], NULL);
        span_vec next = {0};
        bool ok = md != NULL;
        for (size_t j = 0; ok && j < cur.n; j += 2)
            ok = split_span(p->re[i], md, text, cur.v[j], cur.v[j + 1], &next);
        pcre2_match_data_free(md);
        free(cur.v);
        cur = next;
        if (!ok)
            cur.failed = true;
    }
    if (cur.failed || cur.n / 2 > (size_t)INT32_MAX) {
        free(cur.v);
        return -1;
    }
    *offs = cur.v;
    return (int)(cur.n / 2);
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68
 * bytes map to U+0100.. in byte order. */
void dy_bpe_init_alphabet(dy_tokenizer *t)
{
    int extra = 0;
    memset(t->cp_byte, -1, sizeof t->cp_byte);
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        int cp = printable ? b : 256 + extra++;
        t->byte_cp[b] = (uint16_t)cp;
        t->cp_byte[cp] = (int16_t)b;
    }
}

/* Appends code point cp (< 0x800) as UTF-8. */
static size_t put_cp(char *dst, unsigned cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

typedef struct {
    const dy_tokenizer *t;
    const char *w; /* the word in the byte alphabet */
    dy_tok_symbol *sym;
    dy_tok_heap heap;
    char *key; /* scratch for "left right" */
} bpe_state;

/* Queues the merge of symbols l and r if "left right" is in the merges list, by rank. */
static void add_bigram(void *ctx, int l, int r)
{
    bpe_state *st = ctx;
    const dy_tok_symbol *a = &st->sym[l], *b = &st->sym[r];
    memcpy(st->key, st->w + a->off, a->n);
    st->key[a->n] = ' ';
    memcpy(st->key + a->n + 1, st->w + b->off, b->n);
    int32_t rank = dy_tok_map_get(&st->t->merges, st->key, a->n + 1 + b->n);
    if (rank < 0)
        return;
    dy_tok_heap_push(&st->heap, (dy_tok_bigram){.left = l, .right = r, .prio = -(double)rank,
                                                .size = a->n + b->n});
}

/* Emits a finished symbol: its token, or else the tokens of its single bytes. */
static void emit_symbol(const dy_tokenizer *t, const char *s, size_t n, dy_tok_vec *out)
{
    int32_t id = dy_tok_map_get(&t->vocab, s, n);
    if (id >= 0) {
        dy_tok_vec_push(out, id);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        id = dy_tok_map_get(&t->vocab, s + i, 1);
        if (id >= 0)
            dy_tok_vec_push(out, id);
    }
}

/* One pre-token: w[0..wn) already in the byte alphabet; key is scratch of wn + 1 bytes. */
static bool encode_word(const dy_tokenizer *t, const char *w, size_t wn, char *key, dy_tok_vec *out)
{
    if (t->ignore_merges) {
        int32_t id = dy_tok_map_get(&t->vocab, w, wn);
        if (id >= 0) {
            dy_tok_vec_push(out, id);
            return true;
        }
    }
    bpe_state st = {.t = t, .w = w, .key = key};
    int count = dy_tok_split_chars(w, wn, &st.sym);
    if (count < 0)
        return false;
    dy_tok_merge_symbols(st.sym, count, &st.heap, add_bigram, &st);
    bool ok = !st.heap.failed;
    for (int i = count > 0 ? 0 : -1; ok && i >= 0; i = st.sym[i].next)
        emit_symbol(t, w + st.sym[i].off, st.sym[i].n, out);
    free(st.heap.v);
    free(st.sym);
    return ok;
}

bool dy_bpe_encode(const dy_tokenizer *t, const char *s, size_t n, dy_tok_vec *out)
{
    size_t *offs;
    int count = dy_pretok_split(t->pretok, s, n, &offs);
    if (count < 0)
        return false;
    size_t longest = 0;
    for (int i = 0; i < count; i++)
        if (offs[2 * i + 1] > longest)
            longest = offs[2 * i + 1];
    char *word = malloc(2 * longest + 1), *key = malloc(2 * longest + 2);
    bool ok = word && key;
    for (int i = 0; ok && i < count; i++) {
        const unsigned char *p = (const unsigned char *)s + offs[2 * i];
        size_t wn = 0;
        for (size_t j = 0; j < offs[2 * i + 1]; j++)
            wn += put_cp(word + wn, t->byte_cp[p[j]]);
        ok = encode_word(t, word, wn, key, out);
    }
    free(word);
    free(key);
    free(offs);
    return ok && !out->failed;
}

/* Decodes one UTF-8 sequence at s (n bytes left); returns its length, or 0 if invalid. */
static size_t utf8_decode(const unsigned char *s, size_t n, unsigned *cp)
{
    size_t len = dy_tok_utf8_len(s[0]);
    if (len == 1) {
        *cp = s[0];
        return s[0] < 0x80 ? 1 : 0;
    }
    if (len > n)
        return 0;
    unsigned v = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

size_t dy_bpe_decode(const dy_tokenizer *t, const char *text, size_t len, char *buf, size_t cap)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned cp;
        size_t k = utf8_decode(s + i, len - i, &cp);
        if (k > 0 && cp < sizeof t->cp_byte / sizeof t->cp_byte[0] && t->cp_byte[cp] >= 0) {
            if (n < cap)
                buf[n] = (char)t->cp_byte[cp];
            n++;
        } else {
            if (k == 0)
                k = 1; /* invalid byte: copy it through */
            for (size_t j = 0; j < k; j++, n++)
                if (n < cap)
                    buf[n] = (char)s[i + j];
        }
        i += k;
    }
    return n;
}
