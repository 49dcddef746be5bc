/* bench_report.c — see bench_report.h. Owns the formats: text layout, JSON field names, CSV
 * columns, SVG geometry. */
#include "bench/bench_report.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void dyb_point_take_errors(dyb_point *p, const dyb_stats *s)
{
    p->n_errors = 0;
    for (size_t i = 0; i < s->n_errors; i++) {
        char *m = strdup(s->errors[i].msg);
        if (m)
            p->errors[p->n_errors++] = (dyb_error_count){m, s->errors[i].count};
    }
    p->other_errors = s->other_errors;
}

void dyb_point_free(dyb_point *p)
{
    for (size_t i = 0; i < p->n_errors; i++)
        free(p->errors[i].msg);
    p->n_errors = 0;
}

void dyb_points_mark_pareto(dyb_point *pts, size_t n)
{
    double *x = calloc(n ? n : 1, sizeof *x), *y = calloc(n ? n : 1, sizeof *y);
    bool *d = calloc(n ? n : 1, sizeof *d);
    if (x && y && d) {
        for (size_t i = 0; i < n; i++) {
            x[i] = pts[i].sum.tok_per_s_per_user;
            y[i] = pts[i].sum.output_tok_per_s_per_core;
        }
        dyb_pareto_mark(x, y, n, d);
        for (size_t i = 0; i < n; i++)
            pts[i].dominated = d[i];
    }
    free(x);
    free(y);
    free(d);
}

/* ---- text ------------------------------------------------------------------------------------ */

static void load_text(const dyb_point *p, char *buf, size_t n)
{
    if (p->rate > 0)
        snprintf(buf, n, "open loop, %g req/s, burstiness %g%s", p->rate, p->burstiness,
                 p->burstiness == 1 ? " (Poisson)" : "");
    else if (!strcmp(p->mode, "trace replay"))
        snprintf(buf, n, "trace replay at the trace's (scaled) times");
    else
        snprintf(buf, n, "closed loop, %d in flight", p->concurrency);
    if (p->concurrency > 0 && (p->rate > 0 || !strcmp(p->mode, "trace replay")))
        snprintf(buf + strlen(buf), n - strlen(buf), ", at most %d in flight", p->concurrency);
}

static void dist_line(FILE *f, const char *name, const dyb_dist *d)
{
    if (d->n == 0)
        fprintf(f, "  %-6s %10s %10s %10s %10s\n", name, "-", "-", "-", "-");
    else
        fprintf(f, "  %-6s %10.2f %10.2f %10.2f %10.2f\n", name, d->mean, d->p50, d->p90,
                d->p99);
}

static void slo_text(const dyb_slo *s, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    if (s->ttft_ms > 0 && k < n)
        k += (size_t)snprintf(buf + k, n - k, " ttft<=%gms", s->ttft_ms);
    if (s->tpot_ms > 0 && k < n)
        k += (size_t)snprintf(buf + k, n - k, " tpot<=%gms", s->tpot_ms);
    if (s->e2e_ms > 0 && k < n)
        snprintf(buf + k, n - k, " e2e<=%gms", s->e2e_ms);
}

static void errors_text(FILE *f, const dyb_point *p)
{
    for (size_t i = 0; i < p->n_errors; i++)
        fprintf(f, "%-13s %ldx %s\n", i ? "" : "errors", p->errors[i].count, p->errors[i].msg);
    if (p->other_errors)
        fprintf(f, "%-13s %ldx other errors\n", "", p->other_errors);
}

void dyb_report_text(FILE *f, const dyb_run_info *ri, const dyb_point *p)
{
    const dyb_summary *s = &p->sum;
    char load[160], slo[96];
    load_text(p, load, sizeof load);
    fprintf(f, "\n== dyad bench: %s%s\n", p->label, p->interrupted ? " (interrupted)" : "");
    fprintf(f, "server        %s, model %s\n", ri->url, ri->model);
    fprintf(f, "workload      %s, seed %llu\n", ri->workload, (unsigned long long)ri->seed);
    fprintf(f, "load          %s\n", load);
    fprintf(f, "requests      %ld completed, %ld failed", s->completed, s->failed);
    if (p->warmup)
        fprintf(f, " (after %ld warmup requests, not counted)", p->warmup);
    fprintf(f, "\nduration      %.2f s\n", s->duration_s);
    fprintf(f, "throughput    %.3f req/s, input %.1f tok/s, output %.1f tok/s\n", s->req_per_s,
            s->input_tok_per_s, s->output_tok_per_s);
    fprintf(f, "tokens        %ld input, %ld output\n", s->input_tokens, s->output_tokens);
    fprintf(f, "per core      %.2f output tok/s per core (%d cores)\n",
            s->output_tok_per_s_per_core, s->cores);
    fprintf(f, "per user      %.2f tok/s per user (1000 / mean TPOT)\n", s->tok_per_s_per_user);
    if (s->has_slo) {
        slo_text(&p->slo, slo, sizeof slo);
        fprintf(f, "goodput       %.3f req/s (%ld of %ld completed met%s)\n", s->goodput, s->good,
                s->completed, slo);
    }
    fprintf(f, "latency (ms)  %10s %10s %10s %10s\n", "mean", "p50", "p90", "p99");
    dist_line(f, "TTFT", &s->ttft);
    dist_line(f, "TPOT", &s->tpot);
    dist_line(f, "ITL", &s->itl);
    dist_line(f, "E2E", &s->e2e);
    if (s->placed)
        fprintf(f, "KV transfer   %ld of %ld prompts prefilled remotely; %.1f MB moved, "
                   "%.2f ms each, %.2f GB/s, %.1f%% of their TTFT\n",
                s->kv_moved, s->placed, s->kv_bytes / 1e6, s->kv_ms_mean, s->kv_gb_per_s,
                100.0 * s->kv_ttft_share);
    errors_text(f, p);
}

void dyb_report_pareto_text(FILE *f, const dyb_point *pts, size_t n)
{
    fprintf(f, "\n== Pareto frontier (x: tok/s per user = 1000 / mean TPOT; "
               "y: output tok/s per core)\n");
    fprintf(f, "%-18s %9s %11s %11s %11s %10s %10s  %s\n", "point", "req/s", "out tok/s",
            "tok/s/user", "tok/s/core", "TTFT p50", "TPOT p50", "frontier");
    for (size_t i = 0; i < n; i++) {
        const dyb_summary *s = &pts[i].sum;
        fprintf(f, "%-18s %9.3f %11.1f %11.2f %11.2f %10.2f %10.2f  %s\n", pts[i].label,
                s->req_per_s, s->output_tok_per_s, s->tok_per_s_per_user,
                s->output_tok_per_s_per_core, s->ttft.p50, s->tpot.p50,
                pts[i].dominated ? "dominated" : "*");
    }
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static json_t *dist_json(const dyb_dist *d)
{
    if (d->n == 0)
        return json_null();
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "mean", d->mean, "p50", d->p50,
                     "p90", d->p90, "p99", d->p99, "min", d->min, "max", d->max, "n",
                     (json_int_t)d->n);
}

static json_t *load_json(const dyb_point *p)
{
    json_t *o = json_pack("{s:s}", "mode", p->mode);
    if (!o)
        return NULL;
    json_object_set_new(o, "concurrency", p->concurrency > 0 ? json_integer(p->concurrency)
                                                              : json_null());
    /* JSON has no infinity: an all-at-once rate is the string "inf" */
    json_object_set_new(o, "rate", p->rate <= 0     ? json_null()
                                   : isinf(p->rate) ? json_string("inf")
                                                    : json_real(p->rate));
    json_object_set_new(o, "burstiness", p->rate > 0 ? json_real(p->burstiness) : json_null());
    return o;
}

static json_t *slo_json(const dyb_point *p)
{
    const dyb_summary *s = &p->sum;
    if (!s->has_slo)
        return json_null();
    json_t *o = json_pack("{s:I, s:f}", "met", (json_int_t)s->good, "request_throughput",
                          s->goodput);
    if (!o)
        return NULL;
    const char *names[3] = {"ttft_ms", "tpot_ms", "e2e_ms"};
    double vals[3] = {p->slo.ttft_ms, p->slo.tpot_ms, p->slo.e2e_ms};
    for (int i = 0; i < 3; i++)
        if (vals[i] > 0)
            json_object_set_new(o, names[i], json_real(vals[i]));
    return o;
}

/* null for servers that do not say where they prefilled (not dyad). */
static json_t *kv_json(const dyb_summary *s)
{
    if (!s->placed)
        return json_null();
    return json_pack("{s:I, s:I, s:f, s:f, s:f, s:f}", "placed", (json_int_t)s->placed,
                     "remote_prefills", (json_int_t)s->kv_moved, "bytes", s->kv_bytes,
                     "mean_ms", s->kv_ms_mean, "gb_per_s", s->kv_gb_per_s, "ttft_share",
                     s->kv_ttft_share);
}

static json_t *errors_json(const dyb_point *p)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < p->n_errors; i++)
        json_array_append_new(a, json_pack("{s:s, s:I}", "message", p->errors[i].msg, "count",
                                           (json_int_t)p->errors[i].count));
    if (a && p->other_errors)
        json_array_append_new(a, json_pack("{s:s, s:I}", "message", "other errors", "count",
                                           (json_int_t)p->other_errors));
    return a;
}

char *dyb_report_json(const dyb_run_info *ri, const dyb_point *p, bool with_pareto)
{
    const dyb_summary *s = &p->sum;
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:I, s:o, s:I, s:I, s:I, s:b, s:f, s:I, s:I, s:f, s:f, s:f,"
        " s:i, s:f, s:f, s:o, s:o, s:o, s:o, s:o, s:o}",
        "label", p->label, "url", ri->url, "model", ri->model, "endpoint", ri->endpoint,
        "workload", ri->workload, "seed", (json_int_t)ri->seed, "load", load_json(p),
        "completed", (json_int_t)s->completed, "failed", (json_int_t)s->failed, "warmup",
        (json_int_t)p->warmup, "interrupted", p->interrupted, "duration_s", s->duration_s,
        "input_tokens", (json_int_t)s->input_tokens, "output_tokens",
        (json_int_t)s->output_tokens, "request_throughput", s->req_per_s, "input_throughput",
        s->input_tok_per_s, "output_throughput", s->output_tok_per_s, "cores", s->cores,
        "output_throughput_per_core", s->output_tok_per_s_per_core, "tokens_per_s_per_user",
        s->tok_per_s_per_user, "goodput", slo_json(p), "ttft_ms", dist_json(&s->ttft),
        "tpot_ms", dist_json(&s->tpot), "itl_ms", dist_json(&s->itl), "e2e_ms",
        dist_json(&s->e2e), "errors", errors_json(p));
    if (!o)
        return NULL;
    json_object_set_new(o, "kv_transfer", kv_json(s));
    if (p->sweep_param)
        json_object_set_new(o, "sweep", json_pack("{s:s, s:f}", "param", p->sweep_param,
                                                  "value", p->sweep_value));
    if (with_pareto)
        json_object_set_new(o, "pareto_dominated", json_boolean(p->dominated));
    char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    return text;
}

/* ---- CSV ------------------------------------------------------------------------------------- */

static void csv_dist(FILE *f, const dyb_dist *d)
{
    fprintf(f, ",%.4f,%.4f,%.4f,%.4f", d->mean, d->p50, d->p90, d->p99);
}

int dyb_report_csv(FILE *f, const dyb_point *pts, size_t n)
{
    fputs("param,value,mode,concurrency,rate,burstiness,completed,failed,duration_s,"
          "request_throughput,input_tok_per_s,output_tok_per_s,output_tok_per_s_per_core,"
          "tok_per_s_per_user,goodput_req_per_s", f);
    const char *d[4] = {"ttft", "tpot", "itl", "e2e"};
    for (int i = 0; i < 4; i++)
        fprintf(f, ",%s_mean_ms,%s_p50_ms,%s_p90_ms,%s_p99_ms", d[i], d[i], d[i], d[i]);
    fputs(",kv_remote_prefills,kv_bytes,kv_mean_ms,kv_gb_per_s,kv_ttft_share,pareto\n", f);
    for (size_t i = 0; i < n; i++) {
        const dyb_point *p = &pts[i];
        const dyb_summary *s = &p->sum;
        fprintf(f, "%s,%g,%s,%d,%g,%g,%ld,%ld,%.3f,%.4f,%.2f,%.2f,%.4f,%.4f,",
                p->sweep_param ? p->sweep_param : "", p->sweep_param ? p->sweep_value : 0,
                p->mode, p->concurrency, p->rate, p->rate > 0 ? p->burstiness : 0, s->completed,
                s->failed, s->duration_s, s->req_per_s, s->input_tok_per_s, s->output_tok_per_s,
                s->output_tok_per_s_per_core, s->tok_per_s_per_user);
        if (s->has_slo)
            fprintf(f, "%.4f", s->goodput);
        csv_dist(f, &s->ttft);
        csv_dist(f, &s->tpot);
        csv_dist(f, &s->itl);
        csv_dist(f, &s->e2e);
        fprintf(f, ",%ld,%.0f,%.4f,%.4f,%.5f", s->kv_moved, s->kv_bytes, s->kv_ms_mean,
                s->kv_gb_per_s, s->kv_ttft_share);
        fprintf(f, ",%s\n", p->dominated ? "dominated" : "frontier");
    }
    return ferror(f) ? -1 : 0;
}

/* ---- SVG ------------------------------------------------------------------------------------- */

#define SVG_W 800
#define SVG_H 540
#define PLOT_L 90
#define PLOT_R 40
#define PLOT_T 60
#define PLOT_B 80

double dyb_nice_step(double max, int target)
{
    if (!(max > 0) || !isfinite(max))
        return 1;
    double raw = max / (target > 0 ? target : 1);
    double mag = pow(10, floor(log10(raw)));
    double r = raw / mag;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

typedef struct {
    double xmax, ymax, xstep, ystep;
} axes;

static double px(const axes *a, double x)
{
    return PLOT_L + x / a->xmax * (SVG_W - PLOT_L - PLOT_R);
}

static double py(const axes *a, double y)
{
    return SVG_H - PLOT_B - y / a->ymax * (SVG_H - PLOT_T - PLOT_B);
}

/* Axis ranges from 0 to a whole number of nice steps above the largest value. */
static axes make_axes(const dyb_point *pts, size_t n)
{
    axes a = {0, 0, 1, 1};
    for (size_t i = 0; i < n; i++) {
        a.xmax = fmax(a.xmax, pts[i].sum.tok_per_s_per_user);
        a.ymax = fmax(a.ymax, pts[i].sum.output_tok_per_s_per_core);
    }
    a.xstep = dyb_nice_step(a.xmax * 1.05, 6);
    a.ystep = dyb_nice_step(a.ymax * 1.05, 6);
    a.xmax = a.xstep * ceil(a.xmax * 1.05 / a.xstep);
    a.ymax = a.ystep * ceil(a.ymax * 1.05 / a.ystep);
    if (!(a.xmax > 0))
        a.xmax = a.xstep;
    if (!(a.ymax > 0))
        a.ymax = a.ystep;
    return a;
}

static void svg_axes(FILE *f, const axes *a)
{
    double x0 = PLOT_L, x1 = SVG_W - PLOT_R, y0 = SVG_H - PLOT_B, y1 = PLOT_T;
    fputs("<g font-size=\"12\" fill=\"#333\">\n", f);
    for (double v = 0; v <= a->xmax * (1 + 1e-9); v += a->xstep) {
        double x = px(a, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
                x, y0, x, y1);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, y0 + 18,
                v);
    }
    for (double v = 0; v <= a->ymax * (1 + 1e-9); v += a->ystep) {
        double y = py(a, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
                x0, y, x1, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", x0 - 8, y + 4,
                v);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n", PLOT_L,
            SVG_H - PLOT_B, SVG_W - PLOT_R, SVG_H - PLOT_B);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n", PLOT_L,
            SVG_H - PLOT_B, PLOT_L, PLOT_T);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\">tokens/s per "
               "user (1000 / mean TPOT ms)</text>\n",
            (PLOT_L + SVG_W - PLOT_R) / 2, SVG_H - 30);
    fprintf(f, "<text transform=\"translate(24 %d) rotate(-90)\" text-anchor=\"middle\" "
               "font-size=\"14\">output tokens/s per core</text>\n",
            (PLOT_T + SVG_H - PLOT_B) / 2);
    fputs("</g>\n", f);
}

static int cmp_by_x(const void *a, const void *b)
{
    const dyb_point *p = *(const dyb_point *const *)a, *q = *(const dyb_point *const *)b;
    double x = p->sum.tok_per_s_per_user, y = q->sum.tok_per_s_per_user;
    return (x > y) - (x < y);
}

/* The frontier as a line through its points, left to right. */
static void svg_frontier(FILE *f, const axes *a, const dyb_point *pts, size_t n)
{
    const dyb_point **front = malloc((n ? n : 1) * sizeof *front);
    size_t k = 0;
    if (!front)
        return;
    for (size_t i = 0; i < n; i++)
        if (!pts[i].dominated)
            front[k++] = &pts[i];
    qsort(front, k, sizeof *front, cmp_by_x);
    if (k > 1) {
        fputs("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"", f);
        for (size_t i = 0; i < k; i++)
            fprintf(f, "%s%.1f,%.1f", i ? " " : "", px(a, front[i]->sum.tok_per_s_per_user),
                    py(a, front[i]->sum.output_tok_per_s_per_core));
        fputs("\"/>\n", f);
    }
    free(front);
}

static void svg_points(FILE *f, const axes *a, const dyb_point *pts, size_t n)
{
    fputs("<g font-size=\"12\">\n", f);
    for (size_t i = 0; i < n; i++) {
        double x = px(a, pts[i].sum.tok_per_s_per_user);
        double y = py(a, pts[i].sum.output_tok_per_s_per_core);
        if (pts[i].dominated)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#fff\" stroke=\"#888\" "
                       "stroke-width=\"1.5\"/>\n", x, y);
        else
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#1f77b4\"/>\n", x, y);
        bool left = x > PLOT_L + 0.8 * (SVG_W - PLOT_L - PLOT_R); /* keep labels inside */
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\"%s>", left ? x - 8 : x + 8, y - 8,
                pts[i].dominated ? "#888" : "#000", left ? " text-anchor=\"end\"" : "");
        xml_text(f, pts[i].label);
        fputs("</text>\n", f);
    }
    fputs("</g>\n", f);
}

int dyb_report_svg(FILE *f, const dyb_run_info *ri, const dyb_point *pts, size_t n)
{
    axes a = make_axes(pts, n);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fprintf(f, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">", SVG_W / 2);
    xml_text(f, "dyad bench: ");
    xml_text(f, ri->model ? ri->model : "?");
    xml_text(f, " — ");
    xml_text(f, ri->workload ? ri->workload : "");
    fputs("</text>\n", f);
    fprintf(f, "<text x=\"%d\" y=\"46\" text-anchor=\"middle\" font-size=\"12\" fill=\"#555\">"
               "filled: Pareto frontier; hollow: dominated</text>\n", SVG_W / 2);
    svg_axes(f, &a);
    svg_frontier(f, &a, pts, n);
    svg_points(f, &a, pts, n);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}
