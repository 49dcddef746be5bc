/* kv_event_log.c — see kv_event_log.h: a fixed ring. */
#include "kv/kv_event_log.h"

#include <stdlib.h>

bool dy_kv_event_log_enable(dy_kv_event_log *l, int cap)
{
    dy_kv_event_log_free(l);
    if (cap <= 0)
        return true;
    l->ring = malloc(sizeof *l->ring * (size_t)cap);
    l->cap = l->ring ? cap : 0;
    return l->ring != NULL;
}

void dy_kv_event_log_free(dy_kv_event_log *l)
{
    free(l->ring);
    *l = (dy_kv_event_log){0};
}

bool dy_kv_event_log_on(const dy_kv_event_log *l)
{
    return l->ring != NULL;
}

void dy_kv_event_log_push(dy_kv_event_log *l, dy_kv_event e)
{
    if (!l->ring || l->overflow)
        return;
    if (l->len == l->cap) {
        l->overflow = true;
        l->head = l->len = 0;
        return;
    }
    l->ring[(l->head + l->len) % l->cap] = e;
    l->len++;
}

int dy_kv_event_log_take(dy_kv_event_log *l, dy_kv_event *out, int cap)
{
    int n = 0;
    for (; n < cap && l->len > 0; n++) {
        out[n] = l->ring[l->head];
        l->head = (l->head + 1) % l->cap;
        l->len--;
    }
    return n;
}

void dy_kv_event_log_reset(dy_kv_event_log *l)
{
    l->head = l->len = 0;
    l->overflow = false;
}
