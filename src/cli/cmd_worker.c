/* cmd_worker.c — `dyad worker`: a worker process. `dyad serve` starts these itself, handing
 * each one end of a socket pair (--fd); there is rarely a reason to start one by hand. */
#include "cli/args.h"
#include "cli/commands.h"
#include "serve/wire/wire.h"
#include "serve/worker/worker.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>

static const char worker_usage[] =
    "usage: dyad worker --fd N [options]   (started by `dyad serve`)\n"
    "  --fd N                 connected socket to the frontend\n"
    "  --id N                 worker id (for logs and metrics)\n"
    "  --model PATH           GGUF file or llama2.c checkpoint\n"
    "  --tokenizer PATH       llama2.c tokenizer.bin for checkpoints\n"
    "  --threads N            engine threads (default 1)\n"
    "  --kv-mem MiB           KV cache size (default 256)\n"
    "  --kv-blocks N          KV cache size in blocks (overrides --kv-mem)\n"
    "  --block-size N         positions per KV block (default 16)\n"
    "  --max-batch-tokens N   token budget of one step (default 512)\n"
    "  --max-running N        sequences in the running batch (default 64)\n"
    "  --no-prefix-cache      compute every prompt in full (for measurements)\n"
    "  --no-kv-events         publish no KV events for the frontend's prefix index\n"
    "  --role R               agg (default: prefill and decode), prefill, or decode\n"
    "  --kv-listen HOST:PORT  decode role: also receive KV blocks over TCP (port 0: any)\n";

int cmd_worker(int argc, char **argv)
{
    dy_worker_config c = {.fd = -1, .threads = 1, .kv_mem_mib = 256, .block_size = 16,
                          .max_batch_tokens = 512, .max_running = 64};
    const char *v;
    bool bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help")) {
            fputs(worker_usage, stdout);
            return 0;
        } else if (arg_take("worker", argc, argv, &i, "--model", &v, &bad)) c.model = v;
        else if (arg_take("worker", argc, argv, &i, "--tokenizer", &v, &bad)) c.tokenizer = v;
        else if (arg_take("worker", argc, argv, &i, "--fd", &v, &bad))
            bad = !arg_int("worker", "--fd", v, 0, 1 << 20, &c.fd);
        else if (arg_take("worker", argc, argv, &i, "--id", &v, &bad))
            bad = !arg_int("worker", "--id", v, 0, 1 << 20, &c.worker_id);
        else if (arg_take("worker", argc, argv, &i, "--threads", &v, &bad))
            bad = !arg_int("worker", "--threads", v, 1, 256, &c.threads);
        else if (arg_take("worker", argc, argv, &i, "--kv-mem", &v, &bad))
            bad = !arg_int("worker", "--kv-mem", v, 1, 1 << 20, &c.kv_mem_mib);
        else if (arg_take("worker", argc, argv, &i, "--kv-blocks", &v, &bad))
            bad = !arg_int("worker", "--kv-blocks", v, 2, 1 << 24, &c.kv_blocks);
        else if (arg_take("worker", argc, argv, &i, "--block-size", &v, &bad))
            bad = !arg_int("worker", "--block-size", v, 1, 256, &c.block_size);
        else if (arg_take("worker", argc, argv, &i, "--max-batch-tokens", &v, &bad))
            bad = !arg_int("worker", "--max-batch-tokens", v, 1, 65536, &c.max_batch_tokens);
        else if (arg_take("worker", argc, argv, &i, "--max-running", &v, &bad))
            bad = !arg_int("worker", "--max-running", v, 1, 4096, &c.max_running);
        else if (!strcmp(argv[i], "--no-prefix-cache"))
            c.no_prefix_cache = true;
        else if (!strcmp(argv[i], "--no-kv-events"))
            c.no_kv_events = true;
        else if (arg_take("worker", argc, argv, &i, "--kv-listen", &v, &bad))
            c.kv_listen = v;
        else if (arg_take("worker", argc, argv, &i, "--role", &v, &bad)) {
            if (!strcmp(v, "agg")) c.role = DY_ROLE_AGG;
            else if (!strcmp(v, "prefill")) c.role = DY_ROLE_PREFILL;
            else if (!strcmp(v, "decode")) c.role = DY_ROLE_DECODE;
            else {
                fprintf(stderr, "dyad worker: --role: '%s' is not agg, prefill or decode\n", v);
                bad = true;
            }
        } else if (!bad) {
            fprintf(stderr, "dyad worker: unknown option '%s'\n", argv[i]);
            bad = true;
        }
    }
    if (bad)
        return 2;
    if (c.fd < 0 || fcntl(c.fd, F_GETFD) < 0 || !c.model) {
        fprintf(stderr, "dyad worker: --fd (an open socket) and --model are required\n");
        return 2;
    }
    return dy_worker_run(&c);
}
