/* sim_plan_report.h — what `dyad sim run --planner` adds to a simulated run's report: the
 * planner's decisions and the slots' moves (sim.h's dy_sim_decisions / dy_sim_moves), the
 * worker-seconds per role and the goodput per worker-second, as readable text, as a JSON object
 * (the run's "planner" member) and as a CSV of the decisions (--planner-log). */
#ifndef DYAD_CLI_SIM_PLAN_REPORT_H
#define DYAD_CLI_SIM_PLAN_REPORT_H

#include "bench/bench_stats.h"
#include "sim/sim.h"

#include <jansson.h>
#include <stdio.h>

/* The figures every form shares. */
typedef struct {
    double worker_s;          /* over every role */
    double goodput_per_worker_s; /* requests that met the SLO per worker-second */
    double attainment;        /* the share of requests that met it */
} cli_plan_figures;

cli_plan_figures cli_plan_figures_of(const dy_sim *s, const dyb_summary *sum);
void cli_plan_report_text(FILE *f, const dy_sim *s, const dy_sim_planner *p,
                          const dyb_summary *sum);
/* NULL when out of memory. */
json_t *cli_plan_report_json(const dy_sim *s, const dy_sim_planner *p, const dyb_summary *sum);
/* A header and one row per decision; -1 on a write error. */
int cli_plan_report_csv(FILE *f, const dy_sim *s);

#endif
