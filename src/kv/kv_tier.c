/* kv_tier.c — see kv_tier.h. Per-slot arrays, a hash map hash → slot for READY and FILLING
 * slots, a free stack, and the LRU list (lru.h) of unpinned READY slots. */
#include "kv/kv_tier.h"
#include "kv/kv_event_log.h"
#include "kv/lru.h"
#include "util/hashmap.h"

#include <stdlib.h>

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_DEAD } slot_state;

struct dy_kv_tier {
    int n_slots, tier;
    uint8_t *state;      /* slot_state; DEAD: dropped while pinned, freed at the last unpin */
    uint64_t *hash, *parent, *checksum;
    uint32_t *uses;
    int32_t *pins;
    int32_t *free_stack;
    int n_free;
    dy_lru lru;          /* READY and unpinned */
    dy_hashmap index;    /* hash → slot (READY or FILLING) */
    dy_kv_event_log log;
    dy_kv_tier_stats stats;
};

dy_kv_tier *dy_kv_tier_new(int n_slots, int tier)
{
    if (n_slots < 1 || (tier != DY_KV_TIER_HOST && tier != DY_KV_TIER_DISK))
        return NULL;
    dy_kv_tier *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    const size_t n = (size_t)n_slots;
    t->n_slots = n_slots;
    t->tier = tier;
    t->state = calloc(n, 1);
    t->hash = calloc(n, sizeof *t->hash);
    t->parent = calloc(n, sizeof *t->parent);
    t->checksum = calloc(n, sizeof *t->checksum);
    t->uses = calloc(n, sizeof *t->uses);
    t->pins = calloc(n, sizeof *t->pins);
    t->free_stack = malloc(n * sizeof *t->free_stack);
    bool lru_ok = dy_lru_init(&t->lru, n_slots);
    bool index_ok = dy_hashmap_init(&t->index, n);
    if (!t->state || !t->hash || !t->parent || !t->checksum || !t->uses || !t->pins ||
        !t->free_stack || !lru_ok || !index_ok) {
        dy_kv_tier_free(t);
        return NULL;
    }
    for (int i = 0; i < n_slots; i++)
        t->free_stack[i] = n_slots - 1 - i; /* slot 0 is handed out first */
    t->n_free = n_slots;
    return t;
}

void dy_kv_tier_free(dy_kv_tier *t)
{
    if (!t)
        return;
    free(t->state);
    free(t->hash);
    free(t->parent);
    free(t->checksum);
    free(t->uses);
    free(t->pins);
    free(t->free_stack);
    dy_lru_free(&t->lru);
    dy_hashmap_free(&t->index);
    dy_kv_event_log_free(&t->log);
    free(t);
}

int dy_kv_tier_slots(const dy_kv_tier *t)
{
    return t->n_slots;
}

int dy_kv_tier_id(const dy_kv_tier *t)
{
    return t->tier;
}

int dy_kv_tier_used(const dy_kv_tier *t)
{
    return (int)t->index.len;
}

static bool valid(const dy_kv_tier *t, int32_t slot)
{
    return slot >= 0 && slot < t->n_slots;
}

static void log_event(dy_kv_tier *t, dy_kv_event_kind kind, int32_t slot)
{
    dy_kv_event_log_push(&t->log, (dy_kv_event){(uint8_t)kind, (uint8_t)t->tier, t->hash[slot],
                                                t->parent[slot]});
}

/* ---------------------------------------------------------------- finding */

static int32_t lookup(const dy_kv_tier *t, uint64_t hash)
{
    uint64_t v = dy_hashmap_get(&t->index, hash);
    return v == DY_HASHMAP_NONE ? -1 : (int32_t)v;
}

int32_t dy_kv_tier_find(const dy_kv_tier *t, uint64_t hash)
{
    int32_t s = lookup(t, hash);
    return s >= 0 && t->state[s] == SLOT_READY ? s : -1;
}

bool dy_kv_tier_has(const dy_kv_tier *t, uint64_t hash)
{
    return lookup(t, hash) >= 0;
}

int32_t dy_kv_tier_touch(dy_kv_tier *t, uint64_t hash)
{
    int32_t s = dy_kv_tier_find(t, hash);
    if (s < 0)
        return -1;
    t->stats.lookups++;
    if (t->uses[s] < UINT32_MAX)
        t->uses[s]++;
    if (t->pins[s] == 0) {
        dy_lru_unlink(&t->lru, s);
        dy_lru_push_newest(&t->lru, s);
    }
    return s;
}

/* ---------------------------------------------------------------- filling */

/* A READY slot leaves the index (and the LRU, if unpinned). */
static void leave(dy_kv_tier *t, int32_t s)
{
    log_event(t, DY_KV_EV_REMOVED, s);
    dy_hashmap_remove(&t->index, t->hash[s]);
    if (t->pins[s] == 0)
        dy_lru_unlink(&t->lru, s);
}

static void make_free(dy_kv_tier *t, int32_t s)
{
    t->state[s] = SLOT_FREE;
    t->free_stack[t->n_free++] = s;
}

int32_t dy_kv_tier_reserve(dy_kv_tier *t, uint64_t hash, uint64_t parent, uint32_t uses)
{
    if (lookup(t, hash) >= 0)
        return -1;
    int32_t s;
    if (t->n_free > 0) {
        s = t->free_stack[--t->n_free];
    } else if ((s = dy_lru_oldest(&t->lru)) >= 0) {
        leave(t, s);
        t->stats.evicted++;
    } else {
        t->stats.full++;
        return -1;
    }
    t->state[s] = SLOT_FILLING;
    t->hash[s] = hash;
    t->parent[s] = parent;
    t->uses[s] = uses;
    t->checksum[s] = 0;
    t->pins[s] = 1;
    dy_hashmap_put(&t->index, hash, (uint64_t)s); /* sized for every slot: cannot fail */
    return s;
}

void dy_kv_tier_filled(dy_kv_tier *t, int32_t slot, bool ok, uint64_t checksum)
{
    if (!valid(t, slot) || t->pins[slot] <= 0)
        return;
    if (t->state[slot] == SLOT_FILLING) {
        if (ok) {
            t->state[slot] = SLOT_READY;
            t->checksum[slot] = checksum;
            t->stats.stored++;
            log_event(t, DY_KV_EV_STORED, slot);
        } else {
            dy_hashmap_remove(&t->index, t->hash[slot]);
            t->state[slot] = SLOT_DEAD;
        }
    }
    dy_kv_tier_unpin(t, slot);
}

/* ---------------------------------------------------------------- pins and drops */

void dy_kv_tier_pin(dy_kv_tier *t, int32_t slot)
{
    if (!valid(t, slot) || t->state[slot] != SLOT_READY)
        return;
    if (t->pins[slot]++ == 0)
        dy_lru_unlink(&t->lru, slot);
}

void dy_kv_tier_unpin(dy_kv_tier *t, int32_t slot)
{
    if (!valid(t, slot) || t->pins[slot] <= 0 || --t->pins[slot] > 0)
        return;
    if (t->state[slot] == SLOT_READY)
        dy_lru_push_newest(&t->lru, slot);
    else if (t->state[slot] == SLOT_DEAD)
        make_free(t, slot);
}

/* A READY or FILLING slot leaves; it is freed now, or at its last unpin. */
static void drop(dy_kv_tier *t, int32_t s)
{
    if (t->state[s] == SLOT_READY)
        leave(t, s);
    else
        dy_hashmap_remove(&t->index, t->hash[s]);
    if (t->pins[s] > 0)
        t->state[s] = SLOT_DEAD;
    else
        make_free(t, s);
}

void dy_kv_tier_drop_bad(dy_kv_tier *t, int32_t slot)
{
    if (!valid(t, slot) || t->state[slot] != SLOT_READY)
        return;
    t->stats.bad++;
    drop(t, slot);
}

void dy_kv_tier_clear(dy_kv_tier *t)
{
    for (int32_t s = 0; s < t->n_slots; s++)
        if (t->state[s] == SLOT_READY || t->state[s] == SLOT_FILLING)
            drop(t, s);
}

/* ---------------------------------------------------------------- reading the state */

uint64_t dy_kv_tier_hash(const dy_kv_tier *t, int32_t slot)
{
    return valid(t, slot) ? t->hash[slot] : 0;
}

uint64_t dy_kv_tier_parent(const dy_kv_tier *t, int32_t slot)
{
    return valid(t, slot) ? t->parent[slot] : 0;
}

uint64_t dy_kv_tier_checksum(const dy_kv_tier *t, int32_t slot)
{
    return valid(t, slot) ? t->checksum[slot] : 0;
}

uint32_t dy_kv_tier_uses(const dy_kv_tier *t, int32_t slot)
{
    return valid(t, slot) ? t->uses[slot] : 0;
}

int dy_kv_tier_oldest(const dy_kv_tier *t, int32_t *out, int cap)
{
    int n = 0;
    for (int32_t s = dy_lru_oldest(&t->lru); s >= 0 && n < cap; s = dy_lru_after(&t->lru, s))
        out[n++] = s;
    return n;
}

dy_kv_tier_stats dy_kv_tier_get_stats(const dy_kv_tier *t)
{
    return t->stats;
}

/* ---------------------------------------------------------------- events */

bool dy_kv_tier_enable_events(dy_kv_tier *t, bool on)
{
    return dy_kv_event_log_enable(&t->log, on ? DY_KV_EVENT_LOG_CAP(t->n_slots) : 0);
}

int dy_kv_tier_take_events(dy_kv_tier *t, dy_kv_event *out, int cap)
{
    return dy_kv_event_log_take(&t->log, out, cap);
}

bool dy_kv_tier_events_overflowed(const dy_kv_tier *t)
{
    return t->log.overflow;
}

int dy_kv_tier_snapshot(dy_kv_tier *t, dy_kv_event *out, int cap)
{
    int ready = 0;
    for (int32_t s = 0; s < t->n_slots; s++)
        ready += t->state[s] == SLOT_READY;
    if (cap < ready)
        return -1;
    int n = 0;
    for (int32_t s = 0; s < t->n_slots; s++)
        if (t->state[s] == SLOT_READY)
            out[n++] = (dy_kv_event){DY_KV_EV_STORED, (uint8_t)t->tier, t->hash[s], t->parent[s]};
    dy_kv_event_log_reset(&t->log);
    return n;
}
