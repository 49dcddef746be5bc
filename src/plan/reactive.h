/* reactive.h — the reactive rule of the planner (planner.h states it): what the latency
 * percentiles, the waiting queue and KV use say to do with the deployed pools, one worker at
 * a time, in the deployed shape, within the budget. The planner's REACTIVE mode is this rule
 * alone; its SLA mode's safety net raises a decision by it. Pure: observations in, sizes out.
 * planner.c calls these; nothing else needs to. */
#ifndef DYAD_PLAN_REACTIVE_H
#define DYAD_PLAN_REACTIVE_H

#include "plan/planner.h"

#include <stddef.h>

/* 0, or -1 with the field named in err ("planner.reactive.kv_high: must be in (0, 1]"). */
int dy_reactive_check(const dy_planner_reactive *r, char *err, size_t errlen);
/* REACTIVE's decision for the interval that ended (p->current is deployed): sizes, units,
 * action, reason and unmet; no forecast (predicted zero), factors 1. Moves p's low streak. */
dy_planner_decision dy_reactive_decide(dy_planner *p, const dy_planner_obs *o);
/* The SLA mode's safety net: raises d (the SLA decision) where an observed p90 says the pool
 * it keeps is too small. */
void dy_reactive_net(dy_planner *p, const dy_planner_obs *o, dy_planner_decision *d);
/* Once d is the decision carried out: a pool it grew waits before it grows again. */
void dy_reactive_note(dy_planner *p, const dy_planner_decision *d);

#endif
