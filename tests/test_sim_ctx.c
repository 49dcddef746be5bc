/* test_sim_ctx.c — the simulator refuses the requests the real server refuses for the model's
 * context, and only those: a prompt whose length plus max_tokens exceeds --ctx-len is turned
 * away by the frontend (serve/front/openai.c's dy_api_max_new_tokens, a 400 before admission)
 * and every other one is served to its full length. The test asks the frontend's own function
 * for each request of a sweep of lengths around the limit and compares. */
#include "testutil.h"
#include "serve/front/openai.h"
#include "sim/sim.h"

#include <stdlib.h>
#include <string.h>


enum { CTX = 96, N = 48 };

/* The live frontend's verdict on a completions request of this prompt and max_tokens. */
static bool live_accepts(int n_prompt, int max_tokens)
{
    dy_api_limits lim = dy_api_limits_default(CTX);
    dy_api_request r = {.kind = DY_API_COMPLETIONS, .max_tokens = max_tokens};
    dy_api_error err;
    memset(&err, 0, sizeof err);
    return dy_api_max_new_tokens(&r, n_prompt, &lim, &err) == max_tokens;
}

/* Aggregated (mode 0) or disaggregated (1): request i has a prompt of 40 + 2i tokens and
 * asks for 30 - i/2 + (i % 3) tokens, so prompt + max_tokens crosses CTX both ways. */
static void run_sweep(int mode)
{
    static int32_t tokens[N][200];
    dy_sim_request r[N];
    for (int i = 0; i < N; i++) {
        int n = 40 + 2 * i;
        for (int k = 0; k < n; k++)
            tokens[i][k] = 100 + (i * 7 + k) % 3000;
        r[i] = (dy_sim_request){.arrival = 0.01 * i, .prompt = tokens[i], .n_prompt = n,
                                .max_tokens = 30 - i / 2 + i % 3, .n_samples = 1 + (i % 4 == 0)};
    }
    dy_sim_worker w[2];
    for (int i = 0; i < 2; i++)
        w[i] = (dy_sim_worker){.role = mode == 0 ? DY_POOL_AGG : i == 0 ? DY_POOL_PREFILL
                                                                        : DY_POOL_DECODE,
                               .kv_blocks = 64, .max_batch_tokens = 64, .max_running = 8};
    dy_sim_config c = dy_sim_config_default();
    c.workers = w;
    c.n_workers = 2;
    c.block_size = 16;
    c.kv_block_bytes = 1000;
    c.ctx_len = CTX;
    c.route.disagg_min_tokens = 0;
    char err[256];
    dy_sim *s = dy_sim_new(&c, &tu_sim_costs, NULL, err, sizeof err);
    assert_non_null(s);
    if (dy_sim_run(s, r, N, err, sizeof err) != 0)
        fail_msg("dy_sim_run: %s", err);
    int n;
    const dy_sim_record *rec = dy_sim_records(s, &n);
    int accepted = 0, refused = 0, over = 0;
    for (int k = 0; k < n; k++) {
        const dy_sim_request *q = &r[rec[k].request];
        const bool live = live_accepts(q->n_prompt, q->max_tokens);
        assert_int_equal(rec[k].ok, live);
        if (live) {
            assert_int_equal(rec[k].n_tokens, q->max_tokens); /* never cut short by the context */
            accepted++;
        } else {
            assert_non_null(strstr(rec[k].error, "context"));
            assert_int_equal(rec[k].worker, -1); /* never placed */
            refused++;
            over += rec[k].sample == 0;
        }
    }
    assert_true(accepted > 5 && refused > 5); /* the sweep crosses the limit */
    assert_int_equal(dy_sim_get_totals(s).over_context, over);
    assert_int_equal(dy_sim_get_totals(s).refused, 0);
    dy_sim_free(s);
}

static void test_context_refusals_aggregated(void **st)
{
    (void)st;
    run_sweep(0);
}

static void test_context_refusals_disaggregated(void **st)
{
    (void)st;
    run_sweep(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_refusals_aggregated),
        cmocka_unit_test(test_context_refusals_disaggregated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
