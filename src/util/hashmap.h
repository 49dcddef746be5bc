/* hashmap.h — the one hash map: uint64_t keys to uint64_t values, open addressing with linear
 * probing in a power-of-two table that doubles before it is half full, and deletion by
 * backward shift (no tombstones, so a table that churns never slows down). The map owns its
 * memory and reports a failed allocation. Keys are mixed before use, so keys that are already
 * hashes and keys that are small integers both spread.
 *
 * The value DY_HASHMAP_NONE is reserved: it marks an empty slot, it is what a lookup of an
 * absent key returns, and it may not be stored. */
#ifndef DYAD_UTIL_HASHMAP_H
#define DYAD_UTIL_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DY_HASHMAP_NONE UINT64_MAX

typedef struct {
    uint64_t key, value; /* value DY_HASHMAP_NONE: the slot is empty */
} dy_hashmap_slot;

typedef struct {
    dy_hashmap_slot *slots;
    size_t cap;     /* a power of two; 0 before init and after free */
    size_t len;     /* keys held */
    unsigned shift; /* 64 - log2(cap): home slots are the top bits of the mixed key */
} dy_hashmap;

/* An empty map with room for `expected` keys before it first grows; false if memory is short.
 * A zeroed dy_hashmap is an empty map too (it allocates on the first put). */
bool dy_hashmap_init(dy_hashmap *m, size_t expected);
void dy_hashmap_free(dy_hashmap *m);

/* Makes room for n keys in all, so that inserting up to that many cannot fail. */
bool dy_hashmap_reserve(dy_hashmap *m, size_t n);
/* Sets key's value (inserting the key or replacing its value); false if memory is short or
 * value is DY_HASHMAP_NONE, and the map is unchanged then. */
bool dy_hashmap_put(dy_hashmap *m, uint64_t key, uint64_t value);
/* Removes key; returns the value it had, or DY_HASHMAP_NONE if it was absent. */
uint64_t dy_hashmap_remove(dy_hashmap *m, uint64_t key);

/* Iteration in slot order (no particular order), for a map that does not change meanwhile:
 *   for (size_t i = 0; dy_hashmap_next(m, &i, &key, &value);) ...                        */
bool dy_hashmap_next(const dy_hashmap *m, size_t *i, uint64_t *key, uint64_t *value);
/* Calls drop(user, key, value) once for every key and removes the keys it returns true for.
 * drop must not change the map itself. */
void dy_hashmap_filter(dy_hashmap *m, bool (*drop)(void *user, uint64_t key, uint64_t value),
                       void *user);

/* ---- lookups are inline: the router and the KV cache make them in their inner loops ---- */

/* The slot where key's probe sequence starts: a multiplicative (Fibonacci) hash of the key
 * folded onto itself, so every key bit reaches the top bits that pick the slot. */
static inline size_t dy_hashmap_home(const dy_hashmap *m, uint64_t key)
{
    return (size_t)(((key ^ (key >> 32)) * 0x9e3779b97f4a7c15ull) >> m->shift);
}

/* dy_hashmap_get for a key whose home slot is already known (from dy_hashmap_prefetch). */
static inline uint64_t dy_hashmap_get_from(const dy_hashmap *m, uint64_t key, size_t home)
{
    if (!m->cap)
        return DY_HASHMAP_NONE;
    size_t mask = m->cap - 1;
    for (size_t i = home;; i = (i + 1) & mask) {
        const dy_hashmap_slot *s = &m->slots[i];
        if (s->value == DY_HASHMAP_NONE || s->key == key)
            return s->value;
    }
}

/* Key's value, or DY_HASHMAP_NONE if it is absent. */
static inline uint64_t dy_hashmap_get(const dy_hashmap *m, uint64_t key)
{
    return dy_hashmap_get_from(m, key, m->cap ? dy_hashmap_home(m, key) : 0);
}

/* Starts loading key's home slot into the cache and returns that slot, for a
 * dy_hashmap_get_from shortly after: a batch of lookups that prefetches every key first
 * overlaps its cache misses. (The slot is returned to be used: a loop of bare prefetches
 * has no effect the compiler must keep, and it may delete it.) */
static inline size_t dy_hashmap_prefetch(const dy_hashmap *m, uint64_t key)
{
    if (!m->cap)
        return 0;
    size_t home = dy_hashmap_home(m, key);
    __builtin_prefetch(&m->slots[home]);
    return home;
}

static inline size_t dy_hashmap_len(const dy_hashmap *m)
{
    return m->len;
}

#endif
