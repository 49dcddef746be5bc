/* test_router.c — the routing policies: round-robin cycles, random spreads evenly,
 * least-loaded takes the smallest load, kv-aware takes the smallest
 * w × (prefill left + prefill queued) + decode load (random among ties, softmax with a
 * temperature); the router's own accounting moves a request from prefill to decode load at
 * its first token and drops it at its end; approximate-mode workers are predicted from the
 * router's decisions until a TTL; disaggregated pools use their own cost terms; and, over a
 * simulated deployment of workers with LRU caches publishing their events, kv-aware sends
 * shared-prefix groups back to the workers that hold them while keeping loads close. */
#include "testutil.h"
#include "kv/block_hash.h"
#include "route/router.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static dy_router *make(dy_router_policy p, int n_workers, double tau, uint64_t seed)
{
    dy_router_config c = dy_router_config_default();
    c.policy = p;
    c.temperature = tau;
    c.seed = seed;
    dy_router *r = dy_router_new(&c, n_workers);
    assert_non_null(r);
    for (int w = 0; w < n_workers; w++)
        assert_int_equal(dy_router_add_worker(r, w, true), 0);
    return r;
}

/* Worker w reports that it stores (or removes) hashes[0..n), block i in tiers[i] (NULL: all
 * in the device tier), as one batch with the next sequence number. */
static void publish(dy_router *r, int w, const uint64_t *hashes, int n, uint8_t kind,
                    const uint8_t *tiers)
{
    dy_kv_index *x = dy_router_index(r);
    dy_kv_event ev[64];
    assert_true(n <= 64);
    for (int i = 0; i < n; i++)
        ev[i] = (dy_kv_event){kind, tiers ? tiers[i] : 0, hashes[i], i ? hashes[i - 1] : 0};
    assert_int_equal(dy_kv_index_apply(x, w, dy_kv_index_worker_seq(x, w) + 1, ev, n), 0);
}

static void store(dy_router *r, int w, const uint64_t *hashes, int n, uint8_t kind)
{
    publish(r, w, hashes, n, kind, NULL);
}

static void report(dy_router *r, int w, int64_t prefill_tokens, int64_t decode_blocks)
{
    dy_router_load l = {.queued_prefill_tokens = prefill_tokens,
                        .active_decode_blocks = decode_blocks};
    assert_int_equal(dy_router_report_load(r, w, &l), 0);
}

static const uint64_t H[8] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};

static dy_router_choice pick(dy_router *r, dy_route_pool pool, const int *cand, int nc,
                             int n_blocks, double now)
{
    return dy_router_pick(r, pool, cand, nc, H, n_blocks, n_blocks * 16, now);
}

/* ---------------------------------------------------------------- names */

static void test_policy_names(void **st)
{
    (void)st;
    const char *names[] = {"round-robin", "random", "least-loaded", "kv-aware"};
    for (int i = 0; i < 4; i++) {
        dy_router_policy p = DY_ROUTER_ROUND_ROBIN;
        assert_true(dy_router_policy_parse(names[i], &p));
        assert_int_equal(p, i);
        assert_string_equal(dy_router_policy_name(p), names[i]);
    }
    dy_router_policy p = DY_ROUTER_RANDOM;
    assert_false(dy_router_policy_parse("kv", &p));
    assert_false(dy_router_policy_parse("KV-AWARE", &p));
    assert_false(dy_router_policy_parse(NULL, &p));
    assert_int_equal(p, DY_ROUTER_RANDOM);
    assert_string_equal(dy_router_policy_name((dy_router_policy)9), "?");
}

/* ---------------------------------------------------------------- the simple policies */

static void test_round_robin(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_ROUND_ROBIN, 4, 0, 1);
    report(r, 0, 100000, 1000); /* load does not matter */
    for (int k = 0; k < 8; k++)
        assert_int_equal(pick(r, DY_POOL_AGG, NULL, 0, 2, 0).worker, k % 4);
    assert_int_equal(dy_router_remove_worker(r, 2), 0);
    int count[4] = {0}, last = -1;
    for (int k = 0; k < 30; k++) {
        int w = pick(r, DY_POOL_AGG, NULL, 0, 2, 0).worker;
        assert_int_not_equal(w, last);
        count[w]++;
        last = w;
    }
    assert_int_equal(count[2], 0);
    assert_int_equal(count[0], 10);
    assert_int_equal(count[1], 10);
    assert_int_equal(count[3], 10);
    /* A candidate list: only those, in turn (the turn is kept per pool kind). */
    int cand[2] = {3, 1};
    for (int k = 0; k < 6; k++)
        assert_int_equal(pick(r, DY_POOL_PREFILL, cand, 2, 2, 0).worker, cand[k % 2]);
    dy_router_free(r);
}

static void test_random(void **st)
{
    (void)st;
    dy_router *a = make(DY_ROUTER_RANDOM, 4, 0, 7), *b = make(DY_ROUTER_RANDOM, 4, 0, 7);
    dy_router *c = make(DY_ROUTER_RANDOM, 4, 0, 8);
    int count[4] = {0}, differ = 0;
    for (int k = 0; k < 4000; k++) {
        int w = pick(a, DY_POOL_AGG, NULL, 0, 2, 0).worker;
        assert_int_equal(pick(b, DY_POOL_AGG, NULL, 0, 2, 0).worker, w); /* same seed */
        differ += pick(c, DY_POOL_AGG, NULL, 0, 2, 0).worker != w;
        count[w]++;
    }
    for (int w = 0; w < 4; w++) /* 1000 expected; ±150 is over 5 standard deviations */
        assert_in_range(count[w], 850, 1150);
    assert_true(differ > 2000);
    dy_router_free(a);
    dy_router_free(b);
    dy_router_free(c);
}

static void test_least_loaded(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_LEAST_LOADED, 4, 0, 3);
    report(r, 0, 320, 0); /* 20 prefill blocks */
    report(r, 1, 0, 10);
    report(r, 2, 0, 30);
    report(r, 3, 16, 12); /* 1 + 12 */
    store(r, 2, H, 8, DY_KV_EV_STORED); /* a full cache hit does not sway least-loaded */
    dy_router_choice c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
    assert_int_equal(c.worker, 1);
    assert_true(c.cost == 10.0);
    assert_int_equal(c.overlap_blocks, 0);
    /* Ties go either way, at random. */
    report(r, 3, 0, 10);
    int count[4] = {0};
    for (int k = 0; k < 200; k++)
        count[pick(r, DY_POOL_AGG, NULL, 0, 8, 0).worker]++;
    assert_int_equal(count[0] + count[2], 0);
    assert_in_range(count[1], 60, 140);
    dy_router_free(r);
}

/* ---------------------------------------------------------------- kv-aware */

/* Three workers: 0 holds 6 of the 8 blocks and decodes 5 blocks; 1 holds nothing and is
 * idle; 2 holds all 8, has 4 prefill blocks queued and decodes 2. */
static dy_router *three(double w, double tau, uint64_t seed)
{
    dy_router_config c = dy_router_config_default();
    c.overlap_weight = w;
    c.temperature = tau;
    c.seed = seed;
    dy_router *r = dy_router_new(&c, 3);
    for (int i = 0; i < 3; i++)
        dy_router_add_worker(r, i, true);
    store(r, 0, H, 6, DY_KV_EV_STORED);
    store(r, 2, H, 8, DY_KV_EV_STORED);
    report(r, 0, 0, 5);
    report(r, 2, 64, 2);
    return r;
}

static void test_kv_aware_cost(void **st)
{
    (void)st;
    /* cost = w × (left + queued) + decode + left. w = 1: worker 0: (2+0) + 5 + 2 = 9,
     * 1: 8 + 0 + 8 = 16, 2: (0+4) + 2 + 0 = 6. */
    dy_router *r = three(1.0, 0, 1);
    dy_router_choice c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
    assert_int_equal(c.worker, 2);
    assert_int_equal(c.overlap_blocks, 8);
    assert_true(c.cost == 6.0);
    /* Without worker 2 the partial hit wins over the idle worker. */
    int cand[2] = {0, 1};
    c = pick(r, DY_POOL_AGG, cand, 2, 8, 0);
    assert_int_equal(c.worker, 0);
    assert_true(c.cost == 9.0);
    dy_router_free(r);
    /* w = 3 weighs prefill work more: 0: 3·2 + 5 + 2 = 13, 1: 3·8 + 8 = 32, 2: 3·4 + 2 = 14. */
    r = three(3.0, 0, 1);
    c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
    assert_int_equal(c.worker, 0);
    assert_true(c.cost == 13.0);
    assert_int_equal(c.overlap_blocks, 6);
    /* The prompt's partial last block counts as prefill work (hashes cover full blocks):
     * 9 blocks, so 0: 3·3 + 5 + 3 = 17, 2: 3·(1+4) + 2 + 1 = 18. */
    c = dy_router_pick(r, DY_POOL_AGG, NULL, 0, H, 8, 8 * 16 + 5, 0);
    assert_int_equal(c.worker, 0);
    assert_true(c.cost == 17.0);
    dy_router_free(r);
}

static void test_temperature(void **st)
{
    (void)st;
    int spread[3] = {0};
    const double taus[3] = {0, 0.1, 1.0};
    for (int t = 0; t < 3; t++) {
        dy_router *r = three(1.0, taus[t], 5), *same = three(1.0, taus[t], 5);
        int count[3] = {0};
        for (int k = 0; k < 2000; k++) {
            int w = pick(r, DY_POOL_AGG, NULL, 0, 8, 0).worker;
            assert_int_equal(pick(same, DY_POOL_AGG, NULL, 0, 8, 0).worker, w);
            count[w]++;
        }
        assert_true(count[2] >= count[0] && count[2] >= count[1]); /* the cheapest leads */
        spread[t] = count[0] + count[1];
        dy_router_free(r);
        dy_router_free(same);
    }
    assert_int_equal(spread[0], 0); /* τ = 0: argmin every time */
    assert_true(spread[1] > 20);    /* τ > 0 spreads ... */
    assert_true(spread[2] > spread[1] + 200); /* ... more as τ grows */
    /* softmax(−(c − 6)/16/1) over costs 9, 16, 6: P(worker 2) = 1 / (e^-3/16 + e^-10/16 + 1)
     * ≈ 0.423, so about 846 of 2000 (σ ≈ 22). */
    assert_in_range(2000 - spread[2], 760, 930);
}

static void test_removed_blocks_stop_attracting(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_KV_AWARE, 3, 0, 11);
    store(r, 1, H, 8, DY_KV_EV_STORED);
    for (int k = 0; k < 20; k++)
        assert_int_equal(pick(r, DY_POOL_AGG, NULL, 0, 8, 0).worker, 1);
    store(r, 1, H + 3, 5, DY_KV_EV_REMOVED); /* only the first 3 blocks remain */
    dy_router_choice c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
    assert_int_equal(c.worker, 1);
    assert_int_equal(c.overlap_blocks, 3);
    store(r, 1, H, 3, DY_KV_EV_REMOVED); /* nothing left: all three cost the same */
    int count[3] = {0};
    for (int k = 0; k < 300; k++) {
        c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
        assert_int_equal(c.overlap_blocks, 0);
        count[c.worker]++;
    }
    for (int w = 0; w < 3; w++)
        assert_in_range(count[w], 60, 140);
    assert_int_equal(dy_kv_index_size(dy_router_index(r)), 0);
    dy_router_free(r);
}

static void test_dead_worker_not_picked(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_KV_AWARE, 3, 0, 2);
    store(r, 0, H, 8, DY_KV_EV_STORED);
    assert_int_equal(pick(r, DY_POOL_AGG, NULL, 0, 8, 0).worker, 0);
    assert_int_equal(dy_router_remove_worker(r, 0), 0);
    assert_false(dy_router_worker_alive(r, 0));
    assert_int_equal(dy_kv_index_size(dy_router_index(r)), 0);
    for (int k = 0; k < 50; k++) {
        dy_router_choice c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
        assert_int_not_equal(c.worker, 0);
        assert_int_equal(c.overlap_blocks, 0);
    }
    int only[1] = {0};
    assert_int_equal(pick(r, DY_POOL_AGG, only, 1, 8, 0).worker, -1);
    dy_router_free(r);
}

/* ---------------------------------------------------------------- load accounting */

static void load_is(const dy_router *r, int w, int64_t prefill, int64_t decode)
{
    int64_t p = -1, d = -1;
    assert_int_equal(dy_router_worker_load(r, w, &p, &d), 0);
    assert_int_equal(p, prefill);
    assert_int_equal(d, decode);
}

static void test_own_accounting(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_KV_AWARE, 3, 0, 1);
    store(r, 0, H, 2, DY_KV_EV_STORED);
    dy_router_ticket t, u;
    /* 70 tokens = 5 blocks (4 full ones hashed), 2 cached there: 3 to prefill, and 3 new
     * blocks of KV while it decodes (the cached 2 are already in the worker's pool). */
    assert_int_equal(dy_router_on_routed(r, &t, 0, -1, H, 4, 70, 0), 0);
    assert_int_equal(t.prefill_blocks, 3);
    assert_int_equal(t.decode_blocks, 3);
    load_is(r, 0, 3, 0);
    assert_int_equal(dy_router_on_first_token(r, &t), 0);
    load_is(r, 0, 0, 3);
    assert_int_equal(dy_router_on_first_token(r, &t), 0); /* idempotent */
    load_is(r, 0, 0, 3);
    assert_int_equal(dy_router_on_finished(r, &t), 0);
    assert_int_equal(dy_router_on_finished(r, &t), 0);
    load_is(r, 0, 0, 0);
    /* Ends before its first token (cancelled): its prefill load goes. */
    assert_int_equal(dy_router_on_routed(r, &t, 0, -1, H, 4, 70, 0), 0);
    assert_int_equal(dy_router_on_finished(r, &t), 0);
    assert_int_equal(dy_router_on_first_token(r, &t), 0); /* too late: no effect */
    load_is(r, 0, 0, 0);

    /* A report counts what the worker had; own accounting adds only what changed since. */
    assert_int_equal(dy_router_on_routed(r, &t, 0, -1, H, 4, 70, 0), 0); /* +3 prefill */
    report(r, 0, 160, 7);           /* it already counts t: 10 prefill blocks, 7 decode */
    load_is(r, 0, 10, 7);
    assert_int_equal(dy_router_on_routed(r, &u, 0, -1, H, 2, 32, 0), 0); /* all cached */
    assert_int_equal(u.prefill_blocks, 0);
    assert_int_equal(u.decode_blocks, 0);
    assert_int_equal(dy_router_on_first_token(r, &t), 0); /* 3 prefill → 3 decode */
    load_is(r, 0, 7, 10);
    report(r, 0, 0, 10);
    load_is(r, 0, 0, 10);
    assert_int_equal(dy_router_on_finished(r, &t), 0);
    load_is(r, 0, 0, 7);
    assert_int_equal(dy_router_on_finished(r, &u), 0);
    load_is(r, 0, 0, 7);
    report(r, 0, 0, 0);
    /* Never below zero, whatever the report said. */
    assert_int_equal(dy_router_on_routed(r, &t, 0, -1, H, 4, 70, 0), 0);
    report(r, 0, 0, 0); /* it already finished the prefill when it reported */
    dy_router_on_first_token(r, &t);
    dy_router_on_finished(r, &t);
    load_is(r, 0, 0, 0);

    /* Disaggregated: worker 1 prefills and ships, worker 2 (which caches the first block)
     * decodes; its new blocks count at once. */
    store(r, 2, H, 1, DY_KV_EV_STORED);
    assert_int_equal(dy_router_on_routed(r, &t, 2, 1, H, 4, 64, 0), 0);
    load_is(r, 1, 4, 0);
    load_is(r, 2, 0, 3);
    assert_int_equal(dy_router_on_first_token(r, &t), 0);
    load_is(r, 1, 0, 0);
    load_is(r, 2, 0, 3);
    assert_int_equal(dy_router_on_finished(r, &t), 0);
    load_is(r, 2, 0, 0);

    /* A worker that leaves and joins again starts clean; old tickets no longer count. */
    assert_int_equal(dy_router_on_routed(r, &t, 2, -1, H, 4, 64, 0), 0);
    assert_int_equal(dy_router_remove_worker(r, 2), 0);
    assert_int_equal(dy_router_add_worker(r, 2, true), 0);
    load_is(r, 2, 0, 0);
    assert_int_equal(dy_router_on_first_token(r, &t), 0);
    assert_int_equal(dy_router_on_finished(r, &t), 0);
    load_is(r, 2, 0, 0);
    dy_router_free(r);
}

/* ---------------------------------------------------------------- approximate mode */

static void test_approximate_mode(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_KV_AWARE, 3, 0, 9);
    dy_router_add_worker(r, 0, false); /* 0 and 1 publish nothing */
    dy_router_add_worker(r, 1, false);
    dy_router_remove_worker(r, 2);
    dy_router_ticket t;
    dy_router_choice c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
    int home = c.worker;
    assert_int_equal(c.overlap_blocks, 0);
    assert_int_equal(dy_router_on_routed(r, &t, home, -1, H, 8, 128, 0), 0);
    dy_router_on_first_token(r, &t);
    dy_router_on_finished(r, &t);
    assert_int_equal(dy_kv_index_worker_predicted(dy_router_index(r), home), 8);
    /* The same prompt follows its predicted blocks while they live (TTL 120 s). */
    for (int k = 1; k <= 10; k++) {
        c = pick(r, DY_POOL_AGG, NULL, 0, 8, k * 10.0);
        assert_int_equal(c.worker, home);
        assert_int_equal(c.overlap_blocks, 8);
    }
    /* Routed again at 100 s: the prediction now lives to 220 s. */
    assert_int_equal(dy_router_on_routed(r, &t, home, -1, H, 8, 128, 100), 0);
    dy_router_on_finished(r, &t);
    assert_int_equal(pick(r, DY_POOL_AGG, NULL, 0, 8, 219).overlap_blocks, 8);
    c = pick(r, DY_POOL_AGG, NULL, 0, 8, 220);
    assert_int_equal(c.overlap_blocks, 0);
    assert_int_equal(dy_kv_index_worker_predicted(dy_router_index(r), home), 0);
    /* Workers that publish events are never predicted. */
    dy_router_add_worker(r, 2, true);
    assert_int_equal(dy_router_on_routed(r, &t, 2, -1, H, 8, 128, 300), 0);
    assert_int_equal(dy_kv_index_worker_predicted(dy_router_index(r), 2), 0);
    assert_int_equal(dy_kv_index_size(dy_router_index(r)), 0);
    dy_router_free(r);
}

/* ---------------------------------------------------------------- lower tiers */

static const uint8_t ALL_HOST[8] = {1, 1, 1, 1, 1, 1, 1, 1}, ALL_DISK[8] = {2, 2, 2, 2, 2, 2, 2, 2};

static void tiers_are(const dy_router_choice *c, int device, int host, int disk)
{
    assert_int_equal(c->tier_blocks[DY_KV_TIER_DEVICE], device);
    assert_int_equal(c->tier_blocks[DY_KV_TIER_HOST], host);
    assert_int_equal(c->tier_blocks[DY_KV_TIER_DISK], disk);
    assert_int_equal(c->overlap_blocks, device + host + disk);
}

/* The same prefix in the primary pool, on disk, and nowhere, with equal loads: the primary
 * hit wins, and the disk hit still beats no hit. cost = w × work + decode + added, with work
 * = blocks computed + tier cost × blocks loaded and added = blocks not in the device tier. */
static void test_lower_tier_hit_credited_by_cost(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_KV_AWARE, 3, 0, 1);
    store(r, 0, H, 8, DY_KV_EV_STORED);
    publish(r, 1, H, 8, DY_KV_EV_STORED, ALL_DISK);
    dy_router_choice c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
    assert_int_equal(c.worker, 0);
    assert_true(c.cost == 0.0);
    tiers_are(&c, 8, 0, 0);
    int cand[2] = {2, 1}; /* disk: 0.5 × 8 + 8 = 12; nothing: 8 + 8 = 16 */
    c = pick(r, DY_POOL_AGG, cand, 2, 8, 0);
    assert_int_equal(c.worker, 1);
    assert_true(c.cost == 12.0);
    tiers_are(&c, 0, 0, 8);
    /* A disk hit is not a primary hit: worker 0 keeps winning under 11 blocks of decode load
     * (0 + 11 < 12) ... */
    report(r, 0, 0, 11);
    assert_int_equal(pick(r, DY_POOL_AGG, NULL, 0, 8, 0).worker, 0);
    /* ... but not under 13 (13 > 12). */
    report(r, 0, 0, 13);
    assert_int_equal(pick(r, DY_POOL_AGG, NULL, 0, 8, 0).worker, 1);
    dy_router_free(r);
}

/* A run device, device, host, host, disk, disk, then two blocks held nowhere: work =
 * 2 + 0.1·2 + 0.5·2 = 3.2, added = 6. A host hit is worth more than a disk hit. */
static void test_mixed_tier_run(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_KV_AWARE, 3, 0, 1);
    const uint8_t tiers[6] = {0, 0, 1, 1, 2, 2};
    publish(r, 0, H, 6, DY_KV_EV_STORED, tiers);
    dy_router_choice c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
    assert_int_equal(c.worker, 0);
    tiers_are(&c, 2, 2, 2);
    assert_true(fabs(c.cost - 9.2) < 1e-9);
    publish(r, 1, H, 8, DY_KV_EV_STORED, ALL_HOST); /* 0.8 + 8 */
    publish(r, 2, H, 8, DY_KV_EV_STORED, ALL_DISK); /* 4 + 8 */
    c = pick(r, DY_POOL_AGG, (int[]){1, 2}, 2, 8, 0);
    assert_int_equal(c.worker, 1);
    assert_true(fabs(c.cost - 8.8) < 1e-9);
    /* The prefill pool weighs only the work: 3.2 against 0.8 against 4. */
    c = pick(r, DY_POOL_PREFILL, NULL, 0, 8, 0);
    assert_int_equal(c.worker, 1);
    assert_true(fabs(c.cost - 0.8) < 1e-9);
    /* least-loaded ignores the hits but still reports them. */
    dy_router_free(r);
    r = make(DY_ROUTER_LEAST_LOADED, 1, 0, 1);
    publish(r, 0, H, 6, DY_KV_EV_STORED, tiers);
    c = pick(r, DY_POOL_AGG, NULL, 0, 8, 0);
    tiers_are(&c, 2, 2, 2);
    dy_router_free(r);
}

/* The tier costs are the knob: 1 makes a disk hit worth no more work than a miss, 0 makes a
 * host hit as good as a primary one for the work (it still adds its blocks to the pool). */
static void test_tier_cost_config(void **st)
{
    (void)st;
    dy_router_config cfg = dy_router_config_default();
    assert_true(cfg.tier_cost[DY_KV_TIER_DEVICE] == 0);
    assert_true(cfg.tier_cost[DY_KV_TIER_HOST] > 0);
    assert_true(cfg.tier_cost[DY_KV_TIER_HOST] < cfg.tier_cost[DY_KV_TIER_DISK]);
    assert_true(cfg.tier_cost[DY_KV_TIER_DISK] < 1);
    cfg.tier_cost[DY_KV_TIER_HOST] = 0;
    cfg.tier_cost[DY_KV_TIER_DISK] = 1;
    dy_router *r = dy_router_new(&cfg, 3);
    for (int w = 0; w < 3; w++)
        dy_router_add_worker(r, w, true);
    publish(r, 0, H, 8, DY_KV_EV_STORED, ALL_HOST);
    publish(r, 1, H, 8, DY_KV_EV_STORED, ALL_DISK);
    assert_true(pick(r, DY_POOL_AGG, (int[]){0}, 1, 8, 0).cost == 8.0);
    assert_true(pick(r, DY_POOL_AGG, (int[]){1}, 1, 8, 0).cost == 16.0);
    assert_true(pick(r, DY_POOL_AGG, (int[]){2}, 1, 8, 0).cost == 16.0);
    dy_router_free(r);
    /* Each cost in [0, 1]. */
    const double bad[] = {-0.01, 1.01, NAN, INFINITY};
    for (int t = 0; t < DY_KV_N_TIERS; t++) {
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
            cfg = dy_router_config_default();
            cfg.tier_cost[t] = bad[k];
            assert_false(dy_router_config_valid(&cfg));
            assert_null(dy_router_new(&cfg, 2));
        }
        cfg = dy_router_config_default();
        cfg.tier_cost[t] = 1;
        assert_true(dy_router_config_valid(&cfg));
    }
    assert_false(dy_router_config_valid(NULL));
}

/* The ticket counts a load as prefill work at its cost (rounded up) and every loaded block
 * as decode KV: it enters the primary pool like a computed one. */
static void test_lower_tier_accounting(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_KV_AWARE, 3, 0, 1);
    const uint8_t tiers[6] = {0, 0, 1, 1, 2, 2};
    publish(r, 0, H, 6, DY_KV_EV_STORED, tiers);
    dy_router_ticket t;
    assert_int_equal(dy_router_on_routed(r, &t, 0, -1, H, 8, 128, 0), 0);
    assert_int_equal(t.prefill_blocks, 4); /* ⌈2 + 0.2 + 1⌉ */
    assert_int_equal(t.decode_blocks, 6);
    load_is(r, 0, 4, 0);
    assert_int_equal(dy_router_on_first_token(r, &t), 0);
    load_is(r, 0, 0, 6);
    assert_int_equal(dy_router_on_finished(r, &t), 0);
    load_is(r, 0, 0, 0);
    /* Disaggregated: prefill worker 1 holds it all on the host, decode worker 0 as above. */
    publish(r, 1, H, 8, DY_KV_EV_STORED, ALL_HOST);
    assert_int_equal(dy_router_on_routed(r, &t, 0, 1, H, 8, 128, 0), 0);
    assert_int_equal(t.prefill_blocks, 1); /* ⌈0.8⌉ */
    assert_int_equal(t.decode_blocks, 6);
    load_is(r, 1, 1, 0);
    load_is(r, 0, 0, 6);
    assert_int_equal(dy_router_on_finished(r, &t), 0);
    dy_router_free(r);
}

/* "host=F,disk=F" for --router-tier-cost. */
static void test_tier_cost_parse(void **st)
{
    (void)st;
    double cost[DY_KV_N_TIERS] = {0, 0.1, 0.5};
    char err[160] = "";
    assert_true(dy_router_tier_cost_parse("host=0.2,disk=0.75", cost, err, sizeof err));
    assert_true(cost[DY_KV_TIER_HOST] == 0.2 && cost[DY_KV_TIER_DISK] == 0.75);
    assert_true(dy_router_tier_cost_parse("disk=1", cost, err, sizeof err));
    assert_true(cost[DY_KV_TIER_HOST] == 0.2 && cost[DY_KV_TIER_DISK] == 1);
    assert_true(dy_router_tier_cost_parse("disk=0,host=0", cost, err, sizeof err));
    assert_true(cost[DY_KV_TIER_HOST] == 0 && cost[DY_KV_TIER_DISK] == 0);
    const char *bad[] = {"", "host", "host=", "host=x", "host=0.1x", "host=1.5", "host=-0.1",
                         "host=nan", "host=inf", "device=0", "ssd=0.1", "host=0.1,",
                         "host=0.1,host=0.2", ",disk=0.5", "host=0.1;disk=0.2"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        double c[DY_KV_N_TIERS] = {0, 0.3, 0.6};
        err[0] = 0;
        if (dy_router_tier_cost_parse(bad[k], c, err, sizeof err))
            fail_msg("'%s' accepted", bad[k]);
        assert_true(c[DY_KV_TIER_HOST] == 0.3 && c[DY_KV_TIER_DISK] == 0.6); /* untouched */
        assert_non_null(strstr(err, "host=F or disk=F"));
    }
    assert_false(dy_router_tier_cost_parse(NULL, cost, err, sizeof err));
    assert_false(dy_router_tier_cost_parse("host=2", cost, err, sizeof err));
    assert_string_equal(err, "'host=2' is not host=F or disk=F (once each, F a number in [0, 1])");
}

/* ---------------------------------------------------------------- disaggregated pools */

static void test_disagg_pools(void **st)
{
    (void)st;
    dy_router *r = make(DY_ROUTER_KV_AWARE, 4, 0, 4);
    int prefill[2] = {0, 1}, decode[2] = {2, 3};
    store(r, 0, H, 8, DY_KV_EV_STORED);
    store(r, 2, H, 8, DY_KV_EV_STORED);
    report(r, 0, 0, 50); /* decode load on a prefill worker does not count there */
    dy_router_choice c = pick(r, DY_POOL_PREFILL, prefill, 2, 8, 0);
    assert_int_equal(c.worker, 0);
    assert_true(c.cost == 0.0);
    report(r, 0, 16 * 9, 50); /* 9 blocks queued outweigh the 8-block hit */
    assert_int_equal(pick(r, DY_POOL_PREFILL, prefill, 2, 8, 0).worker, 1);
    /* The decode pool goes by load alone: worker 2's cache hit does not count. */
    report(r, 2, 0, 3);
    report(r, 3, 0, 2);
    c = pick(r, DY_POOL_DECODE, decode, 2, 8, 0);
    assert_int_equal(c.worker, 3);
    assert_true(c.cost == 2.0);
    /* The same state in one aggregated pool: the hit outweighs 1 block of load. */
    assert_int_equal(pick(r, DY_POOL_AGG, decode, 2, 8, 0).worker, 2);
    dy_router_free(r);
}

/* ---------------------------------------------------------------- shared-prefix groups
 *
 * G groups of requests share a prefix of P blocks per group, then S blocks of their own
 * (R = P + S). W workers each cache CAP blocks (LRU) and publish STORED/REMOVED events in
 * numbered batches after every request. One request arrives per step; it gets its first
 * token FIRST steps after it is routed and ends LIFE steps after; every REPORT steps each
 * worker reports its load (the prompt blocks of its prefilling requests, the distinct blocks
 * of its decoding ones). The caches hold about twice a worker's share of all prefixes, so a
 * policy that scatters a group over all workers keeps evicting it.
 *
 * The load bound (w = 1; load = prefill + decode blocks in the router's view). kv-aware
 * prefers a busier worker c to the idlest i only while L_c + 2·left_c <= L_i + 2·left_i, and
 * left_i − left_c <= P (only a group's prefix is shared), so once the request adds its
 * left_c >= S blocks, L_c <= L_i + 2P − S. Before the next request one request ends (the
 * idlest may drop by up to R blocks), and a load report may move a worker's load by up to R
 * (the router counts a shared prefix with the request that brought it, the worker while
 * anyone uses it). So the busiest worker stays within 2P − S + 2R blocks of the idlest.
 * Routing by cache affinity alone (w → ∞) breaks that bound once some groups are hot. */
enum { SW = 8, SG = 24, SP = 24, SS = 4, SR = SP + SS, CAP = 160, SN = 3000, FIRST = 4,
       LIFE = 96, REPORT = 4 };
#define LOAD_BOUND (2 * SP - SS + 2 * SR)

typedef struct {
    uint64_t hash[CAP], used[CAP];
    int n;
    uint64_t seq;
} sim_cache;

static bool cache_has(const sim_cache *c, uint64_t h)
{
    for (int i = 0; i < c->n; i++)
        if (c->hash[i] == h)
            return true;
    return false;
}

/* Stores the request's blocks (LRU), and publishes what changed as one batch. */
static void cache_store(dy_router *r, int w, sim_cache *c, const uint64_t *h, int n,
                        uint64_t clock)
{
    dy_kv_event ev[2 * SR];
    int ne = 0;
    for (int k = 0; k < n; k++) {
        int i = 0;
        while (i < c->n && c->hash[i] != h[k])
            i++;
        if (i == c->n) {
            if (c->n < CAP) {
                c->n++;
            } else {
                i = 0;
                for (int j = 1; j < c->n; j++)
                    if (c->used[j] < c->used[i])
                        i = j;
                ev[ne++] = (dy_kv_event){DY_KV_EV_REMOVED, 0, c->hash[i], 0};
            }
            c->hash[i] = h[k];
            ev[ne++] = (dy_kv_event){DY_KV_EV_STORED, 0, h[k], k ? h[k - 1] : 0};
        }
        c->used[i] = clock;
    }
    assert_int_equal(dy_kv_index_apply(dy_router_index(r), w, ++c->seq, ev, ne), 0);
}

/* What worker w reports before request k is routed: the prompt blocks its prefilling
 * requests still compute, and the distinct blocks its decoding requests hold. */
static void report_truth(dy_router *r, int w, int k, const int *routed_to,
                         const dy_router_ticket *ticket, uint64_t (*hashes)[SR])
{
    int64_t prefill = 0;
    uint64_t held[LIFE * SR];
    int n = 0;
    for (int j = k - LIFE + 1; j < k; j++) {
        if (j < 0 || routed_to[j] != w)
            continue;
        if (k - j < FIRST) {
            prefill += ticket[j].prefill_blocks;
            continue;
        }
        for (int i = 0; i < SR; i++) {
            int d = 0;
            while (d < n && held[d] != hashes[j][i])
                d++;
            if (d == n)
                held[n++] = hashes[j][i];
        }
    }
    report(r, w, prefill * 16, n);
}

typedef struct {
    double worst_group_hit_rate, hit_rate, max_gap;
} groups_result;

/* Group g of a request: uniform, or (zipf) with probability ∝ 1/(g+1), so group 0 brings
 * over a quarter of all requests. */
static int pick_group(uint64_t *rng, bool zipf)
{
    if (!zipf)
        return (int)(tu_rng_u64(rng) % SG);
    double total = 0, acc = 0;
    for (int g = 0; g < SG; g++)
        total += 1.0 / (g + 1);
    double u = tu_rng_uniform(rng) * total;
    for (int g = 0; g < SG - 1; g++) {
        acc += 1.0 / (g + 1);
        if (u < acc)
            return g;
    }
    return SG - 1;
}

static groups_result run_groups(dy_router_policy policy, double w_overlap, bool zipf,
                                uint64_t seed)
{
    dy_router_config cfg = dy_router_config_default();
    cfg.policy = policy;
    cfg.overlap_weight = w_overlap;
    cfg.seed = seed;
    dy_router *r = dy_router_new(&cfg, SW);
    assert_non_null(r);
    for (int w = 0; w < SW; w++)
        dy_router_add_worker(r, w, true);
    static sim_cache cache[SW];
    static dy_router_ticket ticket[SN];
    static uint64_t prefix[SG][SP], hashes[SN][SR];
    static int routed_to[SN];
    memset(cache, 0, sizeof cache);
    for (int g = 0; g < SG; g++) {
        uint64_t parent = 0x5eed;
        for (int i = 0; i < SP; i++) {
            int32_t tok[16];
            for (int t = 0; t < 16; t++)
                tok[t] = g * 1000 + i * 16 + t;
            prefix[g][i] = parent = dy_block_hash(parent, tok, 16);
        }
    }
    int seen[SG] = {0}, hits[SG] = {0}, total_hits = 0, total = 0;
    double max_gap = 0;
    uint64_t rng = seed * 2654435761u + 1;
    for (int k = 0; k < SN; k++) {
        double now = k * 0.01;
        if (k >= FIRST)
            dy_router_on_first_token(r, &ticket[k - FIRST]);
        if (k >= LIFE)
            dy_router_on_finished(r, &ticket[k - LIFE]);
        if (k % REPORT == 0)
            for (int w = 0; w < SW; w++)
                report_truth(r, w, k, routed_to, ticket, hashes);
        int g = pick_group(&rng, zipf);
        uint64_t *h = hashes[k];
        memcpy(h, prefix[g], sizeof prefix[g]);
        for (int i = SP; i < SR; i++) {
            int32_t tok[16];
            for (int t = 0; t < 16; t++)
                tok[t] = k * 64 + i * 16 + t + 1000000;
            h[i] = dy_block_hash(h[i - 1], tok, 16);
        }
        dy_router_choice c = dy_router_pick(r, DY_POOL_AGG, NULL, 0, h, SR, SR * 16, now);
        assert_in_range(c.worker, 0, SW - 1);
        if (seen[g]) {
            bool hit = cache_has(&cache[c.worker], prefix[g][SP - 1]) &&
                       cache_has(&cache[c.worker], prefix[g][0]);
            hits[g] += hit;
            total_hits += hit;
            total++;
        }
        seen[g]++;
        routed_to[k] = c.worker;
        assert_int_equal(dy_router_on_routed(r, &ticket[k], c.worker, -1, h, SR, SR * 16, now), 0);
        cache_store(r, c.worker, &cache[c.worker], h, SR, (uint64_t)k + 1);
        int64_t lo = INT64_MAX, hi = 0;
        for (int w = 0; w < SW; w++) {
            int64_t p, d;
            dy_router_worker_load(r, w, &p, &d);
            lo = p + d < lo ? p + d : lo;
            hi = p + d > hi ? p + d : hi;
        }
        if ((double)(hi - lo) > max_gap)
            max_gap = (double)(hi - lo);
    }
    groups_result res = {1.0, (double)total_hits / total, max_gap};
    for (int g = 0; g < SG; g++) {
        double rate = seen[g] > 1 ? (double)hits[g] / (seen[g] - 1) : 1.0;
        if (rate < res.worst_group_hit_rate)
            res.worst_group_hit_rate = rate;
    }
    /* The index agrees with every worker's cache. */
    for (int w = 0; w < SW; w++) {
        assert_int_equal(dy_kv_index_worker_blocks(dy_router_index(r), w), cache[w].n);
        for (int i = 0; i < cache[w].n; i++)
            assert_int_equal(dy_kv_index_holds(dy_router_index(r), w, cache[w].hash[i]), 1);
    }
    dy_router_free(r);
    return res;
}

static void test_shared_prefix_groups(void **st)
{
    (void)st;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        groups_result kv = run_groups(DY_ROUTER_KV_AWARE, 1.0, false, seed);
        print_message("kv-aware, seed %d: worst group %.3f, all %.3f, max load gap %.0f "
                      "(bound %d)\n", (int)seed, kv.worst_group_hit_rate, kv.hit_rate,
                      kv.max_gap, LOAD_BOUND);
        assert_true(kv.worst_group_hit_rate >= 0.90);
        assert_true(kv.max_gap <= LOAD_BOUND);
    }
    /* The test can fail: policies that ignore the caches scatter the groups and miss. */
    groups_result rnd = run_groups(DY_ROUTER_RANDOM, 1.0, false, 1);
    groups_result ll = run_groups(DY_ROUTER_LEAST_LOADED, 1.0, false, 1);
    print_message("random: all %.3f; least-loaded: all %.3f\n", rnd.hit_rate, ll.hit_rate);
    assert_true(rnd.hit_rate < 0.6);
    assert_true(ll.hit_rate < 0.6);
    /* Hot groups: kv-aware spreads them over several holders and keeps the bound; cache
     * affinity alone piles them onto one worker and breaks it. */
    groups_result hot = run_groups(DY_ROUTER_KV_AWARE, 1.0, true, 1);
    groups_result sticky = run_groups(DY_ROUTER_KV_AWARE, 1000.0, true, 1);
    print_message("zipf groups: kv-aware all %.3f, max load gap %.0f; w = 1000: gap %.0f\n",
                  hot.hit_rate, hot.max_gap, sticky.max_gap);
    assert_true(hot.hit_rate >= 0.90);
    assert_true(hot.max_gap <= LOAD_BOUND);
    assert_true(sticky.max_gap > LOAD_BOUND);
}

/* ---------------------------------------------------------------- arguments */

static void test_bad_arguments(void **st)
{
    (void)st;
    dy_router_config c = dy_router_config_default();
    c.block_size = 0;
    assert_null(dy_router_new(&c, 4));
    c = dy_router_config_default();
    c.temperature = -1;
    assert_null(dy_router_new(&c, 4));
    c = dy_router_config_default();
    c.policy = (dy_router_policy)7;
    assert_null(dy_router_new(&c, 4));
    c = dy_router_config_default();
    assert_null(dy_router_new(&c, 0));
    assert_null(dy_router_new(NULL, 4));
    dy_router *r = dy_router_new(&c, 4);
    assert_int_equal(pick(r, DY_POOL_AGG, NULL, 0, 8, 0).worker, -1); /* nobody joined */
    assert_int_equal(dy_router_add_worker(r, 4, true), -1);
    assert_int_equal(dy_router_add_worker(r, -1, true), -1);
    dy_router_add_worker(r, 1, true);
    int cand[3] = {-3, 99, 1};
    assert_int_equal(pick(r, DY_POOL_AGG, cand, 3, 8, 0).worker, 1);
    assert_int_equal(dy_router_pick(r, DY_POOL_AGG, NULL, 0, NULL, 3, 48, 0).worker, -1);
    assert_int_equal(dy_router_pick(r, (dy_route_pool)5, NULL, 0, H, 3, 48, 0).worker, -1);
    assert_int_equal(dy_router_pick(NULL, DY_POOL_AGG, NULL, 0, H, 3, 48, 0).worker, -1);
    dy_router_ticket t;
    assert_int_equal(dy_router_on_routed(r, &t, 0, -1, H, 3, 48, 0), -1); /* not joined */
    assert_int_equal(dy_router_on_routed(r, NULL, 1, -1, H, 3, 48, 0), -1);
    assert_int_equal(dy_router_on_routed(r, &t, 1, 2, H, 3, 48, 0), -1);
    assert_int_equal(dy_router_on_first_token(r, NULL), -1);
    assert_int_equal(dy_router_on_finished(NULL, &t), -1);
    assert_int_equal(dy_router_report_load(r, 2, &(dy_router_load){0}), -1);
    assert_int_equal(dy_router_report_load(r, 1, NULL), -1);
    assert_int_equal(dy_router_worker_load(r, 9, NULL, NULL), -1);
    assert_int_equal(dy_router_remove_worker(r, 9), -1);
    /* An empty prompt still routes. */
    assert_int_equal(dy_router_pick(r, DY_POOL_AGG, NULL, 0, NULL, 0, 0, 0).worker, 1);
    dy_router_free(r);
    dy_router_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_names),
        cmocka_unit_test(test_round_robin),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_least_loaded),
        cmocka_unit_test(test_kv_aware_cost),
        cmocka_unit_test(test_lower_tier_hit_credited_by_cost),
        cmocka_unit_test(test_mixed_tier_run),
        cmocka_unit_test(test_tier_cost_config),
        cmocka_unit_test(test_lower_tier_accounting),
        cmocka_unit_test(test_tier_cost_parse),
        cmocka_unit_test(test_temperature),
        cmocka_unit_test(test_removed_blocks_stop_attracting),
        cmocka_unit_test(test_dead_worker_not_picked),
        cmocka_unit_test(test_own_accounting),
        cmocka_unit_test(test_approximate_mode),
        cmocka_unit_test(test_disagg_pools),
        cmocka_unit_test(test_shared_prefix_groups),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
