/* kv_event_log.h — a bounded, ordered log of KV events (kv_event.h), as the prefix cache and
 * each lower tier keep one for the worker to publish. It holds at most `cap` events; one more
 * and it overflows: it is emptied and records nothing until reset, because the receiver will
 * need a snapshot anyway and a log with a hole in it would mislead. Pure bookkeeping. */
#ifndef DYAD_KV_EVENT_LOG_H
#define DYAD_KV_EVENT_LOG_H

#include <stdbool.h>
#include "kv/kv_event.h"

/* The size the cache and the tiers give their logs: room for every block to leave and come
 * back once between two drains, and some. */
#define DY_KV_EVENT_LOG_CAP(n_blocks) (2 * (n_blocks) + 64)

typedef struct {
    dy_kv_event *ring; /* NULL: the log is off and records nothing */
    int cap, head, len;
    bool overflow;
} dy_kv_event_log;

/* Turns the log on with room for cap events (empty, not overflowed), or off (cap 0: the
 * memory is freed). false if out of memory (the log is then off). */
bool dy_kv_event_log_enable(dy_kv_event_log *l, int cap);
void dy_kv_event_log_free(dy_kv_event_log *l);
bool dy_kv_event_log_on(const dy_kv_event_log *l);
void dy_kv_event_log_push(dy_kv_event_log *l, dy_kv_event e);
/* Moves up to cap of the oldest events to out; returns how many. */
int dy_kv_event_log_take(dy_kv_event_log *l, dy_kv_event *out, int cap);
/* Empty again, and no longer overflowed (after a snapshot, or a CLEARED that says it all). */
void dy_kv_event_log_reset(dy_kv_event_log *l);

#endif
