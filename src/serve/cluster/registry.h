/* registry.h — cluster mode's registry of workers (docs/cluster.md): a JetStream key-value
 * bucket on NATS where every worker started with `--cluster` keeps one entry under its key
 * ("w" and its id in 8 hex digits) while it lives. The worker writes the entry again every
 * lease_s / 3 seconds (its lease); frontends and `dyad cluster status` watch the bucket, and a
 * worker whose entry has not been written for lease_s seconds is taken as dead (the bucket's
 * own max age only bounds what the stream keeps). A worker that leaves cleanly deletes its
 * entry.
 *
 * The entry's value is a JSON object (jansson), readable with any NATS client:
 *   {"id": 3735928559, "incarnation": "5f0c...", "host": "hostA", "pid": 4242,
 *    "role": "decode", "model": "stories260K.bin", "fingerprint": "0123456789abcdef",
 *    "block_size": 16, "kv_blocks": 4096, "kv_type": "f32", "kv_addr": "10.0.0.2:39211",
 *    "kv_transfer": "tcp", "threads": 2, "lease_s": 3.0, "draining": false,
 *    "load": {"running": 2, "waiting": 0, "kv_used": 120, "kv_total": 4096}}
 * Encoding and decoding are pure (no NATS): dy_reg_decode is what every byte read from the
 * bucket goes through, and is a fuzz target (fuzz/fuzz_cluster.c). The functions over NATS
 * (open, put, delete, list, watch) are below it, compiled only with libnats (DYAD_HAVE_NATS). */
#ifndef DYAD_CLUSTER_REGISTRY_H
#define DYAD_CLUSTER_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define DY_REG_BUCKET "dyad_workers"
#define DY_REG_MAX_VALUE 4096     /* bytes of one entry's JSON */
#define DY_REG_MAX_STR 128        /* host, model, kv_addr, incarnation */
#define DY_REG_KEY_LEN 9          /* "w" + 8 hex digits */

typedef struct {
    uint32_t running, waiting, kv_used, kv_total;
} dy_reg_load;

typedef struct {
    uint32_t id;
    char incarnation[DY_REG_MAX_STR + 1]; /* random per process start (and per reconnect to
                                           * NATS: worker_link.h), hex */
    char host[DY_REG_MAX_STR + 1];
    uint32_t pid;
    int role;                       /* dy_worker_role (serve/wire/wire.h) */
    char model[DY_REG_MAX_STR + 1]; /* the model file's base name */
    uint64_t fingerprint;           /* the model's (written as 16 hex digits: JSON numbers lose
                                     * bits past 2^53) */
    uint32_t block_size, kv_blocks;
    int kv_type;                    /* dy_kv_type (kv/kv_pool.h) */
    char kv_addr[DY_REG_MAX_STR + 1]; /* decode/agg: "host:port" of its KV receiver, or "" */
    int kv_transfer;                /* dy_xfer_kind of that receiver (DY_XFER_TCP/UCX), or 0 */
    uint32_t threads;
    double lease_s;                 /* how long the entry holds without being written again */
    bool draining;                  /* leaving: it takes no new sequences */
    dy_reg_load load;
} dy_reg_entry;

/* "w" + id as 8 lowercase hex digits, into key (room for DY_REG_KEY_LEN + 1). */
void dy_reg_key(uint32_t id, char key[DY_REG_KEY_LEN + 1]);
/* The entry as its JSON value into out (cap bytes, NUL-terminated); returns its length, or -1
 * if it does not fit or memory ran out. */
int dy_reg_encode(const dy_reg_entry *e, char *out, size_t cap);
/* Parses and checks one value (len bytes, not NUL-terminated): every field present, of its
 * type and in range (role, kv_type and kv_transfer by name; strings within DY_REG_MAX_STR;
 * lease_s in (0, 3600]). false with a message naming the field in err. */
bool dy_reg_decode(const void *value, size_t len, dy_reg_entry *e, char *err, size_t errlen);
/* Whether key names a worker entry ("w" + 8 lowercase hex digits) and, if so, its id. */
bool dy_reg_parse_key(const char *key, uint32_t *id);
/* The entry as a new JSON object (what dy_reg_encode writes; `dyad cluster status --json`
 * shows it); NULL if memory ran out or role, kv_type or kv_transfer has no name. */
json_t *dy_reg_to_json(const dy_reg_entry *e);
/* "agg", "prefill", "decode"; NULL for another value. */
const char *dy_reg_role_name(int role);
/* The lease of an entry last written age_s ago, for people: "renewed 0.8 s ago / lease 3 s",
 * or "EXPIRED 12.0 s ago (lease 3 s)" once age_s is past lease_s. Whether it expired. */
bool dy_reg_lease_state(double age_s, double lease_s, char *out, size_t cap);

/* One entry of the bucket as dy_reg_list (below) found it. */
typedef struct {
    char key[DY_REG_MAX_STR + 1];
    uint32_t id;          /* when the key is a worker's */
    bool ok;              /* decoded: e holds it; otherwise why says why not */
    dy_reg_entry e;
    char why[256];
    double age_s;         /* since it was written, as dy_reg_watch_age */
} dy_reg_item;

#ifdef DYAD_HAVE_NATS
#include <nats/nats.h>

/* A bucket of cluster mode (this registry's; the node agents', serve/cluster/node.h). */
typedef struct {
    const char *name, *description;
    int max_value; /* bytes of one value */
} dy_kv_bucket;
/* Bucket b, created if it does not exist yet (file storage, history 1, max age max_age_s; an
 * existing bucket keeps its own). NULL with the reason in err. */
kvStore *dy_kv_open(natsConnection *nc, const dy_kv_bucket *b, double max_age_s, char *err,
                    size_t errlen);
/* The bucket if it exists; NULL with the reason in err, and *missing set when it does not. */
kvStore *dy_kv_bind(natsConnection *nc, const char *bucket, bool *missing, char *err,
                    size_t errlen);
/* Calls fn for every value of the bucket now (its key, its bytes, and how old it is as
 * dy_reg_watch_age says), until fn returns false (out of memory). false with the reason in err
 * when the server did not list them all within timeout_s. */
typedef bool (*dy_kv_each_fn)(void *ctx, const char *key, const void *value, size_t len,
                              double age_s);
bool dy_kv_each(kvStore *kv, double timeout_s, dy_kv_each_fn fn, void *ctx, char *err,
                size_t errlen);

/* The bucket, created if it does not exist yet (file storage, history 1, max age max_age_s;
 * an existing bucket keeps its own). NULL with the reason in err. */
kvStore *dy_reg_open(natsConnection *nc, double max_age_s, char *err, size_t errlen);
/* The bucket if it exists (what a reader such as `dyad cluster status` wants: it creates
 * nothing). NULL with the reason in err, and *missing set when it does not exist. */
kvStore *dy_reg_bind(natsConnection *nc, bool *missing, char *err, size_t errlen);
/* Writes (puts) e under its key. false with the reason in err. */
bool dy_reg_put(kvStore *kv, const dy_reg_entry *e, char *err, size_t errlen);
/* Deletes id's entry (a clean leave). */
bool dy_reg_delete(kvStore *kv, uint32_t id, char *err, size_t errlen);

/* What a watch sees: an entry written (put) or taken out (deleted or purged). */
typedef enum { DY_REG_PUT = 1, DY_REG_GONE = 2 } dy_reg_change;
typedef struct dy_reg_watch dy_reg_watch;
/* Watches every key of the bucket: the current entries first, then each change. */
dy_reg_watch *dy_reg_watch_start(kvStore *kv, char *err, size_t errlen);
/* The next change within timeout_s: 1 with *kind, *id and (for a put) *e filled; 0 when
 * nothing came in time; -1 on an error (err), including an entry that does not decode (its
 * key and the decoder's message are in err; the watch goes on). */
int dy_reg_watch_next(dy_reg_watch *w, double timeout_s, dy_reg_change *kind, uint32_t *id,
                      dy_reg_entry *e, char *err, size_t errlen);
/* Whether the watch has gone past the entries that were there when it started (the client's
 * "end of initial values"): from then on every change is new. */
bool dy_reg_watch_synced(const dy_reg_watch *w);
/* How long ago the server stored the last change dy_reg_watch_next returned (its put or its
 * delete), in seconds by this host's clock against the server's timestamp (0 if the server's
 * clock is ahead). A lease is judged from this, not from when the watch delivered it: an
 * entry among the initial values may be long dead. */
double dy_reg_watch_age(const dy_reg_watch *w);
void dy_reg_watch_stop(dy_reg_watch *w);

/* Every entry in the bucket now, in key order (*n of them; free() the array), the ones that do
 * not decode included with their reason. NULL with the reason in err when the server did not
 * list them all within timeout_s. */
dy_reg_item *dy_reg_list(kvStore *kv, double timeout_s, int *n, char *err, size_t errlen);
#endif

#endif
