/* deploy_opts.c — see deploy_opts.h. */
#include "cli/deploy_opts.h"

int cli_deploy_opts_table(cli_deploy_opts *d, const char *section, bool prefix_flag,
                          dy_opt *out)
{
    *d = (cli_deploy_opts){.shape = dy_deploy_shape_default()};
    dy_deploy_shape *sh = &d->shape;
    const dy_opt all[CLI_DEPLOY_OPTS] = {
        {.section = section, .name = "block-size", .kind = DY_OPT_INT, .dst = &sh->block_size,
         .meta = "N", .help = "positions per KV block", .min = 1, .max = 256,
         .def = sh->block_size},
        {.name = "kv-blocks", .kind = DY_OPT_INT, .dst = &d->kv_blocks, .meta = "N",
         .help = "KV cache per worker in blocks", .min = 2, .max = 1 << 24,
         .shown_default = "the cost model's KV capacity / --block-size"},
        {.name = "max-batch-tokens", .kind = DY_OPT_INT, .dst = &sh->max_batch_tokens,
         .meta = "N", .help = "token budget of one engine step", .min = 1, .max = 65536,
         .def = sh->max_batch_tokens},
        {.name = "max-running", .kind = DY_OPT_INT, .dst = &sh->max_running, .meta = "N",
         .help = "sequences in one worker's running batch", .min = 1, .max = 4096,
         .def = sh->max_running},
        {.name = "no-prefix-cache", .kind = DY_OPT_FLAG, .dst = &sh->no_prefix_cache,
         .help = "workers compute every prompt in full"},
    };
    int n = prefix_flag ? CLI_DEPLOY_OPTS : CLI_DEPLOY_OPTS - 1;
    for (int i = 0; i < n; i++)
        out[i] = all[i];
    return n;
}

dy_deploy_shape cli_deploy_shape(const cli_deploy_opts *d)
{
    dy_deploy_shape sh = d->shape;
    sh.kv_blocks = d->kv_blocks;
    return sh;
}
