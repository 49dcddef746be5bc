/* grammar.h — constrained decoding: a context-free grammar over bytes, the recognizer that
 * follows a sequence's output through it, and the set of a vocabulary's tokens it allows next.
 *
 * Three objects, by lifetime:
 *   dy_grammar     the compiled rules of one grammar text (immutable);
 *   dy_vocab_trie  one tokenizer's token texts as a prefix tree (built once per worker);
 *   dy_gmatch      one grammar over one vocabulary: the arena of parse-stack nodes and the
 *                  cache of token masks per recognizer state, shared by every sequence that
 *                  follows that grammar (n samples of a request, requests with the same schema);
 *   dy_gstate      one sequence's place in the grammar: a small set of parse stacks.
 * Nothing here is thread-safe: a worker's step loop owns its matchers.
 *
 * The notation (docs/structured-outputs.md has it in full) is GBNF's:
 *   name ::= alternatives        one rule per definition; the start rule is `root`
 *   "literal"  [a-z0-9_]  [^"\\]  .  name  ( group )  x*  x+  x?  x{m}  x{m,}  x{m,n}  a | b
 *   <[N]>      token N itself: for a token that writes no text (a control token)
 * Literals and classes hold bytes; escapes \n \r \t \\ \" \] \- \xHH \uHHHH (written as UTF-8).
 * A class holds ASCII or \xHH bytes; a negated class and `.` match one whole UTF-8 character
 * (never a byte of one alone), so a grammar built from them only admits valid UTF-8.
 * `#` starts a comment to the end of the line. Left-recursive rules are rejected. */
#ifndef DYAD_GRAMMAR_H
#define DYAD_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dy_grammar dy_grammar;

/* Compiles grammar text. NULL and a message ("line L, column C: …") if it is malformed,
 * names an undefined rule, has no `root`, or recurses on the left. */
dy_grammar *dy_grammar_parse(const char *text, size_t len, char *err, size_t errlen);
void dy_grammar_free(dy_grammar *g);

/* Whether the whole of s is a sentence of the grammar. */
bool dy_grammar_accepts(const dy_grammar *g, const char *s, size_t n);

typedef struct dy_vocab_trie dy_vocab_trie;

/* pieces[i] (lens[i] bytes) is the text token i appends to the output. A token with no text
 * (control and end-of-generation tokens) is never allowed by the mask: the caller allows the
 * end-of-generation tokens itself when the state accepts. NULL if memory is short. */
dy_vocab_trie *dy_vocab_trie_new(int n_vocab, const char *const *pieces, const uint32_t *lens);
void dy_vocab_trie_free(dy_vocab_trie *t);
int dy_vocab_trie_size(const dy_vocab_trie *t); /* n_vocab */

typedef struct dy_gmatch dy_gmatch;

typedef struct {
    uint32_t max_nodes;  /* parse-stack nodes in the arena (0: a default); past it an advance
                          * fails with DY_GRAMMAR_LIMIT */
    uint32_t max_masks;  /* masks kept in the cache (0: a default) */
} dy_gmatch_limits;

/* The grammar is borrowed (it must outlive the matcher); the trie may be NULL (no masks, only
 * advances: what dy_grammar_accepts uses). NULL if memory is short. */
dy_gmatch *dy_gmatch_new(const dy_grammar *g, const dy_vocab_trie *t, dy_gmatch_limits lim);
void dy_gmatch_free(dy_gmatch *m);
/* Bytes the matcher holds now (arena, cache, trie not included). */
size_t dy_gmatch_bytes(const dy_gmatch *m);
/* Masks answered from the cache, and computed, since the matcher was made. */
void dy_gmatch_mask_counts(const dy_gmatch *m, uint64_t *hits, uint64_t *misses);

typedef struct {
    uint32_t *tops;      /* node ids of the stacks' tops, sorted, no duplicates */
    uint32_t n, cap;
    bool accept;         /* the bytes so far are a whole sentence */
} dy_gstate;

typedef enum {
    DY_GRAMMAR_OK = 0,
    DY_GRAMMAR_REJECT,   /* the grammar does not allow these bytes here */
    DY_GRAMMAR_LIMIT,    /* the matcher's node limit, or memory, ran out */
} dy_grammar_status;

/* The state before any byte. */
dy_grammar_status dy_gstate_start(dy_gmatch *m, dy_gstate *s);
/* dst becomes a copy of src (a fork of a sample); false if memory is short. */
bool dy_gstate_copy(dy_gstate *dst, const dy_gstate *src);
void dy_gstate_free(dy_gstate *s);
/* Follows the bytes; on anything but OK the state is unchanged. */
dy_grammar_status dy_gstate_advance(dy_gmatch *m, dy_gstate *s, const char *bytes, size_t n);
/* Follows a token that writes no text, which only a <[N]> element admits. */
dy_grammar_status dy_gstate_advance_token(dy_gmatch *m, dy_gstate *s, int32_t token);
/* Whether some byte may follow (false: only the end may come). */
static inline bool dy_gstate_can_continue(const dy_gstate *s)
{
    return s->n > 0;
}
/* The tokens whose whole text the grammar allows next, and those its <[N]> elements name, as
 * a bitset of n_vocab bits (bit i of word i / 32); owned by the matcher and valid until its
 * next call. NULL if the matcher has no trie or memory is short. End-of-generation is the
 * caller's: allowed iff s->accept. */
const uint32_t *dy_gstate_mask(dy_gmatch *m, const dy_gstate *s);

#endif
