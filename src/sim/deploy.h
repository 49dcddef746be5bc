/* deploy.h — a deployment as `dyad serve` spells it (N aggregated workers, or P prefill + D
 * decode workers, with their KV and batch limits), made into the simulator's workers and
 * configuration on a cost model. Shared by `dyad sim run` and `dyad plan` (through
 * sim/search.h), so both simulate a deployment the same way. */
#ifndef DYAD_SIM_DEPLOY_H
#define DYAD_SIM_DEPLOY_H

#include "plan/balance.h"
#include "sim/cost.h"
#include "sim/sim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most workers one simulated deployment has (the router's index bound). */
#define DY_DEPLOY_MAX_WORKERS 1024

typedef struct {
    int agg;              /* > 0: this many aggregated workers (prefill, decode unused) */
    int prefill, decode;  /* else a prefill pool and a decode pool, each ≥ 1 */
    int64_t kv_blocks;    /* per worker; 0: the cost model's KV capacity / block_size */
    int block_size, max_batch_tokens, max_running;
    bool no_prefix_cache;
} dy_deploy_shape;

/* `dyad serve`'s defaults for everything but the pools: 16-token blocks, a 512-token step
 * budget, 64 sequences per batch, the prefix cache on. */
dy_deploy_shape dy_deploy_shape_default(void);

typedef struct {
    dy_sim_worker *workers; /* owned: n_prefill prefill workers first, then the rest */
    int n, n_prefill;
    int64_t kv_blocks;
} dy_deploy;

/* The workers of the shape on the cost model. 0; 2 when the shape itself is not a deployment
 * (too many workers, an empty pool); 1 when the KV capacity gives fewer than 2 blocks or past
 * 2^24, or memory ran out. err says which. */
int dy_deploy_make(const dy_deploy_shape *shape, const dy_cost_model *m, dy_deploy *out,
                   char *err, size_t errlen);
void dy_deploy_free(dy_deploy *d);

/* dy_sim_config_default() with the deployment's workers, block size and KV block bytes. */
dy_sim_config dy_deploy_sim_config(const dy_deploy *d, const dy_deploy_shape *shape,
                                   const dy_cost_model *m);

/* What one simulated run is priced by: the cost model behind the dy_step_costs interface. */
dy_step_costs dy_deploy_costs(const dy_cost_model *m);

/* What one worker costs: its GPUs (TP) for a roofline model, its engine threads (cores) for a
 * measured one; at least 1. */
int dy_deploy_worker_units(const dy_cost_model *m);
/* What the deployment costs: workers × dy_deploy_worker_units. */
long dy_deploy_units(const dy_deploy *d, const dy_cost_model *m);

/* What the balance criterion and the planner need of the cost model for workers of this shape
 * (its kv_blocks, or the model's KV capacity when 0), within budget units (0: none). */
dy_balance_hw dy_deploy_balance_hw(const dy_cost_model *m, const dy_deploy_shape *shape,
                                   long budget);

/* "simulated: 1 prefill + 2 decode workers, TP 1, 30503 KV blocks each" */
void dy_deploy_describe(const dy_deploy *d, const dy_cost_model *m, char *out, size_t cap);

#endif
