/* node_entry.c — the pure half of the node agent (see node.h): its registry entry, the
 * requests it takes and the answers it gives, each read and written through a table of fields
 * (fields.h), and the accounting of its core budget. No NATS, no clock. */
#include "serve/cluster/node.h"

#include "serve/cluster/registry.h"
#include "serve/wire/wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof a / sizeof a[0])
#define U32_MAX_D 4294967295.0

/* ---- the tables --------------------------------------------------------------------------- */

#define EOFF(m) offsetof(dy_node_entry, m)
static const dy_field entry_fields[] = {
    {.key = "id", .type = DY_F_U32, .off = EOFF(id), .lo = 0, .hi = U32_MAX_D},
    {.key = "incarnation", .type = DY_F_HEX, .off = EOFF(incarnation)},
    {.key = "host", .type = DY_F_STR, .off = EOFF(host)},
    {.key = "pid", .type = DY_F_U32, .off = EOFF(pid), .lo = 1, .hi = U32_MAX_D},
    {.key = "cores", .type = DY_F_U32, .off = EOFF(cores), .lo = 1, .hi = DY_NODE_MAX_CORES},
    {.key = "cores_used", .type = DY_F_U32, .off = EOFF(cores_used), .lo = 0,
     .hi = DY_NODE_MAX_CORES},
    {.key = "lease_s", .type = DY_F_LEASE, .off = EOFF(lease_s)},
};

#define WOFF(m) offsetof(dy_node_worker, m)
static const dy_field worker_fields[] = {
    {.key = "key", .type = DY_F_STR, .off = WOFF(key)},
    {.key = "role", .type = DY_F_NAME, .off = WOFF(role), .name = dy_reg_role_name,
     .max_value = DY_ROLE_DECODE},
    /* the same bounds as `dyad worker --threads` */
    {.key = "threads", .type = DY_F_U32, .off = WOFF(threads), .lo = 1, .hi = 256},
    {.key = "pid", .type = DY_F_U32, .off = WOFF(pid), .lo = 1, .hi = U32_MAX_D},
};

#define ROFF(m) offsetof(dy_node_req, m)
static const dy_field op_field[] = {
    {.key = "op", .type = DY_F_NAME, .off = ROFF(op), .name = dy_node_op_name,
     .max_value = DY_NODE_LIST},
};
static const dy_field start_fields[] = {
    {.key = "role", .type = DY_F_NAME, .off = ROFF(role), .name = dy_reg_role_name,
     .max_value = DY_ROLE_DECODE},
    {.key = "threads", .type = DY_F_U32, .off = ROFF(threads), .lo = 1, .hi = 256},
};
static const dy_field stop_fields[] = {
    {.key = "worker", .type = DY_F_STR, .off = ROFF(worker)},
};

#define AOFF(m) offsetof(dy_node_answer, m)
static const dy_field ok_field[] = {
    {.key = "ok", .type = DY_F_BOOL, .off = AOFF(ok)},
};
static const dy_field started_fields[] = {
    {.key = "worker", .type = DY_F_STR, .off = AOFF(worker)},
    {.key = "pid", .type = DY_F_U32, .off = AOFF(pid), .lo = 1, .hi = U32_MAX_D},
};

const char *dy_node_op_name(int op)
{
    switch (op) {
    case DY_NODE_START: return "start";
    case DY_NODE_STOP: return "stop";
    case DY_NODE_LIST: return "list";
    }
    return NULL;
}

/* ---- keys --------------------------------------------------------------------------------- */

void dy_node_key(uint32_t id, char key[DY_NODE_KEY_LEN + 1])
{
    snprintf(key, DY_NODE_KEY_LEN + 1, "n%08" PRIx32, id);
}

bool dy_node_parse_key(const char *key, uint32_t *id)
{
    /* The worker registry's rule with the other letter: "n" and 8 lowercase hex digits. */
    if (!key || key[0] != 'n' || strlen(key) != DY_NODE_KEY_LEN)
        return false;
    char as_worker[DY_REG_KEY_LEN + 1];
    snprintf(as_worker, sizeof as_worker, "w%s", key + 1);
    return dy_reg_parse_key(as_worker, id);
}

/* ---- the entry ---------------------------------------------------------------------------- */

json_t *dy_node_to_json(const dy_node_entry *e)
{
    json_t *obj = json_object(), *workers = json_array();
    bool ok = obj && workers && dy_fields_set(obj, e, entry_fields, N(entry_fields));
    for (int i = 0; ok && i < e->n_workers; i++) {
        json_t *w = json_object();
        ok = w && dy_fields_set(w, &e->workers[i], worker_fields, N(worker_fields)) &&
             json_array_append_new(workers, w) == 0;
        if (!ok)
            json_decref(w);
    }
    if (ok && json_object_set_new(obj, "workers", workers) == 0)
        return obj;
    if (!ok)
        json_decref(workers);
    json_decref(obj);
    return NULL;
}

/* obj as compact JSON into out: its length, or -1. */
static int dump(json_t *obj, char *out, size_t cap)
{
    if (!obj || cap == 0) {
        json_decref(obj);
        return -1;
    }
    size_t need = json_dumpb(obj, out, cap, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    if (need == 0 || need >= cap)
        return -1;
    out[need] = 0;
    return (int)need;
}

int dy_node_encode(const dy_node_entry *e, char *out, size_t cap)
{
    return dump(dy_node_to_json(e), out, cap);
}

static bool read_worker(const dy_freader *r, const json_t *v, int i, dy_node_entry *e)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "workers[%d].", i);
    dy_freader in = {r->err, r->errlen, prefix};
    dy_node_worker *w = &e->workers[i];
    if (!json_is_object(v)) {
        prefix[strlen(prefix) - 1] = 0; /* "workers[3]" */
        return dy_field_fail(r, prefix, "must be an object");
    }
    if (!dy_fields_read(&in, v, worker_fields, N(worker_fields), w))
        return false;
    if (!dy_reg_parse_key(w->key, &w->id))
        return dy_field_fail(&in, "key", "must be a worker's key (w and 8 lowercase hex digits)");
    for (int j = 0; j < i; j++)
        if (e->workers[j].id == w->id)
            return dy_field_fail(&in, "key", "%s is there twice", w->key);
    return true;
}

static bool decode_entry(const dy_freader *r, const json_t *root, void *out)
{
    dy_node_entry *e = out;
    if (!dy_fields_read(r, root, entry_fields, N(entry_fields), e))
        return false;
    const json_t *ws = json_object_get(root, "workers");
    if (!ws)
        return dy_field_fail(r, "workers", "missing");
    if (!json_is_array(ws))
        return dy_field_fail(r, "workers", "must be an array");
    if (json_array_size(ws) > DY_NODE_MAX_WORKERS)
        return dy_field_fail(r, "workers", "more than %d", DY_NODE_MAX_WORKERS);
    uint32_t sum = 0;
    for (size_t i = 0; i < json_array_size(ws); i++) {
        if (!read_worker(r, json_array_get(ws, i), (int)i, e))
            return false;
        e->n_workers = (int)i + 1;
        sum += e->workers[i].threads;
    }
    if (e->cores_used != sum)
        return dy_field_fail(r, "cores_used", "%" PRIu32 " is not the workers' threads (%" PRIu32
                             ")", e->cores_used, sum);
    if (e->cores_used > e->cores)
        return dy_field_fail(r, "cores_used", "%" PRIu32 " is more than cores (%" PRIu32 ")",
                             e->cores_used, e->cores);
    return true;
}

bool dy_node_decode(const void *value, size_t len, dy_node_entry *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    bool ok = dy_fields_decode("value", value, len, DY_NODE_MAX_VALUE, decode_entry, e, err,
                               errlen);
    if (!ok)
        memset(e, 0, sizeof *e);
    return ok;
}

/* ---- core accounting ---------------------------------------------------------------------- */

uint32_t dy_node_free_cores(const dy_node_entry *e)
{
    return e->cores_used < e->cores ? e->cores - e->cores_used : 0;
}

bool dy_node_add_worker(dy_node_entry *e, uint32_t id, int role, uint32_t threads, uint32_t pid,
                        char *err, size_t errlen)
{
    uint32_t free_cores = dy_node_free_cores(e);
    if (threads > free_cores) {
        snprintf(err, errlen, "threads: %" PRIu32 " is more than the free cores of %s (%" PRIu32
                 " of %" PRIu32 " free)", threads, e->host, free_cores, e->cores);
        return false;
    }
    if (e->n_workers == DY_NODE_MAX_WORKERS) {
        snprintf(err, errlen, "this node runs %d workers already, its most", DY_NODE_MAX_WORKERS);
        return false;
    }
    if (dy_reg_role_name(role) == NULL || threads == 0) {
        snprintf(err, errlen, "role or threads out of range");
        return false;
    }
    dy_node_worker *w = &e->workers[e->n_workers++];
    memset(w, 0, sizeof *w);
    dy_reg_key(id, w->key);
    w->id = id;
    w->role = role;
    w->threads = threads;
    w->pid = pid;
    e->cores_used += threads;
    return true;
}

int dy_node_find_worker(const dy_node_entry *e, uint32_t id)
{
    for (int i = 0; i < e->n_workers; i++)
        if (e->workers[i].id == id)
            return i;
    return -1;
}

int dy_node_find_pid(const dy_node_entry *e, uint32_t pid)
{
    for (int i = 0; i < e->n_workers; i++)
        if (e->workers[i].pid == pid)
            return i;
    return -1;
}

void dy_node_remove_worker(dy_node_entry *e, int i)
{
    if (i < 0 || i >= e->n_workers)
        return;
    e->cores_used -= e->workers[i].threads;
    memmove(&e->workers[i], &e->workers[i + 1],
            (size_t)(e->n_workers - i - 1) * sizeof e->workers[0]);
    e->n_workers--;
}

/* ---- requests ----------------------------------------------------------------------------- */

static bool decode_req(const dy_freader *r, const json_t *root, void *out)
{
    dy_node_req *q = out;
    if (!dy_fields_read(r, root, op_field, N(op_field), q))
        return false;
    if (q->op == DY_NODE_START)
        return dy_fields_read(r, root, start_fields, N(start_fields), q);
    if (q->op == DY_NODE_STOP) {
        if (!dy_fields_read(r, root, stop_fields, N(stop_fields), q))
            return false;
        if (!dy_reg_parse_key(q->worker, &q->worker_id))
            return dy_field_fail(r, "worker", "must be a worker's key (w and 8 lowercase hex "
                                 "digits)");
    }
    return true;
}

bool dy_node_req_decode(const void *data, size_t len, dy_node_req *q, char *err, size_t errlen)
{
    memset(q, 0, sizeof *q);
    return dy_fields_decode("request", data, len, DY_NODE_MAX_REQUEST, decode_req, q, err,
                            errlen);
}

int dy_node_req_encode(const dy_node_req *q, char *out, size_t cap)
{
    json_t *obj = json_object();
    bool ok = obj && dy_fields_set(obj, q, op_field, N(op_field));
    if (ok && q->op == DY_NODE_START)
        ok = dy_fields_set(obj, q, start_fields, N(start_fields));
    else if (ok && q->op == DY_NODE_STOP)
        ok = dy_fields_set(obj, q, stop_fields, N(stop_fields));
    if (!ok) {
        json_decref(obj);
        return -1;
    }
    return dump(obj, out, cap);
}

/* ---- answers ------------------------------------------------------------------------------ */

static bool decode_answer(const dy_freader *r, const json_t *root, void *out)
{
    dy_node_answer *a = out;
    if (!dy_fields_read(r, root, ok_field, N(ok_field), a))
        return false;
    if (!a->ok) {
        const json_t *v = json_object_get(root, "error");
        size_t n = json_string_length(v);
        if (!json_is_string(v) || n == 0 || n > DY_NODE_MAX_ERROR)
            return dy_field_fail(r, "error", "must be a string of 1 to %d bytes",
                                 DY_NODE_MAX_ERROR);
        if (!dy_field_printable(json_string_value(v), n))
            return dy_field_fail(r, "error", "holds a control character");
        memcpy(a->error, json_string_value(v), n + 1);
        return true;
    }
    const json_t *node = json_object_get(root, "node");
    if (node) { /* list */
        if (!json_is_object(node))
            return dy_field_fail(r, "node", "must be an object");
        dy_freader in = {r->err, r->errlen, "node."};
        a->has_node = true;
        return decode_entry(&in, node, &a->node);
    }
    if (!dy_fields_read(r, root, started_fields, N(started_fields), a))
        return false;
    uint32_t id;
    if (!dy_reg_parse_key(a->worker, &id))
        return dy_field_fail(r, "worker", "must be a worker's key (w and 8 lowercase hex "
                             "digits)");
    return true;
}

bool dy_node_answer_decode(const void *data, size_t len, dy_node_answer *a, char *err,
                           size_t errlen)
{
    memset(a, 0, sizeof *a);
    return dy_fields_decode("answer", data, len, DY_NODE_MAX_ANSWER, decode_answer, a, err,
                            errlen);
}
