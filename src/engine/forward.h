/* forward.h — the forward pass over one step. A step is a batch of spans; each span is a
 * run of consecutive tokens of one sequence starting at some position (a prefill chunk is a
 * long span, a decode is a span of one token). All tokens of the step go through every
 * matrix product together, so a step of T tokens reads each weight once. Attention reads
 * each sequence's keys and values through its block table in the paged KV pool, and the
 * step writes the keys and values of its own tokens there. Logits are computed only for the
 * trailing positions each span asks for. */
#ifndef DYAD_FORWARD_H
#define DYAD_FORWARD_H

#include <stdint.h>
#include "engine/model.h"
#include "engine/threadpool.h"
#include "kv/kv_pool.h"

typedef struct {
    const int32_t *tokens;  /* n_tokens ids */
    int n_tokens;
    int pos;                /* position of tokens[0] in its sequence */
    const int32_t *blocks;  /* block table: covers positions [0, pos + n_tokens) */
    int n_blocks;
    int n_logits;           /* logits for this many trailing tokens (0 … n_tokens) */
} dy_span;

typedef struct dy_engine dy_engine;

/* The KV shape of model m with blocks of block_size positions of element type t: what a pool
 * for an engine of m is made with (dy_kv_pool_make). */
dy_kv_shape dy_model_kv_shape(const dy_model *m, int block_size, dy_kv_type t);

/* An engine computes steps of up to max_step_tokens tokens for model m on n_threads threads,
 * with keys and values in kv (which must match the model's layers and KV width). */
dy_engine *dy_engine_new(const dy_model *m, dy_kv_pool *kv, int n_threads, int max_step_tokens,
                         char *err, size_t errlen);
void dy_engine_free(dy_engine *e);
int dy_engine_max_step_tokens(const dy_engine *e);
int dy_engine_threads(const dy_engine *e);
dy_simd dy_engine_simd(const dy_engine *e);
/* Forces a kernel level (tests compare the scalar and SIMD paths). */
void dy_engine_set_simd(dy_engine *e, dy_simd simd);

/* Runs one step. logits receives, span by span, n_logits rows of vocab_size floats each.
 * Returns 0, or -1 with a message in err if the spans are invalid (too many tokens, a
 * position past the context length or the block table, a token id out of range). */
int dy_engine_step(dy_engine *e, const dy_span *spans, int n_spans, float *logits, char *err,
                   size_t errlen);

/* Runs fn(ctx, i, n) on each of the engine's n threads (the caller is thread 0) between
 * steps, returning when all are done: for work after a step that splits by sequence, such as
 * sampling a batch's logits. */
void dy_engine_run(dy_engine *e, dy_pool_fn fn, void *ctx);

/* Where a step's time goes: the matrix products (activation conversion included), attention
 * (the reads of the KV pool), and the rest (embedding, norms, RoPE and the KV write,
 * SiLU·gate, residual adds, the logits' norm). */
typedef enum { DY_PHASE_MATMUL, DY_PHASE_ATTENTION, DY_PHASE_REST, DY_N_PHASES } dy_phase;
typedef struct {
    double s[DY_N_PHASES]; /* seconds, by dy_phase */
} dy_phase_times;

/* With a clock (seconds, monotonic), every later step adds the time of each of its phases to
 * *out (which the caller zeroes); with NULL, the default, steps read no clock. The engine
 * owns no clock of its own: timing is the caller's (`dyad bench engine --phases`). */
void dy_engine_time_phases(dy_engine *e, double (*clock)(void), dy_phase_times *out);

#endif
