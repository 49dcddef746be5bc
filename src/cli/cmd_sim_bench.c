/* cmd_sim_bench.c — `dyad sim bench`: how fast the simulator runs (a benchmark, not a test).
 * It replays a Mooncake trace — by default the whole conversation trace in bench/data/ at
 * about the request rate of Dynamo's replay — on a deployment priced by a roofline preset,
 * streamed (sim.h's dy_sim_run_stream): each request's lengths and time come from its trace
 * row when the simulator asks for the next request, its prompt only once the simulator
 * admitted it (a refused request's prompt is never made), and each sample's record is counted
 * and dropped when it ends, so a run of K loops of the trace holds no more than a run of one. It prints simulated requests
 * and simulated seconds per CPU-second, the engine steps and the peak RSS. The process's CPU
 * clock is read here, around the run: the simulator itself never reads a clock. */
#include "bench/bench_workload.h"
#include "cli/commands.h"
#include "cli/deploy_opts.h"
#include "cli/parse.h"
#include "sim/cost.h"
#include "sim/deploy.h"
#include "sim/sim.h"
#include "util/clock.h"
#include "util/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char bench_usage[] =
    "usage: dyad sim bench [--trace FILE] [--loops K] [--rate R] [deployment] [options]\n"
    "Measures the simulator's speed: replays a Mooncake trace on a simulated deployment,\n"
    "streamed, and prints simulated requests and simulated seconds per CPU-second, engine\n"
    "steps and peak RSS.\n";
static const char bench_epilog[] =
    "\n"
    "The trace's own arrival times are scaled so that its mean rate is --rate; --loops K\n"
    "replays it K times back to back (each loop shifted by the trace's span and with its own\n"
    "prompts, as bench's rounds), so a longer run shows whether memory stays flat. CPU time is\n"
    "the process's (CLOCK_PROCESS_CPUTIME_ID) over the run, prompts' making included (shown\n"
    "apart); peak RSS is getrusage's. On a terminal, stderr shows a progress line.\n"
    "Exit status: 0; 1 when the cost model or the trace is bad or the run fails; 2 on a usage\n"
    "error.\n";

#define DEFAULT_COST DYAD_SOURCE_DIR "/sim/costs/h100-llama3.1-8b-fp8.json"
#define DEFAULT_TRACE DYAD_SOURCE_DIR "/bench/data/mooncake_conversation_trace.jsonl"

typedef struct {
    const char *cost, *trace;
    int loops, agg, pre, dec, concurrency;
    cli_deploy_opts dep; /* every worker's limits */
    int max_queue;
    double rate, length_scale;
    uint64_t seed;
    bool json;
} bench_opts;

#define N_BENCH_OPTS 18

static int bench_table(bench_opts *o, bool *seen, dy_opt *t)
{
    const dy_opt opts[] = {
        {.section = "Workload", .name = "trace", .kind = DY_OPT_STR, .dst = &o->trace,
         .meta = "FILE", .help = "a Mooncake JSONL trace", .def_str = DEFAULT_TRACE,
         .shown_default = "bench/data/mooncake_conversation_trace.jsonl"},
        {.name = "loops", .kind = DY_OPT_INT, .dst = &o->loops, .meta = "K",
         .help = "replay the trace K times back to back", .min = 1, .max = 100000, .def = 1},
        {.name = "rate", .kind = DY_OPT_DOUBLE, .dst = &o->rate, .meta = "R",
         .help = "mean arrival rate the trace's times are scaled to, requests/s", .min = 1e-6,
         .max = 1e9, .def = 770},
        {.name = "length-scale", .kind = DY_OPT_DOUBLE, .dst = &o->length_scale, .meta = "Y",
         .help = "multiply the trace's lengths (and its block) by Y", .min = 1e-6, .max = 1e3,
         .def = 1},
        {.name = "concurrency", .kind = DY_OPT_INT, .dst = &o->concurrency, .meta = "C",
         .help = "at most C requests in flight (0: no cap)", .min = 0, .max = 10000000,
         .def = 0},
        {.name = "seed", .kind = DY_OPT_U64, .dst = &o->seed, .meta = "S",
         .help = "seed of the prompts' tokens"},
        {.section = "Deployment (as `dyad sim run`)", .name = "cost", .kind = DY_OPT_STR,
         .dst = &o->cost, .meta = "FILE", .help = "the cost model", .def_str = DEFAULT_COST,
         .shown_default = "sim/costs/h100-llama3.1-8b-fp8.json"},
        {.name = "workers", .kind = DY_OPT_INT, .dst = &o->agg, .meta = "N",
         .help = "aggregated workers", .min = 1, .max = DY_DEPLOY_MAX_WORKERS, .def = -1,
         .shown_default = "16"},
        {.name = "prefill-workers", .kind = DY_OPT_INT, .dst = &o->pre, .meta = "P",
         .help = "prefill workers (with --decode-workers)", .min = 0, .max = DY_DEPLOY_MAX_WORKERS - 1,
         .def = -1, .shown_default = ""},
        {.name = "decode-workers", .kind = DY_OPT_INT, .dst = &o->dec, .meta = "D",
         .help = "decode workers (with --prefill-workers)", .min = 1, .max = DY_DEPLOY_MAX_WORKERS,
         .def = -1, .shown_default = ""},
    };
    const dy_opt after_workers[] = {
        {.name = "max-queue", .kind = DY_OPT_INT, .dst = &o->max_queue, .meta = "N",
         .help = "sequences waiting for a first token before new requests are refused",
         .min = 1, .max = 1 << 20, .def = 256},
        {.section = "Output", .name = "json", .kind = DY_OPT_FLAG, .dst = &o->json,
         .help = "one JSON object instead of the report"},
    };
#define N(a) (sizeof(a) / sizeof((a)[0]))
    _Static_assert(N(opts) + CLI_DEPLOY_OPTS + N(after_workers) <= N_BENCH_OPTS, "N_BENCH_OPTS");
    int n = cli_opts_append(t, 0, opts, N(opts));
    n += cli_deploy_opts_table(&o->dep, NULL, false, t + n);
    n = cli_opts_append(t, n, after_workers, N(after_workers));
#undef N
    cli_opts_track(t, n, seen);
    return n;
}

/* 0 after --help, 2 on a usage error, CLI_GO to run. */
static int parse(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){0};
    bool seen[N_BENCH_OPTS];
    dy_opt t[N_BENCH_OPTS];
    int n = bench_table(o, seen, t);
    int rc = cli_parse("sim bench", bench_usage, bench_epilog, t, n, argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    dy_opts_given g = {t, n, "sim bench"};
    if (!dy_opts_conflict(g, "--workers", o->pre >= 0 || o->dec >= 0,
                          "--prefill-workers/--decode-workers") ||
        !dy_opts_needs(g, "--prefill-workers", o->dec > 0, "--decode-workers") ||
        !dy_opts_needs(g, "--decode-workers", o->pre >= 0, "--prefill-workers"))
        return 2;
    if (o->agg < 0 && o->pre < 0)
        o->agg = 16;
    return CLI_GO;
}

/* ---------------------------------------------------------------- the deployment */

/* The pools: --workers N, else P prefill + D decode (--prefill-workers 0: D aggregated). */
static dy_deploy_shape shape_of(const bench_opts *o)
{
    dy_deploy_shape sh = cli_deploy_shape(&o->dep);
    if (o->agg > 0)
        sh.agg = o->agg;
    else if (o->pre == 0)
        sh.agg = o->dec;
    else
        sh.prefill = o->pre, sh.decode = o->dec;
    return sh;
}

/* ---------------------------------------------------------------- the stream */

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The trace's rows, loop after loop, as requests; the records, as counts. A request's prompt
 * is made only when the simulator asks for it, once the request was admitted. */
typedef struct {
    dyb_workload *wl;
    long rows, total, next;
    double scale;          /* trace ms -> simulated seconds */
    double period_s;       /* one loop's span: the last row's arrival plus one mean gap */
    double make_cpu_s;     /* CPU time spent making prompts */
    long samples, completed, failed;
    uint64_t output_tokens;
    dy_progress *progress; /* on a terminal: samples ended of the requests */
    double sim_s;          /* the latest end seen (a refused sample has none) */
} bench_stream;

static int next_request(void *ctx, dy_sim_request *out)
{
    bench_stream *b = ctx;
    if (b->next >= b->total)
        return 0;
    const long row = b->next % b->rows, loop = b->next / b->rows;
    long isl, osl;
    if (dyb_workload_lengths(b->wl, row, &isl, &osl) != 0 || isl > INT32_MAX || osl > INT32_MAX)
        return -1;
    *out = (dy_sim_request){
        .arrival = (double)loop * b->period_s + dyb_workload_arrival_ms(b->wl, row) * b->scale,
        .prompt = NULL, .n_prompt = (int)isl, .max_tokens = (int)osl, .n_samples = 1};
    b->next++;
    return 1;
}

/* Request i's tokens: its trace row's, with its loop's own prompts (bench's rounds). */
static bool make_prompt(void *ctx, int request, int32_t *out)
{
    bench_stream *b = ctx;
    double t0 = cpu_seconds();
    dyb_workload_set_round(b->wl, (uint64_t)(request / b->rows));
    dyb_request r;
    bool ok = dyb_workload_make(b->wl, request % b->rows, false, &r) == 0;
    if (ok)
        memcpy(out, r.tokens, sizeof *out * (size_t)r.isl);
    dyb_request_free(&r);
    b->make_cpu_s += cpu_seconds() - t0;
    return ok;
}

static bool count_record(void *ctx, const dy_sim_record *r)
{
    bench_stream *b = ctx;
    b->samples++;
    if (r->ok)
        b->completed++;
    else
        b->failed++;
    b->output_tokens += (uint64_t)r->n_tokens;
    if (r->done > b->sim_s)
        b->sim_s = r->done;
    double wall = dy_now();
    if (dy_progress_wants(b->progress, wall)) {
        char note[48];
        snprintf(note, sizeof note, "t=%.1f s simulated", b->sim_s);
        dy_progress_update(b->progress, (double)b->samples, note, wall);
    }
    return true;
}

/* ---------------------------------------------------------------- the run */

typedef struct {
    bench_opts o;
    dy_cost_model *m;
    dy_deploy_shape shape;
    dy_deploy d;
    dyb_workload_config wc;
    bench_stream st;
    /* what the run measured */
    dy_sim_totals tot;
    double cpu_s, wall_s;
    long max_rss_kib;
} bench_cmd;

static int setup(bench_cmd *c)
{
    char err[1024];
    if (!(c->m = dy_cost_load(c->o.cost, err, sizeof err))) {
        fprintf(stderr, "dyad sim bench: %s\n", err);
        return 1;
    }
    c->shape = shape_of(&c->o);
    int rc = dy_deploy_make(&c->shape, c->m, &c->d, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "dyad sim bench: %s: %s\n", c->o.cost, err);
        return rc;
    }
    c->wc = (dyb_workload_config){.trace = c->o.trace, .vocab_size = 32000, .seed = c->o.seed,
                                  .time_scale = 1, .length_scale = c->o.length_scale};
    if (!(c->st.wl = dyb_workload_new(&c->wc, err, sizeof err))) {
        fprintf(stderr, "dyad sim bench: %s\n", err);
        return 1;
    }
    c->st.rows = dyb_workload_rows(c->st.wl);
    const double span_ms = dyb_workload_arrival_ms(c->st.wl, c->st.rows - 1);
    if (c->st.rows < 2 || !(span_ms > 0)) {
        fprintf(stderr, "dyad sim bench: %s: a trace of at least two rows at different times "
                "is needed\n", c->o.trace);
        return 1;
    }
    /* trace rate (rows - 1) / span; scaled to --rate */
    c->st.scale = (c->st.rows - 1) / span_ms / c->o.rate;
    c->st.period_s = span_ms * c->st.scale * (double)c->st.rows / (double)(c->st.rows - 1);
    c->st.total = c->st.rows * c->o.loops;
    return 0;
}

static int run(bench_cmd *c)
{
    dy_sim_config sc = dy_deploy_sim_config(&c->d, &c->shape, c->m);
    sc.max_queue = c->o.max_queue;
    sc.max_in_flight = c->o.concurrency;
    dy_step_costs costs = dy_deploy_costs(c->m);
    char err[512];
    c->st.progress = dy_progress_new(stderr, isatty(STDERR_FILENO) == 1, "dyad sim bench",
                                     DY_PROGRESS_COUNT, "samples", (double)c->st.total, dy_now());
    double cpu0 = cpu_seconds(), wall0 = wall_seconds();
    dy_sim *s = dy_sim_new(&sc, &costs, NULL, err, sizeof err);
    dy_sim_stream io = {.next = next_request, .sink = count_record, .prompt = make_prompt,
                        .ctx = &c->st};
    int rc = s ? dy_sim_run_stream(s, &io, err, sizeof err) : -1;
    c->cpu_s = cpu_seconds() - cpu0;
    c->wall_s = wall_seconds() - wall0;
    dy_progress_finish(c->st.progress);
    c->st.progress = NULL;
    if (rc == 0)
        c->tot = dy_sim_get_totals(s);
    dy_sim_free(s);
    struct rusage ru;
    c->max_rss_kib = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
    if (rc != 0)
        fprintf(stderr, "dyad sim bench: %s\n", err);
    return rc == 0 ? 0 : 1;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static void report(const bench_cmd *c)
{
    const bench_stream *b = &c->st;
    const double req_per_cpu = c->cpu_s > 0 ? b->samples / c->cpu_s : 0;
    const double sim_per_cpu = c->cpu_s > 0 ? c->tot.duration_s / c->cpu_s : 0;
    /* the same without the prompts' making, which is the workload generator's, not the
     * simulator's */
    const double sim_cpu = c->cpu_s - b->make_cpu_s;
    const double req_per_sim_cpu = sim_cpu > 0 ? b->samples / sim_cpu : 0;
    if (c->o.json) {
        printf("{\"trace\": \"%s\", \"loops\": %d, \"rate\": %.6g, \"length_scale\": %.6g, "
               "\"workers\": %d, \"prefill_workers\": %d, \"concurrency\": %d, "
               "\"kv_blocks\": %d, \"cost\": \"%s\", \"requests\": %ld, \"completed\": %ld, "
               "\"failed\": %ld, \"refused\": %ld, \"output_tokens\": %llu, \"steps\": %llu, "
               "\"simulated_s\": %.6g, \"cpu_s\": %.6g, \"make_cpu_s\": %.6g, \"wall_s\": %.6g, "
               "\"requests_per_cpu_s\": %.6g, \"simulated_s_per_cpu_s\": %.6g, "
               "\"requests_per_cpu_s_without_making\": %.6g, \"block_size\": %d, "
               "\"peak_rss_kib\": %ld, \"peak_requests_held\": %d}\n",
               base_name(c->o.trace), c->o.loops, c->o.rate, c->o.length_scale, c->d.n,
               c->d.n_prefill, c->o.concurrency, (int)c->d.kv_blocks, dy_cost_name(c->m), b->samples,
               b->completed, b->failed, c->tot.refused, (unsigned long long)b->output_tokens,
               (unsigned long long)c->tot.steps, c->tot.duration_s, c->cpu_s, b->make_cpu_s,
               c->wall_s, req_per_cpu, sim_per_cpu, req_per_sim_cpu, c->shape.block_size,
               c->max_rss_kib, c->tot.peak_requests_held);
        return;
    }
    char shape[96];
    if (c->d.n_prefill == 0)
        snprintf(shape, sizeof shape, "%d aggregated workers", c->d.n);
    else
        snprintf(shape, sizeof shape, "%d prefill + %d decode workers", c->d.n_prefill,
                 c->d.n - c->d.n_prefill);
    printf("== dyad sim bench: %s, %s, %d KV blocks each\n", shape, dy_cost_name(c->m),
           (int)c->d.kv_blocks);
    printf("workload   %s x %d loop%s: %ld requests at %.4g req/s (trace times x %.4g), "
           "lengths x %.4g%s\n", base_name(c->o.trace), c->o.loops, c->o.loops == 1 ? "" : "s",
           b->total, c->o.rate, b->scale * 1000, c->o.length_scale,
           c->o.concurrency ? ", capped in flight" : "");
    printf("simulated  %ld requests: %ld completed, %ld failed (%ld refused: queue full); "
           "%llu output tokens; %llu engine steps; %.4g s of simulated time\n", b->samples,
           b->completed, b->failed, c->tot.refused, (unsigned long long)b->output_tokens,
           (unsigned long long)c->tot.steps, c->tot.duration_s);
    printf("cpu        %.4g s (%.4g s of it making the trace's prompts), wall %.4g s\n",
           c->cpu_s, b->make_cpu_s, c->wall_s);
    printf("speed      %.4g simulated requests per CPU-second, %.4g simulated seconds per "
           "CPU-second (%.4g requests per CPU-second without the prompts' making)\n",
           req_per_cpu, sim_per_cpu, req_per_sim_cpu);
    printf("memory     peak RSS %.1f MiB; at most %d requests held at once\n",
           c->max_rss_kib / 1024.0, c->tot.peak_requests_held);
}

int cmd_sim_bench(int argc, char **argv)
{
    bench_cmd *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "dyad sim bench: out of memory\n");
        return 1;
    }
    int rc = parse(argc, argv, &c->o);
    if (rc == CLI_GO) {
        rc = setup(c);
        if (rc == 0)
            rc = run(c);
        if (rc == 0)
            report(c);
    }
    dyb_workload_free(c->st.wl);
    dy_deploy_free(&c->d);
    dy_cost_free(c->m);
    free(c);
    return rc;
}
