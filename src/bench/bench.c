/* bench.c — `dyad bench` (serving): parses the options, checks the server, runs each sweep
 * point in turn and writes the reports. The one piece of global mutable state of the bench is
 * here: the Ctrl-C flag, because a signal handler can reach nothing else. The first Ctrl-C
 * stops the run (requests in flight are dropped, the completed ones are reported); a second
 * one kills the process as usual. */
#include "bench/bench.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_cli.h"
#include "bench/bench_client.h"
#include "bench/bench_report.h"
#include "bench/bench_run.h"

static volatile sig_atomic_t g_stop; /* set by the SIGINT handler only */

static void on_sigint(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* Everything one invocation owns. */
typedef struct {
    dyb_opts o;
    dyb_workload *wl;
    dyb_client *client;
    json_t *response_format; /* --response-format's object, or NULL */
    char *model;           /* the model name sent (owned copy) */
    char *url;             /* the endpoint URL (for reports) */
    char workload[512];
    FILE *csv, *plot;      /* opened before the run, so that a bad path fails at once */
    dyb_point pts[DYB_MAX_SWEEP];
    size_t n_pts;
} bench;

static void bench_free(bench *b)
{
    for (size_t i = 0; i < b->n_pts; i++)
        dyb_point_free(&b->pts[i]);
    dyb_client_free(b->client);
    dyb_workload_free(b->wl);
    json_decref(b->response_format);
    if (b->csv)
        fclose(b->csv);
    if (b->plot)
        fclose(b->plot);
    free(b->model);
    free(b->url);
}

/* Asks the server for its models: a clear early error when it is not there, and the default
 * model name. */
static int resolve_model(bench *b)
{
    char err[1024], *first = NULL;
    int rc = dyb_fetch_models(b->o.url, b->o.api_key, 10, &first, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "dyad bench: %s\n", err);
        return -1;
    }
    if (b->o.model) {
        free(first);
        b->model = strdup(b->o.model);
    } else if (rc > 0 || !first) {
        fprintf(stderr, "dyad bench: %s; name the model with --model\n",
                rc > 0 ? err : "the server lists no models");
        return -1;
    } else
        b->model = first;
    return b->model ? 0 : -1;
}

static int open_outputs(bench *b)
{
    const char *paths[2] = {b->o.csv, b->o.plot};
    FILE **files[2] = {&b->csv, &b->plot};
    for (int i = 0; i < 2; i++)
        if (paths[i] && !(*files[i] = fopen(paths[i], "w"))) {
            fprintf(stderr, "dyad bench: cannot write %s: %s\n", paths[i], strerror(errno));
            return -1;
        }
    return 0;
}

static int setup(bench *b)
{
    char err[1024];
    if (open_outputs(b) != 0)
        return -1;
    if (b->o.response_format &&
        !(b->response_format = dyb_response_format_load(b->o.response_format, err, sizeof err))) {
        fprintf(stderr, "dyad bench: --response-format %s\n", err);
        return -1;
    }
    if (!(b->wl = dyb_workload_new(&b->o.wl, err, sizeof err))) {
        fprintf(stderr, "dyad bench: %s\n", err);
        return -1;
    }
    const char *first_bad;
    size_t skipped = dyb_workload_skipped(b->wl, &first_bad);
    if (skipped)
        fprintf(stderr, "dyad bench: skipped %zu bad input lines (first: %s)\n", skipped,
                first_bad);
    dyb_workload_describe(b->wl, b->workload, sizeof b->workload);
    if (resolve_model(b) != 0)
        return -1;
    dyb_client_config cc = {b->o.url, b->o.api_key,
                            {b->model, b->o.endpoint, b->o.text_prompt, b->o.ignore_eos,
                             b->response_format},
                            b->o.timeout_s};
    b->url = dyb_endpoint_url(b->o.url, b->o.endpoint == DYB_EP_CHAT ? "/v1/chat/completions"
                                                                      : "/v1/completions");
    if (!b->url || !(b->client = dyb_client_new(&cc, err, sizeof err))) {
        fprintf(stderr, "dyad bench: %s\n", b->url ? err : "out of memory");
        return -1;
    }
    return 0;
}

/* The load of point i (a sweep value replaces the option it sweeps). */
static void point_load(const bench *b, int i, dyb_point *p, dyb_run_config *rc)
{
    const dyb_opts *o = &b->o;
    bool timed = dyb_point_load(p, b->wl, o->concurrency, o->rate, o->burstiness, o->sweep,
                                o->sweep_values, i);
    p->warmup = o->warmup;
    p->slo = o->slo;
    *rc = (dyb_run_config){b->wl, b->client, p->concurrency, p->rate, p->burstiness, timed,
                           o->requests, o->duration_s, o->warmup, o->wl.seed,
                           isatty(STDERR_FILENO) == 1,
                           o->sweep == DYB_SWEEP_NONE ? NULL : p->label, &g_stop};
}

static int run_point(bench *b, int i)
{
    dyb_point *p = &b->pts[b->n_pts];
    dyb_run_config rc;
    dyb_stats st;
    dyb_run_outcome out;
    char err[512];
    *p = (dyb_point){0};
    point_load(b, i, p, &rc);
    dyb_workload_set_round(b->wl, (uint64_t)i); /* fresh prompts: no help from earlier points */
    dyb_stats_init(&st);
    int r = dyb_run(&rc, &st, &out, err, sizeof err);
    if (r == 0 && dyb_stats_summarize(&st, out.duration_s, &b->o.slo, (int)b->o.cores,
                                      &p->sum) != 0) {
        snprintf(err, sizeof err, "out of memory while summarising");
        r = -1;
    }
    if (r == 0) {
        p->interrupted = out.interrupted;
        dyb_point_take_errors(p, &st);
        b->n_pts++;
    } else
        fprintf(stderr, "dyad bench: %s\n", err);
    dyb_stats_free(&st);
    return r;
}

static dyb_run_info run_info(const bench *b)
{
    return (dyb_run_info){b->url, b->model,
                          b->o.endpoint == DYB_EP_CHAT ? "chat" : "completions", b->workload,
                          b->o.wl.seed};
}

/* Writes the CSV or the plot and closes its file. */
static int write_file(bench *b, bool svg)
{
    FILE **f = svg ? &b->plot : &b->csv;
    dyb_run_info ri = run_info(b);
    int rc = svg ? dyb_report_svg(*f, &ri, b->pts, b->n_pts)
                 : dyb_report_csv(*f, b->pts, b->n_pts);
    if (fclose(*f) != 0)
        rc = -1;
    *f = NULL;
    if (rc != 0)
        fprintf(stderr, "dyad bench: cannot write %s\n", svg ? b->o.plot : b->o.csv);
    return rc;
}

static int outputs(bench *b)
{
    dyb_run_info ri = run_info(b);
    dyb_points_mark_pareto(b->pts, b->n_pts);
    if (b->o.json)
        for (size_t i = 0; i < b->n_pts; i++) {
            char *s = dyb_report_json(&ri, &b->pts[i], b->o.sweep != DYB_SWEEP_NONE);
            if (s)
                printf("%s\n", s);
            free(s);
        }
    else if (b->o.sweep != DYB_SWEEP_NONE)
        dyb_report_pareto_text(stdout, b->pts, b->n_pts);
    fflush(stdout);
    int rc = 0;
    if (b->csv && write_file(b, false) != 0)
        rc = -1;
    if (b->plot && write_file(b, true) != 0)
        rc = -1;
    return rc;
}

/* Runs every point; the human report of each is printed as soon as it is done. */
static int run_all(bench *b)
{
    int n = b->o.sweep == DYB_SWEEP_NONE ? 1 : b->o.n_sweep;
    dyb_run_info ri = run_info(b);
    for (int i = 0; i < n && !g_stop; i++) {
        if (run_point(b, i) != 0)
            return -1;
        if (!b->o.json) {
            dyb_report_text(stdout, &ri, &b->pts[b->n_pts - 1]);
            fflush(stdout);
        }
    }
    return 0;
}

static int status(const bench *b)
{
    if (g_stop)
        return 130; /* what a shell reports for SIGINT; the partial results were printed */
    long ok = 0;
    for (size_t i = 0; i < b->n_pts; i++)
        ok += b->pts[i].sum.completed;
    if (ok == 0) {
        fprintf(stderr, "dyad bench: no request succeeded%s%s\n",
                b->n_pts && b->pts[0].n_errors ? ": " : "",
                b->n_pts && b->pts[0].n_errors ? b->pts[0].errors[0].msg : "");
        return 1;
    }
    return 0;
}

int dy_bench_serve_main(int argc, char **argv)
{
    bench b = {0};
    int rc = dyb_opts_parse(argc, argv, &b.o);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    if (dyb_http_init() != 0) {
        fprintf(stderr, "dyad bench: cannot initialise libcurl\n");
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESETHAND}, old;
    sigemptyset(&sa.sa_mask);
    g_stop = 0;
    sigaction(SIGINT, &sa, &old);
    rc = 1;
    if (setup(&b) == 0 && run_all(&b) == 0 && outputs(&b) == 0)
        rc = status(&b);
    sigaction(SIGINT, &old, NULL);
    bench_free(&b);
    dyb_http_cleanup();
    return rc;
}
