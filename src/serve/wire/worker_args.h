/* worker_args.h — the command line of `dyad worker`, described once: the one table of a
 * worker's options, which `dyad worker` parses and the frontend turns back into the argument
 * vector of each worker it starts. `dyad serve` takes the options its workers share (model,
 * engine and cache sizes, ...) from the same table, so they are parsed, checked and
 * documented in one place. */
#ifndef DYAD_WORKER_ARGS_H
#define DYAD_WORKER_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include "util/opts.h"

/* A worker's settings: what `dyad worker` parses and the frontend starts each worker with. */
typedef struct {
    const char *model, *tokenizer;
    int fd;               /* connected socket to the frontend */
    int worker_id;
    int threads;
    int kv_blocks;        /* 0: derive from kv_mem_mib */
    int kv_mem_mib;
    int block_size;
    int kv_type;          /* dy_kv_type (kv/kv_pool.h): one for every worker of a deployment */
    int max_batch_tokens;
    int max_running;
    bool no_prefix_cache;
    bool no_kv_events;    /* publish no KV events (the router runs in approximate mode) */
    int role;              /* dy_worker_role (serve/wire/wire.h) */
    const char *kv_listen; /* decode role: "host:port" for the KV receiver, or NULL */
    int kv_receiver;       /* dy_xfer_kind of that receiver: DY_XFER_TCP or DY_XFER_UCX */
    bool switchable;       /* may be told to take another role (ROLE): its KV pool is in
                            * shared memory, and it runs the TCP receiver, whatever its role */
    /* lower KV tiers (serve/worker/kv_tiers.h) */
    int kv_host_mib;       /* 0: none */
    const char *kv_disk_dir; /* NULL: none */
    double kv_disk_gib;
    int kv_offload;        /* dy_offload_policy */
    int kv_disk_min_uses;
    int kv_hold;           /* dy_hold_policy */
    bool kv_hold_given;    /* on the command line (holds need the tiers) */
    double kv_hold_ttl_s, kv_hold_margin_ms, kv_hold_share, kv_hold_disk_after_s;
    /* cluster mode (serve/cluster/worker_link.h): the NATS URL, or NULL (a child of
     * `dyad serve`, on --fd) */
    const char *cluster;
    double cluster_lease_s, cluster_timeout_s, cluster_drain_s;
    const char *cluster_host; /* the name `dyad cluster status` shows; NULL: the host name */
} dy_worker_config;

/* The largest --id (a node agent draws its workers' ids below it). */
#define DY_WORKER_ID_MAX (1 << 20)

typedef enum {
    DY_WORKER_OPTS_ALL,    /* every option of `dyad worker` */
    /* those `dyad serve` takes once for all its workers, under its names (--threads is
     * --threads-per-worker there); the frontend sets the others (--fd, --id, --role,
     * --kv-listen, --kv-receiver, --switchable) itself for each worker it starts */
    DY_WORKER_OPTS_SHARED,
    /* every option a frontend may pass the workers it starts (all but the cluster mode's) */
    DY_WORKER_OPTS_SPAWNED,
} dy_worker_opts_set;

#define DY_WORKER_MAX_OPTS 40
/* The entries of `which`, storing into c, written to out (room for DY_WORKER_MAX_OPTS);
 * returns how many. */
int dy_worker_args_opts(dy_worker_config *c, dy_worker_opts_set which, dy_opt *out);

/* What the table alone cannot check: options that need each other. false with the problem in
 * err. */
bool dy_worker_args_check(const dy_worker_config *c, char *err, size_t errlen);

/* `dyad worker`'s parse: every default, then argv[1..argc), then dy_worker_args_check. See
 * dy_opts_parse. */
dy_opts_result dy_worker_args_parse(int argc, char **argv, dy_worker_config *out, char *err,
                                    size_t errlen);

/* Room dy_worker_args_argv needs at most: argv entries (with the closing NULL), and bytes for
 * the numbers it prints. */
#define DY_WORKER_ARGV_MAX (2 * DY_WORKER_MAX_OPTS + 1)
#define DY_WORKER_ARGV_STORE 512
/* The options that give c ("--name", "VALUE", ...; those at their default are left out) into
 * argv, NULL-terminated; strings point into c's, numbers into store. Returns how many, or -1
 * when cap or storecap is too small. dy_worker_args_parse of the result gives c back. */
int dy_worker_args_argv(const dy_worker_config *c, char **argv, int cap, char *store,
                        size_t storecap);

#endif
