/* test_gguf.c — the GGUF reader: the bundled file's metadata and tensors, and bad files
 * (truncated at every length, corrupted fields, random byte flips) rejected with a message
 * naming the file and offset, never a crash (the sanitizer build checks the "never"). */
#include "testutil.h"
#include "engine/gguf.h"
#include "engine/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "models/stories260K.gguf"

static void test_reads_bundled_model(void **state)
{
    (void)state;
    char err[512];
    dy_gguf_file *g = dy_gguf_open(tu_path(MODEL), err, sizeof err);
    assert_non_null(g);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->n_tensors, 48);
    char *arch = dy_gguf_get_str(g, "general.architecture");
    assert_string_equal(arch, "llama");
    free(arch);
    uint64_t v;
    assert_true(dy_gguf_get_u64(g, "llama.embedding_length", &v));
    assert_int_equal(v, 64);
    assert_true(dy_gguf_get_u64(g, "llama.attention.head_count_kv", &v));
    assert_int_equal(v, 4);
    assert_true(dy_gguf_get_u64(g, "llama.context_length", &v));
    assert_int_equal(v, 2048);
    const dy_gguf_kv *toks = dy_gguf_get_arr(g, "tokenizer.ggml.tokens", DY_GGUF_STRING);
    assert_non_null(toks);
    assert_int_equal(toks->v.arr.n, 512);
    assert_true(dy_gguf_str_eq(toks->v.arr.strings[1], "<s>"));
    const dy_gguf_tensor *t = dy_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_non_null(t);
    assert_int_equal(t->type, DY_F32);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 64);
    assert_int_equal(t->nbytes, 64 * 64 * 4);
    assert_null(dy_gguf_find_tensor(g, "no.such.tensor"));
    dy_gguf_close(g);
}

/* Every prefix of the file is invalid and must say so with the name and an offset. */
static void test_truncated_everywhere(void **state)
{
    (void)state;
    size_t len;
    char *buf = tu_read_file(tu_path(MODEL), &len);
    assert_non_null(buf);
    char err[512];
    /* Every length through the metadata and tensor infos, then a sample of the data. */
    for (size_t n = 0; n < len; n += n < 20000 ? 1 : 4099) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, buf, n);
        err[0] = 0;
        dy_gguf_file *g = dy_gguf_parse(copy, n, "cut.gguf", err, sizeof err);
        if (g)
            fail_msg("a %zu-byte prefix parsed", n);
        assert_non_null(strstr(err, "cut.gguf"));
        free(copy);
    }
    free(buf);
}

static dy_gguf_file *parse_modified(const char *buf, size_t len, size_t off, const void *bytes,
                                    size_t n, char *err, size_t errlen)
{
    static uint8_t *copy;
    free(copy);
    copy = malloc(len);
    memcpy(copy, buf, len);
    memcpy(copy + off, bytes, n);
    return dy_gguf_parse(copy, len, "bad.gguf", err, errlen);
}

static void expect_error(const char *buf, size_t len, size_t off, const void *bytes, size_t n,
                         const char *needle)
{
    char err[512] = "";
    dy_gguf_file *g = parse_modified(buf, len, off, bytes, n, err, sizeof err);
    if (g)
        fail_msg("modified file parsed (expected '%s')", needle);
    if (!strstr(err, needle))
        fail_msg("error '%s' does not mention '%s'", err, needle);
}

/* GGUF v2 has v3's layout (64-bit counts and lengths); the same bytes marked v2 must load. */
static void test_version_2_accepted(void **state)
{
    (void)state;
    size_t len;
    char *buf = tu_read_file(tu_path(MODEL), &len);
    uint32_t v2 = 2;
    memcpy(buf + 4, &v2, 4);
    char err[512];
    dy_gguf_file *g = dy_gguf_parse((const uint8_t *)buf, len, "v2.gguf", err, sizeof err);
    assert_non_null(g);
    assert_int_equal(g->version, 2);
    assert_int_equal(g->n_tensors, 48);
    dy_gguf_close(g);
    free(buf);
}

static void test_corrupt_header_fields(void **state)
{
    (void)state;
    size_t len;
    char *buf = tu_read_file(tu_path(MODEL), &len);
    uint32_t v4 = 4;
    uint64_t huge = 1ull << 40;
    expect_error(buf, len, 0, "GGUX", 4, "bad magic");
    expect_error(buf, len, 4, &v4, 4, "unsupported GGUF version 4");
    expect_error(buf, len, 8, &huge, 8, "implausible counts");
    expect_error(buf, len, 16, &huge, 8, "implausible counts");
    /* The first key's length, made huge. */
    expect_error(buf, len, 24, &huge, 8, "truncated");
    free(buf);
}

/* Finds the tensor-info record of `name` in the raw file (its name bytes). */
static size_t find_tensor_info(const char *buf, size_t len, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 8; i + n < len; i++) {
        uint64_t l;
        memcpy(&l, buf + i - 8, 8);
        if (l == n && memcmp(buf + i, name, n) == 0)
            return i + n; /* first byte after the name: n_dims */
    }
    return 0;
}

static void test_corrupt_tensor_info(void **state)
{
    (void)state;
    size_t len;
    char *buf = tu_read_file(tu_path(MODEL), &len);
    size_t at = find_tensor_info(buf, len, "blk.0.attn_q.weight");
    assert_true(at > 0);
    uint32_t dims5 = 5, type99 = 99, typeq4_1 = 3;
    uint64_t big = 1ull << 20, off_past = (uint64_t)len * 2, misaligned = 4;
    expect_error(buf, len, at, &dims5, 4, "5 dimensions");
    /* n_dims (4) + ne0 (8) + ne1 (8) = type at +20, offset at +24 */
    expect_error(buf, len, at + 20, &type99, 4, "unsupported type 99");
    expect_error(buf, len, at + 20, &typeq4_1, 4, "unsupported type 3");
    expect_error(buf, len, at + 4, &big, 8, "runs past the end");
    expect_error(buf, len, at + 24, &off_past, 8, "runs past the end");
    expect_error(buf, len, at + 24, &misaligned, 8, "not aligned");
    free(buf);
}

/* Deterministic random byte flips over the header region: parse or fail, never crash. */
static void test_random_flips(void **state)
{
    (void)state;
    size_t len;
    char *buf = tu_read_file(tu_path(MODEL), &len);
    uint64_t x = 12345;
    int parsed = 0;
    for (int round = 0; round < 3000; round++) {
        uint8_t *copy = malloc(len);
        memcpy(copy, buf, len);
        for (int k = 0; k < 4; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            copy[x % 16000] ^= (uint8_t)(x >> 32) | 1;
        }
        char err[512];
        dy_gguf_file *g = dy_gguf_parse(copy, len, "flip.gguf", err, sizeof err);
        if (g) {
            parsed++;
            dy_gguf_close(g);
        } else
            assert_non_null(strstr(err, "flip.gguf"));
        free(copy);
    }
    free(buf);
    (void)parsed;
}

static void test_missing_file(void **state)
{
    (void)state;
    char err[512];
    assert_null(dy_gguf_open("/nonexistent/model.gguf", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_bundled_model),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_version_2_accepted),
        cmocka_unit_test(test_corrupt_header_fields),
        cmocka_unit_test(test_corrupt_tensor_info),
        cmocka_unit_test(test_random_flips),
        cmocka_unit_test(test_missing_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
