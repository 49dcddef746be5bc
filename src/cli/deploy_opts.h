/* deploy_opts.h — the options of a simulated deployment's workers, spelt as `dyad serve`
 * spells them (--block-size, --kv-blocks, --max-batch-tokens, --max-running and
 * --no-prefix-cache), with serve's ranges and defaults: one table for `dyad sim run`,
 * `dyad sim bench` and `dyad plan`. */
#ifndef DYAD_CLI_DEPLOY_OPTS_H
#define DYAD_CLI_DEPLOY_OPTS_H

#include "sim/deploy.h"
#include "util/opts.h"

#include <stdbool.h>

#define CLI_DEPLOY_OPTS 5

typedef struct {
    dy_deploy_shape shape; /* the pools are the command's own options */
    int kv_blocks;         /* 0: the cost model's capacity */
} cli_deploy_opts;

/* d set to serve's defaults, and its entries into out (section: the first entry's help
 * heading, or NULL); --no-prefix-cache only with prefix_flag. Returns how many. */
int cli_deploy_opts_table(cli_deploy_opts *d, const char *section, bool prefix_flag,
                          dy_opt *out);

/* The shape the options give, with its KV blocks. */
dy_deploy_shape cli_deploy_shape(const cli_deploy_opts *d);

#endif
