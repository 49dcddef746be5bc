/* threadpool.c — see threadpool.h. A generation counter announces each phase; workers spin
 * on it for a while, then wait on a condition variable. */
#include "engine/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define SPIN_ROUNDS 20000

typedef struct worker {
    struct dy_pool *pool;
    int index;
    pthread_t thread;
} worker;

struct dy_pool {
    int n;
    worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_uint generation;  /* bumped to start a phase */
    atomic_int pending;      /* workers still running the current phase */
    atomic_bool stop;
    dy_pool_fn fn;
    void *ctx;
};

static bool wait_for_phase(struct dy_pool *p, unsigned seen)
{
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen)
            return !atomic_load(&p->stop);
        if (i > SPIN_ROUNDS / 2)
            sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->generation) == seen)
        pthread_cond_wait(&p->wake, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return !atomic_load(&p->stop);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    struct dy_pool *p = w->pool;
    unsigned seen = 0;
    while (wait_for_phase(p, seen)) {
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        p->fn(p->ctx, w->index, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
    return NULL;
}

static void announce(struct dy_pool *p)
{
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

dy_pool *dy_pool_new(int n_threads)
{
    if (n_threads < 1)
        return NULL;
    struct dy_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
            p->n = i; /* only threads 1..i-1 exist */
            dy_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void dy_pool_free(dy_pool *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, true);
    announce(p);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->workers[i].thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p->workers);
    free(p);
}

int dy_pool_size(const dy_pool *p)
{
    return p->n;
}

void dy_pool_run(dy_pool *p, dy_pool_fn fn, void *ctx)
{
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_release);
    announce(p);
    fn(ctx, 0, p->n);
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++)
        if (spins > 1000)
            sched_yield(); /* another process may hold the core the last worker needs */
}
