/* test_kv_index.c — the router's global prefix index: leading overlap for every worker, whole
 * and split by tier, equals a brute-force O(workers × blocks) reference over random events
 * (tiers, removals, clears, predictions); a block counts in its fastest tier, a predicted one
 * as device, and the run ends at the first block held nowhere; snapshots carry tiers;
 * sequence gaps demand a resync, batches are ignored until it, and afterwards
 * the index holds exactly the snapshot; removed and cleared blocks stop counting; a removed
 * worker vanishes; predictions expire at their deadline (extended when repeated) and never
 * disturb event-reported blocks; bad arguments are refused. */
#include "testutil.h"
#include "route/kv_index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- a brute-force mirror */

#define MW 100      /* workers: more than one 64-bit word, not a multiple of 64 */
#define CHAINS 12
#define CHAIN_LEN 24
#define NB (CHAINS * CHAIN_LEN)

typedef struct {
    uint64_t hash[NB];          /* block b = chain b / CHAIN_LEN, position b % CHAIN_LEN */
    unsigned held[MW][NB];      /* tier bits | DY_KV_INDEX_PREDICTED */
} mirror;

static void mirror_init(mirror *m, uint64_t *rng)
{
    memset(m, 0, sizeof *m);
    for (int b = 0; b < NB; b++)
        m->hash[b] = tu_rng_u64(rng);
}

/* The reference: walk every worker over every block of the request. */
static int mirror_overlap(const mirror *m, int w, const int *blocks, int n)
{
    int i = 0;
    while (i < n && m->held[w][blocks[i]])
        i++;
    return i;
}

/* The fastest tier of a mirror holding (a predicted block counts as device), or -1. */
static int mirror_tier(unsigned held)
{
    if (held & (DY_KV_INDEX_PREDICTED | 1u << DY_KV_TIER_DEVICE))
        return DY_KV_TIER_DEVICE;
    return held & 1u << DY_KV_TIER_HOST ? DY_KV_TIER_HOST
         : held & 1u << DY_KV_TIER_DISK ? DY_KV_TIER_DISK : -1;
}

static dy_kv_overlap mirror_overlap_tiers(const mirror *m, int w, const int *blocks, int n)
{
    dy_kv_overlap o = {.blocks = mirror_overlap(m, w, blocks, n)};
    for (int i = 0; i < o.blocks; i++)
        o.tier[mirror_tier(m->held[w][blocks[i]])]++;
    return o;
}

static void assert_overlap_equal(dy_kv_overlap got, dy_kv_overlap want, int worker)
{
    if (got.blocks != want.blocks || memcmp(got.tier, want.tier, sizeof got.tier))
        fail_msg("worker %d: run %d (device %d, host %d, disk %d), reference %d (%d, %d, %d)",
                 worker, got.blocks, got.tier[0], got.tier[1], got.tier[2], want.blocks,
                 want.tier[0], want.tier[1], want.tier[2]);
}

static size_t mirror_size(const mirror *m)
{
    size_t n = 0;
    for (int b = 0; b < NB; b++) {
        int any = 0;
        for (int w = 0; w < MW; w++)
            any |= m->held[w][b] != 0;
        n += any;
    }
    return n;
}

static int64_t mirror_blocks(const mirror *m, int w)
{
    int64_t n = 0;
    for (int b = 0; b < NB; b++)
        n += (m->held[w][b] & 7u) != 0;
    return n;
}

/* A request: the first `len` blocks of a chain, then (maybe) blocks of another chain, so it
 * diverges from every cached prefix part-way. */
static int random_request(uint64_t *rng, int *blocks)
{
    int c = (int)(tu_rng_u64(rng) % CHAINS), len = 1 + (int)(tu_rng_u64(rng) % CHAIN_LEN);
    int n = 0;
    for (int i = 0; i < len; i++)
        blocks[n++] = c * CHAIN_LEN + i;
    if (tu_rng_u64(rng) & 1) {
        int c2 = (int)(tu_rng_u64(rng) % CHAINS), extra = (int)(tu_rng_u64(rng) % 8);
        for (int i = 0; i < extra; i++)
            blocks[n++] = c2 * CHAIN_LEN + (len + i) % CHAIN_LEN;
    }
    return n;
}

static void check_against_mirror(const dy_kv_index *x, const mirror *m, uint64_t *rng)
{
    int overlap[MW], blocks[2 * CHAIN_LEN];
    dy_kv_overlap tiers[MW], one;
    uint64_t hashes[2 * CHAIN_LEN];
    for (int q = 0; q < 20; q++) {
        int n = random_request(rng, blocks);
        for (int i = 0; i < n; i++)
            hashes[i] = m->hash[blocks[i]];
        dy_kv_index_overlap(x, hashes, n, overlap);
        dy_kv_index_overlap_tiers(x, hashes, n, tiers);
        for (int w = 0; w < MW; w++) {
            int want = mirror_overlap(m, w, blocks, n);
            if (overlap[w] != want)
                fail_msg("worker %d: overlap %d, reference %d", w, overlap[w], want);
            assert_int_equal(dy_kv_index_overlap_one(x, w, hashes, n), want);
            dy_kv_overlap want_tiers = mirror_overlap_tiers(m, w, blocks, n);
            assert_overlap_equal(tiers[w], want_tiers, w);
            assert_int_equal(dy_kv_index_overlap_tiers_one(x, w, hashes, n, &one), want);
            assert_overlap_equal(one, want_tiers, w);
        }
    }
    assert_int_equal(dy_kv_index_size(x), mirror_size(m));
    for (int w = 0; w < MW; w++) {
        assert_int_equal(dy_kv_index_worker_blocks(x, w), mirror_blocks(m, w));
        for (int b = 0; b < NB; b += 7)
            assert_int_equal(dy_kv_index_holds(x, w, m->hash[b]), m->held[w][b]);
    }
}

/* One random event for worker w, applied to the mirror too. Stores favour extending a
 * prefix the worker already holds, so long shared runs form; removals punch holes. */
static dy_kv_event random_event(mirror *m, int w, uint64_t *rng)
{
    uint64_t r = tu_rng_u64(rng);
    int b = (int)(r % NB);
    uint8_t tier = (uint8_t)((r >> 20) % DY_KV_N_TIERS);
    if ((r >> 32) % 200 == 0) {
        for (int i = 0; i < NB; i++)
            m->held[w][i] &= DY_KV_INDEX_PREDICTED;
        return (dy_kv_event){DY_KV_EV_CLEARED, 0, 0, 0};
    }
    if ((r >> 40) % 4 == 0) {
        m->held[w][b] &= ~(1u << tier);
        return (dy_kv_event){DY_KV_EV_REMOVED, tier, m->hash[b], 0};
    }
    int c = b / CHAIN_LEN, i = 0;
    while (i < CHAIN_LEN - 1 && m->held[w][c * CHAIN_LEN + i])
        i++;
    b = c * CHAIN_LEN + i;
    m->held[w][b] |= 1u << tier;
    return (dy_kv_event){DY_KV_EV_STORED, tier, m->hash[b], i ? m->hash[b - 1] : 0};
}

static void test_overlap_matches_brute_force(void **st)
{
    (void)st;
    uint64_t rng = 0x1234567;
    mirror *m = malloc(sizeof *m);
    mirror_init(m, &rng);
    dy_kv_index *x = dy_kv_index_new(MW);
    assert_non_null(x);
    uint64_t seq[MW] = {0};
    dy_kv_event ev[32];
    for (int round = 0; round < 300; round++) {
        int w = (int)(tu_rng_u64(&rng) % MW);
        int n = 1 + (int)(tu_rng_u64(&rng) % 32);
        for (int i = 0; i < n; i++)
            ev[i] = random_event(m, w, &rng);
        assert_int_equal(dy_kv_index_apply(x, w, ++seq[w], ev, n), DY_KV_INDEX_OK);
        if (round % 10 == 0) { /* predictions join the picture: they count as held */
            int pw = (int)(tu_rng_u64(&rng) % MW), c = (int)(tu_rng_u64(&rng) % CHAINS);
            int len = 1 + (int)(tu_rng_u64(&rng) % CHAIN_LEN);
            assert_int_equal(dy_kv_index_predict(x, pw, &m->hash[c * CHAIN_LEN], len, 1e9), 0);
            for (int i = 0; i < len; i++)
                m->held[pw][c * CHAIN_LEN + i] |= DY_KV_INDEX_PREDICTED;
        }
        if (round % 15 == 0)
            check_against_mirror(x, m, &rng);
    }
    check_against_mirror(x, m, &rng);
    /* A worker leaves: the mirror forgets it too. */
    for (int w = 0; w < MW; w += 3) {
        assert_int_equal(dy_kv_index_remove_worker(x, w), 0);
        memset(m->held[w], 0, sizeof m->held[w]);
    }
    check_against_mirror(x, m, &rng);
    dy_kv_index_free(x);
    free(m);
}

/* Unknown hashes, empty requests and a request longer than anything cached. */
static void test_overlap_edges(void **st)
{
    (void)st;
    dy_kv_index *x = dy_kv_index_new(3);
    uint64_t h[4] = {11, 22, 33, 44};
    dy_kv_event ev[3] = {{DY_KV_EV_STORED, 0, 11, 0}, {DY_KV_EV_STORED, 0, 22, 11},
                         {DY_KV_EV_STORED, 1, 33, 22}};
    assert_int_equal(dy_kv_index_apply(x, 1, 1, ev, 3), 0);
    assert_int_equal(dy_kv_index_apply(x, 2, 1, ev, 1), 0);
    int o[3] = {-1, -1, -1};
    dy_kv_index_overlap(x, h, 4, o);
    assert_int_equal(o[0], 0);
    assert_int_equal(o[1], 3); /* tier 1 (host) counts as held */
    assert_int_equal(o[2], 1);
    dy_kv_index_overlap(x, h + 1, 3, o); /* not a prefix of anything worker 2 holds */
    assert_int_equal(o[1], 2);
    assert_int_equal(o[2], 0);
    dy_kv_index_overlap(x, h, 0, o);
    assert_int_equal(o[1], 0);
    /* A worker holding every block of the request: overlap = n. */
    dy_kv_index_overlap(x, h, 2, o);
    assert_int_equal(o[1], 2);
    assert_int_equal(o[2], 1);
    dy_kv_index_free(x);
}

/* The run device, device, host, disk, missing, held: counted by tier, ending at the gap; a
 * block in two tiers counts in the faster, a predicted one as device. */
static void test_overlap_by_tier(void **st)
{
    (void)st;
    dy_kv_index *x = dy_kv_index_new(70); /* worker 66 sits in the second word */
    uint64_t h[6] = {1, 2, 3, 4, 5, 6};
    dy_kv_event ev[8] = {
        {DY_KV_EV_STORED, DY_KV_TIER_DEVICE, 1, 0}, {DY_KV_EV_STORED, DY_KV_TIER_DEVICE, 2, 1},
        {DY_KV_EV_STORED, DY_KV_TIER_HOST, 3, 2},   {DY_KV_EV_STORED, DY_KV_TIER_DISK, 4, 3},
        {DY_KV_EV_STORED, DY_KV_TIER_DISK, 6, 5}, /* held, but behind the missing block 5 */
    };
    for (int w = 1; w <= 66; w += 65)
        assert_int_equal(dy_kv_index_apply(x, w, 1, ev, 5), 0);
    dy_kv_overlap o[70];
    dy_kv_index_overlap_tiers(x, h, 6, o);
    for (int w = 1; w <= 66; w += 65) {
        assert_overlap_equal(o[w], (dy_kv_overlap){4, {2, 1, 1}}, w);
        assert_int_equal(dy_kv_index_overlap_tiers_one(x, w, h, 6, &o[w]), 4);
        assert_overlap_equal(o[w], (dy_kv_overlap){4, {2, 1, 1}}, w);
    }
    assert_overlap_equal(o[0], (dy_kv_overlap){0, {0, 0, 0}}, 0);
    /* Worker 1 also keeps block 3 on disk and block 4 on the host: each counts once, in its
     * faster tier (3 stays host, 4 becomes host). */
    ev[0] = (dy_kv_event){DY_KV_EV_STORED, DY_KV_TIER_DISK, 3, 2};
    ev[1] = (dy_kv_event){DY_KV_EV_STORED, DY_KV_TIER_HOST, 4, 3};
    assert_int_equal(dy_kv_index_apply(x, 1, 2, ev, 2), 0);
    dy_kv_index_overlap_tiers(x, h, 6, o);
    assert_overlap_equal(o[1], (dy_kv_overlap){4, {2, 2, 0}}, 1);
    /* A prediction of block 4 makes it device; one of block 5 bridges the gap to the disk
     * block 6. */
    assert_int_equal(dy_kv_index_predict(x, 1, &h[3], 2, 10.0), 0);
    dy_kv_index_overlap_tiers(x, h, 6, o);
    assert_overlap_equal(o[1], (dy_kv_overlap){6, {4, 1, 1}}, 1);
    assert_overlap_equal(o[66], (dy_kv_overlap){4, {2, 1, 1}}, 66);
    int plain[70];
    dy_kv_index_overlap(x, h, 6, plain); /* the untiered query says the same runs */
    assert_int_equal(plain[1], 6);
    assert_int_equal(plain[66], 4);
    /* Nothing asked: every worker all zero. */
    dy_kv_index_overlap_tiers(x, h, 0, o);
    assert_overlap_equal(o[1], (dy_kv_overlap){0, {0, 0, 0}}, 1);
    dy_kv_index_free(x);
}

/* Long lower-tier runs make the bit-sliced counts carry through many bits, for workers in
 * different words and with different counts. */
static void test_overlap_by_tier_long_runs(void **st)
{
    (void)st;
    enum { N = 1000, MWK = 130 };
    dy_kv_index *x = dy_kv_index_new(MWK);
    static uint64_t h[N];
    static dy_kv_event ev[N];
    for (int i = 0; i < N; i++)
        h[i] = 0x9000 + (uint64_t)i;
    /* Worker w holds the first 100 + 7w blocks; block i in tier (i + w) % 3 when i % 5,
     * else in the device tier. */
    dy_kv_overlap want[MWK] = {{0}};
    for (int w = 0; w < MWK; w += 3) {
        int len = 100 + 7 * w < N ? 100 + 7 * w : N;
        for (int i = 0; i < len; i++) {
            uint8_t tier = (uint8_t)(i % 5 ? (i + w) % 3 : DY_KV_TIER_DEVICE);
            ev[i] = (dy_kv_event){DY_KV_EV_STORED, tier, h[i], i ? h[i - 1] : 0};
            want[w].tier[tier]++;
        }
        want[w].blocks = len;
        assert_int_equal(dy_kv_index_apply(x, w, 1, ev, len), 0);
    }
    static dy_kv_overlap o[MWK];
    dy_kv_index_overlap_tiers(x, h, N, o);
    for (int w = 0; w < MWK; w++)
        assert_overlap_equal(o[w], want[w], w);
    dy_kv_index_free(x);
}

/* A snapshot carries each block's tier: the index holds them there, a block listed in two
 * tiers counts once, and a bad tier changes nothing. */
static void test_resync_with_tiers(void **st)
{
    (void)st;
    dy_kv_index *x = dy_kv_index_new(4);
    dy_kv_event old = {DY_KV_EV_STORED, DY_KV_TIER_DEVICE, 77, 0};
    assert_int_equal(dy_kv_index_apply(x, 2, 1, &old, 1), 0);
    uint64_t snap[4] = {10, 20, 20, 30};
    uint8_t tiers[4] = {DY_KV_TIER_DEVICE, DY_KV_TIER_HOST, DY_KV_TIER_DISK, DY_KV_TIER_DISK};
    uint8_t bad[4] = {0, 1, DY_KV_N_TIERS, 2};
    assert_int_equal(dy_kv_index_resync(x, 2, 5, snap, NULL, bad, 4), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_holds(x, 2, 77), 1u << DY_KV_TIER_DEVICE); /* untouched */
    assert_int_equal(dy_kv_index_worker_seq(x, 2), 1);
    assert_int_equal(dy_kv_index_worker_state(x, 2), DY_KV_WORKER_LIVE);
    assert_int_equal(dy_kv_index_resync(x, 2, 5, snap, NULL, tiers, 4), 0);
    assert_int_equal(dy_kv_index_holds(x, 2, 77), 0);
    assert_int_equal(dy_kv_index_holds(x, 2, 10), 1u << DY_KV_TIER_DEVICE);
    assert_int_equal(dy_kv_index_holds(x, 2, 20), 1u << DY_KV_TIER_HOST | 1u << DY_KV_TIER_DISK);
    assert_int_equal(dy_kv_index_holds(x, 2, 30), 1u << DY_KV_TIER_DISK);
    assert_int_equal(dy_kv_index_worker_blocks(x, 2), 3);
    dy_kv_overlap o;
    assert_int_equal(dy_kv_index_overlap_tiers_one(x, 2, (uint64_t[]){10, 20, 30}, 3, &o), 3);
    assert_overlap_equal(o, (dy_kv_overlap){3, {1, 1, 1}}, 2);
    /* Events go on from there: the host copy of 20 leaves, the disk one stays. */
    dy_kv_event rm = {DY_KV_EV_REMOVED, DY_KV_TIER_HOST, 20, 10};
    assert_int_equal(dy_kv_index_apply(x, 2, 6, &rm, 1), 0);
    assert_int_equal(dy_kv_index_overlap_tiers_one(x, 2, (uint64_t[]){10, 20, 30}, 3, &o), 3);
    assert_overlap_equal(o, (dy_kv_overlap){3, {1, 0, 2}}, 2);
    /* Without tiers, a snapshot is all device, as before. */
    assert_int_equal(dy_kv_index_resync(x, 2, 9, snap, NULL, NULL, 4), 0);
    assert_int_equal(dy_kv_index_holds(x, 2, 20), 1u << DY_KV_TIER_DEVICE);
    assert_int_equal(dy_kv_index_worker_blocks(x, 2), 3);
    dy_kv_index_free(x);
}

/* ---------------------------------------------------------------- sequence numbers */

static int sorted_equal(uint64_t *a, int64_t na, uint64_t *b, int64_t nb)
{
    if (na != nb)
        return 0;
    for (int64_t i = 0; i < na; i++)
        for (int64_t j = i + 1; j < na; j++) {
            if (a[j] < a[i]) { uint64_t t = a[i]; a[i] = a[j]; a[j] = t; }
            if (b[j] < b[i]) { uint64_t t = b[i]; b[i] = b[j]; b[j] = t; }
        }
    return !memcmp(a, b, (size_t)na * sizeof *a);
}

static void test_gap_triggers_resync(void **st)
{
    (void)st;
    dy_kv_index *x = dy_kv_index_new(8);
    dy_kv_event a = {DY_KV_EV_STORED, 0, 100, 0}, b = {DY_KV_EV_STORED, 0, 200, 100};
    dy_kv_event c = {DY_KV_EV_STORED, 0, 300, 200};
    assert_int_equal(dy_kv_index_worker_state(x, 3), DY_KV_WORKER_UNKNOWN);
    assert_int_equal(dy_kv_index_apply(x, 3, 1, &a, 1), DY_KV_INDEX_OK); /* joins */
    assert_int_equal(dy_kv_index_worker_state(x, 3), DY_KV_WORKER_LIVE);
    assert_int_equal(dy_kv_index_apply(x, 3, 2, &b, 1), DY_KV_INDEX_OK);
    assert_int_equal(dy_kv_index_worker_seq(x, 3), 2);
    /* Batch 3 is lost: 4 is a gap, and nothing of it is applied. */
    assert_int_equal(dy_kv_index_apply(x, 3, 4, &c, 1), DY_KV_INDEX_RESYNC);
    assert_int_equal(dy_kv_index_worker_state(x, 3), DY_KV_WORKER_RESYNC);
    assert_int_equal(dy_kv_index_holds(x, 3, 300), 0);
    /* Until the snapshot arrives, every batch is ignored — even the late batch 3. */
    assert_int_equal(dy_kv_index_apply(x, 3, 3, &c, 1), DY_KV_INDEX_RESYNC);
    assert_int_equal(dy_kv_index_apply(x, 3, 5, &c, 1), DY_KV_INDEX_RESYNC);
    assert_int_equal(dy_kv_index_holds(x, 3, 300), 0);
    assert_int_equal(dy_kv_index_worker_blocks(x, 3), 2);
    /* The snapshot at seq 9 replaces everything: 100 is gone, 300 and 400 are in. */
    uint64_t snap[3] = {200, 300, 400}, par[3] = {100, 200, 300};
    assert_int_equal(dy_kv_index_resync(x, 3, 9, snap, par, NULL, 3), 0);
    assert_int_equal(dy_kv_index_worker_state(x, 3), DY_KV_WORKER_LIVE);
    uint64_t got[8], want[3] = {200, 300, 400};
    int64_t n = dy_kv_index_worker_hashes(x, 3, got, 8);
    assert_true(sorted_equal(got, n, want, 3));
    assert_int_equal(dy_kv_index_worker_blocks(x, 3), 3);
    assert_int_equal(dy_kv_index_size(x), 3);
    assert_int_equal(dy_kv_index_holds(x, 3, 200), 1u << DY_KV_TIER_DEVICE);
    /* The stream resumes at snapshot + 1; a duplicate (or a restart from 1) is a gap. */
    dy_kv_event d = {DY_KV_EV_REMOVED, 0, 400, 300};
    assert_int_equal(dy_kv_index_apply(x, 3, 10, &d, 1), DY_KV_INDEX_OK);
    assert_int_equal(dy_kv_index_holds(x, 3, 400), 0);
    assert_int_equal(dy_kv_index_apply(x, 3, 10, &d, 1), DY_KV_INDEX_RESYNC);
    assert_int_equal(dy_kv_index_resync(x, 3, 20, NULL, NULL, NULL, 0), 0); /* empty snapshot */
    assert_int_equal(dy_kv_index_size(x), 0);
    assert_int_equal(dy_kv_index_apply(x, 3, 1, &a, 1), DY_KV_INDEX_RESYNC); /* restarted */
    /* An unknown worker first heard of mid-stream needs a snapshot before anything counts. */
    assert_int_equal(dy_kv_index_apply(x, 5, 7, &a, 1), DY_KV_INDEX_RESYNC);
    assert_int_equal(dy_kv_index_worker_state(x, 5), DY_KV_WORKER_RESYNC);
    assert_int_equal(dy_kv_index_holds(x, 5, 100), 0);
    /* An empty batch still moves the sequence on. */
    assert_int_equal(dy_kv_index_resync(x, 5, 7, NULL, NULL, NULL, 0), 0);
    assert_int_equal(dy_kv_index_apply(x, 5, 8, NULL, 0), DY_KV_INDEX_OK);
    assert_int_equal(dy_kv_index_worker_seq(x, 5), 8);
    dy_kv_index_free(x);
}

/* A batch with an event the index cannot understand applies nothing and, since the picture
 * of that worker is now incomplete, asks for a snapshot. */
static void test_bad_event_needs_resync(void **st)
{
    (void)st;
    dy_kv_index *x = dy_kv_index_new(2);
    dy_kv_event ev[2] = {{DY_KV_EV_STORED, 0, 5, 0}, {DY_KV_EV_STORED, 3 /* no such tier */, 6, 5}};
    assert_int_equal(dy_kv_index_apply(x, 0, 1, ev, 2), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_holds(x, 0, 5), 0);
    assert_int_equal(dy_kv_index_worker_state(x, 0), DY_KV_WORKER_RESYNC);
    ev[1] = (dy_kv_event){9 /* no such kind */, 0, 6, 5};
    assert_int_equal(dy_kv_index_resync(x, 0, 1, NULL, NULL, NULL, 0), 0);
    assert_int_equal(dy_kv_index_apply(x, 0, 2, ev, 2), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_apply(x, 0, 3, ev, 1), DY_KV_INDEX_RESYNC);
    dy_kv_index_free(x);
}

/* ---------------------------------------------------------------- removal, clear, leave */

static void test_removed_and_cleared(void **st)
{
    (void)st;
    dy_kv_index *x = dy_kv_index_new(4);
    uint64_t h[3] = {1, 2, 3};
    dy_kv_event ev[4] = {{DY_KV_EV_STORED, 0, 1, 0}, {DY_KV_EV_STORED, 0, 2, 1},
                         {DY_KV_EV_STORED, 0, 3, 2}, {DY_KV_EV_STORED, 1, 2, 1}};
    assert_int_equal(dy_kv_index_apply(x, 0, 1, ev, 4), 0);
    assert_int_equal(dy_kv_index_apply(x, 1, 1, ev, 3), 0);
    assert_int_equal(dy_kv_index_worker_blocks(x, 0), 3); /* block 2 in two tiers counts once */
    int o[4];
    /* Worker 0 offloads block 2 to host and drops the device copy: still held. */
    dy_kv_event rm = {DY_KV_EV_REMOVED, 0, 2, 1};
    assert_int_equal(dy_kv_index_apply(x, 0, 2, &rm, 1), 0);
    assert_int_equal(dy_kv_index_holds(x, 0, 2), 1u << DY_KV_TIER_HOST);
    dy_kv_index_overlap(x, h, 3, o);
    assert_int_equal(o[0], 3);
    /* ... then drops the host copy too: its run now ends at block 1. */
    rm.tier = DY_KV_TIER_HOST;
    assert_int_equal(dy_kv_index_apply(x, 0, 3, &rm, 1), 0);
    dy_kv_index_overlap(x, h, 3, o);
    assert_int_equal(o[0], 1);
    assert_int_equal(o[1], 3);
    assert_int_equal(dy_kv_index_worker_blocks(x, 0), 2);
    /* Removing what was never stored is harmless. */
    dy_kv_event ghost = {DY_KV_EV_REMOVED, 0, 999, 0};
    assert_int_equal(dy_kv_index_apply(x, 0, 4, &ghost, 1), 0);
    /* Cleared-all: worker 1 keeps nothing; worker 0 is untouched. */
    dy_kv_event clr = {DY_KV_EV_CLEARED, 0, 0, 0};
    assert_int_equal(dy_kv_index_apply(x, 1, 2, &clr, 1), 0);
    dy_kv_index_overlap(x, h, 3, o);
    assert_int_equal(o[1], 0);
    assert_int_equal(o[0], 1);
    assert_int_equal(dy_kv_index_worker_blocks(x, 1), 0);
    assert_int_equal(dy_kv_index_size(x), 2); /* hashes 1 and 3, worker 0's */
    /* Events after a clear in the same batch apply in order. */
    dy_kv_event mix[2] = {{DY_KV_EV_CLEARED, 0, 0, 0}, {DY_KV_EV_STORED, 0, 1, 0}};
    assert_int_equal(dy_kv_index_apply(x, 0, 5, mix, 2), 0);
    assert_int_equal(dy_kv_index_worker_blocks(x, 0), 1);
    assert_int_equal(dy_kv_index_size(x), 1);
    dy_kv_index_free(x);
}

static void test_dead_worker_vanishes(void **st)
{
    (void)st;
    dy_kv_index *x = dy_kv_index_new(4);
    uint64_t h[2] = {7, 8};
    dy_kv_event ev[2] = {{DY_KV_EV_STORED, 0, 7, 0}, {DY_KV_EV_STORED, 2, 8, 7}};
    assert_int_equal(dy_kv_index_apply(x, 2, 1, ev, 2), 0);
    assert_int_equal(dy_kv_index_apply(x, 3, 1, ev, 1), 0);
    assert_int_equal(dy_kv_index_predict(x, 2, (uint64_t[]){9}, 1, 50.0), 0);
    assert_int_equal(dy_kv_index_size(x), 3);
    assert_int_equal(dy_kv_index_remove_worker(x, 2), 0);
    assert_int_equal(dy_kv_index_worker_state(x, 2), DY_KV_WORKER_UNKNOWN);
    assert_int_equal(dy_kv_index_worker_blocks(x, 2), 0);
    assert_int_equal(dy_kv_index_worker_predicted(x, 2), 0);
    assert_int_equal(dy_kv_index_size(x), 1); /* only worker 3's block 7 */
    int o[4];
    dy_kv_index_overlap(x, h, 2, o);
    assert_int_equal(o[2], 0);
    assert_int_equal(o[3], 1);
    /* Its stale prediction timer pops harmlessly; it can join again from seq 1. */
    dy_kv_index_expire(x, 100.0);
    assert_int_equal(dy_kv_index_apply(x, 2, 1, ev, 1), 0);
    assert_int_equal(dy_kv_index_worker_blocks(x, 2), 1);
    dy_kv_index_free(x);
}

/* ---------------------------------------------------------------- predictions */

static void test_prediction_ttl(void **st)
{
    (void)st;
    dy_kv_index *x = dy_kv_index_new(2);
    uint64_t h[3] = {10, 20, 30};
    int o[2];
    assert_int_equal(dy_kv_index_predict(x, 1, h, 3, 10.0), 0);
    assert_int_equal(dy_kv_index_worker_predicted(x, 1), 3);
    dy_kv_index_expire(x, 9.999);
    dy_kv_index_overlap(x, h, 3, o);
    assert_int_equal(o[1], 3);
    /* The first two are predicted again before they expire: they live to 20. */
    assert_int_equal(dy_kv_index_predict(x, 1, h, 2, 20.0), 0);
    assert_int_equal(dy_kv_index_predict(x, 1, h, 1, 15.0), 0); /* never shortens */
    dy_kv_index_expire(x, 10.0);
    assert_int_equal(dy_kv_index_holds(x, 1, 30), 0);
    assert_int_equal(dy_kv_index_worker_predicted(x, 1), 2);
    dy_kv_index_overlap(x, h, 3, o);
    assert_int_equal(o[1], 2);
    dy_kv_index_expire(x, 19.0);
    assert_int_equal(dy_kv_index_holds(x, 1, 10), DY_KV_INDEX_PREDICTED);
    dy_kv_index_expire(x, 20.0);
    assert_int_equal(dy_kv_index_worker_predicted(x, 1), 0);
    assert_int_equal(dy_kv_index_size(x), 0);
    dy_kv_index_free(x);
}

/* Predictions and events live side by side: neither clears the other. */
static void test_prediction_keeps_events_apart(void **st)
{
    (void)st;
    dy_kv_index *x = dy_kv_index_new(2);
    dy_kv_event s = {DY_KV_EV_STORED, 0, 10, 0};
    assert_int_equal(dy_kv_index_apply(x, 0, 1, &s, 1), 0);
    assert_int_equal(dy_kv_index_predict(x, 0, (uint64_t[]){10, 20}, 2, 5.0), 0);
    assert_int_equal(dy_kv_index_holds(x, 0, 10), 1u | DY_KV_INDEX_PREDICTED);
    assert_int_equal(dy_kv_index_worker_blocks(x, 0), 1); /* predictions are not reported */
    dy_kv_index_expire(x, 6.0);
    assert_int_equal(dy_kv_index_holds(x, 0, 10), 1u); /* the reported block stays */
    assert_int_equal(dy_kv_index_holds(x, 0, 20), 0);
    assert_int_equal(dy_kv_index_predict(x, 0, (uint64_t[]){10}, 1, 50.0), 0);
    dy_kv_event clr = {DY_KV_EV_CLEARED, 0, 0, 0};
    assert_int_equal(dy_kv_index_apply(x, 0, 2, &clr, 1), 0);
    assert_int_equal(dy_kv_index_holds(x, 0, 10), DY_KV_INDEX_PREDICTED);
    assert_int_equal(dy_kv_index_resync(x, 0, 7, NULL, NULL, NULL, 0), 0);
    assert_int_equal(dy_kv_index_holds(x, 0, 10), DY_KV_INDEX_PREDICTED);
    dy_kv_index_free(x);
}

/* Many predictions with many deadlines, some extended: each expires exactly at its own. */
static void test_prediction_many_deadlines(void **st)
{
    (void)st;
    enum { N = 3000 };
    dy_kv_index *x = dy_kv_index_new(4);
    static double deadline[N];
    uint64_t rng = 99;
    for (int i = 0; i < N; i++) {
        uint64_t h = (uint64_t)i + 1;
        deadline[i] = (double)(tu_rng_u64(&rng) % 1000);
        assert_int_equal(dy_kv_index_predict(x, i % 4, &h, 1, deadline[i]), 0);
        if (i % 3 == 0) {
            deadline[i] += 500;
            assert_int_equal(dy_kv_index_predict(x, i % 4, &h, 1, deadline[i]), 0);
        }
    }
    for (double now = 0; now < 1600; now += 37) {
        dy_kv_index_expire(x, now);
        for (int i = 0; i < N; i += 11) {
            unsigned want = deadline[i] > now ? DY_KV_INDEX_PREDICTED : 0;
            assert_int_equal(dy_kv_index_holds(x, i % 4, (uint64_t)i + 1), want);
        }
    }
    assert_int_equal(dy_kv_index_size(x), 0);
    dy_kv_index_free(x);
}

/* ---------------------------------------------------------------- growth and arguments */

static void test_growth_and_reuse(void **st)
{
    (void)st;
    enum { N = 50000, B = 500 };
    dy_kv_index *x = dy_kv_index_new(256);
    static dy_kv_event ev[B];
    uint64_t seq = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i += B) {
            for (int j = 0; j < B; j++)
                ev[j] = (dy_kv_event){DY_KV_EV_STORED, 0, (uint64_t)(i + j) * 0x10001, 0};
            assert_int_equal(dy_kv_index_apply(x, 255, ++seq, ev, B), 0);
        }
        assert_int_equal(dy_kv_index_size(x), N);
        assert_int_equal(dy_kv_index_worker_blocks(x, 255), N);
        uint64_t h[2] = {0, 0x10001};
        int o[256];
        dy_kv_index_overlap(x, h, 2, o);
        assert_int_equal(o[255], 2);
        for (int i = 0; i < N; i += B) {
            for (int j = 0; j < B; j++)
                ev[j] = (dy_kv_event){DY_KV_EV_REMOVED, 0, (uint64_t)(i + j) * 0x10001, 0};
            assert_int_equal(dy_kv_index_apply(x, 255, ++seq, ev, B), 0);
        }
        assert_int_equal(dy_kv_index_size(x), 0);
    }
    dy_kv_index_free(x);
}

/* Random stores and removals around a steady size: every live hash stays findable and every
 * removed one is gone (deletion must close probe chains, across the table's wrap too). */
static void test_churn(void **st)
{
    (void)st;
    enum { LIVE = 450, STEPS = 20000 };
    dy_kv_index *x = dy_kv_index_new(1);
    uint64_t live[LIVE], rng = 4242, seq = 0;
    int n = 0;
    for (int step = 0; step < STEPS; step++) {
        dy_kv_event e;
        if (n == LIVE || (n > 0 && tu_rng_u64(&rng) % 2)) {
            int k = (int)(tu_rng_u64(&rng) % (uint64_t)n);
            e = (dy_kv_event){DY_KV_EV_REMOVED, 0, live[k], 0};
            assert_int_equal(dy_kv_index_holds(x, 0, live[k]), 1);
            live[k] = live[--n];
        } else {
            e = (dy_kv_event){DY_KV_EV_STORED, 0, tu_rng_u64(&rng), 0};
            live[n++] = e.hash;
        }
        assert_int_equal(dy_kv_index_apply(x, 0, ++seq, &e, 1), 0);
        if (e.kind == DY_KV_EV_REMOVED)
            assert_int_equal(dy_kv_index_holds(x, 0, e.hash), 0);
        if (step % 97 == 0) {
            for (int k = 0; k < n; k++)
                assert_int_equal(dy_kv_index_holds(x, 0, live[k]), 1);
            assert_int_equal(dy_kv_index_size(x), n);
        }
    }
    dy_kv_index_free(x);
}

/* Clearing or removing one worker walks the whole table and deletes as it goes: nothing of
 * another worker's may be lost on the way, reported or predicted. */
static void test_clear_keeps_others(void **st)
{
    (void)st;
    enum { N = 420 };
    dy_kv_index *x = dy_kv_index_new(2);
    uint64_t mine[N], theirs[N], guessed[N], rng = 777, seq0 = 0, seq1 = 0;
    for (int round = 0; round < 30; round++) {
        dy_kv_event ev[N];
        for (int i = 0; i < N; i++) {
            mine[i] = tu_rng_u64(&rng);
            ev[i] = (dy_kv_event){DY_KV_EV_STORED, (uint8_t)(i % 3), mine[i], 0};
        }
        assert_int_equal(dy_kv_index_apply(x, 0, ++seq0, ev, N), 0);
        if (round == 0) {
            for (int i = 0; i < N; i++) {
                theirs[i] = i % 4 ? tu_rng_u64(&rng) : mine[i]; /* some shared */
                ev[i] = (dy_kv_event){DY_KV_EV_STORED, 0, theirs[i], 0};
            }
            assert_int_equal(dy_kv_index_apply(x, 1, ++seq1, ev, N), 0);
            memcpy(guessed, mine, sizeof mine);
            assert_int_equal(dy_kv_index_predict(x, 1, guessed, N, 1e9), 0);
        }
        assert_int_equal(dy_kv_index_predict(x, 0, theirs, N / 2, 1e9), 0);
        if (round % 2) {
            ev[0] = (dy_kv_event){DY_KV_EV_CLEARED, 0, 0, 0};
            assert_int_equal(dy_kv_index_apply(x, 0, ++seq0, ev, 1), 0);
            assert_int_equal(dy_kv_index_worker_blocks(x, 0), 0);
        } else {
            assert_int_equal(dy_kv_index_remove_worker(x, 0), 0);
            seq0 = 0;
            /* worker 1's blocks and its predictions (a quarter of them are the same) */
            assert_int_equal(dy_kv_index_size(x), 2 * N - N / 4);
        }
        for (int i = 0; i < N; i++) {
            assert_int_equal(dy_kv_index_holds(x, 1, theirs[i]) & 7u, 1u);
            assert_true(dy_kv_index_holds(x, 1, guessed[i]) & DY_KV_INDEX_PREDICTED);
        }
    }
    dy_kv_index_expire(x, 2e9);
    assert_int_equal(dy_kv_index_size(x), N);
    assert_int_equal(dy_kv_index_worker_predicted(x, 0), 0);
    assert_int_equal(dy_kv_index_worker_predicted(x, 1), 0);
    dy_kv_index_free(x);
}

static void test_bad_arguments(void **st)
{
    (void)st;
    assert_null(dy_kv_index_new(0));
    assert_null(dy_kv_index_new(DY_KV_INDEX_MAX_WORKERS + 1));
    dy_kv_index *x = dy_kv_index_new(4);
    dy_kv_event e = {DY_KV_EV_STORED, 0, 1, 0};
    uint64_t h = 1;
    int o[4];
    assert_int_equal(dy_kv_index_apply(NULL, 0, 1, &e, 1), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_apply(x, -1, 1, &e, 1), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_apply(x, 4, 1, &e, 1), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_apply(x, 0, 1, NULL, 1), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_apply(x, 0, 1, &e, -1), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_resync(x, 4, 1, &h, NULL, NULL, 1), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_resync(x, 0, 1, NULL, NULL, NULL, 1), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_remove_worker(x, 9), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_predict(x, 9, &h, 1, 1.0), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_predict(x, 0, &h, 1, NAN), DY_KV_INDEX_EINVAL);
    assert_int_equal(dy_kv_index_overlap_one(x, -1, &h, 1), -1);
    dy_kv_overlap t = {.blocks = 42};
    assert_int_equal(dy_kv_index_overlap_tiers_one(x, 4, &h, 1, &t), -1);
    assert_int_equal(dy_kv_index_overlap_tiers_one(x, 0, NULL, 1, &t), -1);
    assert_int_equal(t.blocks, 42); /* untouched */
    assert_int_equal(dy_kv_index_overlap_tiers_one(x, 0, &h, 1, NULL), 0);
    dy_kv_index_overlap_tiers(x, &h, 1, NULL);
    dy_kv_index_overlap_tiers(NULL, &h, 1, &t);
    assert_string_equal(dy_kv_index_tier_name(DY_KV_TIER_HOST), "host");
    assert_string_equal(dy_kv_index_tier_name(DY_KV_N_TIERS), "?");
    assert_int_equal(dy_kv_index_worker_hashes(x, 0, NULL, 3), -1);
    assert_int_equal(dy_kv_index_worker_hashes(x, 0, NULL, 0), 0);
    dy_kv_index_overlap(x, NULL, 3, o); /* all zero, no crash */
    assert_int_equal(o[3], 0);
    dy_kv_index_overlap(NULL, &h, 1, o);
    dy_kv_index_expire(NULL, 1.0);
    assert_int_equal(dy_kv_index_size(NULL), 0);
    assert_int_equal(dy_kv_index_holds(x, 77, 1), 0);
    assert_int_equal(dy_kv_index_worker_state(x, -5), DY_KV_WORKER_UNKNOWN);
    dy_kv_index_free(x);
    dy_kv_index_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overlap_matches_brute_force),
        cmocka_unit_test(test_overlap_edges),
        cmocka_unit_test(test_overlap_by_tier),
        cmocka_unit_test(test_overlap_by_tier_long_runs),
        cmocka_unit_test(test_resync_with_tiers),
        cmocka_unit_test(test_gap_triggers_resync),
        cmocka_unit_test(test_bad_event_needs_resync),
        cmocka_unit_test(test_removed_and_cleared),
        cmocka_unit_test(test_dead_worker_vanishes),
        cmocka_unit_test(test_prediction_ttl),
        cmocka_unit_test(test_prediction_keeps_events_apart),
        cmocka_unit_test(test_prediction_many_deadlines),
        cmocka_unit_test(test_growth_and_reuse),
        cmocka_unit_test(test_churn),
        cmocka_unit_test(test_clear_keeps_others),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
