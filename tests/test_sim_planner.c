/* test_sim_planner.c — the planner in the simulator (sim.h's dy_sim_planner): on a drifting
 * workload built here (20 s of short prompts with long answers, then 20 s of long prompts with
 * short answers) the planner's decisions and the slots' moves are the same for the same inputs
 * (the exact sequence is pinned), every request completes across the drains, switches and
 * stops, the worker-seconds per role add up to the slots' time out of the park, a started
 * worker takes its first request only once its start-up time has passed, and bad planner
 * configurations are refused with the field named. */
#include "testutil.h"
#include "sim/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 6
#define PHASE_S 20.0
#define RATE_A 20.0 /* requests a second in the first phase */
#define RATE_B 100.0 /* and in the second */
#define N_A 400     /* PHASE_S x RATE_A */
#define N_REQ 2400  /* N_A + PHASE_S x RATE_B */
#define SHORT_ISL 16
#define LONG_ISL 200
#define LONG_OSL 64
#define SHORT_OSL 10

typedef struct {
    dy_sim_request r[N_REQ];
    int32_t *prompts;
} workload;

/* Even arrivals at RATE; every prompt distinct (no prefix is shared). */
static void make_workload(workload *w)
{
    w->prompts = calloc((size_t)N_REQ * LONG_ISL, sizeof *w->prompts);
    assert_non_null(w->prompts);
    for (int i = 0; i < N_REQ; i++) {
        const bool first = i < N_A;
        const double t = first ? i / RATE_A : PHASE_S + (i - N_A) / RATE_B;
        int32_t *p = w->prompts + (size_t)i * LONG_ISL;
        const int n = first ? SHORT_ISL : LONG_ISL;
        for (int k = 0; k < n; k++)
            p[k] = 1000 + i * LONG_ISL + k;
        w->r[i] = (dy_sim_request){.arrival = t, .prompt = p, .n_prompt = n,
                                   .max_tokens = first ? LONG_OSL : SHORT_OSL, .n_samples = 1};
    }
}

static dy_sim_worker slot_worker(dy_route_pool role)
{
    return (dy_sim_worker){.role = role, .kv_blocks = 4096, .max_batch_tokens = 512,
                           .max_running = 64};
}

/* SLOTS slots, the first n_active aggregated, the planner on tu_plan_costs. */
static dy_sim_config config_of(dy_sim_worker *w, int n_active, double startup_s,
                               double switch_s)
{
    for (int i = 0; i < SLOTS; i++)
        w[i] = slot_worker(DY_POOL_AGG);
    dy_sim_config c = dy_sim_config_default();
    c.workers = w;
    c.n_workers = SLOTS;
    c.block_size = 16;
    c.kv_block_bytes = 1000;
    c.plan = (dy_sim_planner){
        .on = true, .n_active = n_active, .switch_s = switch_s,
        .planner = {.predict = {.kind = DY_PREDICT_LAST},
                    .slo = {100e-3, 2.5e-3},
                    .hw = {.costs = tu_plan_costs, .kv_bytes_per_token = 1000 / 16,
                           .kv_capacity_tokens = 4096 * 16, .max_batch_tokens = 512,
                           .max_running = 64, .units_per_worker = 1, .max_units = SLOTS},
                    .interval_s = 2, .startup_s = startup_s, .min_dwell = 2}};
    return c;
}

static dy_sim *run(const dy_sim_config *c, const workload *w)
{
    char err[256];
    dy_sim *s = dy_sim_new(c, &tu_plan_costs, NULL, err, sizeof err);
    if (!s)
        fail_msg("dy_sim_new: %s", err);
    if (dy_sim_run(s, w->r, N_REQ, err, sizeof err) != 0)
        fail_msg("dy_sim_run: %s", err);
    return s;
}

static const dy_sim_record *records(const dy_sim *s)
{
    int n;
    const dy_sim_record *r = dy_sim_records(s, &n);
    assert_int_equal(n, N_REQ);
    return r;
}

/* Every request completed with all its tokens: none was lost across drains and switches. */
static void assert_all_completed(const dy_sim *s, const workload *w)
{
    const dy_sim_record *r = records(s);
    for (int i = 0; i < N_REQ; i++) {
        if (!r[i].ok)
            fail_msg("request %d failed: %s", i, r[i].error);
        assert_int_equal(r[i].n_tokens, w->r[i].max_tokens);
    }
}

/* The decisions' actions, space-separated. */
static void actions(const dy_sim *s, char *out, size_t cap)
{
    int n;
    const dy_sim_decision *d = dy_sim_decisions(s, &n);
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? " " : "",
                               dy_planner_action_name(d[i].d.action));
}

static int count_moves(const dy_sim *s, dy_sim_move_kind kind, dy_act_kind act)
{
    int n, k = 0;
    const dy_sim_move *m = dy_sim_moves(s, &n);
    for (int i = 0; i < n; i++)
        k += m[i].kind == kind && m[i].act.kind == act;
    return k;
}

typedef struct {
    workload *w;
} fixture;

static int setup(void **st)
{
    fixture *f = calloc(1, sizeof *f);
    f->w = calloc(1, sizeof *f->w);
    make_workload(f->w);
    *st = f;
    return 0;
}

static int teardown(void **st)
{
    fixture *f = *st;
    free(f->w->prompts);
    free(f->w);
    free(f);
    return 0;
}

/* From one aggregated worker: it grows to 2 for the first phase; the second phase's long prompts
 * make a split cheaper (3 prefill + 1 decode), and the slots get there by switching the second
 * worker to decode, starting three prefill workers and stopping the first; then the observed
 * latency above the prediction grows it to the budget, it shrinks back to the split, and the
 * safety net adds a decode worker when the TPOT p90 runs over. The same run twice takes the
 * same decisions at the same times and makes the same moves. */
static void test_drift_decisions_and_moves(void **st)
{
    const workload *w = ((fixture *)*st)->w;
    dy_sim_worker ws[SLOTS];
    dy_sim_config c = config_of(ws, 1, 3, 0);
    dy_sim *s = run(&c, w);
    char got[512];
    actions(s, got, sizeof got);
    assert_string_equal(got, "grow hold hold hold hold hold hold hold hold hold grow grow hold "
                             "hold hold hold hold shrink grow hold");
    int nd, nm;
    const dy_sim_decision *d = dy_sim_decisions(s, &nd);
    assert_int_equal(nd, 20); /* every 2 s of the 40 */
    assert_false(d[0].d.split);
    assert_int_equal(d[0].d.decode, 2);
    assert_true(d[10].d.split); /* t = 22: the second phase */
    assert_int_equal(d[10].d.prefill, 3);
    assert_int_equal(d[10].d.decode, 1);
    assert_true(fabs(d[10].d.observed.isl - LONG_ISL) < 1e-9);
    assert_true(fabs(d[10].t - 22) < 1e-9);
    /* after the shrink back to 3 + 1, the decode pool's TPOT p90 runs over the objective: the
     * SLA mode's safety net adds a decode worker */
    assert_true(d[18].d.split && d[18].d.prefill == 3 && d[18].d.decode == 2);
    assert_non_null(strstr(d[18].d.reason, "reactive safety net"));
    assert_true(d[18].obs.itl_p90_s > c.plan.planner.slo.itl_s);
    assert_true(count_moves(s, DY_SIM_MOVE, DY_ACT_START) >= 4);
    assert_true(count_moves(s, DY_SIM_MOVE, DY_ACT_SWITCH) >= 1);
    assert_true(count_moves(s, DY_SIM_MOVE, DY_ACT_STOP) >= 1);
    /* every start came up unless the run ended first (start-up 3 s), and every drained switch
     * took its role at once (switch_s 0) */
    const dy_sim_move *mv = dy_sim_moves(s, &nm);
    int late = 0;
    for (int i = 0; i < nm; i++)
        late += mv[i].kind == DY_SIM_MOVE && mv[i].act.kind == DY_ACT_START &&
                mv[i].t + 3 > dy_sim_get_totals(s).duration_s;
    assert_int_equal(late, 1); /* the safety net's, at 38 s */
    assert_int_equal(count_moves(s, DY_SIM_READY, DY_ACT_START),
                     count_moves(s, DY_SIM_MOVE, DY_ACT_START) - late);
    assert_true(count_moves(s, DY_SIM_DRAINED, DY_ACT_SWITCH) >= 1);
    assert_int_equal(count_moves(s, DY_SIM_READY, DY_ACT_SWITCH),
                     count_moves(s, DY_SIM_DRAINED, DY_ACT_SWITCH));
    assert_int_equal(count_moves(s, DY_SIM_PARKED, DY_ACT_STOP),
                     count_moves(s, DY_SIM_MOVE, DY_ACT_STOP) -
                         count_moves(s, DY_SIM_MOVE, DY_ACT_RESUME));
    assert_all_completed(s, w);
    const dy_sim_move *m = dy_sim_moves(s, &nm);
    dy_sim *again = run(&c, w);
    int nd2, nm2;
    const dy_sim_decision *d2 = dy_sim_decisions(again, &nd2);
    const dy_sim_move *m2 = dy_sim_moves(again, &nm2);
    assert_int_equal(nd2, nd);
    assert_int_equal(nm2, nm);
    for (int i = 0; i < nd; i++) {
        assert_true(d2[i].t == d[i].t && d2[i].d.action == d[i].d.action);
        assert_true(d2[i].d.prefill == d[i].d.prefill && d2[i].d.decode == d[i].d.decode);
    }
    for (int i = 0; i < nm; i++)
        assert_true(m2[i].t == m[i].t && m2[i].kind == m[i].kind &&
                    m2[i].act.kind == m[i].act.kind && m2[i].act.slot == m[i].act.slot &&
                    m2[i].act.role == m[i].act.role);
    dy_sim_free(again);
    dy_sim_free(s);
}

/* The slots' time out of the park, rebuilt from the move log, per role: a slot counts from
 * its START (in the new role), while active, and while draining (in its old role); a drained
 * switch counts in the new role from then; a parked slot counts nothing. */
static void log_worker_seconds(const dy_sim *s, int n_active, double *out)
{
    int nm;
    const dy_sim_move *m = dy_sim_moves(s, &nm);
    double since[SLOTS] = {0};
    int role[SLOTS];
    bool out_of_park[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        role[i] = DY_POOL_AGG;
        out_of_park[i] = i < n_active;
    }
    for (int i = 0; i < nm; i++) {
        const int k = m[i].act.slot;
        if (out_of_park[k])
            out[role[k]] += m[i].t - since[k];
        since[k] = m[i].t;
        if (m[i].kind == DY_SIM_PARKED)
            out_of_park[k] = false;
        else if (m[i].kind == DY_SIM_DRAINED ||
                 (m[i].kind == DY_SIM_MOVE && m[i].act.kind == DY_ACT_START)) {
            out_of_park[k] = true;
            role[k] = m[i].act.role;
        }
    }
    const double end = dy_sim_get_totals(s).duration_s;
    for (int k = 0; k < SLOTS; k++)
        if (out_of_park[k])
            out[role[k]] += end - since[k];
}

static void test_worker_seconds_add_up(void **st)
{
    const workload *w = ((fixture *)*st)->w;
    dy_sim_worker ws[SLOTS];
    dy_sim_config c = config_of(ws, 1, 3, 0.5);
    dy_sim *s = run(&c, w);
    assert_all_completed(s, w);
    dy_sim_totals t = dy_sim_get_totals(s);
    double want[3] = {0, 0, 0}, total = 0;
    log_worker_seconds(s, 1, want);
    for (int r = 0; r < 3; r++) {
        if (fabs(t.worker_s[r] - want[r]) > 1e-6)
            fail_msg("role %d: %.9f worker-seconds, the move log says %.9f", r, t.worker_s[r],
                     want[r]);
        total += t.worker_s[r];
    }
    assert_true(t.worker_s[DY_POOL_PREFILL] > 0 && t.worker_s[DY_POOL_DECODE] > 0);
    assert_true(total > t.duration_s && total < SLOTS * t.duration_s);
    dy_sim_free(s);
    /* Without a planner every worker counts all the run. */
    dy_sim_worker two[2] = {slot_worker(DY_POOL_PREFILL), slot_worker(DY_POOL_DECODE)};
    dy_sim_config off = dy_sim_config_default();
    off.workers = two;
    off.n_workers = 2;
    off.kv_block_bytes = 1000;
    s = run(&off, w);
    t = dy_sim_get_totals(s);
    assert_true(fabs(t.worker_s[DY_POOL_PREFILL] - t.duration_s) < 1e-9);
    assert_true(fabs(t.worker_s[DY_POOL_DECODE] - t.duration_s) < 1e-9);
    assert_true(t.worker_s[DY_POOL_AGG] == 0);
    dy_sim_free(s);
}

/* When slot k was first started and when it became active. */
static void first_start(const dy_sim *s, int k, double *start, double *ready)
{
    int nm;
    const dy_sim_move *m = dy_sim_moves(s, &nm);
    *start = *ready = -1;
    for (int i = 0; i < nm && *ready < 0; i++)
        if (m[i].act.slot == k && m[i].kind == DY_SIM_MOVE && m[i].act.kind == DY_ACT_START)
            *start = m[i].t;
        else if (m[i].act.slot == k && m[i].kind == DY_SIM_READY && *start >= 0)
            *ready = m[i].t;
}

/* The first request on a started worker arrives no earlier than start-up time after its START
 * (placement happens at arrival), and the worker does serve. */
static void test_startup_delays_first_request(void **st)
{
    const workload *w = ((fixture *)*st)->w;
    const double startup[2] = {0, 3};
    for (int v = 0; v < 2; v++) {
        dy_sim_worker ws[SLOTS];
        dy_sim_config c = config_of(ws, 1, startup[v], 0);
        dy_sim *s = run(&c, w);
        double start, ready;
        first_start(s, 1, &start, &ready);
        assert_true(start >= 0 && ready >= 0);
        assert_true(fabs(ready - start - startup[v]) < 1e-9);
        const dy_sim_record *r = records(s);
        double first = INFINITY;
        for (int i = 0; i < N_REQ; i++)
            if (r[i].worker == 1 || r[i].prefill_worker == 1)
                first = fmin(first, r[i].arrival);
        assert_true(isfinite(first));
        if (first < ready)
            fail_msg("startup %g: slot 1 started at %g, ready at %g, took a request at %g",
                     startup[v], start, ready, first);
        dy_sim_free(s);
    }
}

/* A planner that can change nothing (one slot, the budget) leaves the run as it is without. */
static void test_idle_planner_changes_nothing(void **st)
{
    const workload *w = ((fixture *)*st)->w;
    dy_sim_worker ws[SLOTS];
    dy_sim_config c = config_of(ws, 1, 0, 0);
    c.n_workers = 1;
    c.plan.planner.hw.max_units = 1;
    dy_sim *on = run(&c, w);
    c.plan.on = false;
    dy_sim *off = run(&c, w);
    int nd;
    dy_sim_decisions(on, &nd);
    assert_true(nd > 0);
    const dy_sim_record *a = records(on), *b = records(off);
    for (int i = 0; i < N_REQ; i++) {
        assert_true(a[i].first_token == b[i].first_token && a[i].done == b[i].done);
        assert_true(a[i].ok == b[i].ok && a[i].n_tokens == b[i].n_tokens);
        for (int k = 0; k < a[i].n_tokens; k++)
            assert_true(a[i].token_times[k] == b[i].token_times[k]);
    }
    assert_true(dy_sim_get_totals(on).steps == dy_sim_get_totals(off).steps);
    dy_sim_free(on);
    dy_sim_free(off);
}

static void assert_refused(const dy_sim_config *c, const char *want)
{
    char err[256] = "";
    dy_sim *s = dy_sim_new(c, &tu_plan_costs, NULL, err, sizeof err);
    assert_null(s);
    if (!strstr(err, want))
        fail_msg("wanted '%s' in '%s'", want, err);
}

static void test_bad_planner_configs(void **st)
{
    (void)st;
    dy_sim_worker ws[SLOTS];
    dy_sim_config c = config_of(ws, 0, 0, 0);
    assert_refused(&c, "initial deployment needs 1 to n_workers");
    c = config_of(ws, SLOTS + 1, 0, 0);
    assert_refused(&c, "initial deployment needs 1 to n_workers");
    c = config_of(ws, 2, 0, 0);
    ws[1].role = DY_POOL_PREFILL; /* aggregated + prefill */
    assert_refused(&c, "aggregated workers, or prefill + decode");
    ws[0].role = DY_POOL_DECODE;
    ws[1].role = DY_POOL_DECODE; /* no prefill worker: not a split either */
    assert_refused(&c, "aggregated workers, or prefill + decode");
    c = config_of(ws, 1, 0, -1);
    assert_refused(&c, "switch_s");
    c = config_of(ws, 1, 0, 0);
    c.plan.planner.hw.max_units = SLOTS + 1;
    assert_refused(&c, "n_workers x units_per_worker");
    c = config_of(ws, 1, 0, 0);
    c.plan.planner.interval_s = 0;
    assert_refused(&c, "planner.interval_s");
    c = config_of(ws, 1, 0, 0);
    c.plan.planner.slo.ttft_s = 0; /* an objective no size meets: dy_planner_init's word */
    assert_refused(&c, "ttft");
    c = config_of(ws, 1, 0, 0);
    c.plan.planner.predict.kind = DY_PREDICT_MEAN; /* window 0 */
    assert_refused(&c, "predict.window");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_drift_decisions_and_moves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_seconds_add_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_startup_delays_first_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_planner_changes_nothing, setup, teardown),
        cmocka_unit_test(test_bad_planner_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
