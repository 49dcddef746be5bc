/* serve_plan.h — `dyad serve`'s planner options (--planner, --cores, --slo, ...): their table,
 * the checks between them and the rest of the command line, and starting the planner
 * (serve/front/autoscale.h) over the running fleet with the cost model it sizes by. */
#ifndef DYAD_CLI_SERVE_PLAN_H
#define DYAD_CLI_SERVE_PLAN_H

#include "bench/bench_stats.h"
#include "plan/predict.h"
#include "serve/front/autoscale.h"
#include "serve/front/fleet.h"
#include "sim/cost.h"
#include "util/opts.h"

#include <stdbool.h>

typedef struct {
    int mode;                 /* dy_autoscale_mode */
    int cores;                /* 0: fixed pools */
    dyb_slo slo;
    double interval_s;
    double startup_s;         /* < 0: what the first workers took to start */
    double reconcile_s;
    int min_dwell;
    dy_predict_config predict;
    const char *cost_model;
    bool given[4];            /* --planner, --slo, --cost-model, --planner-startup */
    const char *modes[4];
} serve_plan_opts;

#define SERVE_PLAN_OPTS 9
/* The entries, storing into o, into t (room for SERVE_PLAN_OPTS); returns how many. */
int serve_plan_table(serve_plan_opts *o, dy_opt *t);
/* After the parse: the rules between the planner's options and the fleet's; with --cores the
 * fleet gets its slots (cores / threads per worker) and switchable workers. false after a
 * message on stderr. */
bool serve_plan_check(serve_plan_opts *o, dy_fleet_config *w);
/* The running planner and the cost model it sizes by (both NULL without --cores). */
typedef struct {
    dy_autoscale *autoscale;
    dy_cost_model *costs;
} serve_planner;

/* Starts the planner over the running fleet; startup_s is what the fleet took to start. -1
 * after a message on stderr (a bad cost model, objectives it cannot work with). */
int serve_plan_start(const serve_plan_opts *o, const dy_fleet_config *w, dy_fleet *fleet,
                     dy_loadwin *win, double startup_s, serve_planner *out);
/* Stops the planner's thread (before the fleet stops) and frees both. */
void serve_plan_stop(serve_planner *p);

#endif
