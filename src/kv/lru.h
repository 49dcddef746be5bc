/* lru.h — a least-recently-used order over ids 0..n-1 (blocks of the pool, slots of a tier):
 * a doubly linked list threaded through two arrays, oldest at the head. An id is in the list
 * or not; the caller knows which (the list does not check). Pure bookkeeping. */
#ifndef DYAD_KV_LRU_H
#define DYAD_KV_LRU_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int32_t *prev, *next;
    int32_t head, tail; /* -1 when empty */
    int n;              /* ids in the list */
} dy_lru;

bool dy_lru_init(dy_lru *l, int n_ids);
void dy_lru_free(dy_lru *l);
/* Appends id as the most recently used. */
void dy_lru_push_newest(dy_lru *l, int32_t id);
/* Prepends id as the least recently used: the next to go. */
void dy_lru_push_oldest(dy_lru *l, int32_t id);
void dy_lru_unlink(dy_lru *l, int32_t id);
/* The oldest id, or -1; and the id after `id` towards the newest, or -1. */
static inline int32_t dy_lru_oldest(const dy_lru *l) { return l->head; }
static inline int32_t dy_lru_after(const dy_lru *l, int32_t id) { return l->next[id]; }

#endif
