/* tier_choice.h — load or recompute. When a prompt's cached prefix continues in a lower tier,
 * bringing those blocks up costs the queue ahead of them plus, per block, the tier's
 * measured time; computing them again costs their tokens at the worker's measured prefill
 * rate. The cheaper one is taken, and both estimates are kept, for the answer and the
 * metrics. Pure: the rates are measured by the caller and passed in. */
#ifndef DYAD_TIER_CHOICE_H
#define DYAD_TIER_CHOICE_H

#include <stdbool.h>
#include <stdint.h>
#include "kv/kv_event.h"

/* A running mean of seconds per unit (per block moved, per prompt token computed), weighted
 * towards the recent: rates drift with load and with what else shares the memory bus. */
typedef struct {
    double mean; /* seconds per unit; meaningless while n == 0 */
    uint64_t n;  /* observations so far */
} dy_kv_rate;

/* One observation: `seconds` for `units` units (units > 0). */
void dy_kv_rate_observe(dy_kv_rate *r, double seconds, double units);

typedef struct {
    double load_s;      /* the queue ahead + the blocks at their tiers' rates */
    double recompute_s; /* the tokens at the prefill rate; INFINITY while unmeasured */
    bool load;
} dy_kv_choice;

/* blocks[t] blocks to bring up from tier t (DY_KV_TIER_HOST, DY_KV_TIER_DISK) at
 * up[t] (a tier not yet measured counts as free: the first load measures it), queued_s of
 * copies ahead of them, against `tokens` prompt tokens at `prefill` seconds per token. Ties
 * go to the load, which keeps the compute free for others. */
dy_kv_choice dy_kv_choose(const dy_kv_rate up[DY_KV_N_TIERS], const int blocks[DY_KV_N_TIERS],
                          double queued_s, int tokens, const dy_kv_rate *prefill);

#endif
