/* cmd_bench_grammar.c — `dyad bench grammar`: what structured outputs cost outside the model.
 * Compiles a grammar (a JSON Schema, any JSON object, or grammar text), builds a tokenizer's
 * prefix tree, then follows random answers through the grammar token by token, as a worker
 * would: a mask per token (timed, cache hit or miss), a token drawn uniformly from those it
 * allows, the advance. Prints compile times, mask times and the matcher's memory. A
 * benchmark: prints, asserts nothing. */
#include "cli/commands.h"
#include "cli/grammar_opts.h"
#include "cli/parse.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "grammar/grammar.h"
#include "serve/worker/guide.h"
#include "util/clock.h"
#include "util/progress.h"
#include "util/stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char grammar_usage[] =
    "usage: dyad bench grammar --model M.gguf (--json-schema FILE | --json-object |\n"
    "                          --grammar FILE) [--tokens N] [--seed S] [--json]\n"
    "Times the grammar's compile, the vocabulary's prefix tree and a mask per token over\n"
    "random answers the grammar allows. On a terminal, stderr shows a progress line.\n";

typedef struct {
    const char *model, *tokenizer;
    cli_grammar_opts g;
    bool json;
    int tokens;
    uint64_t seed;
} gopts;

typedef struct {
    double trie_ms, schema_ms, parse_ms;
    size_t grammar_bytes;
    int vocab, answers, tokens;
    double *hit_us, *miss_us, *token_us;
    int n_hit, n_miss;
    size_t matcher_bytes;
    double state_bytes; /* mean over tokens: what one sequence's dy_gstate holds */
} gresult;

/* Follows random answers until o->tokens tokens have been drawn. */
#define PROGRESS_EVERY 256 /* tokens between looks at the clock for the progress line */

static void walk(const gopts *o, const dy_tokenizer *tok, dy_gmatch *m, gresult *r,
                 dy_progress *pg)
{
    dy_rng rng;
    dy_rng_seed(&rng, o->seed, 0);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)r->vocab);
    dy_gstate s = {0};
    bool live = false;
    double state_sum = 0;
    while (allowed && r->tokens < o->tokens) {
        if (!live) {
            if (dy_gstate_start(m, &s) != DY_GRAMMAR_OK)
                break;
            live = true;
        }
        uint64_t h0, m0, h1, m1;
        dy_gmatch_mask_counts(m, &h0, &m0);
        double t0 = dy_now();
        const uint32_t *bits = dy_gstate_mask(m, &s);
        double t_mask = dy_now() - t0;
        dy_gmatch_mask_counts(m, &h1, &m1);
        if (!bits)
            break;
        if (m1 > m0)
            r->miss_us[r->n_miss++] = t_mask * 1e6;
        else
            r->hit_us[r->n_hit++] = t_mask * 1e6;
        int n = 0;
        for (int i = 0; i < r->vocab; i++)
            if (bits[i >> 5] >> (i & 31) & 1u)
                allowed[n++] = i;
        if (s.accept && (n == 0 || dy_rng_float(&rng) < 0.25f)) { /* the end token */
            r->answers++;
            dy_gstate_free(&s);
            live = false;
            continue;
        }
        if (n == 0)
            break; /* a grammar that admits nothing here: the report shows how far it got */
        int32_t id = allowed[dy_rng_next(&rng) % (uint64_t)n];
        char piece[1024];
        int k = dy_token_to_piece(tok, -1, id, piece, sizeof piece);
        double t1 = dy_now();
        if (dy_gstate_advance(m, &s, piece, (size_t)(k > (int)sizeof piece ? (int)sizeof piece : k)) !=
            DY_GRAMMAR_OK)
            break;
        r->token_us[r->tokens++] = (t_mask + dy_now() - t1) * 1e6;
        state_sum += (double)(sizeof s + s.cap * sizeof *s.tops);
        if (r->tokens % PROGRESS_EVERY == 0)
            dy_progress_update(pg, r->tokens, NULL, dy_now());
    }
    if (live)
        dy_gstate_free(&s);
    free(allowed);
    r->state_bytes = r->tokens ? state_sum / r->tokens : 0;
    r->matcher_bytes = dy_gmatch_bytes(m);
}

static void print_times(const char *what, double *us, int n, bool json, bool last)
{
    dy_sort_doubles(us, (size_t)n);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += us[i];
    double mean = n ? sum / n : 0, p50 = n ? dy_percentile(us, (size_t)n, 50) : 0,
           p99 = n ? dy_percentile(us, (size_t)n, 99) : 0, max = n ? us[n - 1] : 0;
    if (json)
        printf("\"%s\": {\"n\": %d, \"mean_us\": %.2f, \"p50_us\": %.2f, \"p99_us\": %.2f, "
               "\"max_us\": %.2f}%s", what, n, mean, p50, p99, max, last ? "" : ", ");
    else
        printf("%-14s %7d   mean %9.2f   p50 %9.2f   p99 %9.2f   max %9.2f  us\n", what, n, mean,
               p50, p99, max);
}

static void report(const gopts *o, gresult *r)
{
    if (o->json) {
        printf("{\"vocab\": %d, \"trie_ms\": %.3f, \"schema_ms\": %.3f, \"parse_ms\": %.3f, "
               "\"grammar_bytes\": %zu, \"tokens\": %d, \"answers\": %d, \"matcher_bytes\": %zu, "
               "\"state_bytes\": %.0f, ", r->vocab, r->trie_ms, r->schema_ms, r->parse_ms,
               r->grammar_bytes, r->tokens, r->answers, r->matcher_bytes, r->state_bytes);
        print_times("mask_hit", r->hit_us, r->n_hit, true, false);
        print_times("mask_miss", r->miss_us, r->n_miss, true, false);
        print_times("per_token", r->token_us, r->tokens, true, true);
        printf("}\n");
        return;
    }
    printf("vocabulary     %d tokens, prefix tree built in %.2f ms\n", r->vocab, r->trie_ms);
    printf("grammar        %zu bytes of text; schema compiled in %.3f ms, grammar in %.3f ms\n",
           r->grammar_bytes, r->schema_ms, r->parse_ms);
    printf("walk           %d tokens, %d whole answers\n", r->tokens, r->answers);
    print_times("mask (cached)", r->hit_us, r->n_hit, false, false);
    print_times("mask (new)", r->miss_us, r->n_miss, false, false);
    print_times("per token", r->token_us, r->tokens, false, true);
    printf("memory         matcher %.1f KiB (shared by every sequence on the grammar), "
           "state %.0f B per sequence\n", r->matcher_bytes / 1024.0, r->state_bytes);
}

static int run(const gopts *o)
{
    if (!o->model || cli_grammar_given(&o->g) != 1) {
        fprintf(stderr, "dyad bench grammar: needs --model and one of --json-schema, --json-object, "
                        "--grammar\n");
        return 2;
    }
    char err[256];
    dy_model *model = dy_model_load(o->model, o->tokenizer, err, sizeof err);
    if (!model || !model->tok) {
        fprintf(stderr, "dyad bench grammar: %s\n", model ? "the model has no tokenizer" : err);
        dy_model_free(model);
        return 1;
    }
    gresult r = {.vocab = dy_tokenizer_vocab_size(model->tok)};
    dy_buf text = {0};
    dy_grammar *g = NULL;
    dy_vocab_trie *t = NULL;
    dy_gmatch *m = NULL;
    int rc = 1;
    double t0 = dy_now();
    if (!cli_grammar_text(&o->g, &text, &r.schema_ms, err, sizeof err)) {
        fprintf(stderr, "dyad bench grammar: %s\n", err);
        goto out;
    }
    r.grammar_bytes = text.len;
    t0 = dy_now();
    g = dy_grammar_parse((const char *)text.data, text.len, err, sizeof err);
    r.parse_ms = (dy_now() - t0) * 1e3;
    if (!g) {
        fprintf(stderr, "dyad bench grammar: the grammar does not compile: %s\n", err);
        goto out;
    }
    t0 = dy_now();
    t = dy_tokenizer_trie(model->tok, r.vocab);
    r.trie_ms = (dy_now() - t0) * 1e3;
    r.hit_us = malloc(sizeof(double) * (size_t)o->tokens * 2 + 8);
    r.miss_us = malloc(sizeof(double) * (size_t)o->tokens * 2 + 8);
    r.token_us = malloc(sizeof(double) * (size_t)o->tokens + 8);
    if (!t || !(m = dy_gmatch_new(g, t, (dy_gmatch_limits){0})) || !r.hit_us || !r.miss_us ||
        !r.token_us) {
        fprintf(stderr, "dyad bench grammar: out of memory\n");
        goto out;
    }
    dy_progress *pg = dy_progress_new(stderr, isatty(STDERR_FILENO) == 1, "dyad bench grammar",
                                      DY_PROGRESS_COUNT, "tokens", o->tokens, dy_now());
    walk(o, model->tok, m, &r, pg);
    dy_progress_finish(pg);
    report(o, &r);
    rc = 0;
out:
    free(r.hit_us);
    free(r.miss_us);
    free(r.token_us);
    dy_gmatch_free(m);
    dy_vocab_trie_free(t);
    dy_grammar_free(g);
    dy_buf_free(&text);
    dy_model_free(model);
    return rc;
}

int cmd_bench_grammar(int argc, char **argv)
{
    gopts o;
    const dy_opt t[] = {
        {.name = "model", .kind = DY_OPT_STR, .dst = &o.model, .meta = "PATH",
         .help = "the model whose tokenizer the masks are over (GGUF or llama2.c)"},
        {.name = "tokenizer", .kind = DY_OPT_STR, .dst = &o.tokenizer, .meta = "PATH",
         .help = "the tokenizer of a llama2.c model"},
        {.name = "json-schema", .kind = DY_OPT_STR, .dst = &o.g.schema, .meta = "FILE",
         .help = "a JSON Schema (what response_format json_schema carries)"},
        {.name = "json-object", .kind = DY_OPT_FLAG, .dst = &o.g.json_object,
         .help = "any JSON object (response_format json_object)"},
        {.name = "grammar", .kind = DY_OPT_STR, .dst = &o.g.grammar, .meta = "FILE",
         .help = "grammar text (docs/structured-outputs.md)"},
        {.name = "tokens", .kind = DY_OPT_INT, .dst = &o.tokens, .meta = "N",
         .help = "tokens to draw", .min = 1, .max = 10000000, .def = 20000},
        {.name = "seed", .kind = DY_OPT_U64, .dst = &o.seed, .meta = "S",
         .help = "the walk's random seed", .def = 1},
        {.name = "json", .kind = DY_OPT_FLAG, .dst = &o.json,
         .help = "one JSON object on stdout instead of the report"},
    };
    int rc = cli_parse("bench grammar", grammar_usage, NULL, t, (int)(sizeof t / sizeof t[0]),
                       argc, argv, NULL);
    return rc != CLI_GO ? rc : run(&o);
}
