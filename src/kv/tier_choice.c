/* tier_choice.c — see tier_choice.h. */
#include "kv/tier_choice.h"

#include <math.h>

/* The weight of a new observation once the mean has settled: about the last 16 count. */
#define RATE_WEIGHT (1.0 / 16)

void dy_kv_rate_observe(dy_kv_rate *r, double seconds, double units)
{
    if (!(units > 0) || !(seconds >= 0))
        return;
    double x = seconds / units;
    r->n++;
    /* the plain mean of the first observations, then the exponential one */
    double w = r->n < 16 ? 1.0 / (double)r->n : RATE_WEIGHT;
    r->mean += w * (x - r->mean);
}

dy_kv_choice dy_kv_choose(const dy_kv_rate up[DY_KV_N_TIERS], const int blocks[DY_KV_N_TIERS],
                          double queued_s, int tokens, const dy_kv_rate *prefill)
{
    dy_kv_choice c = {.load_s = queued_s > 0 ? queued_s : 0};
    for (int t = DY_KV_TIER_HOST; t < DY_KV_N_TIERS; t++)
        if (blocks[t] > 0 && up[t].n > 0)
            c.load_s += blocks[t] * up[t].mean;
    c.recompute_s = prefill->n > 0 ? tokens * prefill->mean : INFINITY;
    c.load = c.load_s <= c.recompute_s;
    return c;
}
