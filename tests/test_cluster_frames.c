/* test_cluster_frames.c — frames as cluster mode carries them over NATS (serve/cluster/
 * frames.h): one whole frame per message, of a type that travels that way, valid by its own
 * decoder; truncated, padded, misdirected and corrupt ones are refused with a message; the ids
 * that route answers (a request's samples, one id for the others); SHUTDOWN and ROLE refused
 * by cluster workers. */
#include "testutil.h"
#include "serve/cluster/frames.h"

#include <string.h>

static void request_frame(dy_buf *b, uint64_t id, uint32_t samples)
{
    int32_t prompt[3] = {1, 2, 3};
    dy_msg_request r = {.id = id, .max_tokens = 8, .n_samples = samples, .n_prompt = 3,
                        .prompt = prompt, .hold_ms = DY_WIRE_NO_HOLD};
    assert_true(dy_wire_request(b, &r));
}

static void test_valid_frames_each_way(void **st)
{
    (void)st;
    char err[256];
    dy_msg_type t;
    dy_buf b = {0};
    request_frame(&b, 40, 3);
    assert_true(dy_cluster_frame_check(b.data, b.len, DY_TO_WORKER, &t, err, sizeof err));
    assert_int_equal(t, DY_MSG_REQUEST);
    /* A request never goes to a frontend. */
    assert_false(dy_cluster_frame_check(b.data, b.len, DY_TO_FRONTEND, &t, err, sizeof err));
    assert_non_null(strstr(err, "does not travel to the frontend"));
    dy_buf_free(&b);

    dy_msg_token tok = {.id = 41, .token = 7, .text = "hi", .text_len = 2};
    assert_true(dy_wire_token(&b, &tok));
    assert_true(dy_cluster_frame_check(b.data, b.len, DY_TO_FRONTEND, &t, err, sizeof err));
    assert_int_equal(t, DY_MSG_TOKEN);
    assert_false(dy_cluster_frame_check(b.data, b.len, DY_TO_WORKER, &t, err, sizeof err));
    dy_buf_free(&b);

    dy_msg_hello h = {.worker_id = 1, .fingerprint = 99, .block_size = 16, .kv_blocks = 8};
    assert_true(dy_wire_hello(&b, &h));
    assert_true(dy_cluster_frame_check(b.data, b.len, DY_TO_FRONTEND, &t, err, sizeof err));
    assert_int_equal(t, DY_MSG_HELLO);
    dy_buf_free(&b);
}

static void test_bad_messages(void **st)
{
    (void)st;
    char err[256];
    dy_msg_type t;
    dy_buf b = {0};
    request_frame(&b, 5, 1);
    /* Every cut of the message, and a byte too many, is refused. */
    for (size_t n = 0; n < b.len; n++)
        assert_false(dy_cluster_frame_check(b.data, n, DY_TO_WORKER, &t, err, sizeof err));
    uint8_t more[512];
    assert_true(b.len + 1 <= sizeof more);
    memcpy(more, b.data, b.len);
    more[b.len] = 0;
    assert_false(dy_cluster_frame_check(more, b.len + 1, DY_TO_WORKER, &t, err, sizeof err));
    assert_non_null(strstr(err, "payload bytes in a message of"));
    /* Two frames in one message are not one frame. */
    dy_buf two = {0};
    request_frame(&two, 5, 1);
    request_frame(&two, 6, 1);
    assert_false(dy_cluster_frame_check(two.data, two.len, DY_TO_WORKER, &t, err, sizeof err));
    dy_buf_free(&two);
    /* A bad magic, and a payload its decoder refuses (0 samples). */
    memcpy(more, b.data, b.len);
    more[0] ^= 0xff;
    assert_false(dy_cluster_frame_check(more, b.len, DY_TO_WORKER, &t, err, sizeof err));
    dy_buf_free(&b);
    request_frame(&b, 5, 0);
    assert_false(dy_cluster_frame_check(b.data, b.len, DY_TO_WORKER, &t, err, sizeof err));
    assert_non_null(strstr(err, "samples"));
    dy_buf_free(&b);
    assert_false(dy_cluster_frame_check("", 0, DY_TO_WORKER, &t, err, sizeof err));
    assert_non_null(strstr(err, "shorter than a frame header"));
}

static void test_ids(void **st)
{
    (void)st;
    uint64_t first;
    uint32_t n;
    dy_buf b = {0};
    request_frame(&b, 1000, 4);
    dy_cluster_frame_ids(b.data, b.len, &first, &n);
    assert_int_equal(first, 1000);
    assert_int_equal(n, 4);
    dy_buf_free(&b);

    dy_msg_done d = {.id = 1003, .finish = DY_END_STOP};
    assert_true(dy_wire_done(&b, &d));
    dy_cluster_frame_ids(b.data, b.len, &first, &n);
    assert_int_equal(first, 1003);
    assert_int_equal(n, 1);
    dy_buf_free(&b);

    dy_msg_cancel c = {.id = 77};
    assert_true(dy_wire_cancel(&b, &c));
    dy_cluster_frame_ids(b.data, b.len, &first, &n);
    assert_int_equal(first, 77);
    assert_int_equal(n, 1);
    dy_buf_free(&b);

    dy_msg_stats s = {.running = 1};
    assert_true(dy_wire_stats(&b, &s));
    dy_cluster_frame_ids(b.data, b.len, &first, &n);
    assert_int_equal(n, 0); /* a worker's, not a sequence's */
    dy_buf_free(&b);
    dy_cluster_frame_ids("xx", 2, &first, &n);
    assert_int_equal(n, 0);
}

static void test_refused_types(void **st)
{
    (void)st;
    assert_true(dy_cluster_frame_refused(DY_MSG_SHUTDOWN));
    assert_true(dy_cluster_frame_refused(DY_MSG_ROLE));
    assert_false(dy_cluster_frame_refused(DY_MSG_REQUEST));
    assert_false(dy_cluster_frame_refused(DY_MSG_CANCEL));
    /* Still valid frames to a worker: refused by policy, not as garbage. */
    char err[256];
    dy_msg_type t;
    dy_buf b = {0};
    assert_true(dy_wire_shutdown(&b));
    assert_true(dy_cluster_frame_check(b.data, b.len, DY_TO_WORKER, &t, err, sizeof err));
    assert_int_equal(t, DY_MSG_SHUTDOWN);
    dy_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_frames_each_way),
        cmocka_unit_test(test_bad_messages),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_refused_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
