/* test_kv_cache.c — the prefix index: chained hashes, lookup of the longest cached run,
 * reuse of released blocks, LRU eviction order, duplicates stay private, clear; the event
 * log: replayed events mirror the index exactly, private blocks are silent, overflow. */
#include "testutil.h"
#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>

static void tokens_of(int32_t *t, int n, int salt)
{
    for (int i = 0; i < n; i++)
        t[i] = i * 3 + salt;
}

static void test_hash_chain(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(4, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 99);
    int32_t a[8], b[8];
    tokens_of(a, 8, 0);
    tokens_of(b, 8, 0);
    b[1] = 1000; /* differs in block 0 → every later hash differs */
    uint64_t ha[2], hb[2];
    dy_kv_cache_hash_blocks(c, a, 2, ha);
    dy_kv_cache_hash_blocks(c, b, 2, hb);
    assert_true(ha[0] != hb[0]);
    assert_true(ha[1] != hb[1]); /* same tokens in block 1, different parents */
    assert_true(ha[1] == dy_block_hash(ha[0], a + 4, 4));
    dy_kv_cache *other = dy_kv_cache_new(p, 100); /* another model fingerprint */
    uint64_t ho[2];
    dy_kv_cache_hash_blocks(other, a, 2, ho);
    assert_true(ho[0] != ha[0]);
    dy_kv_cache_free(other);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

static void test_lookup_and_reuse(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(4, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    int32_t t[12];
    tokens_of(t, 12, 5);
    uint64_t h[3];
    dy_kv_cache_hash_blocks(c, t, 3, h);
    int32_t mine[3];
    for (int i = 0; i < 3; i++) {
        mine[i] = dy_kv_cache_alloc(c);
        dy_kv_cache_publish(c, mine[i], h[i]);
    }
    assert_int_equal(dy_kv_cache_indexed(c), 3);
    /* A second sequence shares the first two blocks while the first still holds them. */
    int32_t got[3];
    assert_int_equal(dy_kv_cache_lookup(c, h, 2, got), 2);
    assert_int_equal(got[0], mine[0]);
    assert_int_equal(p->refcount[mine[0]], 2);
    /* Everything released: cached blocks remain findable and count as available. */
    for (int i = 0; i < 3; i++)
        dy_kv_cache_release(c, mine[i]);
    dy_kv_cache_release(c, got[0]);
    dy_kv_cache_release(c, got[1]);
    assert_int_equal(dy_kv_cache_available(c), 4);
    assert_int_equal(dy_kv_cache_lookup(c, h, 3, got), 3);
    assert_int_equal(got[2], mine[2]);
    dy_kv_cache_stats s = dy_kv_cache_get_stats(c);
    assert_int_equal(s.hit_blocks, 5);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

static void test_lru_eviction(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(3, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    int32_t b[3];
    uint64_t h[3] = {11, 22, 33};
    for (int i = 0; i < 3; i++) {
        b[i] = dy_kv_cache_alloc(c);
        dy_kv_cache_publish(c, b[i], h[i]);
    }
    assert_int_equal(dy_kv_cache_alloc(c), -1);
    dy_kv_cache_release(c, b[1]); /* released first: evicted first */
    dy_kv_cache_release(c, b[0]);
    int32_t x = dy_kv_cache_alloc(c);
    assert_int_equal(x, b[1]);
    int32_t got[1];
    assert_int_equal(dy_kv_cache_lookup(c, &h[1], 1, got), 0); /* gone from the index */
    assert_int_equal(dy_kv_cache_lookup(c, &h[0], 1, got), 1); /* still there */
    assert_int_equal(dy_kv_cache_get_stats(c).evictions, 1);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

static void test_duplicate_stays_private_and_clear(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(4, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    int32_t a = dy_kv_cache_alloc(c), b = dy_kv_cache_alloc(c);
    dy_kv_cache_publish(c, a, 7);
    dy_kv_cache_publish(c, b, 7); /* same content computed twice */
    assert_int_equal(dy_kv_cache_indexed(c), 1);
    dy_kv_cache_release(c, b);
    assert_int_equal(p->n_free, 3); /* the private copy is simply freed */
    dy_kv_cache_release(c, a);
    assert_int_equal(dy_kv_cache_available(c), 4);
    dy_kv_cache_clear(c);
    assert_int_equal(dy_kv_cache_indexed(c), 0);
    assert_int_equal(p->n_free, 4);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

/* Many publish/evict rounds exercise deletion from the index (the hash map's backward shift). */
static void test_churn(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(8, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    for (uint64_t round = 0; round < 5000; round++) {
        int32_t b = dy_kv_cache_alloc(c);
        assert_true(b >= 0);
        dy_kv_cache_publish(c, b, round * 2654435761u + 1);
        dy_kv_cache_release(c, b);
        int32_t got;
        assert_int_equal(dy_kv_cache_lookup(c, (uint64_t[]){round * 2654435761u + 1}, 1, &got), 1);
        dy_kv_cache_release(c, got);
    }
    assert_int_equal(dy_kv_cache_indexed(c), 8);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

/* ---------------------------------------------------------------- events */

/* The router's picture of one worker, rebuilt from events alone. */
typedef struct {
    uint64_t hash[64], parent[64];
    int n;
    int seen[3]; /* events applied, by kind */
} mirror;

static int mirror_find(const mirror *m, uint64_t h)
{
    for (int i = 0; i < m->n; i++)
        if (m->hash[i] == h)
            return i;
    return -1;
}

static void mirror_apply(mirror *m, const dy_kv_event *e)
{
    assert_int_equal(e->tier, 0);
    int i = mirror_find(m, e->hash);
    if (e->kind <= DY_KV_EV_CLEARED)
        m->seen[e->kind]++;
    switch (e->kind) {
    case DY_KV_EV_STORED:
        assert_int_equal(i, -1); /* the index never holds a hash twice */
        assert_true(m->n < 64);
        m->hash[m->n] = e->hash;
        m->parent[m->n++] = e->parent;
        break;
    case DY_KV_EV_REMOVED:
        assert_true(i >= 0);
        assert_true(m->parent[i] == e->parent);
        m->hash[i] = m->hash[--m->n];
        m->parent[i] = m->parent[m->n];
        break;
    case DY_KV_EV_CLEARED:
        assert_true(e->hash == 0 && e->parent == 0);
        m->n = 0;
        break;
    default:
        fail();
    }
}

/* Drains the log in chunks of up to `chunk` events into the mirror. */
static int drain(dy_kv_cache *c, mirror *m, int chunk)
{
    dy_kv_event ev[8];
    int total = 0, k;
    while ((k = dy_kv_cache_take_events(c, ev, chunk)) > 0) {
        for (int i = 0; i < k; i++)
            mirror_apply(m, &ev[i]);
        total += k;
    }
    return total;
}

/* The mirror holds exactly the snapshot's (hash, parent) pairs. */
static void assert_mirror_is_index(dy_kv_cache *c, const mirror *m)
{
    uint64_t h[64], par[64];
    int n = dy_kv_cache_snapshot(c, h, par, 64);
    assert_int_equal(n, dy_kv_cache_indexed(c));
    assert_int_equal(n, m->n);
    for (int i = 0; i < n; i++) {
        int j = mirror_find(m, h[i]);
        assert_true(j >= 0);
        assert_true(m->parent[j] == par[i]);
    }
}

/* Random alloc / publish (with duplicate hashes) / lookup / release / clear: replaying the
 * events gives exactly the index. */
static void test_events_mirror_index(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(12, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    assert_true(dy_kv_cache_enable_events(c, true));
    mirror m = {0};
    int32_t held[256]; /* one entry per reference this test holds */
    int n_held = 0;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int step = 0; step < 20000; step++) {
        unsigned op = (unsigned)(tu_rng_u64(&rng) % 100);
        if (op < 30) {
            int32_t b = dy_kv_cache_alloc(c);
            if (b >= 0)
                held[n_held++] = b;
        } else if (op < 55 && n_held) {
            int32_t b = held[tu_rng_u64(&rng) % (uint64_t)n_held];
            uint64_t h = 1 + tu_rng_u64(&rng) % 24; /* few hashes: duplicates are common */
            dy_kv_cache_publish_chained(c, b, h, h * 1000 + 7);
        } else if (op < 85 && n_held) {
            int i = (int)(tu_rng_u64(&rng) % (uint64_t)n_held);
            dy_kv_cache_release(c, held[i]);
            held[i] = held[--n_held];
        } else if (op < 98) {
            uint64_t hs[3];
            for (int i = 0; i < 3; i++)
                hs[i] = 1 + tu_rng_u64(&rng) % 24;
            if (n_held + 3 <= 256)
                n_held += dy_kv_cache_lookup(c, hs, 3, held + n_held);
        } else
            dy_kv_cache_clear(c);
        if (step % 7 == 0)
            drain(c, &m, 1 + (int)(tu_rng_u64(&rng) % 8));
        if (step % 101 == 0) {
            drain(c, &m, 8);
            assert_mirror_is_index(c, &m);
        }
        assert_false(dy_kv_cache_events_overflowed(c));
    }
    drain(c, &m, 8);
    assert_mirror_is_index(c, &m);
    assert_true(m.seen[DY_KV_EV_STORED] > 1000 && m.seen[DY_KV_EV_REMOVED] > 1000);
    assert_true(m.seen[DY_KV_EV_CLEARED] > 10);
    while (n_held)
        dy_kv_cache_release(c, held[--n_held]);
    dy_kv_cache_clear(c);
    dy_kv_event e;
    assert_int_equal(dy_kv_cache_take_events(c, &e, 1), 1);
    assert_int_equal(e.kind, DY_KV_EV_CLEARED);
    assert_int_equal(dy_kv_cache_take_events(c, &e, 1), 0);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

/* A duplicate stays private and silent; so does re-publishing an indexed block. Eviction
 * reports the hash and parent that were stored. */
static void test_events_private_silent_and_eviction(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(2, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    int32_t first = dy_kv_cache_alloc(c);
    dy_kv_cache_publish(c, first, 5); /* before the log is on: not logged */
    assert_true(dy_kv_cache_enable_events(c, true));
    dy_kv_event ev[4];
    assert_int_equal(dy_kv_cache_take_events(c, ev, 4), 0);
    dy_kv_cache_clear(c); /* block 5 is in use: nothing leaves, and no CLEARED */
    assert_int_equal(dy_kv_cache_take_events(c, ev, 4), 0);

    int32_t b = dy_kv_cache_alloc(c);
    dy_kv_cache_publish_chained(c, b, 5, 99); /* 5 is held by another block */
    dy_kv_cache_publish_chained(c, first, 5, 99); /* already indexed */
    dy_kv_cache_release(c, b);                /* the private copy is freed */
    assert_int_equal(dy_kv_cache_take_events(c, ev, 4), 0);

    b = dy_kv_cache_alloc(c);
    dy_kv_cache_publish_chained(c, b, 6, 5);
    dy_kv_cache_release(c, b); /* cached, still indexed: silent */
    dy_kv_cache_release(c, first);
    assert_int_equal(dy_kv_cache_take_events(c, ev, 4), 1);
    assert_int_equal(ev[0].kind, DY_KV_EV_STORED);
    assert_true(ev[0].hash == 6 && ev[0].parent == 5);

    int32_t x = dy_kv_cache_alloc(c); /* evicts the least recently released: hash 6 */
    assert_int_equal(x, b);
    assert_int_equal(dy_kv_cache_take_events(c, ev, 4), 1);
    assert_int_equal(ev[0].kind, DY_KV_EV_REMOVED);
    assert_true(ev[0].hash == 6 && ev[0].parent == 5);
    dy_kv_cache_release(c, x);
    dy_kv_cache_clear(c); /* drops 5 (parent unknown: 0); the index is empty */
    assert_int_equal(dy_kv_cache_take_events(c, ev, 4), 1);
    assert_int_equal(ev[0].kind, DY_KV_EV_CLEARED);
    assert_true(dy_kv_cache_enable_events(c, false));
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

/* One round: the oldest cached block is evicted (REMOVED) and its replacement published
 * (STORED) and released. */
static void churn_round(dy_kv_cache *c, uint64_t h)
{
    int32_t b = dy_kv_cache_alloc(c);
    assert_true(b >= 0);
    dy_kv_cache_publish_chained(c, b, h, h - 1);
    dy_kv_cache_release(c, b);
}

static void test_events_overflow(void **st)
{
    (void)st;
    const int nb = 4, cap = DY_KV_EVENT_LOG_CAP(4);
    dy_kv_pool *p = dy_kv_pool_new(nb, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    assert_true(dy_kv_cache_enable_events(c, true));
    dy_kv_event *ev = malloc(sizeof *ev * (size_t)cap);
    /* nb STORED, then 2 events a round: exactly cap events fit. */
    uint64_t h = 100;
    for (int i = 0; i < nb; i++)
        churn_round(c, ++h);
    for (int i = 0; i < (cap - nb) / 2; i++)
        churn_round(c, ++h);
    assert_false(dy_kv_cache_events_overflowed(c));
    assert_int_equal(dy_kv_cache_take_events(c, ev, cap), cap);
    assert_int_equal(ev[cap - 1].kind, DY_KV_EV_STORED);
    assert_true(ev[cap - 1].hash == h);

    /* Past cap the log overflows: it empties and stays silent until a snapshot. */
    for (int i = 0; i < cap / 2 - 1; i++)
        churn_round(c, ++h);
    churn_round(c, ++h);
    assert_false(dy_kv_cache_events_overflowed(c)); /* cap events */
    churn_round(c, ++h);
    assert_true(dy_kv_cache_events_overflowed(c));
    assert_int_equal(dy_kv_cache_take_events(c, ev, cap), 0);
    churn_round(c, ++h);
    assert_int_equal(dy_kv_cache_take_events(c, ev, cap), 0);

    uint64_t hs[4], ps[4];
    assert_int_equal(dy_kv_cache_snapshot(c, hs, ps, nb - 1), -1); /* too small: no change */
    assert_true(dy_kv_cache_events_overflowed(c));
    assert_int_equal(dy_kv_cache_snapshot(c, hs, ps, nb), nb);
    assert_false(dy_kv_cache_events_overflowed(c));
    for (int i = 0; i < nb; i++) /* the last nb hashes, each with its parent */
        assert_true(hs[i] > h - (uint64_t)nb && hs[i] <= h && ps[i] == hs[i] - 1);
    churn_round(c, ++h);
    assert_int_equal(dy_kv_cache_take_events(c, ev, cap), 2);
    assert_int_equal(ev[0].kind, DY_KV_EV_REMOVED);
    assert_int_equal(ev[1].kind, DY_KV_EV_STORED);

    /* A clear that empties the index also heals an overflow. */
    for (int i = 0; i < cap; i++)
        churn_round(c, ++h);
    assert_true(dy_kv_cache_events_overflowed(c));
    dy_kv_cache_clear(c);
    assert_false(dy_kv_cache_events_overflowed(c));
    assert_int_equal(dy_kv_cache_take_events(c, ev, cap), 1);
    assert_int_equal(ev[0].kind, DY_KV_EV_CLEARED);
    free(ev);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

/* The lower tiers' hooks: a pin keeps an evictable block out of eviction, unpinning it makes
 * it the next to go; the oldest-evictable walk follows eviction order; the published record
 * skips blocks evicted before it was taken. */
static void test_pin_and_published(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(3, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    assert_true(dy_kv_cache_track_published(c, true));
    int32_t t[12];
    tokens_of(t, 12, 7);
    uint64_t h[3];
    dy_kv_cache_hash_blocks(c, t, 3, h);
    int32_t b[3];
    for (int i = 0; i < 3; i++) {
        b[i] = dy_kv_cache_alloc(c);
        dy_kv_cache_publish_chained(c, b[i], h[i], i ? h[i - 1] : 1);
    }
    for (int i = 0; i < 3; i++)
        dy_kv_cache_release(c, b[i]); /* LRU: b0 b1 b2 */
    int32_t old[3];
    assert_int_equal(dy_kv_cache_oldest_evictable(c, old, 3), 3);
    assert_int_equal(old[0], b[0]);
    assert_int_equal(old[2], b[2]);
    assert_int_equal(dy_kv_cache_oldest_evictable(c, old, 1), 1);
    uint64_t hash, parent;
    assert_int_equal(dy_kv_cache_find(c, h[1]), b[1]);
    assert_int_equal(dy_kv_cache_find(c, 12345), -1);
    assert_true(dy_kv_cache_block_hash(c, b[1], &hash, &parent));
    assert_true(hash == h[1] && parent == h[0]);

    dy_kv_cache_pin(c, b[0]); /* being copied down: not evictable */
    assert_int_equal(dy_kv_cache_available(c), 2);
    assert_int_equal(dy_kv_cache_alloc(c), b[1]); /* the next oldest goes instead */
    assert_false(dy_kv_cache_block_hash(c, b[1], &hash, &parent));
    dy_kv_cache_unpin_oldest(c, b[0]); /* back, as the oldest: b0 b2 */
    assert_int_equal(dy_kv_cache_oldest_evictable(c, old, 3), 2);
    assert_int_equal(old[0], b[0]);
    assert_int_equal(dy_kv_cache_alloc(c), b[0]);

    /* Published b0, b1, b2; b0 and b1 are gone (reused), b2 is still indexed. */
    dy_kv_published rec[3];
    int n = dy_kv_cache_take_published(c, rec, 3);
    assert_int_equal(n, 1);
    assert_int_equal(rec[0].block, b[2]);
    assert_true(rec[0].hash == h[2]);
    assert_int_equal(dy_kv_cache_take_published(c, rec, 3), 0); /* taken once */
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_chain),
        cmocka_unit_test(test_lookup_and_reuse),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_duplicate_stays_private_and_clear),
        cmocka_unit_test(test_churn),
        cmocka_unit_test(test_events_mirror_index),
        cmocka_unit_test(test_events_private_silent_and_eviction),
        cmocka_unit_test(test_events_overflow),
        cmocka_unit_test(test_pin_and_published),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
