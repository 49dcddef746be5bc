/* lru.c — see lru.h. */
#include "kv/lru.h"

#include <stdlib.h>

bool dy_lru_init(dy_lru *l, int n_ids)
{
    l->prev = malloc(sizeof(int32_t) * (size_t)(n_ids > 0 ? n_ids : 1));
    l->next = malloc(sizeof(int32_t) * (size_t)(n_ids > 0 ? n_ids : 1));
    l->head = l->tail = -1;
    l->n = 0;
    if (!l->prev || !l->next) {
        dy_lru_free(l);
        return false;
    }
    return true;
}

void dy_lru_free(dy_lru *l)
{
    free(l->prev);
    free(l->next);
    l->prev = l->next = NULL;
    l->head = l->tail = -1;
    l->n = 0;
}

void dy_lru_push_newest(dy_lru *l, int32_t id)
{
    l->prev[id] = l->tail;
    l->next[id] = -1;
    if (l->tail >= 0)
        l->next[l->tail] = id;
    else
        l->head = id;
    l->tail = id;
    l->n++;
}

void dy_lru_push_oldest(dy_lru *l, int32_t id)
{
    l->prev[id] = -1;
    l->next[id] = l->head;
    if (l->head >= 0)
        l->prev[l->head] = id;
    else
        l->tail = id;
    l->head = id;
    l->n++;
}

void dy_lru_unlink(dy_lru *l, int32_t id)
{
    if (l->prev[id] >= 0)
        l->next[l->prev[id]] = l->next[id];
    else
        l->head = l->next[id];
    if (l->next[id] >= 0)
        l->prev[l->next[id]] = l->prev[id];
    else
        l->tail = l->prev[id];
    l->n--;
}
