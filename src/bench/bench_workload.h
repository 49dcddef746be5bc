/* bench_workload.h — what each benchmark request asks for: its prompt (token ids), its output
 * length and, for trace replay, its arrival time. Sources: fixed lengths, a length table
 * (CSV), shared-prefix groups on top of either, or a trace (Mooncake JSONL with prefix blocks,
 * Azure CSV). Request i is a pure function of (config, i): the same seed gives the same
 * prompts whatever the load, and a trace's block hash id always gives the same tokens, so the
 * trace's prefix sharing reaches the server's prefix cache as it was recorded. */
#ifndef DYAD_BENCH_WORKLOAD_H
#define DYAD_BENCH_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/bench_rng.h"

typedef struct {
    long isl, osl;                 /* fixed lengths (when neither table nor trace is given) */
    const char *lengths_csv;       /* length table, sampled per request */
    const char *input_col, *output_col; /* its column names (NULL: known names) */
    const char *trace;             /* Mooncake JSONL or Azure CSV, replayed in order */
    int prefix_groups;             /* > 0: every synthetic request joins one group at random */
    long prefix_len;               /* tokens of each group's shared prefix */
    int vocab_size;                /* ids are drawn from [3, vocab_size): 0..2 are special */
    uint64_t seed;
    double time_scale;             /* trace inter-arrival times are multiplied by this */
    double length_scale;           /* table/trace lengths (and the trace block) are multiplied */
    long max_isl, max_osl;         /* caps after scaling; 0: none */
    bool skip_bad_lines;
} dyb_workload_config;

typedef struct {
    long isl, osl;
    int32_t *tokens; /* isl prompt ids; owned, free with dyb_request_free */
    /* a turn of an agent's conversation (bench_agentic.h): dyad.session, and dyad.hold when
     * `hold` (NULL session: an ordinary request); borrowed */
    const char *session;
    bool hold;
    long hold_ms;
} dyb_request;

typedef struct dyb_workload dyb_workload;

/* Loads the table or trace, if any. NULL with a message in err on a bad input. The config's
 * strings must outlive the workload. */
dyb_workload *dyb_workload_new(const dyb_workload_config *c, char *err, size_t errlen);
void dyb_workload_free(dyb_workload *w);

/* Draws round `round`'s prompts from now on (round 0: the seed's own). A sweep gives each
 * point its own round, so no point finds an earlier point's prompts in the server's prefix
 * cache; sharing inside a round (prefix groups, a trace's blocks) is kept. */
void dyb_workload_set_round(dyb_workload *w, uint64_t round);
/* Number of trace rows, or -1 when requests are generated without end. */
long dyb_workload_rows(const dyb_workload *w);
/* True when rows carry arrival times (trace replay). */
bool dyb_workload_timed(const dyb_workload *w);
/* Trace row `index`'s arrival, ms after the first row, times time_scale. */
double dyb_workload_arrival_ms(const dyb_workload *w, long index);
/* Bad input lines skipped (--skip-bad-lines) and the first one's message ("" if none). */
size_t dyb_workload_skipped(const dyb_workload *w, const char **first_bad);
/* The tokens of one trace block (after length scaling). */
long dyb_workload_block_tokens(const dyb_workload *w);

/* Request `index` (a trace row's index for traces). Warmup requests take the same lengths
 * but fresh tokens, so that they do not fill the server's prefix cache with measured prompts.
 * Returns 0, or -1 when out of memory or past a trace's end. */
int dyb_workload_make(const dyb_workload *w, long index, bool warmup, dyb_request *out);
void dyb_request_free(dyb_request *r);
/* The lengths dyb_workload_make gives request `index` (not a warmup one), without making its
 * tokens. 0, or -1 past a trace's end. */
int dyb_workload_lengths(const dyb_workload *w, long index, long *isl, long *osl);

/* One line saying what the workload is (for reports). */
void dyb_workload_describe(const dyb_workload *w, char *buf, size_t n);

/* n ids from [3, vocab) drawn from r: a block's tokens come from a stream keyed by its hash
 * id, so a truncated block is a prefix of the full one. */
void dyb_fill_tokens(dyb_rng *r, int32_t *dst, long n, int vocab);

#endif
