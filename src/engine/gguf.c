/* gguf.c — the GGUF reader (see gguf.h). The file is mapped read-only and parsed with a
 * bounds-checked cursor: every read first checks that the bytes exist, so a truncated or
 * corrupt file ends in an error message, never an out-of-bounds access. */
#include "engine/gguf.h"
#include "engine/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
/* Limits that no real model reaches; they keep a corrupt count from driving a huge
 * allocation before the size checks catch it. */
#define GGUF_MAX_KV 1000000u
#define GGUF_MAX_TENSORS 1000000u
#define GGUF_MAX_ARRAY (1u << 28)

typedef struct {
    const uint8_t *buf;
    size_t size, pos;
    const char *name;
    char *err;
    size_t errlen;
    bool failed;
} cursor;

static bool fail(cursor *c, const char *fmt, ...)
{
    if (c->failed)
        return false;
    c->failed = true;
    int n = snprintf(c->err, c->errlen, "%s: offset %zu: ", c->name, c->pos);
    if (n >= 0 && (size_t)n < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool need(cursor *c, uint64_t n, const char *what)
{
    if (c->failed)
        return false;
    if (n > c->size - c->pos)
        return fail(c, "truncated file: %s needs %llu bytes, %zu left", what,
                    (unsigned long long)n, c->size - c->pos);
    return true;
}

static bool read_bytes(cursor *c, void *dst, size_t n, const char *what)
{
    if (!need(c, n, what))
        return false;
    memcpy(dst, c->buf + c->pos, n);
    c->pos += n;
    return true;
}

static bool read_u32(cursor *c, uint32_t *v, const char *what) { return read_bytes(c, v, 4, what); }
static bool read_u64(cursor *c, uint64_t *v, const char *what) { return read_bytes(c, v, 8, what); }

static bool read_str(cursor *c, dy_gguf_str *s, const char *what)
{
    uint64_t len;
    if (!read_u64(c, &len, what) || !need(c, len, what))
        return false;
    s->ptr = (const char *)c->buf + c->pos;
    s->len = len;
    c->pos += len;
    return true;
}

static size_t vtype_size(dy_gguf_vtype t)
{
    switch (t) {
    case DY_GGUF_UINT8: case DY_GGUF_INT8: case DY_GGUF_BOOL: return 1;
    case DY_GGUF_UINT16: case DY_GGUF_INT16: return 2;
    case DY_GGUF_UINT32: case DY_GGUF_INT32: case DY_GGUF_FLOAT32: return 4;
    case DY_GGUF_UINT64: case DY_GGUF_INT64: case DY_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Reads one scalar of type t at the cursor into kv->v. */
static bool read_scalar(cursor *c, dy_gguf_vtype t, dy_gguf_kv *kv)
{
    uint8_t raw[8] = {0};
    size_t n = vtype_size(t);
    if (!read_bytes(c, raw, n, "metadata value"))
        return false;
    switch (t) {
    case DY_GGUF_UINT8: kv->v.u = raw[0]; break;
    case DY_GGUF_INT8: kv->v.i = (int8_t)raw[0]; break;
    case DY_GGUF_UINT16: { uint16_t x; memcpy(&x, raw, 2); kv->v.u = x; break; }
    case DY_GGUF_INT16: { int16_t x; memcpy(&x, raw, 2); kv->v.i = x; break; }
    case DY_GGUF_UINT32: { uint32_t x; memcpy(&x, raw, 4); kv->v.u = x; break; }
    case DY_GGUF_INT32: { int32_t x; memcpy(&x, raw, 4); kv->v.i = x; break; }
    case DY_GGUF_UINT64: { uint64_t x; memcpy(&x, raw, 8); kv->v.u = x; break; }
    case DY_GGUF_INT64: { int64_t x; memcpy(&x, raw, 8); kv->v.i = x; break; }
    case DY_GGUF_FLOAT32: { float x; memcpy(&x, raw, 4); kv->v.f = x; break; }
    case DY_GGUF_FLOAT64: { double x; memcpy(&x, raw, 8); kv->v.f = x; break; }
    case DY_GGUF_BOOL:
        if (raw[0] > 1)
            return fail(c, "bool value %u is neither 0 nor 1", raw[0]);
        kv->v.b = raw[0];
        break;
    default: return fail(c, "internal: not a scalar type %d", (int)t);
    }
    return true;
}

static bool read_array(cursor *c, dy_gguf_kv *kv)
{
    uint32_t et;
    uint64_t n;
    if (!read_u32(c, &et, "array element type") || !read_u64(c, &n, "array length"))
        return false;
    if (et > DY_GGUF_FLOAT64 || et == DY_GGUF_ARRAY)
        return fail(c, "array of unsupported element type %u", et);
    if (n > GGUF_MAX_ARRAY)
        return fail(c, "array length %llu is too large", (unsigned long long)n);
    kv->v.arr.type = (dy_gguf_vtype)et;
    kv->v.arr.n = n;
    kv->v.arr.data = c->buf + c->pos;
    if (et != DY_GGUF_STRING) {
        size_t es = vtype_size((dy_gguf_vtype)et);
        if (!need(c, n * es, "array data"))
            return false;
        if (et == DY_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->buf[c->pos + i] > 1)
                    return fail(c, "bool array element %llu is neither 0 nor 1",
                                (unsigned long long)i);
        c->pos += n * es;
        return true;
    }
    /* Each string is at least its 8-byte length, which bounds n before we allocate. */
    if (!need(c, n * 8, "string array"))
        return false;
    dy_gguf_str *s = calloc(n ? n : 1, sizeof *s);
    if (!s)
        return fail(c, "out of memory for a string array of %llu", (unsigned long long)n);
    kv->v.arr.strings = s;
    for (uint64_t i = 0; i < n; i++)
        if (!read_str(c, &s[i], "string array element"))
            return false;
    return true;
}

static bool read_kv(cursor *c, dy_gguf_kv *kv)
{
    uint32_t t;
    if (!read_str(c, &kv->key, "metadata key") || !read_u32(c, &t, "metadata value type"))
        return false;
    if (kv->key.len == 0)
        return fail(c, "empty metadata key");
    if (t > DY_GGUF_FLOAT64)
        return fail(c, "metadata '%.*s' has unknown value type %u", (int)kv->key.len,
                    kv->key.ptr, t);
    kv->type = (dy_gguf_vtype)t;
    if (t == DY_GGUF_STRING)
        return read_str(c, &kv->v.s, "metadata string");
    if (t == DY_GGUF_ARRAY)
        return read_array(c, kv);
    return read_scalar(c, kv->type, kv);
}

/* Computes the tensor's byte size, rejecting shapes that overflow or do not fit the type. */
static bool tensor_size(cursor *c, dy_gguf_tensor *t)
{
    int64_t nel = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] <= 0 || t->ne[d] > (INT64_C(1) << 40))
            return fail(c, "tensor '%.*s' dimension %u is %lld", (int)t->name.len,
                        t->name.ptr, d, (long long)t->ne[d]);
        if (nel > INT64_MAX / t->ne[d] || nel * t->ne[d] > (INT64_C(1) << 42))
            return fail(c, "tensor '%.*s' has too many elements", (int)t->name.len, t->name.ptr);
        nel *= t->ne[d];
    }
    if (!dy_type_is_weight(t->type))
        return fail(c, "tensor '%.*s' has unsupported type %u (%s)", (int)t->name.len,
                    t->name.ptr, t->type, dy_type_name(t->type));
    if (!dy_type_row_ok((dy_type)t->type, t->ne[0]))
        return fail(c, "tensor '%.*s' row length %lld is not a multiple of the %s block size",
                    (int)t->name.len, t->name.ptr, (long long)t->ne[0], dy_type_name(t->type));
    t->nbytes = dy_type_row_bytes((dy_type)t->type, t->ne[0]) * (uint64_t)(nel / t->ne[0]);
    return true;
}

static bool read_tensor_info(cursor *c, dy_gguf_tensor *t)
{
    if (!read_str(c, &t->name, "tensor name") || !read_u32(c, &t->n_dims, "tensor n_dims"))
        return false;
    if (t->n_dims < 1 || t->n_dims > DY_GGUF_MAX_DIMS)
        return fail(c, "tensor '%.*s' has %u dimensions", (int)t->name.len, t->name.ptr,
                    t->n_dims);
    for (uint32_t d = 0; d < DY_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if (!read_u64(c, &ne, "tensor dimension"))
            return false;
        t->ne[d] = ne > (uint64_t)INT64_MAX ? -1 : (int64_t)ne;
    }
    if (!read_u32(c, &t->type, "tensor type") || !read_u64(c, &t->offset, "tensor offset"))
        return false;
    return tensor_size(c, t);
}

static void free_parsed(dy_gguf_file *g)
{
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++)
            if (g->kv[i].type == DY_GGUF_ARRAY)
                free((void *)g->kv[i].v.arr.strings);
    free(g->kv);
    free(g->tensors);
    free(g->path);
}

static bool read_header(cursor *c, dy_gguf_file *g)
{
    uint32_t magic;
    if (!read_u32(c, &magic, "magic"))
        return false;
    if (magic != GGUF_MAGIC)
        return c->pos = 0, fail(c, "not a GGUF file (bad magic)");
    if (!read_u32(c, &g->version, "version"))
        return false;
    if (g->version != 2 && g->version != 3)
        return fail(c, "unsupported GGUF version %u (dyad reads 2 and 3)", g->version);
    if (!read_u64(c, &g->n_tensors, "tensor count") || !read_u64(c, &g->n_kv, "metadata count"))
        return false;
    if (g->n_tensors > GGUF_MAX_TENSORS || g->n_kv > GGUF_MAX_KV)
        return fail(c, "implausible counts: %llu tensors, %llu metadata entries",
                    (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv);
    return true;
}

static bool check_alignment(cursor *c, dy_gguf_file *g)
{
    g->alignment = 32;
    const dy_gguf_kv *a = dy_gguf_find(g, "general.alignment");
    if (!a)
        return true;
    if (a->type != DY_GGUF_UINT32 || a->v.u == 0 || (a->v.u & (a->v.u - 1)) != 0)
        return fail(c, "general.alignment must be a power-of-two uint32");
    g->alignment = a->v.u;
    return true;
}

/* Places each tensor inside the data section and checks none overruns the file. */
static bool place_tensors(cursor *c, dy_gguf_file *g)
{
    uint64_t data_off = (c->pos + g->alignment - 1) / g->alignment * g->alignment;
    if (data_off > c->size && g->n_tensors > 0)
        return fail(c, "data section starts past the end of the file");
    g->data_offset = data_off;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        dy_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return fail(c, "tensor '%.*s' offset %llu is not aligned to %llu", (int)t->name.len,
                        t->name.ptr, (unsigned long long)t->offset,
                        (unsigned long long)g->alignment);
        if (t->offset > c->size - data_off || t->nbytes > c->size - data_off - t->offset)
            return fail(c, "tensor '%.*s' (%llu bytes at data offset %llu) runs past the end of "
                        "the file (%zu bytes)", (int)t->name.len, t->name.ptr,
                        (unsigned long long)t->nbytes, (unsigned long long)t->offset, c->size);
        t->data = c->buf + data_off + t->offset;
        for (uint64_t j = 0; j < i; j++)
            if (t->name.len == g->tensors[j].name.len &&
                memcmp(t->name.ptr, g->tensors[j].name.ptr, t->name.len) == 0)
                return fail(c, "duplicate tensor name '%.*s'", (int)t->name.len, t->name.ptr);
    }
    return true;
}

dy_gguf_file *dy_gguf_parse(const uint8_t *buf, size_t size, const char *name, char *err,
                            size_t errlen)
{
    dy_gguf_file *g = calloc(1, sizeof *g);
    cursor c = {.buf = buf, .size = size, .name = name, .err = err, .errlen = errlen};
    if (!g) {
        snprintf(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    g->map = buf;
    g->size = size;
    g->path = strdup(name);
    if (!g->path || !read_header(&c, g))
        goto bad;
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) {
        fail(&c, "out of memory");
        goto bad;
    }
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!read_kv(&c, &g->kv[i])) {
            g->n_kv = i + 1; /* free what this entry allocated */
            goto bad;
        }
    if (!check_alignment(&c, g))
        goto bad;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!read_tensor_info(&c, &g->tensors[i]))
            goto bad;
    if (!place_tensors(&c, g))
        goto bad;
    return g;
bad:
    if (!c.failed)
        snprintf(err, errlen, "%s: out of memory", name);
    free_parsed(g);
    free(g);
    return NULL;
}

dy_gguf_file *dy_gguf_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size < 8) {
        snprintf(err, errlen, "%s: offset 0: file too small (%lld bytes) to be GGUF", path,
                 (long long)st.st_size);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
        return NULL;
    }
    dy_gguf_file *g = dy_gguf_parse(map, (size_t)st.st_size, path, err, errlen);
    if (!g)
        munmap(map, (size_t)st.st_size);
    else
        g->mapped = true;
    return g;
}

void dy_gguf_close(dy_gguf_file *g)
{
    if (!g)
        return;
    if (g->mapped)
        munmap((void *)g->map, g->size);
    free_parsed(g);
    free(g);
}

const dy_gguf_kv *dy_gguf_find(const dy_gguf_file *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (dy_gguf_str_eq(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

const dy_gguf_tensor *dy_gguf_find_tensor(const dy_gguf_file *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (dy_gguf_str_eq(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}

bool dy_gguf_str_eq(dy_gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

static bool is_unsigned(dy_gguf_vtype t)
{
    return t == DY_GGUF_UINT8 || t == DY_GGUF_UINT16 || t == DY_GGUF_UINT32 || t == DY_GGUF_UINT64;
}

static bool is_signed(dy_gguf_vtype t)
{
    return t == DY_GGUF_INT8 || t == DY_GGUF_INT16 || t == DY_GGUF_INT32 || t == DY_GGUF_INT64;
}

bool dy_gguf_get_u64(const dy_gguf_file *g, const char *key, uint64_t *out)
{
    const dy_gguf_kv *kv = dy_gguf_find(g, key);
    if (!kv)
        return false;
    if (is_unsigned(kv->type)) {
        *out = kv->v.u;
        return true;
    }
    if (is_signed(kv->type) && kv->v.i >= 0) {
        *out = (uint64_t)kv->v.i;
        return true;
    }
    return false;
}

bool dy_gguf_get_i64(const dy_gguf_file *g, const char *key, int64_t *out)
{
    const dy_gguf_kv *kv = dy_gguf_find(g, key);
    if (!kv)
        return false;
    if (is_signed(kv->type)) {
        *out = kv->v.i;
        return true;
    }
    if (is_unsigned(kv->type) && kv->v.u <= (uint64_t)INT64_MAX) {
        *out = (int64_t)kv->v.u;
        return true;
    }
    return false;
}

bool dy_gguf_get_f64(const dy_gguf_file *g, const char *key, double *out)
{
    const dy_gguf_kv *kv = dy_gguf_find(g, key);
    if (!kv || (kv->type != DY_GGUF_FLOAT32 && kv->type != DY_GGUF_FLOAT64))
        return false;
    *out = kv->v.f;
    return true;
}

bool dy_gguf_get_bool(const dy_gguf_file *g, const char *key, bool *out)
{
    const dy_gguf_kv *kv = dy_gguf_find(g, key);
    if (!kv || kv->type != DY_GGUF_BOOL)
        return false;
    *out = kv->v.b;
    return true;
}

char *dy_gguf_get_str(const dy_gguf_file *g, const char *key)
{
    const dy_gguf_kv *kv = dy_gguf_find(g, key);
    if (!kv || kv->type != DY_GGUF_STRING)
        return NULL;
    return strndup(kv->v.s.ptr, kv->v.s.len);
}

const dy_gguf_kv *dy_gguf_get_arr(const dy_gguf_file *g, const char *key, dy_gguf_vtype elem_type)
{
    const dy_gguf_kv *kv = dy_gguf_find(g, key);
    if (!kv || kv->type != DY_GGUF_ARRAY || kv->v.arr.type != elem_type)
        return NULL;
    return kv;
}
