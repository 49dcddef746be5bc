/* kv_event.h — one change to a worker's KV cache, as the worker publishes it and the
 * router's global index (route/kv_index.h) applies it. Workers send these in
 * sequence-numbered batches; the wire frames carry exactly this struct. Hashes are the
 * chained block hashes of kv/kv_cache.h, so a hash alone names a whole prefix. */
#ifndef DYAD_KV_EVENT_H
#define DYAD_KV_EVENT_H

#include <stdint.h>

typedef enum {
    DY_KV_EV_STORED = 0,  /* the worker now holds block `hash` (child of `parent`) in `tier` */
    DY_KV_EV_REMOVED = 1, /* the worker dropped block `hash` from `tier` */
    DY_KV_EV_CLEARED = 2, /* the worker dropped every block it held (hash, parent, tier unused) */
} dy_kv_event_kind;

/* Where a block lives on its worker. */
enum { DY_KV_TIER_DEVICE = 0, DY_KV_TIER_HOST = 1, DY_KV_TIER_DISK = 2, DY_KV_N_TIERS = 3 };

typedef struct {
    uint8_t kind; /* dy_kv_event_kind */
    uint8_t tier; /* DY_KV_TIER_* */
    uint64_t hash, parent;
} dy_kv_event;

#endif
