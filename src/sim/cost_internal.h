/* cost_internal.h — the cost model's fields, shared by the file code and the evaluator
 * (cost.c) and the fit (cost_fit.c); nothing outside src/sim/cost*.c includes it. Units are
 * the file's: milliseconds, GB/s (1e9 bytes), GB, TFLOP/s, microseconds. */
#ifndef DYAD_SIM_COST_INTERNAL_H
#define DYAD_SIM_COST_INTERNAL_H

#include "sim/cost.h"

struct dy_cost_model {
    dy_cost_kind kind;
    char *name, *source;
    int tp; /* roofline: GPUs per worker */
    struct {
        char *model, *source;
        int threads;
        double fixed_ms, prefill_ms_per_token, prefill_ms_per_context, decode_ms_per_seq,
            decode_ms_per_context;
        double token_overhead_ms; /* per decoded token, outside the engine step (0: none) */
    } engine; /* measured */
    struct {
        int64_t bytes_per_token, capacity_tokens;
    } kv; /* measured: from the file; roofline: derived from the model, hardware and tp */
    struct {
        char *backend, *source;
        double gbps; /* measured: the link's; roofline: per GPU */
        double latency_us;
    } xfer;
    struct {
        char *name, *source;
        double hbm_gbps, hbm_gb, bf16_tflops, fp8_tflops, nvlink_gbps, allreduce_latency_us;
    } hw; /* roofline */
    struct {
        char *name, *source;
        double params, weight_bytes_per_param, kv_bytes_per_elem;
        int layers, hidden, heads, kv_heads, head_dim;
    } model; /* roofline */
    struct {
        char *source;
        double prefill_compute, decode_bandwidth, overhead_ms, memory_utilization;
    } eff; /* roofline */
};

#endif
