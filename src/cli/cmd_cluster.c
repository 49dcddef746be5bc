/* cmd_cluster.c — `dyad cluster`: tools for cluster mode (docs/cluster.md). `dyad cluster
 * status` connects to the cluster's NATS server, lists the worker registry (the bucket of
 * serve/cluster/registry.h) and prints one line per worker — its role, host, model, KV
 * receiver, lease and load — or the same as JSON. The registry and the connection are
 * serve/cluster/'s; this file turns options into those calls and prints what they return. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "serve/cluster/nats_conn.h"
#include "serve/cluster/registry.h"
#include "serve/wire/wire.h"
#include "util/clock.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char cluster_usage[] = "usage: dyad cluster status --cluster nats://HOST:PORT\n";
static const char status_usage[] =
    "usage: dyad cluster status --cluster nats://HOST:PORT [--json] [--timeout S]\n"
    "Lists the workers registered in the cluster's NATS server (JetStream bucket "
    DY_REG_BUCKET "):\n"
    "one line each with its id, role, host and pid, model, KV block size, KV receiver and\n"
    "transfer, threads, lease, whether it is draining, and its load (running and waiting\n"
    "sequences, KV blocks used of its total); then how many there are of each role.\n";
static const char status_epilog[] =
    "\n"
    "A lease is EXPIRED when the worker has not written its entry for longer than its lease\n"
    "(it is dead, or cut off from NATS). Ages are this host's clock against the NATS server's.\n"
    "Exit status: 0 when the registry was read (no workers is not an error); 1 when the server\n"
    "cannot be reached within --timeout or does not answer; 2 on a usage error, a bad URL, or a\n"
    "dyad built without NATS (libnats-dev). docs/cluster.md describes the registry.\n";

typedef struct {
    const char *url;
    bool json;
    double timeout_s;
} status_opts;

typedef struct {
    int workers, by_role[3], expired, unreadable;
} counts;

static int parse_status(int argc, char **argv, status_opts *o)
{
    const dy_opt t[] = {
        {.name = "cluster", .kind = DY_OPT_STR, .dst = &o->url, .meta = "URL",
         .help = "the cluster's NATS server: nats://HOST:PORT, or several separated by commas "
                 "(required)"},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &o->json,
         .help = "print one JSON document instead of the table"},
        {.name = "timeout", .kind = DY_OPT_DOUBLE, .dst = &o->timeout_s, .meta = "S",
         .help = "give up after S seconds when the server cannot be reached or does not answer",
         .min = 0.1, .max = 600, .def = 5},
    };
    int rc = cli_parse("cluster status", status_usage, status_epilog, t,
                       (int)(sizeof t / sizeof t[0]), argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    char err[512];
    if (!o->url) {
        fprintf(stderr, "dyad cluster status: --cluster: required (see dyad cluster status "
                        "--help)\n");
        return 2;
    }
    if (!dy_nats_url_check(o->url, err, sizeof err)) {
        fprintf(stderr, "dyad cluster status: --cluster: %s\n", err);
        return 2;
    }
    return CLI_GO;
}

static void count(counts *c, const dy_reg_item *items, int n)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < n; i++) {
        if (!items[i].ok) {
            c->unreadable++;
            continue;
        }
        c->workers++;
        if (items[i].e.role >= 0 && items[i].e.role < 3)
            c->by_role[items[i].e.role]++;
        if (items[i].age_s > items[i].e.lease_s)
            c->expired++;
    }
}

static void print_worker(const dy_reg_item *it)
{
    const dy_reg_entry *e = &it->e;
    char lease[96];
    dy_reg_lease_state(it->age_s, e->lease_s, lease, sizeof lease);
    const char *xfer = e->kv_transfer == DY_XFER_UCX ? "ucx" : "tcp";
    printf("%08x  %-7s  %s pid %u  %s  block %u  kv %s%s%s  threads %u  %s%s  running %u "
           "waiting %u  kv blocks %u/%u\n",
           (unsigned)e->id, dy_reg_role_name(e->role), e->host, (unsigned)e->pid, e->model,
           (unsigned)e->block_size, e->kv_addr[0] ? e->kv_addr : "-", e->kv_addr[0] ? " " : "",
           e->kv_addr[0] ? xfer : "", (unsigned)e->threads, lease,
           e->draining ? "  draining" : "", (unsigned)e->load.running,
           (unsigned)e->load.waiting, (unsigned)e->load.kv_used, (unsigned)e->load.kv_total);
}

static void print_table(const status_opts *o, const dy_reg_item *items, int n)
{
    counts c;
    count(&c, items, n);
    for (int i = 0; i < n; i++) {
        if (items[i].ok)
            print_worker(&items[i]);
        else
            printf("%s  unreadable: %s\n", items[i].key, items[i].why);
    }
    if (c.workers == 0)
        printf("no workers registered at %s", o->url);
    else
        printf("%d worker%s: %d prefill, %d decode, %d aggregated", c.workers,
               c.workers == 1 ? "" : "s", c.by_role[DY_ROLE_PREFILL], c.by_role[DY_ROLE_DECODE],
               c.by_role[DY_ROLE_AGG]);
    if (c.expired)
        printf("; %d lease%s expired", c.expired, c.expired == 1 ? "" : "s");
    if (c.unreadable)
        printf("; %d unreadable entr%s", c.unreadable, c.unreadable == 1 ? "y" : "ies");
    printf("\n");
}

static json_t *item_json(const dy_reg_item *it)
{
    if (!it->ok)
        return json_pack("{s:s, s:s}", "key", it->key, "error", it->why);
    json_t *o = dy_reg_to_json(&it->e);
    if (o && json_object_update_new(o, json_pack("{s:s, s:f, s:b}", "key", it->key, "age_s",
                                                  it->age_s, "lease_expired",
                                                  it->age_s > it->e.lease_s)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* 0, or 1 when memory ran out. */
static int print_json(const status_opts *o, const dy_reg_item *items, int n)
{
    counts c;
    count(&c, items, n);
    json_t *workers = json_array(), *bad = json_array();
    bool ok = workers && bad;
    for (int i = 0; ok && i < n; i++)
        ok = json_array_append_new(items[i].ok ? workers : bad, item_json(&items[i])) == 0;
    json_t *root = ok ? json_pack("{s:s, s:s, s:O, s:O, s:{s:i, s:i, s:i, s:i, s:i, s:i}}",
                                  "cluster", o->url, "bucket", DY_REG_BUCKET, "workers", workers,
                                  "unreadable", bad, "counts", "workers", c.workers, "prefill",
                                  c.by_role[DY_ROLE_PREFILL], "decode", c.by_role[DY_ROLE_DECODE],
                                  "aggregated", c.by_role[DY_ROLE_AGG], "expired", c.expired,
                                  "unreadable", c.unreadable)
                      : NULL;
    json_decref(workers);
    json_decref(bad);
    /* 6 digits: ages and leases for people (the registry itself keeps every bit) */
    size_t flags = JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6);
    char *text = root ? json_dumps(root, flags) : NULL;
    json_decref(root);
    if (!text) {
        fprintf(stderr, "dyad cluster status: out of memory\n");
        return 1;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

#ifdef DYAD_HAVE_NATS
/* The registry's entries (*n; free() them), or NULL with why in err: the server could not be
 * reached or did not answer by the deadline. A bucket that does not exist is an empty list. */
static dy_reg_item *read_registry(const status_opts *o, int *n, char *err, size_t errlen)
{
    double deadline = dy_now() + o->timeout_s;
    dy_nats_opts no = {.url = o->url, .name = "dyad cluster status",
                       .who = "dyad cluster status", .timeout_s = o->timeout_s};
    natsConnection *nc = dy_nats_connect(&no, err, errlen);
    if (!nc)
        return NULL;
    bool missing = false;
    dy_reg_item *items = NULL;
    char why[512] = "";
    kvStore *kv = dy_reg_bind(nc, &missing, why, sizeof why);
    if (kv) {
        double left = deadline - dy_now();
        items = dy_reg_list(kv, left > 0.2 ? left : 0.2, n, why, sizeof why);
        kvStore_Destroy(kv);
    } else if (missing) { /* no worker has ever registered */
        *n = 0;
        items = calloc(1, sizeof *items);
        snprintf(why, sizeof why, "out of memory");
    }
    if (!items)
        snprintf(err, errlen, "%.400s: %.500s", o->url, why);
    dy_nats_close(nc);
    return items;
}

static int status(int argc, char **argv)
{
    status_opts o = {0};
    int rc = parse_status(argc, argv, &o);
    if (rc != CLI_GO)
        return rc;
    char err[1024];
    int n = 0;
    dy_reg_item *items = read_registry(&o, &n, err, sizeof err);
    nats_Close(); /* the client library's threads and memory, before the exit */
    if (!items) {
        fprintf(stderr, "dyad cluster status: %s\n", err);
        return 1;
    }
    if (o.json)
        rc = print_json(&o, items, n);
    else
        print_table(&o, items, n);
    free(items);
    return o.json ? rc : 0;
}
#else
static int status(int argc, char **argv)
{
    status_opts o = {0};
    int rc = parse_status(argc, argv, &o);
    if (rc != CLI_GO)
        return rc;
    (void)print_table;
    (void)print_json;
    fprintf(stderr, "dyad cluster status: this dyad was built without NATS (install libnats-dev "
                    "and rebuild: scripts/install-deps.sh)\n");
    return 2;
}
#endif

int cmd_cluster(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "status"))
        return status(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(cluster_usage, stdout);
        fputs("  status  the workers registered in the cluster, their leases and load "
              "(dyad cluster status --help)\n", stdout);
        return 0;
    }
    fprintf(stderr, "%sdyad cluster: %s\n", cluster_usage,
            argc < 2 ? "which tool? (status)" : "unknown tool (status)");
    return 2;
}
