/* fuzz_trace.c — libFuzzer target for the workload files `dyad bench` and `dyad sim run` read:
 * `--trace` (Mooncake JSONL or Azure CSV, told apart by the first byte, dyb_trace_load) and
 * `--lengths-csv` (dyb_lengths_load, with or without --input-col / --output-col). The input is
 * the file (an in-memory one, opened by path as the commands do) after one byte that picks:
 *   bit 0: a trace (1) or a length table (0);  bit 1: --skip-bad-lines;
 *   bits 2-3: the column names given for a length table (none, both, only one).
 *
 * Beyond "no crash, no leak": a refused file is an error naming it; a loaded one has rows,
 * lengths in range, hash ids inside the table, a trace sorted by time from 0, a length table
 * in file order without times, and skipped lines only when skipping was asked.
 *   ./build-fuzz/fuzz_trace -max_total_time=600 build-fuzz/corpus-trace fuzz/corpus-trace */
#include "bench/bench_trace.h"
#include "harness.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* The largest token count a trace row may carry (bench_trace.c). */
#define MAX_LEN 100000000L

static const char *const COLUMNS[4][2] = {
    {NULL, NULL}, {"input_length", "output_length"}, {"in", "out"}, {NULL, "output_tokens"}};

static void check_rows(const dyb_trace *t, bool timed, bool skip_bad)
{
    fz_check(t->n >= 1 && t->n <= t->cap, "%zu rows", t->n);
    fz_check(t->has_time == timed, "has_time %d for a %s", t->has_time, t->format);
    fz_check(skip_bad || t->skipped == 0, "lines skipped without --skip-bad-lines");
    fz_check(!t->skipped == !t->first_bad[0], "%zu skipped, first bad '%s'", t->skipped, t->first_bad);
    size_t hashes = 0;
    for (size_t i = 0; i < t->n; i++) {
        const dyb_trace_row *r = &t->rows[i];
        fz_check(r->in_len >= 0 && r->in_len <= MAX_LEN && r->out_len >= 0 && r->out_len <= MAX_LEN,
                 "row %zu: lengths %ld, %ld", i, r->in_len, r->out_len);
        fz_check(r->hash_off <= t->n_hashes && r->n_hash <= t->n_hashes - r->hash_off,
                 "row %zu: hash ids outside the table", i);
        fz_check(r->line >= 1, "row %zu: line %zu", i, r->line);
        fz_check(isfinite(r->t_ms) && r->t_ms >= 0 && (timed || r->t_ms == 0), "row %zu: time %g", i,
                 r->t_ms);
        if (i > 0) {
            const dyb_trace_row *p = &t->rows[i - 1];
            fz_check(!timed || p->t_ms <= r->t_ms, "rows %zu and %zu out of time order", i - 1, i);
            fz_check(timed || p->line < r->line, "length rows %zu and %zu out of file order", i - 1, i);
        }
        hashes += r->n_hash;
    }
    fz_check(!timed || t->rows[0].t_ms == 0, "the trace starts at %g ms", t->rows[0].t_ms);
    fz_check(hashes == t->n_hashes, "rows hold %zu hash ids of %zu", hashes, t->n_hashes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool timed = data[0] & 1, skip_bad = data[0] & 2;
    const char *const *cols = COLUMNS[(data[0] >> 2) & 3];
    char path[64], err[512] = "";
    int fd = fz_memfile(data + 1, size - 1, path);
    if (fd < 0)
        return 0;
    dyb_trace t = {0};
    int rc = timed ? dyb_trace_load(path, skip_bad, &t, err, sizeof err)
                   : dyb_lengths_load(path, cols[0], cols[1], skip_bad, &t, err, sizeof err);
    if (rc == 0)
        check_rows(&t, timed, skip_bad);
    else
        fz_check(!strncmp(err, path, strlen(path)), "the error does not name the file: '%s'", err);
    dyb_trace_free(&t);
    close(fd);
    return 0;
}
