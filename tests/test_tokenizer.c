/* test_tokenizer.c — the tokenizer against llama.cpp's outputs: the ggml-vocab test sets
 * (llama-spm, phi-3, gpt-2: every case's ids, and decoding back to the input), the
 * stories260K goldens through both the GGUF and the llama2.c tokenizer.bin, special
 * tokens, EOG, pre-tokenizer splits, and bad tokenizer.bin files. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_impl.h"

#define SEP "\n__ggml_vocab_test__\n"

static dy_tokenizer *load_gguf(const char *rel, dy_gguf_file **gout)
{
    char err[512] = "";
    dy_gguf_file *g = dy_gguf_open(tu_path(rel), err, sizeof err);
    if (!g)
        fail_msg("dy_gguf_open %s: %s", rel, err);
    dy_tokenizer *t = dy_tokenizer_from_gguf(g, err, sizeof err);
    if (!t)
        fail_msg("dy_tokenizer_from_gguf %s: %s", rel, err);
    *gout = g;
    return t;
}

/* Tokenizes into a malloc'd array; *n gets the count. */
static int32_t *tokenize(const dy_tokenizer *t, const char *s, size_t len, bool bos, bool special,
                         int *n)
{
    int need = dy_tokenize(t, s, len, bos, special, NULL, 0);
    assert_true(need >= 0);
    int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
    assert_non_null(ids);
    assert_int_equal(dy_tokenize(t, s, len, bos, special, ids, need), need);
    *n = need;
    return ids;
}

/* Concatenated pieces of ids (the first follows `prev`); malloc'd, NUL-terminated. */
static char *detokenize(const dy_tokenizer *t, int32_t prev, const int32_t *ids, int n,
                        size_t *len)
{
    size_t cap = 64, k = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (int i = 0; i < n; i++) {
        char piece[256];
        int m = dy_token_to_piece(t, i ? ids[i - 1] : prev, ids[i], piece, sizeof piece);
        assert_true(m >= 0 && m < (int)sizeof piece);
        while (k + (size_t)m + 1 > cap)
            out = realloc(out, cap *= 2);
        memcpy(out + k, piece, (size_t)m);
        k += (size_t)m;
    }
    out[k] = 0;
    *len = k;
    return out;
}

/* Parses "[1, 2, 3]" or " 1 2 3" into ids; returns the count. */
static int parse_ids(const char *s, int32_t *ids, int cap)
{
    int n = 0;
    while (*s) {
        if ((*s >= '0' && *s <= '9') || *s == '-') {
            char *end;
            long v = strtol(s, &end, 10);
            assert_true(n < cap);
            ids[n++] = (int32_t)v;
            s = end;
        } else {
            s++;
        }
    }
    return n;
}

/* One ggml-vocab-*.gguf set: cases in .inp (each followed by SEP), ids in .out. */
static void run_vocab_set(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/vocab/ggml-vocab-%s.gguf", name);
    dy_gguf_file *g;
    dy_tokenizer *t = load_gguf(rel, &g);
    bool spm = dy_tokenizer_kind(t) == DY_VOCAB_SPM;

    char path[300];
    snprintf(path, sizeof path, "%s.inp", rel);
    char *inp = tu_read_file(tu_path(path), NULL);
    snprintf(path, sizeof path, "%s.out", rel);
    char *outs = tu_read_file(tu_path(path), NULL);
    assert_non_null(inp);
    assert_non_null(outs);

    int cases = 0, id_pass = 0, text_pass = 0;
    char *in = inp, *line = outs;
    for (char *sep; (sep = strstr(in, SEP)) != NULL; in = sep + strlen(SEP)) {
        size_t len = (size_t)(sep - in);
        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = 0;
        int32_t want[4096];
        int nwant = parse_ids(line, want, 4096);
        line = eol + 1;
        cases++;

        int n;
        int32_t *ids = tokenize(t, in, len, false, false, &n);
        bool same = n == nwant && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
        if (!same) {
            print_message("%s case %d: '%.*s': got %d ids, want %d\n", name, cases, (int)len, in,
                          n, nwant);
            for (int i = 0; i < n && i < 64; i++)
                print_message(" %d", ids[i]);
            print_message("\n");
        }
        id_pass += same;

        size_t dlen;
        char *text = detokenize(t, -1, ids, n, &dlen);
        const char *d = text;
        if (spm && len > 0) { /* the SPM space prefix */
            assert_true(dlen > 0 && d[0] == ' ');
            d++, dlen--;
        }
        bool back = dlen == len && memcmp(d, in, len) == 0;
        if (!back)
            print_message("%s case %d: decodes to '%s'\n", name, cases, d);
        text_pass += back;
        free(text);
        free(ids);
    }
    assert_int_equal(*line, 0); /* as many .out lines as cases */
    print_message("ggml-vocab-%s: %d/%d cases match llama.cpp, %d/%d decode back\n", name,
                  id_pass, cases, text_pass, cases);
    assert_true(cases > 40);
    assert_int_equal(id_pass, cases);
    assert_int_equal(text_pass, cases);
    free(inp);
    free(outs);
    dy_tokenizer_free(t);
    dy_gguf_close(g);
}

static void test_vocab_llama_spm(void **state)
{
    (void)state;
    run_vocab_set("llama-spm");
}

static void test_vocab_phi3(void **state)
{
    (void)state;
    run_vocab_set("phi-3");
}

static void test_vocab_gpt2(void **state)
{
    (void)state;
    run_vocab_set("gpt-2");
}

/* The four golden strings of llamacpp_tokenize_stories260K_gguf.tsv (BOS added). */
static void check_stories_goldens(const dy_tokenizer *t)
{
    char *tsv = tu_read_file(tu_path("tests/data/golden/llamacpp_tokenize_stories260K_gguf.tsv"),
                             NULL);
    assert_non_null(tsv);
    int checked = 0;
    char *save = NULL;
    strtok_r(tsv, "\n", &save); /* header */
    for (char *line; (line = strtok_r(NULL, "\n", &save)) != NULL;) {
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = 0;
        int32_t want[256];
        int nwant = parse_ids(tab + 1, want, 256);
        int n;
        int32_t *ids = tokenize(t, line, strlen(line), true, false, &n);
        assert_int_equal(n, nwant);
        assert_memory_equal(ids, want, (size_t)n * sizeof *ids);
        size_t dlen;
        char *text = detokenize(t, -1, ids, n, &dlen); /* BOS, then no leading space */
        assert_string_equal(text, line);
        free(text);
        free(ids);
        checked++;
    }
    assert_int_equal(checked, 4);
    free(tsv);
}

static void test_stories260K_gguf(void **state)
{
    (void)state;
    dy_gguf_file *g;
    dy_tokenizer *t = load_gguf("models/stories260K.gguf", &g);
    assert_int_equal(dy_tokenizer_kind(t), DY_VOCAB_SPM);
    assert_int_equal(dy_tokenizer_vocab_size(t), 512);
    assert_int_equal(dy_tokenizer_bos(t), 1);
    assert_int_equal(dy_tokenizer_eos(t), 2);
    assert_true(dy_tokenizer_add_bos(t));
    assert_true(dy_tokenizer_is_eog(t, 2));
    assert_false(dy_tokenizer_is_eog(t, 1));
    assert_null(dy_tokenizer_chat_template(t));
    check_stories_goldens(t);
    dy_tokenizer_free(t);
    dy_gguf_close(g);
}

static void test_llama2c_tok512(void **state)
{
    (void)state;
    char err[512] = "";
    dy_tokenizer *t = dy_tokenizer_from_llama2c(tu_path("models/tok512.bin"), 512, err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    int32_t ids[16];
    const char *s = "Once upon a time";
    assert_int_equal(dy_tokenize(t, s, strlen(s), true, false, ids, 16), 5);
    const int32_t want[] = {1, 403, 407, 261, 378};
    assert_memory_equal(ids, want, sizeof want);
    assert_string_equal(dy_tokenizer_token_text(t, 403), " Once");
    assert_null(dy_tokenizer_token_text(t, 512));
    assert_true(dy_tokenizer_is_eog(t, 2));

    char piece[16];
    assert_int_equal(dy_token_to_piece(t, 1, 403, piece, sizeof piece), 4); /* after BOS */
    assert_string_equal(piece, "Once");
    assert_int_equal(dy_token_to_piece(t, 403, 407, piece, sizeof piece), 5);
    assert_string_equal(piece, " upon");
    assert_int_equal(dy_token_to_piece(t, -1, 1, piece, sizeof piece), 0); /* control */
    assert_int_equal(dy_token_to_piece(t, -1, 3 + '\n', piece, sizeof piece), 1);
    assert_int_equal(piece[0], '\n');

    check_stories_goldens(t);
    /* empty text: no dummy prefix, only BOS */
    assert_int_equal(dy_tokenize(t, "", 0, true, false, ids, 16), 1);
    assert_int_equal(dy_tokenize(t, "", 0, false, false, ids, 16), 0);
    dy_tokenizer_free(t);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* Loading `data` as a tokenizer.bin must fail with a message naming the file and `where`. */
static void expect_bad(const void *data, size_t n, int vocab, const char *where)
{
    const char *path = "/tmp/dyad_test_tokenizer_bad.bin";
    write_file(path, data, n);
    char err[512] = "";
    dy_tokenizer *t = dy_tokenizer_from_llama2c(path, vocab, err, sizeof err);
    if (t)
        fail_msg("loaded a bad tokenizer.bin (%zu bytes, %s)", n, where);
    if (!strstr(err, path) || !strstr(err, where))
        fail_msg("error '%s' should name %s and '%s'", err, path, where);
    remove(path);
}

static void test_llama2c_bad(void **state)
{
    (void)state;
    size_t n;
    char *good = tu_read_file(tu_path("models/tok512.bin"), &n);
    assert_non_null(good);
    expect_bad(good, 2, 512, "offset 0");
    expect_bad(good, 4, 512, "offset 4: truncated");
    expect_bad(good, 10, 512, "offset 4: truncated");
    expect_bad(good, 14, 512, "offset 12: truncated"); /* inside "<unk>" */
    expect_bad(good, n - 1, 512, "truncated");
    expect_bad(good, n, 511, "bytes after the last of 511 tokens");
    expect_bad(good, n, 2, "vocabulary size 2");

    char *bad = malloc(n);
    assert_non_null(bad);
    int32_t v = -5;
    memcpy(bad, good, n);
    memcpy(bad + 8, &v, 4); /* token 0 length */
    expect_bad(bad, n, 512, "offset 8: token 0 has length -5");
    v = 0x7fffffff;
    memcpy(bad + 8, &v, 4);
    expect_bad(bad, n, 512, "offset 8: token 0 has length 2147483647");
    memcpy(bad, good, n);
    v = 0;
    memcpy(bad, &v, 4);
    expect_bad(bad, n, 512, "offset 0: max_token_length 0");

    char err[256] = "";
    assert_null(dy_tokenizer_from_llama2c("/nonexistent/tok.bin", 512, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/tok.bin"));
    free(bad);
    free(good);
}

static void test_special_tokens(void **state)
{
    (void)state;
    dy_gguf_file *g;
    dy_tokenizer *t = load_gguf("tests/data/vocab/ggml-vocab-phi-3.gguf", &g);
    const char *s = "<|user|>\nHi<|end|>\n<|assistant|>";
    int n;
    int32_t *ids = tokenize(t, s, strlen(s), true, true, &n);
    /* rstrip (phi-3): the newline after <|user|> and <|end|> is dropped */
    assert_true(n >= 5);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 32010);
    assert_int_equal(ids[n - 2], 32007);
    assert_int_equal(ids[n - 1], 32001);
    size_t dlen;
    char *text = detokenize(t, -1, ids, n, &dlen);
    assert_string_equal(text, " Hi"); /* control tokens decode to nothing */
    free(text);
    free(ids);

    ids = tokenize(t, s, strlen(s), false, false, &n); /* not parsed: plain text */
    for (int i = 0; i < n; i++)
        assert_true(ids[i] < 32000);
    text = detokenize(t, -1, ids, n, &dlen);
    assert_string_equal(text, " <|user|>\nHi<|end|>\n<|assistant|>");
    free(text);
    free(ids);

    /* "</s>" is user-defined in phi-3: matched even without parse_special */
    ids = tokenize(t, "a</s>b", 6, false, false, &n);
    assert_int_equal(ids[1], 2);
    free(ids);

    assert_int_equal(dy_tokenizer_eos(t), 32000);
    assert_true(dy_tokenizer_is_eog(t, 32000));
    assert_true(dy_tokenizer_is_eog(t, 32007));
    assert_false(dy_tokenizer_is_eog(t, 32010));
    assert_non_null(dy_tokenizer_chat_template(t));
    assert_non_null(strstr(dy_tokenizer_chat_template(t), "<|assistant|>"));
    dy_tokenizer_free(t);
    dy_gguf_close(g);
}

static void test_gpt2_meta_and_pieces(void **state)
{
    (void)state;
    dy_gguf_file *g;
    dy_tokenizer *t = load_gguf("tests/data/vocab/ggml-vocab-gpt-2.gguf", &g);
    assert_int_equal(dy_tokenizer_kind(t), DY_VOCAB_BPE);
    assert_int_equal(dy_tokenizer_vocab_size(t), 50257);
    assert_false(dy_tokenizer_add_bos(t));
    assert_true(dy_tokenizer_is_eog(t, 50256));

    const char *s = "Hello world<|endoftext|>";
    int32_t ids[16];
    assert_int_equal(dy_tokenize(t, s, strlen(s), false, true, ids, 16), 3);
    assert_int_equal(ids[0], 15496);
    assert_int_equal(ids[1], 995);
    assert_int_equal(ids[2], 50256);
    /* cap smaller than the result: the full count comes back, only cap ids written */
    ids[1] = -7;
    assert_int_equal(dy_tokenize(t, s, strlen(s), false, true, ids, 1), 3);
    assert_int_equal(ids[1], -7);

    char piece[4] = "zzz";
    assert_int_equal(dy_token_to_piece(t, -1, 995, piece, 2), 6); /* " world", truncated */
    assert_memory_equal(piece, " w", 2);
    assert_string_equal(dy_tokenizer_token_text(t, 995), "\xc4\xa0world");
    assert_int_equal(dy_token_to_piece(t, -1, 50256, piece, sizeof piece), 0);
    dy_tokenizer_free(t);
    dy_gguf_close(g);
}

static void expect_split(const char *pre, const char *text, const char *const *want, int nwant)
{
    bool ignore_merges, add_bos;
    char err[256];
    dy_pretok *p = dy_pretok_new(pre, &ignore_merges, &add_bos, err, sizeof err);
    if (!p)
        fail_msg("%s", err);
    size_t *offs;
    int n = dy_pretok_split(p, text, strlen(text), &offs);
    for (int i = 0; i < n && i < nwant; i++) {
        if (offs[2 * i + 1] != strlen(want[i]) || memcmp(text + offs[2 * i], want[i], strlen(want[i])))
            fail_msg("%s: piece %d is '%.*s', want '%s'", pre, i, (int)offs[2 * i + 1],
                     text + offs[2 * i], want[i]);
    }
    assert_int_equal(n, nwant);
    free(offs);
    dy_pretok_free(p);
}

static void test_pretokenizers(void **state)
{
    (void)state;
    const char *gpt2[] = {"Hello", "'s", " world", " 123456", "  ", " !!", "\n", "x"};
    expect_split("gpt-2", "Hello's world 123456   !!\nx", gpt2, 8);
    const char *llama3[] = {"Hello", "'S", " world", " ", "123", "456", "\n\n", " ", " hi",
                            "!!\n", "x"};
    expect_split("llama-bpe", "Hello'S world 123456\n\n  hi!!\nx", llama3, 11);

    bool im, ab;
    char err[128];
    dy_pretok *p = dy_pretok_new("llama-bpe", &im, &ab, err, sizeof err);
    assert_non_null(p);
    assert_true(im);
    assert_true(ab);
    dy_pretok_free(p);
    assert_null(dy_pretok_new("no-such-pre", &im, &ab, err, sizeof err));
    assert_non_null(strstr(err, "no-such-pre"));
}

/* A small byte-level vocabulary in a GGUF without tensors. `mutate` breaks one thing. */
enum { OK, BAD_MODEL, BAD_PRE, NO_MERGES, SHORT_SCORES, TYPES_AS_F32 };

static dy_gguf_file *synthetic_bpe(const char *pre, int mutate, char *err, size_t errlen)
{
    const char *toks[] = {"a", "b", "c", "ab", "bc", "abc", "\xc4\xa0", "<|eot_id|>"};
    const char *merges[] = {"b c", "a b"};
    int32_t types[] = {1, 1, 1, 1, 1, 1, 1, 3};
    float scores[] = {0, 0, 0, 0, 0, 0, 0, 0};
    const char *path = "/tmp/dyad_test_tokenizer.gguf";
    dy_gguf_writer *w = dy_gguf_writer_new();
    assert_non_null(w);
    dy_gguf_writer_set_str(w, "general.architecture", "llama");
    dy_gguf_writer_set_str(w, "tokenizer.ggml.model", mutate == BAD_MODEL ? "t5" : "gpt2");
    dy_gguf_writer_set_str(w, "tokenizer.ggml.pre", mutate == BAD_PRE ? "klingon" : pre);
    dy_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 8);
    if (mutate == TYPES_AS_F32)
        dy_gguf_writer_set_arr_f32(w, "tokenizer.ggml.token_type", scores, 8);
    else
        dy_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 8);
    dy_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, mutate == SHORT_SCORES ? 7 : 8);
    if (mutate != NO_MERGES)
        dy_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 2);
    dy_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0);
    dy_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 7);
    char werr[256];
    if (!dy_gguf_writer_write_file(w, path, werr, sizeof werr))
        fail_msg("%s", werr);
    dy_gguf_writer_free(w);
    dy_gguf_file *g = dy_gguf_open(path, err, errlen);
    if (!g)
        fail_msg("%s", err);
    remove(path);
    return g;
}

static void test_bpe_ignore_merges(void **state)
{
    (void)state;
    char err[256];
    int32_t ids[8];
    /* gpt-2: merges only — "b c" ranks first, and nothing joins "a" + "bc" */
    dy_gguf_file *g = synthetic_bpe("gpt-2", OK, err, sizeof err);
    dy_tokenizer *t = dy_tokenizer_from_gguf(g, err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    assert_false(dy_tokenizer_add_bos(t));
    assert_int_equal(dy_tokenize(t, "abc", 3, false, false, ids, 8), 2);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 4);
    assert_true(dy_tokenizer_is_eog(t, 7));
    dy_tokenizer_free(t);
    dy_gguf_close(g);

    /* llama-bpe: a pre-token that is a whole token is taken as is; BOS by default */
    g = synthetic_bpe("llama-bpe", OK, err, sizeof err);
    t = dy_tokenizer_from_gguf(g, err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    assert_true(dy_tokenizer_add_bos(t));
    assert_int_equal(dy_tokenize(t, "abc", 3, true, false, ids, 8), 2);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 5);
    /* a character with no token and no byte token is dropped, as llama.cpp does */
    assert_int_equal(dy_tokenize(t, "a d", 3, false, false, ids, 8), 2);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 6);
    dy_tokenizer_free(t);
    dy_gguf_close(g);
}

static void expect_bad_gguf(int mutate, const char *what)
{
    char err[256] = "";
    dy_gguf_file *g = synthetic_bpe("gpt-2", mutate, err, sizeof err);
    dy_tokenizer *t = dy_tokenizer_from_gguf(g, err, sizeof err);
    if (t)
        fail_msg("loaded a bad vocabulary (%s)", what);
    if (!strstr(err, "/tmp/dyad_test_tokenizer.gguf") || !strstr(err, what))
        fail_msg("error '%s' should name the file and '%s'", err, what);
    dy_gguf_close(g);
}

static void test_bad_gguf_vocab(void **state)
{
    (void)state;
    expect_bad_gguf(BAD_MODEL, "'t5' is not supported");
    expect_bad_gguf(BAD_PRE, "unknown pre-tokenizer 'klingon'");
    expect_bad_gguf(NO_MERGES, "tokenizer.ggml.merges");
    expect_bad_gguf(SHORT_SCORES, "tokenizer.ggml.scores has 7 entries for 8 tokens");
    expect_bad_gguf(TYPES_AS_F32, "tokenizer.ggml.token_type has the wrong type");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_llama_spm),
        cmocka_unit_test(test_vocab_phi3),
        cmocka_unit_test(test_vocab_gpt2),
        cmocka_unit_test(test_stories260K_gguf),
        cmocka_unit_test(test_llama2c_tok512),
        cmocka_unit_test(test_llama2c_bad),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_gpt2_meta_and_pieces),
        cmocka_unit_test(test_pretokenizers),
        cmocka_unit_test(test_bpe_ignore_merges),
        cmocka_unit_test(test_bad_gguf_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
