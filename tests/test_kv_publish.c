/* test_kv_publish.c — the worker's KV event publisher, end to end without a socket: frames
 * are encoded into a buffer, decoded back and applied the way the frontend would (numbered
 * batches, snapshots in parts), and the picture must equal the worker's prefix index: at
 * start, after random traffic with overflows and resyncs, and past one frame's capacity. */
#include "testutil.h"
#include "kv/kv_cache.h"
#include "serve/worker/kv_publish.h"

#include <stdlib.h>
#include <string.h>

#define MAX_HASH (1 << 17) /* the tests' hashes are small integers */

/* The frontend's picture of one worker. */
typedef struct {
    bool present[MAX_HASH];
    uint64_t parent[MAX_HASH];
    int n;
    uint64_t next_seq;     /* the batch number expected next */
    uint32_t next_part;    /* of the snapshot being received */
    int batches, snapshots, parts;
} picture;

static void add(picture *pic, const dy_kv_event *e)
{
    assert_true(e->hash < MAX_HASH);
    assert_false(pic->present[e->hash]);
    pic->present[e->hash] = true;
    pic->parent[e->hash] = e->parent;
    pic->n++;
}

static void clear(picture *pic)
{
    memset(pic->present, 0, sizeof pic->present);
    pic->n = 0;
}

static void apply_batch(picture *pic, const dy_msg_kv_events *m)
{
    assert_int_equal(pic->next_part, 0); /* never inside a snapshot */
    assert_true(m->seq == pic->next_seq);
    pic->next_seq++;
    pic->batches++;
    for (uint32_t i = 0; i < m->n_events; i++) {
        const dy_kv_event *e = &m->events[i];
        if (e->kind == DY_KV_EV_STORED)
            add(pic, e);
        else if (e->kind == DY_KV_EV_REMOVED) {
            assert_true(e->hash < MAX_HASH && pic->present[e->hash]);
            assert_true(pic->parent[e->hash] == e->parent);
            pic->present[e->hash] = false;
            pic->n--;
        } else
            clear(pic);
    }
}

static void apply_snapshot(picture *pic, const dy_msg_kv_snapshot *m)
{
    assert_int_equal(m->part, pic->next_part);
    if (m->part == 0)
        clear(pic);
    else
        assert_true(m->seq + 1 == pic->next_seq); /* every part carries the same seq */
    pic->next_seq = m->seq + 1;
    for (uint32_t i = 0; i < m->n_blocks; i++)
        add(pic, &m->blocks[i]);
    pic->parts++;
    pic->next_part = m->part + 1 == m->n_parts ? 0 : m->part + 1;
    pic->snapshots += pic->next_part == 0;
}

/* Decodes every frame in tx into the picture and empties tx. */
static void receive(picture *pic, dy_buf *tx)
{
    char err[128];
    size_t pos = 0;
    while (pos < tx->len) {
        dy_msg_type t;
        uint32_t len;
        assert_true(tx->len - pos >= DY_WIRE_HEADER);
        assert_true(dy_wire_header(tx->data + pos, &t, &len, err, sizeof err));
        const uint8_t *p = tx->data + pos + DY_WIRE_HEADER;
        assert_true(len <= tx->len - pos - DY_WIRE_HEADER);
        if (t == DY_MSG_KV_EVENTS) {
            dy_msg_kv_events m;
            assert_true(dy_wire_decode_kv_events(p, len, &m, err, sizeof err));
            assert_int_equal(m.worker_id, 7);
            apply_batch(pic, &m);
            dy_msg_kv_events_free(&m);
        } else {
            assert_int_equal(t, DY_MSG_KV_SNAPSHOT);
            dy_msg_kv_snapshot m;
            assert_true(dy_wire_decode_kv_snapshot(p, len, &m, err, sizeof err));
            assert_int_equal(m.worker_id, 7);
            apply_snapshot(pic, &m);
            dy_msg_kv_snapshot_free(&m);
        }
        pos += DY_WIRE_HEADER + len;
    }
    assert_int_equal(pic->next_part, 0); /* no snapshot left half sent */
    tx->len = 0;
}

/* The picture is the index. Only right after a flush: a snapshot empties the event log. */
static void assert_picture_is_index(dy_kv_cache *c, const picture *pic)
{
    int nb = dy_kv_cache_pool(c)->n_blocks;
    uint64_t *h = malloc(sizeof *h * (size_t)nb), *par = malloc(sizeof *par * (size_t)nb);
    int n = dy_kv_cache_snapshot(c, h, par, nb);
    assert_int_equal(n, pic->n);
    for (int i = 0; i < n; i++) {
        assert_true(h[i] < MAX_HASH && pic->present[h[i]]);
        assert_true(pic->parent[h[i]] == par[i]);
    }
    free(h);
    free(par);
}

static void test_start_then_batches(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(8, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    int32_t old = dy_kv_cache_alloc(c);
    dy_kv_cache_publish_chained(c, old, 50, 1); /* before the publisher: in the snapshot */
    dy_kv_publisher pub;
    assert_true(dy_kv_publish_init(&pub, c, 7));
    picture *pic = calloc(1, sizeof *pic);
    dy_buf tx = {0};
    assert_true(dy_kv_publish_flush(&pub, c, &tx)); /* the start snapshot, seq 0 */
    receive(pic, &tx);
    assert_int_equal(pic->snapshots, 1);
    assert_true(pic->next_seq == 1);
    assert_int_equal(pic->n, 1);
    assert_true(dy_kv_publish_flush(&pub, c, &tx)); /* nothing happened: nothing sent */
    assert_int_equal(tx.len, 0);

    int32_t b[3];
    for (int i = 0; i < 3; i++) {
        b[i] = dy_kv_cache_alloc(c);
        dy_kv_cache_publish_chained(c, b[i], 51 + (uint64_t)i, 50 + (uint64_t)i);
    }
    assert_true(dy_kv_publish_flush(&pub, c, &tx));
    receive(pic, &tx);
    assert_int_equal(pic->batches, 1);
    assert_true(pub.seq == 1 && pic->next_seq == 2);
    assert_picture_is_index(c, pic);

    /* KV_RESYNC: a snapshot now, carrying the last batch's number. */
    assert_true(dy_kv_publish_snapshot(&pub, c, &tx));
    receive(pic, &tx);
    assert_int_equal(pic->snapshots, 2);
    assert_true(pic->next_seq == 2);
    assert_picture_is_index(c, pic);
    free(pic);
    dy_buf_free(&tx);
    dy_kv_publish_free(&pub);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

/* Random traffic, flushed at random intervals (some long enough to overflow the log), with
 * the odd resync: the picture always catches up with the index. */
static void test_random_traffic(void **st)
{
    (void)st;
    dy_kv_pool *p = dy_kv_pool_new(6, 4, 1, 2);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    dy_kv_publisher pub;
    assert_true(dy_kv_publish_init(&pub, c, 7));
    picture *pic = calloc(1, sizeof *pic);
    dy_buf tx = {0};
    int32_t held[128];
    int n_held = 0, overflows = 0;
    uint64_t rng = 12345;
    int next_flush = 0;
    for (int step = 0; step < 30000; step++) {
        unsigned op = (unsigned)(tu_rng_u64(&rng) % 100);
        if (op < 35) {
            int32_t blk = dy_kv_cache_alloc(c);
            if (blk >= 0)
                held[n_held++] = blk;
        } else if (op < 60 && n_held) {
            uint64_t h = 1 + tu_rng_u64(&rng) % 16;
            dy_kv_cache_publish_chained(c, held[tu_rng_u64(&rng) % (uint64_t)n_held], h, h + 100);
        } else if (op < 95 && n_held) {
            int i = (int)(tu_rng_u64(&rng) % (uint64_t)n_held);
            dy_kv_cache_release(c, held[i]);
            held[i] = held[--n_held];
        } else if (op < 99) {
            uint64_t h[2] = {1 + tu_rng_u64(&rng) % 16, 1 + tu_rng_u64(&rng) % 16};
            if (n_held + 2 <= 128)
                n_held += dy_kv_cache_lookup(c, h, 2, held + n_held);
        } else
            dy_kv_cache_clear(c);
        if (step < next_flush)
            continue;
        overflows += dy_kv_cache_events_overflowed(c);
        if (tu_rng_u64(&rng) % 50 == 0)
            assert_true(dy_kv_publish_snapshot(&pub, c, &tx));
        assert_true(dy_kv_publish_flush(&pub, c, &tx));
        receive(pic, &tx);
        assert_picture_is_index(c, pic);
        /* mostly every few steps, sometimes a long stall */
        next_flush = step + 1 + (int)(tu_rng_u64(&rng) % (tu_rng_u64(&rng) % 10 ? 8 : 400));
    }
    assert_true(overflows > 5);
    assert_true(pic->batches > 500);
    free(pic);
    dy_buf_free(&tx);
    dy_kv_publish_free(&pub);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

/* More events than one frame carries go as several batches; a snapshot larger than one
 * frame goes in parts. */
static void test_beyond_one_frame(void **st)
{
    (void)st;
    const int nb = DY_WIRE_MAX_KV_BLOCKS + 4000;
    dy_kv_pool *p = dy_kv_pool_new(nb, 1, 1, 1);
    dy_kv_cache *c = dy_kv_cache_new(p, 1);
    dy_kv_publisher pub;
    assert_true(dy_kv_publish_init(&pub, c, 7));
    picture *pic = calloc(1, sizeof *pic);
    dy_buf tx = {0};
    assert_true(dy_kv_publish_flush(&pub, c, &tx));
    receive(pic, &tx);
    for (int i = 0; i < nb; i++)
        dy_kv_cache_publish_chained(c, dy_kv_cache_alloc(c), (uint64_t)i + 1, (uint64_t)i);
    assert_true(dy_kv_publish_flush(&pub, c, &tx));
    receive(pic, &tx);
    assert_int_equal(pic->batches, 2);
    assert_int_equal(pic->n, nb);
    assert_true(dy_kv_publish_snapshot(&pub, c, &tx));
    receive(pic, &tx);
    assert_int_equal(pic->snapshots, 2);
    assert_int_equal(pic->parts, 3); /* the empty start snapshot, then two parts */
    assert_true(pic->next_seq == 3);
    assert_picture_is_index(c, pic);
    free(pic);
    dy_buf_free(&tx);
    dy_kv_publish_free(&pub);
    dy_kv_cache_free(c);
    dy_kv_pool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_then_batches),
        cmocka_unit_test(test_random_traffic),
        cmocka_unit_test(test_beyond_one_frame),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
