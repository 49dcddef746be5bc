/* node.h — `dyad node`, the per-host agent of cluster mode (docs/cluster.md, "Node agents"):
 * it registers the host's core budget in the JetStream key-value bucket dyad_nodes under its
 * key ("n" and its id in 8 hex digits), renewing the entry every lease_s / 3, and starts and
 * stops `dyad worker --cluster` processes on its host when asked on dyad.n.<key>.cmd.
 *
 * This header's first half is pure (node_entry.c, no NATS): the entry and its JSON value
 *   {"id": 305419896, "incarnation": "5f0c...", "host": "hostA", "pid": 4242, "cores": 8,
 *    "cores_used": 3, "lease_s": 3.0,
 *    "workers": [{"key": "w0a0b0c0d", "role": "agg", "threads": 2, "pid": 4250}, ...]}
 * read through one table of fields (fields.h); the requests
 *   {"op": "start", "role": "agg"|"prefill"|"decode", "threads": T}
 *   {"op": "stop", "worker": "wXXXXXXXX"}
 *   {"op": "list"}
 * and their answers ({"ok": true, ...} or {"ok": false, "error": "..."}); and the core
 * accounting (a worker takes its threads' cores from the budget while it lives). Every byte
 * read from NATS goes through these decoders (a fuzz target: fuzz/fuzz_cluster.c).
 * The agent itself (node.c) is below, compiled only with libnats. */
#ifndef DYAD_CLUSTER_NODE_H
#define DYAD_CLUSTER_NODE_H

#include "serve/cluster/fields.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define DY_NODE_BUCKET "dyad_nodes"
#define DY_NODE_MAX_VALUE 8192   /* bytes of one entry's JSON */
#define DY_NODE_MAX_REQUEST 1024 /* bytes of one request */
#define DY_NODE_MAX_ANSWER 16384 /* bytes of one answer (a list holds the entry) */
#define DY_NODE_KEY_LEN 9        /* "n" + 8 hex digits */
#define DY_NODE_MAX_WORKERS 64   /* on one node at once */
#define DY_NODE_MAX_CORES 4096
#define DY_NODE_MAX_ERROR 512    /* bytes of an answer's error */

typedef struct {
    char key[DY_FIELD_MAX_STR + 1]; /* "w" + 8 hex digits (the worker registry's key) */
    uint32_t id;                    /* the key's */
    int role;                       /* dy_worker_role (serve/wire/wire.h) */
    uint32_t threads;               /* the cores it takes */
    uint32_t pid;
} dy_node_worker;

typedef struct {
    uint32_t id;
    char incarnation[DY_FIELD_MAX_STR + 1]; /* random per process start, hex */
    char host[DY_FIELD_MAX_STR + 1];
    uint32_t pid;
    uint32_t cores;      /* the budget: 1..DY_NODE_MAX_CORES */
    uint32_t cores_used; /* the sum of its workers' threads */
    double lease_s;
    int n_workers;
    dy_node_worker workers[DY_NODE_MAX_WORKERS];
} dy_node_entry;

/* "n" + id as 8 lowercase hex digits. */
void dy_node_key(uint32_t id, char key[DY_NODE_KEY_LEN + 1]);
/* Whether key names a node entry ("n" + 8 lowercase hex digits) and, if so, its id. */
bool dy_node_parse_key(const char *key, uint32_t *id);
/* The entry as a new JSON object; NULL if memory ran out or a role has no name. */
json_t *dy_node_to_json(const dy_node_entry *e);
/* Its JSON value into out (cap bytes, NUL-terminated): its length, or -1 if it does not fit. */
int dy_node_encode(const dy_node_entry *e, char *out, size_t cap);
/* Parses and checks one value (len bytes): every field present and in range, each worker's
 * key a worker's, no worker twice, cores_used the sum of the workers' threads and at most
 * cores. false with a message naming the field ("workers[1].role: ...") in err. */
bool dy_node_decode(const void *value, size_t len, dy_node_entry *e, char *err, size_t errlen);

/* ---- core accounting ---------------------------------------------------------------------- */

uint32_t dy_node_free_cores(const dy_node_entry *e);
/* Takes threads cores for a new worker; false with why in err (more than the free cores, or
 * DY_NODE_MAX_WORKERS already). */
bool dy_node_add_worker(dy_node_entry *e, uint32_t id, int role, uint32_t threads, uint32_t pid,
                        char *err, size_t errlen);
/* The index of the worker with this id, or -1. */
int dy_node_find_worker(const dy_node_entry *e, uint32_t id);
/* The index of the worker with this pid, or -1. */
int dy_node_find_pid(const dy_node_entry *e, uint32_t pid);
/* Gives back the cores of workers[i] (it ended); the later workers move down by one. */
void dy_node_remove_worker(dy_node_entry *e, int i);

/* ---- requests and answers ----------------------------------------------------------------- */

typedef enum { DY_NODE_START = 0, DY_NODE_STOP = 1, DY_NODE_LIST = 2 } dy_node_op;

typedef struct {
    int op;           /* dy_node_op */
    int role;         /* start */
    uint32_t threads; /* start: 1..256 */
    char worker[DY_FIELD_MAX_STR + 1]; /* stop: the worker's key */
    uint32_t worker_id;                /* stop: the key's */
} dy_node_req;

/* "start", "stop", "list"; NULL for another value. */
const char *dy_node_op_name(int op);
/* Parses and checks one request: op, then the fields of that op. false with a message naming
 * the field ("threads: must be an integer in [1, 256]") in err. */
bool dy_node_req_decode(const void *data, size_t len, dy_node_req *r, char *err, size_t errlen);
/* The request as its JSON into out (cap bytes): its length, or -1. */
int dy_node_req_encode(const dy_node_req *r, char *out, size_t cap);

typedef struct {
    bool ok;
    char error[DY_NODE_MAX_ERROR + 1];     /* !ok */
    char worker[DY_FIELD_MAX_STR + 1];     /* start and stop: the worker's key */
    uint32_t pid;                          /* start and stop: its pid */
    bool has_node;                         /* list: node holds the entry */
    dy_node_entry node;
} dy_node_answer;

/* Parses and checks an answer (what `dyad cluster start/stop` read back). false with a message
 * naming the field in err. */
bool dy_node_answer_decode(const void *data, size_t len, dy_node_answer *a, char *err,
                           size_t errlen);

#ifdef DYAD_HAVE_NATS
/* ---- the agent (node.c) ------------------------------------------------------------------- */

typedef struct {
    const char *url;         /* --cluster */
    const char *exe;         /* this dyad, to start workers with */
    int cores;               /* --cores */
    const char *host_name;   /* --host-name (NULL: the host's name) */
    const char *kv_host;     /* --kv-host: decode workers listen at KV_HOST:0 */
    const char *model, *tokenizer; /* passed to every worker (NULL: the worker's default) */
    double lease_s;          /* --lease */
    double start_timeout_s;  /* a worker must register within this */
    double drain_s;          /* a stopped worker may drain this long before SIGKILL */
    double timeout_s;        /* reaching NATS at the start */
} dy_node_config;

/* Runs the agent until SIGINT or SIGTERM; the exit status (1: NATS could not be reached). */
int dy_node_run(const dy_node_config *c);
#endif

#endif
