/* bench.h — `dyad bench` (serving benchmark): the one load generator of the project. It
 * speaks HTTP/SSE to any OpenAI-compatible server (dyad serve, llama.cpp's llama-server,
 * vLLM, ...), drives synthetic or trace workloads at a closed- or open-loop load, and reports
 * TTFT/TPOT/ITL/E2E percentiles, throughputs, goodput and the Pareto frontier of a sweep.
 * docs/bench.md describes the workloads and the figures. */
#ifndef DYAD_BENCH_H
#define DYAD_BENCH_H

/* argv[0] is "bench"; returns the exit status: 0, 1 (runtime failure or no request
 * succeeded), 2 (usage error). */
int dy_bench_serve_main(int argc, char **argv);

#endif
