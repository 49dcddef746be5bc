/* test_kv_mover.c — the tier mover thread: memory copies arrive intact and in order; a
 * block written to a file comes back with its checksum checked; a flipped byte or a
 * truncated file fails the read (never returns wrong bytes as good); the queue is bounded. */
#include "testutil.h"
#include "serve/worker/kv_mover.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BYTES 4096

/* Takes n finished jobs, waiting up to 10 s for them. */
static void take_all(dy_kv_mover *m, dy_kv_move *out, int n)
{
    int got = 0;
    for (int i = 0; i < 10000 && got < n; i++) {
        got += dy_kv_mover_take(m, out + got, n - got);
        if (got < n)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    assert_int_equal(got, n);
}

static void test_memory_copies(void **st)
{
    (void)st;
    dy_kv_mover *m = dy_kv_mover_new(4);
    static char src[4][BYTES], dst[4][BYTES];
    for (int i = 0; i < 4; i++) {
        memset(src[i], 'a' + i, BYTES);
        dy_kv_move j = {.kind = DY_MOVE_MEM, .src = src[i], .dst = dst[i], .bytes = BYTES,
                        .a = i};
        assert_true(dy_kv_mover_submit(m, &j));
    }
    dy_kv_move extra = {.kind = DY_MOVE_MEM, .src = src[0], .dst = dst[0], .bytes = 1};
    assert_false(dy_kv_mover_submit(m, &extra)); /* 4 outstanding: full until taken */
    dy_kv_move done[4];
    take_all(m, done, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(done[i].a, i); /* in order */
        assert_true(done[i].ok);
        assert_true(done[i].seconds >= 0);
        assert_memory_equal(dst[i], src[i], BYTES);
    }
    assert_int_equal(dy_kv_mover_outstanding(m), 0);
    assert_true(dy_kv_mover_submit(m, &extra));
    dy_kv_mover_free(m); /* waits for the job in flight */
}

static void test_file_round_trip_and_corruption(void **st)
{
    (void)st;
    char path[] = "/tmp/dyad-test-mover-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    dy_kv_mover *m = dy_kv_mover_new(2);
    static char blk[BYTES], back[BYTES];
    for (int i = 0; i < BYTES; i++)
        blk[i] = (char)(i * 7);
    dy_kv_move w = {.kind = DY_MOVE_TO_FILE, .src = blk, .fd = fd, .off = BYTES, .bytes = BYTES};
    dy_kv_move done;
    assert_true(dy_kv_mover_submit(m, &w));
    take_all(m, &done, 1);
    assert_true(done.ok);
    uint64_t sum = done.checksum;
    assert_true(sum == dy_kv_block_checksum(blk, BYTES));

    dy_kv_move r = {.kind = DY_MOVE_FROM_FILE, .dst = back, .fd = fd, .off = BYTES,
                    .bytes = BYTES, .checksum = sum};
    assert_true(dy_kv_mover_submit(m, &r));
    take_all(m, &done, 1);
    assert_true(done.ok);
    assert_memory_equal(back, blk, BYTES);

    assert_int_equal(pwrite(fd, "X", 1, BYTES + 100), 1); /* one byte flipped on disk */
    assert_true(dy_kv_mover_submit(m, &r));
    take_all(m, &done, 1);
    assert_false(done.ok);
    assert_int_equal(done.err, 0); /* read whole, wrong bytes */

    assert_int_equal(ftruncate(fd, BYTES + 10), 0); /* truncated under us */
    assert_true(dy_kv_mover_submit(m, &r));
    take_all(m, &done, 1);
    assert_false(done.ok);
    assert_true(done.err != 0);
    dy_kv_mover_free(m);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_copies),
        cmocka_unit_test(test_file_round_trip_and_corruption),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
