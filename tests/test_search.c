/* test_search.c — the simulator's search (src/sim/search.h) and the deployment it simulates
 * (src/sim/deploy.h), on a measured cost model of round numbers: one run against hand-computed
 * TTFT and TPOT and its verdicts; the aggregated and the disaggregated searches end on a
 * deployment that meets the objectives and whose every one-worker-smaller neighbour was run and
 * missed; a budget that binds gives no answer and no run over it, or makes the pools trade a
 * worker; the same inputs give the same
 * trail; and deploy.h's shapes and errors. */
#include "testutil.h"
#include "sim/deploy.h"
#include "sim/search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 ms a step, 0.1 ms a prompt token, 0.5 ms a decoding sequence, no cost for context; KV
 * transfers 0.25 ms; one thread a worker (one core). */
static const char model_json[] =
    "{\"kind\": \"measured\", \"name\": \"round\","
    " \"engine\": {\"model\": \"toy.gguf\", \"threads\": 1, \"fixed_ms\": 1,"
    "  \"prefill_ms_per_token\": 0.1, \"prefill_ms_per_context\": 0,"
    "  \"decode_ms_per_seq\": 0.5, \"decode_ms_per_context\": 0},"
    " \"kv\": {\"bytes_per_token\": 1000, \"capacity_tokens\": 65536},"
    " \"transfer\": {\"backend\": \"shm\", \"gbps\": 1000000, \"latency_us\": 250}}";

static dy_cost_model *model;

static int setup(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "/tmp/dyad-test-search-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(model_json, f);
    fclose(f);
    char err[256];
    model = dy_cost_load(path, err, sizeof err);
    unlink(path);
    assert_non_null(model);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dy_cost_free(model);
    return 0;
}

/* n requests of isl distinct tokens and osl outputs, every gap_s seconds. */
typedef struct {
    dy_sim_request *r;
    int32_t *tokens;
    int n;
} workload;

static workload make_workload(int n, int isl, int osl, double gap_s)
{
    workload w = {calloc((size_t)n, sizeof *w.r), calloc((size_t)n * isl, sizeof *w.tokens), n};
    assert_non_null(w.r);
    assert_non_null(w.tokens);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < isl; k++)
            w.tokens[(size_t)i * isl + k] = 10 + (i * 7919 + k) % 30000;
        w.r[i] = (dy_sim_request){.arrival = i * gap_s, .prompt = w.tokens + (size_t)i * isl,
                                  .n_prompt = isl, .max_tokens = osl, .n_samples = 1};
    }
    return w;
}

static void free_workload(workload *w)
{
    free(w->r);
    free(w->tokens);
}

static dy_search_config config_for(const workload *w, double ttft_ms, double itl_ms)
{
    return (dy_search_config){.m = model, .shape = dy_deploy_shape_default(),
                              .base = dy_sim_config_default(), .reqs = w->r, .n_reqs = w->n,
                              .slo = {ttft_ms, itl_ms, 90}, .max_runs = 40};
}

/* One request alone on one aggregated worker: its prompt in one step of 1 + 100 · 0.1 ms, then
 * decode steps of 1 + 0.5 ms. */
static void test_eval_hand(void **state)
{
    (void)state;
    workload w = make_workload(1, 100, 4, 0);
    dy_search_config c = config_for(&w, 20, 5);
    dy_search_result r;
    char err[256];
    assert_int_equal(dy_search_eval(&c, 1, 0, 0, &r, err, sizeof err), 0);
    assert_true(r.met);
    assert_null(r.why);
    assert_int_equal(r.units, 1);
    assert_true(fabs(r.ttft_ms - 11) < 1e-9);
    assert_true(fabs(r.itl_ms - 1.5) < 1e-9);
    assert_int_equal(r.sum.completed, 1);

    c.slo.ttft_ms = 10;
    assert_int_equal(dy_search_eval(&c, 1, 0, 0, &r, err, sizeof err), 0);
    assert_false(r.met);
    assert_string_equal(r.why, "TTFT over the objective");
    c.slo.itl_ms = 1;
    assert_int_equal(dy_search_eval(&c, 1, 0, 0, &r, err, sizeof err), 0);
    assert_string_equal(r.why, "TTFT and ITL over the objectives");
    c.slo.ttft_ms = 20;
    assert_int_equal(dy_search_eval(&c, 1, 0, 0, &r, err, sizeof err), 0);
    assert_string_equal(r.why, "ITL over the objective");

    c.max_units = 1; /* 1 + 1 is over it: not simulated */
    assert_int_equal(dy_search_eval(&c, 0, 1, 1, &r, err, sizeof err), 0);
    assert_false(r.met);
    assert_string_equal(r.why, "over the budget");
    assert_int_equal(r.sum.completed, 0);
    free_workload(&w);
}

static int find(const dy_search_trail *t, int agg, int prefill, int decode)
{
    for (int i = 0; i < t->n; i++)
        if (t->runs[i].agg == agg && t->runs[i].prefill == prefill &&
            t->runs[i].decode == decode)
            return i;
    return -1;
}

/* 200 requests at 100 a second: the search ends on the least size that meets the objectives,
 * and its trail holds the size one smaller, which missed. */
static void test_agg_least_size(void **state)
{
    (void)state;
    workload w = make_workload(200, 100, 10, 0.01);
    dy_search_config c = config_for(&w, 20, 5);
    char err[256];
    for (int start = 1; start <= 8; start += 7) {
        dy_search_trail t;
        assert_int_equal(dy_search_agg(&c, start, &t, err, sizeof err), 0);
        assert_true(t.best >= 0);
        const dy_search_result *b = &t.runs[t.best];
        assert_true(b->met);
        assert_true(b->agg > 1); /* one worker cannot keep up: 100 · 11 ms of prompts a second */
        int smaller = find(&t, b->agg - 1, 0, 0);
        assert_true(smaller >= 0);
        assert_false(t.runs[smaller].met);
        for (int i = 0; i < t.n; i++) /* every run that met costs at least the best */
            assert_true(!t.runs[i].met || t.runs[i].units >= b->units);
        dy_search_trail_free(&t);
    }
    free_workload(&w);
}

static void test_disagg_local_minimum(void **state)
{
    (void)state;
    workload w = make_workload(200, 100, 10, 0.01);
    dy_search_config c = config_for(&w, 25, 5);
    char err[256];
    dy_search_trail t;
    assert_int_equal(dy_search_disagg(&c, 1, 1, &t, err, sizeof err), 0);
    assert_true(t.best >= 0);
    const dy_search_result *b = &t.runs[t.best];
    assert_true(b->met);
    assert_int_equal(b->agg, 0);
    assert_int_equal(b->units, b->prefill + b->decode);
    if (b->prefill > 1) {
        int k = find(&t, 0, b->prefill - 1, b->decode);
        assert_true(k >= 0);
        assert_false(t.runs[k].met);
    }
    if (b->decode > 1) {
        int k = find(&t, 0, b->prefill, b->decode - 1);
        assert_true(k >= 0);
        assert_false(t.runs[k].met);
    }
    /* The same inputs give the same trail. */
    dy_search_trail again;
    assert_int_equal(dy_search_disagg(&c, 1, 1, &again, err, sizeof err), 0);
    assert_int_equal(again.n, t.n);
    assert_int_equal(again.best, t.best);
    for (int i = 0; i < t.n; i++) {
        assert_int_equal(again.runs[i].prefill, t.runs[i].prefill);
        assert_int_equal(again.runs[i].decode, t.runs[i].decode);
        assert_true(again.runs[i].ttft_ms == t.runs[i].ttft_ms);
        assert_true(again.runs[i].itl_ms == t.runs[i].itl_ms);
    }
    dy_search_trail_free(&again);
    dy_search_trail_free(&t);
    free_workload(&w);
}

/* One core cannot serve 100 requests a second of 11 ms prompts, nor can one prefill worker
 * beside one decode worker: no answer, and no run was made over the budget. */
static void test_budget_binds(void **state)
{
    (void)state;
    workload w = make_workload(200, 100, 10, 0.01);
    dy_search_config c = config_for(&w, 20, 5);
    c.max_units = 1;
    char err[256];
    dy_search_trail t;
    assert_int_equal(dy_search_agg(&c, 4, &t, err, sizeof err), 0);
    assert_int_equal(t.best, -1);
    assert_int_equal(t.n, 1);
    assert_int_equal(t.runs[0].units, 1);
    dy_search_trail_free(&t);
    c.max_units = 2;
    assert_int_equal(dy_search_disagg(&c, 1, 1, &t, err, sizeof err), 0);
    assert_int_equal(t.best, -1);
    for (int i = 0; i < t.n; i++)
        assert_true(t.runs[i].units <= 2);
    dy_search_trail_free(&t);
    c.max_units = 1; /* no room for a pair */
    assert_int_equal(dy_search_disagg(&c, 1, 1, &t, err, sizeof err), 0);
    assert_int_equal(t.n, 0);
    assert_int_equal(t.best, -1);
    dy_search_trail_free(&t);
    free_workload(&w);
}

/* At the budget the pools trade a worker: from 1 + 2 (the prefill worker cannot keep up, the
 * budget of 3 leaves it no room to grow) the search moves a decode worker to prefill. */
static void test_disagg_rebalances_at_budget(void **state)
{
    (void)state;
    workload w = make_workload(200, 100, 10, 0.01);
    dy_search_config c = config_for(&w, 25, 5);
    c.max_units = 3;
    char err[256];
    dy_search_trail t;
    assert_int_equal(dy_search_disagg(&c, 1, 2, &t, err, sizeof err), 0);
    assert_true(t.n >= 2);
    assert_int_equal(t.runs[0].prefill, 1);
    assert_string_equal(t.runs[0].why, "TTFT over the objective");
    assert_int_equal(t.runs[1].prefill, 2);
    assert_int_equal(t.runs[1].decode, 1);
    assert_true(t.best >= 0);
    assert_int_equal(t.runs[t.best].units, 3);
    dy_search_trail_free(&t);
    free_workload(&w);
}

/* A search stops at its run limit. */
static void test_run_limit(void **state)
{
    (void)state;
    workload w = make_workload(200, 100, 10, 0.01);
    dy_search_config c = config_for(&w, 20, 5);
    c.max_runs = 1;
    char err[256];
    dy_search_trail t;
    assert_int_equal(dy_search_agg(&c, 1, &t, err, sizeof err), 0);
    assert_int_equal(t.n, 1);
    assert_int_equal(t.best, -1);
    dy_search_trail_free(&t);
    free_workload(&w);
}

static void test_deploy(void **state)
{
    (void)state;
    dy_deploy_shape sh = dy_deploy_shape_default();
    dy_deploy d;
    char err[256];
    assert_int_equal(dy_deploy_make(&sh, model, &d, err, sizeof err), 0); /* 1 + 1 */
    assert_int_equal(d.n, 2);
    assert_int_equal(d.n_prefill, 1);
    assert_int_equal(d.workers[0].role, DY_POOL_PREFILL);
    assert_int_equal(d.workers[1].role, DY_POOL_DECODE);
    assert_int_equal(d.kv_blocks, 65536 / 16);
    assert_int_equal(dy_deploy_units(&d, model), 2);
    char text[128];
    dy_deploy_describe(&d, model, text, sizeof text);
    assert_string_equal(text, "simulated: 1 prefill + 1 decode workers, 1 thread, 4096 KV "
                              "blocks each");
    dy_sim_config sc = dy_deploy_sim_config(&d, &sh, model);
    assert_int_equal(sc.n_workers, 2);
    assert_int_equal(sc.kv_block_bytes, 16 * 1000);
    dy_deploy_free(&d);

    sh.agg = 3;
    assert_int_equal(dy_deploy_make(&sh, model, &d, err, sizeof err), 0);
    assert_int_equal(d.n, 3);
    assert_int_equal(d.workers[2].role, DY_POOL_AGG);
    dy_deploy_free(&d);

    sh = dy_deploy_shape_default();
    sh.decode = 0;
    assert_int_equal(dy_deploy_make(&sh, model, &d, err, sizeof err), 2);
    assert_non_null(strstr(err, "at least 1 prefill and 1 decode"));
    sh.decode = DY_DEPLOY_MAX_WORKERS;
    assert_int_equal(dy_deploy_make(&sh, model, &d, err, sizeof err), 2);
    sh = dy_deploy_shape_default();
    sh.block_size = 65536; /* one block a worker */
    assert_int_equal(dy_deploy_make(&sh, model, &d, err, sizeof err), 1);
    assert_non_null(strstr(err, "KV blocks"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_hand),
        cmocka_unit_test(test_agg_least_size),
        cmocka_unit_test(test_disagg_local_minimum),
        cmocka_unit_test(test_budget_binds),
        cmocka_unit_test(test_disagg_rebalances_at_budget),
        cmocka_unit_test(test_run_limit),
        cmocka_unit_test(test_deploy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
