/* step_shape.c — see step_shape.h. */
#include "sched/step_shape.h"

dy_step_shape dy_step_shape_prefill(int64_t from, int64_t to)
{
    const int64_t n = to - from;
    return (dy_step_shape){.prefill_tokens = (int)n,
                           .prefill_context = n * from + n * (n + 1) / 2};
}

dy_step_shape dy_step_shape_of(const dy_plan *p)
{
    dy_step_shape sh = {0};
    for (int i = 0; i < p->n_items; i++) {
        const dy_plan_item *it = &p->items[i];
        if (it->n == 1 && it->logits && it->start >= it->seq->n_prompt) {
            sh.decode_seqs++;
            sh.decode_context += it->start + 1;
        } else {
            dy_step_shape one = dy_step_shape_prefill(it->start, it->start + it->n);
            sh.prefill_tokens += one.prefill_tokens;
            sh.prefill_context += one.prefill_context;
        }
    }
    return sh;
}
