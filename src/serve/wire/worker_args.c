/* worker_args.c — see worker_args.h. */
#include "serve/wire/worker_args.h"

#include "kv/kv_pool.h"
#include "serve/wire/wire.h"

#include <stdio.h>
#include <string.h>

static const char *const role_names[] = {"agg", "prefill", "decode", NULL};
static const char *const offload_names[] = {"write-through", "write-back", NULL};
static const char *const hold_names[] = {"prefetch", "pin", "off", NULL};
static const int role_values[] = {DY_ROLE_AGG, DY_ROLE_PREFILL, DY_ROLE_DECODE};
static const char *const receiver_names[] = {"tcp", "ucx", NULL};
static const int receiver_values[] = {DY_XFER_TCP, DY_XFER_UCX};

typedef struct {
    dy_opt opt;
    const char *serve_name; /* its name in `dyad serve`; NULL: set per worker, not there */
} worker_opt;

/* The one description of a worker's options; the fields of c they store into. Returns how
 * many, of which the first *n_spawned are those a frontend may pass to a worker it starts. */
static int describe(dy_worker_config *c, worker_opt *out, int *n_spawned)
{
    const worker_opt all[] = {
        {{.name = "model", .kind = DY_OPT_STR, .dst = &c->model, .meta = "PATH",
          .help = "GGUF file or llama2.c checkpoint"}, "model"},
        {{.name = "tokenizer", .kind = DY_OPT_STR, .dst = &c->tokenizer, .meta = "PATH",
          .help = "llama2.c tokenizer.bin for checkpoints"}, "tokenizer"},
        {{.name = "threads", .kind = DY_OPT_INT, .dst = &c->threads, .meta = "N",
          .help = "engine threads per worker", .min = 1, .max = 256, .def = 1},
         "threads-per-worker"},
        {{.name = "kv-mem", .kind = DY_OPT_INT, .dst = &c->kv_mem_mib, .meta = "MiB",
          .help = "KV cache per worker", .min = 1, .max = 1 << 20, .def = 256}, "kv-mem"},
        {{.name = "kv-blocks", .kind = DY_OPT_INT, .dst = &c->kv_blocks, .meta = "N",
          .help = "KV cache per worker in blocks (overrides --kv-mem)", .min = 2,
          .max = 1 << 24, .shown_default = ""}, "kv-blocks"},
        {{.name = "block-size", .kind = DY_OPT_INT, .dst = &c->block_size, .meta = "N",
          .help = "positions per KV block", .min = 1, .max = 256, .def = 16}, "block-size"},
        {{.name = "kv-type", .kind = DY_OPT_ENUM, .dst = &c->kv_type, .meta = "T",
          .help = "element type of the KV cache, its transfers and its tiers: f32, f16 (half "
                  "the bytes) or q8_0 (int8 with a scale per position and head: about a "
                  "quarter); docs/engine.md, \"KV types\"",
          .names = dy_kv_type_names(), .def = DY_KV_F32}, "kv-type"},
        {{.name = "max-batch-tokens", .kind = DY_OPT_INT, .dst = &c->max_batch_tokens,
          .meta = "N", .help = "token budget of one engine step", .min = 1, .max = 65536,
          .def = 512}, "max-batch-tokens"},
        {{.name = "max-running", .kind = DY_OPT_INT, .dst = &c->max_running, .meta = "N",
          .help = "sequences in one worker's running batch", .min = 1, .max = 4096,
          .def = 64}, "max-running"},
        {{.name = "no-prefix-cache", .kind = DY_OPT_FLAG, .dst = &c->no_prefix_cache,
          .help = "workers compute every prompt in full (for measurements)"},
         "no-prefix-cache"},
        {{.name = "no-kv-events", .kind = DY_OPT_FLAG, .dst = &c->no_kv_events,
          .help = "workers publish no KV events; the frontend's router predicts their caches "
                  "from its own decisions (approximate mode)"}, "no-kv-events"},
        {{.name = "kv-host-mem", .kind = DY_OPT_INT, .dst = &c->kv_host_mib, .meta = "MiB",
          .help = "a host-memory KV tier per worker: blocks the KV cache evicts wait there and "
                  "are loaded back when a prompt asks for them and loading is cheaper than "
                  "computing them (0: none)", .min = 0, .max = 1 << 22, .def = 0,
          .section = "KV tiers (docs/kv-tiers.md)"}, "kv-host-mem"},
        {{.name = "kv-disk-dir", .kind = DY_OPT_STR, .dst = &c->kv_disk_dir, .meta = "DIR",
          .help = "a disk KV tier below the host tier: one file per worker in DIR, removed "
                  "when the worker ends (needs --kv-host-mem)"}, "kv-disk-dir"},
        {{.name = "kv-disk-mem", .kind = DY_OPT_DOUBLE, .dst = &c->kv_disk_gib, .meta = "GiB",
          .help = "size of the disk tier per worker", .min = 0.0001, .max = 65536, .def = 4},
         "kv-disk-mem"},
        {{.name = "kv-offload", .kind = DY_OPT_ENUM, .dst = &c->kv_offload, .meta = "POLICY",
          .help = "write-through: every computed block is copied to the host tier; "
                  "write-back: blocks are copied just before eviction takes them",
          .names = offload_names, .def = 0}, "kv-offload"},
        {{.name = "kv-disk-min-uses", .kind = DY_OPT_INT, .dst = &c->kv_disk_min_uses,
          .meta = "N", .help = "a host-tier block goes to disk only once prompts have asked "
                               "for it this many times", .min = 1, .max = 1000000, .def = 2},
         "kv-disk-min-uses"},
        {{.name = "kv-hold", .kind = DY_OPT_ENUM, .dst = &c->kv_hold, .meta = "POLICY",
          .help = "a conversation's KV between its turns (dyad.session): prefetch keeps it in "
                  "the tiers and brings it up just before the next turn is due; pin keeps it in "
                  "the KV cache until then; off treats it as any prompt's",
          .names = hold_names, .def = 0, .given = &c->kv_hold_given}, "kv-hold"},
        {{.name = "kv-hold-ttl", .kind = DY_OPT_DOUBLE, .dst = &c->kv_hold_ttl_s, .meta = "S",
          .help = "a held conversation is let go this long after its turn", .min = 0.001,
          .max = 86400, .def = 300}, "kv-hold-ttl"},
        {{.name = "kv-hold-margin", .kind = DY_OPT_DOUBLE, .dst = &c->kv_hold_margin_ms,
          .meta = "MS", .help = "the prefetch starts this long before the next turn is due, "
                                "on top of the time the copies are expected to take",
          .min = 0, .max = 600000, .def = 20}, "kv-hold-margin"},
        {{.name = "kv-hold-share", .kind = DY_OPT_DOUBLE, .dst = &c->kv_hold_share, .meta = "F",
          .help = "the share of the host tier (prefetch) or of the KV cache (pin) that held "
                  "conversations may pin, and the most of the KV cache one prefetch fills",
          .min = 0, .max = 1, .def = 0.5}, "kv-hold-share"},
        {{.name = "kv-hold-disk-after", .kind = DY_OPT_DOUBLE, .dst = &c->kv_hold_disk_after_s,
          .meta = "S", .help = "prefetch with a disk tier: a held conversation expected back "
                               "at least S seconds later waits on disk, its host-tier copies "
                               "let go; 0 = never", .min = 0, .max = 86400, .def = 30},
         "kv-hold-disk-after"},
        {{.name = "fd", .kind = DY_OPT_INT, .dst = &c->fd, .meta = "N",
          .help = "connected socket to the frontend", .min = 0, .max = 1 << 20, .def = -1,
          .shown_default = ""}, NULL},
        {{.name = "id", .kind = DY_OPT_INT, .dst = &c->worker_id, .meta = "N",
          .help = "worker id (for logs and metrics)", .min = 0, .max = DY_WORKER_ID_MAX,
          .shown_default = ""}, NULL},
        {{.name = "role", .kind = DY_OPT_ENUM, .dst = &c->role, .meta = "R",
          .help = "agg (prefill and decode), prefill, or decode", .names = role_names,
          .values = role_values, .def = DY_ROLE_AGG}, NULL},
        {{.name = "kv-listen", .kind = DY_OPT_STR, .dst = &c->kv_listen, .meta = "HOST:PORT",
          .help = "decode role: also receive KV blocks over TCP or UCX (--kv-receiver) on "
                  "HOST:PORT (port 0: any)"}, NULL},
        {{.name = "kv-receiver", .kind = DY_OPT_ENUM, .dst = &c->kv_receiver, .meta = "tcp|ucx",
          .help = "what --kv-listen receives KV blocks over", .names = receiver_names,
          .values = receiver_values, .def = DY_XFER_TCP}, NULL},
        {{.name = "switchable", .kind = DY_OPT_FLAG, .dst = &c->switchable,
          .help = "the frontend may switch this worker's role (a ROLE frame): its KV pool is "
                  "shared memory and --kv-listen applies in every role"}, NULL},
    };
    /* Only for a worker started by hand (cluster mode): a frontend never passes these to the
     * workers it starts (dy_worker_args_argv leaves them out), so they come last. */
    const worker_opt by_hand[] = {
        {{.name = "cluster", .kind = DY_OPT_STR, .dst = &c->cluster, .meta = "URL",
          .help = "join the cluster whose NATS server is at URL (nats://HOST:PORT) instead of "
                  "serving one frontend on --fd (docs/cluster.md)",
          .section = "Cluster mode (docs/cluster.md)"}, NULL},
        {{.name = "cluster-lease", .kind = DY_OPT_DOUBLE, .dst = &c->cluster_lease_s,
          .meta = "S", .help = "frontends take the worker as gone when its registry entry has "
                               "not been renewed for S seconds (it renews every S/3)",
          .min = 0.3, .max = 3600, .def = 3}, NULL},
        {{.name = "cluster-timeout", .kind = DY_OPT_DOUBLE, .dst = &c->cluster_timeout_s,
          .meta = "S", .help = "give up when NATS cannot be reached within S seconds of the "
                               "start (retrying with a growing pause); 0 = one try",
          .min = 0, .max = 86400, .def = 60}, NULL},
        {{.name = "cluster-drain", .kind = DY_OPT_DOUBLE, .dst = &c->cluster_drain_s,
          .meta = "S", .help = "on SIGINT/SIGTERM, how long running sequences may finish "
                               "before the worker leaves", .min = 0, .max = 86400, .def = 30},
         NULL},
        {{.name = "cluster-host", .kind = DY_OPT_STR, .dst = &c->cluster_host, .meta = "NAME",
          .help = "the host name the registry shows", .shown_default = "the host's name"},
         NULL},
    };
    _Static_assert(sizeof all / sizeof all[0] + sizeof by_hand / sizeof by_hand[0] <=
                   DY_WORKER_MAX_OPTS, "DY_WORKER_MAX_OPTS");
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        out[n++] = all[i];
    *n_spawned = n;
    for (size_t i = 0; i < sizeof by_hand / sizeof by_hand[0]; i++)
        out[n++] = by_hand[i];
    return n;
}

int dy_worker_args_opts(dy_worker_config *c, dy_worker_opts_set which, dy_opt *out)
{
    worker_opt all[DY_WORKER_MAX_OPTS];
    int n_spawned, n = describe(c, all, &n_spawned), k = 0;
    for (int i = 0; i < n; i++) {
        if (which == DY_WORKER_OPTS_ALL || (which == DY_WORKER_OPTS_SPAWNED && i < n_spawned)) {
            out[k++] = all[i].opt;
        } else if (all[i].serve_name) {
            out[k] = all[i].opt;
            out[k++].name = all[i].serve_name;
        }
    }
    return k;
}

dy_opts_result dy_worker_args_parse(int argc, char **argv, dy_worker_config *out, char *err,
                                    size_t errlen)
{
    dy_opt opts[DY_WORKER_MAX_OPTS];
    *out = (dy_worker_config){0};
    int n = dy_worker_args_opts(out, DY_WORKER_OPTS_ALL, opts);
    dy_opts_result r = dy_opts_parse(opts, n, argc, argv, NULL, err, errlen);
    return r == DY_OPTS_OK && !dy_worker_args_check(out, err, errlen) ? DY_OPTS_BAD : r;
}

bool dy_worker_args_check(const dy_worker_config *c, char *err, size_t errlen)
{
    if (strcmp(hold_names[c->kv_hold], "off") != 0 && c->kv_host_mib == 0 &&
        c->kv_hold_given) {
        snprintf(err, errlen, "--kv-hold %s needs --kv-host-mem (holds live in the KV tiers)",
                 hold_names[c->kv_hold]);
        return false;
    }
    if (c->kv_disk_dir && c->kv_host_mib == 0) {
        snprintf(err, errlen, "--kv-disk-dir needs --kv-host-mem (the disk tier is below the "
                              "host tier)");
        return false;
    }
    return true;
}

int dy_worker_args_argv(const dy_worker_config *c, char **argv, int cap, char *store,
                        size_t storecap)
{
    dy_worker_config copy = *c; /* the table's destinations; strings still point into c's */
    dy_opt opts[DY_WORKER_MAX_OPTS];
    int n = dy_worker_args_opts(&copy, DY_WORKER_OPTS_SPAWNED, opts);
    return dy_opts_to_argv(opts, n, argv, cap, store, storecap);
}
