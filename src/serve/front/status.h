/* status.h — the document of GET /v1/dyad/status (docs/api.md), what the dashboard draws: the
 * workers as pools (role, state, sequences, KV use per tier, prefill backlog, restarts), the
 * request flow over the rolling window (recent.h) against the objectives, KV movement and the
 * router's predicted and realised overlap, and the planner's recent decisions. It carries
 * only what /metrics already exposes, in another shape: no prompt, no path of the host. */
#ifndef DYAD_STATUS_H
#define DYAD_STATUS_H

#include "serve/front/autoscale.h"
#include "serve/front/fleet.h"
#include "serve/front/recent.h"

/* The seconds the summary covers, and the width of one point of the series. */
#define DY_STATUS_SUMMARY_S 60
#define DY_STATUS_STEP_S 5

typedef struct {
    const char *model_id;
    dy_fleet *workers;
    dy_recent *recent;
    dy_autoscale *autoscale; /* NULL: fixed pools (no planner section) */
    double started;          /* dy_now() when the server started */
} dy_status_env;

/* The document as of `now` (dy_now() seconds), malloc'd; NULL if out of memory. */
char *dy_status_json(const dy_status_env *e, double now);

#endif
