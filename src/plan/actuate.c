/* actuate.c — see actuate.h. */
#include "plan/actuate.h"
#include "route/kv_index.h"

#include <string.h>

const char *dy_plan_action_name(dy_act_kind k)
{
    static const char *const names[] = {"start", "switch", "stop", "resume"};
    return k >= DY_ACT_START && k <= DY_ACT_RESUME ? names[k] : "?";
}

const char *dy_plan_slot_state_name(dy_slot_state s)
{
    static const char *const names[] = {"parked", "starting", "active", "draining"};
    return s >= DY_SLOT_PARKED && s <= DY_SLOT_DRAINING ? names[s] : "?";
}

dy_pool_sizes dy_plan_target_sizes(const dy_planner_decision *d)
{
    dy_pool_sizes t = {{0, 0, 0}};
    if (d->split) {
        t.n[DY_POOL_PREFILL] = d->prefill;
        t.n[DY_POOL_DECODE] = d->decode;
    } else
        t.n[DY_POOL_AGG] = d->decode;
    return t;
}

static bool valid_role(dy_route_pool r)
{
    return r == DY_POOL_AGG || r == DY_POOL_PREFILL || r == DY_POOL_DECODE;
}

/* The role the slot will have once what is under way is done; -1: none (parked, stopping). */
static int future_role(const dy_plan_slot *s)
{
    if (s->state == DY_SLOT_PARKED || (s->state == DY_SLOT_DRAINING && s->to_stop))
        return -1;
    dy_route_pool r = s->state == DY_SLOT_DRAINING ? s->next_role : s->role;
    return valid_role(r) ? (int)r : -1;
}

dy_pool_sizes dy_plan_supply(const dy_plan_slot *slots, int n)
{
    dy_pool_sizes p = {{0, 0, 0}};
    for (int i = 0; i < n; i++) {
        int r = future_role(&slots[i]);
        if (r >= 0)
            p.n[r]++;
    }
    return p;
}

void dy_plan_apply(dy_plan_slot *slots, const dy_plan_action *a)
{
    dy_plan_slot *s = &slots[a->slot];
    switch (a->kind) {
    case DY_ACT_START: *s = (dy_plan_slot){.state = DY_SLOT_STARTING, .role = a->role}; break;
    case DY_ACT_SWITCH:
        s->state = DY_SLOT_DRAINING;
        s->to_stop = false;
        s->next_role = a->role;
        break;
    case DY_ACT_STOP:
        s->state = DY_SLOT_DRAINING;
        s->to_stop = true;
        break;
    case DY_ACT_RESUME:
        s->state = DY_SLOT_ACTIVE;
        s->to_stop = false;
        break;
    }
}

static bool generates(dy_route_pool r)
{
    return r != DY_POOL_PREFILL;
}

/* Active workers that generate now (the ones requests can be placed on). */
static int active_generators(const dy_plan_slot *slots, int n)
{
    int g = 0;
    for (int i = 0; i < n; i++)
        g += slots[i].state == DY_SLOT_ACTIVE && generates(slots[i].role);
    return g;
}

/* Whether taking slot s out of service keeps a generator active. */
static bool may_drain(const dy_plan_slot *slots, int n, int s)
{
    return !generates(slots[s].role) || active_generators(slots, n) > 1;
}

/* The active slot of a role in surplus to move (prefill before generating roles, then the
 * least loaded, then the lowest index), or -1. */
static int pick_donor(const dy_plan_slot *slots, int n, const dy_pool_sizes *supply,
                      dy_pool_sizes target)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        const dy_plan_slot *s = &slots[i];
        if (s->state != DY_SLOT_ACTIVE || supply->n[s->role] <= target.n[s->role] ||
            !may_drain(slots, n, i))
            continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const dy_plan_slot *b = &slots[best];
        bool pre = !generates(s->role), bpre = !generates(b->role);
        if (pre != bpre ? pre : s->in_flight < b->in_flight)
            best = i;
    }
    return best;
}

static int find_slot(const dy_plan_slot *slots, int n, dy_slot_state state, bool to_stop,
                     dy_route_pool role)
{
    for (int i = 0; i < n; i++)
        if (slots[i].state == state &&
            (state == DY_SLOT_PARKED || (slots[i].to_stop == to_stop && slots[i].role == role)))
            return i;
    return -1;
}

typedef struct {
    dy_plan_slot *slots;
    int n;
    dy_plan_action *out;
    int cap, count;
} moves;

static bool make(moves *m, dy_act_kind k, int slot, dy_route_pool role)
{
    if (m->count >= m->cap)
        return false;
    dy_plan_action a = {k, slot, role};
    dy_plan_apply(m->slots, &a);
    m->out[m->count++] = a;
    return true;
}

/* The slot a move of kind k would take to make role r less short, or -1. */
static int candidate(const dy_plan_slot *slots, int n, dy_act_kind k, dy_route_pool r,
                     dy_pool_sizes target)
{
    dy_pool_sizes supply = dy_plan_supply(slots, n);
    switch (k) {
    case DY_ACT_RESUME: return find_slot(slots, n, DY_SLOT_DRAINING, true, r);
    case DY_ACT_SWITCH: return pick_donor(slots, n, &supply, target);
    case DY_ACT_START: return find_slot(slots, n, DY_SLOT_PARKED, false, r);
    default: return -1;
    }
}

/* Moves of kind k for each short role in turn (generating roles first), while it is short and
 * a slot can make the move; false when out has no more room. */
static bool close_gaps(moves *m, dy_act_kind k, dy_pool_sizes target)
{
    static const dy_route_pool order[] = {DY_POOL_DECODE, DY_POOL_AGG, DY_POOL_PREFILL};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const dy_route_pool r = order[i];
        int s;
        while (dy_plan_supply(m->slots, m->n).n[r] < target.n[r] &&
               (s = candidate(m->slots, m->n, k, r, target)) >= 0)
            if (!make(m, k, s, r))
                return false;
    }
    return true;
}

int dy_plan_reconcile(const dy_plan_slot *in, int n, dy_pool_sizes target, dy_plan_action *out,
                      int cap)
{
    dy_plan_slot slots[DY_KV_INDEX_MAX_WORKERS];
    n = n < DY_KV_INDEX_MAX_WORKERS ? n : DY_KV_INDEX_MAX_WORKERS;
    memcpy(slots, in, sizeof *slots * (size_t)(n > 0 ? n : 0));
    moves m = {slots, n, out, cap, 0};
    if (!close_gaps(&m, DY_ACT_RESUME, target) || !close_gaps(&m, DY_ACT_SWITCH, target) ||
        !close_gaps(&m, DY_ACT_START, target))
        return m.count;
    for (;;) {
        dy_pool_sizes supply = dy_plan_supply(slots, n);
        int s = pick_donor(slots, n, &supply, target);
        if (s < 0 || !make(&m, DY_ACT_STOP, s, slots[s].role))
            return m.count;
    }
}
