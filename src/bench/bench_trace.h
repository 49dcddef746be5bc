/* bench_trace.h — reading workload files into rows of (time, input length, output length, block
 * hash ids): Mooncake JSONL traces, Azure LLM-inference CSV traces, and length tables (any CSV
 * with input/output length columns, e.g. the ShareGPT statistics). Every line is validated;
 * a line that does not parse is an error naming FILE:LINE, or is skipped and counted when the
 * caller allows it. JSON goes through jansson. Nothing here generates tokens. */
#ifndef DYAD_BENCH_TRACE_H
#define DYAD_BENCH_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Mooncake traces hash prompts in blocks of this many tokens. */
#define DYB_TRACE_BLOCK 512

typedef struct {
    double t_ms;      /* arrival, ms after the trace's first row (0 in length tables) */
    long in_len;      /* prompt tokens (>= 0) */
    long out_len;     /* output tokens (>= 0) */
    size_t hash_off;  /* this row's hash ids: hashes[hash_off .. hash_off + n_hash) */
    size_t n_hash;
    size_t line;      /* line in the file, for messages and a stable sort */
} dyb_trace_row;

typedef struct {
    dyb_trace_row *rows;
    size_t n, cap;
    uint64_t *hashes;
    size_t n_hashes, hashes_cap;
    const char *format; /* "mooncake", "azure" or "lengths" (static text) */
    bool has_time;     /* rows carry arrival times (traces, not length tables) */
    size_t skipped;    /* bad lines skipped (skip_bad) */
    char first_bad[256]; /* the first skipped line's message */
} dyb_trace;

/* Each reader appends to a zeroed `t`; returns 0, or -1 with "NAME:LINE: problem" in err.
 * `name` is the file name used in messages. Timed traces are sorted by time (stable) and
 * shifted so that the first row arrives at 0. */
int dyb_trace_read_mooncake(FILE *f, const char *name, bool skip_bad, dyb_trace *t, char *err,
                            size_t errlen);
/* Azure CSV: a header naming TIMESTAMP, ContextTokens, GeneratedTokens (any order). */
int dyb_trace_read_azure(FILE *f, const char *name, bool skip_bad, dyb_trace *t, char *err,
                         size_t errlen);
/* A CSV length table; in_col/out_col name the columns (NULL: the first known pair, such as
 * num_prefill_tokens/num_decode_tokens or input_length/output_length). */
int dyb_trace_read_lengths(FILE *f, const char *name, const char *in_col, const char *out_col,
                           bool skip_bad, dyb_trace *t, char *err, size_t errlen);

/* Opens `path` and reads a trace, telling Mooncake JSONL ('{' first) from Azure CSV. */
int dyb_trace_load(const char *path, bool skip_bad, dyb_trace *t, char *err, size_t errlen);
int dyb_lengths_load(const char *path, const char *in_col, const char *out_col, bool skip_bad,
                     dyb_trace *t, char *err, size_t errlen);
void dyb_trace_free(dyb_trace *t);

/* "YYYY-MM-DD HH:MM:SS[.fraction]" (or with 'T'), read as UTC, to ms since the epoch.
 * Returns 0, or -1 if the text is not such a time. */
int dyb_parse_datetime_ms(const char *s, double *ms);

#endif
