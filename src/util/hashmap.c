/* hashmap.c — see hashmap.h. */
#include "util/hashmap.h"

#include <stdlib.h>

#define MIN_CAP 16

static bool is_empty(const dy_hashmap_slot *s)
{
    return s->value == DY_HASHMAP_NONE;
}

/* The smallest table that holds n keys at most half full. */
static size_t cap_for(size_t n)
{
    size_t cap = MIN_CAP;
    while (cap / 2 < n) {
        if (cap > SIZE_MAX / 2 / sizeof(dy_hashmap_slot))
            return 0;
        cap *= 2;
    }
    return cap;
}

static unsigned log2_of(size_t pow2)
{
    return (unsigned)__builtin_ctzll((unsigned long long)pow2);
}

static dy_hashmap_slot *new_table(size_t cap)
{
    dy_hashmap_slot *t = malloc(cap * sizeof *t);
    for (size_t i = 0; t && i < cap; i++)
        t[i].value = DY_HASHMAP_NONE;
    return t;
}

/* Puts a key known to be absent into its first free slot. */
static void place(dy_hashmap *m, uint64_t key, uint64_t value)
{
    size_t mask = m->cap - 1, i = dy_hashmap_home(m, key);
    while (!is_empty(&m->slots[i]))
        i = (i + 1) & mask;
    m->slots[i] = (dy_hashmap_slot){key, value};
}

bool dy_hashmap_init(dy_hashmap *m, size_t expected)
{
    *m = (dy_hashmap){0};
    size_t cap = cap_for(expected);
    dy_hashmap_slot *t = cap ? new_table(cap) : NULL;
    if (!t)
        return false;
    *m = (dy_hashmap){t, cap, 0, 64 - log2_of(cap)};
    return true;
}

void dy_hashmap_free(dy_hashmap *m)
{
    free(m->slots);
    *m = (dy_hashmap){0};
}

bool dy_hashmap_reserve(dy_hashmap *m, size_t n)
{
    if (m->cap && n <= m->cap / 2)
        return true;
    size_t cap = cap_for(n);
    dy_hashmap_slot *t = cap ? new_table(cap) : NULL;
    if (!t)
        return false;
    dy_hashmap old = *m;
    *m = (dy_hashmap){t, cap, old.len, 64 - log2_of(cap)};
    for (size_t i = 0; i < old.cap; i++)
        if (!is_empty(&old.slots[i]))
            place(m, old.slots[i].key, old.slots[i].value);
    free(old.slots);
    return true;
}

/* The slot holding key, or the empty slot that ends its probe sequence. */
static size_t find(const dy_hashmap *m, uint64_t key)
{
    size_t mask = m->cap - 1, i = dy_hashmap_home(m, key);
    while (!is_empty(&m->slots[i]) && m->slots[i].key != key)
        i = (i + 1) & mask;
    return i;
}

bool dy_hashmap_put(dy_hashmap *m, uint64_t key, uint64_t value)
{
    if (value == DY_HASHMAP_NONE)
        return false;
    if (m->cap) {
        size_t i = find(m, key);
        if (!is_empty(&m->slots[i])) {
            m->slots[i].value = value;
            return true;
        }
    }
    if (!dy_hashmap_reserve(m, m->len + 1))
        return false;
    place(m, key, value);
    m->len++;
    return true;
}

/* May the key in slot j, whose home is h, move back into the hole at i? Yes unless h lies
 * cyclically in (i, j]: then the key would sit before its home and no probe would find it. */
static bool can_fill(size_t h, size_t i, size_t j)
{
    return i <= j ? (h <= i || h > j) : (h <= i && h > j);
}

/* Empties slot i and closes the hole: each later key of the cluster that may move back does,
 * and the hole moves to where it was. */
static void erase_at(dy_hashmap *m, size_t i)
{
    size_t mask = m->cap - 1;
    for (size_t j = (i + 1) & mask; !is_empty(&m->slots[j]); j = (j + 1) & mask) {
        if (can_fill(dy_hashmap_home(m, m->slots[j].key), i, j)) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].value = DY_HASHMAP_NONE;
    m->len--;
}

uint64_t dy_hashmap_remove(dy_hashmap *m, uint64_t key)
{
    if (!m->cap)
        return DY_HASHMAP_NONE;
    size_t i = find(m, key);
    uint64_t value = m->slots[i].value;
    if (value != DY_HASHMAP_NONE)
        erase_at(m, i);
    return value;
}

bool dy_hashmap_next(const dy_hashmap *m, size_t *i, uint64_t *key, uint64_t *value)
{
    for (; *i < m->cap; (*i)++) {
        const dy_hashmap_slot *s = &m->slots[*i];
        if (!is_empty(s)) {
            *key = s->key;
            *value = s->value;
            (*i)++;
            return true;
        }
    }
    return false;
}

/* The scan starts just after an empty slot (there is one: the table is at most half full), so
 * no cluster wraps around the scan's start. A removal only moves keys that come later in their
 * cluster back into the hole at the scan position, so looking at that slot again visits every
 * key exactly once. */
void dy_hashmap_filter(dy_hashmap *m, bool (*drop)(void *user, uint64_t key, uint64_t value),
                       void *user)
{
    if (!m->len)
        return;
    size_t mask = m->cap - 1, start = 0;
    while (!is_empty(&m->slots[start]))
        start++;
    size_t i = (start + 1) & mask;
    for (size_t seen = 1; seen < m->cap;) {
        dy_hashmap_slot *s = &m->slots[i];
        if (!is_empty(s) && drop(user, s->key, s->value)) {
            erase_at(m, i); /* a later key may have moved into i: look at it again */
            continue;
        }
        i = (i + 1) & mask;
        seen++;
    }
}
