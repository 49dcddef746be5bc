/* fuzz_grammar.c — libFuzzer target for structured outputs' two compilers. The first byte picks:
 *   even: the input is grammar text; if it compiles, its tail is fed to the recognizer and a
 *         mask is taken over a small vocabulary at every byte (no crash, no hang, no leak);
 *   odd:  the input is a JSON Schema; if the schema compiler accepts it, the grammar it writes
 *         must compile (a schema that compiles to a grammar the worker refuses is a bug).
 *   ./build-fuzz/fuzz_grammar -max_total_time=600 build-fuzz/corpus-grammar fuzz/corpus-grammar */
#include "grammar/grammar.h"
#include "grammar/schema.h"
#include "harness.h"

#include <string.h>

static const char *const VOCAB[] = {"{", "}", "\"", "a", "ab", "1", "12", " ", ",", ":",
                                    "\xc3\xa9", "\\", "true", "[", "]", "-", "x\"", ""};
#define NV ((int)(sizeof VOCAB / sizeof *VOCAB))

static void walk_text(const dy_grammar *g, const uint8_t *s, size_t n)
{
    uint32_t lens[NV];
    for (int i = 0; i < NV; i++)
        lens[i] = (uint32_t)strlen(VOCAB[i]);
    dy_vocab_trie *t = dy_vocab_trie_new(NV, VOCAB, lens);
    dy_gmatch *m = t ? dy_gmatch_new(g, t, (dy_gmatch_limits){.max_nodes = 1 << 14}) : NULL;
    dy_gstate st;
    if (m && dy_gstate_start(m, &st) == DY_GRAMMAR_OK) {
        for (size_t i = 0; i < n; i++) {
            dy_gstate_mask(m, &st);
            if (dy_gstate_advance(m, &st, (const char *)s + i, 1) != DY_GRAMMAR_OK)
                break;
        }
        dy_gstate_free(&st);
    }
    dy_gmatch_free(m);
    dy_vocab_trie_free(t);
}

static void fuzz_grammar_text(const uint8_t *data, size_t size)
{
    size_t cut = size / 2; /* first half the grammar, second half text to follow */
    char err[256];
    dy_grammar *g = dy_grammar_parse((const char *)data, cut, err, sizeof err);
    if (!g)
        return;
    dy_grammar_accepts(g, (const char *)data + cut, size - cut);
    walk_text(g, data + cut, size - cut);
    dy_grammar_free(g);
}

static void fuzz_schema(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *schema = json_loadb((const char *)data, size, 0, &je);
    if (!schema)
        return;
    dy_buf out = {0};
    dy_schema_error e;
    dy_schema_opts opts = {.max_grammar_bytes = 1 << 16};
    if (dy_schema_to_grammar(schema, &opts, &out, &e) == DY_SCHEMA_OK) {
        char err[256];
        dy_grammar *g = dy_grammar_parse((const char *)out.data, out.len, err, sizeof err);
        fz_check(g != NULL, "the schema compiled to a grammar that does not: %s\n%.*s", err,
                 (int)out.len, (const char *)out.data);
        dy_grammar_free(g);
    }
    dy_buf_free(&out);
    json_decref(schema);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        fuzz_schema(data + 1, size - 1);
    else
        fuzz_grammar_text(data + 1, size - 1);
    return 0;
}
