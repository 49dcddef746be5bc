/* route.c — see route.h. */
#include "route/route.h"

dy_route_config dy_route_config_default(void)
{
    /* Below ~128 uncached tokens a prompt costs about as much as the step it would ride in
     * locally, while shipping its KV adds a round trip; a backlog of two full prefill chunks
     * means a remote prefill would wait longer than computing here. */
    dy_route_config c = {.disagg_min_tokens = 128, .prefill_busy_tokens = 1024};
    return c;
}

/* The live worker of `pool` with the least load, ties broken in turn. */
static int least_loaded(const dy_route_worker *w, int n, dy_route_pool pool, bool by_prefill,
                        unsigned turn)
{
    int best = -1;
    for (int k = 0; k < n; k++) {
        int i = (int)((turn + (unsigned)k) % (unsigned)n);
        if (!w[i].alive || w[i].pool != pool)
            continue;
        int64_t load = by_prefill ? w[i].queued_prefill_tokens : w[i].in_flight;
        int64_t best_load = best < 0 ? 0 : by_prefill ? w[best].queued_prefill_tokens : w[best].in_flight;
        if (best < 0 || load < best_load)
            best = i;
    }
    return best;
}

dy_route_decision dy_route_pick(const dy_route_config *cfg, const dy_route_worker *w, int n,
                                int64_t uncached_tokens, unsigned turn)
{
    dy_route_decision d = {-1, -1};
    d.decode = least_loaded(w, n, DY_POOL_DECODE, false, turn);
    if (d.decode < 0) /* aggregated deployment (or every decode worker is down) */
        return (dy_route_decision){least_loaded(w, n, DY_POOL_AGG, false, turn), -1};
    if (uncached_tokens < cfg->disagg_min_tokens)
        return d;
    int p = least_loaded(w, n, DY_POOL_PREFILL, true, turn);
    if (p >= 0 && w[p].queued_prefill_tokens < cfg->prefill_busy_tokens)
        d.prefill = p;
    return d;
}
