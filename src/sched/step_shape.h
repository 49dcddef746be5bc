/* step_shape.h — what a cost model needs to know about one engine step: how many prompt tokens
 * it prefills (and how much context they attend to), how many sequences it decodes (and their
 * context). The simulator reduces each scheduler plan (sched.h's dy_plan) to this shape and asks
 * a cost model (sim/cost.h) how long the step takes on the modelled hardware. */
#ifndef DYAD_SIM_STEP_SHAPE_H
#define DYAD_SIM_STEP_SHAPE_H

#include <stdint.h>

typedef struct {
    int prefill_tokens;      /* prompt tokens computed in the step (all prefill chunks) */
    int64_t prefill_context; /* Σ over those tokens of the positions each attends to */
    int decode_seqs;         /* sequences that decode one token in the step */
    int64_t decode_context;  /* Σ over those sequences of their context length */
} dy_step_shape;

#endif
