/* grammar_match.c — the recognizer and the token masks (see grammar.h).
 *
 * The recognizer keeps a set of parse stacks, as llama.cpp's grammar sampler does, but each
 * stack is a chain of nodes (position, parent) interned in the matcher's arena: equal stacks
 * are equal node ids, so a state is a sorted array of ids, cheap to compare, hash and cache.
 * A stack's top always points at a byte set; a reference that is the last element of its
 * alternative pushes no return node (a tail call), so x* loops in constant depth. */
#include "grammar/grammar_impl.h"
#include "util/buf.h"
#include "util/hashmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NIL UINT32_MAX
#define DEFAULT_NODES (1u << 20)
#define DEFAULT_MASKS 256

typedef struct {
    uint32_t pos;    /* an element of the grammar */
    uint32_t parent; /* the node below it on the stack, NIL at the bottom */
} gnode;

typedef struct {
    uint64_t hash;
    uint32_t *tops, n;
    uint32_t *bits;
    uint64_t used;   /* the matcher's clock at the last use, for LRU eviction */
} mask_entry;

struct dy_gmatch {
    const dy_grammar *g;
    const dy_vocab_trie *t;
    dy_gmatch_limits lim;
    gnode *nodes;
    size_t n_nodes, cap_nodes;
    dy_hashmap intern;          /* (pos << 32 | parent) -> node id */
    dy_hashmap seen;            /* (pos << 32 | parent) -> the epoch it was last expanded in,
                                 * for grammars with cycles of tail references */
    uint64_t epoch;
    uint32_t *scratch;          /* states of a walk, one segment per depth */
    size_t n_scratch, cap_scratch;
    bool accept, full;          /* of the closure in progress: reached the end / hit a limit */
    mask_entry *masks;
    uint32_t n_masks;
    dy_hashmap mask_index;      /* hash of a state -> index in masks */
    uint64_t clock, hits, misses;
    uint32_t words;             /* of a mask */
};

dy_gmatch *dy_gmatch_new(const dy_grammar *g, const dy_vocab_trie *t, dy_gmatch_limits lim)
{
    dy_gmatch *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->g = g;
    m->t = t;
    m->lim.max_nodes = lim.max_nodes ? lim.max_nodes : DEFAULT_NODES;
    m->lim.max_masks = lim.max_masks ? lim.max_masks : DEFAULT_MASKS;
    m->words = t ? (uint32_t)(t->n_vocab + 31) / 32 : 0;
    if (t && !(m->masks = calloc(m->lim.max_masks, sizeof *m->masks))) {
        free(m);
        return NULL;
    }
    return m;
}

void dy_gmatch_free(dy_gmatch *m)
{
    if (!m)
        return;
    for (uint32_t k = 0; k < m->n_masks; k++) {
        free(m->masks[k].tops);
        free(m->masks[k].bits);
    }
    free(m->masks);
    dy_hashmap_free(&m->mask_index);
    dy_hashmap_free(&m->intern);
    dy_hashmap_free(&m->seen);
    free(m->nodes);
    free(m->scratch);
    free(m);
}

size_t dy_gmatch_bytes(const dy_gmatch *m)
{
    size_t b = sizeof *m + m->cap_nodes * sizeof *m->nodes + m->cap_scratch * sizeof *m->scratch +
               (m->intern.cap + m->mask_index.cap + m->seen.cap) * sizeof(dy_hashmap_slot) +
               m->lim.max_masks * sizeof *m->masks * (m->masks != NULL);
    for (uint32_t k = 0; k < m->n_masks; k++)
        b += (m->masks[k].n + m->words) * sizeof(uint32_t);
    return b;
}

void dy_gmatch_mask_counts(const dy_gmatch *m, uint64_t *hits, uint64_t *misses)
{
    *hits = m->hits;
    *misses = m->misses;
}

/* The id of the node (pos, parent), made if new; NIL when the arena is full. */
static uint32_t intern(dy_gmatch *m, uint32_t pos, uint32_t parent)
{
    uint64_t key = (uint64_t)pos << 32 | parent;
    uint64_t v = dy_hashmap_get(&m->intern, key);
    if (v != DY_HASHMAP_NONE)
        return (uint32_t)v;
    if (m->n_nodes >= m->lim.max_nodes ||
        !dy_array_reserve((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes) ||
        !dy_hashmap_put(&m->intern, key, m->n_nodes)) {
        m->full = true;
        return NIL;
    }
    m->nodes[m->n_nodes] = (gnode){pos, parent};
    return (uint32_t)m->n_nodes++;
}

static void push_top(dy_gmatch *m, uint32_t id)
{
    if (!dy_array_reserve((void **)&m->scratch, &m->cap_scratch, m->n_scratch + 1,
                          sizeof *m->scratch)) {
        m->full = true;
        return;
    }
    m->scratch[m->n_scratch++] = id;
}

/* Whether the reference at pos over parent was expanded already in this epoch (and marks it):
 * a cycle of tail references comes back to the same place with the same stack. */
static bool already_expanded(dy_gmatch *m, uint32_t pos, uint32_t parent)
{
    uint64_t key = (uint64_t)pos << 32 | parent;
    if (dy_hashmap_get(&m->seen, key) == m->epoch)
        return true;
    if (!dy_hashmap_put(&m->seen, key, m->epoch)) {
        m->full = true;
        return true;
    }
    return false;
}

/* Every stack reached from "at element pos, over stack parent" without reading a byte: tops
 * (at a byte set) go onto the scratch; reaching the end of the root sets m->accept. */
static void closure(dy_gmatch *m, uint32_t pos, uint32_t parent)
{
    const dy_grammar *g = m->g;
    while (g->el[pos].kind == E_END) { /* return to the caller's next element */
        if (parent == NIL) {
            m->accept = true;
            return;
        }
        pos = m->nodes[parent].pos;
        parent = m->nodes[parent].parent;
    }
    if (g->el[pos].kind == E_SET || g->el[pos].kind == E_TOKEN) {
        uint32_t id = intern(m, pos, parent);
        if (id != NIL)
            push_top(m, id);
        return;
    }
    if (g->tail_cycles && already_expanded(m, pos, parent))
        return;
    /* a reference: the return point, unless it is the end of the alternative (a tail call) */
    uint32_t ret = pos + 1, below = parent;
    if (g->el[ret].kind != E_END && (below = intern(m, ret, parent)) == NIL)
        return;
    const rule *r = &g->rules[g->el[pos].arg];
    for (uint32_t a = 0; a < r->n_alts && !m->full; a++)
        closure(m, g->alt_start[r->first_alt + a], below);
}

static int by_id(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts the scratch segment [lo, n_scratch) and drops repeats. */
static void normalize(dy_gmatch *m, size_t lo)
{
    size_t n = m->n_scratch - lo;
    if (n < 2)
        return; /* before taking a pointer: scratch is still NULL when nothing was pushed */
    uint32_t *s = m->scratch + lo;
    if (n < 16) { /* the common case: a handful of stacks */
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && s[j - 1] > s[j]; j--) {
                uint32_t x = s[j];
                s[j] = s[j - 1];
                s[j - 1] = x;
            }
    } else {
        qsort(s, n, sizeof *s, by_id);
    }
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (s[i] != s[k - 1])
            s[k++] = s[i];
    m->n_scratch = lo + k;
}

/* The state after byte c from the state in scratch [lo, hi): appended as a new, normalized
 * segment (empty if c is not allowed); m->accept says whether it accepts. */
static void advance_byte(dy_gmatch *m, size_t lo, size_t hi, uint8_t c)
{
    size_t out = m->n_scratch;
    m->accept = false;
    m->epoch++;
    for (size_t k = lo; k < hi && !m->full; k++) {
        const gnode *top = &m->nodes[m->scratch[k]];
        elem e = m->g->el[top->pos];
        if (e.kind == E_SET && set_has(&m->g->sets[e.arg], c))
            closure(m, top->pos + 1, top->parent);
    }
    normalize(m, out);
}

static bool state_store(dy_gstate *s, const uint32_t *tops, size_t n, bool accept)
{
    if (n > s->cap) {
        uint32_t *t = realloc(s->tops, sizeof *t * n);
        if (!t)
            return false;
        s->tops = t;
        s->cap = (uint32_t)n;
    }
    if (n)
        memcpy(s->tops, tops, sizeof *tops * n);
    s->n = (uint32_t)n;
    s->accept = accept;
    return true;
}

dy_grammar_status dy_gstate_start(dy_gmatch *m, dy_gstate *s)
{
    *s = (dy_gstate){0};
    const dy_grammar *g = m->g;
    const rule *r = &g->rules[g->root];
    m->n_scratch = 0;
    m->accept = m->full = false;
    m->epoch++;
    for (uint32_t a = 0; a < r->n_alts && !m->full; a++)
        closure(m, g->alt_start[r->first_alt + a], NIL);
    normalize(m, 0);
    if (m->full || !state_store(s, m->scratch, m->n_scratch, m->accept))
        return DY_GRAMMAR_LIMIT;
    return DY_GRAMMAR_OK;
}

bool dy_gstate_copy(dy_gstate *dst, const dy_gstate *src)
{
    *dst = (dy_gstate){0};
    return state_store(dst, src->tops, src->n, src->accept);
}

void dy_gstate_free(dy_gstate *s)
{
    free(s->tops);
    *s = (dy_gstate){0};
}

dy_grammar_status dy_gstate_advance(dy_gmatch *m, dy_gstate *s, const char *bytes, size_t n)
{
    if (n == 0)
        return DY_GRAMMAR_OK;
    m->n_scratch = 0;
    m->full = false;
    for (uint32_t k = 0; k < s->n; k++)
        push_top(m, s->tops[k]);
    size_t lo = 0, hi = m->n_scratch;
    for (size_t i = 0; i < n; i++) {
        if (hi == lo && !m->full)
            return DY_GRAMMAR_REJECT;
        advance_byte(m, lo, hi, (uint8_t)bytes[i]);
        if (m->full)
            return DY_GRAMMAR_LIMIT;
        lo = hi;
        hi = m->n_scratch;
    }
    if (hi == lo && !m->accept)
        return DY_GRAMMAR_REJECT;
    bool accept = m->accept;
    return state_store(s, m->scratch + lo, hi - lo, accept) ? DY_GRAMMAR_OK : DY_GRAMMAR_LIMIT;
}

dy_grammar_status dy_gstate_advance_token(dy_gmatch *m, dy_gstate *s, int32_t token)
{
    m->n_scratch = 0;
    m->full = m->accept = false;
    m->epoch++;
    for (uint32_t k = 0; k < s->n && !m->full; k++) {
        const gnode *top = &m->nodes[s->tops[k]];
        elem e = m->g->el[top->pos];
        if (e.kind == E_TOKEN && token >= 0 && e.arg == (uint32_t)token)
            closure(m, top->pos + 1, top->parent);
    }
    normalize(m, 0);
    if (m->full)
        return DY_GRAMMAR_LIMIT;
    if (m->n_scratch == 0 && !m->accept)
        return DY_GRAMMAR_REJECT;
    return state_store(s, m->scratch, m->n_scratch, m->accept) ? DY_GRAMMAR_OK : DY_GRAMMAR_LIMIT;
}

bool dy_grammar_accepts(const dy_grammar *g, const char *s, size_t n)
{
    dy_gmatch *m = dy_gmatch_new(g, NULL, (dy_gmatch_limits){0});
    dy_gstate st;
    bool ok = m && dy_gstate_start(m, &st) == DY_GRAMMAR_OK &&
              dy_gstate_advance(m, &st, s, n) == DY_GRAMMAR_OK && st.accept;
    if (m)
        dy_gstate_free(&st);
    dy_gmatch_free(m);
    return ok;
}

/* ---------------------------------------------------------------- masks */

static void allow_tokens(const dy_vocab_trie *t, const tnode *u, uint32_t *bits)
{
    for (uint32_t k = u->tok_lo; k < u->tok_hi; k++)
        bits[t->ids[k] >> 5] |= 1u << (t->ids[k] & 31);
}

static void allow_subtree(const dy_vocab_trie *t, const tnode *u, uint32_t *bits)
{
    for (uint32_t k = u->tok_lo; k < u->sub_hi; k++)
        bits[t->ids[k] >> 5] |= 1u << (t->ids[k] & 31);
}

static bool subset(const byteset *a, const byteset *b)
{
    for (int w = 0; w < 8; w++)
        if (a->w[w] & ~b->w[w])
            return false;
    return true;
}

#define MAX_CHAIN 64 /* states of a chain followed ahead (a string's maxLength, say) */

/* What a mask's walk knows ahead of the trie: from the root state S_0 (scratch [0, n)), the
 * class of bytes that every state of a chain S_0, S_1, ... sends alike to the next, found once
 * per mask. Inside a string, the class is the ordinary characters; a plain string loops
 * (S_1 = S_0), a string with a maxLength counts down (S_0 … S_len, then nothing). A walk that
 * reads only class bytes knows its state from its depth, with no advance, and a subtree whose
 * bytes are all class bytes is allowed whole (or up to a length) without being walked. */
typedef struct {
    byteset cls;
    bool loop;             /* S_1 = S_0: every depth is S_0 */
    int len;               /* S_0 … S_len are known and alive */
    bool dead_after;       /* a class byte after S_len leads nowhere ... */
    bool accept_after;     /* ... though it completes the grammar */
    size_t n;              /* S_0's tops */
    size_t lo[MAX_CHAIN + 1], hi[MAX_CHAIN + 1]; /* each S_d's segment of the scratch */
} chain;

static bool same_segment(const dy_gmatch *m, size_t lo, size_t hi, size_t lo2, size_t hi2)
{
    return hi - lo == hi2 - lo2 &&
           memcmp(m->scratch + lo, m->scratch + lo2, sizeof *m->scratch * (hi - lo)) == 0;
}

/* Whether every top of segment [lo, hi) reads all of cls or none of it: then every class byte
 * leads to the same state. */
static bool uniform(const dy_gmatch *m, size_t lo, size_t hi, const byteset *cls)
{
    for (size_t k = lo; k < hi; k++) {
        elem e = m->g->el[m->nodes[m->scratch[k]].pos];
        if (e.kind != E_SET) /* a token top reads no byte */
            continue;
        const byteset *s = &m->g->sets[e.arg];
        bool some = false, all = true;
        for (int w = 0; w < 8; w++) {
            uint32_t x = s->w[w] & cls->w[w];
            some |= x != 0;
            all &= x == cls->w[w];
        }
        if (some && !all)
            return false;
    }
    return true;
}

/* The class: the largest set of bytes that S_0's tops read alike (the same tops read each). */
static void find_class(const dy_gmatch *m, chain *ch)
{
    ch->cls = (byteset){{0}};
    if (ch->n > 64)
        return;
    uint64_t sig[256];
    for (unsigned b = 0; b < 256; b++) {
        sig[b] = 0;
        for (size_t k = 0; k < ch->n; k++) {
            elem e = m->g->el[m->nodes[m->scratch[k]].pos];
            if (e.kind == E_SET && set_has(&m->g->sets[e.arg], (uint8_t)b))
                sig[b] |= 1ull << k;
        }
    }
    uint64_t best = 0;
    int best_count = 0;
    for (unsigned b = 0; b < 256; b++) {
        int count = 0;
        for (unsigned c = 0; c < 256 && sig[b]; c++)
            count += sig[c] == sig[b];
        if (count > best_count) {
            best_count = count;
            best = sig[b];
        }
    }
    for (unsigned b = 0; b < 256 && best; b++)
        if (sig[b] == best)
            set_add_range(&ch->cls, b, b);
}

/* Follows the class from S_0 as far as it stays uniform, keeping each state in the scratch. */
static void find_chain(dy_gmatch *m, chain *ch)
{
    ch->lo[0] = 0;
    ch->hi[0] = ch->n;
    ch->len = 0;
    ch->loop = ch->dead_after = ch->accept_after = false;
    find_class(m, ch);
    int rep = -1;
    for (unsigned b = 0; b < 256 && rep < 0; b++)
        if (set_has(&ch->cls, (uint8_t)b))
            rep = (int)b;
    while (rep >= 0 && ch->len < MAX_CHAIN && !m->full) {
        int d = ch->len;
        if (d > 0 && !uniform(m, ch->lo[d], ch->hi[d], &ch->cls))
            return;
        size_t out = m->n_scratch;
        advance_byte(m, ch->lo[d], ch->hi[d], (uint8_t)rep);
        if (m->n_scratch == out) {
            ch->dead_after = true;
            ch->accept_after = m->accept;
            return;
        }
        if (d == 0 && same_segment(m, 0, ch->n, out, m->n_scratch)) {
            ch->loop = true;
            m->n_scratch = out;
            return;
        }
        ch->len = d + 1;
        ch->lo[d + 1] = out;
        ch->hi[d + 1] = m->n_scratch;
    }
}

/* The tokens of u's subtree no longer than `limit` bytes. */
static void allow_subtree_up_to(const dy_vocab_trie *t, const tnode *u, uint32_t limit,
                                uint32_t *bits)
{
    for (uint32_t k = u->tok_lo; k < u->sub_hi; k++)
        if (t->len[t->ids[k]] <= limit)
            bits[t->ids[k] >> 5] |= 1u << (t->ids[k] & 31);
}

static void walk(dy_gmatch *m, const chain *ch, const tnode *u, int d, size_t lo, size_t hi,
                 uint32_t *bits);

/* Child v of a node reached by class bytes alone, at chain state S_d, by a class byte. */
static void walk_class_child(dy_gmatch *m, const chain *ch, uint32_t c, int d, uint32_t *bits)
{
    const dy_vocab_trie *t = m->t;
    const tnode *v = &t->nodes[c];
    if (!ch->loop && d == ch->len) { /* the chain's end: the byte completes the grammar or fails */
        if (ch->accept_after)
            allow_tokens(t, v, bits);
        return;
    }
    int nd = ch->loop ? 0 : d + 1;
    allow_tokens(t, v, bits);
    if (v->child_lo == v->child_hi)
        return;
    bool all_class = subset(&t->below[c], &ch->cls);
    if (all_class && (ch->loop || v->deep <= (uint32_t)ch->len))
        allow_subtree(t, v, bits);
    else if (all_class && ch->dead_after)
        allow_subtree_up_to(t, v, (uint32_t)ch->len + ch->accept_after, bits);
    else
        walk(m, ch, v, nd, ch->lo[nd], ch->hi[nd], bits);
}

/* Walks the trie below node u from the state in scratch [lo, hi), allowing every token whose
 * whole text the grammar can read: a branch dies as soon as its bytes leave the grammar, so a
 * narrow state (inside a literal) visits a handful of nodes. d >= 0: the state is the chain's
 * S_d, reached by class bytes only, and class bytes go on along the chain without an advance;
 * inside a string, where nearly every token is allowed, the walk only descends towards the
 * bytes that end or escape it. */
static void walk(dy_gmatch *m, const chain *ch, const tnode *u, int d, size_t lo, size_t hi,
                 uint32_t *bits)
{
    const dy_vocab_trie *t = m->t;
    for (uint32_t c = u->child_lo; c < u->child_hi && !m->full; c++) {
        const tnode *v = &t->nodes[c];
        if (d >= 0 && set_has(&ch->cls, v->byte) && (ch->loop || d < ch->len || ch->dead_after)) {
            walk_class_child(m, ch, c, d, bits);
            continue;
        }
        size_t out = m->n_scratch;
        advance_byte(m, lo, hi, v->byte);
        if (m->n_scratch > out || m->accept)
            allow_tokens(t, v, bits);
        if (m->n_scratch > out && v->child_lo < v->child_hi) {
            if (same_segment(m, 0, ch->n, out, m->n_scratch)) /* back at the root state */
                walk(m, ch, v, 0, 0, ch->n, bits);
            else
                walk(m, ch, v, -1, out, m->n_scratch, bits);
        }
        m->n_scratch = out;
    }
}

static uint64_t state_hash(const dy_gstate *s)
{
    return XXH3_64bits(s->tops, sizeof *s->tops * s->n) & ~1ull; /* never DY_HASHMAP_NONE */
}

/* The slot for a new mask: a free one, or the least recently used (forgotten). */
static mask_entry *mask_slot(dy_gmatch *m)
{
    if (m->n_masks < m->lim.max_masks)
        return &m->masks[m->n_masks++];
    mask_entry *old = &m->masks[0];
    for (uint32_t k = 1; k < m->n_masks; k++)
        if (m->masks[k].used < old->used)
            old = &m->masks[k];
    dy_hashmap_remove(&m->mask_index, old->hash);
    return old;
}

/* The tokens the state's token elements stand for (they have no text, so no walk finds them). */
static void allow_token_tops(const dy_gmatch *m, const dy_gstate *s, uint32_t *bits)
{
    for (uint32_t k = 0; k < s->n; k++) {
        elem e = m->g->el[m->nodes[s->tops[k]].pos];
        if (e.kind == E_TOKEN && e.arg < (uint32_t)m->t->n_vocab)
            bits[e.arg >> 5] |= 1u << (e.arg & 31);
    }
}

static bool compute_mask(dy_gmatch *m, const dy_gstate *s, mask_entry *e)
{
    if (!e->bits && !(e->bits = malloc(sizeof *e->bits * m->words)))
        return false;
    memset(e->bits, 0, sizeof *e->bits * m->words);
    m->n_scratch = 0;
    m->full = false;
    for (uint32_t k = 0; k < s->n; k++)
        push_top(m, s->tops[k]);
    chain ch = {.n = m->n_scratch};
    if (!m->full && ch.n > 0) /* no stack left: only the end may come, no token */
        find_chain(m, &ch);
    if (!m->full && ch.n > 0)
        walk(m, &ch, &m->t->nodes[0], 0, 0, ch.n, e->bits);
    allow_token_tops(m, s, e->bits);
    if (m->full)
        return false;
    uint32_t *tops = realloc(e->tops, sizeof *tops * (s->n ? s->n : 1));
    if (!tops)
        return false;
    e->tops = tops;
    if (s->n)
        memcpy(e->tops, s->tops, sizeof *tops * s->n);
    e->n = s->n;
    return true;
}

const uint32_t *dy_gstate_mask(dy_gmatch *m, const dy_gstate *s)
{
    if (!m->t)
        return NULL;
    uint64_t h = state_hash(s);
    uint64_t k = dy_hashmap_get(&m->mask_index, h);
    m->clock++;
    if (k != DY_HASHMAP_NONE) {
        mask_entry *e = &m->masks[k];
        if (e->n == s->n && (s->n == 0 || memcmp(e->tops, s->tops, sizeof *s->tops * s->n) == 0)) {
            e->used = m->clock;
            m->hits++;
            return e->bits;
        }
        dy_hashmap_remove(&m->mask_index, h); /* a hash collision: the newer state wins */
        e->used = 0;
    }
    m->misses++;
    mask_entry *e = mask_slot(m);
    e->hash = h;
    e->used = m->clock;
    if (!compute_mask(m, s, e) || !dy_hashmap_put(&m->mask_index, h, (uint64_t)(e - m->masks))) {
        e->n = 0;
        e->hash = 0;
        e->used = 0;
        return NULL;
    }
    return e->bits;
}
