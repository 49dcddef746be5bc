/* test_gguf_write.c — the GGUF writer against the reader: every metadata kind and every
 * weight type written and read back value for value and byte for byte; the file layout
 * llama.cpp insists on (alignment 32, tensors back to back in add order, each padded);
 * streamed tensors and their progress line; copying a real vocabulary's tokenizer.* entries; a written llama model
 * loading with dy_model_load; and the failure paths (bad tensors, unwritable paths, a full
 * disk simulated with RLIMIT_FSIZE), which must never leave a partial output or a
 * temporary file behind. */
#include "testutil.h"
#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/threadpool.h"
#include "util/clock.h"
#include "util/progress.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char dir[64];
    char path[128];
} tmp_dir;

static int setup(void **state)
{
    tmp_dir *t = calloc(1, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/dyad-gguf-write-XXXXXX");
    if (!mkdtemp(t->dir))
        return -1;
    snprintf(t->path, sizeof t->path, "%s/out.gguf", t->dir);
    *state = t;
    return 0;
}

/* Files in the directory: what a failed write must not leave behind. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

static int teardown(void **state)
{
    tmp_dir *t = *state;
    DIR *d = opendir(t->dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(p, sizeof p, "%s/%s", t->dir, e->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
    rmdir(t->dir);
    free(t);
    return 0;
}

static dy_gguf_file *open_ok(const char *path)
{
    char err[512];
    dy_gguf_file *g = dy_gguf_open(path, err, sizeof err);
    if (!g)
        fail_msg("%s", err);
    return g;
}

static uint64_t pad32(uint64_t n)
{
    return (n + 31) / 32 * 32;
}

/* ---------------------------------------------------------------- metadata */

static void test_metadata_kinds(void **state)
{
    tmp_dir *t = *state;
    char err[512];
    dy_gguf_writer *w = dy_gguf_writer_new();
    const char *strs[] = {"alpha", "", "\xe2\x96\x81gamma"};
    const dy_gguf_str strn[] = {{"a\0b", 3}, {"", 0}};
    const float fs[] = {1.5f, -0.0f, 1e-30f, INFINITY};
    const int32_t is[] = {INT32_MIN, -1, 0, INT32_MAX};
    assert_true(dy_gguf_writer_set_str(w, "general.architecture", "llama"));
    assert_true(dy_gguf_writer_set_u32(w, "k.u32", 4000000000u));
    assert_true(dy_gguf_writer_set_i32(w, "k.i32", -123456));
    assert_true(dy_gguf_writer_set_f32(w, "k.f32", 3.25f));
    assert_true(dy_gguf_writer_set_bool(w, "k.true", true));
    assert_true(dy_gguf_writer_set_bool(w, "k.false", false));
    assert_true(dy_gguf_writer_set_str(w, "k.str", "h\xc3\xa9llo"));
    assert_true(dy_gguf_writer_set_arr_str(w, "k.astr", strs, 3));
    assert_true(dy_gguf_writer_set_arr_strn(w, "k.astrn", strn, 2));
    assert_true(dy_gguf_writer_set_arr_f32(w, "k.af32", fs, 4));
    assert_true(dy_gguf_writer_set_arr_i32(w, "k.ai32", is, 4));
    assert_true(dy_gguf_writer_set_arr_i32(w, "k.empty", NULL, 0));
    /* Replacing keeps the key's place and changes its type if asked. */
    assert_true(dy_gguf_writer_set_u32(w, "k.i32", 7));
    assert_true(dy_gguf_writer_set_i32(w, "k.i32", -7));
    assert_true(dy_gguf_writer_has_key(w, "k.f32"));
    assert_false(dy_gguf_writer_has_key(w, "k.nope"));
    assert_true(dy_gguf_writer_write_file(w, t->path, err, sizeof err));
    dy_gguf_writer_free(w);

    dy_gguf_file *g = open_ok(t->path);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, 32);
    assert_int_equal(g->n_tensors, 0);
    assert_int_equal(g->n_kv, 13); /* 12 keys + general.alignment */
    assert_true(dy_gguf_str_eq(g->kv[0].key, "general.architecture"));
    assert_true(dy_gguf_str_eq(g->kv[2].key, "k.i32"));
    assert_int_equal(dy_gguf_find(g, "general.alignment")->type, DY_GGUF_UINT32);
    assert_int_equal(dy_gguf_find(g, "k.u32")->type, DY_GGUF_UINT32);
    assert_int_equal(dy_gguf_find(g, "k.u32")->v.u, 4000000000u);
    assert_int_equal(dy_gguf_find(g, "k.i32")->type, DY_GGUF_INT32);
    assert_int_equal(dy_gguf_find(g, "k.i32")->v.i, -7);
    assert_int_equal(dy_gguf_find(g, "k.f32")->type, DY_GGUF_FLOAT32);
    assert_true(dy_gguf_find(g, "k.f32")->v.f == 3.25);
    bool b = false;
    assert_true(dy_gguf_get_bool(g, "k.true", &b) && b);
    assert_true(dy_gguf_get_bool(g, "k.false", &b) && !b);
    char *s = dy_gguf_get_str(g, "k.str");
    assert_string_equal(s, "h\xc3\xa9llo");
    free(s);
    const dy_gguf_kv *a = dy_gguf_get_arr(g, "k.astr", DY_GGUF_STRING);
    assert_non_null(a);
    assert_int_equal(a->v.arr.n, 3);
    for (int i = 0; i < 3; i++)
        assert_true(dy_gguf_str_eq(a->v.arr.strings[i], strs[i]));
    a = dy_gguf_get_arr(g, "k.astrn", DY_GGUF_STRING);
    assert_int_equal(a->v.arr.strings[0].len, 3);
    assert_memory_equal(a->v.arr.strings[0].ptr, "a\0b", 3);
    assert_int_equal(a->v.arr.strings[1].len, 0);
    a = dy_gguf_get_arr(g, "k.af32", DY_GGUF_FLOAT32);
    assert_int_equal(a->v.arr.n, 4);
    assert_memory_equal(a->v.arr.data, fs, sizeof fs);
    a = dy_gguf_get_arr(g, "k.ai32", DY_GGUF_INT32);
    assert_memory_equal(a->v.arr.data, is, sizeof is);
    assert_int_equal(dy_gguf_get_arr(g, "k.empty", DY_GGUF_INT32)->v.arr.n, 0);
    dy_gguf_close(g);
}

/* A hand-made GGUF (no tensors) holding one value of each of the 13 value types. */
static size_t handmade(uint8_t *buf)
{
    size_t n = 0;
#define PUT(v) (memcpy(buf + n, &(v), sizeof(v)), n += sizeof(v))
#define KEY(k, type) do { uint64_t l_ = strlen(k); uint32_t t_ = (type); PUT(l_); \
        memcpy(buf + n, k, l_); n += l_; PUT(t_); } while (0)
    uint32_t magic = 0x46554747u, ver = 3;
    uint64_t nt = 0, nkv = 13;
    PUT(magic); PUT(ver); PUT(nt); PUT(nkv);
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    uint64_t u64 = UINT64_C(1) << 63; int64_t i64 = INT64_MIN + 1; double f64 = -2.5e300;
    uint8_t bl = 1; uint32_t u32 = 5; int32_t i32 = -5; float f32 = 0.5f;
    KEY("t.u8", DY_GGUF_UINT8); PUT(u8);
    KEY("t.i8", DY_GGUF_INT8); PUT(i8);
    KEY("t.u16", DY_GGUF_UINT16); PUT(u16);
    KEY("t.i16", DY_GGUF_INT16); PUT(i16);
    KEY("t.u32", DY_GGUF_UINT32); PUT(u32);
    KEY("t.i32", DY_GGUF_INT32); PUT(i32);
    KEY("t.f32", DY_GGUF_FLOAT32); PUT(f32);
    KEY("t.bool", DY_GGUF_BOOL); PUT(bl);
    KEY("t.u64", DY_GGUF_UINT64); PUT(u64);
    KEY("t.i64", DY_GGUF_INT64); PUT(i64);
    KEY("t.f64", DY_GGUF_FLOAT64); PUT(f64);
    uint64_t sl = 2;
    KEY("t.str", DY_GGUF_STRING); PUT(sl); memcpy(buf + n, "hi", 2); n += 2;
    uint32_t et = DY_GGUF_UINT16; uint64_t an = 3; uint16_t av[3] = {1, 2, 65535};
    KEY("t.arr_u16", DY_GGUF_ARRAY); PUT(et); PUT(an); PUT(av);
#undef KEY
#undef PUT
    return n;
}

/* dy_gguf_writer_set_kv copies values of every type exactly (type and bytes). */
static void test_copy_every_type(void **state)
{
    tmp_dir *t = *state;
    char err[512];
    uint8_t buf[1024];
    size_t n = handmade(buf);
    dy_gguf_file *src = dy_gguf_parse(buf, n, "handmade", err, sizeof err);
    if (!src)
        fail_msg("%s", err);
    dy_gguf_writer *w = dy_gguf_writer_new();
    for (uint64_t i = 0; i < src->n_kv; i++)
        assert_true(dy_gguf_writer_set_kv(w, &src->kv[i]));
    assert_true(dy_gguf_writer_write_file(w, t->path, err, sizeof err));
    dy_gguf_writer_free(w);
    size_t len;
    uint8_t *out = (uint8_t *)tu_read_file(t->path, &len);
    assert_non_null(out);
    /* Identical bytes up to the key count (which gains general.alignment), then identical
     * key/values, then general.alignment, then padding. */
    assert_memory_equal(out, buf, 16);
    assert_memory_equal(out + 24, buf + 24, n - 24);
    assert_int_equal(len, pad32(n + 8 + 17 + 4 + 4));
    free(out);
    dy_gguf_close(src);
}

/* ---------------------------------------------------------------- tensors */

static void fill_random(float *x, int64_t n, unsigned seed)
{
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 4.0f;
    }
}

typedef struct {
    const char *name;
    dy_type type;
    uint32_t n_dims;
    int64_t ne[4];
} tdesc;

static const tdesc descs[] = {
    {"f32.vec", DY_F32, 1, {7, 1, 1, 1}},
    {"f16.mat", DY_F16, 2, {33, 3, 1, 1}},
    {"bf16.mat", DY_BF16, 2, {5, 2, 1, 1}},
    {"q8_0.mat", DY_Q8_0, 2, {64, 5, 1, 1}},
    {"q4_0.3d", DY_Q4_0, 3, {32, 3, 2, 1}},
    {"q4_k.mat", DY_Q4_K, 2, {512, 3, 1, 1}},
    {"q5_k.mat", DY_Q5_K, 2, {256, 2, 1, 1}},
    {"q6_k.4d", DY_Q6_K, 4, {256, 2, 1, 2}},
};
#define N_DESCS (sizeof descs / sizeof descs[0])

/* Quantized bytes for a tensor of descs[i]; the caller frees. */
static uint8_t *make_data(const tdesc *d, unsigned seed, uint64_t *nbytes)
{
    *nbytes = dy_gguf_tensor_bytes(d->type, d->n_dims, d->ne);
    assert_true(*nbytes > 0);
    size_t rb = dy_type_row_bytes(d->type, d->ne[0]);
    uint64_t rows = *nbytes / rb;
    uint8_t *data = malloc(*nbytes);
    float *row = malloc(sizeof(float) * (size_t)d->ne[0]);
    for (uint64_t r = 0; r < rows; r++) {
        fill_random(row, d->ne[0], seed + (unsigned)r);
        dy_quantize_row(d->type, row, data + r * rb, d->ne[0]);
    }
    free(row);
    return data;
}

/* Checks the read-back tensors against descs and data, and the data-section layout. */
static void check_tensors(const char *path, uint8_t **data, const uint64_t *nbytes)
{
    dy_gguf_file *g = open_ok(path);
    assert_int_equal(g->n_tensors, N_DESCS);
    assert_int_equal(g->data_offset % 32, 0);
    uint64_t off = 0;
    for (size_t i = 0; i < N_DESCS; i++) {
        const dy_gguf_tensor *gt = &g->tensors[i];
        assert_true(dy_gguf_str_eq(gt->name, descs[i].name));
        assert_int_equal(gt->n_dims, descs[i].n_dims);
        for (int d = 0; d < 4; d++)
            assert_int_equal(gt->ne[d], descs[i].ne[d]);
        assert_int_equal(gt->type, descs[i].type);
        assert_int_equal(gt->offset, off); /* back to back, each padded to 32 */
        assert_int_equal(gt->nbytes, nbytes[i]);
        assert_memory_equal(gt->data, data[i], nbytes[i]);
        off += pad32(nbytes[i]);
    }
    assert_int_equal(g->size, g->data_offset + off);
    /* Padding is zeros. */
    for (uint64_t p = g->tensors[N_DESCS - 1].offset + nbytes[N_DESCS - 1]; p < off; p++)
        assert_int_equal(g->map[g->data_offset + p], 0);
    dy_gguf_close(g);
}

static void test_tensor_types(void **state)
{
    tmp_dir *t = *state;
    char err[512];
    uint8_t *data[N_DESCS];
    uint64_t nbytes[N_DESCS];
    dy_gguf_writer *w = dy_gguf_writer_new();
    dy_gguf_writer_set_str(w, "general.architecture", "test");
    for (size_t i = 0; i < N_DESCS; i++) {
        data[i] = make_data(&descs[i], (unsigned)i * 100, &nbytes[i]);
        assert_true(dy_gguf_writer_add_tensor(w, descs[i].name, descs[i].n_dims, descs[i].ne,
                                              descs[i].type, data[i], nbytes[i]));
    }
    if (!dy_gguf_writer_write_file(w, t->path, err, sizeof err))
        fail_msg("%s", err);
    dy_gguf_writer_free(w);
    check_tensors(t->path, data, nbytes);
    assert_int_equal(dir_entries(t->dir), 1);

    /* The same file again, with half the tensors streamed in uneven pieces. */
    w = dy_gguf_writer_new();
    dy_gguf_writer_set_str(w, "general.architecture", "test");
    for (size_t i = 0; i < N_DESCS; i++)
        dy_gguf_writer_add_tensor(w, descs[i].name, descs[i].n_dims, descs[i].ne, descs[i].type,
                                  i % 2 ? NULL : data[i], nbytes[i]);
    assert_true(dy_gguf_writer_begin(w, t->path, err, sizeof err));
    for (size_t i = 1; i < N_DESCS; i += 2) {
        assert_int_equal(dy_gguf_writer_current(w), (long)i);
        uint64_t done = 0;
        for (size_t piece = 1; done < nbytes[i]; piece = piece * 3 + 1) {
            size_t k = piece < nbytes[i] - done ? piece : nbytes[i] - done;
            assert_true(dy_gguf_writer_write_data(w, data[i] + done, k, err, sizeof err));
            done += k;
        }
    }
    assert_int_equal(dy_gguf_writer_current(w), -1);
    assert_true(dy_gguf_writer_finish(w, err, sizeof err));
    dy_gguf_writer_free(w);
    check_tensors(t->path, data, nbytes);
    for (size_t i = 0; i < N_DESCS; i++)
        free(data[i]);
}

/* stream_rows quantizes what the row function makes, whatever the thread count. */
typedef struct {
    int64_t cols;
} rows_ctx;

static void rows_fill(void *p, int64_t row, float *dst)
{
    fill_random(dst, ((rows_ctx *)p)->cols, (unsigned)row + 7);
}

static void test_stream_rows(void **state)
{
    tmp_dir *t = *state;
    char err[512];
    const dy_type types[] = {DY_F32, DY_Q8_0, DY_Q4_K, DY_Q6_K};
    const int64_t cols = 256, rows = 37;
    dy_pool *pool = dy_pool_new(3);
    for (int threads = 1; threads <= 3; threads += 2) {
        dy_gguf_writer *w = dy_gguf_writer_new();
        for (int i = 0; i < 4; i++) {
            char name[16];
            int64_t ne[2] = {cols, rows};
            snprintf(name, sizeof name, "m%d", i);
            dy_gguf_writer_add_tensor(w, name, 2, ne, types[i], NULL,
                                      dy_gguf_tensor_bytes(types[i], 2, ne));
        }
        assert_true(dy_gguf_writer_begin(w, t->path, err, sizeof err));
        rows_ctx c = {cols};
        for (int i = 0; i < 4; i++)
            if (!dy_gguf_writer_stream_rows(w, threads > 1 ? pool : NULL, types[i], cols, rows,
                                            rows_fill, &c, err, sizeof err))
                fail_msg("%s", err);
        assert_true(dy_gguf_writer_finish(w, err, sizeof err));
        dy_gguf_writer_free(w);

        dy_gguf_file *g = open_ok(t->path);
        float *f = malloc(sizeof(float) * cols);
        uint8_t *q = malloc(dy_type_row_bytes(DY_F32, cols));
        for (int i = 0; i < 4; i++) {
            size_t rb = dy_type_row_bytes(types[i], cols);
            for (int64_t r = 0; r < rows; r++) {
                rows_fill(&c, r, f);
                dy_quantize_row(types[i], f, q, cols);
                assert_memory_equal((const uint8_t *)g->tensors[i].data + r * rb, q, rb);
            }
        }
        free(f);
        free(q);
        dy_gguf_close(g);
    }
    dy_pool_free(pool);
}

/* The write's progress line: the data section's size is its total, set by begin, which draws
 * the first line at once (nothing written yet, the first tensor); the line is the caller's to
 * erase. Later lines depend on the clock, so only the first is compared. */
static void test_progress_line(void **state)
{
    tmp_dir *t = *state;
    char err[512];
    static float data[1000];
    FILE *f = tmpfile();
    assert_non_null(f);
    dy_progress *pg = dy_progress_new(f, true, "w", DY_PROGRESS_BYTES, NULL, 0, dy_now());
    dy_gguf_writer *w = dy_gguf_writer_new();
    int64_t n = 1000, ne[2] = {256, 4};
    dy_gguf_writer_add_tensor(w, "v", 1, &n, DY_F32, data, sizeof data);
    dy_gguf_writer_add_tensor(w, "m", 2, ne, DY_F32, NULL, dy_gguf_tensor_bytes(DY_F32, 2, ne));
    dy_gguf_writer_set_progress(w, pg);
    assert_true(dy_gguf_writer_begin(w, t->path, err, sizeof err));
    rows_ctx c = {256};
    assert_true(dy_gguf_writer_stream_rows(w, NULL, DY_F32, 256, 4, rows_fill, &c, err,
                                           sizeof err));
    assert_true(dy_gguf_writer_finish(w, err, sizeof err));
    dy_gguf_writer_free(w);
    dy_progress_finish(pg);
    long len = ftell(f);
    char *out = calloc(1, (size_t)len + 1);
    rewind(f);
    assert_int_equal(fread(out, 1, (size_t)len, f), (size_t)len);
    /* 4000 + 4096 bytes of data */
    const char first[] = "\rw    0%  0.0/7.9 KiB  ETA --:--  tensor 1/2\033[K";
    assert_memory_equal(out, first, strlen(first));
    assert_string_equal(out + len - 4, "\r\033[K");
    free(out);
    fclose(f);
}

/* ---------------------------------------------------------------- vocabulary, models */

static void test_copy_tokenizer(void **state)
{
    tmp_dir *t = *state;
    char err[512];
    dy_gguf_file *src = open_ok(tu_path("tests/data/vocab/ggml-vocab-llama-spm.gguf"));
    dy_gguf_writer *w = dy_gguf_writer_new();
    dy_gguf_writer_set_str(w, "general.architecture", "llama");
    assert_true(dy_gguf_writer_copy_tokenizer(w, src));
    assert_true(dy_gguf_writer_write_file(w, t->path, err, sizeof err));
    dy_gguf_writer_free(w);
    dy_gguf_file *g = open_ok(t->path);
    int copied = 0;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const dy_gguf_kv *a = &src->kv[i];
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)a->key.len, a->key.ptr);
        const dy_gguf_kv *b = dy_gguf_find(g, key);
        if (strncmp(key, "tokenizer.", 10) != 0) {
            assert_true(b == NULL || !strcmp(key, "general.architecture"));
            continue;
        }
        copied++;
        assert_non_null(b);
        assert_int_equal(a->type, b->type);
        if (a->type == DY_GGUF_ARRAY) {
            assert_int_equal(a->v.arr.type, b->v.arr.type);
            assert_int_equal(a->v.arr.n, b->v.arr.n);
            for (uint64_t j = 0; a->v.arr.type == DY_GGUF_STRING && j < a->v.arr.n; j++) {
                assert_int_equal(a->v.arr.strings[j].len, b->v.arr.strings[j].len);
                assert_memory_equal(a->v.arr.strings[j].ptr, b->v.arr.strings[j].ptr,
                                    a->v.arr.strings[j].len);
            }
            if (a->v.arr.type != DY_GGUF_STRING)
                assert_memory_equal(a->v.arr.data, b->v.arr.data, a->v.arr.n * 4);
        } else if (a->type == DY_GGUF_STRING) {
            assert_int_equal(a->v.s.len, b->v.s.len);
            assert_memory_equal(a->v.s.ptr, b->v.s.ptr, a->v.s.len);
        } else {
            assert_memory_equal(&a->v, &b->v, sizeof a->v.u);
        }
    }
    assert_int_equal(copied, 10);
    assert_int_equal(g->n_kv, 10 + 2);
    dy_gguf_close(g);
    dy_gguf_close(src);
}

/* A small llama model written with the hparams helper loads with dy_model_load and its
 * matrices are the bytes written. */
static void test_llama_model_loads(void **state)
{
    tmp_dir *t = *state;
    char err[512];
    dy_hparams hp = {.dim = 64, .hidden_dim = 96, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                     .head_dim = 16, .vocab_size = 40, .ctx_len = 32, .n_rot = 16,
                     .rope_base = 500000.0f, .rms_eps = 1e-6f};
    dy_gguf_writer *w = dy_gguf_writer_new();
    assert_true(dy_gguf_writer_set_llama_hparams(w, &hp));
    float *buf = malloc(sizeof(float) * 96 * 64);
    fill_random(buf, 96 * 64, 3);
    char name[64];
    int64_t emb[2] = {64, 40}, vec[1] = {64};
    dy_gguf_writer_add_tensor(w, "token_embd.weight", 2, emb, DY_F32, buf, 40 * 64 * 4);
    for (int l = 0; l < 2; l++) {
        static const struct { const char *n; int64_t c, r; } m[] = {
            {"attn_q", 64, 64}, {"attn_k", 64, 32}, {"attn_v", 64, 32}, {"attn_output", 64, 64},
            {"ffn_gate", 64, 96}, {"ffn_down", 96, 64}, {"ffn_up", 64, 96}};
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        dy_gguf_writer_add_tensor(w, name, 1, vec, DY_F32, buf, 256);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        dy_gguf_writer_add_tensor(w, name, 1, vec, DY_F32, buf, 256);
        for (int i = 0; i < 7; i++) {
            int64_t ne[2] = {m[i].c, m[i].r};
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, m[i].n);
            dy_gguf_writer_add_tensor(w, name, 2, ne, DY_F32, buf, (uint64_t)m[i].c * m[i].r * 4);
        }
    }
    dy_gguf_writer_add_tensor(w, "output_norm.weight", 1, vec, DY_F32, buf, 256);
    if (!dy_gguf_writer_write_file(w, t->path, err, sizeof err))
        fail_msg("%s", err);
    dy_gguf_writer_free(w);

    dy_gguf_file *g = open_ok(t->path);
    assert_int_equal(dy_gguf_find(g, "llama.block_count")->type, DY_GGUF_UINT32);
    assert_int_equal(dy_gguf_find(g, "llama.rope.freq_base")->type, DY_GGUF_FLOAT32);
    assert_int_equal(dy_gguf_find(g, "llama.attention.layer_norm_rms_epsilon")->type,
                     DY_GGUF_FLOAT32);
    assert_null(dy_gguf_find(g, "llama.attention.key_length")); /* 64 / 4 is the default */
    dy_gguf_close(g);
    dy_model *mdl = dy_model_load(t->path, NULL, err, sizeof err);
    if (!mdl)
        fail_msg("%s", err);
    assert_memory_equal(&mdl->hp, &hp, sizeof hp);
    assert_memory_equal(mdl->layers[1].w_down.data, buf, 96 * 64 * 4);
    assert_true(mdl->output.data == mdl->tok_embd.data); /* tied: no output.weight */
    dy_model_free(mdl);
    free(buf);
}

static void test_fallback_types(void **state)
{
    (void)state;
    assert_int_equal(dy_gguf_fallback_type(DY_Q4_K, 512), DY_Q4_K);
    assert_int_equal(dy_gguf_fallback_type(DY_Q4_K, 288), DY_Q8_0);
    assert_int_equal(dy_gguf_fallback_type(DY_Q6_K, 172), DY_F16);
    assert_int_equal(dy_gguf_fallback_type(DY_Q8_0, 64), DY_Q8_0);
    assert_int_equal(dy_gguf_fallback_type(DY_Q4_0, 48), DY_F16);
    assert_int_equal(dy_gguf_fallback_type(DY_F32, 7), DY_F32);
    assert_int_equal(dy_gguf_fallback_type(DY_F16, 7), DY_F16);
    assert_int_equal(dy_gguf_llama_file_type(DY_Q8_0), 7);
    assert_int_equal(dy_gguf_llama_file_type(DY_F32), 0);
}

/* ---------------------------------------------------------------- failures */

/* begin() fails with the first recorded error; nothing is created. */
static void expect_begin_fails(tmp_dir *t, dy_gguf_writer *w, const char *needle)
{
    char err[512] = "";
    assert_false(dy_gguf_writer_begin(w, t->path, err, sizeof err));
    if (!strstr(err, needle))
        fail_msg("error '%s' does not mention '%s'", err, needle);
    dy_gguf_writer_free(w);
    assert_int_equal(dir_entries(t->dir), 0);
}

static void test_bad_tensors(void **state)
{
    tmp_dir *t = *state;
    int64_t ne[2] = {300, 2};
    dy_gguf_writer *w = dy_gguf_writer_new();
    assert_false(dy_gguf_writer_add_tensor(w, "q4k", 2, ne, DY_Q4_K, NULL, 0));
    expect_begin_fails(t, w, "q4k");

    w = dy_gguf_writer_new();
    ne[0] = 256;
    assert_false(dy_gguf_writer_add_tensor(w, "x", 2, ne, DY_F32, NULL, 5));
    expect_begin_fails(t, w, "5 bytes");

    w = dy_gguf_writer_new();
    assert_true(dy_gguf_writer_add_tensor(w, "dup", 1, ne, DY_F32, NULL, 1024));
    assert_false(dy_gguf_writer_add_tensor(w, "dup", 1, ne, DY_F32, NULL, 1024));
    expect_begin_fails(t, w, "duplicate tensor name 'dup'");

    w = dy_gguf_writer_new();
    char longname[80];
    memset(longname, 'n', 70);
    longname[70] = 0;
    assert_false(dy_gguf_writer_add_tensor(w, longname, 1, ne, DY_F32, NULL, 1024));
    expect_begin_fails(t, w, "longer than 63");

    w = dy_gguf_writer_new();
    assert_false(dy_gguf_writer_add_tensor(w, "dims", 5, ne, DY_F32, NULL, 1024));
    expect_begin_fails(t, w, "dims");

    w = dy_gguf_writer_new();
    assert_false(dy_gguf_writer_set_u32(w, "general.alignment", 64));
    expect_begin_fails(t, w, "general.alignment");

    w = dy_gguf_writer_new();
    assert_false(dy_gguf_writer_set_u32(w, "", 1));
    expect_begin_fails(t, w, "empty metadata key");
}

/* Misuse of streaming: too much data, too little data, the wrong tensor. */
static void test_stream_misuse(void **state)
{
    tmp_dir *t = *state;
    char err[512];
    uint8_t junk[64] = {0};
    int64_t ne[1] = {8};
    dy_gguf_writer *w = dy_gguf_writer_new();
    dy_gguf_writer_add_tensor(w, "a", 1, ne, DY_F32, NULL, 32);
    assert_true(dy_gguf_writer_begin(w, t->path, err, sizeof err));
    assert_int_equal(dir_entries(t->dir), 1); /* the temporary file */
    assert_false(dy_gguf_writer_write_data(w, junk, 33, err, sizeof err));
    assert_non_null(strstr(err, "only 32 left"));
    assert_non_null(strstr(err, t->path));
    assert_int_equal(dir_entries(t->dir), 0);
    dy_gguf_writer_free(w);

    w = dy_gguf_writer_new();
    dy_gguf_writer_add_tensor(w, "a", 1, ne, DY_F32, NULL, 32);
    assert_true(dy_gguf_writer_begin(w, t->path, err, sizeof err));
    assert_true(dy_gguf_writer_write_data(w, junk, 16, err, sizeof err));
    assert_false(dy_gguf_writer_finish(w, err, sizeof err));
    assert_non_null(strstr(err, "only 16 of 32 bytes"));
    assert_int_equal(dir_entries(t->dir), 0);
    dy_gguf_writer_free(w);

    /* Freed mid-write: the temporary file goes, an existing target stays as it was. */
    FILE *f = fopen(t->path, "w");
    fputs("old", f);
    fclose(f);
    w = dy_gguf_writer_new();
    dy_gguf_writer_add_tensor(w, "a", 1, ne, DY_F32, NULL, 32);
    assert_true(dy_gguf_writer_begin(w, t->path, err, sizeof err));
    assert_int_equal(dir_entries(t->dir), 2);
    rows_ctx c = {8};
    assert_false(dy_gguf_writer_stream_rows(w, NULL, DY_F16, 8, 1, rows_fill, &c, err, sizeof err));
    assert_non_null(strstr(err, "does not match"));
    dy_gguf_writer_free(w);
    assert_int_equal(dir_entries(t->dir), 1);
    size_t len;
    char *old = tu_read_file(t->path, &len);
    assert_string_equal(old, "old");
    free(old);
}

static void test_unwritable_path(void **state)
{
    tmp_dir *t = *state;
    char err[512], path[256];
    snprintf(path, sizeof path, "%s/no/such/dir/x.gguf", t->dir);
    dy_gguf_writer *w = dy_gguf_writer_new();
    assert_false(dy_gguf_writer_write_file(w, path, err, sizeof err));
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "No such file"));
    dy_gguf_writer_free(w);
}

/* A full disk, simulated: RLIMIT_FSIZE makes write() fail with EFBIG (SIGXFSZ ignored). */
static void test_disk_full(void **state)
{
    tmp_dir *t = *state;
    char err[512] = "";
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 1 << 20;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    size_t n = 4 << 20;
    uint8_t *big = calloc(1, n);
    int64_t ne[1] = {(int64_t)(n / 4)};
    dy_gguf_writer *w = dy_gguf_writer_new();
    dy_gguf_writer_add_tensor(w, "big", 1, ne, DY_F32, big, n);
    bool ok = dy_gguf_writer_write_file(w, t->path, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, oldsig);
    dy_gguf_writer_free(w);
    free(big);
    assert_false(ok);
    if (!strstr(err, t->path) || !strstr(err, "write failed"))
        fail_msg("unexpected error '%s'", err);
    assert_int_equal(dir_entries(t->dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metadata_kinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_every_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tensor_types, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_tokenizer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llama_model_loads, setup, teardown),
        cmocka_unit_test(test_fallback_types),
        cmocka_unit_test_setup_teardown(test_bad_tensors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_misuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
