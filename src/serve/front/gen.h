/* gen.h — one generation request as the frontend sees it, apart from HTTP: a validated
 * OpenAI body (completions or chat) becomes prompts and a job of choices for the workers; the
 * job's events become the answer — one JSON response, or SSE frames as tokens arrive — with
 * the selection among repeated samples (votes, log-probability ranking) in between, and the
 * request's latency and outcome observed in the metrics. http.c does the transport. */
#ifndef DYAD_GEN_H
#define DYAD_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "engine/tokenizer.h"
#include "serve/front/chat_template.h"
#include "serve/front/job.h"
#include "serve/front/metrics.h"
#include "serve/front/openai.h"
#include "serve/front/reqlog.h"
#include "serve/front/fleet.h"
#include "serve/front/loadwin.h"
#include "serve/front/recent.h"

/* What a request needs from the server (borrowed; must outlive the request). */
typedef struct {
    const dy_tokenizer *tok;
    dy_chat_family chat;
    const dy_api_limits *limits;
    const char *model_id;
    dy_fleet *workers;
    dy_metrics *metrics;
    dy_reqlog *reqlog;   /* NULL: no request log */
    dy_loadwin *loadwin; /* NULL: no planner watches the traffic */
    dy_recent *recent;   /* NULL: no rolling view (GET /v1/dyad/status) */
} dy_gen_env;

typedef struct dy_gen dy_gen;

/* Parses and validates the body, tokenizes its prompts and builds the job (not submitted
 * yet). `serial` makes the response id unique. NULL with *err (a 4xx, or 500 when out of
 * memory) on failure. */
dy_gen *dy_gen_new(const dy_gen_env *env, const char *body, size_t len, dy_api_kind kind,
                   uint64_t serial, dy_api_error *err);
void dy_gen_free(dy_gen *g);
dy_job *dy_gen_job(const dy_gen *g);
/* The client asked for an SSE stream. */
bool dy_gen_streams(const dy_gen *g);

/* The request votes among its samples (dyad.select = "majority"), so dy_gen_progress has
 * work to do while the job runs. */
bool dy_gen_votes(const dy_gen *g);
/* Without the job's lock (it takes it only briefly, never while a regex runs): counts the
 * votes of samples that ended and cancels the samples a settled vote no longer needs, or
 * every sample once a match ran past its limits (the request then fails with a 400 naming
 * dyad.answer_regex). */
void dy_gen_progress(dy_gen *g);
/* With the job's mu held: a sample has ended whose vote dy_gen_progress has not counted yet
 * (dy_gen_collect waits for it, so call dy_gen_progress before waiting on the job). */
bool dy_gen_votes_pending(const dy_gen *g);

/* Not streaming, once every choice has ended: the response body (malloc'd) and its HTTP
 * status — 200, the error of a choice that failed, or 500 when the response could not be
 * built whole (NULL only when not even the error object could be). Records the request in
 * the metrics. */
char *dy_gen_answer(dy_gen *g, int *status);

/* Streaming, with the job's mutex held: queues SSE frames for everything that arrived since
 * the last call (data: [DONE] last, once every choice has ended). A choice that failed, or a
 * frame that could not be built, ends the stream with an error event and [DONE]. With a
 * vote, nothing is chosen until dy_gen_progress (called unlocked) has counted every sample
 * that ended. */
void dy_gen_collect(dy_gen *g);
/* Moves up to max queued bytes into buf; returns how many. */
size_t dy_gen_take(dy_gen *g, char *buf, size_t max);
/* [DONE] has been queued and taken. */
bool dy_gen_stream_over(const dy_gen *g);

/* Observes the request's latencies and outcome in the metrics and writes its line to the
 * request log (once; later calls do nothing). */
void dy_gen_record(dy_gen *g);

#endif
