/* bench_cli.c — see bench_cli.h. Owns the option table (name, type, range, destination), the
 * cross-option rules and the usage text. */
#include "bench/bench_cli.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: dyad bench [options]          load-test an OpenAI-compatible server (HTTP + SSE)\n"
    "       dyad bench engine [options]   measure the engine itself (see its --help)\n"
    "\n"
    "Target\n"
    "  --url URL            server base URL (default http://127.0.0.1:8000; a trailing /v1 is fine)\n"
    "  --model NAME         model name to send (default: the first id of GET /v1/models)\n"
    "  --api-key KEY        sent as 'Authorization: Bearer KEY'\n"
    "  --endpoint E         completions (default: POST /v1/completions) or chat\n"
    "                       (/v1/chat/completions); requests always stream (SSE)\n"
    "  --prompt ids|text    completions: send the prompt as token ids (default; exactly ISL\n"
    "                       tokens) or as words (one common word per id, about one token each;\n"
    "                       chat always sends words). The server's usage.prompt_tokens, when\n"
    "                       reported, is what input throughput counts\n"
    "  --no-ignore-eos      do not send \"ignore_eos\": true (for servers that reject it; the\n"
    "                       output length is then only an upper bound)\n"
    "  --timeout S          per-request timeout in seconds (default: none)\n"
    "\n"
    "Load (one of: closed loop, open loop, trace times)\n"
    "  --concurrency C      closed loop: keep C requests in flight (default 1); with --rate or\n"
    "                       trace times: at most C in flight\n"
    "  --rate R             open loop: R requests/s (inf: all at once), gamma-distributed gaps\n"
    "  --burstiness B       shape of the gamma gaps (default 1 = Poisson; <1 burstier)\n"
    "  --requests N         requests to measure (default 100; with --duration or a trace: no\n"
    "                       count bound, a trace ends at its last row)\n"
    "  --duration S         stop sending after S seconds (requests in flight then finish)\n"
    "  --warmup N           send N requests first, at the run's concurrency (1 in an open\n"
    "                       loop), and leave them out of every figure (default 0)\n"
    "  --seed S             seed of every random choice (default 0): the same seed gives the\n"
    "                       same prompts, lengths and arrival gaps\n"
    "\n"
    "Workload\n"
    "  --isl N, --osl N     fixed prompt and output lengths (default 512 and 128)\n"
    "  --vocab-size V       token ids are drawn from [3, V) (default 32000; must not exceed the\n"
    "                       served model's vocabulary)\n"
    "  --lengths-csv FILE   draw (input, output) lengths from a CSV's rows, e.g. the ShareGPT\n"
    "                       statistics (columns num_prefill_tokens, num_decode_tokens)\n"
    "  --input-col NAME, --output-col NAME   its column names (default: known names)\n"
    "  --prefix-groups G    each request joins one of G groups at random; its first\n"
    "  --prefix-len L       L tokens are the group's shared prefix, the rest its own\n"
    "  --trace FILE         replay a trace at its timestamps: Mooncake JSONL (timestamp ms,\n"
    "                       input_length, output_length, hash_ids of 512-token blocks; equal\n"
    "                       ids give equal tokens, so prefix sharing is reproduced) or Azure CSV\n"
    "                       (TIMESTAMP,ContextTokens,GeneratedTokens). With --concurrency or\n"
    "                       --rate its rows are sent at that load instead of its times\n"
    "  --time-scale X       multiply the trace's inter-arrival times by X (0.5 = twice as fast)\n"
    "  --length-scale Y     multiply table/trace lengths by Y (the trace block size too, so the\n"
    "                       prefix structure is kept)\n"
    "  --max-isl N, --max-osl N   cap lengths (after scaling; a capped prompt keeps its prefix)\n"
    "  --skip-bad-lines     skip (and count) CSV/JSONL lines that do not parse, instead of\n"
    "                       stopping at the first with its FILE:LINE\n"
    "\n"
    "Metrics\n"
    "  --slo LIST           goodput objectives: ttft_ms=X,tpot_ms=Y,e2e_ms=Z (any subset);\n"
    "                       goodput = requests meeting all of them per second\n"
    "  --cores N            cores of the server, for output tokens/s per core (default: the\n"
    "                       CPUs of this machine)\n"
    "  --sweep P=V1,V2,...  run once per value: concurrency=1,2,4,8 or rate=0.5,1,2,4; the\n"
    "                       points are compared on the Pareto frontier (x: tokens/s per user =\n"
    "                       1000 / mean TPOT ms; y: output tokens/s per core)\n"
    "\n"
    "Output (the report goes to stdout; a progress line to stderr when it is a terminal)\n"
    "  --json               one JSON object per run (per sweep point) instead of the report\n"
    "  --csv FILE           the runs as a CSV table, with a pareto column (frontier/dominated)\n"
    "  --plot FILE.svg      the Pareto plot as SVG\n"
    "\n"
    "Figures follow vLLM's benchmark: TTFT = send -> first content token; TPOT = (E2E - TTFT) /\n"
    "(output tokens - 1), output tokens from the final usage chunk (stream_options.include_usage)\n"
    "or else counted chunks; ITL = gaps between content chunks, a chunk of k tokens counting as k\n"
    "gaps; E2E = send -> end of stream. Mean, p50, p90, p99 of each.\n"
    "Ctrl-C stops the run: requests in flight are dropped and the finished ones reported.\n"
    "Exit status: 0; 1 when no request succeeded or an input or server problem stopped the\n"
    "run; 2 on a usage error; 130 after Ctrl-C.\n";

void dyb_opts_usage(FILE *f)
{
    fputs(usage, f);
}

typedef enum { O_STR, O_LONG, O_INT, O_DOUBLE, O_U64, O_FLAG_ON, O_FLAG_OFF, O_FN } okind;

typedef struct {
    const char *name;
    okind kind;
    size_t off;         /* destination in dyb_opts */
    double min, max;    /* numeric range (inclusive) */
    int (*fn)(dyb_opts *o, const char *val); /* O_FN: 0, or -1 after printing why */
} opt_spec;

static int set_endpoint(dyb_opts *o, const char *v)
{
    if (!strcmp(v, "completions"))
        o->endpoint = DYB_EP_COMPLETIONS;
    else if (!strcmp(v, "chat"))
        o->endpoint = DYB_EP_CHAT;
    else {
        fprintf(stderr, "dyad bench: --endpoint: '%s' is not completions or chat\n", v);
        return -1;
    }
    return 0;
}

static int set_prompt(dyb_opts *o, const char *v)
{
    if (strcmp(v, "ids") && strcmp(v, "text")) {
        fprintf(stderr, "dyad bench: --prompt: '%s' is not ids or text\n", v);
        return -1;
    }
    o->text_prompt = !strcmp(v, "text");
    return 0;
}

static int set_slo(dyb_opts *o, const char *v)
{
    char err[256];
    if (dyb_slo_parse(v, &o->slo, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "dyad bench: --slo: %s\n", err);
    return -1;
}

static int sweep_values(dyb_opts *o, const char *list, double min, bool integral)
{
    const char *p = list;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (errno || end == p || !(v >= min) || !isfinite(v) || (integral && v != floor(v)) ||
            (*end && *end != ',') || o->n_sweep == DYB_MAX_SWEEP) {
            fprintf(stderr, "dyad bench: --sweep: bad value list '%s' (%s, at most %d)\n", list,
                    integral ? "integers >= 1" : "positive numbers", DYB_MAX_SWEEP);
            return -1;
        }
        o->sweep_values[o->n_sweep++] = v;
        if (!*end)
            return 0;
        p = end + 1;
    }
}

static int set_sweep(dyb_opts *o, const char *v)
{
    o->n_sweep = 0;
    if (!strncmp(v, "concurrency=", 12)) {
        o->sweep = DYB_SWEEP_CONCURRENCY;
        return sweep_values(o, v + 12, 1, true);
    }
    if (!strncmp(v, "rate=", 5)) {
        o->sweep = DYB_SWEEP_RATE;
        return sweep_values(o, v + 5, 1e-9, false);
    }
    fprintf(stderr, "dyad bench: --sweep: '%s' is not concurrency=LIST or rate=LIST\n", v);
    return -1;
}

#define OFF(f) offsetof(dyb_opts, f)
static const opt_spec specs[] = {
    {"--url", O_STR, OFF(url), 0, 0, NULL},
    {"--model", O_STR, OFF(model), 0, 0, NULL},
    {"--api-key", O_STR, OFF(api_key), 0, 0, NULL},
    {"--endpoint", O_FN, 0, 0, 0, set_endpoint},
    {"--prompt", O_FN, 0, 0, 0, set_prompt},
    {"--no-ignore-eos", O_FLAG_OFF, OFF(ignore_eos), 0, 0, NULL},
    {"--timeout", O_DOUBLE, OFF(timeout_s), 0.001, 86400, NULL},
    {"--concurrency", O_LONG, OFF(concurrency), 1, 100000, NULL},
    {"--rate", O_DOUBLE, OFF(rate), 1e-9, INFINITY, NULL},
    {"--burstiness", O_DOUBLE, OFF(burstiness), 1e-3, 1000, NULL},
    {"--requests", O_LONG, OFF(requests), 1, 1000000000, NULL},
    {"--duration", O_DOUBLE, OFF(duration_s), 0.001, 1e7, NULL},
    {"--warmup", O_LONG, OFF(warmup), 0, 1000000, NULL},
    {"--seed", O_U64, OFF(wl.seed), 0, 0, NULL},
    {"--isl", O_LONG, OFF(wl.isl), 1, 10000000, NULL},
    {"--osl", O_LONG, OFF(wl.osl), 1, 10000000, NULL},
    {"--vocab-size", O_INT, OFF(wl.vocab_size), 4, 100000000, NULL},
    {"--lengths-csv", O_STR, OFF(wl.lengths_csv), 0, 0, NULL},
    {"--input-col", O_STR, OFF(wl.input_col), 0, 0, NULL},
    {"--output-col", O_STR, OFF(wl.output_col), 0, 0, NULL},
    {"--prefix-groups", O_INT, OFF(wl.prefix_groups), 1, 10000000, NULL},
    {"--prefix-len", O_LONG, OFF(wl.prefix_len), 1, 10000000, NULL},
    {"--trace", O_STR, OFF(wl.trace), 0, 0, NULL},
    {"--time-scale", O_DOUBLE, OFF(wl.time_scale), 1e-6, 1e6, NULL},
    {"--length-scale", O_DOUBLE, OFF(wl.length_scale), 1e-6, 1e3, NULL},
    {"--max-isl", O_LONG, OFF(wl.max_isl), 1, 10000000, NULL},
    {"--max-osl", O_LONG, OFF(wl.max_osl), 1, 10000000, NULL},
    {"--skip-bad-lines", O_FLAG_ON, OFF(wl.skip_bad_lines), 0, 0, NULL},
    {"--slo", O_FN, 0, 0, 0, set_slo},
    {"--cores", O_LONG, OFF(cores), 1, 1000000, NULL},
    {"--sweep", O_FN, 0, 0, 0, set_sweep},
    {"--csv", O_STR, OFF(csv), 0, 0, NULL},
    {"--plot", O_STR, OFF(plot), 0, 0, NULL},
    {"--json", O_FLAG_ON, OFF(json), 0, 0, NULL},
};
#define N_SPECS (sizeof specs / sizeof specs[0])

static int number(const opt_spec *s, const char *v, dyb_opts *o)
{
    char *end;
    errno = 0;
    void *dst = (char *)o + s->off;
    if (s->kind == O_U64) {
        unsigned long long u = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-')
            goto bad;
        *(uint64_t *)dst = u;
        return 0;
    }
    double d = s->kind == O_DOUBLE ? strtod(v, &end) : (double)strtol(v, &end, 10);
    if (errno || end == v || *end || isnan(d) || d < s->min || d > s->max)
        goto bad;
    if (s->kind == O_DOUBLE)
        *(double *)dst = d;
    else if (s->kind == O_LONG)
        *(long *)dst = (long)d;
    else
        *(int *)dst = (int)d;
    return 0;
bad:
    if (s->kind == O_U64)
        fprintf(stderr, "dyad bench: %s: '%s' is not a non-negative integer\n", s->name, v);
    else if (s->kind == O_DOUBLE)
        fprintf(stderr, "dyad bench: %s: '%s' is not a number in [%g, %g]\n", s->name, v,
                s->min, s->max);
    else
        fprintf(stderr, "dyad bench: %s: '%s' is not an integer in [%.0f, %.0f]\n", s->name, v,
                s->min, s->max);
    return -1;
}

/* Applies one option; *i is advanced past its value. -1 on a bad option. */
static int apply(const opt_spec *s, int argc, char **argv, int *i, dyb_opts *o)
{
    if (s->kind == O_FLAG_ON || s->kind == O_FLAG_OFF) {
        *(bool *)((char *)o + s->off) = s->kind == O_FLAG_ON;
        return 0;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "dyad bench: %s needs a value\n", s->name);
        return -1;
    }
    const char *v = argv[++*i];
    if (s->kind == O_STR) {
        *(const char **)((char *)o + s->off) = v;
        return 0;
    }
    return s->kind == O_FN ? s->fn(o, v) : number(s, v, o);
}

static void defaults(dyb_opts *o)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (dyb_opts){.url = "http://127.0.0.1:8000", .ignore_eos = true, .burstiness = 1,
                    .requests = -1, .cores = ncpu > 0 ? ncpu : 1};
    o->wl = (dyb_workload_config){.isl = 512, .osl = 128, .vocab_size = 32000,
                                  .time_scale = 1, .length_scale = 1};
}

static bool given(const bool *seen, const char *name)
{
    for (size_t i = 0; i < N_SPECS; i++)
        if (!strcmp(specs[i].name, name))
            return seen[i];
    return false;
}

/* An option that needs another: "dyad bench: A needs B". */
static bool needs(const bool *seen, const char *a, bool ok, const char *b)
{
    if (given(seen, a) && !ok) {
        fprintf(stderr, "dyad bench: %s needs %s\n", a, b);
        return false;
    }
    return true;
}

static bool conflict(const bool *seen, const char *a, bool other, const char *b)
{
    if (given(seen, a) && other) {
        fprintf(stderr, "dyad bench: %s cannot be used with %s\n", a, b);
        return false;
    }
    return true;
}

static bool check(const dyb_opts *o, const bool *seen)
{
    const dyb_workload_config *w = &o->wl;
    bool table = w->lengths_csv, trace = w->trace, rate = o->rate > 0 || o->sweep == DYB_SWEEP_RATE;
    return conflict(seen, "--trace", table, "--lengths-csv") &&
           conflict(seen, "--isl", table || trace, "--lengths-csv or --trace") &&
           conflict(seen, "--osl", table || trace, "--lengths-csv or --trace") &&
           conflict(seen, "--prefix-groups", trace, "--trace (the trace has its own prefixes)") &&
           needs(seen, "--prefix-groups", given(seen, "--prefix-len"), "--prefix-len") &&
           needs(seen, "--prefix-len", w->prefix_groups > 0, "--prefix-groups") &&
           needs(seen, "--input-col", table, "--lengths-csv") &&
           needs(seen, "--output-col", table, "--lengths-csv") &&
           needs(seen, "--time-scale", trace, "--trace") &&
           needs(seen, "--length-scale", table || trace, "--lengths-csv or --trace") &&
           needs(seen, "--burstiness", rate, "--rate or --sweep rate=...") &&
           conflict(seen, "--concurrency", o->sweep == DYB_SWEEP_CONCURRENCY,
                    "--sweep concurrency=...") &&
           conflict(seen, "--rate", o->sweep == DYB_SWEEP_RATE, "--sweep rate=...") &&
           conflict(seen, "--prompt", o->endpoint == DYB_EP_CHAT && !o->text_prompt,
                    "--endpoint chat (chat messages are text)");
}

int dyb_opts_parse(int argc, char **argv, dyb_opts *o)
{
    bool seen[N_SPECS] = {0};
    defaults(o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            dyb_opts_usage(stdout);
            return 1;
        }
        size_t k = 0;
        while (k < N_SPECS && strcmp(argv[i], specs[k].name))
            k++;
        if (k == N_SPECS) {
            fprintf(stderr, "dyad bench: unknown option '%s' (see dyad bench --help)\n", argv[i]);
            return 2;
        }
        if (apply(&specs[k], argc, argv, &i, o) != 0)
            return 2;
        seen[k] = true;
    }
    if (!check(o, seen))
        return 2;
    if (o->requests < 0 && o->duration_s <= 0 && !o->wl.trace)
        o->requests = 100;
    return 0;
}
