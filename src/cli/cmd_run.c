/* cmd_run.c — `dyad run`: one prompt, one sequence, text streamed to stdout and timings to
 * stderr. The prompt is prefilled in chunks (one step each), then tokens are decoded one
 * step at a time. Like llama2.c's run.c, the prompt's own text is echoed first. */
#include "cli/commands.h"
#include "cli/grammar_opts.h"
#include "cli/parse.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "serve/worker/guide.h"
#include "util/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char run_usage[] = "usage: dyad run [options]\n";
static const char run_epilog[] =
    "Generation ends at --max-tokens, the end of the model's context, an end-of-generation\n"
    "token (EOS, or BOS, which llama2.c models emit to start a new text) or a stop string.\n"
    "With --json-schema, --json-object or --grammar the text follows that grammar (tokens it\n"
    "forbids are never drawn) and ends where it is complete; stderr says so if it was cut.\n"
    "stdout gets the text; stderr gets prompt tokens, prefill ms, decode ms/token, tokens/s.\n";

typedef struct {
    const char *model, *tokenizer, *prompt;
    int max_tokens, threads, chunk;
    int kv_type; /* dy_kv_type */
    bool no_echo, ignore_eos, seeded;
    dy_sampling sampling;
    const char *stops[DY_MAX_STOPS];
    int n_stops;
    cli_grammar_opts grammar;
} run_opts;

static bool add_stop(void *ctx, const char *v, char *err, size_t errlen)
{
    run_opts *o = ctx;
    if (o->n_stops == DY_MAX_STOPS) {
        snprintf(err, errlen, "at most %d stop strings", DY_MAX_STOPS);
        return false;
    }
    o->stops[o->n_stops++] = v;
    return true;
}

static int parse(int argc, char **argv, run_opts *o)
{
    *o = (run_opts){0};
    const dy_sampling d = dy_sampling_default();
    const dy_opt t[] = {
        {.name = "model", .kind = DY_OPT_STR, .dst = &o->model, .meta = "PATH",
         .help = "GGUF file or llama2.c checkpoint", .shown_default = "the bundled stories260K"},
        {.name = "tokenizer", .kind = DY_OPT_STR, .dst = &o->tokenizer, .meta = "PATH",
         .help = "llama2.c tokenizer.bin",
         .shown_default = "tok512.bin for the bundled model; GGUF files use the vocabulary "
                          "inside them"},
        {.name = "prompt", .kind = DY_OPT_STR, .dst = &o->prompt, .meta = "TEXT",
         .help = "the prompt", .def_str = "", .shown_default = "empty, i.e. start from BOS"},
        {.name = "max-tokens", .kind = DY_OPT_INT, .dst = &o->max_tokens, .meta = "N",
         .help = "tokens to generate after the prompt", .min = 0, .max = 1 << 22, .def = 256},
        {.name = "temperature", .kind = DY_OPT_FLOAT, .dst = &o->sampling.temperature,
         .meta = "T", .help = "0 = greedy", .min = 0, .max = 100, .def = d.temperature},
        {.name = "top-p", .kind = DY_OPT_FLOAT, .dst = &o->sampling.top_p, .meta = "P",
         .help = "nucleus sampling", .min = 1e-6, .max = 1, .def = 0.9f},
        {.name = "top-k", .kind = DY_OPT_INT, .dst = &o->sampling.top_k, .meta = "K",
         .help = "keep the K most likely tokens; 0 = off", .min = 0, .max = 1 << 22,
         .def = d.top_k},
        {.name = "min-p", .kind = DY_OPT_FLOAT, .dst = &o->sampling.min_p, .meta = "P",
         .help = "drop tokens below P × the best probability; 0 = off", .min = 0, .max = 1,
         .def = d.min_p},
        {.name = "seed", .kind = DY_OPT_U64, .dst = &o->sampling.seed, .meta = "S",
         .help = "random seed", .shown_default = "from the clock", .given = &o->seeded},
        {.name = "stop", .kind = DY_OPT_CALL, .meta = "TEXT", .call = add_stop, .ctx = o,
         .help = "stop when TEXT appears (repeatable, up to " DY_OPTS_QUOTE(DY_MAX_STOPS) ")"},
        {.name = "threads", .kind = DY_OPT_INT, .dst = &o->threads, .meta = "N",
         .help = "engine threads", .min = 1, .max = 256, .def = 2},
        {.name = "chunk", .kind = DY_OPT_INT, .dst = &o->chunk, .meta = "N",
         .help = "prefill chunk size in tokens", .min = 1, .max = 65536, .def = 512},
        {.name = "kv-type", .kind = DY_OPT_ENUM, .dst = &o->kv_type, .meta = "T",
         .help = "element type of the KV cache: f32, f16 (half the bytes) or q8_0 (int8 with a "
                 "scale per position and head: about a quarter); docs/engine.md, \"KV types\"",
         .names = dy_kv_type_names(), .def = DY_KV_F32},
        {.name = "no-echo", .kind = DY_OPT_FLAG, .dst = &o->no_echo,
         .help = "do not print the prompt"},
        {.name = "ignore-eos", .kind = DY_OPT_FLAG, .dst = &o->ignore_eos,
         .help = "keep generating past end-of-generation tokens (benchmarks)"},
        {.name = "json-schema", .kind = DY_OPT_STR, .dst = &o->grammar.schema, .meta = "FILE",
         .help = "the text is JSON that validates against this JSON Schema "
                 "(docs/structured-outputs.md lists the keywords)"},
        {.name = "json-object", .kind = DY_OPT_FLAG, .dst = &o->grammar.json_object,
         .help = "the text is a JSON object"},
        {.name = "grammar", .kind = DY_OPT_STR, .dst = &o->grammar.grammar, .meta = "FILE",
         .help = "the text follows this grammar (GBNF notation: docs/structured-outputs.md)"},
    };
    o->sampling = d;
    int rc = cli_parse("run", run_usage, run_epilog, t, (int)(sizeof t / sizeof t[0]), argc,
                       argv, NULL);
    if (!o->seeded)
        o->sampling.seed = (uint64_t)time(NULL);
    if (rc == CLI_GO && cli_grammar_given(&o->grammar) > 1) {
        fprintf(stderr, "dyad run: give at most one of --json-schema, --json-object, --grammar\n");
        return 2;
    }
    return rc;
}

/* Everything one generation needs, freed together. */
typedef struct {
    dy_model *model;
    dy_kv_pool *kv;
    dy_engine *engine;
    dy_sampler *sampler;
    int32_t *blocks, *prompt;
    int32_t *end_ids; /* tokens that end generation, masked out under --ignore-eos */
    int n_end;
    float *logits;
    dy_stop stop;
    dy_guides guides; /* with a grammar: its compiled form, and the answer's place in it */
    dy_guide guide;
} run_state;

static void run_state_free(run_state *s)
{
    dy_engine_free(s->engine);
    dy_kv_pool_free(s->kv);
    dy_sampler_free(s->sampler);
    dy_guide_end(&s->guides, &s->guide);
    dy_guides_free(&s->guides);
    dy_model_free(s->model);
    free(s->blocks);
    free(s->prompt);
    free(s->end_ids);
    free(s->logits);
    dy_stop_free(&s->stop);
}

static int tokenize_prompt(run_state *s, const char *text, int *n)
{
    const dy_tokenizer *tok = s->model->tok;
    bool bos = dy_tokenizer_add_bos(tok);
    int need = dy_tokenize(tok, text, strlen(text), bos, false, NULL, 0);
    if (need < 0)
        return -1;
    s->prompt = malloc(sizeof(int32_t) * (size_t)(need + 1));
    if (!s->prompt || dy_tokenize(tok, text, strlen(text), bos, false, s->prompt, need) != need)
        return -1;
    if (need == 0) /* an empty prompt with no BOS still needs one token to start from */
        s->prompt[need++] = dy_tokenizer_bos(tok) >= 0 ? dy_tokenizer_bos(tok) : 0;
    *n = need;
    return 0;
}

static bool ends_generation(const dy_tokenizer *tok, int32_t id)
{
    return dy_tokenizer_is_eog(tok, id) || id == dy_tokenizer_bos(tok);
}

/* The answer's grammar, compiled over the model's vocabulary. */
static int setup_grammar(run_state *s, const run_opts *o, char *err, size_t errlen)
{
    dy_buf text = {0};
    double schema_ms;
    if (!cli_grammar_text(&o->grammar, &text, &schema_ms, err, errlen)) {
        dy_buf_free(&text);
        return -1;
    }
    int rc = -1;
    if (!dy_guides_init(&s->guides, s->model->tok, s->model->hp.vocab_size, s->end_ids,
                        s->n_end))
        snprintf(err, errlen, "out of memory");
    else if (dy_guide_start(&s->guides, &s->guide, (const char *)text.data, text.len, err,
                            errlen))
        rc = 0;
    dy_buf_free(&text);
    return rc;
}

/* One sequence of up to `len` positions gets the blocks it needs, in pool order. */
static int setup(run_state *s, const run_opts *o, int n_prompt, char *err, size_t errlen)
{
    const int bs = 16, len = s->model->hp.ctx_len;
    int n_blocks = (len + bs - 1) / bs;
    const dy_kv_shape shape = dy_model_kv_shape(s->model, bs, (dy_kv_type)o->kv_type);
    s->kv = dy_kv_pool_make(n_blocks, &shape, NULL);
    s->blocks = malloc(sizeof(int32_t) * (size_t)n_blocks);
    s->sampler = dy_sampler_new(s->model->hp.vocab_size);
    s->logits = malloc(sizeof(float) * (size_t)s->model->hp.vocab_size);
    if (!s->kv || !s->blocks || !s->sampler || !s->logits) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < n_blocks; i++)
        s->blocks[i] = dy_kv_alloc(s->kv);
    s->end_ids = malloc(sizeof(int32_t) * (size_t)s->model->hp.vocab_size);
    if (!s->end_ids) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int v = 0; v < s->model->hp.vocab_size; v++)
        if (ends_generation(s->model->tok, v))
            s->end_ids[s->n_end++] = v;
    if (cli_grammar_given(&o->grammar) && setup_grammar(s, o, err, errlen) != 0)
        return -1;
    int chunk = o->chunk < n_prompt ? o->chunk : n_prompt;
    s->engine = dy_engine_new(s->model, s->kv, o->threads, chunk, err, errlen);
    return s->engine ? 0 : -1;
}

static void emit(const char *text, size_t len)
{
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

/* The token's text after prev, into piece (256 bytes); its length. */
static size_t token_text(const run_state *s, int32_t prev, int32_t tok, char *piece)
{
    int n = dy_token_to_piece(s->model->tok, prev, tok, piece, 256);
    return (size_t)(n < 256 ? n : 256);
}

static void emit_piece(run_state *s, const char *piece, size_t n)
{
    const char *out;
    size_t out_len;
    dy_stop_feed(&s->stop, piece, n, &out, &out_len);
    emit(out, out_len);
}

static void emit_token(run_state *s, int32_t prev, int32_t tok)
{
    char piece[256];
    emit_piece(s, piece, token_text(s, prev, tok, piece));
}

static int generate(run_state *s, const run_opts *o, int n_prompt, char *err, size_t errlen)
{
    const int ctx = s->model->hp.ctx_len;
    dy_rng rng;
    dy_rng_seed(&rng, o->sampling.seed, 0);
    if (!o->no_echo)
        for (int i = 1; i < n_prompt; i++)
            emit_token(s, s->prompt[i - 1], s->prompt[i]);

    double t0 = 1e3 * dy_now();
    int chunk = dy_engine_max_step_tokens(s->engine);
    for (int p = 0; p < n_prompt; p += chunk) {
        int n = n_prompt - p < chunk ? n_prompt - p : chunk;
        dy_span sp = {s->prompt + p, n, p, s->blocks, (ctx + 15) / 16, p + n == n_prompt};
        if (dy_engine_step(s->engine, &sp, 1, s->logits, err, errlen) != 0)
            return -1;
    }
    double t1 = 1e3 * dy_now();
    int generated = 0, pos = n_prompt;
    int32_t prev = s->prompt[n_prompt - 1];
    const bool guided = s->guide.e != NULL;
    while (generated < o->max_tokens) {
        if (guided &&
            !dy_guide_mask(&s->guides, &s->guide, s->logits, !o->ignore_eos, err, errlen))
            return -1;
        for (int i = 0; o->ignore_eos && i < s->n_end; i++) /* the server's ignore_eos too */
            s->logits[s->end_ids[i]] = -INFINITY;
        int32_t next = dy_sample(s->sampler, &o->sampling, &rng, s->logits);
        generated++;
        if (!o->ignore_eos && ends_generation(s->model->tok, next))
            break;
        char piece[256];
        size_t n = token_text(s, prev, next, piece);
        if (guided && !dy_guide_advance(&s->guide, next, piece, n, err, errlen))
            return -1;
        emit_piece(s, piece, n);
        if (s->stop.stopped || generated == o->max_tokens || pos == ctx ||
            (guided && !dy_gstate_can_continue(&s->guide.st)))
            break;
        dy_span sp = {&next, 1, pos, s->blocks, (ctx + 15) / 16, 1};
        if (dy_engine_step(s->engine, &sp, 1, s->logits, err, errlen) != 0)
            return -1;
        prev = next;
        pos++;
    }
    const char *out;
    size_t out_len;
    dy_stop_flush(&s->stop, &out, &out_len);
    emit(out, out_len);
    emit("\n", 1);
    if (s->stop.failed) {
        snprintf(err, errlen, "out of memory: a piece of the text was lost");
        return -1;
    }
    if (guided && !dy_guide_complete(&s->guide))
        fprintf(stderr, "dyad run: the text was cut before its grammar was complete\n");
    double t2 = 1e3 * dy_now();
    int decoded = generated > 1 ? generated - 1 : 0; /* steps after the prefill */
    fprintf(stderr, "prompt tokens: %d, prefill: %.2f ms (%.1f tokens/s), generated: %d, "
            "decode: %.3f ms/token (%.1f tokens/s), threads: %d, kernels: %s, kv: %s\n",
            n_prompt, t1 - t0, n_prompt / ((t1 - t0) / 1e3), generated,
            decoded ? (t2 - t1) / decoded : 0.0, decoded ? decoded / ((t2 - t1) / 1e3) : 0.0,
            dy_engine_threads(s->engine), dy_simd_name(dy_engine_simd(s->engine)),
            dy_kv_type_name(s->kv->type));
    return 0;
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    int rc = parse(argc, argv, &o);
    if (rc != CLI_GO)
        return rc;
    char default_model[4096], default_tok[4096], err[1024] = "";
    if (!o.model) {
        snprintf(default_model, sizeof default_model, "%s/stories260K.bin", dyad_model_dir());
        snprintf(default_tok, sizeof default_tok, "%s/tok512.bin", dyad_model_dir());
        o.model = default_model;
        if (!o.tokenizer)
            o.tokenizer = default_tok;
    }
    run_state s = {0};
    int n_prompt = 0;
    if (!(s.model = dy_model_load(o.model, o.tokenizer, err, sizeof err))) {
        fprintf(stderr, "dyad run: %s\n", err);
        return 1;
    }
    if (!s.model->tok) {
        fprintf(stderr, "dyad run: %s has no tokenizer; pass --tokenizer tokenizer.bin\n", o.model);
        run_state_free(&s);
        return 1;
    }
    rc = 1;
    if (!dy_stop_init(&s.stop, o.stops, o.n_stops))
        fprintf(stderr, "dyad run: out of memory\n");
    else if (tokenize_prompt(&s, o.prompt, &n_prompt) != 0)
        fprintf(stderr, "dyad run: the prompt could not be tokenized\n");
    else if (n_prompt > s.model->hp.ctx_len)
        fprintf(stderr, "dyad run: the prompt has %d tokens, more than the model's context of %d\n",
                n_prompt, s.model->hp.ctx_len);
    else if (setup(&s, &o, n_prompt, err, sizeof err) != 0 ||
             generate(&s, &o, n_prompt, err, sizeof err) != 0)
        fprintf(stderr, "dyad run: %s\n", err);
    else
        rc = 0;
    run_state_free(&s);
    return rc;
}
