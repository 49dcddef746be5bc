/* cmd_plan_predict.c — `dyad plan predict`: how well each load predictor (plan/predict.h)
 * would have forecast a trace. The trace's requests are counted into intervals; per interval
 * the request rate, the mean prompt length and the mean output length are three series, and
 * every predictor forecasts each series one interval ahead from what came before. The error
 * is the weighted absolute percentage error (Σ|forecast − actual| / Σ actual over the
 * intervals after the first); the best predictor per series is the one a planner should use
 * on such traffic. */
#include "bench/bench_workload.h"
#include "cli/commands.h"
#include "cli/parse.h"
#include "plan/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char predict_usage[] =
    "usage: dyad plan predict --trace FILE [--interval S] [options]\n"
    "How well each load predictor would have forecast the trace's request rate, mean prompt\n"
    "length and mean output length one interval ahead (weighted absolute percentage error).\n";

#define N_SERIES 3
static const char *const series_names[N_SERIES] = {"rate", "isl", "osl"};

/* The predictors compared: each method with a few settings. */
static const dy_predict_config candidates[] = {
    {.kind = DY_PREDICT_LAST},
    {.kind = DY_PREDICT_MEAN, .window = 3},
    {.kind = DY_PREDICT_MEAN, .window = 10},
    {.kind = DY_PREDICT_HOLT, .alpha = 0.5, .beta = 0.1},
    {.kind = DY_PREDICT_HOLT, .alpha = 0.3, .beta = 0.05},
    {.kind = DY_PREDICT_KALMAN, .q = 0.01, .r = 1},
    {.kind = DY_PREDICT_KALMAN, .q = 0.1, .r = 1},
};
#define N_CANDIDATES (int)(sizeof candidates / sizeof candidates[0])

typedef struct {
    double count, isl, osl; /* requests and their summed lengths */
} interval;

static void label(const dy_predict_config *c, char *out, size_t cap)
{
    switch (c->kind) {
    case DY_PREDICT_MEAN: snprintf(out, cap, "mean w=%d", c->window); break;
    case DY_PREDICT_HOLT: snprintf(out, cap, "holt a=%g b=%g", c->alpha, c->beta); break;
    case DY_PREDICT_KALMAN: snprintf(out, cap, "kalman q/r=%g", c->q / c->r); break;
    default: snprintf(out, cap, "%s", dy_predict_name(c->kind));
    }
}

/* The trace counted into intervals of width_s; NULL after a message. */
static interval *bin_trace(const dyb_workload *wl, double width_s, long *n_out)
{
    long rows = dyb_workload_rows(wl);
    double last_ms = rows > 0 ? dyb_workload_arrival_ms(wl, rows - 1) : 0;
    long n = (long)(last_ms / 1000 / width_s) + 1;
    if (rows < 1 || n < 3) {
        fprintf(stderr, "dyad plan predict: the trace spans fewer than 3 intervals of %g s\n",
                width_s);
        return NULL;
    }
    interval *iv = calloc((size_t)n, sizeof *iv);
    for (long i = 0; iv && i < rows; i++) {
        long isl, osl;
        long k = (long)(dyb_workload_arrival_ms(wl, i) / 1000 / width_s);
        if (dyb_workload_lengths(wl, i, &isl, &osl) != 0 || k < 0 || k >= n) {
            fprintf(stderr, "dyad plan predict: row %ld has no lengths or time\n", i + 1);
            free(iv);
            return NULL;
        }
        iv[k].count++;
        iv[k].isl += (double)isl;
        iv[k].osl += (double)osl;
    }
    if (!iv)
        fprintf(stderr, "dyad plan predict: out of memory\n");
    *n_out = n;
    return iv;
}

/* Series s of interval k; the mean lengths of an empty interval are those of the last one
 * that had requests (a planner sees no new lengths then). */
static double value_of(const interval *iv, long k, int s, double width_s, double *held)
{
    if (s == 0)
        return iv[k].count / width_s;
    if (iv[k].count > 0)
        held[s] = (s == 1 ? iv[k].isl : iv[k].osl) / iv[k].count;
    return held[s];
}

/* The weighted absolute percentage error of predictor c on every series. */
static void score(const dy_predict_config *c, const interval *iv, long n, double width_s,
                  double *wape)
{
    dy_predictor p[N_SERIES];
    double abs_err[N_SERIES] = {0}, total[N_SERIES] = {0}, held[N_SERIES] = {0};
    for (int s = 0; s < N_SERIES; s++)
        dy_predict_init(&p[s], c);
    for (long k = 0; k < n; k++)
        for (int s = 0; s < N_SERIES; s++) {
            double x = value_of(iv, k, s, width_s, held);
            if (k > 0) {
                abs_err[s] += fabs(dy_predict_next(&p[s]) - x);
                total[s] += x;
            }
            dy_predict_observe(&p[s], x);
        }
    for (int s = 0; s < N_SERIES; s++)
        wape[s] = total[s] > 0 ? abs_err[s] / total[s] : 0;
}

int cmd_plan_predict(int argc, char **argv)
{
    dyb_workload_config w = {.vocab_size = 32000, .time_scale = 1, .length_scale = 1};
    double width_s = 60;
    const dy_opt t[] = {
        {.name = "trace", .kind = DY_OPT_STR, .dst = &w.trace, .meta = "FILE",
         .help = "a Mooncake JSONL or Azure CSV trace, as `dyad bench --trace` reads (required)"},
        {.name = "interval", .kind = DY_OPT_DOUBLE, .dst = &width_s, .meta = "S",
         .help = "the planner's interval in seconds", .min = 0.001, .max = 1e6, .def = 60},
        {.name = "time-scale", .kind = DY_OPT_DOUBLE, .dst = &w.time_scale, .meta = "X",
         .help = "multiply the trace's times by X", .min = 1e-6, .max = 1e6, .def = 1},
        {.name = "skip-bad-lines", .kind = DY_OPT_FLAG, .dst = &w.skip_bad_lines,
         .help = "skip malformed trace rows instead of failing"},
    };
    int rc = cli_parse("plan predict", predict_usage, NULL, t, (int)(sizeof t / sizeof t[0]),
                       argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    if (!w.trace) {
        fprintf(stderr, "dyad plan predict: --trace: required (see dyad plan predict --help)\n");
        return 2;
    }
    char err[1024];
    dyb_workload *wl = dyb_workload_new(&w, err, sizeof err);
    if (!wl) {
        fprintf(stderr, "dyad plan predict: %s\n", err);
        return 1;
    }
    long n = 0;
    interval *iv = bin_trace(wl, width_s, &n);
    dyb_workload_free(wl);
    if (!iv)
        return 1;
    double wape[N_CANDIDATES][N_SERIES];
    int best[N_SERIES] = {0};
    for (int i = 0; i < N_CANDIDATES; i++) {
        score(&candidates[i], iv, n, width_s, wape[i]);
        for (int s = 0; s < N_SERIES; s++)
            if (wape[i][s] < wape[best[s]][s])
                best[s] = i;
    }
    free(iv);
    printf("%s: %ld intervals of %g s; one-interval-ahead error, weighted absolute %%\n\n",
           w.trace, n, width_s);
    printf("| predictor | rate | isl | osl |\n|---|---|---|---|\n");
    for (int i = 0; i < N_CANDIDATES; i++) {
        char name[48];
        label(&candidates[i], name, sizeof name);
        printf("| %s |", name);
        for (int s = 0; s < N_SERIES; s++)
            printf(" %.1f%s |", 100 * wape[i][s], best[s] == i ? " (best)" : "");
        printf("\n");
    }
    for (int s = 0; s < N_SERIES; s++) {
        char name[48];
        label(&candidates[best[s]], name, sizeof name);
        printf("%sbest for %s: %s", s ? "; " : "\n", series_names[s], name);
    }
    printf("\n");
    return 0;
}
