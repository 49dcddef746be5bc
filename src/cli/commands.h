/* commands.h — the `dyad` subcommands. Each takes the arguments after its own name
 * (argv[0] is the subcommand) and returns the process exit status: 0 on success, 1 on a
 * runtime failure (bad file, ...), 2 on a usage error. */
#ifndef DYAD_COMMANDS_H
#define DYAD_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

int cmd_run(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_node(int argc, char **argv);         /* `dyad node`: the per-host agent (cmd_node.c) */
int cmd_bench_xfer(int argc, char **argv);
int cmd_bench_kv(int argc, char **argv); /* `dyad bench kv` (cmd_bench_kv.c) */
int cmd_bench_router(int argc, char **argv);
int cmd_bench_grammar(int argc, char **argv);
int cmd_bench_agentic(int argc, char **argv);
int cmd_serve(int argc, char **argv);

int cmd_sim(int argc, char **argv);
int cmd_sim_run(int argc, char **argv); /* `dyad sim run` (cmd_sim_run.c) */
int cmd_sim_bench(int argc, char **argv); /* `dyad sim bench` (cmd_sim_bench.c) */
int cmd_plan(int argc, char **argv);
int cmd_plan_predict(int argc, char **argv); /* `dyad plan predict` (cmd_plan_predict.c) */
int cmd_plan_quality(int argc, char **argv); /* `dyad plan quality` (cmd_plan_quality.c) */
int cmd_cluster(int argc, char **argv);      /* `dyad cluster status` (cmd_cluster.c) */

/* The path of the running dyad binary into out (cap bytes); false if it cannot be found. */
bool dyad_self_exe(char *out, size_t cap);
/* The directory holding the bundled models (DYAD_MODEL_DIR, else the source tree's models/). */
const char *dyad_model_dir(void);

#endif
