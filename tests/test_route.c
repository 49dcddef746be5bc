/* test_route.c — placement (route/place.h): conditional disaggregation (a prefill worker
 * computes the prompt only when at least disagg_min_tokens of it are uncached, and only
 * while that worker's backlog is under the threshold), then whole decisions driven by
 * scenario tables: a pool, what its workers hold and report, a request -> where it runs,
 * how many of its samples go together, the prefill re-pick after a death, and admission.
 * (Which worker of each pool a policy picks: test_router.c.) */
#include "testutil.h"
#include "route/place.h"

static void test_short_prompts_stay_local(void **st)
{
    (void)st;
    dy_route_config c = {.disagg_min_tokens = 100, .prefill_busy_tokens = 500};
    assert_false(dy_route_remote(&c, 99, 0));
    assert_true(dy_route_remote(&c, 100, 0));
    assert_false(dy_route_remote(&c, 0, 0));
}

static void test_busy_prefill_pool_stays_local(void **st)
{
    (void)st;
    dy_route_config c = {.disagg_min_tokens = 100, .prefill_busy_tokens = 500};
    assert_true(dy_route_remote(&c, 1000, 499));
    assert_false(dy_route_remote(&c, 1000, 500));
}

static void test_defaults(void **st)
{
    (void)st;
    dy_route_config c = dy_route_config_default();
    assert_int_equal(c.disagg_min_tokens, 32);
    assert_int_equal(c.prefill_busy_tokens, 1024);
}

/* ---------------------------------------------------------------- scenarios */

#define BS 16        /* block size of every scenario */
#define MAX_W 4
#define BIG_POOL 1000

enum { AGG = DY_POOL_AGG, PRE = DY_POOL_PREFILL, DEC = DY_POOL_DECODE };

typedef struct {
    const char *name;
    int n_workers;
    int pool[MAX_W];          /* each worker's role */
    bool dead[MAX_W];
    int kv_blocks[MAX_W];     /* 0: BIG_POOL */
    int cached[MAX_W];        /* leading prompt blocks each worker holds */
    int64_t queued[MAX_W];    /* prefill tokens each worker reports queued */
    int prompt_tokens, max_tokens, n_samples;
    bool local_prefill;
    int max_samples;          /* 0: 64 */
    int session_worker;       /* 1 + the worker holding the conversation's KV; 0: none */
    dy_placement want;
} place_case;

static const uint64_t H[32] = {
    0xb01, 0xb02, 0xb03, 0xb04, 0xb05, 0xb06, 0xb07, 0xb08, 0xb09, 0xb0a, 0xb0b,
    0xb0c, 0xb0d, 0xb0e, 0xb0f, 0xb10, 0xb11, 0xb12, 0xb13, 0xb14, 0xb15, 0xb16,
    0xb17, 0xb18, 0xb19, 0xb1a, 0xb1b, 0xb1c, 0xb1d, 0xb1e, 0xb1f, 0xb20,
};

/* One scenario's pool: a kv-aware router whose index and loads are what the case says. */
typedef struct {
    dy_place_worker w[MAX_W];
    dy_place_view v;
} scene;

static void setup(scene *s, const place_case *c)
{
    dy_router_config rc = dy_router_config_default();
    rc.policy = DY_ROUTER_KV_AWARE;
    rc.block_size = BS;
    dy_router *r = dy_router_new(&rc, c->n_workers);
    assert_non_null(r);
    dy_kv_index *x = dy_router_index(r);
    for (int i = 0; i < c->n_workers; i++) {
        s->w[i] = (dy_place_worker){.alive = !c->dead[i], .pool = (dy_route_pool)c->pool[i],
                                    .kv_blocks = c->kv_blocks[i] ? c->kv_blocks[i] : BIG_POOL};
        assert_int_equal(dy_router_add_worker(r, i, true), 0);
        dy_kv_event ev[32];
        assert_true(c->cached[i] <= 32);
        for (int b = 0; b < c->cached[i]; b++)
            ev[b] = (dy_kv_event){DY_KV_EV_STORED, 0, H[b], b ? H[b - 1] : 0};
        if (c->cached[i])
            assert_int_equal(dy_kv_index_apply(x, i, 1, ev, c->cached[i]), 0);
        dy_router_load l = {.queued_prefill_tokens = c->queued[i]};
        assert_int_equal(dy_router_report_load(r, i, &l), 0);
        if (c->dead[i])
            assert_int_equal(dy_router_remove_worker(r, i), 0);
    }
    s->v = (dy_place_view){.workers = s->w, .n_workers = c->n_workers, .block_size = BS,
                           .max_samples = c->max_samples ? c->max_samples : 64,
                           .route = dy_route_config_default(), .router = r};
}

static dy_place_request request_of(const place_case *c)
{
    int nb = c->prompt_tokens / BS;
    assert_true(nb <= 32);
    return (dy_place_request){.prompt_tokens = c->prompt_tokens, .hashes = H, .n_blocks = nb,
                              .max_tokens = c->max_tokens,
                              .n_samples = c->n_samples ? c->n_samples : 1,
                              .local_prefill = c->local_prefill,
                              .by_session = c->session_worker > 0,
                              .session_worker = c->session_worker - 1};
}

static const place_case place_cases[] = {
    {"a conversation's turn goes back to the worker holding it", 2, {AGG, AGG},
     .cached = {4, 0}, .queued = {320, 0}, .session_worker = 2, .prompt_tokens = 80,
     .max_tokens = 16, .want = {1, -1, 0, 1}},
    {"... unless that worker is dead", 3, {AGG, AGG, AGG}, .dead = {false, true, false},
     .cached = {0, 0, 4}, .session_worker = 2, .prompt_tokens = 80, .max_tokens = 16,
     .want = {2, -1, 4, 1}},
    {"aggregated: the worker holding the prefix", 2, {AGG, AGG}, .cached = {0, 4},
     .prompt_tokens = 80, .max_tokens = 16, .want = {1, -1, 4, 1}},
    {"aggregated: nothing cached, the least loaded", 2, {AGG, AGG}, .queued = {320, 0},
     .prompt_tokens = 80, .max_tokens = 16, .want = {1, -1, 0, 1}},
    {"disaggregated: a long uncached prompt is prefilled remotely", 2, {PRE, DEC},
     .prompt_tokens = 160, .max_tokens = 16, .want = {1, 0, 0, 1}},
    {"disaggregated: the prefill worker's cached blocks count", 3, {PRE, PRE, DEC},
     .cached = {0, 5, 0}, .prompt_tokens = 160, .max_tokens = 16, .want = {2, 1, 5, 1}},
    {"disaggregated: a short prompt stays local", 2, {PRE, DEC},
     .prompt_tokens = 20, .max_tokens = 16, .want = {1, -1, 0, 1}},
    {"disaggregated: just long enough goes remote", 2, {PRE, DEC},
     .prompt_tokens = 33, .max_tokens = 16, .want = {1, 0, 0, 1}},
    {"disaggregated: a prefix cached where it decodes stays local", 2, {PRE, DEC},
     .cached = {0, 9}, .prompt_tokens = 160, .max_tokens = 16, .want = {1, -1, 9, 1}},
    {"disaggregated: a busy prefill pool keeps prompts local", 2, {PRE, DEC},
     .queued = {1024, 0}, .prompt_tokens = 160, .max_tokens = 16, .want = {1, -1, 0, 1}},
    {"disaggregated: a prefill pool just under busy takes it", 2, {PRE, DEC},
     .queued = {1008, 0}, .prompt_tokens = 160, .max_tokens = 16, .want = {1, 0, 0, 1}},
    {"disaggregated: no live prefill worker, local", 2, {PRE, DEC}, .dead = {true, false},
     .prompt_tokens = 160, .max_tokens = 16, .want = {1, -1, 0, 1}},
    {"disaggregated: a rerun prefills where it decodes", 2, {PRE, DEC},
     .prompt_tokens = 160, .max_tokens = 16, .local_prefill = true, .want = {1, -1, 0, 1}},
    {"disaggregated: the live decode worker", 3, {PRE, DEC, DEC}, .dead = {false, true, false},
     .prompt_tokens = 160, .max_tokens = 16, .want = {2, 0, 0, 1}},
    {"no live worker", 2, {AGG, AGG}, .dead = {true, true},
     .prompt_tokens = 80, .max_tokens = 16, .want = {-1, -1, 0, 0}},
    {"disaggregated: only the prefill pool alive", 2, {PRE, DEC}, .dead = {false, true},
     .prompt_tokens = 160, .max_tokens = 16, .want = {-1, -1, 0, 0}},
    /* A pool in transition (the planner switching roles): an aggregated worker prefills
     * itself, a decode worker is sent a prefill worker. */
    {"mixed: an aggregated generator prefills itself", 3, {AGG, PRE, DEC},
     .dead = {false, false, true}, .prompt_tokens = 160, .max_tokens = 16, .want = {0, -1, 0, 1}},
    {"mixed: a decode generator gets a prefill worker", 3, {AGG, PRE, DEC},
     .dead = {true, false, false}, .prompt_tokens = 160, .max_tokens = 16, .want = {2, 1, 0, 1}},
    {"samples: all fit together", 1, {AGG}, .prompt_tokens = 32, .max_tokens = 31,
     .n_samples = 4, .want = {0, -1, 0, 4}},
    /* 2 prompt blocks shared + 3 per sample: (20 - 2) / 3 = 6 of 10 fit */
    {"samples: a part the pool can hold", 1, {AGG}, .kv_blocks = {20}, .prompt_tokens = 32,
     .max_tokens = 31, .n_samples = 10, .want = {0, -1, 0, 6}},
    {"samples: at least one, even if it does not fit", 1, {AGG}, .kv_blocks = {2},
     .prompt_tokens = 32, .max_tokens = 31, .n_samples = 10, .want = {0, -1, 0, 1}},
    {"samples: at most what one request carries", 1, {AGG}, .prompt_tokens = 32,
     .max_tokens = 15, .n_samples = 100, .max_samples = 8, .want = {0, -1, 0, 8}},
    {"samples: the generating worker's pool decides", 2, {PRE, DEC}, .kv_blocks = {1000, 20},
     .prompt_tokens = 32, .max_tokens = 31, .n_samples = 10, .want = {1, -1, 0, 6}},
};

static void test_place_scenarios(void **st)
{
    (void)st;
    for (size_t k = 0; k < sizeof place_cases / sizeof *place_cases; k++) {
        const place_case *c = &place_cases[k];
        scene s;
        setup(&s, c);
        dy_place_request r = request_of(c);
        dy_router_ticket t = {.worker = -7};
        dy_placement p = dy_place(&s.v, &r, 0, &t);
        if (p.gen != c->want.gen || p.prefill != c->want.prefill ||
            p.overlap_blocks != c->want.overlap_blocks || p.samples != c->want.samples)
            fail_msg("%s: got gen %d prefill %d overlap %d samples %d, want %d %d %d %d",
                     c->name, p.gen, p.prefill, p.overlap_blocks, p.samples, c->want.gen,
                     c->want.prefill, c->want.overlap_blocks, c->want.samples);
        /* The decision entered the router's accounting (or, with no worker, nothing did). */
        if (p.gen >= 0) {
            assert_int_equal(t.worker, p.gen);
            assert_int_equal(t.prefill_worker, p.prefill >= 0 ? p.prefill : p.gen);
        } else {
            assert_int_equal(t.worker, -7);
        }
        dy_router_free(s.v.router);
    }
}

/* The prefill worker once the decode worker has set blocks aside. */
typedef struct {
    const char *name;
    int n_workers;
    int pool[MAX_W];
    bool dead[MAX_W];
    int cached[MAX_W];
    int planned;
    int want;
} prefill_case;

static const prefill_case prefill_cases[] = {
    {"the planned worker while it lives", 3, {PRE, PRE, DEC}, .cached = {0, 8, 0},
     .planned = 0, .want = 0},
    {"a re-pick after the planned one died", 3, {PRE, PRE, DEC}, .dead = {true, false, false},
     .planned = 0, .want = 1},
    {"the re-pick prefers the cached prefix", 4, {PRE, PRE, PRE, DEC},
     .dead = {true, false, false, false}, .cached = {0, 0, 6, 0}, .planned = 0, .want = 2},
    {"none planned: a pick", 2, {PRE, DEC}, .planned = -1, .want = 0},
    {"no prefill worker alive", 3, {PRE, PRE, DEC}, .dead = {true, true, false},
     .planned = 1, .want = -1},
};

static void test_prefill_repick(void **st)
{
    (void)st;
    for (size_t k = 0; k < sizeof prefill_cases / sizeof *prefill_cases; k++) {
        const prefill_case *pc = &prefill_cases[k];
        place_case c = {pc->name, pc->n_workers, .prompt_tokens = 160, .max_tokens = 16};
        for (int i = 0; i < pc->n_workers; i++) {
            c.pool[i] = pc->pool[i];
            c.dead[i] = pc->dead[i];
            c.cached[i] = pc->cached[i];
        }
        scene s;
        setup(&s, &c);
        dy_place_request r = request_of(&c);
        int got = dy_place_prefill(&s.v, &r, pc->planned, 0);
        if (got != pc->want)
            fail_msg("%s: got %d, want %d", pc->name, got, pc->want);
        dy_router_free(s.v.router);
    }
}

static void test_samples_per_worker(void **st)
{
    (void)st;
    static const struct {
        int kv_blocks, block_size, prompt_tokens, max_tokens, max_samples, want;
    } cases[] = {
        {20, 16, 32, 31, 128, 6},  /* 2 prompt blocks once, 3 blocks per sample */
        {20, 16, 33, 31, 128, 5},  /* a partial prompt block counts */
        {1000, 16, 32, 31, 128, 128},
        {2, 16, 32, 31, 128, 1},
        {0, 16, 32, 31, 128, 1},   /* a pool of unknown size: one at a time */
        {100, 4, 8, 3, 128, 49},   /* the block size is the pool's, not a fixed one */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        assert_int_equal(dy_place_samples_per_worker(cases[k].kv_blocks, cases[k].block_size,
                                                     cases[k].prompt_tokens, cases[k].max_tokens,
                                                     cases[k].max_samples),
                         cases[k].want);
}

static void test_admission(void **st)
{
    (void)st;
    static const struct {
        int waiting, new_sequences, max_queue;
        dy_admit want;
    } cases[] = {
        {0, 1, 4, DY_ADMIT_OK},
        {3, 1, 4, DY_ADMIT_OK},         /* at the limit */
        {4, 1, 4, DY_ADMIT_QUEUE_FULL}, /* over it */
        {2, 3, 4, DY_ADMIT_QUEUE_FULL}, /* a request's choices count together */
        {0, 5, 4, DY_ADMIT_QUEUE_FULL},
        {0, 4, 4, DY_ADMIT_OK},
        {0, 0, 0, DY_ADMIT_OK},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        assert_int_equal(dy_place_admit(cases[k].waiting, cases[k].new_sequences,
                                        cases[k].max_queue),
                         cases[k].want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_prompts_stay_local),
        cmocka_unit_test(test_busy_prefill_pool_stays_local),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_place_scenarios),
        cmocka_unit_test(test_prefill_repick),
        cmocka_unit_test(test_samples_per_worker),
        cmocka_unit_test(test_admission),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
