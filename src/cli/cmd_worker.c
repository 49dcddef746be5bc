/* cmd_worker.c — `dyad worker`: a worker process. `dyad serve` starts these itself, handing
 * each one end of a socket pair (--fd); there is rarely a reason to start one by hand. Its
 * options are described in serve/wire/worker_args.h, which the frontend builds them from. */
#include "cli/commands.h"
#include "serve/wire/worker_args.h"
#include "serve/worker/worker.h"

#include <fcntl.h>
#include <stdio.h>

static const char worker_usage[] =
    "usage: dyad worker --fd N [options]   (started by `dyad serve`)\n";

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
    if (c.fd < 0 || fcntl(c.fd, F_GETFD) < 0 || !c.model) {
        fprintf(stderr, "dyad worker: --fd (an open socket) and --model are required\n");
        return 2;
    }
    return dy_worker_run(&c);
}
