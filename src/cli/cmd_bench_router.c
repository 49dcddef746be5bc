/* cmd_bench_router.c — `dyad bench router`: what the KV-aware router costs the frontend.
 * Builds the router's prefix index for N workers holding about B distinct blocks laid out
 * like real traffic (long prompts that share system-prompt prefixes, each prompt cached on
 * a few workers to different depths), then times, call by call with CLOCK_MONOTONIC, one
 * kv-aware routing decision for requests of 32, 128 and 512 blocks, one decision with its
 * accounting (routed, first token, finished), and applying one batch of KV events. Prints
 * the median and p99 in µs. A benchmark: prints figures, asserts nothing. */
#include "cli/commands.h"
#include "util/stats.h"
#include "cli/parse.h"
#include "kv/kv_cache.h"
#include "route/router.h"
#include "util/clock.h"
#include "util/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char router_usage[] =
    "usage: dyad bench router [--workers W] [--blocks B] [--reps N] [--batch E] [--json]\n"
    "Times one kv-aware routing decision over a prefix index of W workers holding about B\n"
    "distinct blocks, for requests of 32, 128 and 512 blocks; then one decision plus its\n"
    "accounting, and applying a batch of E events. Reports median and p99 in µs over --reps\n"
    "repetitions. On a terminal, stderr shows a progress line.\n";

#define CHAIN 512   /* blocks per prompt chain: the longest request measured */
#define SYSTEM 32   /* leading blocks every chain shares with its system prompt */
#define N_SYSTEM 16 /* distinct system prompts */
#define MAX_HOLDERS 8

typedef struct {
    int workers, blocks, reps, batch;
    bool json;
} ropts;

typedef struct {
    double median, p99, mean;
} timing;

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static timing summarise(double *t, int n)
{
    dy_sort_doubles(t, (size_t)n);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += t[i];
    int p = (int)((long)n * 99 / 100);
    return (timing){t[n / 2], t[p < n ? p : n - 1], sum / n};
}

/* One block hash of synthetic tokens chained on parent, as a worker would compute it. */
static uint64_t next_block(uint64_t parent, uint64_t *rng)
{
    int32_t tok[16];
    for (int t = 0; t < 16; t++)
        tok[t] = (int32_t)(rng_next(rng) % 32000);
    return dy_block_hash(parent, tok, 16);
}

/* Chains of CHAIN block hashes: h[c·CHAIN + i]. Chain c starts with system prompt c mod
 * N_SYSTEM, then continues with blocks of its own, so distinct blocks ≈ `blocks`. */
static uint64_t *make_chains(int blocks, int *n_chains, uint64_t *rng)
{
    int own = blocks - N_SYSTEM * SYSTEM, n = own > 0 ? (own + CHAIN - SYSTEM - 1) / (CHAIN - SYSTEM) : 1;
    uint64_t *h = malloc((size_t)n * CHAIN * sizeof *h), sys[N_SYSTEM][SYSTEM];
    if (!h)
        return NULL;
    for (int s = 0; s < N_SYSTEM; s++)
        for (int i = 0; i < SYSTEM; i++)
            sys[s][i] = next_block(i ? sys[s][i - 1] : 0xd1ad, rng);
    for (int c = 0; c < n; c++) {
        memcpy(&h[(size_t)c * CHAIN], sys[c % N_SYSTEM], sizeof sys[0]);
        for (int i = SYSTEM; i < CHAIN; i++)
            h[(size_t)c * CHAIN + i] = next_block(h[(size_t)c * CHAIN + i - 1], rng);
    }
    *n_chains = n;
    return h;
}

/* Worker w reports that it stores hashes[0..n) (its next event batch). */
static int store(dy_kv_index *x, int w, const uint64_t *hashes, int n, dy_kv_event *ev)
{
    for (int i = 0; i < n; i++)
        ev[i] = (dy_kv_event){DY_KV_EV_STORED, 0, hashes[i], i ? hashes[i - 1] : 0};
    return dy_kv_index_apply(x, w, dy_kv_index_worker_seq(x, w) + 1, ev, n);
}

/* Each chain is cached whole on one worker and to random depths on up to 7 more; every
 * worker reports a random load so the costs differ. */
static int populate(dy_router *r, const ropts *o, const uint64_t *h, int n_chains, uint64_t *rng)
{
    dy_kv_index *x = dy_router_index(r);
    dy_kv_event *ev = malloc(CHAIN * sizeof *ev);
    if (!ev)
        return -1;
    int rc = 0;
    for (int c = 0; c < n_chains && rc == 0; c++) {
        int holders = 1 + (int)(rng_next(rng) % MAX_HOLDERS);
        for (int k = 0; k < holders && rc == 0; k++) {
            int w = (int)(rng_next(rng) % (uint64_t)o->workers);
            int depth = k == 0 ? CHAIN : SYSTEM + (int)(rng_next(rng) % (CHAIN - SYSTEM + 1));
            rc = store(x, w, &h[(size_t)c * CHAIN], depth, ev);
        }
    }
    for (int w = 0; w < o->workers; w++) {
        dy_router_load l = {.queued_prefill_tokens = (int64_t)(rng_next(rng) % 4096),
                            .active_decode_blocks = (int64_t)(rng_next(rng) % 2048)};
        dy_router_report_load(r, w, &l);
    }
    free(ev);
    return rc;
}

/* The progress line: calls timed of all the run times, drawn between timed calls. */
typedef struct {
    dy_progress *line;
    long base; /* calls of the timings before this one */
} calls;

#define PROGRESS_EVERY 4096 /* calls between looks at the clock for the line */

static void calls_at(calls *c, int k, const char *what)
{
    if ((k + 1) % PROGRESS_EVERY == 0)
        dy_progress_update(c->line, (double)(c->base + k + 1), what, dy_now());
}

static void calls_done(calls *c, int reps, const char *what)
{
    c->base += reps;
    dy_progress_update(c->line, (double)c->base, what, dy_now());
}

static timing time_decisions(dy_router *r, const ropts *o, const uint64_t *h, int n_chains,
                             int n, bool account, uint64_t *rng, double *t, calls *pg)
{
    dy_router_ticket tk;
    const char *what = account ? "decision + accounting" : "kv-aware decision";
    for (int k = 0; k < o->reps; k++) {
        const uint64_t *req = &h[(rng_next(rng) % (uint64_t)n_chains) * CHAIN];
        uint64_t t0 = dy_now_ns();
        dy_router_choice c = dy_router_pick(r, DY_POOL_AGG, NULL, 0, req, n, n * 16, k * 1e-3);
        if (account && c.worker >= 0) {
            dy_router_on_routed(r, &tk, c.worker, -1, req, n, n * 16, k * 1e-3);
            dy_router_on_first_token(r, &tk);
            dy_router_on_finished(r, &tk);
        }
        t[k] = (double)(dy_now_ns() - t0) / 1e3;
        calls_at(pg, k, what);
    }
    calls_done(pg, o->reps, what);
    return summarise(t, o->reps);
}

/* Alternate batches: a worker stores `batch` new blocks, then removes them, so the index
 * stays the same size. */
static timing time_apply(dy_router *r, const ropts *o, uint64_t *rng, double *t, calls *pg)
{
    dy_kv_index *x = dy_router_index(r);
    dy_kv_event *ev = malloc((size_t)o->batch * sizeof *ev);
    if (!ev)
        return (timing){0, 0, 0};
    for (int k = 0; k < o->reps; k++) {
        int w = (k / 2) % o->workers;
        if (k % 2 == 0) {
            uint64_t parent = rng_next(rng);
            for (int i = 0; i < o->batch; i++) {
                uint64_t hsh = rng_next(rng);
                ev[i] = (dy_kv_event){DY_KV_EV_STORED, 0, hsh, parent};
                parent = hsh;
            }
        } else {
            for (int i = 0; i < o->batch; i++)
                ev[i].kind = DY_KV_EV_REMOVED;
        }
        uint64_t seq = dy_kv_index_worker_seq(x, w) + 1;
        uint64_t t0 = dy_now_ns();
        dy_kv_index_apply(x, w, seq, ev, o->batch);
        t[k] = (double)(dy_now_ns() - t0) / 1e3;
        calls_at(pg, k, "apply");
    }
    calls_done(pg, o->reps, "apply");
    free(ev);
    return summarise(t, o->reps);
}

static const int sizes[3] = {32, 128, CHAIN};

static void print_report(const ropts *o, size_t indexed, int n_chains, const timing *d,
                         const timing *acc, const timing *ap)
{
    if (o->json) {
        printf("{\"workers\":%d,\"indexed_blocks\":%zu,\"chains\":%d,\"reps\":%d,\"decision\":[",
               o->workers, indexed, n_chains, o->reps);
        for (int i = 0; i < 3; i++)
            printf("%s{\"blocks\":%d,\"median_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f}",
                   i ? "," : "", sizes[i], d[i].median, d[i].p99, d[i].mean);
        printf("],\"decision_with_accounting\":{\"blocks\":128,\"median_us\":%.3f,\"p99_us\":%.3f},"
               "\"apply\":{\"events\":%d,\"median_us\":%.3f,\"p99_us\":%.3f}}\n",
               acc->median, acc->p99, o->batch, ap->median, ap->p99);
        return;
    }
    printf("dyad bench router: %d workers, %zu indexed blocks (%d chains of %d over %d system "
           "prompts), %d reps\n", o->workers, indexed, n_chains, CHAIN, N_SYSTEM, o->reps);
    for (int i = 0; i < 3; i++)
        printf("kv-aware decision, %3d blocks:        median %7.2f µs   p99 %7.2f µs\n",
               sizes[i], d[i].median, d[i].p99);
    printf("decision + accounting, 128 blocks:   median %7.2f µs   p99 %7.2f µs\n",
           acc->median, acc->p99);
    printf("apply a batch of %3d events:         median %7.2f µs   p99 %7.2f µs\n", o->batch,
           ap->median, ap->p99);
}

static int run(const ropts *o)
{
    uint64_t rng = 42;
    int n_chains = 0;
    dy_router_config cfg = dy_router_config_default();
    dy_router *r = dy_router_new(&cfg, o->workers);
    uint64_t *h = make_chains(o->blocks, &n_chains, &rng);
    double *t = malloc((size_t)o->reps * sizeof *t);
    if (!r || !h || !t) {
        fprintf(stderr, "dyad bench router: out of memory\n");
        return 1;
    }
    for (int w = 0; w < o->workers; w++)
        dy_router_add_worker(r, w, true);
    if (populate(r, o, h, n_chains, &rng) != 0) {
        fprintf(stderr, "dyad bench router: cannot build the index\n");
        return 1;
    }
    size_t indexed = dy_kv_index_size(dy_router_index(r));
    timing d[3], acc, ap;
    calls pg = {dy_progress_new(stderr, isatty(STDERR_FILENO) == 1, "dyad bench router",
                                DY_PROGRESS_COUNT, "calls", 5.0 * o->reps, dy_now()), 0};
    for (int i = 0; i < 3; i++)
        d[i] = time_decisions(r, o, h, n_chains, sizes[i], false, &rng, t, &pg);
    acc = time_decisions(r, o, h, n_chains, 128, true, &rng, t, &pg);
    ap = time_apply(r, o, &rng, t, &pg);
    dy_progress_finish(pg.line);
    print_report(o, indexed, n_chains, d, &acc, &ap);
    free(t);
    free(h);
    dy_router_free(r);
    return 0;
}

int cmd_bench_router(int argc, char **argv)
{
    ropts o;
    const dy_opt t[] = {
        {.name = "workers", .kind = DY_OPT_INT, .dst = &o.workers, .meta = "W",
         .help = "workers in the index", .min = 1, .max = DY_KV_INDEX_MAX_WORKERS, .def = 64},
        {.name = "blocks", .kind = DY_OPT_INT, .dst = &o.blocks, .meta = "B",
         .help = "distinct blocks they hold, about", .min = 1, .max = 10000000, .def = 100000},
        {.name = "reps", .kind = DY_OPT_INT, .dst = &o.reps, .meta = "N",
         .help = "repetitions of each timing", .min = 1, .max = 10000000, .def = 20000},
        {.name = "batch", .kind = DY_OPT_INT, .dst = &o.batch, .meta = "E",
         .help = "KV events in the batch applied", .min = 1, .max = 100000, .def = 64},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &o.json,
         .help = "one JSON object on stdout instead of the report"},
    };
    int rc = cli_parse("bench router", router_usage, NULL, t, (int)(sizeof t / sizeof t[0]),
                       argc, argv, NULL);
    return rc != CLI_GO ? rc : run(&o);
}
