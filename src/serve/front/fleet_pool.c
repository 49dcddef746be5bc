/* fleet_pool.c — resizing the fleet while it serves (fleet_impl.h): the planner's moves
 * (plan/actuate.h) carried out on the slots. A start spawns a worker in a parked slot; a
 * switch or a stop first drains the worker (placement skips it, what it holds runs to the
 * end), then sends it ROLE — it keeps its process, model and cache and answers HELLO in the
 * new role — or SHUTDOWN, after which its reader parks the slot. Nothing in flight is moved or
 * cut short, so no request sees a change but its placement. */
#include "serve/front/fleet_impl.h"

#include <stdio.h>

/* Prefill flights on other workers that will write into s's KV pool. */
static bool fed(const dy_fleet *w, const slot *s)
{
    for (int i = 0; i < w->cfg.n_workers; i++)
        for (int k = 0; k < w->slots[i].n_fl; k++)
            if (w->slots[i].fl[k].kind == FL_PREFILL && w->slots[i].fl[k].decode_slot == s->index)
                return true;
    return false;
}

void dy_fleet_drain_check(dy_fleet *w, slot *s)
{
    if (s->state != DY_SLOT_DRAINING || !s->alive || s->drain_sent || s->n_fl > 0 || fed(w, s))
        return;
    dy_buf b = {0};
    dy_msg_role r = {(uint8_t)s->next_role};
    bool ok = s->to_stop ? dy_wire_shutdown(&b) : dy_wire_role(&b, &r);
    if (ok && dy_fleet_send_frame(s, &b))
        s->drain_sent = true;
    /* A frame that cannot go out means the socket is closing: the reader sees the death and
     * parks the slot or starts it again in its new role. */
    dy_buf_free(&b);
}

int dy_fleet_slots(dy_fleet *w, dy_plan_slot *out, int cap)
{
    pthread_mutex_lock(&w->mu);
    int n = w->cfg.n_workers < cap ? w->cfg.n_workers : cap;
    for (int i = 0; i < n; i++) {
        const slot *s = &w->slots[i];
        out[i] = (dy_plan_slot){.state = s->state, .role = dy_fleet_pool_of_role(s->role),
                                .to_stop = s->to_stop,
                                .next_role = dy_fleet_pool_of_role(s->next_role),
                                .in_flight = s->n_fl};
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}

static int role_of_pool(dy_route_pool p)
{
    return p == DY_POOL_PREFILL ? DY_ROLE_PREFILL : p == DY_POOL_DECODE ? DY_ROLE_DECODE
                                                                        : DY_ROLE_AGG;
}

/* A parked slot gets a new worker; its old reader (which parked it) has ended. */
static int start(dy_fleet *w, slot *s, int role, char *err, size_t errlen)
{
    if (s->reader_started) {
        pthread_join(s->reader, NULL); /* it returned right after parking the slot */
        s->reader_started = false;
    }
    pthread_mutex_lock(&w->mu);
    int rc = -1;
    if (w->stopping)
        snprintf(err, errlen, "the server is stopping");
    else if (s->state != DY_SLOT_PARKED)
        rc = 1;
    else {
        s->role = role;
        s->state = DY_SLOT_STARTING;
        if ((rc = dy_fleet_spawn(w, s, err, errlen)) == 0) {
            dy_router_add_worker(w->router, s->index, !w->cfg.worker.no_kv_events);
            if (dy_fleet_start_reader(s) != 0) {
                snprintf(err, errlen, "cannot start a reader thread");
                rc = -1; /* the worker runs unseen; its socket closes with the frontend */
            }
        } else
            s->state = DY_SLOT_PARKED;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int dy_fleet_move(dy_fleet *w, const dy_plan_action *a, char *err, size_t errlen)
{
    if (a->slot < 0 || a->slot >= w->cfg.n_workers) {
        snprintf(err, errlen, "no slot %d", a->slot);
        return -1;
    }
    slot *s = &w->slots[a->slot];
    const int role = role_of_pool(a->role);
    if (a->kind == DY_ACT_START)
        return start(w, s, role, err, errlen);
    if (a->kind == DY_ACT_SWITCH && !w->cfg.switchable) {
        snprintf(err, errlen, "workers were not started switchable");
        return -1;
    }
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    if (a->kind == DY_ACT_RESUME) {
        if (s->state != DY_SLOT_DRAINING || !s->to_stop || s->drain_sent)
            rc = 1; /* already told to exit: it parks, and a start brings it back */
        else {
            s->state = DY_SLOT_ACTIVE;
            s->to_stop = false;
        }
    } else if (s->state != DY_SLOT_ACTIVE || !s->alive) {
        rc = 1;
    } else {
        s->state = DY_SLOT_DRAINING;
        s->to_stop = a->kind == DY_ACT_STOP;
        s->next_role = a->kind == DY_ACT_STOP ? s->role : role;
        s->drain_sent = false;
        dy_fleet_drain_check(w, s);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}
