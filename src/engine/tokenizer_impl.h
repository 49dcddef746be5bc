/* tokenizer_impl.h — private to tokenizer*.c (and the tokenizer tests): the dy_tokenizer
 * struct, the per-token attributes, and the small containers the encoders share (a
 * string→id hash map, a growable id vector, a bigram heap). Not part of the engine API. */
#ifndef DYAD_TOKENIZER_IMPL_H
#define DYAD_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/tokenizer.h"

/* Token attributes, as llama.cpp derives them from GGUF token_type (bit flags). */
enum {
    TOK_NORMAL = 1 << 0,
    TOK_UNKNOWN = 1 << 1,
    TOK_CONTROL = 1 << 2,
    TOK_USER_DEFINED = 1 << 3,
    TOK_UNUSED = 1 << 4,
    TOK_BYTE = 1 << 5,
    TOK_LSTRIP = 1 << 6, /* strip whitespace left of this special token in the input */
    TOK_RSTRIP = 1 << 7, /* ... and right of it */
};

/* Open-addressing hash map from byte strings to int32 values. Keys are not copied: they
 * must outlive the map. It is not util/hashmap.h: its keys are byte strings compared exactly
 * (a u64 digest as the key could make two strings collide and one of them unfindable), it
 * never deletes, and put() chooses whether the first or the last duplicate wins. */
typedef struct {
    const char *key;
    uint32_t len;
    int32_t value;
} dy_tok_map_slot;

typedef struct {
    dy_tok_map_slot *slots; /* key == NULL marks an empty slot */
    size_t cap;          /* a power of two */
    size_t count;
} dy_tok_map;

bool dy_tok_map_init(dy_tok_map *m, size_t expected);
void dy_tok_map_free(dy_tok_map *m);
/* Inserts key→value; an existing key keeps its value unless `overwrite`. */
bool dy_tok_map_put(dy_tok_map *m, const char *key, size_t len, int32_t value, bool overwrite);
/* The value for key, or -1. */
int32_t dy_tok_map_get(const dy_tok_map *m, const char *key, size_t len);

/* Growable vector of token ids; `failed` is set (and pushes ignored) after an OOM. */
typedef struct {
    int32_t *v;
    size_t n, cap;
    bool failed;
} dy_tok_vec;

void dy_tok_vec_push(dy_tok_vec *a, int32_t id);

/* A candidate merge of the adjacent symbols left and right. The heap pops the highest
 * `prio` first and, among equals, the leftmost — llama.cpp's order for both SPM (prio =
 * score) and BPE (prio = -rank). `size` is the merged length, to spot stale entries. */
typedef struct {
    int left, right;
    double prio;
    size_t size;
} dy_tok_bigram;

typedef struct {
    dy_tok_bigram *v;
    size_t n, cap;
    bool failed;
} dy_tok_heap;

void dy_tok_heap_push(dy_tok_heap *h, dy_tok_bigram b);
bool dy_tok_heap_pop(dy_tok_heap *h, dy_tok_bigram *out);

/* A symbol of the text being merged: bytes [off, off+n) of the work string, in a doubly
 * linked list of the symbols still alive (n == 0 once merged away). */
typedef struct {
    int prev, next;
    size_t off, n;
} dy_tok_symbol;

/* Length of the UTF-8 sequence that starts with byte c, by its high nibble (1 for a stray
 * continuation byte), as llama.cpp's unicode_len_utf8. */
static inline size_t dy_tok_utf8_len(unsigned char c)
{
    static const unsigned char lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

/* Splits s[0..n) into symbols of one UTF-8 character each. Returns the count, or -1 on OOM
 * (*out is then NULL). */
int dy_tok_split_chars(const char *s, size_t n, dy_tok_symbol **out);

/* Queues the merge of symbols l and r (both >= 0, adjacent) if the vocabulary allows it. */
typedef void (*dy_tok_add_bigram_fn)(void *ctx, int l, int r);

/* Seeds `h` with every adjacent pair of the count symbols, then pops merges until none is
 * left: the popped pair's right symbol joins the left one, and the new neighbours are
 * offered to `add`. Entries whose symbols changed since they were queued are skipped. */
void dy_tok_merge_symbols(dy_tok_symbol *sym, int count, dy_tok_heap *h, dy_tok_add_bigram_fn add,
                          void *ctx);

/* True for the SPM byte-token spelling "<0xNN>". */
static inline bool dy_tok_is_byte_text(const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEFabcdef";
    return n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[3] && s[4] &&
           strchr(hex, s[3]) && strchr(hex, s[4]) && s[5] == '>';
}

typedef struct dy_pretok dy_pretok; /* compiled pre-tokenizer regexes (tokenizer_bpe.c) */

struct dy_tokenizer {
    dy_vocab_kind kind;
    int n_vocab;
    char *blob;      /* all token texts, each NUL-terminated */
    size_t *off;     /* text of token i at blob + off[i] */
    uint32_t *len;   /* and its length */
    float *score;    /* SPM merge priority */
    uint8_t *attr;   /* TOK_* flags */
    dy_tok_map vocab;   /* text → id (the last id wins for duplicate texts, as in llama.cpp) */

    int32_t bos, eos, unk, pad; /* -1 when absent */
    bool add_bos, add_eos, add_space_prefix;
    bool spm_escape; /* SPM: spaces are stored as U+2581 (GGUF); false for llama2.c files */

    int32_t byte_token[256]; /* SPM byte-fallback tokens <0xNN>, -1 where missing */

    int32_t *special; /* control / user-defined / unknown ids, longest text first */
    int n_special;
    int32_t eog[16]; /* end-of-generation ids */
    int n_eog;

    /* byte-level BPE */
    dy_tok_map merges;      /* "left right" → rank; keys point into merge_blob */
    char *merge_blob;
    bool ignore_merges;  /* look a whole pre-token up before merging (llama-bpe) */
    dy_pretok *pretok;
    uint16_t byte_cp[256];  /* GPT-2 byte → code point */
    int16_t cp_byte[324];   /* and back (-1 where not in the alphabet) */

    char *chat_template;
};

/* tokenizer_spm.c: encodes already-escaped text (spaces as the vocab stores them). */
bool dy_spm_encode(const dy_tokenizer *t, const char *s, size_t n, dy_tok_vec *out);

/* tokenizer_bpe.c */
/* Compiles the pre-tokenizer named by tokenizer.ggml.pre (NULL or "" = "default").
 * Sets *ignore_merges / *add_bos for the names that imply them. NULL + err if unknown. */
dy_pretok *dy_pretok_new(const char *name, bool *ignore_merges, bool *add_bos, char *err,
                         size_t errlen);
void dy_pretok_free(dy_pretok *p);
/* Splits text into pre-tokens: on success *offs holds 2*count numbers (start, length). */
int dy_pretok_split(const dy_pretok *p, const char *text, size_t len, size_t **offs);
void dy_bpe_init_alphabet(dy_tokenizer *t);
bool dy_bpe_encode(const dy_tokenizer *t, const char *s, size_t n, dy_tok_vec *out);
/* Maps a byte-level token text back to raw bytes into buf (at most cap); returns the full
 * length. Code points outside the alphabet are copied through as UTF-8. */
size_t dy_bpe_decode(const dy_tokenizer *t, const char *text, size_t len, char *buf, size_t cap);

#endif
