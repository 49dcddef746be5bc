/* loadwin.h — what the frontend saw of its traffic since the planner last looked: requests
 * as they arrive (their prompt tokens and the output they may ask for) and as they end (the
 * output they got, their cached prompt tokens, TTFT and ITL), summed and kept for the
 * percentiles. Thread-safe: the HTTP threads add, the planner thread takes and restarts it
 * each interval. */
#ifndef DYAD_LOADWIN_H
#define DYAD_LOADWIN_H

#include <stdint.h>

/* Latency samples kept per interval (past that, the first ones stand for the rest). */
#define DY_LOADWIN_SAMPLES 8192

typedef struct {
    double arrived;            /* requests that arrived */
    double prompt_tokens;      /* theirs, summed */
    double max_tokens;         /* the output they may ask for, summed */
    double ended;              /* requests that ended with at least one token */
    double ended_prompt_tokens, ended_cached_tokens, ended_output_tokens;
    double ttft_mean_s, ttft_p90_s; /* over the ended requests; 0 when none */
    double itl_mean_s, itl_p90_s;   /* a request's mean time between its tokens (bench's TPOT) */
} dy_loadwin_figures;

typedef struct dy_loadwin dy_loadwin;

dy_loadwin *dy_loadwin_new(void);
void dy_loadwin_free(dy_loadwin *w);
void dy_loadwin_arrival(dy_loadwin *w, int64_t prompt_tokens, int64_t max_tokens);
/* itl_s < 0: it had one token, no gap. */
void dy_loadwin_ended(dy_loadwin *w, int64_t prompt_tokens, int64_t cached_tokens,
                      int64_t output_tokens, double ttft_s, double itl_s);
/* The figures since the last take, and a fresh window. */
dy_loadwin_figures dy_loadwin_take(dy_loadwin *w);

#endif
