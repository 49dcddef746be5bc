/* status.c — see status.h. Read in order: the workers and their pools, the request flow (a
 * summary and a series over the window), KV movement and the router, then the document. */
#include "serve/front/status.h"
#include "route/kv_index.h"
#include "serve/front/json.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_WORKERS 64

/* ---------------------------------------------------------------- workers and pools */

/* What the slot does now: starting, serving, draining (to stop), switching (draining to take
 * another role), parked (no process), or down (its process died or went silent; it is being
 * replaced). */
static const char *worker_state(const dy_worker_info *w)
{
    switch (w->state) {
    case DY_SLOT_PARKED:
        return "parked";
    case DY_SLOT_STARTING:
        return "starting";
    case DY_SLOT_DRAINING:
        return w->next_role >= 0 ? "switching" : "draining";
    default:
        return w->alive ? "serving" : "down";
    }
}

static json_t *share(double used, double total)
{
    return json_real(total > 0 ? used / total : 0);
}

/* KV use per tier: the worker's own pool (device), then its host and disk tiers. */
static json_t *kv_json(dy_jb *b, const dy_msg_stats *s)
{
    json_t *o = json_object(), *dev = json_object();
    dy_jb_set(b, dev, "used", json_integer(s->kv_blocks_used));
    dy_jb_set(b, dev, "capacity", json_integer(s->kv_blocks_total));
    dy_jb_set(b, dev, "ratio", share(s->kv_blocks_used, s->kv_blocks_total));
    dy_jb_set(b, o, dy_kv_index_tier_name(0), dev);
    for (int k = 0; k < 2; k++) {
        const dy_msg_tier_stats *t = &s->tiers[k];
        json_t *tier = json_object();
        dy_jb_set(b, tier, "on", json_boolean(t->on));
        dy_jb_set(b, tier, "used", json_integer(t->used));
        dy_jb_set(b, tier, "capacity", json_integer(t->slots));
        dy_jb_set(b, tier, "ratio", share(t->used, t->slots));
        dy_jb_set(b, o, dy_kv_index_tier_name(k + 1), tier);
    }
    return o;
}

static json_t *worker_json(dy_jb *b, const dy_worker_info *w, int id)
{
    json_t *o = json_object();
    const bool parked = w->state == DY_SLOT_PARKED;
    dy_jb_set(b, o, "id", json_integer(id));
    dy_jb_set(b, o, "role", parked ? json_null() : json_string(dy_autoscale_role_name(w->role)));
    dy_jb_set(b, o, "state", json_string(worker_state(w)));
    if (w->state == DY_SLOT_DRAINING && w->next_role >= 0)
        dy_jb_set(b, o, "next_role", json_string(dy_autoscale_role_name(w->next_role)));
    dy_jb_set(b, o, "up", json_boolean(w->alive));
    dy_jb_set(b, o, "running", json_integer(w->stats.running));
    dy_jb_set(b, o, "waiting", json_integer(w->stats.waiting));
    dy_jb_set(b, o, "in_flight", json_integer(w->in_flight));
    dy_jb_set(b, o, "queued_prefill_tokens", json_integer((json_int_t)w->stats.queued_prefill_tokens));
    dy_jb_set(b, o, "kv", kv_json(b, &w->stats));
    dy_jb_set(b, o, "routed", json_integer((json_int_t)w->routed));
    dy_jb_set(b, o, "restarts", json_integer((json_int_t)w->restarts));
    dy_jb_set(b, o, "hangs", json_integer((json_int_t)w->hangs));
    return o;
}

/* Per role: its workers (parked slots in none), those serving, and their load summed. */
static json_t *pools_json(dy_jb *b, const dy_worker_info *w, int n)
{
    json_t *o = json_object();
    for (int r = DY_POOL_AGG; r <= DY_POOL_DECODE; r++) {
        long workers = 0, serving = 0, running = 0, waiting = 0, queued = 0;
        for (int i = 0; i < n; i++) {
            if (w[i].state == DY_SLOT_PARKED || w[i].role != r)
                continue;
            workers++;
            serving += w[i].state == DY_SLOT_ACTIVE && w[i].alive;
            running += w[i].stats.running;
            waiting += w[i].stats.waiting;
            queued += (long)w[i].stats.queued_prefill_tokens;
        }
        json_t *p = json_object();
        dy_jb_set(b, p, "workers", json_integer(workers));
        dy_jb_set(b, p, "serving", json_integer(serving));
        dy_jb_set(b, p, "running", json_integer(running));
        dy_jb_set(b, p, "waiting", json_integer(waiting));
        dy_jb_set(b, p, "queued_prefill_tokens", json_integer(queued));
        dy_jb_set(b, o, dy_autoscale_role_name(r), p);
    }
    long parked = 0;
    for (int i = 0; i < n; i++)
        parked += w[i].state == DY_SLOT_PARKED;
    dy_jb_set(b, o, "parked", json_integer(parked));
    return o;
}

/* ---------------------------------------------------------------- request flow */

static json_t *pct_json(dy_jb *b, const dy_recent_pct *p)
{
    json_t *o = json_object();
    dy_jb_set(b, o, "p50", p->n ? json_real(p->p50) : json_null());
    dy_jb_set(b, o, "p90", p->n ? json_real(p->p90) : json_null());
    dy_jb_set(b, o, "samples", json_integer(p->n));
    return o;
}

static json_t *goodput_json(const dy_recent_figures *f)
{
    return f->goodput >= 0 ? json_real(f->goodput) : json_null();
}

static json_t *summary_json(dy_jb *b, const dy_recent_figures *f)
{
    json_t *o = json_object();
    dy_jb_set(b, o, "span_s", json_real(f->span_s));
    dy_jb_set(b, o, "requests", json_integer((json_int_t)f->requests));
    dy_jb_set(b, o, "failed", json_integer((json_int_t)f->failed));
    dy_jb_set(b, o, "requests_per_s", json_real(f->requests_per_s));
    dy_jb_set(b, o, "output_tokens_per_s", json_real(f->output_tokens_per_s));
    dy_jb_set(b, o, "ttft_s", pct_json(b, &f->ttft));
    dy_jb_set(b, o, "itl_s", pct_json(b, &f->itl));
    dy_jb_set(b, o, "tpot_s", pct_json(b, &f->tpot));
    dy_jb_set(b, o, "goodput", goodput_json(f));
    return o;
}

/* A point of the series: flat fields, null where the slice had no sample. */
static json_t *point_json(dy_jb *b, const dy_recent_figures *f, int age)
{
    json_t *o = json_object();
    const struct {
        const char *name;
        const dy_recent_pct *p;
    } lat[] = {{"ttft", &f->ttft}, {"itl", &f->itl}, {"tpot", &f->tpot}};
    char key[32];
    dy_jb_set(b, o, "age_s", json_integer(age));
    dy_jb_set(b, o, "requests_per_s", json_real(f->requests_per_s));
    dy_jb_set(b, o, "output_tokens_per_s", json_real(f->output_tokens_per_s));
    for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++) {
        snprintf(key, sizeof key, "%s_p50_s", lat[i].name);
        dy_jb_set(b, o, key, lat[i].p->n ? json_real(lat[i].p->p50) : json_null());
        snprintf(key, sizeof key, "%s_p90_s", lat[i].name);
        dy_jb_set(b, o, key, lat[i].p->n ? json_real(lat[i].p->p90) : json_null());
    }
    dy_jb_set(b, o, "goodput", goodput_json(f));
    dy_jb_set(b, o, "transfers_per_s", json_real(f->transfers_per_s));
    dy_jb_set(b, o, "xfer_bytes_per_s", json_real(f->xfer_bytes_per_s));
    return o;
}

/* The window in slices of DY_STATUS_STEP_S, oldest first; a slice before the server started
 * is left out. */
static json_t *series_json(dy_jb *b, dy_recent *r, double now, double uptime)
{
    json_t *arr = json_array();
    const int window = dy_recent_config_of(r)->window_s;
    for (int to = window - DY_STATUS_STEP_S; to >= 0; to -= DY_STATUS_STEP_S) {
        if (to > uptime)
            continue;
        dy_recent_figures f = dy_recent_between(r, now, to + DY_STATUS_STEP_S, to);
        dy_jb_append(b, arr, point_json(b, &f, to));
    }
    return arr;
}

static json_t *objectives_json(dy_jb *b, const dy_recent_config *c)
{
    if (!(c->slo_ttft_s > 0 && c->slo_tpot_s > 0))
        return json_null();
    json_t *o = json_object();
    dy_jb_set(b, o, "ttft_s", json_real(c->slo_ttft_s));
    dy_jb_set(b, o, "tpot_s", json_real(c->slo_tpot_s));
    return o;
}

static json_t *requests_json(dy_jb *b, dy_recent *r, double now, double uptime,
                             const dy_recent_figures *sum)
{
    json_t *o = json_object();
    dy_jb_set(b, o, "window_s", json_integer(dy_recent_config_of(r)->window_s));
    dy_jb_set(b, o, "step_s", json_integer(DY_STATUS_STEP_S));
    dy_jb_set(b, o, "objectives", objectives_json(b, dy_recent_config_of(r)));
    dy_jb_set(b, o, "summary", summary_json(b, sum));
    dy_jb_set(b, o, "series", series_json(b, r, now, uptime));
    return o;
}

/* ---------------------------------------------------------------- KV and the router */

static json_t *ratio_or_null(double num, double den)
{
    return den > 0 ? json_real(num / den) : json_null();
}

static json_t *kv_move_json(dy_jb *b, const dy_recent_figures *f, const dy_xfer_totals *x)
{
    json_t *o = json_object(), *tot = json_object();
    dy_jb_set(b, o, "transfers_per_s", json_real(f->transfers_per_s));
    dy_jb_set(b, o, "bytes_per_s", json_real(f->xfer_bytes_per_s));
    /* The copy's own rate: bytes over the time spent moving them. */
    dy_jb_set(b, o, "transfer_gb_per_s", ratio_or_null(f->xfer_bytes / 1e9, f->xfer_s));
    dy_jb_set(b, o, "ttft_share", ratio_or_null(f->xfer_s, f->moved_ttft_s));
    dy_jb_set(b, tot, "transfers", json_integer((json_int_t)x->transfers));
    dy_jb_set(b, tot, "failed", json_integer((json_int_t)(x->failed + x->timeouts)));
    dy_jb_set(b, tot, "bytes", json_integer((json_int_t)x->bytes));
    dy_jb_set(b, tot, "seconds", json_real(x->seconds));
    dy_jb_set(b, tot, "remote_prefills", json_integer((json_int_t)x->remote));
    dy_jb_set(b, tot, "local_prefills", json_integer((json_int_t)x->local));
    dy_jb_set(b, o, "totals", tot);
    return o;
}

static json_t *prefix_json(dy_jb *b, const dy_recent_figures *f, const dy_worker_info *w, int n)
{
    double lookups = 0, hits = 0;
    for (int i = 0; i < n; i++) {
        lookups += (double)w[i].stats.cache_lookup_blocks;
        hits += (double)w[i].stats.cache_hit_blocks;
    }
    json_t *o = json_object();
    dy_jb_set(b, o, "hit_rate", ratio_or_null(hits, lookups));
    dy_jb_set(b, o, "lookup_blocks", json_integer((json_int_t)lookups));
    dy_jb_set(b, o, "hit_blocks", json_integer((json_int_t)hits));
    dy_jb_set(b, o, "recent_cached_share", ratio_or_null(f->cached_tokens, f->prompt_tokens));
    return o;
}

/* Predicted: the leading blocks the chosen worker held by the index; realised: the prompt
 * tokens it then found cached, in blocks. */
static json_t *router_json(dy_jb *b, const dy_router_totals *rt, const dy_recent_figures *f,
                           int block_size)
{
    json_t *o = json_object(), *rec = json_object();
    const double bs = block_size > 0 ? block_size : 1;
    dy_jb_set(b, o, "policy", json_string(rt->policy ? rt->policy : "?"));
    dy_jb_set(b, o, "block_size", json_integer(block_size));
    dy_jb_set(b, o, "decisions", json_integer((json_int_t)rt->decisions));
    dy_jb_set(b, o, "predicted_overlap_blocks", json_integer((json_int_t)rt->overlap_blocks));
    dy_jb_set(b, o, "cached_tokens", json_integer((json_int_t)rt->cached_tokens));
    dy_jb_set(b, o, "realised_over_predicted",
              ratio_or_null(rt->cached_tokens / bs, (double)rt->overlap_blocks));
    dy_jb_set(b, rec, "predicted_overlap_blocks", json_real(f->predicted_blocks));
    dy_jb_set(b, rec, "cached_blocks", json_real(f->cached_tokens / bs));
    dy_jb_set(b, rec, "realised_over_predicted",
              ratio_or_null(f->cached_tokens / bs, f->predicted_blocks));
    dy_jb_set(b, o, "recent", rec);
    return o;
}

/* ---------------------------------------------------------------- the document */

static int block_size_of(const dy_worker_info *w, int n)
{
    for (int i = 0; i < n; i++)
        if (w[i].hello.block_size > 0)
            return (int)w[i].hello.block_size;
    return 0;
}

char *dy_status_json(const dy_status_env *e, double now)
{
    dy_worker_info w[MAX_WORKERS];
    const int n = dy_fleet_info(e->workers, w, MAX_WORKERS);
    const dy_xfer_totals x = dy_fleet_xfer_totals(e->workers);
    const dy_router_totals rt = dy_fleet_router_totals(e->workers);
    const double uptime = now - e->started;
    dy_recent_figures sum = dy_recent_between(e->recent, now, DY_STATUS_SUMMARY_S, 0);
    dy_jb b = {0};
    json_t *o = json_object(), *workers = json_array(), *kv = json_object();
    dy_jb_set(&b, o, "object", json_string("dyad.status"));
    dy_jb_set(&b, o, "model", dy_json_str(e->model_id));
    dy_jb_set(&b, o, "uptime_s", json_real(uptime));
    for (int i = 0; i < n; i++)
        dy_jb_append(&b, workers, worker_json(&b, &w[i], i));
    dy_jb_set(&b, o, "workers", workers);
    dy_jb_set(&b, o, "pools", pools_json(&b, w, n));
    dy_jb_set(&b, o, "requests", requests_json(&b, e->recent, now, uptime, &sum));
    dy_jb_set(&b, kv, "movement", kv_move_json(&b, &sum, &x));
    dy_jb_set(&b, kv, "prefix_cache", prefix_json(&b, &sum, w, n));
    dy_jb_set(&b, o, "kv", kv);
    dy_jb_set(&b, o, "router", router_json(&b, &rt, &sum, block_size_of(w, n)));
    dy_jb_set(&b, o, "planner", e->autoscale ? dy_autoscale_tree(e->autoscale, now) : json_null());
    return dy_jb_dump(&b, o, JSON_COMPACT);
}
