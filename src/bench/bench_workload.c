/* bench_workload.c — see bench_workload.h. Owns the loaded table/trace rows and the rules that
 * turn a row (or a seed) into lengths and token ids. */
#include "bench/bench_workload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_trace.h"

/* The first ids of common vocabularies (llama: <unk> <s> </s>) are control tokens; a prompt
 * made of them would not be a plain prompt. */
#define FIRST_ID 3

struct dyb_workload {
    dyb_workload_config c;
    uint64_t seed;      /* c.seed, moved on for each sweep point (dyb_workload_set_round) */
    dyb_trace rows;     /* length table or trace; empty for fixed lengths */
    bool table, trace;
    long block_tokens;  /* trace block size after length scaling */
};

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

dyb_workload *dyb_workload_new(const dyb_workload_config *c, char *err, size_t errlen)
{
    dyb_workload *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->c = *c;
    w->seed = c->seed;
    w->trace = c->trace != NULL;
    w->table = !w->trace && c->lengths_csv != NULL;
    long bt = lround(DYB_TRACE_BLOCK * c->length_scale);
    w->block_tokens = bt < 1 ? 1 : bt;
    int rc = 0;
    if (w->trace)
        rc = dyb_trace_load(c->trace, c->skip_bad_lines, &w->rows, err, errlen);
    else if (w->table)
        rc = dyb_lengths_load(c->lengths_csv, c->input_col, c->output_col, c->skip_bad_lines,
                              &w->rows, err, errlen);
    if (rc != 0) {
        dyb_workload_free(w);
        return NULL;
    }
    return w;
}

void dyb_workload_free(dyb_workload *w)
{
    if (!w)
        return;
    dyb_trace_free(&w->rows);
    free(w);
}

void dyb_workload_set_round(dyb_workload *w, uint64_t round)
{
    w->seed = w->c.seed + round * 0x9e3779b97f4a7c15ull;
}

long dyb_workload_rows(const dyb_workload *w)
{
    return w->trace ? (long)w->rows.n : -1;
}

bool dyb_workload_timed(const dyb_workload *w)
{
    return w->trace && w->rows.has_time;
}

double dyb_workload_arrival_ms(const dyb_workload *w, long index)
{
    if (!w->trace || index < 0 || (size_t)index >= w->rows.n)
        return 0;
    return w->rows.rows[index].t_ms * w->c.time_scale;
}

size_t dyb_workload_skipped(const dyb_workload *w, const char **first_bad)
{
    if (first_bad)
        *first_bad = w->rows.first_bad;
    return w->rows.skipped;
}

long dyb_workload_block_tokens(const dyb_workload *w)
{
    return w->block_tokens;
}

void dyb_fill_tokens(dyb_rng *r, int32_t *dst, long n, int vocab)
{
    for (long i = 0; i < n; i++)
        dst[i] = FIRST_ID + (int32_t)dyb_rng_below(r, (uint64_t)(vocab - FIRST_ID));
}

/* A table/trace length after scaling and capping; at least 1 (a request needs a prompt token
 * and max_tokens >= 1). */
static long scaled(const dyb_workload *w, long len, long cap)
{
    long v = lround((double)len * w->c.length_scale);
    if (cap > 0 && v > cap)
        v = cap;
    return v < 1 ? 1 : v;
}

static void capped_fixed(const dyb_workload *w, long *isl, long *osl)
{
    *isl = w->c.isl;
    *osl = w->c.osl;
    if (w->c.max_isl > 0 && *isl > w->c.max_isl)
        *isl = w->c.max_isl;
    if (w->c.max_osl > 0 && *osl > w->c.max_osl)
        *osl = w->c.max_osl;
}

/* Trace row prompt: each hash id's block, in order, truncated at isl; tokens past the listed
 * blocks (when rounding made the prompt longer) are the request's own. */
static void trace_tokens(const dyb_workload *w, const dyb_trace_row *row, long index,
                         dyb_request *out)
{
    long pos = 0;
    const uint64_t *h = w->rows.hashes + row->hash_off;
    for (size_t j = 0; j < row->n_hash && pos < out->isl; j++) {
        long n = out->isl - pos < w->block_tokens ? out->isl - pos : w->block_tokens;
        dyb_rng r = dyb_rng_keyed(w->seed, DYB_DOMAIN_BLOCK, h[j]);
        dyb_fill_tokens(&r, out->tokens + pos, n, w->c.vocab_size);
        pos += n;
    }
    dyb_rng r = dyb_rng_keyed(w->seed, DYB_DOMAIN_REQUEST, (uint64_t)index);
    dyb_fill_tokens(&r, out->tokens + pos, out->isl - pos, w->c.vocab_size);
}

/* Synthetic prompt: the group's prefix (if any), then the request's own tokens. */
static void synthetic_tokens(const dyb_workload *w, dyb_rng *r, bool warmup, dyb_request *out)
{
    long pos = 0;
    if (w->c.prefix_groups > 0 && !warmup) {
        uint64_t g = dyb_rng_below(r, (uint64_t)w->c.prefix_groups);
        dyb_rng gr = dyb_rng_keyed(w->seed, DYB_DOMAIN_GROUP, g);
        pos = w->c.prefix_len < out->isl ? w->c.prefix_len : out->isl;
        dyb_fill_tokens(&gr, out->tokens, pos, w->c.vocab_size);
    }
    dyb_fill_tokens(r, out->tokens + pos, out->isl - pos, w->c.vocab_size);
}

/* Request index's lengths, and its row when it has one, drawing from r as its tokens will. */
static const dyb_trace_row *lengths_of(const dyb_workload *w, long index, dyb_rng *r,
                                       long *isl, long *osl)
{
    const dyb_trace_row *row = NULL;
    if (w->trace)
        row = &w->rows.rows[(size_t)index % w->rows.n];
    else if (w->table)
        row = &w->rows.rows[dyb_rng_below(r, w->rows.n)];
    if (row) {
        *isl = scaled(w, row->in_len, w->c.max_isl);
        *osl = scaled(w, row->out_len, w->c.max_osl);
    } else
        capped_fixed(w, isl, osl);
    return row;
}

int dyb_workload_lengths(const dyb_workload *w, long index, long *isl, long *osl)
{
    if (index < 0 || (w->trace && (size_t)index >= w->rows.n))
        return -1;
    dyb_rng r = dyb_rng_keyed(w->seed, DYB_DOMAIN_REQUEST, (uint64_t)index);
    lengths_of(w, index, &r, isl, osl);
    return 0;
}

int dyb_workload_make(const dyb_workload *w, long index, bool warmup, dyb_request *out)
{
    *out = (dyb_request){0};
    if (index < 0 || (w->trace && !warmup && (size_t)index >= w->rows.n))
        return -1;
    dyb_rng r = dyb_rng_keyed(w->seed, warmup ? DYB_DOMAIN_WARMUP : DYB_DOMAIN_REQUEST,
                              (uint64_t)index);
    const dyb_trace_row *row = lengths_of(w, index, &r, &out->isl, &out->osl);
    if (!(out->tokens = malloc(sizeof(int32_t) * (size_t)out->isl)))
        return -1;
    if (w->trace && !warmup)
        trace_tokens(w, row, index, out);
    else
        synthetic_tokens(w, &r, warmup, out);
    return 0;
}

void dyb_request_free(dyb_request *r)
{
    free(r->tokens);
    r->tokens = NULL;
}

static size_t describe_source(const dyb_workload *w, char *buf, size_t n)
{
    const dyb_workload_config *c = &w->c;
    if (w->trace)
        return (size_t)snprintf(buf, n, "%s trace %s (%zu requests, time x%g, length x%g)",
                                w->rows.format, base_name(c->trace), w->rows.n, c->time_scale,
                                c->length_scale);
    if (w->table)
        return (size_t)snprintf(buf, n, "lengths from %s (%zu rows, length x%g)",
                                base_name(c->lengths_csv), w->rows.n, c->length_scale);
    return (size_t)snprintf(buf, n, "fixed isl=%ld osl=%ld", c->isl, c->osl);
}

void dyb_workload_describe(const dyb_workload *w, char *buf, size_t n)
{
    const dyb_workload_config *c = &w->c;
    size_t k = describe_source(w, buf, n);
    if (k < n && c->prefix_groups > 0 && !w->trace)
        k += (size_t)snprintf(buf + k, n - k, ", %d prefix groups of %ld tokens",
                              c->prefix_groups, c->prefix_len);
    if (k < n && c->max_isl > 0)
        k += (size_t)snprintf(buf + k, n - k, ", isl<=%ld", c->max_isl);
    if (k < n && c->max_osl > 0)
        k += (size_t)snprintf(buf + k, n - k, ", osl<=%ld", c->max_osl);
    if (k < n)
        snprintf(buf + k, n - k, ", vocab %d", c->vocab_size);
}
