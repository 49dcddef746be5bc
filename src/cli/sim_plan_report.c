/* sim_plan_report.c — see sim_plan_report.h. */
#include "cli/sim_plan_report.h"

static const char *const role_names[3] = {"agg", "prefill", "decode"};

static const char *role_name(dy_route_pool r)
{
    return (unsigned)r <= DY_POOL_DECODE ? role_names[r] : "?";
}

static const char *mode_name(const dy_sim_planner *p)
{
    return p->planner.mode == DY_PLANNER_REACTIVE ? "reactive" : "sla";
}

/* "kalman:0.01,1", or "no forecast" for the reactive mode. */
static void predictor_text(const dy_sim_planner *p, char *out, size_t cap)
{
    if (p->planner.mode == DY_PLANNER_REACTIVE)
        snprintf(out, cap, "no forecast");
    else
        dy_predict_format(&p->planner.predict, out, cap);
}

cli_plan_figures cli_plan_figures_of(const dy_sim *s, const dyb_summary *sum)
{
    dy_sim_totals t = dy_sim_get_totals(s);
    cli_plan_figures f = {.worker_s = t.worker_s[0] + t.worker_s[1] + t.worker_s[2]};
    long all = sum->completed + sum->failed;
    f.goodput_per_worker_s = f.worker_s > 0 ? (double)sum->good / f.worker_s : 0;
    f.attainment = all > 0 ? (double)sum->good / (double)all : 0;
    return f;
}

/* "3P + 5D" or "4 agg". */
static void target_text(const dy_planner_decision *d, char *out, size_t cap)
{
    if (d->split)
        snprintf(out, cap, "%dP + %dD", d->prefill, d->decode);
    else
        snprintf(out, cap, "%d agg", d->decode);
}

static void print_decision(FILE *f, const dy_sim_decision *r)
{
    char target[32];
    target_text(&r->d, target, sizeof target);
    const dy_balance_traffic *o = &r->d.observed, *p = &r->d.predicted;
    fprintf(f, "  %8.1f %-7s %-9s %2d/%2d/%2d %3d %3d  %8.2f %8.2f %7.0f %7.0f %6.0f %6.0f  %s%s\n",
            r->t, dy_planner_action_name(r->d.action), target, r->active[DY_POOL_AGG],
            r->active[DY_POOL_PREFILL], r->active[DY_POOL_DECODE], r->starting, r->draining,
            o->rate, p->rate, o->isl, p->isl, o->osl, p->osl, r->d.unmet ? "(unmet) " : "",
            r->d.reason);
}

void cli_plan_report_text(FILE *f, const dy_sim *s, const dy_sim_planner *p,
                          const dyb_summary *sum)
{
    int nd, nm, by_action[4] = {0};
    const dy_sim_decision *d = dy_sim_decisions(s, &nd);
    const dy_sim_move *m = dy_sim_moves(s, &nm);
    int moves = 0;
    for (int i = 0; i < nd; i++)
        by_action[d[i].d.action]++;
    for (int i = 0; i < nm; i++)
        moves += m[i].kind == DY_SIM_MOVE;
    char pred[64];
    predictor_text(p, pred, sizeof pred);
    int unmet = 0;
    for (int i = 0; i < nd; i++)
        unmet += d[i].d.unmet;
    fprintf(f, "planner       %s (%s, min dwell %d), every %g s, %d slots, start-up %g s, "
               "switch %g s: %d decisions (%d grow, %d shrink, %d reshape, %d hold; %d unmet), "
               "%d moves\n",
            mode_name(p), pred, p->planner.min_dwell, p->planner.interval_s,
            p->planner.hw.max_units / p->planner.hw.units_per_worker, p->planner.startup_s,
            p->switch_s, nd, by_action[DY_PLAN_GROW], by_action[DY_PLAN_SHRINK],
            by_action[DY_PLAN_RESHAPE], by_action[DY_PLAN_HOLD], unmet, moves);
    dy_sim_totals t = dy_sim_get_totals(s);
    cli_plan_figures g = cli_plan_figures_of(s, sum);
    fprintf(f, "worker-s      %.1f (agg %.1f, prefill %.1f, decode %.1f); goodput %.4g requests "
               "per worker-second, SLO attainment %.1f%%\n",
            g.worker_s, t.worker_s[DY_POOL_AGG], t.worker_s[DY_POOL_PREFILL],
            t.worker_s[DY_POOL_DECODE], g.goodput_per_worker_s, 100 * g.attainment);
    fprintf(f, "decisions     (all but holds; active agg/prefill/decode, starting, draining when "
               "taken; observed and predicted rate, ISL, OSL)\n");
    fprintf(f, "  %8s %-7s %-9s %8s %3s %3s  %8s %8s %7s %7s %6s %6s  %s\n", "t (s)", "action",
            "target", "active", "st", "dr", "rate", "pred", "isl", "pred", "osl", "pred",
            "reason");
    for (int i = 0; i < nd; i++)
        if (d[i].d.action != DY_PLAN_HOLD)
            print_decision(f, &d[i]);
    fprintf(f, "moves        ");
    for (int i = 0; i < nm; i++) {
        if (i && i % 4 == 0)
            fprintf(f, "\n             ");
        const char *what = m[i].kind == DY_SIM_MOVE ? dy_plan_action_name(m[i].act.kind)
                                                    : dy_sim_move_kind_name(m[i].kind);
        fprintf(f, " %.2f s slot %d %s %s;", m[i].t, m[i].act.slot, what,
                role_name(m[i].act.role));
    }
    fprintf(f, "%s\n\n", nm ? "" : " none");
}

static json_t *traffic_json(const dy_balance_traffic *t)
{
    return json_pack("{s:f, s:f, s:f, s:f}", "rate", t->rate, "isl", t->isl, "osl", t->osl,
                     "prefix_hit", t->prefix_hit);
}

static json_t *decision_json(const dy_sim_decision *r)
{
    const dy_planner_decision *d = &r->d;
    return json_pack(
        "{s:f, s:I, s:s, s:b, s:i, s:i, s:i, s:s, s:b, s:o*, s:o*, s:f, s:f, s:f, s:f, s:f, s:f,"
        " s:f, s:f, s:{s:i, s:i, s:i}, s:i, s:i}",
        "t", r->t, "interval", (json_int_t)d->interval, "action",
        dy_planner_action_name(d->action), "split", d->split, "prefill", d->prefill, "decode",
        d->decode, "units", d->units, "reason", d->reason ? d->reason : "", "unmet", d->unmet,
        "observed", traffic_json(&d->observed), "predicted", traffic_json(&d->predicted),
        "ttft_factor", d->ttft_factor, "itl_factor", d->itl_factor, "observed_ttft_ms",
        r->obs.ttft_s * 1e3, "observed_itl_ms", r->obs.itl_s * 1e3, "observed_ttft_p90_ms",
        r->obs.ttft_p90_s * 1e3, "observed_itl_p90_ms", r->obs.itl_p90_s * 1e3, "waiting",
        r->obs.waiting, "kv_use", r->obs.kv_use, "active", "agg", r->active[DY_POOL_AGG],
        "prefill", r->active[DY_POOL_PREFILL], "decode", r->active[DY_POOL_DECODE],
        "starting", r->starting, "draining", r->draining);
}

static json_t *move_json(const dy_sim_move *m)
{
    return json_pack("{s:f, s:s, s:s, s:i, s:s}", "t", m->t, "kind",
                     dy_sim_move_kind_name(m->kind), "action", dy_plan_action_name(m->act.kind),
                     "slot", m->act.slot, "role", role_name(m->act.role));
}

json_t *cli_plan_report_json(const dy_sim *s, const dy_sim_planner *p, const dyb_summary *sum)
{
    int nd, nm;
    const dy_sim_decision *d = dy_sim_decisions(s, &nd);
    const dy_sim_move *m = dy_sim_moves(s, &nm);
    json_t *decisions = json_array(), *moves = json_array();
    for (int i = 0; decisions && i < nd; i++)
        json_array_append_new(decisions, decision_json(&d[i]));
    for (int i = 0; moves && i < nm; i++)
        json_array_append_new(moves, move_json(&m[i]));
    dy_sim_totals t = dy_sim_get_totals(s);
    cli_plan_figures g = cli_plan_figures_of(s, sum);
    char pred[64];
    predictor_text(p, pred, sizeof pred);
    return json_pack("{s:s, s:s, s:f, s:i, s:i, s:f, s:f, s:i, s:{s:f, s:f, s:f, s:f}, s:f, "
                     "s:f, s:o*, s:o*}",
                     "mode", mode_name(p), "predictor", pred, "interval_s", p->planner.interval_s,
                     "min_dwell", p->planner.min_dwell, "budget_workers",
                     p->planner.hw.max_units / p->planner.hw.units_per_worker, "startup_s",
                     p->planner.startup_s, "switch_s", p->switch_s, "initial_workers",
                     p->n_active, "worker_s", "agg", t.worker_s[DY_POOL_AGG], "prefill",
                     t.worker_s[DY_POOL_PREFILL], "decode", t.worker_s[DY_POOL_DECODE],
                     "total", g.worker_s, "goodput_per_worker_s", g.goodput_per_worker_s,
                     "slo_attainment", g.attainment, "decisions", decisions, "moves", moves);
}

int cli_plan_report_csv(FILE *f, const dy_sim *s)
{
    int nd;
    const dy_sim_decision *d = dy_sim_decisions(s, &nd);
    fprintf(f, "t_s,interval,action,split,prefill,decode,units,unmet,observed_rate,"
               "predicted_rate,observed_isl,predicted_isl,observed_osl,predicted_osl,prefix_hit,"
               "observed_ttft_ms,observed_itl_ms,observed_ttft_p90_ms,observed_itl_p90_ms,"
               "waiting,kv_use,ttft_factor,itl_factor,active_agg,active_prefill,active_decode,"
               "starting,draining,reason\n");
    for (int i = 0; i < nd; i++) {
        const dy_planner_decision *x = &d[i].d;
        const dy_planner_obs *o = &d[i].obs;
        fprintf(f, "%.6f,%ld,%s,%d,%d,%d,%d,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,"
                   "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%d,%d,%d,%d,%d,\"%s\"\n",
                d[i].t, x->interval, dy_planner_action_name(x->action), x->split, x->prefill,
                x->decode, x->units, x->unmet, x->observed.rate, x->predicted.rate, x->observed.isl,
                x->predicted.isl, x->observed.osl, x->predicted.osl, x->observed.prefix_hit,
                o->ttft_s * 1e3, o->itl_s * 1e3, o->ttft_p90_s * 1e3, o->itl_p90_s * 1e3,
                o->waiting, o->kv_use, x->ttft_factor, x->itl_factor,
                d[i].active[DY_POOL_AGG], d[i].active[DY_POOL_PREFILL],
                d[i].active[DY_POOL_DECODE], d[i].starting, d[i].draining,
                x->reason ? x->reason : "");
    }
    return ferror(f) ? -1 : 0;
}
