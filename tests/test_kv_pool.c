/* test_kv_pool.c — the block pool: allocation order, exhaustion, shared blocks freed only
 * when the last reference goes, bad sizes refused, block storage disjoint. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_free_refcount),
        cmocka_unit_test(test_layout_disjoint),
        cmocka_unit_test(test_bad_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
