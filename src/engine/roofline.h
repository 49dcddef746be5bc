/* roofline.h — this machine's ceilings, measured: streaming read bandwidth and the fp32
 * FMA peak, each over a number of threads. `dyad bench engine` prints the engine's figures
 * against them (decode is bound by bytes moved, prefill by flops). */
#ifndef DYAD_ROOFLINE_H
#define DYAD_ROOFLINE_H

#include <stddef.h>
#include "engine/kernels.h"
#include "engine/threadpool.h"

/* Reads `bytes` (≥ 1 GiB recommended) split across the pool's threads, `reps` times;
 * returns the best GB/s (10^9 bytes per second). */
double dy_measure_read_gbps(dy_pool *pool, size_t bytes, int reps);
/* Runs independent FMA chains on every thread; returns the best GFLOP/s (2 flops per FMA
 * lane). Uses AVX2 FMA when simd allows, scalar code otherwise. */
double dy_measure_fma_gflops(dy_pool *pool, dy_simd simd, int reps);

/* The AVX2 FMA loop (roofline_avx2.c): `iters` rounds of independent FMAs; returns a value
 * that depends on all of them so the compiler keeps the work. Flops = iters * 2 * 8 * 10. */
float dy_fma_loop_avx2(long iters);

#endif
