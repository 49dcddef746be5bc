/* cost.h — cost models: how long one engine step and one KV transfer take on the hardware a
 * simulation models. A cost model is a plain JSON file the user can read and edit (the format,
 * every field and the formulas are in docs/sim-costs.md); there are two kinds in one format:
 *
 *   "measured"  step time as a linear function of the step shape, fitted from this machine's
 *               `dyad bench engine --json`, and KV transfer from `dyad bench xfer`;
 *   "roofline"  a GPU (HBM bandwidth, dense TFLOP/s, NVLink) × a model (parameters, layers,
 *               heads) × a tensor-parallel degree, with per-phase efficiency factors.
 *
 * The simulator reduces each scheduler plan to a dy_step_shape and asks dy_cost_step_seconds;
 * it prices a prefill-to-decode KV hand-off with dy_cost_transfer_seconds. Both are pure. */
#ifndef DYAD_SIM_COST_H
#define DYAD_SIM_COST_H

#include "sched/step_shape.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { DY_COST_MEASURED, DY_COST_ROOFLINE } dy_cost_kind;

typedef struct dy_cost_model dy_cost_model;

/* Reads and validates a cost-model file. On any problem returns NULL and writes an error that
 * names the file and the field, e.g. "costs/h100.json: engine.decode_ms_per_seq: missing". */
dy_cost_model *dy_cost_load(const char *path, char *err, size_t errlen);
/* Writes the model as indented JSON that dy_cost_load reads back to the same model. */
int dy_cost_save(const dy_cost_model *m, const char *path, char *err, size_t errlen);
void dy_cost_free(dy_cost_model *m);

/* Seconds one engine step of this shape takes on one worker (a TP group for a roofline). */
double dy_cost_step_seconds(const dy_cost_model *m, const dy_step_shape *s);
/* Seconds to move `bytes` of KV from a prefill worker to a decode worker: latency + bytes /
 * bandwidth (0 for no bytes). */
double dy_cost_transfer_seconds(const dy_cost_model *m, int64_t bytes);

const char *dy_cost_name(const dy_cost_model *m);
/* The model it prices: the benchmark's model (measured) or the roofline's model name. */
const char *dy_cost_served_model(const dy_cost_model *m);
/* The roofline's hardware name; NULL for a measured model. */
const char *dy_cost_hardware(const dy_cost_model *m);
dy_cost_kind dy_cost_get_kind(const dy_cost_model *m);
/* KV bytes one token occupies in the modelled model (all layers, keys and values). */
int64_t dy_cost_kv_bytes_per_token(const dy_cost_model *m);
/* Tokens of KV one worker holds (for a roofline: what its TP group's memory leaves after the
 * weights). */
int64_t dy_cost_kv_capacity_tokens(const dy_cost_model *m);
/* GPUs per worker (the TP degree; 1 for a measured model) and engine threads per worker (0 for
 * a roofline model). */
int dy_cost_tp(const dy_cost_model *m);
int dy_cost_threads(const dy_cost_model *m);
/* Re-targets a roofline model to another TP degree (1, 2, 4 or 8, dividing the KV heads) so
 * one file per hardware × model serves a search over TP. Fails (-1, err) for a measured model,
 * a degree that does not divide the model, or one whose weights do not fit the group. */
int dy_cost_set_tp(dy_cost_model *m, int tp, char *err, size_t errlen);

/* What a fit needs besides the benchmark: the KV capacity of the worker (`dyad serve
 * --kv-blocks` × block size) and the transfer link `dyad bench xfer` measured. */
typedef struct {
    const char *model;          /* the bench object whose "model" is this; NULL: the first */
    const char *name;           /* the cost model's name; NULL: "<model>-<threads>t" */
    const char *source;         /* how the benchmark was made, kept in the file; NULL: its path */
    int64_t kv_capacity_tokens; /* > 0, or 0: kv_mem_bytes / the benchmark's KV bytes per token */
    int64_t kv_mem_bytes;       /* the worker's KV memory (`--kv-mem`), when capacity is 0 */
    const char *xfer_backend;   /* "shm", "tcp" or "ucx" (recorded, not interpreted) */
    double xfer_gbps;           /* > 0 */
    double xfer_latency_us;     /* >= 0 */
} dy_cost_fit_opts;

/* Fits a measured model from a file of `dyad bench engine --json` output (one object per
 * line): the step-time coefficients by least squares on relative error over every point it
 * reports (prefill, decode and batch), with no coefficient below zero. NULL and err on a
 * missing or malformed benchmark. */
dy_cost_model *dy_cost_fit(const char *bench_json_path, const dy_cost_fit_opts *o, char *err,
                           size_t errlen);

/* Sets a measured model's token_overhead_ms from a real run: a `dyad bench --json` report (its
 * last object) of `dyad serve --workers 1` on the model at concurrency 1 with fixed lengths.
 * The overhead is the run's mean TPOT less what the model's engine terms give for one sequence
 * decoding at those lengths (never below 0): what a token costs outside the engine step — the
 * worker's sampling and frames, the frontend's streaming, and on a small machine the CPU they
 * and the load generator take from the engine. Returns the value set (ms), or -1 with err. */
double dy_cost_set_token_overhead(dy_cost_model *m, const char *bench_json_path, char *err,
                                  size_t errlen);

/* Reads one backend's GB/s and latency from `dyad bench xfer --json` output (its "backends"
 * array), to fill dy_cost_fit_opts. -1 and err if the file or the backend is missing. */
int dy_cost_read_xfer(const char *xfer_json_path, const char *backend, double *gbps,
                      double *latency_us, char *err, size_t errlen);

#endif
