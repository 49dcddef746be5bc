/* test_cluster_node.c — the pure half of the node agent (serve/cluster/node.h), without NATS:
 * an entry survives an encode and a decode; keys are "n" and 8 lowercase hex digits; bad
 * entries (each field missing or out of range, a worker's bad key, role or threads, a worker
 * twice, cores_used not the workers' threads or past the budget, too many workers, not JSON)
 * are refused with the field named first; the core budget refuses a worker past the free
 * cores and gives cores back when one ends; requests are decoded (every op, every bad field
 * named) and round-trip; answers are decoded, a refusal's error among them. */
#include "testutil.h"
#include "serve/cluster/node.h"
#include "serve/wire/wire.h"

#include <stdio.h>
#include <string.h>

static dy_node_entry sample(void)
{
    dy_node_entry e = {.id = 0x12345678, .pid = 4242, .cores = 8, .lease_s = 3.5};
    strcpy(e.incarnation, "5f0c9a");
    strcpy(e.host, "hostA");
    char err[256];
    assert_true(dy_node_add_worker(&e, 0x0a0b0c0d, DY_ROLE_AGG, 2, 4250, err, sizeof err));
    assert_true(dy_node_add_worker(&e, 0x01, DY_ROLE_DECODE, 3, 4251, err, sizeof err));
    return e;
}

static void test_round_trip(void **state)
{
    (void)state;
    dy_node_entry e = sample(), back;
    char buf[DY_NODE_MAX_VALUE + 1], err[256];
    int n = dy_node_encode(&e, buf, sizeof buf);
    assert_true(n > 0);
    assert_non_null(strstr(buf, "\"key\":\"w0a0b0c0d\""));
    assert_non_null(strstr(buf, "\"cores_used\":5"));
    assert_true(dy_node_decode(buf, (size_t)n, &back, err, sizeof err));
    assert_int_equal(back.id, e.id);
    assert_string_equal(back.incarnation, e.incarnation);
    assert_string_equal(back.host, e.host);
    assert_int_equal(back.pid, 4242);
    assert_int_equal(back.cores, 8);
    assert_int_equal(back.cores_used, 5);
    assert_true(back.lease_s == 3.5);
    assert_int_equal(back.n_workers, 2);
    assert_string_equal(back.workers[1].key, "w00000001");
    assert_int_equal(back.workers[1].id, 1);
    assert_int_equal(back.workers[1].role, DY_ROLE_DECODE);
    assert_int_equal(back.workers[1].threads, 3);
    assert_int_equal(back.workers[1].pid, 4251);
    assert_int_equal(dy_node_encode(&e, buf, 20), -1); /* does not fit */
}

static void test_keys(void **state)
{
    (void)state;
    char key[DY_NODE_KEY_LEN + 1];
    uint32_t id;
    dy_node_key(0xdeadbeef, key);
    assert_string_equal(key, "ndeadbeef");
    assert_true(dy_node_parse_key("ndeadbeef", &id));
    assert_int_equal(id, 0xdeadbeef);
    assert_false(dy_node_parse_key("wdeadbeef", &id));
    assert_false(dy_node_parse_key("nDEADBEEF", &id));
    assert_false(dy_node_parse_key("ndeadbee", &id));
    assert_false(dy_node_parse_key("ndeadbeef0", &id));
    assert_false(dy_node_parse_key(NULL, &id));
}

/* The sample's JSON with `from` replaced by `to` must be refused with a message starting
 * with `field`. */
static void refused(const char *from, const char *to, const char *field)
{
    dy_node_entry e = sample();
    char buf[DY_NODE_MAX_VALUE + 1], bad[DY_NODE_MAX_VALUE + 64], err[256];
    assert_true(dy_node_encode(&e, buf, sizeof buf) > 0);
    char *at = strstr(buf, from);
    if (!at)
        fail_msg("'%s' is not in %s", from, buf);
    snprintf(bad, sizeof bad, "%.*s%s%s", (int)(at - buf), buf, to, at + strlen(from));
    dy_node_entry out;
    if (dy_node_decode(bad, strlen(bad), &out, err, sizeof err))
        fail_msg("accepted %s", bad);
    if (strncmp(err, field, strlen(field)) != 0 || err[strlen(field)] != ':')
        fail_msg("'%s' for %s names the wrong field (want %s)", err, bad, field);
}

static void test_bad_entries(void **state)
{
    (void)state;
    refused("\"id\":305419896", "\"id\":-1", "id");
    refused("\"id\":305419896", "\"idx\":1", "id");
    refused("\"incarnation\":\"5f0c9a\"", "\"incarnation\":\"xyz\"", "incarnation");
    refused("\"host\":\"hostA\"", "\"host\":\"\"", "host");
    refused("\"host\":\"hostA\"", "\"host\":\"a\\u0007b\"", "host");
    refused("\"pid\":4242", "\"pid\":0", "pid");
    refused("\"cores\":8", "\"cores\":0", "cores");
    refused("\"cores\":8", "\"cores\":4097", "cores");
    refused("\"cores\":8", "\"cores\":4", "cores_used");
    refused("\"cores_used\":5", "\"cores_used\":4", "cores_used");
    refused("\"cores_used\":5", "\"cores_used\":\"5\"", "cores_used");
    refused("\"lease_s\":3.5", "\"lease_s\":0", "lease_s");
    refused("\"workers\":[", "\"workerz\":[", "workers");
    refused("\"workers\":[", "\"workers\":7,\"x\":[", "workers");
    refused("\"key\":\"w0a0b0c0d\"", "\"key\":\"n0a0b0c0d\"", "workers[0].key");
    refused("\"key\":\"w00000001\"", "\"key\":\"w0a0b0c0d\"", "workers[1].key");
    refused("\"role\":\"decode\"", "\"role\":\"both\"", "workers[1].role");
    refused("\"threads\":2", "\"threads\":0", "workers[0].threads");
    refused("\"threads\":3", "\"threads\":257", "workers[1].threads");
    refused("\"pid\":4251", "\"pid\":-3", "workers[1].pid");
    refused("{\"key\":\"w0a0b0c0d\"", "7,{\"key\":\"w0a0b0c0d\"", "workers[0]");

    char err[256];
    dy_node_entry out;
    assert_false(dy_node_decode("not json", 8, &out, err, sizeof err));
    assert_non_null(strstr(err, "value: not JSON"));
    assert_false(dy_node_decode("[1]", 3, &out, err, sizeof err));
    assert_non_null(strstr(err, "value: must be a JSON object"));
    assert_false(dy_node_decode(NULL, 0, &out, err, sizeof err));
    char big[DY_NODE_MAX_VALUE + 2];
    memset(big, ' ', sizeof big);
    assert_false(dy_node_decode(big, sizeof big, &out, err, sizeof err));
    assert_non_null(strstr(err, "value: "));
    /* more workers than a node runs */
    char many[DY_NODE_MAX_VALUE * 2] = "{\"id\":1,\"incarnation\":\"a\",\"host\":\"h\",\"pid\":1,"
                                       "\"cores\":4096,\"cores_used\":65,\"lease_s\":1,"
                                       "\"workers\":[";
    for (int i = 0; i <= DY_NODE_MAX_WORKERS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many),
                 "%s{\"key\":\"w%08x\",\"role\":\"agg\",\"threads\":1,\"pid\":2}", i ? "," : "",
                 i + 1);
    strcat(many, "]}");
    assert_true(strlen(many) <= DY_NODE_MAX_VALUE);
    assert_false(dy_node_decode(many, strlen(many), &out, err, sizeof err));
    assert_non_null(strstr(err, "workers: more than 64"));
}

static void test_core_budget(void **state)
{
    (void)state;
    dy_node_entry e = {.cores = 2};
    strcpy(e.host, "hostA");
    char err[256];
    assert_int_equal(dy_node_free_cores(&e), 2);
    assert_true(dy_node_add_worker(&e, 10, DY_ROLE_AGG, 1, 100, err, sizeof err));
    assert_true(dy_node_add_worker(&e, 11, DY_ROLE_AGG, 1, 101, err, sizeof err));
    assert_int_equal(dy_node_free_cores(&e), 0);
    assert_false(dy_node_add_worker(&e, 12, DY_ROLE_AGG, 1, 102, err, sizeof err));
    assert_non_null(strstr(err, "threads: 1 is more than the free cores of hostA (0 of 2 free)"));
    assert_int_equal(dy_node_find_worker(&e, 11), 1);
    assert_int_equal(dy_node_find_pid(&e, 100), 0);
    assert_int_equal(dy_node_find_pid(&e, 555), -1);
    dy_node_remove_worker(&e, 0);
    assert_int_equal(e.n_workers, 1);
    assert_int_equal(e.cores_used, 1);
    assert_int_equal(e.workers[0].id, 11);
    assert_false(dy_node_add_worker(&e, 12, DY_ROLE_AGG, 2, 102, err, sizeof err));
    assert_true(dy_node_add_worker(&e, 12, DY_ROLE_DECODE, 1, 102, err, sizeof err));
    dy_node_remove_worker(&e, 7); /* out of range: nothing */
    assert_int_equal(e.n_workers, 2);
    dy_node_entry big = {.cores = DY_NODE_MAX_CORES};
    for (int i = 0; i < DY_NODE_MAX_WORKERS; i++)
        assert_true(dy_node_add_worker(&big, (uint32_t)i + 1, DY_ROLE_AGG, 1, 9, err,
                                       sizeof err));
    assert_false(dy_node_add_worker(&big, 999, DY_ROLE_AGG, 1, 9, err, sizeof err));
    assert_non_null(strstr(err, "64 workers already"));
}

static void req_refused(const char *json, const char *msg)
{
    dy_node_req q;
    char err[256];
    if (dy_node_req_decode(json, strlen(json), &q, err, sizeof err))
        fail_msg("accepted %s", json);
    if (!strstr(err, msg))
        fail_msg("'%s' for %s does not say '%s'", err, json, msg);
}

static void test_requests(void **state)
{
    (void)state;
    dy_node_req q;
    char err[256], buf[256];
    const char *s = "{\"op\":\"start\",\"role\":\"decode\",\"threads\":3}";
    assert_true(dy_node_req_decode(s, strlen(s), &q, err, sizeof err));
    assert_int_equal(q.op, DY_NODE_START);
    assert_int_equal(q.role, DY_ROLE_DECODE);
    assert_int_equal(q.threads, 3);
    assert_true(dy_node_req_encode(&q, buf, sizeof buf) > 0);
    assert_string_equal(buf, s);
    s = "{\"op\":\"stop\",\"worker\":\"w0000abcd\"}";
    assert_true(dy_node_req_decode(s, strlen(s), &q, err, sizeof err));
    assert_int_equal(q.op, DY_NODE_STOP);
    assert_int_equal(q.worker_id, 0xabcd);
    assert_true(dy_node_req_encode(&q, buf, sizeof buf) > 0);
    assert_string_equal(buf, s);
    s = "{\"op\":\"list\",\"extra\":1}";
    assert_true(dy_node_req_decode(s, strlen(s), &q, err, sizeof err));
    assert_int_equal(q.op, DY_NODE_LIST);

    req_refused("", "request: not JSON");
    req_refused("[]", "request: must be a JSON object");
    req_refused("{}", "op: missing");
    req_refused("{\"op\":\"launch\"}", "op: must be one of \"start\", \"stop\", \"list\"");
    req_refused("{\"op\":7}", "op: must be one of");
    req_refused("{\"op\":\"start\",\"threads\":1}", "role: missing");
    req_refused("{\"op\":\"start\",\"role\":\"big\",\"threads\":1}", "role: must be one of");
    req_refused("{\"op\":\"start\",\"role\":\"agg\"}", "threads: missing");
    req_refused("{\"op\":\"start\",\"role\":\"agg\",\"threads\":0}",
                "threads: must be an integer in [1, 256]");
    req_refused("{\"op\":\"start\",\"role\":\"agg\",\"threads\":1.5}", "threads: must be");
    req_refused("{\"op\":\"stop\"}", "worker: missing");
    req_refused("{\"op\":\"stop\",\"worker\":\"n00000001\"}", "worker: must be a worker's key");
    req_refused("{\"op\":\"stop\",\"worker\":\"w1\"}", "worker: must be a worker's key");
    req_refused("{\"op\":\"stop\",\"op\":\"list\"}", "request: not JSON");
    char big[DY_NODE_MAX_REQUEST + 2];
    memset(big, ' ', sizeof big);
    assert_false(dy_node_req_decode(big, sizeof big, &q, err, sizeof err));
    assert_non_null(strstr(err, "request: "));
}

static void test_answers(void **state)
{
    (void)state;
    dy_node_answer a;
    char err[256];
    const char *s = "{\"ok\":true,\"worker\":\"w0000abcd\",\"pid\":77}";
    assert_true(dy_node_answer_decode(s, strlen(s), &a, err, sizeof err));
    assert_true(a.ok);
    assert_string_equal(a.worker, "w0000abcd");
    assert_int_equal(a.pid, 77);
    s = "{\"ok\":false,\"error\":\"threads: no\"}";
    assert_true(dy_node_answer_decode(s, strlen(s), &a, err, sizeof err));
    assert_false(a.ok);
    assert_string_equal(a.error, "threads: no");
    s = "{\"ok\":false,\"error\":\"a\\u001bb\"}";
    assert_false(dy_node_answer_decode(s, strlen(s), &a, err, sizeof err));
    assert_non_null(strstr(err, "error: holds a control character"));
    s = "{\"ok\":false}";
    assert_false(dy_node_answer_decode(s, strlen(s), &a, err, sizeof err));
    assert_non_null(strstr(err, "error: must be a string"));
    s = "{\"ok\":1}";
    assert_false(dy_node_answer_decode(s, strlen(s), &a, err, sizeof err));
    assert_non_null(strstr(err, "ok: must be true or false"));
    s = "{\"ok\":true,\"worker\":\"x\",\"pid\":7}";
    assert_false(dy_node_answer_decode(s, strlen(s), &a, err, sizeof err));
    assert_non_null(strstr(err, "worker: must be a worker's key"));
    /* a list: the node's entry, decoded as one */
    dy_node_entry e = sample();
    char entry[DY_NODE_MAX_VALUE + 1], doc[DY_NODE_MAX_VALUE + 64];
    assert_true(dy_node_encode(&e, entry, sizeof entry) > 0);
    snprintf(doc, sizeof doc, "{\"ok\":true,\"node\":%s}", entry);
    assert_true(dy_node_answer_decode(doc, strlen(doc), &a, err, sizeof err));
    assert_true(a.has_node);
    assert_int_equal(a.node.n_workers, 2);
    snprintf(doc, sizeof doc, "{\"ok\":true,\"node\":{\"id\":1}}");
    assert_false(dy_node_answer_decode(doc, strlen(doc), &a, err, sizeof err));
    assert_non_null(strstr(err, "node.incarnation: missing"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_bad_entries),
        cmocka_unit_test(test_core_budget),
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
