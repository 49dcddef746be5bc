/* step_shape.h — what a cost model needs to know about one engine step: how many prompt tokens
 * it prefills (and how much context they attend to), how many sequences it decodes (and their
 * context); and the interface through which a cost model prices steps and KV transfers. The
 * simulator reduces each scheduler plan to a shape (dy_step_shape_of) and prices it; the
 * balance criterion (plan/balance.h) prices the steps it reasons about the same way. */
#ifndef DYAD_SCHED_STEP_SHAPE_H
#define DYAD_SCHED_STEP_SHAPE_H

#include "sched/sched.h"

#include <stdint.h>

typedef struct {
    int prefill_tokens;      /* prompt tokens computed in the step (all prefill chunks) */
    int64_t prefill_context; /* Σ over those tokens of the positions each attends to */
    int decode_seqs;         /* sequences that decode one token in the step */
    int64_t decode_context;  /* Σ over those sequences of their context length */
} dy_step_shape;

/* How long things take on the modelled hardware (sim/cost.h builds these from a file). */
typedef struct {
    double (*step_seconds)(void *ctx, const dy_step_shape *shape);
    double (*transfer_seconds)(void *ctx, int64_t bytes);
    void *ctx;
} dy_step_costs;

/* The shape of a scheduler plan: an item of one token past its prompt that wants logits is a
 * decode, everything else prefill (positions start .. start + n - 1, each attending to itself
 * and all before it). */
dy_step_shape dy_step_shape_of(const dy_plan *p);

/* The shape of prefilling positions [from, to) of one prompt in one step. */
dy_step_shape dy_step_shape_prefill(int64_t from, int64_t to);

#endif
