/* test_xfer_ucx.c — KV transfer over UCX, sender and receiver in one process (the receiver
 * runs its own thread): blocks arrive byte for byte (small ones and ones large enough for
 * any protocol); blocks the receiver was not told to expect, or of another KV type of the
 * same size, are refused and the sender's send says so; a receiver that is not there fails
 * the open within a bounded time, and one that goes away fails the next send within a
 * bounded time; more senders than the receiver keeps are served (the oldest endpoint makes
 * room). Without UCX in the build, the open and the receiver fail with a message naming
 * --kv-transfer tcp. UCX_TLS is set by the test's CMake entry (tcp and shared memory) so the
 * transports are the same on every machine. */
#include "testutil.h"
#include "serve/worker/xfer.h"
#include "serve/worker/xfer_ucx.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static dy_kv_pool *pool(int n, int bs, int kv_dim, dy_kv_type t)
{
    const dy_kv_shape s = {bs, 2, kv_dim, 8, t};
    dy_kv_pool *p = dy_kv_pool_make(n, &s, NULL);
    assert_non_null(p);
    return p;
}

static void fill(dy_kv_pool *p, unsigned salt)
{
    tu_fill_pattern(p->data, p->data_bytes, salt);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Waits (generously) until the receiver has counted n blocks of sequence id. A send returns
 * once the bytes are in place; the receiver's thread counts them a moment later. */
static bool received(dy_xfer_rx *rx, uint64_t id, int n)
{
    for (int i = 0; i < 2000 && dy_xfer_rx_received(rx, id) < n; i++)
        usleep(1000);
    return dy_xfer_rx_received(rx, id) == n;
}

/* Sends from[i] → to[i] for sequence id and checks every destination block equals its source. */
static void send_and_check(dy_xfer_rx *rx, dy_kv_pool *src, dy_kv_pool *dst, uint64_t id)
{
    char err[512];
    const int32_t from[3] = {0, 2, 3}, to[3] = {3, 1, 0};
    dy_xfer_rx_expect(rx, id, to, 3);
    dy_xfer_peer *p = dy_xfer_open(DY_XFER_UCX, dy_xfer_rx_addr(rx), src->type,
                                   dy_kv_block_bytes(src), err, sizeof err);
    assert_non_null(p);
    uint64_t bytes = 0;
    int rc = dy_xfer_send(p, id, src, from, to, 3, &bytes, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "send: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(bytes, 3 * dy_kv_block_bytes(src));
    assert_true(received(rx, id, 3));
    for (int i = 0; i < 3; i++)
        assert_memory_equal(dy_kv_block_data(dst, to[i]), dy_kv_block_data(src, from[i]),
                            dy_kv_block_bytes(src));
    dy_xfer_rx_forget(rx, id);
    dy_xfer_close(p);
}

static void test_bytes_equal(void **st)
{
    (void)st;
    char err[512];
    /* 4 KiB blocks and 2 MiB blocks */
    const int kv_dim[2] = {32, 16384};
    for (int k = 0; k < 2; k++) {
        dy_kv_pool *dst = pool(4, 16, kv_dim[k], DY_KV_F16);
        dy_kv_pool *src = pool(4, 16, kv_dim[k], DY_KV_F16);
        fill(src, 5 + (unsigned)k);
        dy_xfer_rx *rx = dy_xfer_rx_start(DY_XFER_UCX, dst, "127.0.0.1", 0, err, sizeof err);
        if (!rx)
            fprintf(stderr, "rx: %s\n", err);
        assert_non_null(rx);
        assert_non_null(strstr(dy_xfer_rx_addr(rx), "127.0.0.1:"));
        send_and_check(rx, src, dst, 8);
        fill(src, 11);
        send_and_check(rx, src, dst, 9); /* a second sender on the same receiver */
        dy_xfer_rx_stop(rx);
        dy_kv_pool_free(src);
        dy_kv_pool_free(dst);
    }
}

static void test_refused(void **st)
{
    (void)st;
    char err[512];
    dy_kv_pool *dst = pool(4, 16, 64, DY_KV_F16), *src = pool(4, 16, 64, DY_KV_F16);
    dy_kv_pool *f32 = pool(4, 8, 64, DY_KV_F32); /* the same bytes per block */
    assert_int_equal(dy_kv_block_bytes(f32), dy_kv_block_bytes(dst));
    fill(src, 5);
    fill(f32, 9);
    memset(dst->data, 0, dst->data_bytes);
    dy_xfer_rx *rx = dy_xfer_rx_start(DY_XFER_UCX, dst, "127.0.0.1", 0, err, sizeof err);
    assert_non_null(rx);
    const int32_t from[2] = {0, 2}, to[2] = {3, 1};
    uint64_t bytes;
    /* blocks of a sequence it was not told about */
    dy_xfer_peer *p = dy_xfer_open(DY_XFER_UCX, dy_xfer_rx_addr(rx), DY_KV_F16,
                                   dy_kv_block_bytes(src), err, sizeof err);
    assert_non_null(p);
    assert_int_equal(dy_xfer_send(p, 7, src, from, to, 2, &bytes, err, sizeof err), -1);
    assert_non_null(strstr(err, "refused block"));
    assert_non_null(strstr(err, "sequence 7"));
    /* a block its sequence does not expect */
    const int32_t only[1] = {3};
    dy_xfer_rx_expect(rx, 8, only, 1);
    assert_int_equal(dy_xfer_send(p, 8, src, from, to, 2, &bytes, err, sizeof err), -1);
    assert_non_null(strstr(err, "refused block 1"));
    /* f32 blocks of the same size */
    dy_xfer_rx_expect(rx, 9, to, 2);
    dy_xfer_peer *bad = dy_xfer_open(DY_XFER_UCX, dy_xfer_rx_addr(rx), DY_KV_F32,
                                     dy_kv_block_bytes(f32), err, sizeof err);
    assert_non_null(bad);
    assert_int_equal(dy_xfer_send(bad, 9, f32, from, to, 2, &bytes, err, sizeof err), -1);
    assert_non_null(strstr(err, "f32"));
    assert_non_null(strstr(err, "--kv-type"));
    assert_int_equal(dy_xfer_rx_received(rx, 9), 0);
    /* nothing refused was written */
    uint8_t zero[64] = {0};
    assert_memory_equal(dy_kv_block_data(dst, 1), zero, sizeof zero);
    dy_xfer_close(bad);
    /* the refused sender's endpoint still works for blocks that are expected */
    dy_xfer_rx_forget(rx, 9);
    dy_xfer_rx_expect(rx, 10, to, 2);
    assert_int_equal(dy_xfer_send(p, 10, src, from, to, 2, &bytes, err, sizeof err), 0);
    assert_true(received(rx, 10, 2));
    assert_memory_equal(dy_kv_block_data(dst, 1), dy_kv_block_data(src, 2),
                        dy_kv_block_bytes(src));
    dy_xfer_close(p);
    dy_xfer_rx_stop(rx);
    dy_kv_pool_free(f32);
    dy_kv_pool_free(src);
    dy_kv_pool_free(dst);
}

static void test_unreachable(void **st)
{
    (void)st;
    char err[512], addr[64];
    /* a port nothing listens on: the receiver that was there is gone */
    dy_kv_pool *dst = pool(2, 16, 32, DY_KV_F16);
    dy_xfer_rx *rx = dy_xfer_rx_start(DY_XFER_UCX, dst, "127.0.0.1", 0, err, sizeof err);
    assert_non_null(rx);
    snprintf(addr, sizeof addr, "%s", dy_xfer_rx_addr(rx));
    dy_xfer_rx_stop(rx);
    double t0 = now_s();
    assert_null(dy_xfer_open(DY_XFER_UCX, addr, DY_KV_F16, dy_kv_block_bytes(dst), err,
                             sizeof err));
    assert_true(now_s() - t0 < 8); /* bounded: the connect timeout is 5 s */
    assert_non_null(strstr(err, "cannot connect to UCX KV receiver"));
    assert_non_null(strstr(err, addr));
    assert_null(dy_xfer_open(DY_XFER_UCX, "no-colon", DY_KV_F16, 64, err, sizeof err));
    assert_non_null(strstr(err, "host:port"));
    /* a receiver that goes away after the connection was made: the send fails, bounded */
    dy_kv_pool *src = pool(2, 16, 32, DY_KV_F16);
    rx = dy_xfer_rx_start(DY_XFER_UCX, dst, "127.0.0.1", 0, err, sizeof err);
    assert_non_null(rx);
    dy_xfer_peer *p = dy_xfer_open(DY_XFER_UCX, dy_xfer_rx_addr(rx), DY_KV_F16,
                                   dy_kv_block_bytes(src), err, sizeof err);
    assert_non_null(p);
    dy_xfer_rx_stop(rx);
    const int32_t ids[2] = {0, 1};
    uint64_t bytes;
    t0 = now_s();
    assert_int_equal(dy_xfer_send(p, 1, src, ids, ids, 2, &bytes, err, sizeof err), -1);
    assert_true(now_s() - t0 < 15); /* at worst the stall timeout, 10 s */
    assert_non_null(strstr(err, "UCX KV receiver"));
    /* the peer is reopened after a failure; until then it keeps failing at once */
    assert_int_equal(dy_xfer_send(p, 1, src, ids, ids, 2, &bytes, err, sizeof err), -1);
    dy_xfer_close(p);
    dy_kv_pool_free(src);
    dy_kv_pool_free(dst);
}

/* More senders than the receiver keeps (64; on one host a dead sender is not reported): the
 * oldest endpoint makes room, and the newest sender's blocks arrive. */
static void test_many_senders(void **st)
{
    (void)st;
    char err[512];
    enum { N = 66 };
    dy_kv_pool *dst = pool(2, 16, 32, DY_KV_F16), *src = pool(2, 16, 32, DY_KV_F16);
    fill(src, 3);
    dy_xfer_rx *rx = dy_xfer_rx_start(DY_XFER_UCX, dst, "127.0.0.1", 0, err, sizeof err);
    assert_non_null(rx);
    dy_xfer_peer *p[N];
    const int32_t ids[1] = {1};
    uint64_t bytes;
    for (int i = 0; i < N; i++) {
        p[i] = dy_xfer_open(DY_XFER_UCX, dy_xfer_rx_addr(rx), DY_KV_F16, dy_kv_block_bytes(src),
                            err, sizeof err);
        assert_non_null(p[i]);
    }
    dy_xfer_rx_expect(rx, 5, ids, 1);
    assert_int_equal(dy_xfer_send(p[N - 1], 5, src, ids, ids, 1, &bytes, err, sizeof err), 0);
    assert_true(received(rx, 5, 1));
    double t0 = now_s();
    dy_xfer_rx_expect(rx, 6, ids, 1);
    /* the oldest sender's endpoint was closed on the receiver's side: its send ends, bounded,
     * and whatever arrives is still checked against the expectations */
    if (dy_xfer_send(p[0], 6, src, ids, ids, 1, &bytes, err, sizeof err) == 0)
        assert_true(received(rx, 6, 1));
    assert_true(now_s() - t0 < 15);
    for (int i = 0; i < N; i++)
        dy_xfer_close(p[i]);
    dy_xfer_rx_stop(rx);
    dy_kv_pool_free(src);
    dy_kv_pool_free(dst);
}

static void test_without_ucx(void **st)
{
    (void)st;
    char err[512];
    dy_kv_pool *dst = pool(2, 16, 32, DY_KV_F16);
    assert_null(dy_xfer_rx_start(DY_XFER_UCX, dst, "127.0.0.1", 0, err, sizeof err));
    assert_non_null(strstr(err, "--kv-transfer tcp"));
    assert_false(dy_xfer_kind_available(DY_XFER_UCX, err, sizeof err));
    assert_non_null(strstr(err, "libucx-dev"));
    dy_kv_pool_free(dst);
}

int main(void)
{
    if (!dy_xfer_ucx_built()) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_without_ucx)};
        return cmocka_run_group_tests(tests, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_equal),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_many_senders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
