/* bench_stats.c — see bench_stats.h. Owns the collected per-request samples. */
#include "bench/bench_stats.h"
#include "util/buf.h"
#include "util/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dyb_dist dyb_dist_of(double *v, size_t n)
{
    dyb_dist d = {.n = n};
    if (n == 0)
        return d;
    dy_sort_doubles(v, n);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    d.mean = sum / (double)n;
    d.p50 = dy_percentile(v, n, 50);
    d.p90 = dy_percentile(v, n, 90);
    d.p99 = dy_percentile(v, n, 99);
    d.min = v[0];
    d.max = v[n - 1];
    return d;
}

bool dyb_slo_any(const dyb_slo *s)
{
    return s->ttft_ms > 0 || s->tpot_ms > 0 || s->e2e_ms > 0;
}

int dyb_slo_parse(const char *text, dyb_slo *out, char *err, size_t errlen)
{
    *out = (dyb_slo){0};
    char *copy = strdup(text), *save = NULL;
    int rc = copy ? 0 : -1;
    for (char *kv = copy ? strtok_r(copy, ",", &save) : NULL; kv && rc == 0;
         kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '='), *end = NULL;
        double v = eq ? strtod(eq + 1, &end) : 0;
        double *slot = NULL;
        if (eq) {
            *eq = 0;
            slot = !strcmp(kv, "ttft_ms") ? &out->ttft_ms
                 : !strcmp(kv, "tpot_ms") || !strcmp(kv, "itl_ms") ? &out->tpot_ms
                 : !strcmp(kv, "e2e_ms")  ? &out->e2e_ms : NULL;
        }
        if (!slot || end == eq + 1 || *end || !(v > 0) || !isfinite(v)) {
            snprintf(err, errlen, "'%s%s%s' is not ttft_ms=X, tpot_ms=Y (itl_ms=Y) or e2e_ms=Z with a "
                     "positive number", kv, eq ? "=" : "", eq ? eq + 1 : "");
            rc = -1;
        } else
            *slot = v;
    }
    if (rc == 0 && !dyb_slo_any(out)) {
        snprintf(err, errlen, "no objective given");
        rc = -1;
    }
    free(copy);
    return rc;
}

void dyb_stats_init(dyb_stats *s)
{
    *s = (dyb_stats){0};
}

void dyb_stats_free(dyb_stats *s)
{
    free(s->req);
    free(s->itl);
    for (size_t i = 0; i < s->n_errors; i++)
        free(s->errors[i].msg);
    *s = (dyb_stats){0};
}

static void count_error(dyb_stats *s, const char *msg)
{
    s->failed++;
    for (size_t i = 0; i < s->n_errors; i++)
        if (!strcmp(s->errors[i].msg, msg)) {
            s->errors[i].count++;
            return;
        }
    char *m = s->n_errors < DYB_MAX_ERRORS ? strdup(msg) : NULL;
    if (!m) {
        s->other_errors++;
        return;
    }
    s->errors[s->n_errors++] = (dyb_error_count){m, 1};
}

int dyb_stats_add(dyb_stats *s, const dyb_result *r)
{
    if (!r->ok) {
        count_error(s, r->error ? r->error : "unknown error");
        return 0;
    }
    if (!dy_array_reserve((void **)&s->req, &s->cap, s->n_ok + 1, sizeof *s->req) ||
        !dy_array_reserve((void **)&s->itl, &s->itl_cap, s->n_itl + r->n_itl, sizeof *s->itl))
        return -1;
    double tpot = r->output_tokens > 1
                      ? (r->e2e_ms - r->ttft_ms) / (double)(r->output_tokens - 1) : NAN;
    s->req[s->n_ok++] = (dyb_sample){r->ttft_ms, tpot, r->e2e_ms};
    if (r->n_itl)
        memcpy(s->itl + s->n_itl, r->itl, r->n_itl * sizeof *r->itl);
    s->n_itl += r->n_itl;
    s->input_tokens += r->prompt_tokens;
    s->output_tokens += r->output_tokens;
    s->placed += r->placed;
    if (r->kv_moved) {
        s->kv_moved++;
        s->kv_bytes += r->kv_bytes;
        s->kv_ms += r->kv_ms;
        s->kv_ttft_ms += r->ttft_ms;
    }
    return 0;
}

/* A request with one output token has no TPOT; it meets a TPOT objective (as in vLLM). */
static bool meets(const dyb_sample *r, const dyb_slo *slo)
{
    double tpot = isnan(r->tpot) ? 0 : r->tpot;
    return (slo->ttft_ms <= 0 || r->ttft <= slo->ttft_ms) &&
           (slo->tpot_ms <= 0 || tpot <= slo->tpot_ms) &&
           (slo->e2e_ms <= 0 || r->e2e <= slo->e2e_ms);
}

/* Summary of n values spaced `stride` bytes apart (a field of an array of structs, or a plain
 * array), skipping NaN; works on a copy so the samples keep their order. */
static int dist_copy(const void *base, size_t n, size_t stride, dyb_dist *out)
{
    double *c = malloc((n ? n : 1) * sizeof *c);
    if (!c)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, (const char *)base + i * stride, sizeof v);
        if (!isnan(v))
            c[k++] = v;
    }
    *out = dyb_dist_of(c, k);
    free(c);
    return 0;
}

int dyb_stats_summarize(const dyb_stats *s, double duration_s, const dyb_slo *slo, int cores,
                        dyb_summary *out)
{
    *out = (dyb_summary){.completed = (long)s->n_ok, .failed = s->failed,
                         .duration_s = duration_s, .input_tokens = s->input_tokens,
                         .output_tokens = s->output_tokens, .cores = cores};
    double d = duration_s > 0 ? duration_s : INFINITY;
    out->req_per_s = (double)s->n_ok / d;
    out->input_tok_per_s = (double)s->input_tokens / d;
    out->output_tok_per_s = (double)s->output_tokens / d;
    out->output_tok_per_s_per_core = cores > 0 ? out->output_tok_per_s / cores : 0;
    if (slo && dyb_slo_any(slo)) {
        out->has_slo = true;
        for (size_t i = 0; i < s->n_ok; i++)
            out->good += meets(&s->req[i], slo);
        out->goodput = (double)out->good / d;
    }
    const dyb_sample *q = s->req;
    size_t st = sizeof *q;
    if ((q && (dist_copy(&q->ttft, s->n_ok, st, &out->ttft) ||
               dist_copy(&q->tpot, s->n_ok, st, &out->tpot) ||
               dist_copy(&q->e2e, s->n_ok, st, &out->e2e))) ||
        dist_copy(s->itl, s->n_itl, sizeof *s->itl, &out->itl))
        return -1;
    out->tok_per_s_per_user = out->tpot.n && out->tpot.mean > 0 ? 1000.0 / out->tpot.mean : 0;
    out->placed = s->placed;
    out->kv_moved = s->kv_moved;
    out->kv_bytes = s->kv_bytes;
    if (s->kv_moved) {
        out->kv_ms_mean = s->kv_ms / (double)s->kv_moved;
        out->kv_gb_per_s = s->kv_ms > 0 ? s->kv_bytes / (s->kv_ms * 1e6) : 0;
        out->kv_ttft_share = s->kv_ttft_ms > 0 ? s->kv_ms / s->kv_ttft_ms : 0;
    }
    return 0;
}

void dyb_pareto_mark(const double *x, const double *y, size_t n, bool *dominated)
{
    for (size_t i = 0; i < n; i++) {
        dominated[i] = false;
        for (size_t j = 0; j < n && !dominated[i]; j++)
            dominated[i] = x[j] >= x[i] && y[j] >= y[i] && (x[j] > x[i] || y[j] > y[i]);
    }
}
