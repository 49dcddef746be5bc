/* test_wire.c — the frontend↔worker frames: every message round-trips; truncated, padded,
 * corrupted and oversized frames are rejected with a message; a stream split at every byte
 * boundary yields the same frames; KV events, snapshots and resync requests round-trip and
 * every count in them is checked against the bytes. */
#include "testutil.h"
#include "serve/wire/wire.h"
#include "serve/wire/wire_io.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static dy_msg_request sample_request(int32_t *prompt)
{
    dy_msg_request m = {.id = 77, .max_tokens = 128, .temperature = 0.7f, .top_p = 0.9f,
                        .min_p = 0.05f, .top_k = 40, .seed = 12345, .stream = 3, .n_samples = 4, .ignore_eos = 1,
                        .want_logprobs = 1, .n_logprobs = 5, .n_stops = 2, .n_prompt = 4,
                        .prompt = prompt};
    strcpy(m.stops[0], "\n\n");
    strcpy(m.stops[1], "The end");
    return m;
}

/* Splits the single frame in b into its type and payload. */
static void one_frame(const dy_buf *b, dy_msg_type *t, const uint8_t **p, uint32_t *len)
{
    char err[128];
    assert_true(b->len >= DY_WIRE_HEADER);
    assert_true(dy_wire_header(b->data, t, len, err, sizeof err));
    assert_int_equal(*len + DY_WIRE_HEADER, b->len);
    *p = b->data + DY_WIRE_HEADER;
}

static void test_request_round_trip(void **st)
{
    (void)st;
    int32_t prompt[4] = {1, 403, 407, 261};
    dy_msg_request m = sample_request(prompt), d;
    dy_buf b = {0};
    assert_true(dy_wire_request(&b, &m));
    dy_msg_type t;
    const uint8_t *p;
    uint32_t len;
    one_frame(&b, &t, &p, &len);
    assert_int_equal(t, DY_MSG_REQUEST);
    char err[128];
    assert_true(dy_wire_decode_request(p, len, &d, err, sizeof err));
    assert_int_equal(d.id, 77);
    assert_int_equal(d.top_k, 40);
    assert_true(d.temperature == 0.7f);
    assert_int_equal(d.seed, 12345);
    assert_int_equal(d.stream, 3);
    assert_int_equal(d.n_samples, 4);
    assert_int_equal(d.n_stops, 2);
    assert_string_equal(d.stops[1], "The end");
    assert_int_equal(d.n_prompt, 4);
    assert_memory_equal(d.prompt, prompt, sizeof prompt);
    dy_msg_request_free(&d);
    /* Every truncation of the payload, and a byte too many, is an error. */
    for (uint32_t n = 0; n < len; n++) {
        assert_false(dy_wire_decode_request(p, n, &d, err, sizeof err));
        dy_msg_request_free(&d);
    }
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, p, len);
    longer[len] = 0;
    assert_false(dy_wire_decode_request(longer, len + 1, &d, err, sizeof err));
    dy_msg_request_free(&d);
    free(longer);
    dy_buf_free(&b);
}

/* A request's grammar text travels as a NUL-terminated copy; the last byte of the payload
 * before the prompt is the grammar's, so every cut through it is caught. */
static void test_request_grammar(void **st)
{
    (void)st;
    int32_t prompt[4] = {1, 403, 407, 261};
    const char *gram = "root ::= \"{\" ws \"}\"\nws ::= [ \\t\\n]*\n";
    dy_msg_request m = sample_request(prompt), d;
    m.grammar = (char *)gram;
    m.grammar_len = (uint32_t)strlen(gram);
    dy_buf b = {0};
    assert_true(dy_wire_request(&b, &m));
    dy_msg_type t;
    const uint8_t *p;
    uint32_t len;
    one_frame(&b, &t, &p, &len);
    char err[128];
    assert_true(dy_wire_decode_request(p, len, &d, err, sizeof err));
    assert_int_equal(d.grammar_len, strlen(gram));
    assert_string_equal(d.grammar, gram);
    assert_int_equal(d.n_prompt, 4);
    assert_memory_equal(d.prompt, prompt, sizeof prompt);
    dy_msg_request_free(&d);
    assert_null(d.grammar);
    for (uint32_t n = 0; n < len; n++) {
        assert_false(dy_wire_decode_request(p, n, &d, err, sizeof err));
        dy_msg_request_free(&d);
    }
    dy_buf_free(&b);

    /* No grammar is length 0 on the wire and NULL after decoding. */
    m.grammar = NULL;
    m.grammar_len = 5; /* ignored without text */
    assert_true(dy_wire_request(&b, &m));
    one_frame(&b, &t, &p, &len);
    assert_true(dy_wire_decode_request(p, len, &d, err, sizeof err));
    assert_null(d.grammar);
    assert_int_equal(d.grammar_len, 0);
    dy_msg_request_free(&d);
    dy_buf_free(&b);
}

/* Past DY_WIRE_MAX_GRAMMAR the encoder refuses, and so does the decoder given such a length;
 * a NUL inside the text is refused too. */
static void test_request_grammar_limits(void **st)
{
    (void)st;
    int32_t prompt[4] = {1, 403, 407, 261};
    size_t big = (size_t)DY_WIRE_MAX_GRAMMAR + 1;
    char *text = malloc(big + 1);
    assert_non_null(text);
    memset(text, 'a', big);
    text[big] = 0;
    dy_msg_request m = sample_request(prompt), d;
    m.grammar = text;
    m.grammar_len = (uint32_t)big;
    dy_buf b = {0};
    assert_false(dy_wire_request(&b, &m));
    assert_int_equal(b.len, 0);

    /* Encode at the limit, then raise the length field by one on the wire. */
    m.grammar_len = DY_WIRE_MAX_GRAMMAR;
    assert_true(dy_wire_request(&b, &m));
    dy_msg_type t;
    const uint8_t *p;
    uint32_t len;
    one_frame(&b, &t, &p, &len);
    char err[128];
    assert_true(dy_wire_decode_request(p, len, &d, err, sizeof err));
    assert_int_equal(d.grammar_len, DY_WIRE_MAX_GRAMMAR);
    dy_msg_request_free(&d);
    size_t at = len - 4 * 4 - 4 - DY_WIRE_MAX_GRAMMAR - 4; /* the grammar's length field */
    uint32_t got;
    memcpy(&got, p + at, 4);
    assert_int_equal(got, DY_WIRE_MAX_GRAMMAR);
    uint8_t *q = malloc(len);
    memcpy(q, p, len);
    uint32_t more = DY_WIRE_MAX_GRAMMAR + 1;
    memcpy(q + at, &more, 4);
    assert_false(dy_wire_decode_request(q, len, &d, err, sizeof err));
    assert_non_null(strstr(err, "exceeds"));
    dy_msg_request_free(&d);

    /* A NUL byte inside the text. */
    q[at + 4 + 10] = 0;
    memcpy(q + at, &got, 4);
    assert_false(dy_wire_decode_request(q, len, &d, err, sizeof err));
    assert_non_null(strstr(err, "NUL"));
    dy_msg_request_free(&d);
    free(q);
    free(text);
    dy_buf_free(&b);
}

static void test_other_messages_round_trip(void **st)
{
    (void)st;
    char err[128];
    dy_buf b = {0};
    dy_msg_type t;
    const uint8_t *p;
    uint32_t len;

    dy_msg_token tok = {.id = 9, .token = 42, .logprob = -0.5f, .n_top = 2, .top_ids = {42, 7},
                        .top_logprobs = {-0.5f, -1.5f}, .text = "caf\xc3\xa9", .text_len = 5}, tk;
    assert_true(dy_wire_token(&b, &tok));
    one_frame(&b, &t, &p, &len);
    assert_true(dy_wire_decode_token(p, len, &tk, err, sizeof err));
    assert_int_equal(tk.token, 42);
    assert_int_equal(tk.n_top, 2);
    assert_int_equal(tk.top_ids[1], 7);
    assert_memory_equal(tk.text, "caf\xc3\xa9", 5);

    b.len = 0;
    dy_msg_done done = {.id = 9, .finish = DY_END_LENGTH, .prompt_tokens = 5, .cached_tokens = 16,
                        .completion_tokens = 3, .queue_us = 250, .tier_outcome = 1,
                        .tier_tokens = 64, .tier_load_us = 300, .tier_recompute_us = UINT32_MAX, .tier_wait_us = 77,
                        .text = "end", .text_len = 3}, dn;
    assert_true(dy_wire_done(&b, &done));
    one_frame(&b, &t, &p, &len);
    assert_true(dy_wire_decode_done(p, len, &dn, err, sizeof err));
    assert_int_equal(dn.finish, DY_END_LENGTH);
    assert_int_equal(dn.cached_tokens, 16);
    assert_int_equal(dn.queue_us, 250);
    assert_int_equal(dn.tier_outcome, 1);
    assert_int_equal(dn.tier_tokens, 64);
    assert_int_equal(dn.tier_load_us, 300);
    assert_true(dn.tier_recompute_us == UINT32_MAX);
    assert_int_equal(dn.tier_wait_us, 77);
    b.len = 0;
    done.tier_outcome = DY_WIRE_MAX_TIER_OUTCOME + 1;
    assert_true(dy_wire_done(&b, &done));
    one_frame(&b, &t, &p, &len);
    assert_false(dy_wire_decode_done(p, len, &dn, err, sizeof err));

    b.len = 0;
    dy_msg_stats stats = {.running = 3, .waiting = 1, .queued_prefill_tokens = 99,
                          .kv_blocks_used = 10, .kv_blocks_total = 100, .steps = 7,
                          .step_seconds = 0.25, .active_decode_blocks = 12,
                          .kv_event_seq = 1234567890123ull, .shm_bytes = 3ull << 32,
                          .tiers = {{.on = 1, .slots = 100, .used = 40, .blocks_in = 50,
                                     .blocks_out = 7, .bytes_in = 5000, .bytes_out = 700,
                                     .seconds_in = 0.5, .seconds_out = 0.125, .evicted = 2},
                                    {.on = 0, .slots = 10, .used = 0, .bad = 3, .errors = 1}},
                          .tier_loads = 6, .tier_recomputes = 2, .tier_load_failures = 1}, sd;
    assert_true(dy_wire_stats(&b, &stats));
    one_frame(&b, &t, &p, &len);
    assert_true(dy_wire_decode_stats(p, len, &sd, err, sizeof err));
    const dy_msg_tier_stats *h0 = &sd.tiers[0];
    assert_true(h0->on == 1 && h0->slots == 100 && h0->used == 40 && h0->blocks_in == 50 &&
                h0->blocks_out == 7 && h0->bytes_in == 5000 && h0->bytes_out == 700 &&
                h0->seconds_in == 0.5 && h0->seconds_out == 0.125 && h0->evicted == 2);
    assert_true(sd.tiers[1].bad == 3 && sd.tiers[1].errors == 1 && sd.tiers[1].slots == 10);
    assert_true(sd.tier_loads == 6 && sd.tier_recomputes == 2 && sd.tier_load_failures == 1);
    assert_int_equal(sd.queued_prefill_tokens, 99);
    assert_true(sd.step_seconds == 0.25);
    assert_int_equal(sd.active_decode_blocks, 12);
    assert_true(sd.kv_event_seq == 1234567890123ull);
    assert_true(sd.shm_bytes == 3ull << 32);
    for (uint32_t n = 0; n < len; n++)
        assert_false(dy_wire_decode_stats(p, n, &sd, err, sizeof err));

    b.len = 0;
    dy_msg_hello h = {1, 2, 3, 4, 5, 6, 16, DY_ROLE_DECODE, 4096, "/dyad-kv-1-0", "10.0.0.2:7000"}, hd;
    assert_true(dy_wire_hello(&b, &h));
    one_frame(&b, &t, &p, &len);
    assert_true(dy_wire_decode_hello(p, len, &hd, err, sizeof err));
    assert_int_equal(hd.block_size, 16);
    assert_int_equal(hd.role, DY_ROLE_DECODE);
    assert_string_equal(hd.shm_name, "/dyad-kv-1-0");
    assert_string_equal(hd.tcp_addr, "10.0.0.2:7000");
    dy_buf_free(&b);
}

/* The disaggregation messages round-trip, and truncations are rejected. */
static void test_disagg_messages_round_trip(void **st)
{
    (void)st;
    char err[128];
    dy_buf b = {0};
    dy_msg_type t;
    const uint8_t *p;
    uint32_t len;
    int32_t blocks[3] = {7, 9, 11}, prompt[5] = {1, 2, 3, 4, 5};

    dy_msg_kv_alloc a = {.id = 5, .cached_tokens = 32, .first_block = 2, .n_blocks = 3, .blocks = blocks}, ad;
    assert_true(dy_wire_kv_alloc(&b, &a));
    one_frame(&b, &t, &p, &len);
    assert_int_equal(t, DY_MSG_KV_ALLOC);
    assert_true(dy_wire_decode_kv_alloc(p, len, &ad, err, sizeof err));
    assert_int_equal(ad.first_block, 2);
    assert_int_equal(ad.n_blocks, 3);
    assert_memory_equal(ad.blocks, blocks, sizeof blocks);
    dy_msg_kv_alloc_free(&ad);
    for (uint32_t n = 0; n < len; n++) {
        assert_false(dy_wire_decode_kv_alloc(p, n, &ad, err, sizeof err));
        dy_msg_kv_alloc_free(&ad);
    }

    b.len = 0;
    dy_msg_prefill pf = {.id = 6, .xfer = DY_XFER_TCP, .peer = "127.0.0.1:9", .first_block = 1,
                         .n_blocks = 3, .dest = blocks, .n_prompt = 5, .prompt = prompt}, pd;
    assert_true(dy_wire_prefill(&b, &pf));
    one_frame(&b, &t, &p, &len);
    assert_true(dy_wire_decode_prefill(p, len, &pd, err, sizeof err));
    assert_string_equal(pd.peer, "127.0.0.1:9");
    assert_int_equal(pd.n_prompt, 5);
    assert_memory_equal(pd.prompt, prompt, sizeof prompt);
    assert_memory_equal(pd.dest, blocks, sizeof blocks);
    dy_msg_prefill_free(&pd);
    for (uint32_t n = 0; n < len; n++) {
        assert_false(dy_wire_decode_prefill(p, n, &pd, err, sizeof err));
        dy_msg_prefill_free(&pd);
    }
    /* over UCX: the same frame; a transfer kind past the known ones is refused */
    for (int k = DY_XFER_UCX; k <= DY_XFER_UCX + 1; k++) {
        b.len = 0;
        pf.xfer = (uint8_t)k;
        assert_true(dy_wire_prefill(&b, &pf));
        one_frame(&b, &t, &p, &len);
        assert_int_equal(dy_wire_decode_prefill(p, len, &pd, err, sizeof err), k == DY_XFER_UCX);
        if (k == DY_XFER_UCX)
            assert_int_equal(pd.xfer, DY_XFER_UCX);
        else
            assert_non_null(strstr(err, "unknown transfer kind"));
        dy_msg_prefill_free(&pd);
    }

    b.len = 0;
    dy_msg_prefill_done dn = {.id = 6, .ok = 1, .bytes = 1 << 20, .prefill_seconds = 0.5,
                              .transfer_seconds = 0.01, .computed_tokens = 100, .text = "", .text_len = 0}, dd;
    assert_true(dy_wire_prefill_done(&b, &dn));
    one_frame(&b, &t, &p, &len);
    assert_true(dy_wire_decode_prefill_done(p, len, &dd, err, sizeof err));
    assert_int_equal(dd.bytes, 1 << 20);
    assert_true(dd.transfer_seconds == 0.01);

    b.len = 0;
    dy_msg_kv_ready r = {6, 1, 3}, rd;
    assert_true(dy_wire_kv_ready(&b, &r));
    one_frame(&b, &t, &p, &len);
    assert_true(dy_wire_decode_kv_ready(p, len, &rd, err, sizeof err));
    assert_int_equal(rd.n_blocks, 3);
    dy_buf_free(&b);
}

static void test_bad_headers_and_fields(void **st)
{
    (void)st;
    char err[128];
    uint8_t h[DY_WIRE_HEADER];
    dy_msg_type t;
    uint32_t len;
    dy_buf b = {0};
    dy_wire_shutdown(&b);
    memcpy(h, b.data, DY_WIRE_HEADER);
    assert_true(dy_wire_header(h, &t, &len, err, sizeof err));
    h[0] ^= 1;
    assert_false(dy_wire_header(h, &t, &len, err, sizeof err));
    assert_non_null(strstr(err, "magic"));
    memcpy(h, b.data, DY_WIRE_HEADER);
    h[4] = 9; /* version */
    assert_false(dy_wire_header(h, &t, &len, err, sizeof err));
    memcpy(h, b.data, DY_WIRE_HEADER);
    h[6] = 99; /* type */
    assert_false(dy_wire_header(h, &t, &len, err, sizeof err));
    memcpy(h, b.data, DY_WIRE_HEADER);
    uint32_t huge = DY_WIRE_MAX_PAYLOAD + 1;
    memcpy(h + 8, &huge, 4);
    assert_false(dy_wire_header(h, &t, &len, err, sizeof err));
    /* A DONE with an unknown finish reason; a TOKEN with a NaN logprob. */
    b.len = 0;
    dy_msg_done d = {.id = 1, .finish = 9, .text = "", .text_len = 0}, dd;
    dy_wire_done(&b, &d);
    assert_false(dy_wire_decode_done(b.data + DY_WIRE_HEADER, b.len - DY_WIRE_HEADER, &dd, err, sizeof err));
    b.len = 0;
    dy_msg_token tk = {.id = 1, .logprob = __builtin_nanf(""), .text = "", .text_len = 0}, td;
    dy_wire_token(&b, &tk);
    assert_false(dy_wire_decode_token(b.data + DY_WIRE_HEADER, b.len - DY_WIRE_HEADER, &td, err, sizeof err));
    dy_buf_free(&b);
}

/* Frames written to a socket one byte at a time come out whole and in order. */
static void test_stream_reassembly(void **st)
{
    (void)st;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    dy_buf b = {0};
    int32_t prompt[4] = {1, 2, 3, 4};
    dy_msg_request m = sample_request(prompt);
    dy_wire_request(&b, &m);
    dy_msg_cancel c = {5};
    dy_wire_cancel(&b, &c);
    dy_wire_shutdown(&b);
    dy_conn conn;
    dy_conn_init(&conn, sv[1]);
    dy_msg_type seen[3];
    int n = 0;
    char err[128];
    for (size_t i = 0; i < b.len; i++) {
        assert_int_equal(write(sv[0], b.data + i, 1), 1);
        assert_true(dy_conn_fill(&conn) > 0);
        dy_msg_type t;
        const uint8_t *p;
        uint32_t len;
        while (dy_conn_next(&conn, &t, &p, &len, err, sizeof err) == DY_CONN_FRAME)
            seen[n++] = t;
    }
    assert_int_equal(n, 3);
    assert_int_equal(seen[0], DY_MSG_REQUEST);
    assert_int_equal(seen[1], DY_MSG_CANCEL);
    assert_int_equal(seen[2], DY_MSG_SHUTDOWN);
    close(sv[0]);
    assert_int_equal(dy_conn_fill(&conn), 0); /* end of stream */
    dy_conn_free(&conn);
    close(sv[1]);
    dy_buf_free(&b);
}

/* Every strict prefix of the payload, and the payload plus one byte, fail to decode. */
#define ASSERT_EXACT_LENGTH(decode, free_fn, msg_t, p, len)                              \
    do {                                                                                 \
        char e_[128];                                                                    \
        msg_t m_;                                                                        \
        for (uint32_t n_ = 0; n_ < (len); n_++) {                                        \
            assert_false(decode((p), n_, &m_, e_, sizeof e_));                           \
            free_fn(&m_);                                                                \
        }                                                                                \
        uint8_t *l_ = malloc((len) + 1);                                                 \
        memcpy(l_, (p), (len));                                                          \
        l_[(len)] = 0;                                                                   \
        assert_false(decode(l_, (len) + 1, &m_, e_, sizeof e_));                         \
        free_fn(&m_);                                                                    \
        free(l_);                                                                        \
    } while (0)

static void no_free(void *m) { (void)m; }

static void test_kv_events_round_trip(void **st)
{
    (void)st;
    char err[128];
    dy_buf b = {0};
    dy_msg_type t;
    const uint8_t *p;
    uint32_t len;
    dy_kv_event ev[3] = {{DY_KV_EV_STORED, 0, 0x1111222233334444ull, 0xaaaabbbbccccddddull},
                         {DY_KV_EV_REMOVED, 1, 5, 6},
                         {DY_KV_EV_CLEARED, 0, 0, 0}};
    dy_msg_kv_events m = {.worker_id = 3, .seq = 42, .n_events = 3, .events = ev}, d;
    assert_true(dy_wire_kv_events(&b, &m));
    one_frame(&b, &t, &p, &len);
    assert_int_equal(t, DY_MSG_KV_EVENTS);
    assert_int_equal(len, 16 + 3 * 18);
    assert_true(dy_wire_decode_kv_events(p, len, &d, err, sizeof err));
    assert_int_equal(d.worker_id, 3);
    assert_true(d.seq == 42);
    assert_int_equal(d.n_events, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(d.events[i].kind, ev[i].kind);
        assert_int_equal(d.events[i].tier, ev[i].tier);
        assert_true(d.events[i].hash == ev[i].hash && d.events[i].parent == ev[i].parent);
    }
    dy_msg_kv_events_free(&d);
    ASSERT_EXACT_LENGTH(dy_wire_decode_kv_events, dy_msg_kv_events_free, dy_msg_kv_events, p, len);

    /* An empty batch is fine; seq 0 is not (batches start at 1). */
    b.len = 0;
    m.n_events = 0;
    assert_true(dy_wire_kv_events(&b, &m));
    one_frame(&b, &t, &p, &len);
    assert_true(dy_wire_decode_kv_events(p, len, &d, err, sizeof err));
    assert_int_equal(d.n_events, 0);
    dy_msg_kv_events_free(&d);
    m.seq = 0;
    assert_false(dy_wire_kv_events(&b, &m));
    dy_buf_free(&b);
}

static void test_kv_snapshot_and_resync_round_trip(void **st)
{
    (void)st;
    char err[128];
    dy_buf b = {0};
    dy_msg_type t;
    const uint8_t *p;
    uint32_t len;
    dy_kv_event blocks[2] = {{DY_KV_EV_STORED, 0, 7, 8}, {DY_KV_EV_STORED, 2, ~0ull, 0}};
    dy_msg_kv_snapshot s = {.worker_id = 1, .seq = 9, .part = 1, .n_parts = 3, .n_blocks = 2,
                            .blocks = blocks}, sd;
    assert_true(dy_wire_kv_snapshot(&b, &s));
    one_frame(&b, &t, &p, &len);
    assert_int_equal(t, DY_MSG_KV_SNAPSHOT);
    assert_int_equal(len, 24 + 2 * 17);
    assert_true(dy_wire_decode_kv_snapshot(p, len, &sd, err, sizeof err));
    assert_true(sd.seq == 9);
    assert_int_equal(sd.part, 1);
    assert_int_equal(sd.n_parts, 3);
    assert_int_equal(sd.n_blocks, 2);
    assert_true(sd.blocks[1].hash == ~0ull && sd.blocks[1].parent == 0);
    assert_int_equal(sd.blocks[1].tier, 2);
    assert_int_equal(sd.blocks[1].kind, DY_KV_EV_STORED);
    dy_msg_kv_snapshot_free(&sd);
    ASSERT_EXACT_LENGTH(dy_wire_decode_kv_snapshot, dy_msg_kv_snapshot_free, dy_msg_kv_snapshot,
                        p, len);

    b.len = 0;
    dy_msg_kv_resync r = {DY_RESYNC_GAP, 17}, rd;
    assert_true(dy_wire_kv_resync(&b, &r));
    one_frame(&b, &t, &p, &len);
    assert_int_equal(t, DY_MSG_KV_RESYNC);
    assert_true(dy_wire_decode_kv_resync(p, len, &rd, err, sizeof err));
    assert_int_equal(rd.reason, DY_RESYNC_GAP);
    assert_true(rd.seen_seq == 17);
    ASSERT_EXACT_LENGTH(dy_wire_decode_kv_resync, no_free, dy_msg_kv_resync, p, len);

    b.len = 0;
    dy_msg_role ro = {DY_ROLE_DECODE}, rod;
    assert_true(dy_wire_role(&b, &ro));
    one_frame(&b, &t, &p, &len);
    assert_int_equal(t, DY_MSG_ROLE);
    assert_true(dy_wire_decode_role(p, len, &rod, err, sizeof err));
    assert_int_equal(rod.role, DY_ROLE_DECODE);
    ASSERT_EXACT_LENGTH(dy_wire_decode_role, no_free, dy_msg_role, p, len);
    dy_msg_role bad_role = {7};
    assert_false(dy_wire_role(&b, &bad_role));
    uint8_t raw = 3;
    assert_false(dy_wire_decode_role(&raw, 1, &rod, err, sizeof err));

    /* PEER_GONE names a decode worker's pool; an empty name, a NUL inside it or one over
     * DY_WIRE_MAX_PEER bytes is refused. */
    b.len = 0;
    dy_msg_peer_gone g = {"/dyad-kv-123-1"}, gd;
    assert_true(dy_wire_peer_gone(&b, &g));
    one_frame(&b, &t, &p, &len);
    assert_int_equal(t, DY_MSG_PEER_GONE);
    assert_int_equal(len, 4 + strlen(g.peer));
    assert_true(dy_wire_decode_peer_gone(p, len, &gd, err, sizeof err));
    assert_string_equal(gd.peer, "/dyad-kv-123-1");
    ASSERT_EXACT_LENGTH(dy_wire_decode_peer_gone, no_free, dy_msg_peer_gone, p, len);

    dy_msg_peer_gone empty = {""};
    assert_false(dy_wire_peer_gone(&b, &empty));
    uint8_t zero[4] = {0, 0, 0, 0};
    assert_false(dy_wire_decode_peer_gone(zero, 4, &gd, err, sizeof err));
    uint8_t nul[6] = {2, 0, 0, 0, 'a', 0};
    assert_false(dy_wire_decode_peer_gone(nul, 6, &gd, err, sizeof err));
    assert_non_null(strstr(err, "NUL"));
    uint8_t *big = calloc(1, 4 + DY_WIRE_MAX_PEER + 1);
    uint32_t n = DY_WIRE_MAX_PEER + 1;
    memcpy(big, &n, 4);
    memset(big + 4, 'x', n);
    assert_false(dy_wire_decode_peer_gone(big, 4 + n, &gd, err, sizeof err));
    free(big);
    dy_buf_free(&b);
}

/* Bad fields and lying counts are rejected, by the encoder and by the decoder. */
static void test_kv_frames_bad_fields(void **st)
{
    (void)st;
    char err[128];
    dy_buf b = {0};
    dy_kv_event ev[2] = {{DY_KV_EV_STORED, 0, 1, 2}, {DY_KV_EV_REMOVED, 0, 1, 2}};
    dy_msg_kv_events m = {.worker_id = 0, .seq = 1, .n_events = 2, .events = ev}, d;
    /* Encoders refuse what the decoders would. */
    ev[1].kind = 3;
    assert_false(dy_wire_kv_events(&b, &m));
    ev[1].kind = DY_KV_EV_REMOVED;
    ev[1].tier = DY_WIRE_MAX_KV_TIER + 1;
    assert_false(dy_wire_kv_events(&b, &m));
    ev[1].tier = 0;
    m.n_events = DY_WIRE_MAX_KV_EVENTS + 1;
    assert_false(dy_wire_kv_events(&b, &m));
    assert_int_equal(b.len, 0);
    m.n_events = 2;
    dy_msg_kv_snapshot s = {.seq = 1, .part = 2, .n_parts = 2, .n_blocks = 2, .blocks = ev};
    assert_false(dy_wire_kv_snapshot(&b, &s));
    s.part = 0;
    s.n_parts = 0;
    assert_false(dy_wire_kv_snapshot(&b, &s));
    s.n_parts = 1;
    s.n_blocks = DY_WIRE_MAX_KV_BLOCKS + 1;
    assert_false(dy_wire_kv_snapshot(&b, &s));
    s.n_blocks = 2;
    dy_msg_kv_resync r = {0, 0};
    assert_false(dy_wire_kv_resync(&b, &r));
    assert_int_equal(b.len, 0);

    /* Decoders: corrupt one field of a good frame at a time. */
    assert_true(dy_wire_kv_events(&b, &m));
    uint8_t *p = b.data + DY_WIRE_HEADER;
    size_t n = b.len - DY_WIRE_HEADER;
    const size_t ev1 = 16 + 18; /* the second event */
    p[ev1] = 7; /* kind */
    assert_false(dy_wire_decode_kv_events(p, n, &d, err, sizeof err));
    assert_null(d.events); /* a failed decode frees what it allocated */
    assert_non_null(strstr(err, "kind"));
    p[ev1] = DY_KV_EV_CLEARED; /* with a hash */
    assert_false(dy_wire_decode_kv_events(p, n, &d, err, sizeof err));
    p[ev1] = DY_KV_EV_REMOVED;
    p[ev1 + 1] = DY_WIRE_MAX_KV_TIER + 1;
    assert_false(dy_wire_decode_kv_events(p, n, &d, err, sizeof err));
    p[ev1 + 1] = 0;
    assert_true(dy_wire_decode_kv_events(p, n, &d, err, sizeof err));
    dy_msg_kv_events_free(&d);
    uint32_t lie = 0xffffffffu; /* n far beyond the bytes: rejected before any allocation */
    memcpy(p + 12, &lie, 4);
    assert_false(dy_wire_decode_kv_events(p, n, &d, err, sizeof err));
    lie = 3;
    memcpy(p + 12, &lie, 4);
    assert_false(dy_wire_decode_kv_events(p, n, &d, err, sizeof err));
    lie = 1; /* one event and 18 bytes left over */
    memcpy(p + 12, &lie, 4);
    assert_false(dy_wire_decode_kv_events(p, n, &d, err, sizeof err));
    memset(p + 4, 0, 8); /* seq 0 */
    lie = 2;
    memcpy(p + 12, &lie, 4);
    assert_false(dy_wire_decode_kv_events(p, n, &d, err, sizeof err));

    b.len = 0;
    assert_true(dy_wire_kv_snapshot(&b, &s));
    p = b.data + DY_WIRE_HEADER;
    n = b.len - DY_WIRE_HEADER;
    dy_msg_kv_snapshot sd;
    uint32_t v = 1; /* part 1 of 1 */
    memcpy(p + 12, &v, 4);
    assert_false(dy_wire_decode_kv_snapshot(p, n, &sd, err, sizeof err));
    v = 0;
    memcpy(p + 12, &v, 4);
    memcpy(p + 16, &v, 4); /* of 0 parts */
    assert_false(dy_wire_decode_kv_snapshot(p, n, &sd, err, sizeof err));
    v = 1;
    memcpy(p + 16, &v, 4);
    p[24 + 16] = DY_WIRE_MAX_KV_TIER + 1; /* the first block's tier */
    assert_false(dy_wire_decode_kv_snapshot(p, n, &sd, err, sizeof err));
    assert_null(sd.blocks);
    p[24 + 16] = 0;
    v = 0x10000000u;
    memcpy(p + 20, &v, 4);
    assert_false(dy_wire_decode_kv_snapshot(p, n, &sd, err, sizeof err));
    v = 2;
    memcpy(p + 20, &v, 4);
    assert_true(dy_wire_decode_kv_snapshot(p, n, &sd, err, sizeof err));
    dy_msg_kv_snapshot_free(&sd);

    uint8_t rs[9] = {4};
    dy_msg_kv_resync rd;
    assert_false(dy_wire_decode_kv_resync(rs, 9, &rd, err, sizeof err));
    rs[0] = DY_RESYNC_ERROR;
    assert_true(dy_wire_decode_kv_resync(rs, 9, &rd, err, sizeof err));
    dy_buf_free(&b);
}

/* The largest batch and snapshot part fit a frame. */
static void test_kv_frames_at_the_limit(void **st)
{
    (void)st;
    char err[128];
    dy_kv_event *ev = calloc(DY_WIRE_MAX_KV_EVENTS, sizeof *ev);
    for (int i = 0; i < DY_WIRE_MAX_KV_EVENTS; i++)
        ev[i] = (dy_kv_event){DY_KV_EV_STORED, 0, (uint64_t)i + 1, (uint64_t)i};
    dy_buf b = {0};
    dy_msg_kv_events m = {.seq = 1, .n_events = DY_WIRE_MAX_KV_EVENTS, .events = ev}, d;
    assert_true(dy_wire_kv_events(&b, &m));
    assert_true(dy_wire_decode_kv_events(b.data + DY_WIRE_HEADER, b.len - DY_WIRE_HEADER, &d, err,
                                         sizeof err));
    assert_true(d.events[DY_WIRE_MAX_KV_EVENTS - 1].hash == DY_WIRE_MAX_KV_EVENTS);
    dy_msg_kv_events_free(&d);
    b.len = 0;
    dy_msg_kv_snapshot s = {.n_parts = 1, .n_blocks = DY_WIRE_MAX_KV_BLOCKS, .blocks = ev}, sd;
    assert_true(dy_wire_kv_snapshot(&b, &s));
    assert_true(dy_wire_decode_kv_snapshot(b.data + DY_WIRE_HEADER, b.len - DY_WIRE_HEADER, &sd,
                                           err, sizeof err));
    assert_int_equal(sd.n_blocks, DY_WIRE_MAX_KV_BLOCKS);
    dy_msg_kv_snapshot_free(&sd);
    dy_buf_free(&b);
    free(ev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_round_trip),
        cmocka_unit_test(test_request_grammar),
        cmocka_unit_test(test_request_grammar_limits),
        cmocka_unit_test(test_other_messages_round_trip),
        cmocka_unit_test(test_disagg_messages_round_trip),
        cmocka_unit_test(test_bad_headers_and_fields),
        cmocka_unit_test(test_stream_reassembly),
        cmocka_unit_test(test_kv_events_round_trip),
        cmocka_unit_test(test_kv_snapshot_and_resync_round_trip),
        cmocka_unit_test(test_kv_frames_bad_fields),
        cmocka_unit_test(test_kv_frames_at_the_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
