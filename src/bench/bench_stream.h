/* bench_stream.h — one streamed completion's measurements, from the SSE events' payloads and
 * the times they arrived: when the first content token came (TTFT), the gaps between content
 * chunks (ITL), the usage the server reported, where dyad says the prompt was prefilled and
 * what moving its KV cost (the `dyad` extension object), errors inside the stream. Works for
 * /v1/completions (choices[0].text) and /v1/chat/completions (choices[0].delta.content or
 * .reasoning_content). Pure: times are passed in; JSON through jansson. */
#ifndef DYAD_BENCH_STREAM_H
#define DYAD_BENCH_STREAM_H

#include <stdbool.h>
#include <stddef.h>

/* A finished request, as the statistics see it. */
typedef struct {
    bool ok;
    long index;           /* the workload's request index */
    long prompt_tokens;   /* usage.prompt_tokens, else the prompt's length as sent */
    long output_tokens;   /* usage.completion_tokens, else tokens counted from chunks */
    long requested;       /* max_tokens asked for */
    double send_ms;       /* when it was sent, ms after the run started */
    double ttft_ms;       /* send → first content token */
    double e2e_ms;        /* send → end of stream */
    double *itl;          /* per-token gaps after the first token, ms (owned) */
    size_t n_itl;
    /* dyad's report (docs/api.md): placed = the server said where it ran the request;
     * kv_moved = a prefill worker computed the prompt and its KV moved (bytes, time). */
    bool placed, kv_moved;
    double kv_bytes, kv_ms;
    char *error;          /* why it failed (owned; NULL when ok) */
} dyb_result;

void dyb_result_free(dyb_result *r);

typedef struct {
    double t_send, t_first, t_last, t_done; /* ms; t_first < 0 until a content chunk */
    long n_chunks;          /* chunks that carried content */
    double *gap;            /* gap[i]: time between content chunk i and i+1 */
    long *gap_tokens;       /* tokens chunk i+1 carried, when usage told (else 0) */
    size_t n_gap, gap_cap;
    long usage_prompt, usage_completion; /* -1: not reported */
    bool placed, kv_moved;  /* from the `dyad` object of the first choice (see dyb_result) */
    double kv_bytes, kv_ms;
    bool done;              /* saw data: [DONE] */
    char *error;            /* the first error (error event, bad JSON); owned */
} dyb_stream;

void dyb_stream_init(dyb_stream *s, double t_send);
/* One SSE event's data, arrived at `now` ms. */
void dyb_stream_event(dyb_stream *s, const char *data, size_t len, double now);
/* Marks the stream failed with a message (first failure wins). */
void dyb_stream_fail(dyb_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Turns the stream into a result (the stream ended at t_end ms, unless [DONE] came first).
 * ITL: a chunk that carried k tokens counts as k gaps of (gap / k); when the server reported
 * only a final completion_tokens larger than the number of chunks, the extra tokens are
 * spread evenly over the gaps, so the ITL entries sum to (last chunk − first chunk) and
 * number completion_tokens − 1, consistent with TPOT. */
void dyb_stream_result(dyb_stream *s, double t_end, dyb_result *out);
void dyb_stream_free(dyb_stream *s);

#endif
