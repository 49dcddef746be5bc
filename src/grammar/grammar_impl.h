/* grammar_impl.h — the compiled form of a grammar and the vocabulary's prefix tree, shared by
 * the files of grammar/ (grammar_compile.c makes the first, vocab_trie.c the second,
 * grammar_match.c walks both). Private to grammar/. */
#ifndef DYAD_GRAMMAR_IMPL_H
#define DYAD_GRAMMAR_IMPL_H

#include "grammar/grammar.h"

#include <stdbool.h>
#include <stdint.h>

enum { E_END = 0, E_SET, E_RULE, E_TOKEN };

typedef struct {
    uint32_t kind : 2;
    uint32_t arg : 30; /* E_SET: index into sets; E_RULE: rule id; E_TOKEN: a token id (a
                        * token without text, such as Mistral's [TOOL_CALLS], matched whole) */
} elem;

typedef struct {
    uint32_t w[8];
} byteset;

static inline bool set_has(const byteset *s, uint8_t c)
{
    return s->w[c >> 5] >> (c & 31) & 1u;
}

static inline void set_add_range(byteset *s, unsigned lo, unsigned hi)
{
    for (unsigned c = lo; c <= hi; c++)
        s->w[c >> 5] |= 1u << (c & 31);
}

typedef struct {
    uint32_t first_alt, n_alts; /* into alt_start */
} rule;

struct dy_grammar {
    elem *el;
    uint32_t n_el;
    uint32_t *alt_start;
    uint32_t n_alts;
    rule *rules;
    uint32_t n_rules;
    byteset *sets;
    uint32_t n_sets;
    uint32_t root;
    bool tail_cycles; /* a cycle of tail references reads nothing: closures remember where
                       * they have been (grammar_match.c) */
};

/* The prefix tree: node 0 is the root; a node's children are consecutive and come after it. */
typedef struct {
    uint32_t child_lo, child_hi; /* children: nodes[child_lo .. child_hi) */
    uint32_t tok_lo, tok_hi;     /* tokens whose text ends here: ids[tok_lo .. tok_hi) */
    uint32_t sub_hi;             /* the whole subtree's tokens: ids[tok_lo .. sub_hi) */
    uint32_t deep;               /* the longest token text in the subtree */
    uint8_t byte;                /* the byte on the edge into this node */
} tnode;

struct dy_vocab_trie {
    int n_vocab;
    tnode *nodes;
    uint32_t n_nodes, cap_nodes;
    byteset *below;              /* per node: every byte on an edge of its subtree */
    uint32_t *ids;               /* token ids with text, sorted by text */
    char *blob;                  /* every token's text */
    size_t *off;
    uint32_t *len;
};

#endif
