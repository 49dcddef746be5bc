/* test_xfer_kv_type.c — KV transfer of typed blocks: f16 and q8_0 blocks arrive byte for byte
 * over shared memory and TCP; a sender of another type is refused, over shared memory when it
 * opens the pool (the pool's descriptor names its type and block size) and over TCP when its
 * blocks arrive (the frame names the type), also where the byte counts agree (f32 blocks of 8
 * positions are f16 blocks of 16). */
#include "testutil.h"
#include "serve/worker/xfer.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static dy_kv_pool *pool(int n, int bs, dy_kv_type t, const char *shm)
{
    const dy_kv_shape s = {bs, 2, 32, 8, t};
    dy_kv_pool *p = dy_kv_pool_make(n, &s, shm);
    assert_non_null(p);
    return p;
}

static void fill(dy_kv_pool *p, unsigned salt)
{
    tu_fill_pattern(p->data, p->data_bytes, salt);
}

static void test_shm(void **st)
{
    (void)st;
    char name[64], err[512];
    snprintf(name, sizeof name, "/dyad-test-xfer-type-%d", (int)getpid());
    dy_kv_pool *dst = pool(4, 16, DY_KV_Q8_0, name), *src = pool(4, 16, DY_KV_Q8_0, NULL);
    dy_kv_pool *f16 = pool(4, 16, DY_KV_F16, NULL);
    fill(src, 3);
    /* another type: refused at open, naming both */
    assert_null(dy_xfer_open(DY_XFER_SHM, name, DY_KV_F16, dy_kv_block_bytes(f16), err, sizeof err));
    assert_non_null(strstr(err, "q8_0"));
    assert_non_null(strstr(err, "f16"));
    assert_non_null(strstr(err, "--kv-type"));
    dy_xfer_peer *p = dy_xfer_open(DY_XFER_SHM, name, DY_KV_Q8_0, dy_kv_block_bytes(src), err,
                                   sizeof err);
    assert_non_null(p);
    const int32_t from[2] = {1, 3}, to[2] = {2, 0};
    uint64_t bytes;
    assert_int_equal(dy_xfer_send(p, 1, src, from, to, 2, &bytes, err, sizeof err), 0);
    assert_int_equal(bytes, 2 * dy_kv_block_bytes(src));
    for (int i = 0; i < 2; i++)
        assert_memory_equal(dy_kv_block_data(dst, to[i]), dy_kv_block_data(src, from[i]),
                            dy_kv_block_bytes(src));
    /* blocks of a pool of another type through this peer: refused */
    assert_int_equal(dy_xfer_send(p, 1, f16, from, to, 2, &bytes, err, sizeof err), -1);
    assert_non_null(strstr(err, "mismatch"));
    dy_xfer_close(p);
    dy_kv_pool_free(f16);
    dy_kv_pool_free(src);
    dy_kv_pool_free(dst);
}

/* Waits (generously) until the receiver holds n blocks of sequence id; false if it never does. */
static bool received(dy_xfer_rx *rx, uint64_t id, int n)
{
    for (int i = 0; i < 2000 && dy_xfer_rx_received(rx, id) < n; i++)
        usleep(1000);
    return dy_xfer_rx_received(rx, id) >= n;
}

static void test_tcp(void **st)
{
    (void)st;
    char err[512];
    dy_kv_pool *dst = pool(4, 16, DY_KV_F16, NULL), *src = pool(4, 16, DY_KV_F16, NULL);
    dy_kv_pool *f32 = pool(4, 8, DY_KV_F32, NULL); /* the same bytes per block */
    assert_int_equal(dy_kv_block_bytes(f32), dy_kv_block_bytes(dst));
    fill(src, 5);
    fill(f32, 9);
    dy_xfer_rx *rx = dy_xfer_rx_start(DY_XFER_TCP, dst, "127.0.0.1", 0, err, sizeof err);
    assert_non_null(rx);
    const int32_t from[2] = {0, 2}, to[2] = {3, 1};
    uint64_t bytes;
    /* f32 blocks of the same size: the receiver refuses them and drops the connection */
    dy_xfer_rx_expect(rx, 7, to, 2);
    dy_xfer_peer *bad = dy_xfer_open(DY_XFER_TCP, dy_xfer_rx_addr(rx), DY_KV_F32,
                                     dy_kv_block_bytes(f32), err, sizeof err);
    assert_non_null(bad);
    dy_xfer_send(bad, 7, f32, from, to, 2, &bytes, err, sizeof err); /* may fail mid-way */
    usleep(200 * 1000);
    assert_int_equal(dy_xfer_rx_received(rx, 7), 0);
    dy_xfer_close(bad);
    dy_xfer_rx_forget(rx, 7);
    /* f16 blocks: received byte for byte */
    dy_xfer_rx_expect(rx, 8, to, 2);
    dy_xfer_peer *p = dy_xfer_open(DY_XFER_TCP, dy_xfer_rx_addr(rx), DY_KV_F16,
                                   dy_kv_block_bytes(src), err, sizeof err);
    assert_non_null(p);
    assert_int_equal(dy_xfer_send(p, 8, src, from, to, 2, &bytes, err, sizeof err), 0);
    assert_true(received(rx, 8, 2));
    for (int i = 0; i < 2; i++)
        assert_memory_equal(dy_kv_block_data(dst, to[i]), dy_kv_block_data(src, from[i]),
                            dy_kv_block_bytes(src));
    dy_xfer_close(p);
    dy_xfer_rx_stop(rx);
    dy_kv_pool_free(f32);
    dy_kv_pool_free(src);
    dy_kv_pool_free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm),
        cmocka_unit_test(test_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
