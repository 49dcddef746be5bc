/* route.h — conditional disaggregation (pure policy: no I/O, no clocks, no threads): whether
 * a prefill worker computes a prompt first, or its decode worker does — remote only when the
 * prompt is long enough that moving its KV pays, and only while the prefill pool is not
 * already backed up. docs/disaggregation.md gives the defaults and the measurements behind
 * them. Which worker of each pool is router.h's job. */
#ifndef DYAD_ROUTE_H
#define DYAD_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { DY_POOL_AGG = 0, DY_POOL_PREFILL = 1, DY_POOL_DECODE = 2 } dy_route_pool;

typedef struct {
    int disagg_min_tokens;        /* prompts with fewer uncached tokens prefill locally */
    int64_t prefill_busy_tokens;  /* prefill pool backlog above which prompts stay local */
} dy_route_config;

/* The defaults (see docs/disaggregation.md). */
dy_route_config dy_route_config_default(void);

/* Conditional disaggregation: whether a prompt with `uncached_tokens` still to compute on
 * its decode worker goes to the prefill worker whose backlog is `prefill_backlog_tokens`
 * (true), or is prefilled where it decodes (false). Which workers those are is the
 * router's choice (router.h). */
bool dy_route_remote(const dy_route_config *cfg, int64_t uncached_tokens,
                     int64_t prefill_backlog_tokens);

#endif
