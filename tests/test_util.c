/* test_util.c — the small utilities of src/util/: the growable buffer (appends, printf, the C
 * string, the sticky out-of-memory flag, clear and free), the clock (monotonic, condition
 * waits that time out at their deadline or are woken before it), and the hash map (insert,
 * find, replace, delete, growth, many keys against a reference, deletion inside clusters,
 * iteration and filtering). */
#include "testutil.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/hashmap.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- buf */

static void test_buf_append_and_cstr(void **state)
{
    (void)state;
    dy_buf b = {0};
    assert_string_equal(dy_buf_cstr(&b), ""); /* an empty buffer is an empty string */
    assert_int_equal(b.len, 0);
    dy_buf_append(&b, "ab", 2);
    dy_buf_append(&b, NULL, 0); /* nothing to append: no effect */
    dy_buf_append_str(&b, "cd");
    assert_int_equal(b.len, 4);
    assert_memory_equal(b.data, "abcd", 4);
    assert_string_equal(dy_buf_cstr(&b), "abcd");
    assert_int_equal(b.len, 4); /* the NUL is not counted */
    /* Growth across many doublings keeps every byte. */
    for (int i = 0; i < 10000; i++) {
        char c = (char)('a' + i % 26);
        dy_buf_append(&b, &c, 1);
    }
    assert_int_equal(b.len, 10004);
    assert_true(b.cap >= b.len);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(b.data[4 + i], 'a' + i % 26);
    assert_false(b.oom);
    dy_buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

static void test_buf_printf(void **state)
{
    (void)state;
    dy_buf b = {0};
    dy_buf_printf(&b, "%d-%s", 42, "x");
    assert_string_equal(dy_buf_cstr(&b), "42-x");
    /* Text longer than the free space: formatted again after the buffer grows. */
    char big[3000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    dy_buf_printf(&b, "[%s]", big);
    assert_int_equal(b.len, 4 + 2 + sizeof big - 1);
    const char *s = dy_buf_cstr(&b);
    assert_int_equal(strncmp(s, "42-x[zz", 7), 0);
    assert_int_equal(s[b.len - 1], ']');
    /* Text that exactly fills the free space, and empty text. */
    dy_buf_clear(&b);
    size_t room = b.cap - b.len;
    char *fill = malloc(room);
    assert_non_null(fill);
    memset(fill, 'y', room - 1);
    fill[room - 1] = 0;
    dy_buf_printf(&b, "%s", fill);
    free(fill);
    assert_int_equal(b.len, room - 1);
    dy_buf_printf(&b, "%s", "");
    dy_buf_printf(&b, "!");
    assert_int_equal(b.len, room);
    assert_int_equal(strlen(dy_buf_cstr(&b)), room);
    dy_buf_free(&b);
}

static void test_buf_oom_is_sticky(void **state)
{
    (void)state;
    dy_buf b = {0};
    dy_buf_append_str(&b, "kept");
    assert_false(dy_buf_reserve(&b, SIZE_MAX)); /* cannot be had: fails like a short malloc */
    assert_true(b.oom);
    dy_buf_append_str(&b, "lost");
    dy_buf_printf(&b, "%s", "lost too");
    assert_false(dy_buf_reserve(&b, 1));
    assert_int_equal(b.len, 4); /* nothing was appended after the failure */
    assert_null(dy_buf_cstr(&b));
    /* clear empties it and forgets the failure, keeping the memory */
    size_t cap = b.cap;
    dy_buf_clear(&b);
    assert_false(b.oom);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, cap);
    dy_buf_append_str(&b, "again");
    assert_string_equal(dy_buf_cstr(&b), "again");
    dy_buf_free(&b);
    assert_false(b.oom);
}

static void test_array_reserve(void **state)
{
    (void)state;
    int *a = NULL;
    size_t cap = 0;
    assert_true(dy_array_reserve((void **)&a, &cap, 0, sizeof *a));
    assert_null(a); /* nothing needed: nothing allocated */
    assert_true(dy_array_reserve((void **)&a, &cap, 3, sizeof *a));
    assert_true(cap >= 3);
    for (int i = 0; i < 3; i++)
        a[i] = i;
    assert_true(dy_array_reserve((void **)&a, &cap, 5000, sizeof *a));
    assert_true(cap >= 5000);
    for (int i = 0; i < 3; i++)
        assert_int_equal(a[i], i); /* kept across the move */
    int *before = a;
    size_t cap_before = cap;
    assert_false(dy_array_reserve((void **)&a, &cap, SIZE_MAX / 2, sizeof *a));
    assert_ptr_equal(a, before); /* a failure leaves the array as it was */
    assert_int_equal(cap, cap_before);
    free(a);
}

/* ---------------------------------------------------------------- clock */

static void test_clock_monotonic(void **state)
{
    (void)state;
    double t0 = dy_now();
    uint64_t n0 = dy_now_ns();
    double prev = t0;
    for (int i = 0; i < 1000; i++) {
        double t = dy_now();
        assert_true(t >= prev);
        prev = t;
    }
    uint64_t n1 = dy_now_ns();
    assert_true(n1 >= n0);
    /* both read the same clock */
    assert_true(fabs((double)n1 / 1e9 - dy_now()) < 0.5);
    /* the wall clock is the Unix epoch's: after 2020 */
    assert_true(dy_wall_now() > 1.5e9);
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool flag;
} waiter;

static void *wake_soon(void *arg)
{
    waiter *w = arg;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&w->mu);
    w->flag = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void test_cond_times_out_at_deadline(void **state)
{
    (void)state;
    waiter w = {.flag = false};
    pthread_mutex_init(&w.mu, NULL);
    assert_int_equal(dy_cond_init(&w.cv), 0);
    pthread_mutex_lock(&w.mu);
    double t0 = dy_now(), deadline = t0 + 0.05;
    int rc = 0;
    while (!w.flag && rc != ETIMEDOUT)
        rc = dy_cond_wait_until(&w.cv, &w.mu, deadline);
    double t1 = dy_now();
    assert_int_equal(rc, ETIMEDOUT);
    assert_true(t1 >= deadline); /* not before the deadline, on the same clock */
    assert_true(t1 - t0 < 2.0);
    /* a deadline already past, zero, negative or NaN returns at once */
    assert_int_equal(dy_cond_wait_until(&w.cv, &w.mu, t0 - 1), ETIMEDOUT);
    assert_int_equal(dy_cond_wait_until(&w.cv, &w.mu, 0), ETIMEDOUT);
    assert_int_equal(dy_cond_wait_until(&w.cv, &w.mu, -5), ETIMEDOUT);
    assert_int_equal(dy_cond_wait_until(&w.cv, &w.mu, NAN), ETIMEDOUT);
    assert_int_equal(dy_cond_wait_for(&w.cv, &w.mu, -1), ETIMEDOUT);
    /* the relative form waits at least as long as asked */
    t0 = dy_now();
    rc = 0;
    while (rc != ETIMEDOUT)
        rc = dy_cond_wait_for(&w.cv, &w.mu, 0.03 - (dy_now() - t0));
    assert_true(dy_now() - t0 >= 0.03);
    pthread_mutex_unlock(&w.mu);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
}

static void test_cond_woken_before_deadline(void **state)
{
    (void)state;
    waiter w = {.flag = false};
    pthread_mutex_init(&w.mu, NULL);
    assert_int_equal(dy_cond_init(&w.cv), 0);
    pthread_mutex_lock(&w.mu);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wake_soon, &w), 0);
    double t0 = dy_now();
    int rc = 0;
    while (!w.flag && rc == 0)
        rc = dy_cond_wait_for(&w.cv, &w.mu, 30.0); /* a far deadline */
    double waited = dy_now() - t0;
    assert_true(w.flag);
    assert_int_equal(rc, 0);
    assert_true(waited < 10.0); /* woken, not timed out */
    pthread_mutex_unlock(&w.mu);
    pthread_join(th, NULL);
    pthread_mutex_lock(&w.mu);
    /* A deadline far beyond what time_t holds is a long wait, not an error: it is woken too. */
    w.flag = false;
    assert_int_equal(pthread_create(&th, NULL, wake_soon, &w), 0);
    while (!w.flag && rc == 0)
        rc = dy_cond_wait_until(&w.cv, &w.mu, 1e300);
    assert_int_equal(rc, 0);
    assert_true(w.flag);
    pthread_mutex_unlock(&w.mu);
    pthread_join(th, NULL);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
}

/* ---------------------------------------------------------------- hashmap */

static void test_hashmap_basics(void **state)
{
    (void)state;
    dy_hashmap m;
    assert_true(dy_hashmap_init(&m, 0));
    assert_int_equal(dy_hashmap_len(&m), 0);
    assert_true(dy_hashmap_get(&m, 7) == DY_HASHMAP_NONE);
    assert_true(dy_hashmap_put(&m, 7, 70));
    assert_true(dy_hashmap_put(&m, 0, 0)); /* key 0 and value 0 are ordinary */
    assert_true(dy_hashmap_put(&m, UINT64_MAX, 5)); /* so is the largest key */
    assert_int_equal(dy_hashmap_len(&m), 3);
    assert_true(dy_hashmap_get(&m, 7) == 70);
    assert_true(dy_hashmap_get(&m, 0) == 0);
    assert_true(dy_hashmap_get(&m, UINT64_MAX) == 5);
    assert_true(dy_hashmap_put(&m, 7, 71)); /* replaces */
    assert_int_equal(dy_hashmap_len(&m), 3);
    assert_true(dy_hashmap_get(&m, 7) == 71);
    assert_false(dy_hashmap_put(&m, 8, DY_HASHMAP_NONE)); /* the reserved value */
    assert_true(dy_hashmap_get(&m, 8) == DY_HASHMAP_NONE);
    assert_int_equal(dy_hashmap_len(&m), 3);
    assert_true(dy_hashmap_remove(&m, 7) == 71);
    assert_true(dy_hashmap_remove(&m, 7) == DY_HASHMAP_NONE);
    assert_true(dy_hashmap_get(&m, 7) == DY_HASHMAP_NONE);
    assert_int_equal(dy_hashmap_len(&m), 2);
    dy_hashmap_free(&m);
    assert_int_equal(m.cap, 0);
    assert_true(dy_hashmap_get(&m, 0) == DY_HASHMAP_NONE); /* a freed map is empty */
    assert_true(dy_hashmap_remove(&m, 0) == DY_HASHMAP_NONE);
    /* a zeroed map works without init */
    dy_hashmap z = {0};
    assert_true(dy_hashmap_put(&z, 3, 4));
    assert_true(dy_hashmap_get(&z, 3) == 4);
    dy_hashmap_free(&z);
}

static void test_hashmap_grows_and_reserves(void **state)
{
    (void)state;
    dy_hashmap m;
    assert_true(dy_hashmap_init(&m, 100));
    size_t cap = m.cap;
    assert_true(cap >= 200);
    for (uint64_t k = 0; k < 100; k++)
        assert_true(dy_hashmap_put(&m, k, k * 3));
    assert_int_equal(m.cap, cap); /* room for `expected` keys without growing */
    for (uint64_t k = 100; k < 5000; k++)
        assert_true(dy_hashmap_put(&m, k, k * 3));
    assert_true(m.cap >= 2 * 5000); /* never more than half full */
    for (uint64_t k = 0; k < 5000; k++)
        assert_true(dy_hashmap_get(&m, k) == k * 3);
    assert_true(dy_hashmap_get(&m, 5000) == DY_HASHMAP_NONE);
    assert_true(dy_hashmap_reserve(&m, 20000));
    cap = m.cap;
    for (uint64_t k = 5000; k < 20000; k++)
        assert_true(dy_hashmap_put(&m, k, k * 3));
    assert_int_equal(m.cap, cap);
    assert_int_equal(dy_hashmap_len(&m), 20000);
    assert_false(dy_hashmap_reserve(&m, SIZE_MAX)); /* too big: refused, map kept */
    assert_true(dy_hashmap_get(&m, 19999) == 19999 * 3);
    dy_hashmap_free(&m);
}

/* A reference map: keys and values in arrays, searched linearly. */
typedef struct {
    uint64_t *key, *value;
    size_t n;
} ref_map;

static long ref_find(const ref_map *r, uint64_t key)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->key[i] == key)
            return (long)i;
    return -1;
}

static void check_against(const dy_hashmap *m, const ref_map *r)
{
    assert_int_equal(dy_hashmap_len(m), r->n);
    for (size_t i = 0; i < r->n; i++)
        assert_true(dy_hashmap_get(m, r->key[i]) == r->value[i]);
    size_t seen = 0, i = 0;
    uint64_t k, v;
    while (dy_hashmap_next(m, &i, &k, &v)) {
        long j = ref_find(r, k);
        assert_true(j >= 0);
        assert_true(r->value[j] == v);
        seen++;
    }
    assert_int_equal(seen, r->n);
}

/* Random puts, replaces and removes, drawn from a small key space so that removals hit,
 * checked against the reference every few steps. Keys are spread over high and low bits. */
static void run_random_ops(uint64_t seed, uint64_t key_space, int ops, size_t init_expected)
{
    enum { MAXN = 4096 };
    ref_map r = {calloc(MAXN, 8), calloc(MAXN, 8), 0};
    assert_non_null(r.key);
    assert_non_null(r.value);
    dy_hashmap m;
    assert_true(dy_hashmap_init(&m, init_expected));
    uint64_t rng = seed;
    for (int op = 0; op < ops; op++) {
        uint64_t x = tu_rng_u64(&rng);
        uint64_t key = tu_rng_u64(&rng) % key_space * 0x100000001ull; /* also high bits */
        long j = ref_find(&r, key);
        if (x % 3 != 0) { /* put */
            uint64_t v = tu_rng_u64(&rng) >> 1;
            if (j < 0 && r.n == MAXN)
                continue;
            assert_true(dy_hashmap_put(&m, key, v));
            if (j < 0) {
                r.key[r.n] = key;
                r.value[r.n++] = v;
            } else
                r.value[j] = v;
        } else { /* remove */
            uint64_t got = dy_hashmap_remove(&m, key);
            if (j < 0) {
                assert_true(got == DY_HASHMAP_NONE);
            } else {
                assert_true(got == r.value[j]);
                r.n--;
                r.key[j] = r.key[r.n];
                r.value[j] = r.value[r.n];
            }
        }
        if (op % 97 == 0)
            check_against(&m, &r);
    }
    check_against(&m, &r);
    dy_hashmap_free(&m);
    free(r.key);
    free(r.value);
}

static void test_hashmap_against_reference(void **state)
{
    (void)state;
    run_random_ops(1, 300, 20000, 0);     /* growth from the smallest table */
    run_random_ops(2, 3000, 30000, 4096); /* a large table, sparse */
    run_random_ops(3, 40, 20000, 0);      /* few keys: constant churn in one small table */
}

/* Keys whose home slots are chosen: deletion inside and at the edges of clusters, and a
 * cluster that wraps around the end of the table. */
static uint64_t key_with_home(const dy_hashmap *m, size_t home, uint64_t *next)
{
    for (;; (*next)++)
        if (dy_hashmap_home(m, *next) == home)
            return (*next)++;
}

static void test_hashmap_deletes_in_clusters(void **state)
{
    (void)state;
    dy_hashmap m;
    assert_true(dy_hashmap_init(&m, 8)); /* 16 slots: stays so with at most 8 keys */
    assert_int_equal(m.cap, 16);
    for (int round = 0; round < 200; round++) {
        /* 8 keys homed in slots 13, 14, 15 and 0: the cluster wraps */
        static const size_t homes[8] = {13, 13, 14, 15, 15, 0, 13, 0};
        uint64_t keys[8], next = (uint64_t)round * 1000003u;
        for (int i = 0; i < 8; i++) {
            keys[i] = key_with_home(&m, homes[i], &next);
            assert_true(dy_hashmap_put(&m, keys[i], (uint64_t)i));
        }
        assert_int_equal(m.cap, 16);
        /* remove them in an order that depends on the round, checking the rest each time */
        bool gone[8] = {false};
        for (int n = 0; n < 8; n++) {
            int i = (round * 5 + n * 3) % 8;
            while (gone[i])
                i = (i + 1) % 8;
            assert_true(dy_hashmap_remove(&m, keys[i]) == (uint64_t)i);
            gone[i] = true;
            for (int k = 0; k < 8; k++) {
                uint64_t want = gone[k] ? DY_HASHMAP_NONE : (uint64_t)k;
                assert_true(dy_hashmap_get(&m, keys[k]) == want);
            }
        }
        assert_int_equal(dy_hashmap_len(&m), 0);
        for (size_t s = 0; s < m.cap; s++)
            assert_true(m.slots[s].value == DY_HASHMAP_NONE); /* no tombstones left behind */
    }
    dy_hashmap_free(&m);
}

typedef struct {
    int calls;
    uint64_t seen[64];
} filter_log;

static bool drop_odd_values(void *user, uint64_t key, uint64_t value)
{
    filter_log *l = user;
    for (int i = 0; i < l->calls; i++)
        assert_true(l->seen[i] != key); /* every key once */
    l->seen[l->calls++] = key;
    return value & 1;
}

static void test_hashmap_filter(void **state)
{
    (void)state;
    for (int round = 0; round < 100; round++) {
        dy_hashmap m;
        assert_true(dy_hashmap_init(&m, 32)); /* 64 slots */
        uint64_t next = (uint64_t)round * 7919u, keys[32];
        /* dense, wrapping clusters: homes in the last and first few slots */
        for (int i = 0; i < 32; i++) {
            keys[i] = key_with_home(&m, (size_t)(60 + (i * 7 + round) % 9) % 64, &next);
            assert_true(dy_hashmap_put(&m, keys[i], (uint64_t)(i ^ round)));
        }
        filter_log log = {0};
        dy_hashmap_filter(&m, drop_odd_values, &log);
        assert_int_equal(log.calls, 32);
        int kept = 0;
        for (int i = 0; i < 32; i++) {
            uint64_t v = (uint64_t)(i ^ round);
            assert_true(dy_hashmap_get(&m, keys[i]) == (v & 1 ? DY_HASHMAP_NONE : v));
            kept += !(v & 1);
        }
        assert_int_equal(dy_hashmap_len(&m), kept);
        dy_hashmap_free(&m);
    }
    dy_hashmap e = {0};
    filter_log log = {0};
    dy_hashmap_filter(&e, drop_odd_values, &log); /* empty: no calls */
    assert_int_equal(log.calls, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_append_and_cstr),
        cmocka_unit_test(test_buf_printf),
        cmocka_unit_test(test_buf_oom_is_sticky),
        cmocka_unit_test(test_array_reserve),
        cmocka_unit_test(test_clock_monotonic),
        cmocka_unit_test(test_cond_times_out_at_deadline),
        cmocka_unit_test(test_cond_woken_before_deadline),
        cmocka_unit_test(test_hashmap_basics),
        cmocka_unit_test(test_hashmap_grows_and_reserves),
        cmocka_unit_test(test_hashmap_against_reference),
        cmocka_unit_test(test_hashmap_deletes_in_clusters),
        cmocka_unit_test(test_hashmap_filter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
