/* actuate.h — from a planner's target pools to what to do with the worker slots now (pure: the
 * frontend of `dyad serve` and the simulator both describe their slots and carry out what it
 * answers, so a replay in `dyad sim` takes the very steps the server takes).
 *
 * A deployment has a fixed number of slots, one per worker the core budget allows. A slot is
 * parked (no process), starting (loading the model), active (taking requests) or draining
 * (taking no new requests; when its last sequence ends it either switches to another role —
 * the process and its model stay — or stops and is parked).
 *
 * It is a reconciler: it compares what the slots will be once the changes under way are done
 * with the target and answers the moves that close the gap, so calling it again (each
 * interval, or when a slot changes state) with nothing changed answers nothing. Its rules:
 *   - a draining slot that is to stop, of a role that is short, is resumed first (cheapest);
 *   - a short role then takes workers from roles with a surplus by switching them (no model
 *     load, no new core), taking prefill workers before generating ones and the least loaded
 *     first; short generating roles (decode, aggregated) are served before prefill;
 *   - what is still short is started in parked slots;
 *   - what is still surplus is stopped (prefill before generating roles, the least loaded
 *     first);
 *   - never does a move leave no active worker that generates (aggregated or decode): such a
 *     move waits until another generator is active, and a later call makes it. */
#ifndef DYAD_PLAN_ACTUATE_H
#define DYAD_PLAN_ACTUATE_H

#include "plan/planner.h"
#include "route/router.h"

#include <stdbool.h>

typedef enum {
    DY_SLOT_PARKED = 0,
    DY_SLOT_STARTING = 1,
    DY_SLOT_ACTIVE = 2,
    DY_SLOT_DRAINING = 3,
} dy_slot_state;

typedef struct {
    dy_slot_state state;
    dy_route_pool role;      /* starting, active, draining: its role now */
    bool to_stop;            /* draining: it stops when empty (else it switches to next_role) */
    dy_route_pool next_role; /* draining and not to_stop: its role once empty */
    int in_flight;           /* sequences on it (the load that picks whom to move) */
} dy_plan_slot;

typedef enum {
    DY_ACT_START = 0,  /* a parked slot starts a worker of `role` */
    DY_ACT_SWITCH = 1, /* an active slot drains, then takes `role` */
    DY_ACT_STOP = 2,   /* an active slot drains, then stops */
    DY_ACT_RESUME = 3, /* a slot draining to stop takes requests again, in its role */
} dy_act_kind;

typedef struct {
    dy_act_kind kind;
    int slot;
    dy_route_pool role; /* START, SWITCH: the new role; STOP, RESUME: the slot's role */
} dy_plan_action;

/* Workers wanted per role, indexed by dy_route_pool. */
typedef struct {
    int n[3];
} dy_pool_sizes;

/* The pools a decision asks for: split, prefill + decode; else decode aggregated workers. */
dy_pool_sizes dy_plan_target_sizes(const dy_planner_decision *d);
/* The pools the slots will hold once the changes under way are done. */
dy_pool_sizes dy_plan_supply(const dy_plan_slot *slots, int n);
/* The moves toward target, at most cap of them, in the order to make them; returns how many.
 * Each move is described as if the ones before it were made. */
int dy_plan_reconcile(const dy_plan_slot *slots, int n, dy_pool_sizes target,
                      dy_plan_action *out, int cap);
/* Carries a move out on the description: what the caller's own slot does when it makes it
 * (START: starting; SWITCH, STOP: draining; RESUME: active). */
void dy_plan_apply(dy_plan_slot *slots, const dy_plan_action *a);
/* "start", "switch", "stop", "resume"; "parked", "starting", "active", "draining". */
const char *dy_plan_action_name(dy_act_kind k);
const char *dy_plan_slot_state_name(dy_slot_state s);

#endif
