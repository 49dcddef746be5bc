/* cmd_node.c — `dyad node`: the per-host agent of cluster mode (serve/cluster/node.h,
 * docs/cluster.md "Node agents"). It registers this host's core budget in the cluster's NATS
 * server and starts and stops `dyad worker --cluster` processes here when asked (`dyad cluster
 * start` / `stop`, or the planner later). This file turns options into a dy_node_config. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "serve/cluster/nats_conn.h"
#include "serve/cluster/node.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static const char node_usage[] =
    "usage: dyad node --cluster nats://HOST:PORT --cores N [options]\n"
    "The per-host agent of cluster mode: registers this host's core budget (N cores) in the\n"
    "JetStream bucket " DY_NODE_BUCKET " with a lease, and starts and stops workers\n"
    "(`dyad worker --cluster`) on this host when asked on dyad.n.<key>.cmd: `dyad cluster\n"
    "start --node KEY|HOST --role R --threads T`, `dyad cluster stop --worker wXXXXXXXX`.\n"
    "A start that asks for more threads than the free cores is refused.\n";
static const char node_epilog[] =
    "\n"
    "Workers are children of the agent: they die with it. SIGINT or SIGTERM stops them (each\n"
    "leaves cleanly within --drain, then SIGKILL) and deletes the node's entry.\n"
    "Exit status: 0 after a signal; 1 when NATS cannot be reached within --timeout; 2 on a\n"
    "usage error or a dyad built without NATS (libnats-dev). See docs/cluster.md.\n";

int cmd_node(int argc, char **argv)
{
    const char *url = NULL, *host = NULL, *kv_host = NULL, *model = NULL, *tok = NULL;
    int cores = 0;
    double lease = 0, start_timeout = 0, drain = 0, timeout = 0;
    const dy_opt t[] = {
        {.name = "cluster", .kind = DY_OPT_STR, .dst = &url, .meta = "URL",
         .help = "the cluster's NATS server: nats://HOST:PORT, or several separated by commas "
                 "(required)"},
        {.name = "cores", .kind = DY_OPT_INT, .dst = &cores, .meta = "N",
         .help = "the cores its workers may use in all: a worker of T threads takes T (required)",
         .min = 1, .max = DY_NODE_MAX_CORES, .shown_default = ""},
        {.name = "host-name", .kind = DY_OPT_STR, .dst = &host, .meta = "NAME",
         .help = "the name its entry and its workers' show (and `dyad cluster start --node` "
                 "takes)", .shown_default = "the host's name"},
        {.name = "kv-host", .kind = DY_OPT_STR, .dst = &kv_host, .meta = "ADDR",
         .help = "the address its decode workers receive KV at (--kv-listen ADDR:0): one the "
                 "prefill workers' hosts can reach", .def_str = "127.0.0.1"},
        {.name = "model", .kind = DY_OPT_STR, .dst = &model, .meta = "PATH",
         .help = "the model its workers load", .shown_default = "the bundled stories260K"},
        {.name = "tokenizer", .kind = DY_OPT_STR, .dst = &tok, .meta = "PATH",
         .help = "the tokenizer of a llama2.c model", .shown_default = "the bundled one"},
        {.name = "lease", .kind = DY_OPT_DOUBLE, .dst = &lease, .meta = "S",
         .help = "its entry (and its workers') holds S seconds without being written; it "
                 "writes it every S/3", .min = 0.3, .max = 3600, .def = 3},
        {.name = "start-timeout", .kind = DY_OPT_DOUBLE, .dst = &start_timeout, .meta = "S",
         .help = "a started worker that has not registered within S seconds is killed and the "
                 "start refused", .min = 1, .max = 3600, .def = 120},
        {.name = "drain", .kind = DY_OPT_DOUBLE, .dst = &drain, .meta = "S",
         .help = "a stopped worker's running sequences may finish within S seconds (its "
                 "--cluster-drain); 5 s later it gets SIGKILL", .min = 0, .max = 86400,
         .def = 30},
        {.name = "timeout", .kind = DY_OPT_DOUBLE, .dst = &timeout, .meta = "S",
         .help = "give up when NATS cannot be reached within S seconds of the start", .min = 0,
         .max = 86400, .def = 60},
    };
    int rc = cli_parse("node", node_usage, node_epilog, t, (int)(sizeof t / sizeof t[0]), argc,
                       argv, NULL);
    if (rc != CLI_GO)
        return rc;
    char err[512];
    if (!url || cores == 0) {
        fprintf(stderr, "dyad node: %s: required (see dyad node --help)\n",
                !url ? "--cluster" : "--cores");
        return 2;
    }
    if (!dy_nats_url_check(url, err, sizeof err)) {
        fprintf(stderr, "dyad node: --cluster: %s\n", err);
        return 2;
    }
    if (host && (!*host || strlen(host) > DY_FIELD_MAX_STR ||
                 !dy_field_printable(host, strlen(host)))) {
        fprintf(stderr, "dyad node: --host-name: 1 to %d printable bytes\n", DY_FIELD_MAX_STR);
        return 2;
    }
    if (!*kv_host || strlen(kv_host) > 100 || strchr(kv_host, ' ')) {
        fprintf(stderr, "dyad node: --kv-host: an address (a name, IPv4 or [IPv6])\n");
        return 2;
    }
#ifdef DYAD_HAVE_NATS
    char exe[PATH_MAX];
    if (!dyad_self_exe(exe, sizeof exe)) {
        fprintf(stderr, "dyad node: cannot find its own executable\n");
        return 1;
    }
    dy_node_config c = {.url = url, .exe = exe, .cores = cores, .host_name = host,
                        .kv_host = kv_host, .model = model, .tokenizer = tok, .lease_s = lease,
                        .start_timeout_s = start_timeout, .drain_s = drain,
                        .timeout_s = timeout};
    rc = dy_node_run(&c);
    nats_Close();
    return rc;
#else
    (void)model;
    (void)tok;
    fprintf(stderr, "dyad node: this dyad was built without NATS (install libnats-dev and "
                    "rebuild: scripts/install-deps.sh)\n");
    return 2;
#endif
}
