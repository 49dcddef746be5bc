/* cmd_worker.c — `dyad worker`: a worker process. `dyad serve` starts these itself, handing
 * each one end of a socket pair (--fd). Started by hand with --cluster, it joins a cluster on
 * NATS instead (serve/cluster/worker_link.h, docs/cluster.md). Its options are described in
 * serve/wire/worker_args.h, which the frontend builds them from. */
#include "cli/commands.h"
#include "serve/cluster/worker_link.h"
#include "serve/wire/worker_args.h"
#include "serve/worker/worker.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>

static const char worker_usage[] =
    "usage: dyad worker --fd N [options]   (started by `dyad serve`)\n"
    "       dyad worker --cluster nats://HOST:PORT --role agg|prefill|decode [options]\n";

int cmd_worker(int argc, char **argv)
{
    dy_worker_config c;
    char err[512];
    dy_opts_result r = dy_worker_args_parse(argc, argv, &c, err, sizeof err);
    if (r == DY_OPTS_HELP) {
        dy_opt opts[DY_WORKER_MAX_OPTS];
        int n = dy_worker_args_opts(&c, DY_WORKER_OPTS_ALL, opts);
        dy_opts_help(stdout, worker_usage, opts, n, NULL);
        return 0;
    }
    if (r == DY_OPTS_BAD) {
        fprintf(stderr, "dyad worker: %s\n", err);
        return 2;
    }
    if (c.cluster) {
        char model[PATH_MAX], tok[PATH_MAX];
        if (!c.model) { /* the bundled model, as `dyad serve` defaults to */
            snprintf(model, sizeof model, "%s/stories260K.bin", dyad_model_dir());
            snprintf(tok, sizeof tok, "%s/tok512.bin", dyad_model_dir());
            c.model = model;
            if (!c.tokenizer)
                c.tokenizer = tok;
        }
        return dy_cluster_worker_run(&c);
    }
    if (c.fd < 0 || fcntl(c.fd, F_GETFD) < 0 || !c.model) {
        fprintf(stderr, "dyad worker: --fd (an open socket) and --model are required\n");
        return 2;
    }
    return dy_worker_run(&c);
}
