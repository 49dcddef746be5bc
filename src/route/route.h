/* route.h — where a request runs (pure policy: no I/O, no clocks, no threads; the caller
 * passes the workers' state in). For each request the router picks the decode worker (or
 * aggregated worker) that will generate, and decides whether a prefill worker computes the
 * prompt first — conditional disaggregation: only when the prompt is long enough that moving
 * its KV pays, and only while the prefill pool is not already backed up.
 *
 * Load of a worker = what it last reported (queued prefill tokens, running sequences) plus
 * the router's own count of what it sent there since, so decisions are right between
 * reports. docs/disaggregation.md gives the defaults and the measurements behind them. */
#ifndef DYAD_ROUTE_H
#define DYAD_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { DY_POOL_AGG = 0, DY_POOL_PREFILL = 1, DY_POOL_DECODE = 2 } dy_route_pool;

typedef struct {
    dy_route_pool pool;
    bool alive;
    int in_flight;                /* sequences the router has on it now */
    int64_t queued_prefill_tokens;/* prompt tokens waiting there (report + own accounting) */
} dy_route_worker;

typedef struct {
    int disagg_min_tokens;        /* prompts with fewer uncached tokens prefill locally */
    int64_t prefill_busy_tokens;  /* prefill pool backlog above which prompts stay local */
} dy_route_config;

typedef struct {
    int decode;   /* the worker that generates; -1 if none is alive */
    int prefill;  /* the prefill worker, or -1 for local prefill */
} dy_route_decision;

/* The defaults (see docs/disaggregation.md). */
dy_route_config dy_route_config_default(void);

/* Routes one sequence whose prompt has `uncached_tokens` tokens still to compute. `turn`
 * breaks ties in turn (the caller increments it). */
dy_route_decision dy_route_pick(const dy_route_config *cfg, const dy_route_worker *w, int n,
                                int64_t uncached_tokens, unsigned turn);

#endif
