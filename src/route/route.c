/* route.c — see route.h. */
#include "route/route.h"

dy_route_config dy_route_config_default(void)
{
    /* Below ~128 uncached tokens a prompt costs about as much as the step it would ride in
     * locally, while shipping its KV adds a round trip; a backlog of two full prefill chunks
     * means a remote prefill would wait longer than computing here. */
    dy_route_config c = {.disagg_min_tokens = 32, .prefill_busy_tokens = 1024};
    return c;
}

bool dy_route_remote(const dy_route_config *cfg, int64_t uncached_tokens,
                     int64_t prefill_backlog_tokens)
{
    return uncached_tokens >= cfg->disagg_min_tokens &&
           prefill_backlog_tokens < cfg->prefill_busy_tokens;
}
