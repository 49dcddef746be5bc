/* cmd_bench.c — `dyad bench engine`: what each phase costs on this machine. For each model:
 * prefill time per prompt token, decode time per generated token at several contexts, decode
 * step time against batch size (with a least-squares fit t = a + b·B), and the roofline
 * measured in the same run: read bandwidth from DRAM and from the last-level cache (decode is
 * compared with the one its weights come from) and the peak of the arithmetic the model's
 * weights use at the kernel level in use (fp32 FMA or int8 dot products; prefill is compared
 * with it). Every figure is the minimum of --reps repetitions. This is a benchmark: it prints figures, it asserts nothing. */
#include "cli/commands.h"
#include "cli/parse.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/roofline.h"
#include "engine/sampler.h"
#include "bench/bench.h"
#include "util/clock.h"
#include "util/progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char bench_usage[] = "usage: dyad bench engine [options]\n";
static const char bench_epilog[] =
    "Models whose context is shorter than the largest measured position are run with the\n"
    "context raised to 1024, or to what --decode-context needs (RoPE extends; the figures\n"
    "measure cost, not text quality).\n"
    "On a terminal, stderr shows a progress line (figures measured of all).\n";

#define N_PREFILL 6
#define N_DECODE 4
#define N_BATCH 7
static const int prefill_p[N_PREFILL] = {1, 4, 16, 64, 128, 512};
static const int decode_ctx[N_DECODE] = {16, 64, 128, 512};
static const int batch_b[N_BATCH] = {1, 2, 4, 8, 16, 32, 64};
#define BATCH_CTX 64 /* every sequence of the batch test has this many positions before it */

#define MAX_MODELS 16
#define MAX_BATCH_CTX 4 /* --batch-context values */

typedef struct {
    int threads, reps;
    int kv_type;     /* dy_kv_type of the KV cache */
    int extra_ctx;   /* one more decode point at this context (0: none) */
    int batch_ctx[MAX_BATCH_CTX], n_batch_ctx; /* batch tables with private KV at these */
    int batch_kv_mib; /* the KV those tables may take; larger B are skipped */
    bool json, quick;
    bool phases;     /* only the phase breakdown of a prefill and a batched decode step */
    const char *models[MAX_MODELS];
    int n_models;
    const char *tokenizer; /* accepted for symmetry with `dyad run`; token ids are synthetic */
} bench_opts;

typedef struct {
    double prefill_ms[N_PREFILL];
    double decode_ms[N_DECODE + 1]; /* the last: at --decode-context */
    double batch_ms[N_BATCH];
    double fit_a, fit_b, fit_r2;
    double batch_at_ms[MAX_BATCH_CTX][N_BATCH]; /* -1: not measured (over the KV budget) */
    int ctx_used;
} results;

/* The command's progress line: figures measured of all it will measure. */
typedef struct {
    dy_progress *line;
    int done;
} points;

typedef struct {
    dy_model *m;
    dy_kv_pool *kv;
    dy_engine *e;
    int32_t *tokens;  /* synthetic prompt ids */
    int32_t *blocks;  /* the long sequence's block table */
    int n_blocks;
    float *logits;
    points *progress;
    char err[512];
} bench_ctx;

/* The figures of one model, and of the machine (read bandwidth and FMA peak). */
static int model_points(const bench_opts *o)
{
    if (o->phases)
        return 2;
    return (o->quick ? 5 + 3 + 5 : N_PREFILL + N_DECODE + N_BATCH) + (o->extra_ctx > 0) +
           o->n_batch_ctx * N_BATCH;
}

/* The context of decode point i (N_DECODE: --decode-context's). */
static int decode_context(const bench_opts *o, int i)
{
    return i < N_DECODE ? decode_ctx[i] : o->extra_ctx;
}
#define MACHINE_POINTS 4

static void point_done(points *pt, const char *what)
{
    pt->done++;
    dy_progress_update(pt->line, pt->done, what, dy_now());
}

/* Runs one step `reps` times and returns the fastest, in ms (-1 on error). */
static double time_step(bench_ctx *b, const dy_span *spans, int n, int reps)
{
    double best = -1;
    for (int r = 0; r < reps; r++) {
        double t0 = 1e3 * dy_now();
        if (dy_engine_step(b->e, spans, n, b->logits, b->err, sizeof b->err) != 0)
            return -1;
        double t = 1e3 * dy_now() - t0;
        if (best < 0 || t < best)
            best = t;
    }
    return best;
}

static int prefill_to(bench_ctx *b, int len)
{
    int chunk = dy_engine_max_step_tokens(b->e);
    for (int p = 0; p < len; p += chunk) {
        int n = len - p < chunk ? len - p : chunk;
        dy_span s = {b->tokens + p, n, p, b->blocks, b->n_blocks, 1};
        if (dy_engine_step(b->e, &s, 1, b->logits, b->err, sizeof b->err) != 0)
            return -1;
    }
    return 0;
}

/* B sequences share the first BATCH_CTX positions (the long sequence's blocks) and each
 * decodes its own next token into a private block, as n samples of one prompt would. */
static double time_batch(bench_ctx *b, int B, int reps)
{
    const int bs = b->kv->block_size, shared = BATCH_CTX / bs;
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)B * (shared + 1));
    dy_span *spans = malloc(sizeof *spans * (size_t)B);
    double t = -1;
    if (!tables || !spans)
        goto out;
    for (int i = 0; i < B; i++) {
        int32_t *tb = tables + (size_t)i * (shared + 1);
        memcpy(tb, b->blocks, sizeof(int32_t) * shared);
        tb[shared] = b->blocks[b->n_blocks - 1 - i]; /* private blocks from the far end */
        spans[i] = (dy_span){b->tokens + i, 1, BATCH_CTX, tb, shared + 1, 1};
    }
    t = time_step(b, spans, B, reps);
out:
    free(tables);
    free(spans);
    return t;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void fit_line(const int *x, const double *y, int n, double *a, double *b, double *r2)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        sx += x[i];
        sy += y[i];
        sxx += (double)x[i] * x[i];
        sxy += x[i] * y[i];
    }
    *b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    *a = (sy - *b * sx) / n;
    double mean = sy / n, ss_tot = 0, ss_res = 0;
    for (int i = 0; i < n; i++) {
        double f = *a + *b * x[i];
        ss_res += (y[i] - f) * (y[i] - f);
        ss_tot += (y[i] - mean) * (y[i] - mean);
    }
    *r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
}

/* Decode steps of B sequences at context C, each with its own KV (as B requests with
 * different prompts are served), for every B of batch_b whose KV fits --batch-kv-mib. One
 * sequence is prefilled to C and its blocks copied to the others, in a pool and engine of
 * their own sized for the largest B that fits. */
static int batch_at_context(bench_ctx *b, const bench_opts *o, int C, double *ms)
{
    const int bs = b->kv->block_size, per_seq = C / bs + 1;
    const dy_kv_shape shape = dy_model_kv_shape(b->m, bs, (dy_kv_type)o->kv_type);
    const double seq_bytes = (double)per_seq * (double)dy_kv_shape_block_bytes(&shape);
    int max_b = 0;
    for (int i = 0; i < N_BATCH; i++) {
        ms[i] = -1;
        if (batch_b[i] * seq_bytes <= (double)o->batch_kv_mib * (1 << 20))
            max_b = batch_b[i];
    }
    if (max_b == 0)
        return 0;
    int rc = -1;
    /* The same context on a pool and engine of its own; errors land in bc.err. */
    bench_ctx bc = *b;
    bc.kv = dy_kv_pool_make(max_b * per_seq, &shape, NULL);
    bc.blocks = malloc(sizeof(int32_t) * (size_t)max_b * per_seq);
    bc.n_blocks = per_seq;
    bc.e = NULL;
    dy_kv_pool *kv = bc.kv;
    int32_t *tables = bc.blocks;
    dy_span *spans = malloc(sizeof *spans * (size_t)max_b);
    if (!kv || !tables || !spans) {
        snprintf(bc.err, sizeof bc.err, "out of memory for the batch at context %d", C);
        goto out;
    }
    if (!(bc.e = dy_engine_new(b->m, kv, o->threads, 512, bc.err, sizeof bc.err)))
        goto out;
    for (int i = 0; i < max_b * per_seq; i++)
        tables[i] = dy_kv_alloc(kv);
    if (prefill_to(&bc, C) != 0)
        goto out;
    for (int s = 1; s < max_b; s++)
        for (int k = 0; k < per_seq; k++)
            dy_kv_copy_block(kv, tables[s * per_seq + k], tables[k]);
    for (int s = 0; s < max_b; s++)
        spans[s] = (dy_span){b->tokens + s, 1, C, tables + s * per_seq, per_seq, 1};
    for (int i = 0; i < N_BATCH && batch_b[i] <= max_b; i++) {
        if ((ms[i] = time_step(&bc, spans, batch_b[i], o->reps)) < 0)
            goto out;
        point_done(b->progress, base_name(b->m->path));
    }
    rc = 0;
out:
    if (rc)
        memcpy(b->err, bc.err, sizeof b->err);
    dy_engine_free(bc.e);
    dy_kv_pool_free(kv);
    free(tables);
    free(spans);
    return rc;
}

/* --phases: where the time of two steps goes, a PHASE_P-token prefill from position 0 and a
 * decode step of PHASE_B sequences at context BATCH_CTX (time_batch's step), each followed by
 * sampling its logits rows at temperature 1 as a server would. The engine adds each phase's
 * time while the bench's clock is set (dy_engine_time_phases); the fastest rep is kept. */
#define PHASE_P 512
#define PHASE_B 64

typedef struct {
    double step_ms, sample_ms;
    double ms[DY_N_PHASES];
} phase_row;

/* The draws of a step's n logits rows, split by row across the engine's threads as the
 * worker splits them (serve/worker/worker.c, draw_phase). */
typedef struct {
    bench_ctx *b;
    dy_sampler **samplers; /* one per thread */
    dy_rng *rngs;          /* one per row */
    int n;
} draw_job;

static void draw_phase(void *ctx, int ith, int nth)
{
    const draw_job *j = ctx;
    const dy_sampling cfg = dy_sampling_default();
    const int V = j->b->m->hp.vocab_size, per = (j->n + nth - 1) / nth;
    for (int k = per * ith; k < per * (ith + 1) && k < j->n; k++)
        (void)dy_sample(j->samplers[ith], &cfg, &j->rngs[k], j->b->logits + (size_t)k * V);
}

static int time_phases(bench_ctx *b, const dy_span *spans, int n, int reps, phase_row *best)
{
    const int nth = dy_engine_threads(b->e);
    dy_sampler *samplers[256] = {0};
    dy_rng rngs[PHASE_B];
    int rc = 0;
    for (int i = 0; i < nth; i++)
        if (!(samplers[i] = dy_sampler_new(b->m->hp.vocab_size))) {
            snprintf(b->err, sizeof b->err, "out of memory");
            rc = -1;
        }
    for (int k = 0; k < n; k++)
        dy_rng_seed(&rngs[k], 1, (uint64_t)k);
    draw_job dj = {b, samplers, rngs, n};
    dy_phase_times pt;
    dy_engine_time_phases(b->e, dy_now, &pt);
    best->step_ms = -1;
    for (int r = 0; r < reps && rc == 0; r++) {
        memset(&pt, 0, sizeof pt);
        const double t0 = dy_now();
        if (dy_engine_step(b->e, spans, n, b->logits, b->err, sizeof b->err) != 0) {
            rc = -1;
            break;
        }
        const double t1 = dy_now();
        if (n >= 4)
            dy_engine_run(b->e, draw_phase, &dj);
        else
            draw_phase(&dj, 0, 1);
        const double t2 = dy_now();
        if (best->step_ms < 0 || (t1 - t0) * 1e3 < best->step_ms) {
            best->step_ms = (t1 - t0) * 1e3;
            best->sample_ms = (t2 - t1) * 1e3;
            for (int p = 0; p < DY_N_PHASES; p++)
                best->ms[p] = pt.s[p] * 1e3;
        }
    }
    dy_engine_time_phases(b->e, NULL, NULL);
    for (int i = 0; i < nth; i++)
        dy_sampler_free(samplers[i]);
    return rc;
}

static int measure_phases(bench_ctx *b, const bench_opts *o, phase_row *prefill, phase_row *decode)
{
    dy_span s = {b->tokens, PHASE_P, 0, b->blocks, b->n_blocks, 1};
    if (time_phases(b, &s, 1, o->reps, prefill) != 0)
        return -1;
    point_done(b->progress, base_name(b->m->path));
    const int bs = b->kv->block_size, shared = BATCH_CTX / bs;
    int32_t *tables = malloc(sizeof(int32_t) * PHASE_B * (shared + 1));
    dy_span spans[PHASE_B];
    if (!tables) {
        snprintf(b->err, sizeof b->err, "out of memory");
        return -1;
    }
    for (int i = 0; i < PHASE_B; i++) {
        int32_t *tb = tables + (size_t)i * (shared + 1);
        memcpy(tb, b->blocks, sizeof(int32_t) * shared);
        tb[shared] = b->blocks[b->n_blocks - 1 - i]; /* private blocks from the far end */
        spans[i] = (dy_span){b->tokens + i, 1, BATCH_CTX, tb, shared + 1, 1};
    }
    int rc = prefill_to(b, BATCH_CTX) == 0 ? time_phases(b, spans, PHASE_B, o->reps, decode) : -1;
    free(tables);
    point_done(b->progress, base_name(b->m->path));
    return rc;
}

/* The share of a step (sampling included) spent outside the matrix products. */
static double outside_share(const phase_row *r)
{
    const double all = r->step_ms + r->sample_ms;
    return all > 0 ? 1 - r->ms[DY_PHASE_MATMUL] / all : 0;
}

static void print_phase_json(const char *step, int p, int bn, int ctx, const phase_row *r)
{
    printf("{\"step\":\"%s\",\"p\":%d,\"b\":%d,\"context\":%d,\"ms\":%.4f,"
           "\"matmul_ms\":%.4f,\"attention_ms\":%.4f,\"rest_ms\":%.4f,\"sampling_ms\":%.4f,"
           "\"outside_matmul_share\":%.4f}",
           step, p, bn, ctx, r->step_ms + r->sample_ms, r->ms[DY_PHASE_MATMUL],
           r->ms[DY_PHASE_ATTENTION], r->ms[DY_PHASE_REST], r->sample_ms, outside_share(r));
}

static void print_phase_row(const char *what, const phase_row *r)
{
    const double all = r->step_ms + r->sample_ms;
    printf("  %-24s %-9.3f", what, all);
    for (int p = 0; p < DY_N_PHASES; p++)
        printf(" %-8.3f %3.0f%%  ", r->ms[p], 100 * r->ms[p] / all);
    printf(" %-8.3f %3.0f%%   %.1f%%\n", r->sample_ms, 100 * r->sample_ms / all,
           100 * outside_share(r));
}

static void print_phases(const bench_opts *o, const dy_model *m, dy_simd simd,
                         const phase_row *prefill, const phase_row *decode)
{
    if (o->json) {
        printf("{\"model\":\"%s\",\"type\":\"%s\",\"threads\":%d,\"kernels\":\"%s\","
               "\"reps\":%d,\"kv_type\":\"%s\",\"phases\":[",
               base_name(m->path), dy_type_name(dy_model_weight_type(m)), o->threads,
               dy_simd_name(simd), o->reps, dy_kv_type_name((dy_kv_type)o->kv_type));
        print_phase_json("prefill", PHASE_P, 1, 0, prefill);
        printf(",");
        print_phase_json("decode", 1, PHASE_B, BATCH_CTX, decode);
        printf("]}\n");
        return;
    }
    printf("\n== %s (%s weights), %d threads, %s kernels, fastest of %d reps, %s KV\n",
           base_name(m->path), dy_type_name(dy_model_weight_type(m)), o->threads,
           dy_simd_name(simd), o->reps, dy_kv_type_name((dy_kv_type)o->kv_type));
    printf("phases:   step                     ms        matmul         attention      rest"
           "           sampling       outside matmul\n");
    char what[64];
    snprintf(what, sizeof what, "prefill P=%d", PHASE_P);
    print_phase_row(what, prefill);
    snprintf(what, sizeof what, "decode B=%d, context %d", PHASE_B, BATCH_CTX);
    print_phase_row(what, decode);
}

static int measure(bench_ctx *b, const bench_opts *o, results *r)
{
    int np = o->quick ? 5 : N_PREFILL, nd = o->quick ? 3 : N_DECODE, nb = o->quick ? 5 : N_BATCH;
    for (int i = 0; i < N_PREFILL; i++)
        r->prefill_ms[i] = -1;
    for (int i = 0; i <= N_DECODE; i++)
        r->decode_ms[i] = -1;
    for (int i = 0; i < N_BATCH; i++)
        r->batch_ms[i] = -1;
    const char *name = base_name(b->m->path);
    for (int i = 0; i < np; i++) {
        dy_span s = {b->tokens, prefill_p[i], 0, b->blocks, b->n_blocks, 1};
        if ((r->prefill_ms[i] = time_step(b, &s, 1, o->reps)) < 0)
            return -1;
        point_done(b->progress, name);
    }
    for (int i = 0; i <= N_DECODE; i++) {
        const int ctx = decode_context(o, i);
        if ((i < N_DECODE && i >= nd) || (i == N_DECODE && ctx <= 0))
            continue;
        if (prefill_to(b, ctx) != 0)
            return -1;
        dy_span s = {b->tokens + ctx, 1, ctx, b->blocks, b->n_blocks, 1};
        if ((r->decode_ms[i] = time_step(b, &s, 1, o->reps)) < 0)
            return -1;
        point_done(b->progress, name);
    }
    if (prefill_to(b, BATCH_CTX) != 0)
        return -1;
    for (int i = 0; i < nb; i++) {
        if ((r->batch_ms[i] = time_batch(b, batch_b[i], o->reps)) < 0)
            return -1;
        point_done(b->progress, name);
    }
    fit_line(batch_b, r->batch_ms, nb, &r->fit_a, &r->fit_b, &r->fit_r2);
    for (int c = 0; c < o->n_batch_ctx; c++)
        if (batch_at_context(b, o, o->batch_ctx[c], r->batch_at_ms[c]) != 0)
            return -1;
    return 0;
}

/* Flops of a P-token prefill step: every matrix on every token, the output on one. */
static double prefill_flops(const dy_model *m, int P)
{
    double per_token = 0;
    for (int l = 0; l < m->hp.n_layers; l++) {
        const dy_layer *ly = &m->layers[l];
        const dy_mat *w[7] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_down,
                              &ly->w_up};
        for (int i = 0; i < 7; i++)
            per_token += 2.0 * (double)w[i]->rows * (double)w[i]->cols;
    }
    return per_token * P + 2.0 * (double)m->output.rows * (double)m->output.cols;
}

/* This machine's ceilings, measured once per run (roofline.h). */
typedef struct {
    double dram_gbps, llc_gbps; /* streaming reads from DRAM and from the last-level cache */
    size_t llc_bytes;           /* 0: the CPU reports no cache size (decode uses DRAM's) */
    double fma_gflops, int8_gops;
    dy_simd simd; /* the kernel level whose peaks these are */
    int width;    /* its vector bits (0: scalar) */
} machine;

/* Whether a model's weights are multiplied in int8 (every quantized type) or in fp32. */
static bool int8_weights(const dy_model *m)
{
    return dy_act_type(dy_model_weight_type(m)) != DY_F32;
}

/* Weights that fit in the last-level cache are read from it at every decode step. */
static bool weights_in_llc(const machine *mc, double wbytes)
{
    return mc->llc_bytes > 0 && wbytes <= (double)mc->llc_bytes;
}

/* Bytes of KV one position of m takes in the chosen type (every layer, keys and values). */
static size_t kv_bytes_per_token(const bench_opts *o, const dy_model *m)
{
    const dy_kv_shape s = dy_model_kv_shape(m, 1, (dy_kv_type)o->kv_type);
    return dy_kv_shape_block_bytes(&s);
}

static void print_report(const bench_opts *o, const dy_model *m, const results *r,
                         const machine *mc, dy_simd simd)
{
    double wbytes = (double)dy_model_weight_bytes(m);
    const bool in_llc = weights_in_llc(mc, wbytes);
    const double bw = in_llc ? mc->llc_gbps : mc->dram_gbps;
    double ceiling = bw * 1e9 / wbytes;
    const bool int8 = int8_weights(m);
    const double peak = int8 ? mc->int8_gops : mc->fma_gflops;
    double dec_tps = 1e3 / r->decode_ms[0];
    int big = r->prefill_ms[N_PREFILL - 1] > 0 ? N_PREFILL - 1 : N_PREFILL - 2;
    double gflops = prefill_flops(m, prefill_p[big]) / (r->prefill_ms[big] * 1e6);
    double ratio = r->decode_ms[2] > 0 ? r->decode_ms[2] / (r->prefill_ms[4] / 128) : -1;
    if (o->json) {
        printf("{\"model\":\"%s\",\"type\":\"%s\",\"threads\":%d,\"kernels\":\"%s\",\"reps\":%d,"
               "\"context\":%d,\"batch_context\":%d,\"kv_type\":\"%s\",\"kv_bytes_per_token\":%zu,"
               "\"prefill\":[",
               base_name(m->path), dy_type_name(dy_model_weight_type(m)), o->threads,
               dy_simd_name(simd), o->reps, r->ctx_used, BATCH_CTX,
               dy_kv_type_name((dy_kv_type)o->kv_type), kv_bytes_per_token(o, m));
        for (int i = 0, k = 0; i < N_PREFILL; i++)
            if (r->prefill_ms[i] > 0)
                printf("%s{\"p\":%d,\"ms\":%.4f,\"us_per_token\":%.3f}", k++ ? "," : "",
                       prefill_p[i], r->prefill_ms[i], r->prefill_ms[i] * 1e3 / prefill_p[i]);
        printf("],\"decode\":[");
        for (int i = 0, k = 0; i <= N_DECODE; i++)
            if (r->decode_ms[i] > 0)
                printf("%s{\"context\":%d,\"ms_per_token\":%.4f}", k++ ? "," : "",
                       decode_context(o, i), r->decode_ms[i]);
        printf("],\"read_write_ratio\":%.3f,\"batch\":[", ratio);
        for (int i = 0, k = 0; i < N_BATCH; i++)
            if (r->batch_ms[i] > 0)
                printf("%s{\"b\":%d,\"ms\":%.4f,\"tokens_per_s\":%.1f}", k++ ? "," : "",
                       batch_b[i], r->batch_ms[i], batch_b[i] * 1e3 / r->batch_ms[i]);
        printf("],\"batch_at\":[");
        for (int c = 0; c < o->n_batch_ctx; c++) {
            printf("%s{\"context\":%d,\"batch\":[", c ? "," : "", o->batch_ctx[c]);
            for (int i = 0, k = 0; i < N_BATCH; i++)
                if (r->batch_at_ms[c][i] > 0)
                    printf("%s{\"b\":%d,\"ms\":%.4f,\"tokens_per_s\":%.1f}", k++ ? "," : "",
                           batch_b[i], r->batch_at_ms[c][i], batch_b[i] * 1e3 / r->batch_at_ms[c][i]);
            printf("]}");
        }
        printf("],\"fit_a_ms\":%.4f,\"fit_b_ms\":%.4f,\"fit_r2\":%.4f,\"weight_bytes\":%.0f,"
               "\"weights_in_llc\":%s,\"bandwidth_gbps\":%.2f,\"dram_gbps\":%.2f,"
               "\"llc_gbps\":%.2f,\"llc_bytes\":%zu,\"decode_ceiling_tokens_per_s\":%.1f,"
               "\"decode_tokens_per_s\":%.1f,\"prefill_gflops\":%.2f,\"fma_peak_gflops\":%.1f,"
               "\"int8_peak_gops\":%.1f,\"prefill_peak\":\"%s\",\"peak_width_bits\":%d}\n",
               r->fit_a, r->fit_b, r->fit_r2, wbytes, in_llc ? "true" : "false", bw,
               mc->dram_gbps, mc->llc_gbps, mc->llc_bytes, ceiling, dec_tps, gflops,
               mc->fma_gflops, mc->int8_gops, int8 ? "int8" : "fp32_fma", mc->width);
        return;
    }
    printf("\n== %s (%s weights, %.1f MB read per decode step), %d threads, %s kernels, "
           "min of %d reps, context %d, %s KV (%zu bytes per token)\n", base_name(m->path),
           dy_type_name(dy_model_weight_type(m)), wbytes / 1e6, o->threads, dy_simd_name(simd),
           o->reps, r->ctx_used, dy_kv_type_name((dy_kv_type)o->kv_type),
           kv_bytes_per_token(o, m));
    printf("prefill:  P     ms      us/token  tokens/s\n");
    for (int i = 0; i < N_PREFILL; i++)
        if (r->prefill_ms[i] > 0)
            printf("          %-4d  %-7.3f %-9.2f %.1f\n", prefill_p[i], r->prefill_ms[i],
                   r->prefill_ms[i] * 1e3 / prefill_p[i], prefill_p[i] * 1e3 / r->prefill_ms[i]);
    printf("decode:   ctx   ms/token  tokens/s\n");
    for (int i = 0; i <= N_DECODE; i++)
        if (r->decode_ms[i] > 0)
            printf("          %-4d  %-9.3f %.1f\n", decode_context(o, i), r->decode_ms[i],
                   1e3 / r->decode_ms[i]);
    if (ratio > 0)
        printf("a generated token costs %.1f× a prompt token (decode at ctx 128 / prefill P=128)\n",
               ratio);
    printf("batch:    B     ms/step   tokens/s   (decode at context %d)\n", BATCH_CTX);
    for (int i = 0; i < N_BATCH; i++)
        if (r->batch_ms[i] > 0)
            printf("          %-4d  %-9.3f %.1f\n", batch_b[i], r->batch_ms[i],
                   batch_b[i] * 1e3 / r->batch_ms[i]);
    printf("fit:      t = %.3f + %.4f·B ms, R² = %.4f\n", r->fit_a, r->fit_b, r->fit_r2);
    for (int c = 0; c < o->n_batch_ctx; c++) {
        printf("batch:    B     ms/step   tokens/s   (decode at context %d, own KV per sequence)\n",
               o->batch_ctx[c]);
        for (int i = 0; i < N_BATCH; i++)
            if (r->batch_at_ms[c][i] > 0)
                printf("          %-4d  %-9.3f %.1f\n", batch_b[i], r->batch_at_ms[c][i],
                       batch_b[i] * 1e3 / r->batch_at_ms[c][i]);
            else
                printf("          %-4d  (its KV is over --batch-kv-mib %d)\n", batch_b[i],
                       o->batch_kv_mib);
    }
    printf("roofline: weights %s the %.0f MiB last-level cache → read at %.1f GB/s (%s) → "
           "decode ceiling %.1f tokens/s; achieved %.1f (%.0f%%)\n",
           in_llc ? "fit in" : "do not fit in", (double)mc->llc_bytes / (1 << 20), bw,
           in_llc ? "cache" : "DRAM", ceiling, dec_tps, 100 * dec_tps / ceiling);
    printf("          prefill P=%d: %.1f G%s/s of the %s peak %.1f (%.0f%%)\n", prefill_p[big],
           gflops, int8 ? "OP" : "FLOP", int8 ? "int8" : "fp32 FMA", peak, 100 * gflops / peak);
}

static int bench_model(const char *path, const bench_opts *o, const machine *mc, points *pt)
{
    bench_ctx b = {.progress = pt};
    results r = {0};
    int rc = 1;
    if (!(b.m = dy_model_load(path, NULL, b.err, sizeof b.err)))
        goto out;
    int need = (o->quick ? 128 : 512) + 16;
    need = o->extra_ctx + 16 > need ? o->extra_ctx + 16 : need;
    for (int c = 0; c < o->n_batch_ctx; c++)
        need = o->batch_ctx[c] + 16 > need ? o->batch_ctx[c] + 16 : need;
    r.ctx_used = b.m->hp.ctx_len >= need ? b.m->hp.ctx_len : need > 1024 ? need : 1024;
    b.m->hp.ctx_len = r.ctx_used;
    const int bs = 16;
    b.n_blocks = (r.ctx_used + bs - 1) / bs + 64; /* the long sequence + 64 private blocks */
    const dy_kv_shape shape = dy_model_kv_shape(b.m, bs, (dy_kv_type)o->kv_type);
    b.kv = dy_kv_pool_make(b.n_blocks, &shape, NULL);
    b.blocks = malloc(sizeof(int32_t) * (size_t)b.n_blocks);
    b.tokens = malloc(sizeof(int32_t) * (size_t)r.ctx_used);
    b.logits = malloc(sizeof(float) * (size_t)b.m->hp.vocab_size * 64);
    if (!b.kv || !b.blocks || !b.tokens || !b.logits) {
        snprintf(b.err, sizeof b.err, "out of memory");
        goto out;
    }
    for (int i = 0; i < b.n_blocks; i++)
        b.blocks[i] = dy_kv_alloc(b.kv);
    for (int i = 0; i < r.ctx_used; i++)
        b.tokens[i] = (int32_t)((i * 7919u + 13) % (unsigned)b.m->hp.vocab_size);
    if (!(b.e = dy_engine_new(b.m, b.kv, o->threads, 512, b.err, sizeof b.err)))
        goto out;
    phase_row pre, dec;
    if (o->phases ? measure_phases(&b, o, &pre, &dec) != 0 : measure(&b, o, &r) != 0)
        goto out;
    dy_progress_clear(pt->line); /* the report goes to the same terminal */
    if (o->phases)
        print_phases(o, b.m, dy_engine_simd(b.e), &pre, &dec);
    else
        print_report(o, b.m, &r, mc, dy_engine_simd(b.e));
    fflush(stdout);
    rc = 0;
out:
    if (rc) {
        dy_progress_clear(pt->line);
        fprintf(stderr, "dyad bench engine: %s\n", b.err);
    }
    dy_engine_free(b.e);
    dy_kv_pool_free(b.kv);
    dy_model_free(b.m);
    free(b.blocks);
    free(b.tokens);
    free(b.logits);
    return rc;
}

static bool add_model(void *ctx, const char *v, char *err, size_t errlen)
{
    bench_opts *o = ctx;
    if (o->n_models == MAX_MODELS) {
        snprintf(err, errlen, "at most %d models", MAX_MODELS);
        return false;
    }
    o->models[o->n_models++] = v;
    return true;
}

/* DRAM is read through a working set of 1 GiB (64 MiB with --quick) — well beyond any
 * last-level cache of today — and the cache through half of its size (the other half holds
 * what the reads evict on a shared cache). */
static machine measure_machine(dy_pool *pool, const bench_opts *o, points *pt)
{
    const dy_simd simd = dy_simd_detect();
    machine mc = {.llc_bytes = dy_llc_bytes(), .simd = simd, .width = dy_roofline_width(simd)};
    mc.dram_gbps = dy_measure_read_gbps(pool, simd, o->quick ? (64u << 20) : (1u << 30), o->reps);
    point_done(pt, "machine");
    const size_t llc_set = mc.llc_bytes ? mc.llc_bytes / 2 : (4u << 20);
    mc.llc_gbps = dy_measure_read_gbps(pool, simd, llc_set, o->reps);
    point_done(pt, "machine");
    mc.fma_gflops = dy_measure_fma_gflops(pool, simd, o->reps);
    point_done(pt, "machine");
    mc.int8_gops = dy_measure_int8_gops(pool, simd, o->reps);
    point_done(pt, "machine");
    return mc;
}

static bool add_batch_context(void *ctx, const char *v, char *err, size_t errlen)
{
    bench_opts *o = ctx;
    char *end;
    long c = strtol(v, &end, 10);
    if (end == v || *end || c < 1 || c > 65536) {
        snprintf(err, errlen, "a context from 1 to 65536, not '%s'", v);
        return false;
    }
    if (o->n_batch_ctx == MAX_BATCH_CTX) {
        snprintf(err, errlen, "at most %d contexts", MAX_BATCH_CTX);
        return false;
    }
    o->batch_ctx[o->n_batch_ctx++] = (int)c;
    return true;
}

static int bench_engine(int argc, char **argv)
{
    bench_opts o = {0};
    const dy_opt t[] = {
        {.name = "model", .kind = DY_OPT_CALL, .call = add_model, .ctx = &o, .meta = "PATH",
         .help = "a model to measure; repeatable", .shown_default = "the bundled stories260K"},
        {.name = "tokenizer", .kind = DY_OPT_STR, .dst = &o.tokenizer, .meta = "PATH",
         .help = "llama2.c tokenizer for checkpoints (not needed: ids are synthetic)"},
        {.name = "threads", .kind = DY_OPT_INT, .dst = &o.threads, .meta = "N",
         .help = "engine threads", .min = 1, .max = 256, .def = 2},
        {.name = "reps", .kind = DY_OPT_INT, .dst = &o.reps, .meta = "N",
         .help = "repetitions per figure; the minimum is reported", .min = 1, .max = 1000,
         .def = 3},
        {.name = "kv-type", .kind = DY_OPT_ENUM, .dst = &o.kv_type, .meta = "T",
         .help = "element type of the KV cache: f32, f16 or q8_0 (docs/engine.md, \"KV types\")",
         .names = dy_kv_type_names(), .def = DY_KV_F32},
        {.name = "decode-context", .kind = DY_OPT_INT, .dst = &o.extra_ctx, .meta = "N",
         .help = "also measure decode at context N (e.g. 2048)", .min = 1, .max = 65536,
         .shown_default = ""},
        {.name = "batch-context", .kind = DY_OPT_CALL, .call = add_batch_context, .ctx = &o,
         .meta = "N", .help = "also measure the batch table at context N with its own KV per "
         "sequence (e.g. 256, 512, 2048); repeatable", .shown_default = ""},
        {.name = "batch-kv-mib", .kind = DY_OPT_INT, .dst = &o.batch_kv_mib, .meta = "MIB",
         .help = "KV those tables may take; a larger B is skipped", .min = 1, .max = 1 << 20,
         .def = 4096},
        {.name = "quick", .kind = DY_OPT_FLAG, .dst = &o.quick,
         .help = "fewer points (P ≤ 128, B ≤ 16) for smoke tests"},
        {.name = "phases", .kind = DY_OPT_FLAG, .dst = &o.phases,
         .help = "instead of the tables: the time of a 512-token prefill and of a B = 64 "
         "decode step (context 64) by phase (matrix products, attention, the rest, "
         "sampling) and the share outside the matrix products (docs/engine.md)"},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &o.json,
         .help = "one JSON object per model on stdout instead of the report"},
    };
    int rc = cli_parse("bench engine", bench_usage, bench_epilog, t, (int)(sizeof t / sizeof t[0]),
                       argc, argv, NULL);
    if (rc != CLI_GO)
        return rc;
    if (o.phases && (o.quick || o.extra_ctx > 0 || o.n_batch_ctx > 0)) {
        fprintf(stderr, "dyad bench engine: --phases measures one prefill and one decode step; "
                "it does not take --quick, --decode-context or --batch-context\n");
        return 2;
    }
    char def[4096];
    if (o.n_models == 0) {
        snprintf(def, sizeof def, "%s/stories260K.bin", dyad_model_dir());
        o.models[o.n_models++] = def;
    }
    dy_pool *pool = dy_pool_new(o.threads);
    if (!pool) {
        fprintf(stderr, "dyad bench engine: cannot start %d threads\n", o.threads);
        return 1;
    }
    const int machine_points = o.phases ? 0 : MACHINE_POINTS;
    points pt = {dy_progress_new(stderr, isatty(STDERR_FILENO) == 1, "dyad bench engine",
                                 DY_PROGRESS_COUNT, "figures",
                                 machine_points + o.n_models * model_points(&o), dy_now()), 0};
    dy_progress_update(pt.line, 0, "machine", dy_now());
    machine mc = {0};
    if (!o.phases)
        mc = measure_machine(pool, &o, &pt);
    dy_pool_free(pool);
    dy_progress_clear(pt.line);
    if (!o.json && !o.phases)
        printf("machine: read bandwidth %.1f GB/s from DRAM, %.1f GB/s from the %.0f MiB "
               "last-level cache; peaks at %d bits (%s kernels): fp32 FMA %.1f GFLOP/s, "
               "int8 %.1f GOP/s (%d threads)\n",
               mc.dram_gbps, mc.llc_gbps, (double)mc.llc_bytes / (1 << 20), mc.width,
               dy_simd_name(mc.simd), mc.fma_gflops, mc.int8_gops, o.threads);
    rc = 0;
    for (int i = 0; i < o.n_models; i++)
        rc |= bench_model(o.models[i], &o, &mc, &pt);
    dy_progress_finish(pt.line);
    return rc;
}

/* `dyad bench engine` measures the engine in-process, `dyad bench kv` a quantized KV cache's
 * logits against the f32 cache's, `dyad bench xfer` the KV transfer backends, `dyad bench grammar` structured outputs' masks, `dyad bench agentic` agent sessions
 * with tool calls against a server; every other `dyad bench` is the HTTP load generator
 * (src/bench/). */
int cmd_bench(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "engine"))
        return bench_engine(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "xfer"))
        return cmd_bench_xfer(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "kv"))
        return cmd_bench_kv(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "grammar"))
        return cmd_bench_grammar(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "router"))
        return cmd_bench_router(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "agentic"))
        return cmd_bench_agentic(argc - 1, argv + 1);
    return dy_bench_serve_main(argc, argv);
}
