/* test_cluster_registry.c — the worker registry's entries (serve/cluster/registry.h), without
 * NATS: every field survives an encode and a decode; keys are written and parsed as "w" and 8
 * lowercase hex digits; a table of bad values (each field missing, of the wrong type, out of
 * range; bad names; strings too long or with control characters; not JSON, not an object,
 * too large) is refused with the field named first in the message; the lease is told as
 * renewed or EXPIRED; and the NATS URLs of nats_conn.h are checked. */
#include "testutil.h"
#include "kv/kv_pool.h"
#include "serve/cluster/nats_conn.h"
#include "serve/cluster/registry.h"
#include "serve/wire/wire.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static dy_reg_entry sample(void)
{
    dy_reg_entry e = {
        .id = 0xdeadbeef, .pid = 4242, .role = DY_ROLE_DECODE,
        .fingerprint = 0xfedcba9876543210ull, .block_size = 16, .kv_blocks = 4096,
        .kv_type = DY_KV_Q8_0, .kv_transfer = DY_XFER_UCX, .threads = 2, .lease_s = 3.25,
        .draining = true, .load = {.running = 2, .waiting = 7, .kv_used = 120, .kv_total = 4096},
    };
    strcpy(e.incarnation, "5f0c9a");
    strcpy(e.host, "hostA");
    strcpy(e.model, "stories260K.bin");
    strcpy(e.kv_addr, "10.0.0.2:39211");
    return e;
}

static void assert_same(const dy_reg_entry *a, const dy_reg_entry *b)
{
    assert_int_equal(a->id, b->id);
    assert_string_equal(a->incarnation, b->incarnation);
    assert_string_equal(a->host, b->host);
    assert_int_equal(a->pid, b->pid);
    assert_int_equal(a->role, b->role);
    assert_string_equal(a->model, b->model);
    assert_true(a->fingerprint == b->fingerprint);
    assert_int_equal(a->block_size, b->block_size);
    assert_int_equal(a->kv_blocks, b->kv_blocks);
    assert_int_equal(a->kv_type, b->kv_type);
    assert_string_equal(a->kv_addr, b->kv_addr);
    assert_int_equal(a->kv_transfer, b->kv_transfer);
    assert_int_equal(a->threads, b->threads);
    assert_true(a->lease_s == b->lease_s);
    assert_int_equal(a->draining, b->draining);
    assert_int_equal(a->load.running, b->load.running);
    assert_int_equal(a->load.waiting, b->load.waiting);
    assert_int_equal(a->load.kv_used, b->load.kv_used);
    assert_int_equal(a->load.kv_total, b->load.kv_total);
}

static void round_trip(const dy_reg_entry *e)
{
    char buf[DY_REG_MAX_VALUE + 1], err[256] = "";
    int n = dy_reg_encode(e, buf, sizeof buf);
    assert_true(n > 0);
    assert_int_equal(strlen(buf), n);
    dy_reg_entry back;
    if (!dy_reg_decode(buf, (size_t)n, &back, err, sizeof err))
        fail_msg("%s does not decode: %s", buf, err);
    assert_same(e, &back);
}

static void test_round_trip(void **state)
{
    (void)state;
    dy_reg_entry e = sample();
    round_trip(&e);
    /* every name of each enumerated field, and the other extremes */
    for (int r = DY_ROLE_AGG; r <= DY_ROLE_DECODE; r++) {
        e.role = r;
        round_trip(&e);
    }
    for (int t = 0; t < DY_KV_N_TYPES; t++) {
        e.kv_type = t;
        round_trip(&e);
    }
    e.kv_transfer = DY_XFER_TCP;
    round_trip(&e);
    e.kv_transfer = 0; /* a prefill worker: no receiver */
    e.kv_addr[0] = 0;
    e.id = 0xffffffffu;
    e.pid = 1;
    e.fingerprint = ~0ull; /* past 2^53: why it is a hex string */
    e.block_size = 256;
    e.threads = 256;
    e.lease_s = 3600;
    e.draining = false;
    e.load = (dy_reg_load){0xffffffffu, 0, 0xffffffffu, 0xffffffffu};
    memset(e.host, 'h', DY_REG_MAX_STR);
    e.host[DY_REG_MAX_STR] = 0;
    round_trip(&e);
    e.id = 0;
    e.lease_s = 1e-3;
    e.fingerprint = 0;
    round_trip(&e);
}

static void test_encode_refuses(void **state)
{
    (void)state;
    char buf[DY_REG_MAX_VALUE + 1];
    dy_reg_entry e = sample();
    int n = dy_reg_encode(&e, buf, sizeof buf);
    assert_true(n > 0);
    assert_int_equal(dy_reg_encode(&e, buf, (size_t)n), -1); /* no room for the NUL */
    assert_int_equal(dy_reg_encode(&e, buf, (size_t)n + 1), n);
    e.role = 7;
    assert_int_equal(dy_reg_encode(&e, buf, sizeof buf), -1);
    e = sample();
    e.kv_type = DY_KV_N_TYPES;
    assert_int_equal(dy_reg_encode(&e, buf, sizeof buf), -1);
    e = sample();
    e.kv_transfer = DY_XFER_SHM; /* not across hosts */
    assert_int_equal(dy_reg_encode(&e, buf, sizeof buf), -1);
}

static void test_keys(void **state)
{
    (void)state;
    char key[DY_REG_KEY_LEN + 1];
    uint32_t id = 0;
    dy_reg_key(0xdeadbeef, key);
    assert_string_equal(key, "wdeadbeef");
    dy_reg_key(1, key);
    assert_string_equal(key, "w00000001");
    assert_true(dy_reg_parse_key(key, &id));
    assert_int_equal(id, 1);
    assert_true(dy_reg_parse_key("wffffffff", &id));
    assert_int_equal(id, 0xffffffffu);
    static const char *const bad[] = {"", "w", "w1234567", "wdeadbeef0", "xdeadbeef",
                                      "wdeadbeeg", "wDEADBEEF", "w-1234567", "w 1234567",
                                      "Wdeadbeef"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        id = 77;
        if (dy_reg_parse_key(bad[i], &id))
            fail_msg("'%s' parsed as a worker's key", bad[i]);
        assert_int_equal(id, 77);
    }
    assert_false(dy_reg_parse_key(NULL, &id));
}

/* One change to the sample's JSON: field set to the JSON text value (NULL: removed), and the
 * field the refusal must name first. */
typedef struct {
    const char *field; /* "load.kv_used" for a field of the load object */
    const char *value;
    const char *named;
} bad_case;

#define LONG_STR "\"" \
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" \
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"" /* 129 bytes */
#define LONG_HEX "\"" \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\""

static const bad_case bad_cases[] = {
    /* wrong types */
    {"id", "\"1\"", "id"}, {"id", "1.5", "id"}, {"incarnation", "5", "incarnation"},
    {"host", "null", "host"}, {"pid", "true", "pid"}, {"role", "2", "role"},
    {"model", "[]", "model"}, {"fingerprint", "12345", "fingerprint"},
    {"block_size", "\"16\"", "block_size"}, {"kv_blocks", "{}", "kv_blocks"},
    {"kv_type", "0", "kv_type"}, {"kv_addr", "7", "kv_addr"},
    {"kv_transfer", "3", "kv_transfer"}, {"threads", "2.0", "threads"},
    {"lease_s", "\"3\"", "lease_s"}, {"draining", "0", "draining"},
    {"draining", "\"false\"", "draining"}, {"load", "[1, 2]", "load"}, {"load", "5", "load"},
    {"load.running", "\"2\"", "load.running"}, {"load.waiting", "null", "load.waiting"},
    {"load.kv_used", "1e2", "load.kv_used"}, {"load.kv_total", "false", "load.kv_total"},
    /* out of range */
    {"id", "-1", "id"}, {"id", "4294967296", "id"}, {"pid", "0", "pid"},
    {"pid", "-5", "pid"}, {"block_size", "0", "block_size"}, {"block_size", "257", "block_size"},
    {"kv_blocks", "0", "kv_blocks"}, {"threads", "0", "threads"}, {"threads", "257", "threads"},
    {"lease_s", "0", "lease_s"}, {"lease_s", "-1", "lease_s"}, {"lease_s", "3600.5", "lease_s"},
    {"load.running", "-1", "load.running"}, {"load.kv_total", "4294967296", "load.kv_total"},
    {"load.kv_used", "4097", "load.kv_used"}, /* more than kv_total */
    /* names */
    {"role", "\"worker\"", "role"}, {"role", "\"AGG\"", "role"}, {"role", "\"\"", "role"},
    {"kv_type", "\"f8\"", "kv_type"}, {"kv_transfer", "\"shm\"", "kv_transfer"},
    {"kv_transfer", "\"\"", "kv_transfer"}, /* kv_addr is set */
    {"kv_addr", "\"\"", "kv_transfer"},      /* kv_transfer is set */
    /* strings */
    {"host", "\"\"", "host"}, {"model", "\"\"", "model"}, {"incarnation", "\"\"", "incarnation"},
    {"host", LONG_STR, "host"}, {"model", LONG_STR, "model"}, {"kv_addr", LONG_STR, "kv_addr"},
    {"incarnation", LONG_HEX, "incarnation"}, {"incarnation", "\"5f0z\"", "incarnation"},
    {"host", "\"host\\nA\"", "host"}, {"model", "\"m\\u001b[2J\"", "model"},
    {"host", "\"a\\u0000b\"", "value"}, /* jansson refuses a NUL inside a string */
    {"fingerprint", "\"0123456789abcde\"", "fingerprint"},
    {"fingerprint", "\"0123456789abcdef0\"", "fingerprint"},
    {"fingerprint", "\"0123456789abcdeg\"", "fingerprint"},
    {"fingerprint", "\"-123456789abcdef\"", "fingerprint"},
};

/* The sample's JSON with one change applied, as text (free()). */
static char *mutated(const bad_case *c)
{
    char buf[DY_REG_MAX_VALUE + 1];
    dy_reg_entry e = sample();
    assert_true(dy_reg_encode(&e, buf, sizeof buf) > 0);
    json_t *root = json_loads(buf, 0, NULL);
    assert_non_null(root);
    json_t *obj = root;
    const char *key = c->field;
    if (!strncmp(key, "load.", 5)) {
        obj = json_object_get(root, "load");
        key += 5;
    }
    if (c->value) {
        json_error_t je;
        json_t *v = json_loads(c->value, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!v)
            fail_msg("the test's value %s: %s", c->value, je.text);
        json_object_set_new(obj, key, v);
    } else
        assert_int_equal(json_object_del(obj, key), 0);
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    assert_non_null(text);
    return text;
}

static void expect_refused(const char *text, size_t len, const char *named)
{
    char err[256] = "";
    dy_reg_entry e;
    if (dy_reg_decode(text, len, &e, err, sizeof err))
        fail_msg("accepted: %.300s", text);
    size_t n = strlen(named);
    if (strncmp(err, named, n) || err[n] != ':')
        fail_msg("'%s' does not start with '%s:' (value %.200s)", err, named, text);
    assert_int_equal(e.id, 0); /* nothing half-decoded is left */
}

static void test_bad_values(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
        char *text = mutated(&bad_cases[i]);
        expect_refused(text, strlen(text), bad_cases[i].named);
        free(text);
    }
}

static void test_each_field_missing(void **state)
{
    (void)state;
    static const char *const all[] = {
        "id", "incarnation", "host", "pid", "role", "model", "fingerprint", "block_size",
        "kv_blocks", "kv_type", "kv_addr", "kv_transfer", "threads", "lease_s", "draining",
        "load", "load.running", "load.waiting", "load.kv_used", "load.kv_total"};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        bad_case c = {all[i], NULL, all[i]};
        char *text = mutated(&c);
        char err[256] = "";
        dy_reg_entry e;
        assert_false(dy_reg_decode(text, strlen(text), &e, err, sizeof err));
        char want[64];
        snprintf(want, sizeof want, "%s: missing", all[i]);
        assert_string_equal(err, want);
        free(text);
    }
}

static void test_bad_documents(void **state)
{
    (void)state;
    expect_refused("", 0, "value");
    expect_refused("{", 1, "value");
    expect_refused("[1, 2]", 6, "value");
    expect_refused("\"w\"", 3, "value");
    expect_refused("null", 4, "value");
    expect_refused("{} x", 4, "value"); /* bytes after the object */
    expect_refused("{\"id\": 1, \"id\": 2}", 18, "value"); /* a key twice */
    expect_refused("\xff\xfe{}", 4, "value");
    /* len, not a NUL, ends the value: the sample cut short is not an object */
    char buf[DY_REG_MAX_VALUE + 1];
    dy_reg_entry e = sample();
    int n = dy_reg_encode(&e, buf, sizeof buf);
    expect_refused(buf, (size_t)n - 1, "value");
    /* too large, even if it were valid: padded with spaces inside the object */
    char big[DY_REG_MAX_VALUE + 1];
    memset(big, ' ', sizeof big);
    memcpy(big, buf, (size_t)n - 1);
    big[sizeof big - 1] = '}';
    expect_refused(big, sizeof big, "value");
    char err[256];
    assert_false(dy_reg_decode(big, sizeof big, &e, err, sizeof err));
    assert_non_null(strstr(err, "4097 bytes, more than 4096"));
    /* and at the limit it is taken */
    big[DY_REG_MAX_VALUE - 1] = '}';
    assert_true(dy_reg_decode(big, DY_REG_MAX_VALUE, &e, err, sizeof err));
}

static void test_unknown_fields_ignored(void **state)
{
    (void)state;
    bad_case c = {"gpu", "\"h200\"", NULL};
    char *text = mutated(&c);
    char err[256];
    dy_reg_entry e, want = sample();
    assert_true(dy_reg_decode(text, strlen(text), &e, err, sizeof err));
    assert_same(&want, &e);
    free(text);
}

static void test_lease_state(void **state)
{
    (void)state;
    char s[96];
    assert_false(dy_reg_lease_state(0.8, 3, s, sizeof s));
    assert_string_equal(s, "renewed 0.8 s ago / lease 3 s");
    assert_false(dy_reg_lease_state(3, 3, s, sizeof s)); /* at the lease: still held */
    assert_true(dy_reg_lease_state(15, 3, s, sizeof s));
    assert_string_equal(s, "EXPIRED 12.0 s ago (lease 3 s)");
    assert_true(dy_reg_lease_state(0.75, 0.5, s, sizeof s));
    assert_string_equal(s, "EXPIRED 0.2 s ago (lease 0.5 s)");
}

static void test_nats_urls(void **state)
{
    (void)state;
    static const char *const good[] = {
        "nats://127.0.0.1:4222", "nats://nats.example.com:1", "nats://[::1]:65535",
        "nats://a:4222,nats://b:4223", "nats://host_1:4222"};
    static const char *const bad[] = {
        "", "127.0.0.1:4222", "http://h:4222", "nats://h", "nats://h:", "nats://:4222",
        "nats://h:0", "nats://h:65536", "nats://h:42x", "nats://h:4222,", ",nats://h:4222",
        "nats://h:4222,h2:4222", "nats://h h:4222", "nats://[]:4222", "nats://[::1:4222",
        "nats://user:pw@h:4222", "nats://h:4222/path", "nats://h:99999999999999999999"};
    char err[512];
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (!dy_nats_url_check(good[i], err, sizeof err))
            fail_msg("'%s' refused: %s", good[i], err);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        if (dy_nats_url_check(bad[i], err, sizeof err))
            fail_msg("'%s' accepted", bad[i]);
        assert_true(err[0] != 0);
    }
    assert_false(dy_nats_url_check(NULL, err, sizeof err));
    char huge[1100];
    memset(huge, 'a', sizeof huge);
    memcpy(huge, "nats://", 7);
    memcpy(huge + sizeof huge - 6, ":4222", 6);
    assert_false(dy_nats_url_check(huge, err, sizeof err));
    assert_non_null(strstr(err, "longer than"));
    char list[1024] = "";
    for (int i = 0; i < 33; i++)
        strcat(list, i ? ",nats://h:4222" : "nats://h:4222");
    assert_false(dy_nats_url_check(list, err, sizeof err)); /* 33 servers */
    assert_non_null(strstr(err, "more than 32 servers"));
    list[strlen(list) - strlen(",nats://h:4222")] = 0;
    assert_true(dy_nats_url_check(list, err, sizeof err));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_encode_refuses),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_each_field_missing),
        cmocka_unit_test(test_bad_documents),
        cmocka_unit_test(test_unknown_fields_ignored),
        cmocka_unit_test(test_lease_state),
        cmocka_unit_test(test_nats_urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
