/* test_kv_cache.c — the prefix index: chained hashes, lookup of the longest cached run,
 * reuse of released blocks, LRU eviction order, duplicates stay private, clear. */
#include "testutil.h"
#include "kv/kv_cache.h"

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

/* Many publish/evict rounds exercise tombstones and the table rebuild. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_chain),
        cmocka_unit_test(test_lookup_and_reuse),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_duplicate_stays_private_and_clear),
        cmocka_unit_test(test_churn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
