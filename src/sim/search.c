/* search.c — see search.h. */
#include "sim/search.h"

#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- one deployment */

static double at_percentile(const dyb_dist *d, double pct)
{
    return pct >= 99 ? d->p99 : pct >= 90 ? d->p90 : d->p50;
}

static const char *verdict(const dy_search_result *r, const dy_search_slo *slo)
{
    bool ttft = r->ttft_ms > slo->ttft_ms, itl = r->itl_ms > slo->itl_ms;
    if (r->sum.failed > 0 || r->sum.completed == 0)
        return "requests failed";
    return ttft && itl ? "TTFT and ITL over the objectives"
         : ttft        ? "TTFT over the objective"
         : itl         ? "ITL over the objective"
                       : NULL;
}

static long units_of(const dy_search_config *c, int agg, int prefill, int decode)
{
    return (long)(agg > 0 ? agg : prefill + decode) * dy_deploy_worker_units(c->m);
}

/* Runs the simulation of deployment d into out (its pools and units already set). */
static int simulate(const dy_search_config *c, const dy_deploy_shape *sh, const dy_deploy *d,
                    dy_search_result *out, char *err, size_t errlen)
{
    dy_sim_config made = dy_deploy_sim_config(d, sh, c->m);
    dy_sim_config sc = c->base;
    sc.workers = made.workers;
    sc.n_workers = made.n_workers;
    sc.block_size = made.block_size;
    sc.kv_block_bytes = made.kv_block_bytes;
    dy_step_costs costs = dy_deploy_costs(c->m);
    dy_sim *s = dy_sim_new(&sc, &costs, NULL, err, errlen);
    if (!s)
        return -1;
    int rc = dy_sim_run(s, c->reqs, c->n_reqs, err, errlen);
    dyb_slo slo = {.ttft_ms = c->slo.ttft_ms, .tpot_ms = c->slo.itl_ms};
    if (rc == 0 && dy_sim_summarize(s, &slo, (int)out->units, &out->sum) != 0) {
        snprintf(err, errlen, "out of memory while summarising a simulated run");
        rc = -1;
    }
    if (rc == 0)
        out->refused = dy_sim_get_totals(s).refused;
    dy_sim_free(s);
    return rc;
}

int dy_search_eval(const dy_search_config *c, int agg, int prefill, int decode,
                   dy_search_result *out, char *err, size_t errlen)
{
    *out = (dy_search_result){.agg = agg, .prefill = agg > 0 ? 0 : prefill,
                              .decode = agg > 0 ? 0 : decode};
    out->units = units_of(c, agg, prefill, decode);
    if (c->max_units > 0 && out->units > c->max_units) {
        out->why = "over the budget";
        return 0;
    }
    dy_deploy_shape sh = c->shape;
    sh.agg = agg;
    sh.prefill = prefill;
    sh.decode = decode;
    dy_deploy d;
    if (dy_deploy_make(&sh, c->m, &d, err, errlen) != 0)
        return -1;
    int rc = simulate(c, &sh, &d, out, err, errlen);
    dy_deploy_free(&d);
    if (rc != 0)
        return -1;
    out->ttft_ms = at_percentile(&out->sum.ttft, c->slo.percentile);
    out->itl_ms = at_percentile(&out->sum.tpot, c->slo.percentile);
    out->why = verdict(out, &c->slo);
    out->met = out->why == NULL;
    return 0;
}

/* ---------------------------------------------------------------- the trail */

void dy_search_trail_free(dy_search_trail *t)
{
    free(t->runs);
    *t = (dy_search_trail){0};
}

/* The index of this deployment's run in the trail, or -1. */
static int find_run(const dy_search_trail *t, int agg, int prefill, int decode)
{
    for (int i = 0; i < t->n; i++)
        if (t->runs[i].agg == agg && t->runs[i].prefill == prefill &&
            t->runs[i].decode == decode)
            return i;
    return -1;
}

/* The run of this deployment: made before (the same inputs give the same run), or made now.
 * Its index; -1 on an error (err set); -2 when the search has used its runs. */
static int run(const dy_search_config *c, int agg, int prefill, int decode, dy_search_trail *t,
               char *err, size_t errlen)
{
    int seen = find_run(t, agg, prefill, decode);
    if (seen >= 0)
        return seen;
    if (t->n >= c->max_runs)
        return -2;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        dy_search_result *r = realloc(t->runs, sizeof *r * (size_t)cap);
        if (!r) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        t->runs = r;
        t->cap = cap;
    }
    if (dy_search_eval(c, agg, agg > 0 ? 0 : prefill, agg > 0 ? 0 : decode, &t->runs[t->n], err,
                       errlen) != 0)
        return -1;
    return t->n++;
}

static bool met(const dy_search_trail *t, int i)
{
    return i >= 0 && t->runs[i].met;
}

/* The cheapest run that met the objectives (the first of equals), or -1. */
static int cheapest(const dy_search_trail *t)
{
    int best = -1;
    for (int i = 0; i < t->n; i++)
        if (t->runs[i].met && (best < 0 || t->runs[i].units < t->runs[best].units))
            best = i;
    return best;
}

/* The most workers of one kind the budget (or the simulator) allows. */
static int most_workers(const dy_search_config *c)
{
    long per = dy_deploy_worker_units(c->m);
    long n = c->max_units > 0 ? c->max_units / per : DY_DEPLOY_MAX_WORKERS;
    return n < DY_DEPLOY_MAX_WORKERS ? (int)n : DY_DEPLOY_MAX_WORKERS;
}

/* A larger prefill pool that does not cut TTFT by 5 % is not what TTFT waits for. */
#define PREFILL_GAIN 0.95

/* A pool grows by a quarter (at least one worker) while it misses. */
static int grown(int n)
{
    return n + (n / 4 > 1 ? n / 4 : 1);
}

static int finish(dy_search_trail *t, int rc)
{
    t->best = cheapest(t);
    return rc == -1 ? -1 : 0;
}

/* ---------------------------------------------------------------- aggregated */

int dy_search_agg(const dy_search_config *c, int start, dy_search_trail *t, char *err,
                  size_t errlen)
{
    *t = (dy_search_trail){.best = -1};
    int most = most_workers(c);
    if (most < 1)
        return finish(t, 0);
    int n = start < 1 ? 1 : start > most ? most : start;
    int lo = 1, hi, i = run(c, n, 0, 0, t, err, errlen);
    /* Bracket the least size that meets them: [lo, hi] with hi met. */
    while (i >= 0 && !met(t, i)) {
        lo = n + 1;
        if (n == most)
            return finish(t, 0);
        n = grown(n) < most ? grown(n) : most;
        i = run(c, n, 0, 0, t, err, errlen);
    }
    if (i < 0)
        return finish(t, i);
    hi = n;
    while (lo < hi) { /* more workers never serve worse: bisect */
        int mid = lo + (hi - lo) / 2;
        i = run(c, mid, 0, 0, t, err, errlen);
        if (i < 0)
            return finish(t, i);
        if (met(t, i))
            hi = mid;
        else
            lo = mid + 1;
    }
    return finish(t, 0);
}

/* ---------------------------------------------------------------- disaggregated */

int dy_search_disagg(const dy_search_config *c, int p0, int d0, dy_search_trail *t, char *err,
                     size_t errlen)
{
    *t = (dy_search_trail){.best = -1};
    int most = most_workers(c);
    if (most < 2)
        return finish(t, 0);
    int p = p0 < 1 ? 1 : p0, d = d0 < 1 ? 1 : d0;
    while (p + d > most)
        p > d ? p-- : d--;
    int i;
    /* Grow the pool that bears each missed objective: ITL is the decode pool's; TTFT the
     * prefill pool's until a larger prefill pool stops shortening it (then the wait is for
     * the decode pool's KV and batch slots, and the decode pool grows). */
    bool prefill_helps = true;
    double ttft_before = 0;
    for (bool grew_prefill = false;;) {
        i = run(c, 0, p, d, t, err, errlen);
        if (i < 0 || met(t, i))
            break;
        const dy_search_result *r = &t->runs[i];
        if (grew_prefill && r->ttft_ms > PREFILL_GAIN * ttft_before)
            prefill_helps = false;
        bool failed = r->sum.failed > 0 || r->sum.completed == 0;
        bool slow_first = r->ttft_ms > c->slo.ttft_ms, slow_next = r->itl_ms > c->slo.itl_ms;
        int np = failed || (slow_first && prefill_helps) ? grown(p) : p;
        int nd = failed || slow_next || (slow_first && !prefill_helps) ? grown(d) : d;
        if (np + nd > most) { /* the budget binds: share what is left */
            if (np > p && nd > d)
                np = p + (most - p - d) / 2;
            else if (np > p)
                np = most - nd;
            nd = most - np < nd ? most - np : nd;
        }
        if (np == p && nd == d && slow_first != slow_next) {
            /* At the budget, one objective missed: move a worker from the pool that meets
             * its objective to the one that does not, unless that was already tried. */
            np = slow_first ? p + 1 : p - 1;
            nd = slow_first ? d - 1 : d + 1;
            if (find_run(t, 0, np, nd) >= 0)
                np = p, nd = d;
        }
        if ((np == p && nd == d) || np < 1 || nd < 1)
            return finish(t, 0);
        grew_prefill = np > p;
        ttft_before = r->ttft_ms;
        p = np;
        d = nd;
    }
    if (i < 0)
        return finish(t, i);
    /* Shrink each pool while both objectives are still met. */
    for (;;) {
        int k = p > 1 ? run(c, 0, p - 1, d, t, err, errlen) : -2;
        if (k == -1)
            return finish(t, -1);
        if (met(t, k)) {
            p--;
            continue;
        }
        k = d > 1 ? run(c, 0, p, d - 1, t, err, errlen) : -2;
        if (k == -1)
            return finish(t, -1);
        if (!met(t, k))
            break;
        d--;
    }
    return finish(t, 0);
}
