/* autoscale.h — the planner live in `dyad serve` (docs/planner.md): a thread that, every
 * planner interval, turns what the frontend saw (loadwin.h, the workers' load reports) into an
 * observation, asks the planner (plan/planner.h) for the pools the next interval needs, and
 * between intervals moves the fleet's slots toward them with the reconciler
 * (plan/actuate.h, carried out by dy_fleet_move). A target can also be set by hand (POST
 * /v1/admin/pools), with the planner off or until its next decision. Every decision and move
 * is logged to stderr with its record and counted for /metrics. */
#ifndef DYAD_AUTOSCALE_H
#define DYAD_AUTOSCALE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "plan/actuate.h"
#include "plan/planner.h"
#include "serve/front/fleet.h"
#include "serve/front/loadwin.h"
#include "util/buf.h"

typedef enum {
    DY_AUTOSCALE_OFF = 0,      /* sizes change only by hand */
    DY_AUTOSCALE_SLA = 1,      /* the SLA planner: forecast and cost model */
    DY_AUTOSCALE_REACTIVE = 2, /* the reactive planner: observed latency, queue and KV use */
} dy_autoscale_mode;

typedef struct {
    dy_autoscale_mode mode;
    dy_planner_config planner; /* interval_s is the planner's interval (unused when off) */
    double reconcile_s;        /* how often moves that had to wait are tried again, > 0 */
} dy_autoscale_config;

typedef struct dy_autoscale dy_autoscale;

/* Starts the thread over a running fleet whose deployment is `split` (prefill + decode) or
 * aggregated (decode workers). NULL with the reason in err (a bad planner configuration). */
dy_autoscale *dy_autoscale_start(const dy_autoscale_config *c, dy_fleet *fleet,
                                 dy_loadwin *win, bool split, int prefill, int decode,
                                 char *err, size_t errlen);
/* Stops and joins the thread, and frees a. */
void dy_autoscale_stop(dy_autoscale *a);
/* Sets the target pools by hand. 0, or -1 with the reason (no generating worker, prefill
 * workers without decode workers, more workers than slots). */
int dy_autoscale_set_target(dy_autoscale *a, const dy_pool_sizes *t, char *err, size_t errlen);
/* The slots, the target, the last decision and the recent ones (their age at `now`, the
 * demand the planner saw beside the pools it chose) as a JSON tree; NULL if out of memory. */
json_t *dy_autoscale_tree(dy_autoscale *a, double now);
/* The same as text (malloc'd; NULL if out of memory), as of now. */
char *dy_autoscale_json(dy_autoscale *a);
/* Appends the planner's metrics in the Prometheus text format. */
void dy_autoscale_render(dy_autoscale *a, dy_buf *out);
const char *dy_autoscale_mode_name(dy_autoscale_mode m);
/* A pool's name in the admin API, the logs and the metrics: "aggregated", "prefill",
 * "decode". */
const char *dy_autoscale_role_name(dy_route_pool p);

#endif
