/* tokenizer_util.c — the containers the tokenizer encoders share: a string→id hash map
 * (open addressing, XXH3 hashes), a growable id vector, and the bigram heap. */
#include "engine/tokenizer_impl.h"
#include "util/buf.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

bool dy_tok_map_init(dy_tok_map *m, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 + 1) /* load factor at most 1/2 */
        cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    m->cap = m->slots ? cap : 0;
    m->count = 0;
    return m->slots != NULL;
}

void dy_tok_map_free(dy_tok_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}

/* The slot holding key, or the empty slot where it would go. */
static dy_tok_map_slot *find_slot(const dy_tok_map *m, const char *key, size_t len)
{
    size_t mask = m->cap - 1;
    size_t i = (size_t)XXH3_64bits(key, len) & mask;
    for (;;) {
        dy_tok_map_slot *s = &m->slots[i];
        if (!s->key || (s->len == len && memcmp(s->key, key, len) == 0))
            return s;
        i = (i + 1) & mask;
    }
}

static bool grow(dy_tok_map *m)
{
    dy_tok_map bigger;
    if (!dy_tok_map_init(&bigger, m->cap))
        return false;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key)
            *find_slot(&bigger, m->slots[i].key, m->slots[i].len) = m->slots[i];
    bigger.count = m->count;
    free(m->slots);
    *m = bigger;
    return true;
}

bool dy_tok_map_put(dy_tok_map *m, const char *key, size_t len, int32_t value, bool overwrite)
{
    if (len > UINT32_MAX)
        return false;
    if ((m->count + 1) * 2 > m->cap && !grow(m))
        return false;
    dy_tok_map_slot *s = find_slot(m, key, len);
    if (!s->key) {
        s->key = key;
        s->len = (uint32_t)len;
        s->value = value;
        m->count++;
    } else if (overwrite) {
        s->value = value;
    }
    return true;
}

int32_t dy_tok_map_get(const dy_tok_map *m, const char *key, size_t len)
{
    if (!m->cap)
        return -1;
    const dy_tok_map_slot *s = find_slot(m, key, len);
    return s->key ? s->value : -1;
}

void dy_tok_vec_push(dy_tok_vec *a, int32_t id)
{
    if (a->failed)
        return;
    if (a->n == a->cap && !dy_array_reserve((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) {
        a->failed = true;
        return;
    }
    a->v[a->n++] = id;
}

/* True if a should pop before b. */
static bool before(const dy_tok_bigram *a, const dy_tok_bigram *b)
{
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

static void swap(dy_tok_bigram *a, dy_tok_bigram *b)
{
    dy_tok_bigram t = *a;
    *a = *b;
    *b = t;
}

void dy_tok_heap_push(dy_tok_heap *h, dy_tok_bigram b)
{
    if (h->failed)
        return;
    if (h->n == h->cap && !dy_array_reserve((void **)&h->v, &h->cap, h->n + 1, sizeof *h->v)) {
        h->failed = true;
        return;
    }
    size_t i = h->n++;
    h->v[i] = b;
    while (i > 0 && before(&h->v[i], &h->v[(i - 1) / 2])) {
        swap(&h->v[i], &h->v[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
}

bool dy_tok_heap_pop(dy_tok_heap *h, dy_tok_bigram *out)
{
    if (h->n == 0)
        return false;
    *out = h->v[0];
    h->v[0] = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        if (l < h->n && before(&h->v[l], &h->v[best]))
            best = l;
        if (r < h->n && before(&h->v[r], &h->v[best]))
            best = r;
        if (best == i)
            break;
        swap(&h->v[i], &h->v[best]);
        i = best;
    }
    return true;
}

int dy_tok_split_chars(const char *s, size_t n, dy_tok_symbol **out)
{
    *out = NULL;
    if (n > (size_t)INT32_MAX)
        return -1;
    dy_tok_symbol *sym = malloc((n ? n : 1) * sizeof *sym);
    if (!sym)
        return -1;
    int count = 0;
    for (size_t off = 0; off < n;) {
        size_t len = dy_tok_utf8_len((unsigned char)s[off]);
        if (len > n - off)
            len = n - off;
        sym[count] = (dy_tok_symbol){.prev = count - 1, .next = count + 1, .off = off, .n = len};
        off += len;
        count++;
    }
    if (count > 0)
        sym[count - 1].next = -1;
    *out = sym;
    return count;
}

void dy_tok_merge_symbols(dy_tok_symbol *sym, int count, dy_tok_heap *h, dy_tok_add_bigram_fn add, void *ctx)
{
    for (int i = 1; i < count; i++)
        add(ctx, i - 1, i);
    dy_tok_bigram b;
    while (dy_tok_heap_pop(h, &b)) {
        dy_tok_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: one side has merged since it was queued */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        if (l->prev >= 0)
            add(ctx, l->prev, b.left);
        if (l->next >= 0)
            add(ctx, b.left, l->next);
    }
}
