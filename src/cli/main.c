/* main.c — `dyad`: dispatches to a subcommand. */
#include "cli/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: dyad COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  run        generate text from a prompt on this machine (default: the bundled model)\n"
    "  convert    llama2.c checkpoint or GGUF to GGUF, optionally re-quantized\n"
    "  gen-model  write a random-weight llama model (15m, 110m, 1b shapes) as GGUF\n"
    "  serve      the OpenAI-compatible HTTP server (spawns its worker processes)\n"
    "  worker     a worker process (started by serve)\n"
    "  bench      benchmarks (`dyad bench engine`)\n"
    "  sim        the simulator (`dyad sim run`: a simulated bench run; `dyad sim fit`: a cost\n"
    "             model of this machine; `dyad sim bench`: the simulator's own speed)\n"
    "  plan       the cheapest deployment that meets a TTFT and an ITL objective for a\n"
    "             workload, sized by the balance criterion and checked by simulation\n"
    "  cluster    cluster mode's tools (`dyad cluster status`: the workers registered in NATS;\n"
    "             `nodes`, `start`, `stop`: the node agents and the workers they run)\n"
    "  node       cluster mode's per-host agent: starts and stops workers within a core budget\n"
    "\n"
    "`dyad COMMAND --help` describes each command's options.\n";

const char *dyad_model_dir(void)
{
    const char *d = getenv("DYAD_MODEL_DIR");
    return d && *d ? d : DYAD_SOURCE_DIR "/models";
}

bool dyad_self_exe(char *out, size_t cap)
{
    ssize_t n = cap > 1 ? readlink("/proc/self/exe", out, cap - 1) : -1;
    if (n <= 0)
        return false;
    out[n] = 0;
    return true;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert"))
        return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "gen-model"))
        return cmd_gen_model(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "node"))
        return cmd_node(argc - 1, argv + 1);
    if (!strcmp(cmd, "worker"))
        return cmd_worker(argc - 1, argv + 1);
    if (!strcmp(cmd, "sim"))
        return cmd_sim(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan"))
        return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve"))
        return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "cluster"))
        return cmd_cluster(argc - 1, argv + 1);
    fprintf(stderr, "dyad: unknown command '%s'\n\n%s", cmd, usage);
    return 2;
}
