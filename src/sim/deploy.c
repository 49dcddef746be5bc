/* deploy.c — see deploy.h. */
#include "sim/deploy.h"

#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>

dy_deploy_shape dy_deploy_shape_default(void)
{
    return (dy_deploy_shape){.prefill = 1, .decode = 1, .block_size = 16,
                             .max_batch_tokens = 512, .max_running = 64};
}

static int pools_of(const dy_deploy_shape *s, int *n, int *n_prefill, char *err, size_t errlen)
{
    if (s->agg > 0) {
        *n = s->agg;
        *n_prefill = 0;
    } else if (s->prefill < 1 || s->decode < 1) {
        snprintf(err, errlen, "a disaggregated deployment needs at least 1 prefill and 1 "
                 "decode worker");
        return 2;
    } else {
        *n_prefill = s->prefill;
        *n = s->prefill + s->decode;
    }
    if (*n > DY_DEPLOY_MAX_WORKERS) {
        snprintf(err, errlen, "at most %d workers in all", DY_DEPLOY_MAX_WORKERS);
        return 2;
    }
    return 0;
}

int dy_deploy_make(const dy_deploy_shape *s, const dy_cost_model *m, dy_deploy *d, char *err,
                   size_t errlen)
{
    *d = (dy_deploy){0};
    int rc = pools_of(s, &d->n, &d->n_prefill, err, errlen);
    if (rc != 0)
        return rc;
    d->kv_blocks = s->kv_blocks > 0 ? s->kv_blocks
                                    : dy_cost_kv_capacity_tokens(m) / s->block_size;
    if (d->kv_blocks < 2 || d->kv_blocks > 1 << 24) {
        snprintf(err, errlen, "%s holds %lld KV blocks of %d tokens per worker (2 to %d "
                 "needed; give --kv-blocks)", dy_cost_name(m), (long long)d->kv_blocks,
                 s->block_size, 1 << 24);
        return 1;
    }
    d->workers = calloc((size_t)d->n, sizeof *d->workers);
    if (!d->workers) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    for (int i = 0; i < d->n; i++)
        d->workers[i] = (dy_sim_worker){
            .role = d->n_prefill == 0 ? DY_POOL_AGG : i < d->n_prefill ? DY_POOL_PREFILL
                                                                       : DY_POOL_DECODE,
            .kv_blocks = (int)d->kv_blocks, .max_batch_tokens = s->max_batch_tokens,
            .max_running = s->max_running, .no_prefix_cache = s->no_prefix_cache};
    return 0;
}

void dy_deploy_free(dy_deploy *d)
{
    free(d->workers);
    *d = (dy_deploy){0};
}

dy_sim_config dy_deploy_sim_config(const dy_deploy *d, const dy_deploy_shape *s,
                                   const dy_cost_model *m)
{
    dy_sim_config c = dy_sim_config_default();
    c.workers = d->workers;
    c.n_workers = d->n;
    c.block_size = s->block_size;
    c.kv_block_bytes = dy_cost_kv_bytes_per_token(m) * s->block_size;
    return c;
}

static double step_seconds(void *ctx, const dy_step_shape *shape)
{
    return dy_cost_step_seconds(ctx, shape);
}

static double transfer_seconds(void *ctx, int64_t bytes)
{
    return dy_cost_transfer_seconds(ctx, bytes);
}

dy_step_costs dy_deploy_costs(const dy_cost_model *m)
{
    return (dy_step_costs){step_seconds, transfer_seconds, (void *)m};
}

int dy_deploy_worker_units(const dy_cost_model *m)
{
    int per = dy_cost_get_kind(m) == DY_COST_ROOFLINE ? dy_cost_tp(m) : dy_cost_threads(m);
    return per > 0 ? per : 1;
}

long dy_deploy_units(const dy_deploy *d, const dy_cost_model *m)
{
    return (long)d->n * dy_deploy_worker_units(m);
}

void dy_deploy_describe(const dy_deploy *d, const dy_cost_model *m, char *out, size_t cap)
{
    char shape[64];
    if (d->n_prefill == 0)
        snprintf(shape, sizeof shape, "%d aggregated worker%s", d->n, d->n == 1 ? "" : "s");
    else
        snprintf(shape, sizeof shape, "%d prefill + %d decode workers", d->n_prefill,
                 d->n - d->n_prefill);
    if (dy_cost_get_kind(m) == DY_COST_ROOFLINE)
        snprintf(out, cap, "simulated: %s, TP %d, %lld KV blocks each", shape, dy_cost_tp(m),
                 (long long)d->kv_blocks);
    else
        snprintf(out, cap, "simulated: %s, %d thread%s, %lld KV blocks each", shape,
                 dy_cost_threads(m), dy_cost_threads(m) == 1 ? "" : "s",
                 (long long)d->kv_blocks);
}

dy_balance_hw dy_deploy_balance_hw(const dy_cost_model *m, const dy_deploy_shape *sh, long budget)
{
    int64_t cap = sh->kv_blocks > 0 ? sh->kv_blocks * sh->block_size
                                    : dy_cost_kv_capacity_tokens(m);
    return (dy_balance_hw){.costs = dy_deploy_costs(m),
                           .kv_bytes_per_token = dy_cost_kv_bytes_per_token(m),
                           .kv_capacity_tokens = cap, .max_batch_tokens = sh->max_batch_tokens,
                           .max_running = sh->max_running,
                           .units_per_worker = dy_deploy_worker_units(m),
                           .max_units = budget > INT32_MAX ? INT32_MAX : (int)budget};
}
