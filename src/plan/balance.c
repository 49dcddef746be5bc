/* balance.c — see balance.h for the model; docs/plan.md for its derivation. */
#include "plan/balance.h"

#include <math.h>
#include <stdio.h>

/* Bisection steps of a fixed point: the interval shrinks to 2^-60 of the batch bound. */
#define FIXED_POINT_STEPS 60

/* ---------------------------------------------------------------- step costs */

/* The prompt of the traffic as computed tokens: positions [from, to). */
typedef struct {
    int64_t from, to;
} prompt_span;

static prompt_span prompt_of(const dy_balance_traffic *t)
{
    int64_t isl = (int64_t)ceil(t->isl);
    int64_t from = (int64_t)llround(t->isl * t->prefix_hit);
    if (from > isl - 1)
        from = isl - 1; /* the last position is always computed: it gives the first logits */
    return (prompt_span){from, isl};
}

static double mean_decode_context(const dy_balance_traffic *t)
{
    return t->isl + t->osl / 2;
}

static double price(const dy_balance_hw *hw, const dy_step_shape *s)
{
    return hw->costs.step_seconds(hw->costs.ctx, s);
}

/* A step of `extra` (a prefill shape, maybe empty) beside n decodes at context ctx. */
static double step_with_decodes(const dy_balance_hw *hw, dy_step_shape extra, int64_t n,
                                double ctx)
{
    extra.decode_seqs = (int)n;
    extra.decode_context = (int64_t)llround((double)n * ctx);
    return price(hw, &extra);
}

/* The same for a mean batch b ≥ 0: the price between the whole batches on either side, so the
 * fixed points below see a continuous cost. */
static double step_with_batch(const dy_balance_hw *hw, dy_step_shape extra, double b,
                              double ctx)
{
    int64_t lo = (int64_t)floor(b);
    double lo_s = step_with_decodes(hw, extra, lo, ctx);
    double frac = b - (double)lo;
    if (frac <= 0)
        return lo_s;
    return lo_s + frac * (step_with_decodes(hw, extra, lo + 1, ctx) - lo_s);
}

/* A decode-only step at mean batch b: never cheaper than one sequence's step (a worker that
 * decodes on average fewer than one sequence still runs one-sequence steps). */
static double decode_step(const dy_balance_hw *hw, double b, double ctx)
{
    return step_with_batch(hw, (dy_step_shape){0}, b < 1 ? 1 : b, ctx);
}

/* Seconds to compute a prompt's positions [from, to) in chunks of `chunk` tokens, each chunk
 * in a step beside a mean batch b of decodes. */
static double chunked_prefill(const dy_balance_hw *hw, prompt_span sp, int64_t chunk, double b,
                              double ctx, int *n_chunks)
{
    double s = 0;
    int n = 0;
    for (int64_t a = sp.from; a < sp.to; a += chunk, n++) {
        int64_t e = a + chunk < sp.to ? a + chunk : sp.to;
        s += step_with_batch(hw, dy_step_shape_prefill(a, e), b, ctx);
    }
    if (n_chunks)
        *n_chunks = n;
    return s;
}

/* A prompt's share of a prefill worker's time under load: prompts shorter than the step budget
 * share steps (k of them fill one), longer ones run chunk after chunk. */
static double saturated_prefill(const dy_balance_hw *hw, prompt_span sp, double alone)
{
    int64_t p = sp.to - sp.from;
    int64_t k = hw->max_batch_tokens / p;
    if (k <= 1)
        return alone;
    dy_step_shape one = dy_step_shape_prefill(sp.from, sp.to);
    dy_step_shape many = {.prefill_tokens = (int)(k * p),
                          .prefill_context = k * one.prefill_context};
    return price(hw, &many) / (double)k;
}

/* The mean wait of an M/D/1 queue at utilisation rho with service time s. */
static double md1_wait(double rho, double s)
{
    return rho * s / (2 * (1 - rho));
}

/* ---------------------------------------------------------------- fixed points */

/* The largest batch a worker can hold: its running cap and its KV capacity for sequences of
 * isl + osl tokens. */
static double batch_bound(const dy_balance_traffic *t, const dy_balance_hw *hw)
{
    double kv = (double)hw->kv_capacity_tokens / (t->isl + t->osl);
    return kv < hw->max_running ? kv : hw->max_running;
}

/* g(b) = demand(b) − b, where demand(b) is the batch that the load and a step time at batch b
 * imply (+inf where a batch of b is infeasible: the prompts alone would fill the worker).
 * demand grows with b and g(0) > 0, so the steady batch is the least root of g: found between
 * the last point of a grid over the feasible range where g > 0 and the first where g ≤ 0 (none:
 * the worker cannot keep up). */
typedef double (*demand_fn)(const void *ctx, double b);

#define BATCH_GRID 256

static double excess(demand_fn demand, const void *ctx, double b)
{
    return demand(ctx, b) - b;
}

static bool steady_batch(demand_fn demand, const void *ctx, double bound, double *out)
{
    double top = bound;
    if (!isfinite(demand(ctx, top))) { /* feasibility ends inside: bisect for its edge */
        double lo = 0, hi = bound;
        for (int i = 0; i < FIXED_POINT_STEPS; i++) {
            double mid = (lo + hi) / 2;
            if (isfinite(demand(ctx, mid)))
                lo = mid;
            else
                hi = mid;
        }
        top = lo;
    }
    double lo = 0, hi = -1;
    for (int j = 1; j <= BATCH_GRID && hi < 0; j++) {
        double b = top * j / BATCH_GRID;
        if (excess(demand, ctx, b) <= 0)
            hi = b;
        else
            lo = b;
    }
    if (hi < 0)
        return false;
    for (int i = 0; i < FIXED_POINT_STEPS; i++) {
        double mid = (lo + hi) / 2;
        if (excess(demand, ctx, mid) > 0)
            lo = mid;
        else
            hi = mid;
    }
    *out = hi;
    return true;
}

/* ---------------------------------------------------------------- disaggregated */

typedef struct {
    const dy_balance_hw *hw;
    double tokens_per_s; /* decode tokens per second per worker */
    double ctx;
} decode_pool;

static double decode_demand(const void *ctx, double b)
{
    const decode_pool *d = ctx;
    return d->tokens_per_s * decode_step(d->hw, b, d->ctx);
}

static dy_balance_choice infeasible(dy_balance_choice c, const char *why)
{
    c.ok = false;
    c.why = why;
    return c;
}

/* Sets ok and why from the objectives and the budget. */
static dy_balance_choice judge(dy_balance_choice c, const dy_balance_slo *slo,
                               const dy_balance_hw *hw)
{
    if (hw->max_units > 0 && c.units > hw->max_units)
        return infeasible(c, "over the budget");
    if (c.ttft_s > slo->ttft_s)
        return infeasible(c, "TTFT over the objective");
    if (c.itl_s > slo->itl_s)
        return infeasible(c, "ITL over the objective");
    c.ok = true;
    c.why = NULL;
    return c;
}

dy_balance_choice dy_balance_eval_disagg(const dy_balance_traffic *t, const dy_balance_slo *slo,
                                         const dy_balance_hw *hw, int prefill, int decode)
{
    dy_balance_choice c = {.prefill = prefill, .decode = decode,
                           .units = (prefill + decode) * hw->units_per_worker};
    const double ctx = mean_decode_context(t);
    decode_pool d = {hw, t->rate * t->osl / decode, ctx};
    double b;
    if (!steady_batch(decode_demand, &d, batch_bound(t, hw), &b))
        return infeasible(c, "the decode pool cannot keep up");
    c.batch = b;
    c.itl_s = decode_step(hw, b, ctx);

    prompt_span sp = prompt_of(t);
    double alone = chunked_prefill(hw, sp, hw->max_batch_tokens, 0, ctx, NULL);
    double busy = saturated_prefill(hw, sp, alone);
    double rho = t->rate * busy / prefill;
    c.prefill_util = rho;
    if (rho >= 1)
        return infeasible(c, "the prefill pool cannot keep up");
    c.transfer_s = hw->costs.transfer_seconds(hw->costs.ctx,
                                              (sp.to - sp.from) * hw->kv_bytes_per_token);
    c.ttft_s = md1_wait(rho, busy) + alone + c.transfer_s + c.itl_s;
    return judge(c, slo, hw);
}

/* ---------------------------------------------------------------- aggregated */

typedef struct {
    const dy_balance_hw *hw;
    prompt_span sp;
    double rate; /* requests per second per worker */
    double osl, ctx;
} agg_pool;

/* A worker at mean batch b: the time a prompt's chunks take beside it, the chunks, and ITL. */
typedef struct {
    bool ok;
    const char *why;
    double prefill_s, util, itl_s;
    int chunks;
} agg_state;

static agg_state agg_at(const agg_pool *a, double b)
{
    agg_state s = {0};
    int64_t budget = a->hw->max_batch_tokens - (int64_t)ceil(b);
    if (budget < 1) {
        s.why = "the decodes take a whole step's token budget";
        return s;
    }
    s.prefill_s = chunked_prefill(a->hw, a->sp, budget, b, a->ctx, &s.chunks);
    s.util = a->rate * s.prefill_s;
    if (s.util >= 1) {
        s.why = "the workers cannot keep up with the prompts";
        return s;
    }
    double steps_per_s = a->rate * s.chunks + (1 - s.util) / decode_step(a->hw, b, a->ctx);
    s.itl_s = 1 / steps_per_s;
    s.ok = true;
    return s;
}

static double agg_demand(const void *ctx, double b)
{
    const agg_pool *a = ctx;
    agg_state s = agg_at(a, b);
    return s.ok ? a->rate * a->osl * s.itl_s : INFINITY;
}

dy_balance_choice dy_balance_eval_agg(const dy_balance_traffic *t, const dy_balance_slo *slo,
                                      const dy_balance_hw *hw, int workers)
{
    dy_balance_choice c = {.decode = workers, .units = workers * hw->units_per_worker};
    agg_pool a = {hw, prompt_of(t), t->rate / workers, t->osl, mean_decode_context(t)};
    double b;
    if (!steady_batch(agg_demand, &a, batch_bound(t, hw), &b)) {
        agg_state s = agg_at(&a, batch_bound(t, hw));
        return infeasible(c, s.ok ? "the workers cannot keep up with the decodes" : s.why);
    }
    agg_state s = agg_at(&a, b);
    c.batch = b;
    c.itl_s = s.itl_s;
    c.prefill_util = s.util;
    c.ttft_s = md1_wait(s.util, s.prefill_s) + s.prefill_s;
    return judge(c, slo, hw);
}

/* ---------------------------------------------------------------- the search */

static int max_workers(const dy_balance_hw *hw)
{
    if (hw->max_units <= 0)
        return DY_BALANCE_MAX_WORKERS;
    int n = hw->max_units / hw->units_per_worker;
    return n < DY_BALANCE_MAX_WORKERS ? n : DY_BALANCE_MAX_WORKERS;
}

/* The least n in [lo, hi] for which ok(n) holds, or 0 if none: more workers never serve
 * worse in this model (each gets less load), so ok is monotone in n and a bisection finds it. */
typedef bool (*size_ok)(const void *ctx, int n);

static int least_size(size_ok ok, const void *ctx, int lo, int hi)
{
    if (lo > hi || !ok(ctx, hi))
        return 0;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ok(ctx, mid))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

typedef struct {
    const dy_balance_traffic *t;
    const dy_balance_slo *slo;
    const dy_balance_hw *hw;
    int other; /* the size of the pool not being searched */
} size_query;

static bool agg_ok(const void *ctx, int n)
{
    const size_query *q = ctx;
    return dy_balance_eval_agg(q->t, q->slo, q->hw, n).ok;
}

/* The decode pool meets the ITL objective (which does not depend on the prefill pool). */
static bool decode_ok(const void *ctx, int d)
{
    const size_query *q = ctx;
    dy_balance_choice c = dy_balance_eval_disagg(q->t, q->slo, q->hw, q->other, d);
    return c.itl_s > 0 && c.itl_s <= q->slo->itl_s;
}

static bool prefill_ok(const void *ctx, int p)
{
    const size_query *q = ctx;
    return dy_balance_eval_disagg(q->t, q->slo, q->hw, p, q->other).ok;
}

/* The fewest aggregated workers that meet the objectives; else the verdict at the most. */
static dy_balance_choice cheapest_agg(const dy_balance_traffic *t, const dy_balance_slo *slo,
                                      const dy_balance_hw *hw)
{
    int most = max_workers(hw);
    size_query q = {t, slo, hw, 0};
    int n = least_size(agg_ok, &q, 1, most > 0 ? most : 1);
    if (n)
        return dy_balance_eval_agg(t, slo, hw, n);
    dy_balance_choice c = dy_balance_eval_agg(t, slo, hw, most > 0 ? most : 1);
    return infeasible(c, c.why ? c.why : "over the budget");
}

/* How many more decode workers than the fewest that meet ITL the search tries: a bigger
 * decode pool shortens the first decode step that TTFT includes, which may save a prefill
 * worker. */
#define DECODE_SLACK 8

static dy_balance_choice cheapest_disagg(const dy_balance_traffic *t, const dy_balance_slo *slo,
                                         const dy_balance_hw *hw)
{
    int most = max_workers(hw);
    if (most < 2)
        return infeasible(dy_balance_eval_disagg(t, slo, hw, 1, 1), "over the budget");
    size_query q = {t, slo, hw, 1};
    int d0 = least_size(decode_ok, &q, 1, most - 1);
    if (!d0)
        return infeasible(dy_balance_eval_disagg(t, slo, hw, 1, most - 1),
                          "the decode pool cannot meet the ITL objective");
    dy_balance_choice best = {0};
    for (int d = d0; d <= d0 + DECODE_SLACK && d < most; d++) {
        q.other = d;
        int p = least_size(prefill_ok, &q, 1, most - d);
        if (p && (!best.ok || p + d < best.prefill + best.decode))
            best = dy_balance_eval_disagg(t, slo, hw, p, d);
    }
    if (best.ok)
        return best;
    dy_balance_choice c = dy_balance_eval_disagg(t, slo, hw, most - d0, d0);
    return infeasible(c, c.why ? c.why : "over the budget");
}

/* ---------------------------------------------------------------- checks */

static bool positive(double x)
{
    return isfinite(x) && x > 0;
}

int dy_balance_check(const dy_balance_traffic *t, const dy_balance_slo *slo,
                     const dy_balance_hw *hw, char *err, size_t errlen)
{
    const char *bad = !positive(t->rate)                 ? "traffic.rate: must be > 0"
                    : !(isfinite(t->isl) && t->isl >= 1) ? "traffic.isl: must be >= 1"
                    : !(isfinite(t->osl) && t->osl >= 1) ? "traffic.osl: must be >= 1"
                    : !(t->prefix_hit >= 0 && t->prefix_hit < 1)
                        ? "traffic.prefix_hit: must be in [0, 1)"
                    : !positive(slo->ttft_s)            ? "slo.ttft: must be > 0"
                    : !positive(slo->itl_s)             ? "slo.itl: must be > 0"
                    : !hw->costs.step_seconds || !hw->costs.transfer_seconds
                        ? "hw.costs: step_seconds and transfer_seconds are required"
                    : hw->kv_bytes_per_token < 0        ? "hw.kv_bytes_per_token: must be >= 0"
                    : hw->kv_capacity_tokens < 1        ? "hw.kv_capacity_tokens: must be >= 1"
                    : hw->max_batch_tokens < 1          ? "hw.max_batch_tokens: must be >= 1"
                    : hw->max_running < 1               ? "hw.max_running: must be >= 1"
                    : hw->units_per_worker < 1          ? "hw.units_per_worker: must be >= 1"
                    : hw->max_units < 0                 ? "hw.max_units: must be >= 0"
                    : t->isl > (double)INT32_MAX / 2 || t->osl > (double)INT32_MAX / 2
                        ? "traffic: lengths must be below 2^30 tokens"
                                                        : NULL;
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return -1;
    }
    return 0;
}

int dy_balance_solve(const dy_balance_traffic *t, const dy_balance_slo *slo,
                     const dy_balance_hw *hw, dy_balance *out, char *err, size_t errlen)
{
    if (dy_balance_check(t, slo, hw, err, errlen) != 0)
        return -1;
    out->agg = cheapest_agg(t, slo, hw);
    out->disagg = cheapest_disagg(t, slo, hw);
    out->split = out->disagg.ok && (!out->agg.ok || out->disagg.units < out->agg.units);
    return 0;
}
