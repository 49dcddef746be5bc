/* threadpool.h — the engine's small pool of worker threads, one per core given. A step runs
 * a handful of parallel phases (matrix products, attention); each phase is one call of
 * dy_pool_run, in which every thread, the caller included, runs the same function on its
 * own share. Workers spin briefly between phases (phases come microseconds apart during a
 * step) and then sleep, so an idle engine costs no CPU. */
#ifndef DYAD_THREADPOOL_H
#define DYAD_THREADPOOL_H

typedef struct dy_pool dy_pool;
typedef void (*dy_pool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1; 1 means no extra threads (everything runs in the caller). NULL on
 * failure to start threads. */
dy_pool *dy_pool_new(int n_threads);
void dy_pool_free(dy_pool *p);
int dy_pool_size(const dy_pool *p);
/* Runs fn(ctx, i, n) for i in [0, n) on the n threads (the caller is thread 0) and returns
 * when all have finished. Not re-entrant. */
void dy_pool_run(dy_pool *p, dy_pool_fn fn, void *ctx);

#endif
