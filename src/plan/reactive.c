/* reactive.c — see reactive.h. Owns the reactive signals (each observation over its
 * threshold), the one-worker grow within the budget and the waits, the dwell before a shrink,
 * the safety net on an SLA decision, and the reason strings of all of these. */
#include "plan/reactive.h"

#include <math.h>
#include <stdio.h>

/* The signals, each observed ÷ its threshold: above 1 it is over, below `low` it is low. */
enum { SIG_TTFT, SIG_QUEUE, SIG_ITL, SIG_KV, SIG_N };

/* The two pools a deployment has, by what they serve: the one that computes prompts (the
 * prefill pool; none when aggregated) and the one that generates (decode, or aggregated). */
enum { POOL_PROMPT = 0, POOL_GEN = 1 };

typedef struct {
    double r[SIG_N];
} signals;

/* ---- reasons ------------------------------------------------------------------------------
 * A reason names the signals that fired: at most one on the prompt side (none, TTFT, queue)
 * and one on the generating side (none, ITL, KV), and what came of them. */

#define TTFT_OVER "TTFT p90 over the objective"
#define QUEUE_OVER "the waiting queue over its threshold"
#define ITL_OVER "ITL p90 over the objective"
#define KV_OVER "KV use over its threshold"
#define BY_SIGNALS(pre, post)                                                                    \
    {{NULL, pre ITL_OVER post, pre KV_OVER post},                                                \
     {pre TTFT_OVER post, pre TTFT_OVER " and " ITL_OVER post, pre TTFT_OVER " and " KV_OVER post}, \
     {pre QUEUE_OVER post, pre QUEUE_OVER " and " ITL_OVER post,                                 \
      pre QUEUE_OVER " and " KV_OVER post}}
#define BY_OUTCOME(pre)                                                                          \
    {BY_SIGNALS(pre, ": one more worker where it fired"),                                      \
     BY_SIGNALS(pre, ": one more worker where it fired; the budget refused more"),             \
     BY_SIGNALS(pre, ", but the budget allows no more workers"),                               \
     BY_SIGNALS(pre, ", waiting for the worker started for it to serve")}

typedef enum { GREW, GREW_REFUSED, REFUSED, WAITING } outcome;
enum { FROM_REACTIVE, FROM_NET };

/* [source][outcome][prompt signal: none, TTFT, queue][generating signal: none, ITL, KV] */
static const char *const reasons[2][4][3][3] = {BY_OUTCOME("reactive: "),
                                                BY_OUTCOME("reactive safety net: ")};

/* Which signal names a side in reasons[]: 0 none, else its index there. */
static int prompt_index(int sig)
{
    return sig == SIG_TTFT ? 1 : sig == SIG_QUEUE ? 2 : 0;
}

static int gen_index(int sig)
{
    return sig == SIG_ITL ? 1 : sig == SIG_KV ? 2 : 0;
}

/* ---- thresholds and signals ------------------------------------------------------------- */

int dy_reactive_check(const dy_planner_reactive *r, char *err, size_t errlen)
{
    const char *bad = !(isfinite(r->queue_per_worker) && r->queue_per_worker >= 0)
                          ? "planner.reactive.queue_per_worker: must be > 0 (0: the default)"
                      : !(r->kv_high >= 0 && r->kv_high <= 1)
                          ? "planner.reactive.kv_high: must be in (0, 1] (0: the default)"
                      : !(r->low >= 0 && r->low < 1)
                          ? "planner.reactive.low: must be in (0, 1) (0: the default)"
                          : NULL;
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return -1;
    }
    return 0;
}

static dy_planner_reactive resolved(const dy_planner_reactive *r)
{
    return (dy_planner_reactive){
        .queue_per_worker = r->queue_per_worker > 0 ? r->queue_per_worker
                                                    : DY_REACTIVE_QUEUE_PER_WORKER,
        .kv_high = r->kv_high > 0 ? r->kv_high : DY_REACTIVE_KV_HIGH,
        .low = r->low > 0 ? r->low : DY_REACTIVE_LOW};
}

/* The deployed decision's pools, by POOL_*. */
static void pool_sizes(const dy_planner_decision *d, int size[2])
{
    size[POOL_PROMPT] = d->split ? d->prefill : 0;
    size[POOL_GEN] = d->decode;
}

static signals read_signals(const dy_planner *p, const dy_planner_obs *o,
                            const dy_planner_reactive *t)
{
    const dy_planner_decision *cur = &p->current;
    /* an SLA answer of a budget below one worker leaves none: read the queue as for one */
    const int deployed = cur->split ? cur->prefill : cur->decode;
    const int prompt_workers = deployed > 0 ? deployed : 1;
    return (signals){{[SIG_TTFT] = o->ttft_p90_s / p->cfg.slo.ttft_s,
                      [SIG_QUEUE] = o->waiting / (t->queue_per_worker * prompt_workers),
                      [SIG_ITL] = o->itl_p90_s / p->cfg.slo.itl_s,
                      [SIG_KV] = o->kv_use / t->kv_high}};
}

/* The side's signal the furthest over its threshold (of the two it counts), or -1 when none
 * is over. The safety net counts the p90s alone. */
static int side_over(const signals *s, int side, bool p90_only)
{
    const int a = side == POOL_PROMPT ? SIG_TTFT : SIG_ITL;
    const int b = side == POOL_PROMPT ? SIG_QUEUE : SIG_KV;
    const int worst = p90_only || s->r[a] >= s->r[b] ? a : b;
    return s->r[worst] > 1 ? worst : -1;
}

/* How loaded a side is: its larger ratio (the safety net's: its p90's). */
static double side_load(const signals *s, int side, bool p90_only)
{
    const double a = s->r[side == POOL_PROMPT ? SIG_TTFT : SIG_ITL];
    const double b = s->r[side == POOL_PROMPT ? SIG_QUEUE : SIG_KV];
    return p90_only || a > b ? a : b;
}

/* ---- growing ---------------------------------------------------------------------------- */

static int units_of(const dy_planner *p, const int size[2])
{
    return (size[POOL_PROMPT] + size[POOL_GEN]) * p->cfg.hw.units_per_worker;
}

static bool within_budget(const dy_planner *p, const int size[2])
{
    return (p->cfg.hw.max_units == 0 || units_of(p, size) <= p->cfg.hw.max_units) &&
           size[POOL_PROMPT] <= DY_BALANCE_MAX_WORKERS && size[POOL_GEN] <= DY_BALANCE_MAX_WORKERS;
}

/* Sizes `size` (in the deployed shape) up to the deployed size plus one in each pool whose
 * side fired (sig[side] ≥ 0; when aggregated, both sides load the one pool) and is no larger
 * than deployed, within the waits and the budget: when both cannot fit, the pool whose side
 * is the further over (a tie: the generating one). The reason comes from `source`. True when
 * a pool grew; false when none did (the reason says why if one fired and could not). */
static bool grow(dy_planner *p, const signals *s, const int sig[2], int source,
                 int size[2], dy_planner_decision *d)
{
    int cur[2];
    pool_sizes(&p->current, cur);
    const bool split = p->current.split;
    bool want[2] = {split && sig[POOL_PROMPT] >= 0,
                    sig[POOL_GEN] >= 0 || (!split && sig[POOL_PROMPT] >= 0)};
    bool waiting = false, refused = false;
    for (int i = 0; i < 2; i++) {
        want[i] = want[i] && size[i] <= cur[i];
        if (want[i] && p->grow_wait[i] > 0) {
            want[i] = false;
            waiting = true;
        }
    }
    int next[2] = {want[0] ? cur[0] + 1 : size[0], want[1] ? cur[1] + 1 : size[1]};
    if (want[0] && want[1] && !within_budget(p, next)) {
        const bool net = source == FROM_NET;
        const int keep = side_load(s, POOL_PROMPT, net) > side_load(s, POOL_GEN, net) ? 0 : 1;
        next[1 - keep] = size[1 - keep];
        want[1 - keep] = false;
        refused = true;
    }
    if ((want[0] || want[1]) && !within_budget(p, next)) {
        next[0] = size[0];
        next[1] = size[1];
        want[0] = want[1] = false;
        refused = true;
    }
    if (!want[0] && !want[1] && !refused && !waiting)
        return false; /* the decision already has more than the rule would give */
    /* Name what grew; when nothing did, what fired. Aggregated, both sides are the pool's. */
    const bool named_prompt = split ? want[0] || (!want[1] && sig[0] >= 0) : sig[0] >= 0;
    const bool named_gen = split ? want[1] || (!want[0] && sig[1] >= 0) : sig[1] >= 0;
    const outcome how = want[0] || want[1] ? (refused ? GREW_REFUSED : GREW)
                        : refused          ? REFUSED
                                           : WAITING;
    d->reason = reasons[source][how][named_prompt ? prompt_index(sig[0]) : 0]
                       [named_gen ? gen_index(sig[1]) : 0];
    d->unmet = d->unmet || refused;
    size[0] = next[0];
    size[1] = next[1];
    return want[0] || want[1];
}

/* ---- the decisions ---------------------------------------------------------------------- */

static void set_sizes(const dy_planner *p, dy_planner_decision *d, bool split, const int size[2])
{
    d->split = split;
    d->prefill = split ? size[POOL_PROMPT] : 0;
    d->decode = size[POOL_GEN];
    d->units = units_of(p, size);
}

static int action_against(const dy_planner_decision *d, const dy_planner_decision *cur)
{
    if (d->units != cur->units)
        return d->units > cur->units ? DY_PLAN_GROW : DY_PLAN_SHRINK;
    return d->split == cur->split && d->prefill == cur->prefill && d->decode == cur->decode
               ? DY_PLAN_HOLD
               : DY_PLAN_RESHAPE;
}

static bool all_low(const signals *s, double low)
{
    for (int i = 0; i < SIG_N; i++)
        if (!(s->r[i] < low))
            return false;
    return true;
}

/* Every signal low: one fewer worker in the pool with the most slack, after min_dwell
 * intervals of it. */
static void shrink_when_idle(dy_planner *p, const signals *s, int size[2],
                             dy_planner_decision *d)
{
    if (++p->low_streak < p->cfg.min_dwell) {
        d->reason = "reactive: every signal low, held until it has been for min_dwell intervals";
        return;
    }
    const bool prompt_can = p->current.split && size[POOL_PROMPT] > 1;
    const bool gen_can = size[POOL_GEN] > 1;
    if (!prompt_can && !gen_can) {
        d->reason = "reactive: every signal low, the pools are at one worker per role";
        return;
    }
    const bool prompt_slacker = side_load(s, POOL_PROMPT, false) <= side_load(s, POOL_GEN, false);
    const int pool = !gen_can || (prompt_can && prompt_slacker)
                         ? POOL_PROMPT
                         : POOL_GEN;
    size[pool]--;
    p->low_streak = 0;
    d->reason = "reactive: every signal low for min_dwell intervals: one fewer worker where "
                "there is the most slack";
}

dy_planner_decision dy_reactive_decide(dy_planner *p, const dy_planner_obs *o)
{
    const dy_planner_reactive t = resolved(&p->cfg.reactive);
    const signals s = read_signals(p, o, &t);
    dy_planner_decision d = {.ttft_factor = 1, .itl_factor = 1};
    int size[2];
    pool_sizes(&p->current, size);
    const int sig[2] = {side_over(&s, POOL_PROMPT, false), side_over(&s, POOL_GEN, false)};
    if (sig[0] >= 0 || sig[1] >= 0) {
        p->low_streak = 0;
        grow(p, &s, sig, FROM_REACTIVE, size, &d);
    } else if (all_low(&s, t.low))
        shrink_when_idle(p, &s, size, &d);
    else {
        p->low_streak = 0;
        d.reason = "reactive: no signal over its threshold and not all low: the pools are kept";
    }
    set_sizes(p, &d, p->current.split, size);
    d.action = action_against(&d, &p->current);
    return d;
}

void dy_reactive_net(dy_planner *p, const dy_planner_obs *o, dy_planner_decision *d)
{
    const dy_planner_reactive t = resolved(&p->cfg.reactive);
    const signals s = read_signals(p, o, &t);
    const int sig[2] = {side_over(&s, POOL_PROMPT, true), side_over(&s, POOL_GEN, true)};
    const dy_planner_decision *cur = &p->current;
    if ((sig[0] < 0 && sig[1] < 0) || (d->split != cur->split && d->units > cur->units))
        return; /* nothing over, or the SLA decision grows into another shape */
    int size[2];
    pool_sizes(d->split == cur->split ? d : cur, size);
    if (!grow(p, &s, sig, FROM_NET, size, d))
        return; /* the SLA decision stands (its reason, when one fired, says why) */
    set_sizes(p, d, cur->split, size);
    d->action = action_against(d, cur);
    p->smaller_streak = 0;
}

void dy_reactive_note(dy_planner *p, const dy_planner_decision *d)
{
    int before[2], after[2];
    pool_sizes(&p->current, before);
    pool_sizes(d, after);
    const int lead = (int)ceil(p->cfg.startup_s / p->cfg.interval_s);
    for (int i = 0; i < 2; i++) {
        if (after[i] > before[i])
            p->grow_wait[i] = lead;
        else if (p->grow_wait[i] > 0)
            p->grow_wait[i]--;
    }
}
