/* job.h — one HTTP request in flight, as the frontend sees it: n choices, each a sequence on
 * a worker, whose tokens arrive on the worker's reader thread and are consumed by the HTTP
 * thread. One mutex and condition variable (on CLOCK_MONOTONIC: dy_cond_init) guard the whole
 * job. Every time in a job is dy_now() seconds (util/clock.h): request arrivals, token
 * arrivals and ends are read from the one clock, so their differences are latencies. */
#ifndef DYAD_JOB_H
#define DYAD_JOB_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "serve/wire/wire.h"

typedef struct {
    int32_t token;
    float logprob;
    uint8_t n_top;
    int32_t top_ids[DY_WIRE_MAX_TOP];
    float top_logprobs[DY_WIRE_MAX_TOP];
    char *text;
    uint32_t text_len;
    double t;          /* monotonic arrival time at the frontend */
} dy_tok_event;

typedef struct {
    uint64_t seq_id;   /* the wire id */
    int worker;        /* worker slot running it, -1 before submission */
    int overlap_blocks; /* the router's prediction: leading prompt blocks cached there */
    dy_msg_request req; /* kept (with its prompt) so it can be resubmitted before it starts */
    dy_tok_event *toks;
    int n_toks, cap;
    bool started;      /* a token has arrived: no longer safe to rerun elsewhere */
    bool done;
    dy_end finish;     /* DY_END_NONE until done */
    uint32_t prompt_tokens, cached_tokens, completion_tokens, queue_us;
    /* its prompt's prefix in a lower KV tier (wire.h DONE): dy_tier_outcome, tokens loaded,
     * the estimates the worker chose on (µs; UINT32_MAX: not measured yet) */
    uint8_t tier_outcome;
    uint32_t tier_tokens, tier_load_us, tier_recompute_us, tier_wait_us;
    char *tail;        /* text released at the end (or the error message) */
    uint32_t tail_len;
    /* disaggregated prefill (filled when the prefill worker reports) */
    int prefill_worker; /* -1: prefilled on its own worker */
    uint64_t xfer_bytes;
    double xfer_seconds, prefill_seconds;
} dy_choice;

typedef struct dy_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_choices;
    dy_choice *choices;
    int group;         /* samples per prompt: choices [k·group, (k+1)·group) share prompt k and
                        * are sent as one request, so the prompt is computed once (default 1) */
    int refs;          /* the HTTP side and the worker pool each hold one */
    double t_submit;
    struct dy_job *next_live; /* the pool's list of live jobs */
} dy_job;

/* A job of n choices; set each one's request with dy_job_set_request before submitting.
 * NULL if out of memory. refs starts at 1 (the caller's). */
dy_job *dy_job_new(int n_choices);
/* Copies the request (and its prompt) into choice i, with random stream `stream`. */
bool dy_job_set_request(dy_job *j, int i, const dy_msg_request *tmpl, uint32_t stream);
void dy_job_unref(dy_job *j);
/* True when every choice is done. Call with mu held. */
bool dy_job_all_done(const dy_job *j);

/* Appends a token event (called by the pool with mu held). false if out of memory. */
bool dy_choice_push_token(dy_choice *c, const dy_msg_token *t, double now);

/* Marks the choice done (called by the pool with mu held); failed, with no tail, if its
 * last text cannot be kept (out of memory). */
void dy_choice_finish(dy_choice *c, const dy_msg_done *d);
/* Marks the choice failed with a message (worker died, no worker); a NULL tail after it means
 * memory ran out. */
void dy_choice_fail(dy_choice *c, const char *msg);

#endif
