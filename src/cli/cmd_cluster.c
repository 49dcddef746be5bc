/* cmd_cluster.c — `dyad cluster`: tools for cluster mode (docs/cluster.md). `dyad cluster
 * status` connects to the cluster's NATS server, lists the worker registry (the bucket of
 * serve/cluster/registry.h) and prints one line per worker — its role, host, model, KV
 * receiver, lease and load — or the same as JSON. `nodes`, `start` and `stop` are the node
 * agents' (serve/cluster/node.h): `nodes` lists their bucket, `start` asks one agent for a
 * worker, `stop` asks the agent that runs a worker to stop it. The registry, the node
 * entries and requests and the connection are serve/cluster/'s; this file turns options into
 * those calls and prints what they return. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "serve/cluster/nats_conn.h"
#include "serve/cluster/node.h"
#include "serve/cluster/registry.h"
#include "serve/wire/wire.h"
#include "util/buf.h"
#include "util/clock.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char cluster_usage[] = "usage: dyad cluster status|nodes|start|stop --cluster "
                                    "nats://HOST:PORT ...\n";
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

/* Prints root (taking it; NULL: it could not be made) indented: 0, or 1 when memory ran
 * out. */
static int print_doc(const char *cmd, json_t *root)
{
    /* 6 digits: ages and leases for people (the buckets themselves keep every bit) */
    size_t flags = JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6);
    char *text = root ? json_dumps(root, flags) : NULL;
    json_decref(root);
    if (!text) {
        fprintf(stderr, "dyad %s: out of memory\n", cmd);
        return 1;
    }
    printf("%s\n", text);
    free(text);
    return 0;
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
    return print_doc("cluster status", root);
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

/* ---------------------------------------------------------------- node agents */

static const char nodes_usage[] =
    "usage: dyad cluster nodes --cluster nats://HOST:PORT [--json] [--timeout S]\n"
    "Lists the node agents (`dyad node`) registered in the bucket " DY_NODE_BUCKET ": one line\n"
    "each with its key, host and pid, cores used of its budget, lease, and its workers.\n";
static const char start_usage[] =
    "usage: dyad cluster start --cluster nats://HOST:PORT --node KEY|HOST --role R --threads T\n"
    "Asks a node agent (by its key, nXXXXXXXX, or its host name) to start a worker of role R\n"
    "and T threads on its host; prints the worker's key and pid once it has registered.\n";
static const char stop_usage[] =
    "usage: dyad cluster stop --cluster nats://HOST:PORT --worker wXXXXXXXX\n"
    "Asks the node agent that runs the worker to stop it (it leaves cleanly, finishing what it\n"
    "runs within the agent's --drain); prints how it ended.\n";
static const char nodes_epilog[] =
    "\n"
    "Exit status: 0 on success; 1 when the agent refuses (its error is printed), does not\n"
    "answer within --timeout, or the server cannot be reached; 2 on a usage error, a bad URL,\n"
    "or a dyad built without NATS (libnats-dev). docs/cluster.md, \"Node agents\".\n";

typedef struct {
    const char *url, *node, *worker;
    bool json;
    int role, threads;
    double timeout_s;
} node_opts;

/* One entry of the nodes' bucket. */
typedef struct {
    char key[DY_REG_MAX_STR + 1];
    bool ok;
    dy_node_entry e;
    char why[256];
    double age_s;
} node_item;

typedef struct {
    node_item *items;
    int n;
    size_t cap;
} node_list;

static const char *const role_names[] = {"agg", "prefill", "decode", NULL};

static int parse_node_opts(const char *cmd, const char *usage, int argc, char **argv,
                           node_opts *o)
{
    const dy_opt all[] = {
        {.name = "cluster", .kind = DY_OPT_STR, .dst = &o->url, .meta = "URL",
         .help = "the cluster's NATS server: nats://HOST:PORT, or several separated by commas "
                 "(required)"},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &o->json,
         .help = "print one JSON document instead of the table"},
        {.name = "node", .kind = DY_OPT_STR, .dst = &o->node, .meta = "KEY|HOST",
         .help = "the node agent: its key (nXXXXXXXX) or its host name (required)"},
        {.name = "role", .kind = DY_OPT_ENUM, .dst = &o->role, .names = role_names,
         .help = "the worker's role (required)", .def = -1, .shown_default = ""},
        {.name = "threads", .kind = DY_OPT_INT, .dst = &o->threads, .meta = "T",
         .help = "the worker's threads: the cores it takes from the node's budget (required)",
         .min = 1, .max = 256, .shown_default = ""},
        {.name = "worker", .kind = DY_OPT_STR, .dst = &o->worker, .meta = "wXXXXXXXX",
         .help = "the worker's key, as `dyad cluster nodes` shows it (required)"},
        {.name = "timeout", .kind = DY_OPT_DOUBLE, .dst = &o->timeout_s, .meta = "S",
         .help = "give up after S seconds when the server cannot be reached or the agent does "
                 "not answer (a start waits for the worker to load and register)",
         .min = 0.1, .max = 3600, .def = !strcmp(cmd, "cluster nodes") ? 5 : 150},
    };
    /* Each tool takes the options it uses. */
    const char *want = !strcmp(cmd, "cluster nodes") ? "cluster json timeout"
                       : !strcmp(cmd, "cluster start") ? "cluster node role threads timeout"
                                                       : "cluster worker timeout";
    dy_opt t[8];
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        char word[32];
        snprintf(word, sizeof word, "%s", all[i].name);
        const char *at = strstr(want, word);
        if (at && (at == want || at[-1] == ' ') &&
            (at[strlen(word)] == ' ' || at[strlen(word)] == 0))
            t[n++] = all[i];
    }
    o->role = -1;
    int rc = cli_parse(cmd, usage, nodes_epilog, t, n, argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    char err[512];
    const char *missing = !o->url ? "--cluster"
                          : !strcmp(cmd, "cluster start") && !o->node ? "--node"
                          : !strcmp(cmd, "cluster start") && o->role < 0 ? "--role"
                          : !strcmp(cmd, "cluster start") && !o->threads ? "--threads"
                          : !strcmp(cmd, "cluster stop") && !o->worker ? "--worker" : NULL;
    if (missing) {
        fprintf(stderr, "dyad %s: %s: required (see dyad %s --help)\n", cmd, missing, cmd);
        return 2;
    }
    if (!dy_nats_url_check(o->url, err, sizeof err)) {
        fprintf(stderr, "dyad %s: --cluster: %s\n", cmd, err);
        return 2;
    }
    uint32_t id;
    if (o->worker && !dy_reg_parse_key(o->worker, &id)) {
        fprintf(stderr, "dyad %s: --worker: '%.200s' is not a worker's key (w and 8 lowercase "
                "hex digits)\n", cmd, o->worker);
        return 2;
    }
    if (o->node && (!*o->node || strlen(o->node) > DY_REG_MAX_STR)) {
        fprintf(stderr, "dyad %s: --node: a node's key or host name\n", cmd);
        return 2;
    }
    return CLI_GO;
}

static void print_node(const node_item *it)
{
    const dy_node_entry *e = &it->e;
    char lease[96];
    dy_reg_lease_state(it->age_s, e->lease_s, lease, sizeof lease);
    printf("%s  %s pid %u  cores %u/%u used  %s  %d worker%s", it->key, e->host,
           (unsigned)e->pid, (unsigned)e->cores_used, (unsigned)e->cores, lease, e->n_workers,
           e->n_workers == 1 ? "" : "s");
    for (int i = 0; i < e->n_workers; i++)
        printf("%s%s %s %u thread%s pid %u", i ? ", " : ": ", e->workers[i].key,
               dy_reg_role_name(e->workers[i].role), (unsigned)e->workers[i].threads,
               e->workers[i].threads == 1 ? "" : "s", (unsigned)e->workers[i].pid);
    printf("\n");
}

static void print_nodes(const node_opts *o, const node_list *l)
{
    int ok = 0, bad = 0, expired = 0;
    unsigned used = 0, total = 0;
    for (int i = 0; i < l->n; i++) {
        if (!l->items[i].ok) {
            printf("%s  unreadable: %s\n", l->items[i].key, l->items[i].why);
            bad++;
            continue;
        }
        print_node(&l->items[i]);
        ok++;
        expired += l->items[i].age_s > l->items[i].e.lease_s;
        used += l->items[i].e.cores_used;
        total += l->items[i].e.cores;
    }
    if (ok == 0)
        printf("no node agents registered at %s", o->url);
    else
        printf("%d node%s: %u of %u cores used", ok, ok == 1 ? "" : "s", used, total);
    if (expired)
        printf("; %d lease%s expired", expired, expired == 1 ? "" : "s");
    if (bad)
        printf("; %d unreadable entr%s", bad, bad == 1 ? "y" : "ies");
    printf("\n");
}

static int print_nodes_json(const node_opts *o, const node_list *l)
{
    json_t *nodes = json_array(), *bad = json_array();
    bool ok = nodes && bad;
    for (int i = 0; ok && i < l->n; i++) {
        const node_item *it = &l->items[i];
        json_t *j = NULL;
        if (!it->ok)
            j = json_pack("{s:s, s:s}", "key", it->key, "error", it->why);
        else if ((j = dy_node_to_json(&it->e)) &&
                 json_object_update_new(j, json_pack("{s:s, s:f, s:b}", "key", it->key, "age_s",
                                                     it->age_s, "lease_expired",
                                                     it->age_s > it->e.lease_s)) != 0) {
            json_decref(j);
            j = NULL;
        }
        ok = json_array_append_new(it->ok ? nodes : bad, j) == 0;
    }
    json_t *root = ok ? json_pack("{s:s, s:s, s:O, s:O}", "cluster", o->url, "bucket",
                                  DY_NODE_BUCKET, "nodes", nodes, "unreadable", bad)
                      : NULL;
    json_decref(nodes);
    json_decref(bad);
    return print_doc("cluster nodes", root);
}

#ifdef DYAD_HAVE_NATS
static bool push_node(void *ctx, const char *key, const void *value, size_t len, double age_s)
{
    node_list *l = ctx;
    if (!dy_array_reserve((void **)&l->items, &l->cap, (size_t)l->n + 1, sizeof *l->items))
        return false;
    node_item *it = &l->items[l->n++];
    memset(it, 0, sizeof *it);
    snprintf(it->key, sizeof it->key, "%s", key);
    it->age_s = age_s;
    uint32_t id;
    if (!dy_node_parse_key(key, &id))
        snprintf(it->why, sizeof it->why, "not a node's key (n and 8 hex digits)");
    else if (dy_node_decode(value, len, &it->e, it->why, sizeof it->why) && it->e.id != id)
        snprintf(it->why, sizeof it->why, "id: %08x is not the key's", (unsigned)it->e.id);
    else
        it->ok = it->why[0] == 0;
    return true;
}

static int by_node_key(const void *a, const void *b)
{
    return strcmp(((const node_item *)a)->key, ((const node_item *)b)->key);
}

/* Connects and lists the nodes' bucket into l (a bucket that does not exist is no nodes);
 * the connection, or NULL with why printed. */
static natsConnection *read_nodes(const char *cmd, const node_opts *o, node_list *l)
{
    char err[1024], why[512] = "";
    double deadline = dy_now() + o->timeout_s;
    char who[64];
    snprintf(who, sizeof who, "dyad %s", cmd);
    dy_nats_opts no = {.url = o->url, .name = who, .who = who,
                       .timeout_s = o->timeout_s < 5 ? o->timeout_s : 5};
    natsConnection *nc = dy_nats_connect(&no, err, sizeof err);
    if (!nc) {
        fprintf(stderr, "dyad %s: %s\n", cmd, err);
        return NULL;
    }
    bool missing = false, ok = false;
    kvStore *kv = dy_kv_bind(nc, DY_NODE_BUCKET, &missing, why, sizeof why);
    if (kv) {
        double left = deadline - dy_now();
        ok = dy_kv_each(kv, left > 0.2 ? left : 0.2, push_node, l, why, sizeof why);
        kvStore_Destroy(kv);
    } else
        ok = missing;
    if (!ok) {
        fprintf(stderr, "dyad %s: %.400s: %.500s\n", cmd, o->url, why);
        dy_nats_close(nc);
        return NULL;
    }
    if (l->n > 1)
        qsort(l->items, (size_t)l->n, sizeof *l->items, by_node_key);
    return nc;
}

static int nodes(int argc, char **argv)
{
    node_opts o = {0};
    int rc = parse_node_opts("cluster nodes", nodes_usage, argc, argv, &o);
    if (rc != CLI_GO)
        return rc;
    node_list l = {0};
    natsConnection *nc = read_nodes("cluster nodes", &o, &l);
    rc = 1;
    if (nc) {
        rc = 0;
        if (o.json)
            rc = print_nodes_json(&o, &l);
        else
            print_nodes(&o, &l);
        dy_nats_close(nc);
    }
    free(l.items);
    nats_Close();
    return rc;
}

/* Sends q to the agent with key `key` and prints its answer: the exit status. */
static int ask_node(const char *cmd, natsConnection *nc, const char *key, const dy_node_req *q,
                    double timeout_s)
{
    char body[DY_NODE_MAX_REQUEST + 1], subject[64], err[512];
    int len = dy_node_req_encode(q, body, sizeof body);
    if (len < 0) {
        fprintf(stderr, "dyad %s: the request cannot be encoded\n", cmd);
        return 1;
    }
    snprintf(subject, sizeof subject, "dyad.n.%s.cmd", key);
    natsMsg *reply = NULL;
    natsStatus s = natsConnection_Request(&reply, nc, subject, body, len,
                                          (int64_t)(timeout_s * 1e3));
    if (s != NATS_OK) {
        dy_nats_reason(s, err, sizeof err);
        fprintf(stderr, "dyad %s: node %s did not answer: %s%s\n", cmd, key, err,
                s == NATS_NO_RESPONDERS ? " (its agent is gone)"
                : s == NATS_TIMEOUT     ? " (within --timeout)" : "");
        return 1;
    }
    dy_node_answer a;
    bool ok = dy_node_answer_decode(natsMsg_GetData(reply), (size_t)natsMsg_GetDataLength(reply),
                                    &a, err, sizeof err);
    natsMsg_Destroy(reply);
    if (!ok) {
        fprintf(stderr, "dyad %s: node %s answered something unreadable: %s\n", cmd, key, err);
        return 1;
    }
    if (!a.ok) {
        fprintf(stderr, "dyad %s: node %s refused: %s\n", cmd, key, a.error);
        return 1;
    }
    if (q->op == DY_NODE_START)
        printf("started worker %s (pid %u) on node %s\n", a.worker, (unsigned)a.pid, key);
    else
        printf("stopped worker %s (pid %u) on node %s\n", a.worker, (unsigned)a.pid, key);
    return 0;
}

/* The node that `which` names (its key, or the host of exactly one live node), or NULL with
 * why printed. */
static const node_item *find_node(const node_list *l, const char *which)
{
    const node_item *found = NULL;
    int n = 0;
    for (int i = 0; i < l->n; i++)
        if (l->items[i].ok && !strcmp(l->items[i].key, which))
            return &l->items[i];
    for (int i = 0; i < l->n; i++)
        if (l->items[i].ok && !strcmp(l->items[i].e.host, which) &&
            l->items[i].age_s <= l->items[i].e.lease_s) {
            found = &l->items[i];
            n++;
        }
    if (n == 1)
        return found;
    if (n == 0)
        fprintf(stderr, "dyad cluster start: --node %.200s: no live node agent has that key or "
                "host (dyad cluster nodes lists them)\n", which);
    else
        fprintf(stderr, "dyad cluster start: --node %.200s: %d node agents run on that host; "
                "give one's key (dyad cluster nodes lists them)\n", which, n);
    return NULL;
}

static int start(int argc, char **argv)
{
    node_opts o = {0};
    int rc = parse_node_opts("cluster start", start_usage, argc, argv, &o);
    if (rc != CLI_GO)
        return rc;
    node_list l = {0};
    natsConnection *nc = read_nodes("cluster start", &o, &l);
    rc = 1;
    const node_item *it = nc ? find_node(&l, o.node) : NULL;
    if (it) {
        dy_node_req q = {.op = DY_NODE_START, .role = o.role, .threads = (uint32_t)o.threads};
        rc = ask_node("cluster start", nc, it->key, &q, o.timeout_s);
    }
    dy_nats_close(nc);
    free(l.items);
    nats_Close();
    return rc;
}

static int stop(int argc, char **argv)
{
    node_opts o = {0};
    int rc = parse_node_opts("cluster stop", stop_usage, argc, argv, &o);
    if (rc != CLI_GO)
        return rc;
    node_list l = {0};
    natsConnection *nc = read_nodes("cluster stop", &o, &l);
    rc = 1;
    dy_node_req q = {.op = DY_NODE_STOP};
    snprintf(q.worker, sizeof q.worker, "%s", o.worker);
    dy_reg_parse_key(o.worker, &q.worker_id);
    const node_item *it = NULL;
    for (int i = 0; nc && i < l.n && !it; i++)
        if (l.items[i].ok && dy_node_find_worker(&l.items[i].e, q.worker_id) >= 0)
            it = &l.items[i];
    if (it)
        rc = ask_node("cluster stop", nc, it->key, &q, o.timeout_s);
    else if (nc)
        fprintf(stderr, "dyad cluster stop: worker %s: no node agent runs it (dyad cluster "
                "nodes lists them)\n", o.worker);
    dy_nats_close(nc);
    free(l.items);
    nats_Close();
    return rc;
}
#else
/* Without NATS: the options are still checked, then exit 2 saying so. */
static int no_nats(const char *cmd, const char *usage, int argc, char **argv)
{
    node_opts o = {0};
    int rc = parse_node_opts(cmd, usage, argc, argv, &o);
    if (rc != CLI_GO)
        return rc;
    (void)print_nodes;
    (void)print_nodes_json;
    fprintf(stderr, "dyad %s: this dyad was built without NATS (install libnats-dev and "
                    "rebuild: scripts/install-deps.sh)\n", cmd);
    return 2;
}

static int nodes(int argc, char **argv)
{
    return no_nats("cluster nodes", nodes_usage, argc, argv);
}

static int start(int argc, char **argv)
{
    return no_nats("cluster start", start_usage, argc, argv);
}

static int stop(int argc, char **argv)
{
    return no_nats("cluster stop", stop_usage, argc, argv);
}
#endif

int cmd_cluster(int argc, char **argv)
{
    const char *tool = argc >= 2 ? argv[1] : "";
    if (!strcmp(tool, "status"))
        return status(argc - 1, argv + 1);
    if (!strcmp(tool, "nodes"))
        return nodes(argc - 1, argv + 1);
    if (!strcmp(tool, "start"))
        return start(argc - 1, argv + 1);
    if (!strcmp(tool, "stop"))
        return stop(argc - 1, argv + 1);
    if (!strcmp(tool, "--help") || !strcmp(tool, "-h")) {
        fputs(cluster_usage, stdout);
        fputs("  status  the workers registered in the cluster, their leases and load "
              "(dyad cluster status --help)\n"
              "  nodes   the node agents, their cores used of their budget and their workers\n"
              "  start   asks a node agent to start a worker on its host\n"
              "  stop    asks the node agent that runs a worker to stop it\n", stdout);
        return 0;
    }
    fprintf(stderr, "%sdyad cluster: %s\n", cluster_usage,
            argc < 2 ? "which tool? (status, nodes, start, stop)"
                     : "unknown tool (status, nodes, start, stop)");
    return 2;
}
