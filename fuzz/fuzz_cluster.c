/* fuzz_cluster.c — libFuzzer target for what cluster mode reads from NATS and the command line
 * (serve/cluster/): the input is a registry value through dy_reg_decode, as every value a
 * watch or a list reads is; then, as a NUL-terminated string, a bucket key through
 * dy_reg_parse_key and a --cluster URL through dy_nats_url_check.
 *
 * Beyond "no crash, no leak": a refused value's message starts with the field it names
 * ("role: ...", "load.kv_used: ..."); an accepted one is in the ranges registry.h promises and
 * encodes to a value that decodes to the same entry; a key that parses is exactly what
 * dy_reg_key writes for its id; a refused URL has a message.
 * The same bytes are also a node agent's entry, request and answer (serve/cluster/node.h),
 * through dy_node_decode, dy_node_req_decode and dy_node_answer_decode: a refusal names a
 * field; an accepted entry keeps its budget (cores_used, the sum of its workers' threads, at
 * most cores) and round-trips; an accepted request round-trips to the same request.
 * The same bytes are also a NATS message carrying a frame (serve/cluster/frames.h), checked in
 * either direction as the worker and frontend links check each one they receive: an accepted
 * one holds exactly one frame of a type that travels that way; the ids that route it are read
 * without a crash; a refused one has a message.
 *   ./build-fuzz/fuzz_cluster -max_total_time=600 build-fuzz/corpus-cluster fuzz/corpus-cluster */
#include "harness.h"
#include "kv/kv_pool.h"
#include "serve/cluster/frames.h"
#include "serve/cluster/nats_conn.h"
#include "serve/cluster/node.h"
#include "serve/cluster/registry.h"

#include <stdlib.h>
#include <string.h>

/* The names a refusal may start with: the entry's fields, and "value" for the whole. */
static const char *const names[] = {
    "value", "id", "incarnation", "host", "pid", "role", "model", "fingerprint", "block_size",
    "kv_blocks", "kv_type", "kv_addr", "kv_transfer", "threads", "lease_s", "draining", "load",
    "load.running", "load.waiting", "load.kv_used", "load.kv_total"};

static void check_refusal(const char *err)
{
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        size_t n = strlen(names[i]);
        if (!strncmp(err, names[i], n) && err[n] == ':' && err[n + 1] == ' ')
            return;
    }
    fz_check(0, "the refusal names no field: '%s'", err);
}

static void check_str(const char *s, const char *field, bool may_be_empty)
{
    size_t n = strnlen(s, DY_REG_MAX_STR + 1);
    fz_check(n <= DY_REG_MAX_STR, "%s is longer than %d bytes", field, DY_REG_MAX_STR);
    fz_check(n > 0 || may_be_empty, "%s is empty", field);
    for (size_t i = 0; i < n; i++)
        fz_check((unsigned char)s[i] >= 0x20 && s[i] != 0x7f, "%s holds a control byte", field);
}

static void check_ranges(const dy_reg_entry *e)
{
    check_str(e->incarnation, "incarnation", false);
    check_str(e->host, "host", false);
    check_str(e->model, "model", false);
    check_str(e->kv_addr, "kv_addr", true);
    fz_check(e->pid >= 1, "pid %u", (unsigned)e->pid);
    fz_check(dy_reg_role_name(e->role) != NULL, "role %d", e->role);
    fz_check(dy_kv_type_name((dy_kv_type)e->kv_type) != NULL, "kv_type %d", e->kv_type);
    fz_check(e->block_size >= 1 && e->block_size <= 256, "block_size %u",
             (unsigned)e->block_size);
    fz_check(e->kv_blocks >= 1, "kv_blocks 0");
    fz_check(e->threads >= 1 && e->threads <= 256, "threads %u", (unsigned)e->threads);
    fz_check(e->lease_s > 0 && e->lease_s <= 3600, "lease_s %g", e->lease_s);
    fz_check((e->kv_addr[0] == 0) == (e->kv_transfer == 0), "kv_addr and kv_transfer disagree");
    fz_check(e->load.kv_used <= e->load.kv_total, "kv_used > kv_total");
}

static bool same(const dy_reg_entry *a, const dy_reg_entry *b)
{
    return a->id == b->id && !strcmp(a->incarnation, b->incarnation) &&
           !strcmp(a->host, b->host) && a->pid == b->pid && a->role == b->role &&
           !strcmp(a->model, b->model) && a->fingerprint == b->fingerprint &&
           a->block_size == b->block_size && a->kv_blocks == b->kv_blocks &&
           a->kv_type == b->kv_type && !strcmp(a->kv_addr, b->kv_addr) &&
           a->kv_transfer == b->kv_transfer && a->threads == b->threads &&
           !memcmp(&a->lease_s, &b->lease_s, sizeof a->lease_s) && a->draining == b->draining &&
           !memcmp(&a->load, &b->load, sizeof a->load);
}

static void check_value(const uint8_t *data, size_t size)
{
    char err[512] = "";
    dy_reg_entry e;
    if (!dy_reg_decode(data, size, &e, err, sizeof err)) {
        check_refusal(err);
        return;
    }
    check_ranges(&e);
    char buf[DY_REG_MAX_VALUE + 1];
    /* Its known fields alone are written: they fit (four strings of at most 128 bytes, each
     * byte at most 2 when escaped, and numbers) whatever the value held besides. */
    int n = dy_reg_encode(&e, buf, sizeof buf);
    fz_check(n > 0, "an accepted entry does not encode");
    dy_reg_entry back;
    fz_check(dy_reg_decode(buf, (size_t)n, &back, err, sizeof err), "re-encoded: %s", err);
    fz_check(same(&e, &back), "the entry changed on an encode and decode: %s", buf);
}

static void check_key_and_url(const char *s)
{
    uint32_t id;
    if (dy_reg_parse_key(s, &id)) {
        char key[DY_REG_KEY_LEN + 1];
        dy_reg_key(id, key);
        fz_check(!strcmp(key, s), "key '%s' parsed as %08x", s, (unsigned)id);
    }
    char err[512] = "";
    if (!dy_nats_url_check(s, err, sizeof err))
        fz_check(err[0] != 0, "a URL refused without a message");
}

static void check_frame(const uint8_t *data, size_t size, dy_frame_dir dir)
{
    char err[512] = "";
    dy_msg_type t;
    if (!dy_cluster_frame_check(data, size, dir, &t, err, sizeof err)) {
        fz_check(err[0] != 0, "a frame refused without a message");
        return;
    }
    uint32_t len;
    fz_check(dy_wire_header(data, &t, &len, err, sizeof err) &&
             (size_t)len + DY_WIRE_HEADER == size, "an accepted message is not one frame");
    uint64_t first;
    uint32_t n;
    dy_cluster_frame_ids(data, size, &first, &n);
    fz_check(t != DY_MSG_REQUEST || (n >= 1 && n <= DY_WIRE_MAX_SAMPLES),
             "a request routes %u samples", (unsigned)n);
}

/* A refusal of the node's decoders starts with "NAME: " where NAME is a field (maybe within
 * "workers[i]." or "node."), "value", "request" or "answer". */
static void check_node_refusal(const char *err)
{
    const char *colon = strstr(err, ": ");
    fz_check(colon && colon > err, "the refusal names no field: '%s'", err);
    for (const char *p = err; p < colon; p++)
        fz_check((*p >= 'a' && *p <= 'z') || *p == '_' || *p == '.' || *p == '[' || *p == ']' ||
                 (*p >= '0' && *p <= '9'), "the refusal names no field: '%s'", err);
}

static void check_node(const uint8_t *data, size_t size)
{
    char err[512] = "", buf[DY_NODE_MAX_VALUE + 1];
    dy_node_entry e, back;
    if (!dy_node_decode(data, size, &e, err, sizeof err))
        check_node_refusal(err);
    else {
        uint32_t sum = 0;
        for (int i = 0; i < e.n_workers; i++)
            sum += e.workers[i].threads;
        fz_check(e.cores >= 1 && e.cores_used == sum && sum <= e.cores, "a node's budget");
        int n = dy_node_encode(&e, buf, sizeof buf);
        fz_check(n > 0, "an accepted node entry does not encode");
        fz_check(dy_node_decode(buf, (size_t)n, &back, err, sizeof err), "re-encoded: %s", err);
        fz_check(back.n_workers == e.n_workers && back.cores_used == e.cores_used &&
                 !strcmp(back.host, e.host), "the node entry changed: %s", buf);
    }
    dy_node_req q, q2;
    if (!dy_node_req_decode(data, size, &q, err, sizeof err))
        check_node_refusal(err);
    else {
        int n = dy_node_req_encode(&q, buf, sizeof buf);
        fz_check(n > 0, "an accepted request does not encode");
        fz_check(dy_node_req_decode(buf, (size_t)n, &q2, err, sizeof err), "re-encoded: %s",
                 err);
        fz_check(q2.op == q.op && q2.role == q.role && q2.threads == q.threads &&
                 q2.worker_id == q.worker_id, "the request changed: %s", buf);
    }
    dy_node_answer a;
    if (!dy_node_answer_decode(data, size, &a, err, sizeof err))
        check_node_refusal(err);
    else
        fz_check(a.ok || a.error[0], "a refusal without its error");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_value(data, size);
    check_node(data, size);
    check_frame(data, size, DY_TO_WORKER);
    check_frame(data, size, DY_TO_FRONTEND);
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    check_key_and_url(s);
    free(s);
    return 0;
}
