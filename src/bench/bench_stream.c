/* bench_stream.c — see bench_stream.h. Owns the per-request timing state and the reading of
 * OpenAI streaming chunks. */
#include "bench/bench_stream.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dyb_result_free(dyb_result *r)
{
    free(r->itl);
    free(r->error);
    r->itl = NULL;
    r->error = NULL;
}

void dyb_stream_init(dyb_stream *s, double t_send)
{
    *s = (dyb_stream){.t_send = t_send, .t_first = -1, .t_last = -1, .t_done = -1,
                      .usage_prompt = -1, .usage_completion = -1};
}

void dyb_stream_free(dyb_stream *s)
{
    free(s->gap);
    free(s->gap_tokens);
    free(s->error);
    s->gap = NULL;
    s->gap_tokens = NULL;
    s->error = NULL;
}

void dyb_stream_fail(dyb_stream *s, const char *fmt, ...)
{
    if (s->error)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->error = strdup(msg);
}

/* The message of an OpenAI-style error object ({"error": {"message": ...}}, {"error": "..."},
 * {"message": ...} or {"detail": ...}), or NULL. */
static const char *error_message(json_t *o)
{
    json_t *e = json_object_get(o, "error");
    if (json_is_string(e))
        return json_string_value(e);
    if (json_is_object(e)) {
        json_t *m = json_object_get(e, "message");
        return json_is_string(m) ? json_string_value(m) : "(error without a message)";
    }
    return NULL;
}

static bool nonempty_string(json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 0;
}

/* True if the chunk's first choice carries generated text. */
static bool has_content(json_t *o)
{
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    if (!json_is_object(c))
        return false;
    if (nonempty_string(json_object_get(c, "text")))
        return true;
    json_t *d = json_object_get(c, "delta");
    return nonempty_string(json_object_get(d, "content")) ||
           nonempty_string(json_object_get(d, "reasoning_content"));
}

static int push_gap(dyb_stream *s, double gap, long tokens)
{
    if (s->n_gap == s->gap_cap) {
        size_t c = s->gap_cap ? s->gap_cap * 2 : 64;
        double *g = realloc(s->gap, c * sizeof *g);
        if (g)
            s->gap = g;
        long *t = g ? realloc(s->gap_tokens, c * sizeof *t) : NULL;
        if (!t)
            return -1;
        s->gap_tokens = t;
        s->gap_cap = c;
    }
    s->gap[s->n_gap] = gap;
    s->gap_tokens[s->n_gap++] = tokens;
    return 0;
}

/* A usage object's counts; returns the completion count (or -1). */
static long read_usage(dyb_stream *s, json_t *o)
{
    json_t *u = json_object_get(o, "usage");
    if (!json_is_object(u))
        return -1;
    json_t *p = json_object_get(u, "prompt_tokens"), *c = json_object_get(u, "completion_tokens");
    if (json_is_integer(p))
        s->usage_prompt = (long)json_integer_value(p);
    return json_is_integer(c) ? (long)json_integer_value(c) : -1;
}

static void content_chunk(dyb_stream *s, long prev_usage, long usage, double now)
{
    if (s->t_first < 0)
        s->t_first = now;
    else {
        /* Servers that report usage on every chunk tell how many tokens this one carried. */
        long k = prev_usage >= 0 && usage > prev_usage ? usage - prev_usage : 0;
        if (push_gap(s, now - s->t_last, k) != 0)
            dyb_stream_fail(s, "out of memory");
    }
    s->t_last = now;
    s->n_chunks++;
}

/* dyad's extension object, on the finishing chunk: choices[0].prefill_worker and kv_transfer
 * {bytes, seconds} (docs/api.md). Other servers send none; then nothing is recorded. */
static void read_dyad(dyb_stream *s, json_t *o)
{
    json_t *c = json_array_get(json_object_get(json_object_get(o, "dyad"), "choices"), 0);
    if (!json_is_object(c) || !json_object_get(c, "prefill_worker"))
        return;
    s->placed = true;
    json_t *x = json_object_get(c, "kv_transfer");
    json_t *bytes = json_object_get(x, "bytes"), *secs = json_object_get(x, "seconds");
    if (!json_is_integer(json_object_get(c, "prefill_worker")) || !json_is_number(bytes) ||
        !json_is_number(secs) || json_number_value(bytes) < 0 || json_number_value(secs) < 0)
        return;
    s->kv_moved = true;
    s->kv_bytes = json_number_value(bytes);
    s->kv_ms = json_number_value(secs) * 1000.0;
}

void dyb_stream_event(dyb_stream *s, const char *data, size_t len, double now)
{
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        s->done = true;
        s->t_done = now;
        return;
    }
    json_error_t je;
    json_t *o = json_loadb(data, len, 0, &je);
    if (!json_is_object(o)) {
        dyb_stream_fail(s, "the stream holds a chunk that is not a JSON object (%s): %.80s",
                        o ? "not an object" : je.text, data);
        json_decref(o);
        return;
    }
    const char *msg = error_message(o);
    if (msg)
        dyb_stream_fail(s, "server error in the stream: %s", msg);
    long prev = s->usage_completion, usage = read_usage(s, o);
    if (has_content(o))
        content_chunk(s, prev, usage, now);
    if (usage >= 0)
        s->usage_completion = usage;
    read_dyad(s, o);
    json_decref(o);
}

/* Token counts per gap: as reported, else the extra tokens spread evenly (see the header). */
static void gap_weights(const dyb_stream *s, long total, long *k)
{
    bool known = false;
    for (size_t i = 0; i < s->n_gap; i++)
        known |= s->gap_tokens[i] > 0;
    long extra = !known && total > s->n_chunks ? total - s->n_chunks : 0;
    if (extra > 1000000) /* an implausible count would only blow up memory */
        extra = 0;
    for (size_t i = 0; i < s->n_gap; i++) {
        k[i] = s->gap_tokens[i] > 0 ? s->gap_tokens[i] : 1;
        /* the i-th gap's share of `extra`, distributed so the shares sum exactly */
        k[i] += (long)((extra * (long)(i + 1)) / (long)s->n_gap - (extra * (long)i) / (long)s->n_gap);
    }
}

static int build_itl(const dyb_stream *s, long total, dyb_result *out)
{
    if (s->n_gap == 0)
        return 0;
    long *k = malloc(s->n_gap * sizeof *k);
    if (!k)
        return -1;
    gap_weights(s, total, k);
    size_t n = 0;
    for (size_t i = 0; i < s->n_gap; i++)
        n += (size_t)k[i];
    out->itl = malloc(n * sizeof *out->itl);
    if (!out->itl) {
        free(k);
        return -1;
    }
    for (size_t i = 0; i < s->n_gap; i++)
        for (long j = 0; j < k[i]; j++)
            out->itl[out->n_itl++] = s->gap[i] / (double)k[i];
    free(k);
    return 0;
}

void dyb_stream_result(dyb_stream *s, double t_end, dyb_result *out)
{
    double end = s->done ? s->t_done : t_end;
    long counted = s->n_chunks;
    for (size_t i = 0; i < s->n_gap; i++)
        counted += s->gap_tokens[i] > 1 ? s->gap_tokens[i] - 1 : 0;
    out->send_ms = s->t_send;
    out->e2e_ms = end - s->t_send;
    out->output_tokens = s->usage_completion >= 0 ? s->usage_completion : counted;
    if (s->usage_prompt >= 0)
        out->prompt_tokens = s->usage_prompt;
    out->placed = s->placed;
    out->kv_moved = s->kv_moved;
    out->kv_bytes = s->kv_bytes;
    out->kv_ms = s->kv_ms;
    if (!s->error && s->n_chunks == 0)
        dyb_stream_fail(s, "the stream ended without any generated text");
    if (!s->error && build_itl(s, out->output_tokens, out) != 0)
        dyb_stream_fail(s, "out of memory");
    if (s->error) {
        out->ok = false;
        out->error = s->error;
        s->error = NULL;
        return;
    }
    out->ok = true;
    out->ttft_ms = s->t_first - s->t_send;
}
