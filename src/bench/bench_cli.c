/* bench_cli.c — see bench_cli.h. Owns the option table (util/opts.h: name, type, range,
 * destination, default, help), the cross-option rules and the usage text. */
#include "bench/bench_cli.h"
#include "util/opts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: dyad bench [options]          load-test an OpenAI-compatible server (HTTP + SSE)\n"
    "       dyad bench engine [options]   measure the engine itself (see its --help)\n";

static const char epilog[] =
    "\n"
    "Figures follow vLLM's benchmark: TTFT = send -> first content token; TPOT = (E2E - TTFT) /\n"
    "(output tokens - 1), output tokens from the final usage chunk (stream_options.include_usage)\n"
    "or else counted chunks; ITL = gaps between content chunks, a chunk of k tokens counting as k\n"
    "gaps; E2E = send -> end of stream. Mean, p50, p90, p99 of each.\n"
    "Ctrl-C stops the run: requests in flight are dropped and the finished ones reported.\n"
    "Exit status: 0; 1 when no request succeeded or an input or server problem stopped the\n"
    "run; 2 on a usage error; 130 after Ctrl-C.\n";

#define DEFAULT_REQUESTS 100 /* without --requests, --duration or a trace */

static bool set_prompt(void *ctx, const char *v, char *err, size_t errlen)
{
    dyb_opts *o = ctx;
    if (strcmp(v, "ids") && strcmp(v, "text")) {
        snprintf(err, errlen, "'%s' is not ids or text", v);
        return false;
    }
    o->text_prompt = !strcmp(v, "text");
    return true;
}

static bool set_slo(void *ctx, const char *v, char *err, size_t errlen)
{
    dyb_opts *o = ctx;
    return dyb_slo_parse(v, &o->slo, err, errlen) == 0;
}

static bool sweep_values(const char *list, double min, bool integral, double *values, int *n,
                         char *err, size_t errlen)
{
    const char *p = list;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (errno || end == p || !(v >= min) || !isfinite(v) || (integral && v != floor(v)) ||
            (*end && *end != ',') || *n == DYB_MAX_SWEEP) {
            snprintf(err, errlen, "bad value list '%s' (%s, at most %d)", list,
                     integral ? "integers >= 1" : "positive numbers", DYB_MAX_SWEEP);
            return false;
        }
        values[(*n)++] = v;
        if (!*end)
            return true;
        p = end + 1;
    }
}

bool dyb_sweep_parse(const char *v, dyb_sweep_kind *kind, double *values, int *n, char *err,
                     size_t errlen)
{
    *n = 0;
    if (!strncmp(v, "concurrency=", 12)) {
        *kind = DYB_SWEEP_CONCURRENCY;
        return sweep_values(v + 12, 1, true, values, n, err, errlen);
    }
    if (!strncmp(v, "rate=", 5)) {
        *kind = DYB_SWEEP_RATE;
        return sweep_values(v + 5, 1e-9, false, values, n, err, errlen);
    }
    snprintf(err, errlen, "'%s' is not concurrency=LIST or rate=LIST", v);
    return false;
}

static bool set_sweep(void *ctx, const char *v, char *err, size_t errlen)
{
    dyb_opts *o = ctx;
    return dyb_sweep_parse(v, &o->sweep, o->sweep_values, &o->n_sweep, err, errlen);
}

#define N_OPTS 35
#define N(a) (sizeof(a) / sizeof((a)[0]))

int dyb_workload_opts(dyb_workload_config *w, dy_opt *out)
{
    const dy_opt all[DYB_WORKLOAD_OPTS] = {
        {.section = "Workload", .name = "isl", .kind = DY_OPT_LONG, .dst = &w->isl, .meta = "N",
         .help = "fixed prompt length", .min = 1, .max = 10000000, .def = 512},
        {.name = "osl", .kind = DY_OPT_LONG, .dst = &w->osl, .meta = "N",
         .help = "fixed output length", .min = 1, .max = 10000000, .def = 128},
        {.name = "vocab-size", .kind = DY_OPT_INT, .dst = &w->vocab_size, .meta = "V",
         .help = "token ids are drawn from [3, V) (must not exceed the served model's "
                 "vocabulary)", .min = 4, .max = 100000000, .def = 32000},
        {.name = "lengths-csv", .kind = DY_OPT_STR, .dst = &w->lengths_csv, .meta = "FILE",
         .help = "draw (input, output) lengths from a CSV's rows, e.g. the ShareGPT statistics "
                 "(columns num_prefill_tokens, num_decode_tokens)"},
        {.name = "input-col", .kind = DY_OPT_STR, .dst = &w->input_col, .meta = "NAME",
         .help = "its input column's name", .shown_default = "known names"},
        {.name = "output-col", .kind = DY_OPT_STR, .dst = &w->output_col, .meta = "NAME",
         .help = "its output column's name", .shown_default = "known names"},
        {.name = "prefix-groups", .kind = DY_OPT_INT, .dst = &w->prefix_groups, .meta = "G",
         .help = "each request joins one of G groups at random; its first --prefix-len tokens "
                 "are the group's shared prefix, the rest its own", .min = 1, .max = 10000000,
         .shown_default = ""},
        {.name = "prefix-len", .kind = DY_OPT_LONG, .dst = &w->prefix_len, .meta = "L",
         .help = "the length of each group's shared prefix", .min = 1, .max = 10000000,
         .shown_default = ""},
        {.name = "trace", .kind = DY_OPT_STR, .dst = &w->trace, .meta = "FILE",
         .help = "replay a trace at its timestamps: Mooncake JSONL (timestamp ms, "
                 "input_length, output_length, hash_ids of 512-token blocks; equal ids give "
                 "equal tokens, so prefix sharing is reproduced) or Azure CSV (TIMESTAMP,"
                 "ContextTokens,GeneratedTokens). With --concurrency or --rate its rows are "
                 "sent at that load instead of its times"},
        {.name = "time-scale", .kind = DY_OPT_DOUBLE, .dst = &w->time_scale, .meta = "X",
         .help = "multiply the trace's inter-arrival times by X (0.5 = twice as fast)",
         .min = 1e-6, .max = 1e6, .def = 1},
        {.name = "length-scale", .kind = DY_OPT_DOUBLE, .dst = &w->length_scale, .meta = "Y",
         .help = "multiply table/trace lengths by Y (the trace block size too, so the prefix "
                 "structure is kept)", .min = 1e-6, .max = 1e3, .def = 1},
        {.name = "max-isl", .kind = DY_OPT_LONG, .dst = &w->max_isl, .meta = "N",
         .help = "cap prompt lengths (after scaling; a capped prompt keeps its prefix)",
         .min = 1, .max = 10000000, .shown_default = ""},
        {.name = "max-osl", .kind = DY_OPT_LONG, .dst = &w->max_osl, .meta = "N",
         .help = "cap output lengths (after scaling)", .min = 1, .max = 10000000,
         .shown_default = ""},
        {.name = "skip-bad-lines", .kind = DY_OPT_FLAG, .dst = &w->skip_bad_lines,
         .help = "skip (and count) CSV/JSONL lines that do not parse, instead of stopping at "
                 "the first with its FILE:LINE"},
    };
    for (int i = 0; i < DYB_WORKLOAD_OPTS; i++)
        out[i] = all[i];
    return DYB_WORKLOAD_OPTS;
}

/* The option table, storing into o; seen[i] tells whether entry i was given. */
static void table(dyb_opts *o, bool *seen, dy_opt *t)
{
    static const char *const endpoints[] = {"completions", "chat", NULL};
    static const int endpoint_values[] = {DYB_EP_COMPLETIONS, DYB_EP_CHAT};
    _Static_assert(sizeof(dyb_endpoint) == sizeof(int), "ENUM options store an int");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    dyb_workload_config *w = &o->wl;
    const dy_opt head[] = {
        {.section = "Target", .name = "url", .kind = DY_OPT_STR, .dst = &o->url, .meta = "URL",
         .help = "server base URL (a trailing /v1 is fine)", .def_str = "http://127.0.0.1:8000"},
        {.name = "model", .kind = DY_OPT_STR, .dst = &o->model, .meta = "NAME",
         .help = "model name to send", .shown_default = "the first id of GET /v1/models"},
        {.name = "api-key", .kind = DY_OPT_STR, .dst = &o->api_key, .meta = "KEY",
         .help = "sent as 'Authorization: Bearer KEY'"},
        {.name = "endpoint", .kind = DY_OPT_ENUM, .dst = (int *)&o->endpoint, .meta = "E",
         .help = "completions (POST /v1/completions) or chat (/v1/chat/completions); requests "
                 "always stream (SSE)",
         .names = endpoints, .values = endpoint_values, .def = DYB_EP_COMPLETIONS},
        {.name = "prompt", .kind = DY_OPT_CALL, .call = set_prompt, .ctx = o, .meta = "ids|text",
         .help = "completions: send the prompt as token ids (exactly ISL tokens) or as words "
                 "(one common word per id, about one token each; chat always sends words). The "
                 "server's usage.prompt_tokens, when reported, is what input throughput counts",
         .shown_default = "ids"},
        {.name = "no-ignore-eos", .kind = DY_OPT_FLAG, .dst = &o->ignore_eos, .def = 1,
         .help = "do not send \"ignore_eos\": true (for servers that reject it; the output "
                 "length is then only an upper bound)"},
        {.name = "response-format", .kind = DY_OPT_STR, .dst = &o->response_format,
         .meta = "FILE", .help = "send the response_format object in FILE with every request "
                                 "(completions: as dyad.grammar), e.g. to measure decoding under "
                                 "a JSON Schema"},
        {.name = "timeout", .kind = DY_OPT_DOUBLE, .dst = &o->timeout_s, .meta = "S",
         .help = "per-request timeout in seconds", .min = 0.001, .max = 86400,
         .shown_default = "none"},
        {.section = "Load (one of: closed loop, open loop, trace times)", .name = "concurrency",
         .kind = DY_OPT_LONG, .dst = &o->concurrency, .meta = "C",
         .help = "closed loop: keep C requests in flight; with --rate or trace times: at most C "
                 "in flight", .min = 1, .max = 100000, .shown_default = "1"},
        {.name = "rate", .kind = DY_OPT_DOUBLE, .dst = &o->rate, .meta = "R",
         .help = "open loop: R requests/s (inf: all at once), gamma-distributed gaps",
         .min = 1e-9, .max = INFINITY, .shown_default = ""},
        {.name = "burstiness", .kind = DY_OPT_DOUBLE, .dst = &o->burstiness, .meta = "B",
         .help = "shape of the gamma gaps (1 = Poisson; <1 burstier)", .min = 1e-3,
         .max = 1000, .def = 1},
        {.name = "requests", .kind = DY_OPT_LONG, .dst = &o->requests, .meta = "N",
         .help = "requests to measure (with --duration or a trace: no count bound, a trace "
                 "ends at its last row)", .min = 1, .max = 1000000000, .def = -1,
         .shown_default = DY_OPTS_QUOTE(DEFAULT_REQUESTS)},
        {.name = "duration", .kind = DY_OPT_DOUBLE, .dst = &o->duration_s, .meta = "S",
         .help = "stop sending after S seconds (requests in flight then finish)", .min = 0.001,
         .max = 1e7, .shown_default = ""},
        {.name = "warmup", .kind = DY_OPT_LONG, .dst = &o->warmup, .meta = "N",
         .help = "send N requests first, at the run's concurrency (1 in an open loop), and "
                 "leave them out of every figure", .min = 0, .max = 1000000},
        {.name = "seed", .kind = DY_OPT_U64, .dst = &w->seed, .meta = "S",
         .help = "seed of every random choice: the same seed gives the same prompts, lengths "
                 "and arrival gaps"},
    };
    const dy_opt tail[] = {
        {.section = "Metrics", .name = "slo", .kind = DY_OPT_CALL, .call = set_slo, .ctx = o,
         .meta = "LIST", .help = "goodput objectives: ttft_ms=X,tpot_ms=Y,e2e_ms=Z (any "
                                 "subset); goodput = requests meeting all of them per second"},
        {.name = "cores", .kind = DY_OPT_LONG, .dst = &o->cores, .meta = "N",
         .help = "cores of the server, for output tokens/s per core", .min = 1, .max = 1000000,
         .def = ncpu > 0 ? (double)ncpu : 1, .shown_default = "the CPUs of this machine"},
        {.name = "sweep", .kind = DY_OPT_CALL, .call = set_sweep, .ctx = o, .meta = "P=V1,V2,...",
         .help = "run once per value: concurrency=1,2,4,8 or rate=0.5,1,2,4; the points are "
                 "compared on the Pareto frontier (x: tokens/s per user = 1000 / mean TPOT ms; "
                 "y: output tokens/s per core)"},
        {.section = "Output (the report goes to stdout; a progress line to stderr when it is a "
                    "terminal)",
         .name = "json", .kind = DY_OPT_FLAG, .dst = &o->json,
         .help = "one JSON object per run (per sweep point) instead of the report"},
        {.name = "csv", .kind = DY_OPT_STR, .dst = &o->csv, .meta = "FILE",
         .help = "the runs as a CSV table, with a pareto column (frontier/dominated)"},
        {.name = "plot", .kind = DY_OPT_STR, .dst = &o->plot, .meta = "FILE.svg",
         .help = "the Pareto plot as SVG"},
    };
    _Static_assert(N(head) + DYB_WORKLOAD_OPTS + N(tail) == N_OPTS, "N_OPTS");
    int n = 0;
    for (size_t i = 0; i < N(head); i++)
        t[n++] = head[i];
    n += dyb_workload_opts(w, t + n);
    for (size_t i = 0; i < N(tail); i++)
        t[n++] = tail[i];
    for (int i = 0; i < N_OPTS; i++)
        t[i].given = &seen[i];
}

bool dyb_check_workload_opts(dy_opts_given g, const dyb_workload_config *w, bool rate,
                             dyb_sweep_kind sweep)
{
    bool table = w->lengths_csv, trace = w->trace;
    return dy_opts_conflict(g, "--trace", table, "--lengths-csv") &&
           dy_opts_conflict(g, "--isl", table || trace, "--lengths-csv or --trace") &&
           dy_opts_conflict(g, "--osl", table || trace, "--lengths-csv or --trace") &&
           dy_opts_conflict(g, "--prefix-groups", trace,
                            "--trace (the trace has its own prefixes)") &&
           dy_opts_needs(g, "--prefix-groups", dy_opts_was_given(g, "--prefix-len"),
                         "--prefix-len") &&
           dy_opts_needs(g, "--prefix-len", w->prefix_groups > 0, "--prefix-groups") &&
           dy_opts_needs(g, "--input-col", table, "--lengths-csv") &&
           dy_opts_needs(g, "--output-col", table, "--lengths-csv") &&
           dy_opts_needs(g, "--time-scale", trace, "--trace") &&
           dy_opts_needs(g, "--length-scale", table || trace, "--lengths-csv or --trace") &&
           dy_opts_needs(g, "--burstiness", rate, "--rate or --sweep rate=...") &&
           dy_opts_conflict(g, "--concurrency", sweep == DYB_SWEEP_CONCURRENCY,
                            "--sweep concurrency=...") &&
           dy_opts_conflict(g, "--rate", sweep == DYB_SWEEP_RATE, "--sweep rate=...");
}

static bool check(const dyb_opts *o, dy_opts_given g)
{
    bool rate = o->rate > 0 || o->sweep == DYB_SWEEP_RATE;
    return dyb_check_workload_opts(g, &o->wl, rate, o->sweep) &&
           dy_opts_conflict(g, "--prompt", o->endpoint == DYB_EP_CHAT && !o->text_prompt,
                            "--endpoint chat (chat messages are text)");
}

int dyb_opts_parse(int argc, char **argv, dyb_opts *o)
{
    bool seen[N_OPTS];
    dy_opt t[N_OPTS];
    char err[512];
    *o = (dyb_opts){0};
    table(o, seen, t);
    switch (dy_opts_parse(t, N_OPTS, argc, argv, NULL, err, sizeof err)) {
    case DY_OPTS_HELP: dy_opts_help(stdout, usage, t, N_OPTS, epilog); return 1;
    case DY_OPTS_BAD: fprintf(stderr, "dyad bench: %s (see dyad bench --help)\n", err); return 2;
    case DY_OPTS_OK: break;
    }
    if (!check(o, (dy_opts_given){t, N_OPTS, "bench"}))
        return 2;
    if (o->requests < 0 && o->duration_s <= 0 && !o->wl.trace)
        o->requests = DEFAULT_REQUESTS;
    return 0;
}

bool dyb_point_load(dyb_point *p, const dyb_workload *wl, long concurrency, double rate,
                    double burstiness, dyb_sweep_kind sweep, const double *sweep_values, int i)
{
    p->concurrency = (int)concurrency;
    p->rate = rate;
    p->burstiness = burstiness;
    if (sweep == DYB_SWEEP_CONCURRENCY)
        p->concurrency = (int)sweep_values[i];
    else if (sweep == DYB_SWEEP_RATE)
        p->rate = sweep_values[i];
    const bool timed = p->rate <= 0 && dyb_workload_timed(wl);
    if (p->rate <= 0 && !timed && p->concurrency == 0)
        p->concurrency = 1;
    p->mode = p->rate > 0 ? "open loop" : timed ? "trace replay" : "closed loop";
    p->sweep_param = sweep == DYB_SWEEP_CONCURRENCY ? "concurrency"
                   : sweep == DYB_SWEEP_RATE        ? "rate" : NULL;
    p->sweep_value = p->sweep_param ? sweep_values[i] : 0;
    if (p->sweep_param)
        snprintf(p->label, sizeof p->label, "%s=%g", p->sweep_param, p->sweep_value);
    else
        snprintf(p->label, sizeof p->label, "run");
    return timed;
}
