/* roofline.h — this machine's ceilings, measured: streaming read bandwidth from DRAM (a
 * working set well beyond the last-level cache) and from the last-level cache, and the
 * arithmetic peaks of a kernel level (fp32 FMA and int8 dot products at the level's vector
 * width), each over a number of threads. `dyad bench engine` prints the engine's figures
 * against them: decode is bound by bytes moved (from the cache when a model's weights fit
 * in it, from DRAM otherwise), prefill by the peak of the arithmetic its weights use. */
#ifndef DYAD_ROOFLINE_H
#define DYAD_ROOFLINE_H

#include <stddef.h>
#include <stdint.h>
#include "engine/kernels.h"
#include "engine/threadpool.h"

/* Reads `bytes` split across the pool's threads with the loads of level simd, `reps` times; returns the best GB/s (10^9
 * bytes per second). A working set under the last-level cache is read several times per
 * repetition (about 1 GiB in all) so the figure is the cache's rate, not the clock's grain. */
double dy_measure_read_gbps(dy_pool *pool, dy_simd simd, size_t bytes, int reps);
/* Bytes of this CPU's last-level cache (the largest level Linux reports in sysfs), or 0
 * where it reports none. */
size_t dy_llc_bytes(void);

/* Runs independent FMA chains on every thread; returns the best GFLOP/s (2 flops per FMA
 * lane), at the vector width of level simd (scalar, 256 or 512 bits). */
double dy_measure_fma_gflops(dy_pool *pool, dy_simd simd, int reps);
/* The same for int8 dot products as the level's int8 kernels issue them: scalar code,
 * AVX2 maddubs + madd, or AVX-512 VNNI dpbusd; returns GOP/s (a multiply and an add per
 * byte pair, as a matrix product's flops are counted). */
double dy_measure_int8_gops(dy_pool *pool, dy_simd simd, int reps);
/* The vector width in bits whose peaks dy_measure_*_g*ops measure for level simd. */
int dy_roofline_width(dy_simd simd);

/* The peak loops, each `iters` rounds of independent chains, returning a value that depends
 * on all of them so the compiler keeps the work: roofline_avx2.c (256-bit FMA: 2·8·10 flops
 * a round; maddubs + madd: 2·32·8 ops a round) and roofline_avx512.c (256-bit dpbusd:
 * 2·32·10 ops a round; 512-bit FMA 2·16·12 and dpbusd 2·64·12). */
float dy_fma_loop_avx2(long iters);
int dy_int8_loop_avx2(long iters);
int dy_int8_loop_avx512vnni_256(long iters);
float dy_fma_loop_avx512(long iters);
int dy_int8_loop_avx512(long iters);
/* The streaming read loops of dy_measure_read_gbps: `passes` reads of p[0, words) with 256-
 * or 512-bit loads into independent sums; the result depends on every word read. */
uint64_t dy_read_sum_avx2(const uint64_t *p, size_t words, int passes);
uint64_t dy_read_sum_avx512(const uint64_t *p, size_t words, int passes);

#endif
