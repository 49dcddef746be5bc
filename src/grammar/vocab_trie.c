/* vocab_trie.c — a tokenizer's token texts as a prefix tree (see grammar.h): tokens sorted by
 * text, so every node's subtree is one run of the sorted ids, and per node the set of bytes
 * below it, which lets a mask walk allow a whole subtree at once. */
#include "grammar/grammar_impl.h"
#include "util/buf.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *text;
    uint32_t len, id;
} sort_key;

static int by_text(const void *a, const void *b)
{
    const sort_key *x = a, *y = b;
    int c = memcmp(x->text, y->text, x->len < y->len ? x->len : y->len);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static uint8_t byte_at(const dy_vocab_trie *t, uint32_t k, uint32_t depth)
{
    return (uint8_t)t->blob[t->off[t->ids[k]] + depth];
}

/* Fills node u from the sorted tokens [lo, hi), all sharing their first `depth` bytes. */
static bool build_node(dy_vocab_trie *t, uint32_t u, uint32_t lo, uint32_t hi, uint32_t depth)
{
    uint32_t k = lo;
    while (k < hi && t->len[t->ids[k]] == depth)
        k++;
    t->nodes[u].tok_lo = lo;
    t->nodes[u].tok_hi = k;
    t->nodes[u].sub_hi = hi;
    uint32_t n_children = 0;
    for (uint32_t j = k; j < hi; n_children++) {
        uint8_t b = byte_at(t, j, depth);
        while (j < hi && byte_at(t, j, depth) == b)
            j++;
    }
    size_t cap = t->cap_nodes;
    if (!dy_array_reserve((void **)&t->nodes, &cap, t->n_nodes + n_children, sizeof *t->nodes))
        return false;
    t->cap_nodes = (uint32_t)cap;
    uint32_t first = t->n_nodes;
    t->n_nodes += n_children;
    t->nodes[u].child_lo = first;
    t->nodes[u].child_hi = first + n_children;
    uint32_t c = first;
    for (uint32_t j = k; j < hi; c++) {
        uint32_t start = j;
        uint8_t b = byte_at(t, j, depth);
        while (j < hi && byte_at(t, j, depth) == b)
            j++;
        t->nodes[c] = (tnode){.byte = b};
        if (!build_node(t, c, start, j, depth + 1))
            return false;
    }
    return true;
}

void dy_vocab_trie_free(dy_vocab_trie *t)
{
    if (!t)
        return;
    free(t->nodes);
    free(t->below);
    free(t->ids);
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t);
}

/* Copies the texts and sorts the ids by them. */
static bool sort_tokens(dy_vocab_trie *t, const char *const *pieces, const uint32_t *lens,
                        uint32_t *n_with_text)
{
    size_t total = 0;
    for (int i = 0; i < t->n_vocab; i++)
        total += lens[i];
    sort_key *keys = malloc(sizeof *keys * (size_t)t->n_vocab);
    t->blob = malloc(total + 1);
    if (!keys || !t->blob) {
        free(keys);
        return false;
    }
    uint32_t n = 0;
    size_t at = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        if (lens[i])
            memcpy(t->blob + at, pieces[i], lens[i]);
        t->off[i] = at;
        t->len[i] = lens[i];
        if (lens[i] > 0) /* a token without text is never a grammar's to allow */
            keys[n++] = (sort_key){t->blob + at, lens[i], (uint32_t)i};
        at += lens[i];
    }
    qsort(keys, n, sizeof *keys, by_text);
    for (uint32_t k = 0; k < n; k++)
        t->ids[k] = keys[k].id;
    free(keys);
    *n_with_text = n;
    return true;
}

dy_vocab_trie *dy_vocab_trie_new(int n_vocab, const char *const *pieces, const uint32_t *lens)
{
    if (n_vocab <= 0)
        return NULL;
    dy_vocab_trie *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n_vocab = n_vocab;
    t->ids = malloc(sizeof *t->ids * (size_t)n_vocab);
    t->off = malloc(sizeof *t->off * (size_t)n_vocab);
    t->len = malloc(sizeof *t->len * (size_t)n_vocab);
    size_t cap = 0;
    uint32_t n;
    if (!t->ids || !t->off || !t->len || !sort_tokens(t, pieces, lens, &n) ||
        !dy_array_reserve((void **)&t->nodes, &cap, 1024, sizeof *t->nodes)) {
        dy_vocab_trie_free(t);
        return NULL;
    }
    t->cap_nodes = (uint32_t)cap;
    t->n_nodes = 1;
    t->nodes[0] = (tnode){0};
    if (!build_node(t, 0, 0, n, 0) || !(t->below = calloc(t->n_nodes, sizeof *t->below))) {
        dy_vocab_trie_free(t);
        return NULL;
    }
    /* children always come after their parent: one backward pass fills `below` and `deep` */
    for (uint32_t u = t->n_nodes; u-- > 0;) {
        tnode *x = &t->nodes[u];
        x->deep = x->tok_lo < x->tok_hi ? t->len[t->ids[x->tok_lo]] : 0;
        for (uint32_t c = x->child_lo; c < x->child_hi; c++) {
            set_add_range(&t->below[u], t->nodes[c].byte, t->nodes[c].byte);
            for (int w = 0; w < 8; w++)
                t->below[u].w[w] |= t->below[c].w[w];
            if (t->nodes[c].deep > x->deep)
                x->deep = t->nodes[c].deep;
        }
    }
    return t;
}

int dy_vocab_trie_size(const dy_vocab_trie *t)
{
    return t->n_vocab;
}

