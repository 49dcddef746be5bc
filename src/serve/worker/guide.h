/* guide.h — structured outputs on the worker: the grammars its sequences follow and each
 * sequence's place in one. A request's grammar text arrives in its REQUEST frame; the worker
 * compiles each distinct text once and shares the compiled grammar and its matcher (with the
 * mask cache) between every sequence that follows it — the n samples of a request, and later
 * requests with the same schema, kept a while after their last user. Each sequence has its
 * own state (a dy_guide), so forks go their own ways. Single-threaded: the step loop's. */
#ifndef DYAD_GUIDE_H
#define DYAD_GUIDE_H

#include "engine/tokenizer.h"
#include "grammar/grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dy_grammar_entry dy_grammar_entry;

typedef struct {
    const dy_tokenizer *tok;
    int n_vocab;
    const int32_t *eog;        /* the end-of-generation ids (borrowed) */
    int n_eog;
    float *eog_logits;         /* their logits, kept across a mask */
    dy_vocab_trie *trie;       /* every token's text, built at the first grammar */
    dy_grammar_entry *entries; /* in use, or idle (most recently released first) */
    int n_idle, max_idle;
    uint64_t compiled;         /* grammars compiled (a reused text is not compiled again) */
} dy_guides;

/* tok and eog are borrowed: they outlive gs. false if memory is short. */
bool dy_guides_init(dy_guides *gs, const dy_tokenizer *tok, int n_vocab, const int32_t *eog,
                    int n_eog);
void dy_guides_free(dy_guides *gs);

/* The prefix tree of the text each token appends to an answer (as detokenization gives it
 * mid-answer); NULL if memory is short. */
dy_vocab_trie *dy_tokenizer_trie(const dy_tokenizer *tok, int n_vocab);

typedef struct {
    dy_grammar_entry *e; /* NULL: not constrained */
    dy_gstate st;
} dy_guide;

/* Starts g on the grammar text (compiled now, or shared with a sequence that follows the same
 * text). false and a message if the text does not compile or memory is short. */
bool dy_guide_start(dy_guides *gs, dy_guide *g, const char *text, size_t len, char *err,
                    size_t errlen);
/* Ends g's use of its grammar. */
void dy_guide_end(dy_guides *gs, dy_guide *g);

/* Sets every logit the grammar forbids next to -inf: tokens whose text it cannot read, and
 * the end-of-generation ids unless the text so far is whole (and allow_end). false and a
 * message when no token is left (or the matcher ran out of room): the answer cannot go on. */
bool dy_guide_mask(dy_guides *gs, dy_guide *g, float *logits, bool allow_end, char *err,
                   size_t errlen);
/* Follows a sampled token: the text it appended, or the token itself when it writes none (a
 * control token the grammar names). false and a message if the grammar refuses it (a token's
 * text can differ from the one its mask was built from only at the very start of a
 * prompt-less answer) or the matcher is full. */
bool dy_guide_advance(dy_guide *g, int32_t token, const char *piece, size_t n, char *err,
                      size_t errlen);
/* Whether the text so far is a whole sentence of the grammar. */
static inline bool dy_guide_complete(const dy_guide *g)
{
    return g->st.accept;
}

#endif
