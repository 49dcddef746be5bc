/* test_kv_pool.c — the block pool: allocation order, exhaustion, shared blocks freed only
 * when the last reference goes, bad sizes refused, block storage disjoint; the metadata-only
 * pool keeps the same books without storage. */
#include "testutil.h"
#include "kv/kv_pool.h"

static void test_alloc_free_refcount(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(3, 16, 2, 8);
    assert_non_null(p);
    assert_int_equal(dy_kv_block_bytes(p), 2 * 16 * 2 * 8 * sizeof(float));
    assert_int_equal(dy_kv_bytes_per_block(16, 2, 8), dy_kv_block_bytes(p));
    /* The block is exactly the span from one block's first keys to the next block's. */
    assert_int_equal((size_t)((char *)dy_kv_keys(p, 1, 0) - (char *)dy_kv_keys(p, 0, 0)),
                     dy_kv_block_bytes(p));
    assert_int_equal(dy_kv_alloc(p), 0);
    assert_int_equal(dy_kv_alloc(p), 1);
    assert_int_equal(dy_kv_alloc(p), 2);
    assert_int_equal(dy_kv_alloc(p), -1);
    dy_kv_ref(p, 1);
    dy_kv_unref(p, 1);
    assert_int_equal(p->n_free, 0); /* still held once */
    dy_kv_unref(p, 1);
    assert_int_equal(p->n_free, 1);
    assert_int_equal(dy_kv_alloc(p), 1);
    dy_kv_pool_free(p);
}

static void test_layout_disjoint(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(2, 4, 3, 5);
    /* keys and values of every (block, layer) tile the storage without overlap */
    float *prev_end = p->data;
    for (int b = 0; b < 2; b++)
        for (int l = 0; l < 3; l++) {
            assert_ptr_equal(dy_kv_keys(p, b, l), prev_end);
            assert_ptr_equal(dy_kv_values(p, b, l), prev_end + 4 * 5);
            prev_end += 2 * 4 * 5;
        }
    dy_kv_pool_free(p);
}

static void test_bad_sizes(void **st)
{
    (void)st;
    assert_null(dy_kv_pool_new(0, 16, 1, 1));
    assert_null(dy_kv_pool_new(1, 0, 1, 1));
    assert_null(dy_kv_pool_new(1 << 30, 4096, 1024, 1 << 20));
}

/* A pool far larger than this machine's memory is only its books: the same allocation order,
 * reference counting and block size as the real pool, and no storage. */
static void test_meta_pool(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new_meta(1 << 20, 16, 80, 1024); /* 10 TiB if it were real */
    assert_non_null(p);
    assert_null(p->data);
    assert_int_equal(p->data_bytes, 0);
    assert_int_equal(dy_kv_block_bytes(p), dy_kv_bytes_per_block(16, 80, 1024));
    assert_int_equal(p->n_free, 1 << 20);
    assert_int_equal(dy_kv_alloc(p), 0);
    assert_int_equal(dy_kv_alloc(p), 1);
    dy_kv_ref(p, 0);
    dy_kv_unref(p, 0);
    assert_int_equal(p->n_free, (1 << 20) - 2);
    dy_kv_unref(p, 0);
    assert_int_equal(dy_kv_alloc(p), 0); /* back on top of the free list */
    dy_kv_copy_block(p, 1, 0);           /* no storage: nothing to copy, nothing touched */
    dy_kv_pool_free(p);
    dy_kv_pool *q = dy_kv_pool_new_meta(2, 4, 1, 1);
    assert_int_equal(dy_kv_alloc(q), 0);
    assert_int_equal(dy_kv_alloc(q), 1);
    assert_int_equal(dy_kv_alloc(q), -1);
    dy_kv_pool_free(q);
    assert_null(dy_kv_pool_new_meta(0, 16, 1, 1));
    assert_null(dy_kv_pool_new_meta(1, 0, 1, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_free_refcount),
        cmocka_unit_test(test_layout_disjoint),
        cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_meta_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
