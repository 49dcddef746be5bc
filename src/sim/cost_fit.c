/* cost_fit.c — a measured cost model from `dyad bench engine --json`: every point the
 * benchmark reports becomes a step shape and a time, and the five coefficients of
 *   ms = fixed + a·prefill_tokens + b·prefill_context + c·decode_seqs + d·decode_context
 * are fitted by least squares on relative error (a 0.1 ms decode step counts as much as a
 * 100 ms prefill), with no coefficient below zero (a negative cost is a fit artefact). The
 * transfer link comes from `dyad bench xfer --json` (dy_cost_read_xfer). */
#include "sim/cost.h"
#include "sim/cost_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_TERMS 5
#define MAX_POINTS 256

typedef struct {
    double x[MAX_POINTS][N_TERMS];
    double y[MAX_POINTS]; /* ms */
    int n;
} points;

static void add_point(points *p, const dy_step_shape *s, double ms)
{
    if (p->n == MAX_POINTS)
        return;
    double *x = p->x[p->n];
    x[0] = 1;
    x[1] = s->prefill_tokens;
    x[2] = (double)s->prefill_context;
    x[3] = s->decode_seqs;
    x[4] = (double)s->decode_context;
    p->y[p->n++] = ms;
}

/* Reads one array of the bench object: each element's `key` gives the shape, `ms_key` the
 * time. */
typedef void (*shape_of)(int value, int batch_context, dy_step_shape *s);

static void prefill_shape(int p, int unused, dy_step_shape *s)
{
    (void)unused;
    /* A fresh prompt of p tokens: token i attends to positions 0..i. */
    *s = (dy_step_shape){.prefill_tokens = p, .prefill_context = (int64_t)p * (p + 1) / 2};
}

static void decode_shape(int context, int unused, dy_step_shape *s)
{
    (void)unused;
    *s = (dy_step_shape){.decode_seqs = 1, .decode_context = context};
}

static void batch_shape(int b, int batch_context, dy_step_shape *s)
{
    *s = (dy_step_shape){.decode_seqs = b, .decode_context = (int64_t)b * batch_context};
}

static int read_points(const json_t *bench, const char *array, const char *key,
                       const char *ms_key, shape_of shape, int batch_context, points *p,
                       const char *path, char *err, size_t errlen)
{
    const json_t *a = json_object_get(bench, array);
    if (!json_is_array(a)) {
        snprintf(err, errlen, "%s: %s: missing or not an array", path, array);
        return -1;
    }
    size_t i;
    const json_t *e;
    json_array_foreach(a, i, e) {
        const json_t *k = json_object_get(e, key), *t = json_object_get(e, ms_key);
        if (!json_is_integer(k) || json_integer_value(k) < 1 || !json_is_number(t) ||
            json_number_value(t) <= 0) {
            snprintf(err, errlen, "%s: %s[%zu]: needs an integer %s >= 1 and a number %s > 0",
                     path, array, i, key, ms_key);
            return -1;
        }
        dy_step_shape s;
        shape((int)json_integer_value(k), batch_context, &s);
        add_point(p, &s, json_number_value(t));
    }
    return 0;
}

/* Solves the n×n system a·c = b in place (Gaussian elimination, partial pivoting); -1 if it
 * is singular. */
static int solve(double a[N_TERMS][N_TERMS], double *b, int n, double *c)
{
    for (int col = 0; col < n; col++) {
        int piv = col;
        for (int r = col + 1; r < n; r++)
            if (fabs(a[r][col]) > fabs(a[piv][col]))
                piv = r;
        if (fabs(a[piv][col]) < 1e-12)
            return -1;
        for (int k = 0; k < n; k++) {
            double t = a[col][k];
            a[col][k] = a[piv][k];
            a[piv][k] = t;
        }
        double t = b[col];
        b[col] = b[piv];
        b[piv] = t;
        for (int r = col + 1; r < n; r++) {
            double f = a[r][col] / a[col][col];
            for (int k = col; k < n; k++)
                a[r][k] -= f * a[col][k];
            b[r] -= f * b[col];
        }
    }
    for (int r = n - 1; r >= 0; r--) {
        double s = b[r];
        for (int k = r + 1; k < n; k++)
            s -= a[r][k] * c[k];
        c[r] = s / a[r][r];
    }
    return 0;
}

/* Weighted least squares over the terms marked in `on`; the others stay 0. Each column is
 * scaled to unit maximum first so that the normal equations stay well conditioned (the
 * context terms are orders of magnitude larger than the counts). */
static int fit_terms(const points *p, const bool *on, double *coef)
{
    int idx[N_TERMS], n = 0;
    double scale[N_TERMS];
    for (int j = 0; j < N_TERMS; j++) {
        coef[j] = 0;
        if (!on[j])
            continue;
        scale[n] = 0;
        for (int i = 0; i < p->n; i++)
            scale[n] = fmax(scale[n], fabs(p->x[i][j]));
        if (scale[n] == 0)
            return -1; /* no point exercises this term */
        idx[n++] = j;
    }
    double a[N_TERMS][N_TERMS] = {{0}}, b[N_TERMS] = {0}, c[N_TERMS];
    for (int i = 0; i < p->n; i++) {
        const double w = 1 / (p->y[i] * p->y[i]);
        for (int r = 0; r < n; r++) {
            const double xr = p->x[i][idx[r]] / scale[r];
            b[r] += w * xr * p->y[i];
            for (int k = 0; k < n; k++)
                a[r][k] += w * xr * p->x[i][idx[k]] / scale[k];
        }
    }
    if (solve(a, b, n, c) != 0)
        return -1;
    for (int r = 0; r < n; r++)
        coef[idx[r]] = c[r] / scale[r];
    return 0;
}

/* Drops the most negative term and refits until none is negative (an active-set descent
 * toward the non-negative least-squares solution). */
static int fit_nonnegative(const points *p, double *coef)
{
    bool on[N_TERMS] = {true, true, true, true, true};
    for (int round = 0; round < N_TERMS; round++) {
        if (fit_terms(p, on, coef) != 0)
            return -1;
        int worst = -1;
        for (int j = 0; j < N_TERMS; j++)
            if (coef[j] < 0 && (worst < 0 || coef[j] < coef[worst]))
                worst = j;
        if (worst < 0)
            return 0;
        on[worst] = false;
    }
    return -1;
}

static const json_t *find_bench(json_t *const *objs, int n, const char *model)
{
    for (int i = 0; i < n; i++) {
        const json_t *m = json_object_get(objs[i], "model");
        if (!model || (json_is_string(m) && !strcmp(json_string_value(m), model)))
            return objs[i];
    }
    return NULL;
}

/* The benchmark file: one JSON object per line (the machine line of the text report is not
 * there with --json). */
static int read_bench_lines(const char *path, json_t **objs, int max, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open", path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int n = 0, lineno = 0, rc = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line))
            continue;
        json_error_t jerr;
        json_t *o = json_loads(line, 0, &jerr);
        if (!json_is_object(o) || n == max) {
            snprintf(err, errlen, "%s: line %d: %s", path, lineno,
                     o ? "not one bench object" : jerr.text);
            json_decref(o);
            rc = -1;
            break;
        }
        objs[n++] = o;
    }
    free(line);
    fclose(f);
    if (rc == 0 && n == 0) {
        snprintf(err, errlen, "%s: no benchmark objects", path);
        rc = -1;
    }
    if (rc != 0)
        for (int i = 0; i < n; i++)
            json_decref(objs[i]);
    return rc ? -1 : n;
}

static int bench_int(const json_t *b, const char *key, int64_t *v, const char *path, char *err,
                     size_t errlen)
{
    const json_t *j = json_object_get(b, key);
    if (!json_is_integer(j) || json_integer_value(j) < 1) {
        snprintf(err, errlen, "%s: %s: must be an integer >= 1", path, key);
        return -1;
    }
    *v = json_integer_value(j);
    return 0;
}

static int fill_model(dy_cost_model *m, const json_t *bench, const dy_cost_fit_opts *o,
                      const double *coef, const char *path, char *err, size_t errlen)
{
    int64_t threads, kvb;
    if (bench_int(bench, "threads", &threads, path, err, errlen) != 0 ||
        bench_int(bench, "kv_bytes_per_token", &kvb, path, err, errlen) != 0)
        return -1;
    const char *model = json_string_value(json_object_get(bench, "model"));
    char name[256], source[512];
    snprintf(name, sizeof name, "%s-%dt", model ? model : "model", (int)threads);
    if (o->source)
        snprintf(source, sizeof source, "%s", o->source);
    else
        snprintf(source, sizeof source, "fitted by dy_cost_fit from %s", path);
    m->kind = DY_COST_MEASURED;
    m->name = strdup(o->name ? o->name : name);
    m->engine.model = strdup(model ? model : "model");
    m->engine.source = strdup(source);
    m->engine.threads = (int)threads;
    m->engine.fixed_ms = coef[0];
    m->engine.prefill_ms_per_token = coef[1];
    m->engine.prefill_ms_per_context = coef[2];
    m->engine.decode_ms_per_seq = coef[3];
    m->engine.decode_ms_per_context = coef[4];
    m->kv.bytes_per_token = kvb;
    m->kv.capacity_tokens = o->kv_capacity_tokens > 0 ? o->kv_capacity_tokens
                                                      : o->kv_mem_bytes / (kvb > 0 ? kvb : 1);
    if (m->kv.capacity_tokens < 1) {
        snprintf(err, errlen, "%s: kv_mem_bytes holds no token of this model's KV", path);
        return -1;
    }
    m->xfer.backend = strdup(o->xfer_backend ? o->xfer_backend : "tcp");
    m->xfer.source = strdup("given to dy_cost_fit (dyad bench xfer)");
    m->xfer.gbps = o->xfer_gbps;
    m->xfer.latency_us = o->xfer_latency_us;
    if (!m->name || !m->engine.model || !m->engine.source || !m->xfer.backend ||
        !m->xfer.source) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    return 0;
}

static int check_opts(const dy_cost_fit_opts *o, char *err, size_t errlen)
{
    if ((o->kv_capacity_tokens < 1 && o->kv_mem_bytes < 1) || !(o->xfer_gbps > 0) ||
        !(o->xfer_latency_us >= 0)) {
        snprintf(err, errlen, "fit: needs kv_capacity_tokens or kv_mem_bytes >= 1, xfer_gbps > 0 "
                              "and xfer_latency_us >= 0");
        return -1;
    }
    return 0;
}

dy_cost_model *dy_cost_fit(const char *path, const dy_cost_fit_opts *o, char *err,
                           size_t errlen)
{
    if (check_opts(o, err, errlen) != 0)
        return NULL;
    json_t *objs[64];
    int n = read_bench_lines(path, objs, 64, err, errlen);
    if (n < 0)
        return NULL;
    dy_cost_model *m = NULL;
    points *p = calloc(1, sizeof *p);
    const json_t *b = find_bench(objs, n, o->model);
    int64_t batch_ctx = 0;
    double coef[N_TERMS];
    if (!p) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (!b) {
        snprintf(err, errlen, "%s: no benchmark of model %s", path, o->model);
        goto out;
    }
    if (bench_int(b, "batch_context", &batch_ctx, path, err, errlen) != 0 ||
        read_points(b, "prefill", "p", "ms", prefill_shape, 0, p, path, err, errlen) != 0 ||
        read_points(b, "decode", "context", "ms_per_token", decode_shape, 0, p, path, err,
                    errlen) != 0 ||
        read_points(b, "batch", "b", "ms", batch_shape, (int)batch_ctx, p, path, err,
                    errlen) != 0)
        goto out;
    if (p->n < N_TERMS || fit_nonnegative(p, coef) != 0) {
        snprintf(err, errlen, "%s: too few distinct points to fit %d coefficients", path,
                 N_TERMS);
        goto out;
    }
    if (!(m = calloc(1, sizeof *m))) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (fill_model(m, b, o, coef, path, err, errlen) != 0) {
        dy_cost_free(m);
        m = NULL;
    }
out:
    free(p);
    for (int i = 0; i < n; i++)
        json_decref(objs[i]);
    return m;
}

int dy_cost_read_xfer(const char *path, const char *backend, double *gbps, double *latency_us,
                      char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        snprintf(err, errlen, "%s: %s", path, jerr.text);
        return -1;
    }
    int rc = -1;
    size_t i;
    const json_t *b;
    json_array_foreach(json_object_get(root, "backends"), i, b) {
        const json_t *name = json_object_get(b, "backend");
        if (!json_is_string(name) || strcmp(json_string_value(name), backend))
            continue;
        const json_t *g = json_object_get(b, "gbps"), *l = json_object_get(b, "latency_us");
        if (!json_is_number(g) || json_number_value(g) <= 0 || !json_is_number(l) ||
            json_number_value(l) < 0) {
            snprintf(err, errlen, "%s: backends[%zu]: needs gbps > 0 and latency_us >= 0", path,
                     i);
            break;
        }
        *gbps = json_number_value(g);
        *latency_us = json_number_value(l);
        rc = 0;
        break;
    }
    if (rc != 0 && i == json_array_size(json_object_get(root, "backends")))
        snprintf(err, errlen, "%s: backends: no \"%s\"", path, backend);
    json_decref(root);
    return rc;
}

/* ---- the token overhead from a real run ------------------------------------------------- */

/* A number of the report, > 0 (a nested key as "tpot_ms.mean"). */
static int report_number(const json_t *r, const char *key, const char *sub, double *v,
                         const char *path, char *err, size_t errlen)
{
    const json_t *j = json_object_get(r, key);
    if (sub)
        j = json_object_get(j, sub);
    if (!json_is_number(j) || !(json_number_value(j) > 0)) {
        snprintf(err, errlen, "%s: %s%s%s: must be a number > 0", path, key, sub ? "." : "",
                 sub ? sub : "");
        return -1;
    }
    *v = json_number_value(j);
    return 0;
}

double dy_cost_set_token_overhead(dy_cost_model *m, const char *path, char *err, size_t errlen)
{
    if (m->kind != DY_COST_MEASURED) {
        snprintf(err, errlen, "%s: a roofline model has no measured token overhead", m->name);
        return -1;
    }
    json_t *objs[64];
    int n = read_bench_lines(path, objs, 64, err, errlen);
    if (n < 0)
        return -1;
    const json_t *r = objs[n - 1];
    double completed, in, out, tpot;
    double result = -1;
    if (report_number(r, "completed", NULL, &completed, path, err, errlen) == 0 &&
        report_number(r, "input_tokens", NULL, &in, path, err, errlen) == 0 &&
        report_number(r, "output_tokens", NULL, &out, path, err, errlen) == 0 &&
        report_number(r, "tpot_ms", "mean", &tpot, path, err, errlen) == 0) {
        const int64_t isl = (int64_t)llround(in / completed);
        const int64_t osl = (int64_t)llround(out / completed);
        /* The engine's own TPOT for one sequence: the mean decode step after the first token. */
        double engine_ms = 0;
        for (int64_t k = 1; k < osl; k++) {
            dy_step_shape s = {.decode_seqs = 1, .decode_context = isl + k + 1};
            engine_ms += dy_cost_step_seconds(m, &s) * 1e3;
        }
        engine_ms = osl > 1 ? engine_ms / (double)(osl - 1) : 0;
        const double before = m->engine.token_overhead_ms;
        result = tpot - (engine_ms - before) > 0 ? tpot - (engine_ms - before) : 0;
        m->engine.token_overhead_ms = result;
    }
    for (int i = 0; i < n; i++)
        json_decref(objs[i]);
    return result;
}
