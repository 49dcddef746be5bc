/* gguf_write.c — the GGUF v3 writer (see gguf_write.h). Metadata values are serialized as
 * soon as they are set (type tag + payload, exactly as they go in the file), so writing the
 * header is a plain copy and a value copied from a dy_gguf_file does not depend on that file
 * staying open. Tensor offsets are laid out at begin(), sequentially in add order with
 * every tensor padded to the alignment: llama.cpp's reader insists on exactly that layout. */
#include "engine/gguf_write.h"
#include "util/buf.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_VERSION 3u
#define IO_BUF_BYTES (1u << 20)

typedef struct {
    char *key;
    dy_buf val; /* type tag (u32) followed by the value */
} wkv;

typedef struct {
    char *name;
    uint32_t n_dims;
    int64_t ne[DY_GGUF_MAX_DIMS];
    dy_type type;
    const void *data; /* NULL: streamed */
    uint64_t nbytes, offset;
} wtensor;

struct dy_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    bool failed;   /* first error, sticky; the message is in err */
    char err[512];
    /* While writing: */
    FILE *f;
    char *iobuf;
    char *path, *tmp;
    size_t cur;        /* the tensor being written */
    uint64_t cur_done; /* its bytes written so far */
    dy_progress *progress; /* the caller's; NULL: none */
    uint64_t data_bytes;   /* the data section's size, padding included */
};

static bool wfail(dy_gguf_writer *w, const char *fmt, ...)
{
    if (w->failed)
        return false;
    w->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return false;
}

/* Copies the sticky error out for the functions that take err/errlen. */
static bool report(const dy_gguf_writer *w, char *err, size_t errlen)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", w->err);
    return false;
}

/* ---------------------------------------------------------------- byte buffers */

/* GGUF is little-endian; so is every machine dyad targets (x86-64, aarch64), and the
 * reader memcpy's the same way, so native stores are correct. */
static void put_u32(dy_buf *b, uint32_t v) { dy_buf_append(b, &v, 4); }
static void put_u64(dy_buf *b, uint64_t v) { dy_buf_append(b, &v, 8); }

static void put_str(dy_buf *b, const char *s, uint64_t len)
{
    put_u64(b, len);
    dy_buf_append(b, s, len);
}

/* ---------------------------------------------------------------- metadata */

dy_gguf_writer *dy_gguf_writer_new(void)
{
    return calloc(1, sizeof(dy_gguf_writer));
}

static wkv *find_kv(const dy_gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0)
            return &w->kv[i];
    return NULL;
}

bool dy_gguf_writer_has_key(const dy_gguf_writer *w, const char *key)
{
    return find_kv(w, key) != NULL;
}

/* Stores a serialized value under key, taking ownership of val's bytes. */
static bool set_value(dy_gguf_writer *w, const char *key, dy_buf val)
{
    if (val.oom) {
        dy_buf_free(&val);
        return wfail(w, "out of memory for metadata '%s'", key);
    }
    wkv *kv = find_kv(w, key);
    if (kv) {
        dy_buf_free(&kv->val);
        kv->val = val;
        return true;
    }
    if (w->n_kv == w->cap_kv &&
        !dy_array_reserve((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv)) {
        dy_buf_free(&val);
        return wfail(w, "out of memory for metadata '%s'", key);
    }
    char *k = strdup(key);
    if (!k) {
        dy_buf_free(&val);
        return wfail(w, "out of memory for metadata '%s'", key);
    }
    w->kv[w->n_kv++] = (wkv){k, val};
    return true;
}

/* Checks the key and starts its value buffer with the type tag. */
static bool begin_value(dy_gguf_writer *w, const char *key, dy_gguf_vtype type, dy_buf *val)
{
    *val = (dy_buf){0};
    if (!key || !*key)
        return wfail(w, "empty metadata key");
    if (strcmp(key, "general.alignment") == 0)
        return wfail(w, "general.alignment is set by the writer (always %d)",
                     DY_GGUF_WRITE_ALIGNMENT);
    put_u32(val, (uint32_t)type);
    return true;
}

static bool set_scalar(dy_gguf_writer *w, const char *key, dy_gguf_vtype type, const void *v,
                       size_t size)
{
    dy_buf val;
    if (!begin_value(w, key, type, &val))
        return false;
    dy_buf_append(&val, v, size);
    return set_value(w, key, val);
}

bool dy_gguf_writer_set_u32(dy_gguf_writer *w, const char *key, uint32_t v)
{
    return set_scalar(w, key, DY_GGUF_UINT32, &v, 4);
}

bool dy_gguf_writer_set_i32(dy_gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, DY_GGUF_INT32, &v, 4);
}

bool dy_gguf_writer_set_f32(dy_gguf_writer *w, const char *key, float v)
{
    return set_scalar(w, key, DY_GGUF_FLOAT32, &v, 4);
}

bool dy_gguf_writer_set_bool(dy_gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, DY_GGUF_BOOL, &b, 1);
}

bool dy_gguf_writer_set_str(dy_gguf_writer *w, const char *key, const char *v)
{
    dy_buf val;
    if (!begin_value(w, key, DY_GGUF_STRING, &val))
        return false;
    put_str(&val, v, strlen(v));
    return set_value(w, key, val);
}

/* An array of fixed-size elements: element type, count, raw little-endian elements. */
static bool set_arr_raw(dy_gguf_writer *w, const char *key, dy_gguf_vtype et, const void *v, size_t n,
                        size_t es)
{
    dy_buf val;
    if (!begin_value(w, key, DY_GGUF_ARRAY, &val))
        return false;
    put_u32(&val, (uint32_t)et);
    put_u64(&val, n);
    if (n)
        dy_buf_append(&val, v, n * es);
    return set_value(w, key, val);
}

bool dy_gguf_writer_set_arr_f32(dy_gguf_writer *w, const char *key, const float *v, size_t n)
{
    return set_arr_raw(w, key, DY_GGUF_FLOAT32, v, n, 4);
}

bool dy_gguf_writer_set_arr_i32(dy_gguf_writer *w, const char *key, const int32_t *v, size_t n)
{
    return set_arr_raw(w, key, DY_GGUF_INT32, v, n, 4);
}

bool dy_gguf_writer_set_arr_strn(dy_gguf_writer *w, const char *key, const dy_gguf_str *v, size_t n)
{
    dy_buf val;
    if (!begin_value(w, key, DY_GGUF_ARRAY, &val))
        return false;
    put_u32(&val, DY_GGUF_STRING);
    put_u64(&val, n);
    for (size_t i = 0; i < n; i++)
        put_str(&val, v[i].ptr, v[i].len);
    return set_value(w, key, val);
}

bool dy_gguf_writer_set_arr_str(dy_gguf_writer *w, const char *key, const char *const *v, size_t n)
{
    dy_buf val;
    if (!begin_value(w, key, DY_GGUF_ARRAY, &val))
        return false;
    put_u32(&val, DY_GGUF_STRING);
    put_u64(&val, n);
    for (size_t i = 0; i < n; i++)
        put_str(&val, v[i], strlen(v[i]));
    return set_value(w, key, val);
}

/* Bytes of one scalar of type t (0 for strings and arrays). */
static size_t scalar_size(dy_gguf_vtype t)
{
    switch (t) {
    case DY_GGUF_UINT8: case DY_GGUF_INT8: case DY_GGUF_BOOL: return 1;
    case DY_GGUF_UINT16: case DY_GGUF_INT16: return 2;
    case DY_GGUF_UINT32: case DY_GGUF_INT32: case DY_GGUF_FLOAT32: return 4;
    case DY_GGUF_UINT64: case DY_GGUF_INT64: case DY_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Narrows a scalar the reader widened back to its stored width. */
static void put_scalar(dy_buf *b, const dy_gguf_kv *kv)
{
    switch (kv->type) {
    case DY_GGUF_UINT8: { uint8_t x = (uint8_t)kv->v.u; dy_buf_append(b, &x, 1); break; }
    case DY_GGUF_INT8: { int8_t x = (int8_t)kv->v.i; dy_buf_append(b, &x, 1); break; }
    case DY_GGUF_UINT16: { uint16_t x = (uint16_t)kv->v.u; dy_buf_append(b, &x, 2); break; }
    case DY_GGUF_INT16: { int16_t x = (int16_t)kv->v.i; dy_buf_append(b, &x, 2); break; }
    case DY_GGUF_UINT32: put_u32(b, (uint32_t)kv->v.u); break;
    case DY_GGUF_INT32: { int32_t x = (int32_t)kv->v.i; dy_buf_append(b, &x, 4); break; }
    case DY_GGUF_UINT64: put_u64(b, kv->v.u); break;
    case DY_GGUF_INT64: dy_buf_append(b, &kv->v.i, 8); break;
    case DY_GGUF_FLOAT32: { float x = (float)kv->v.f; dy_buf_append(b, &x, 4); break; }
    case DY_GGUF_FLOAT64: dy_buf_append(b, &kv->v.f, 8); break;
    case DY_GGUF_BOOL: { uint8_t x = kv->v.b ? 1 : 0; dy_buf_append(b, &x, 1); break; }
    default: break;
    }
}

bool dy_gguf_writer_set_kv(dy_gguf_writer *w, const dy_gguf_kv *kv)
{
    char *key = strndup(kv->key.ptr, kv->key.len);
    if (!key)
        return wfail(w, "out of memory");
    if (strcmp(key, "general.alignment") == 0) {
        free(key);
        return true; /* the writer's own alignment applies */
    }
    dy_buf val;
    bool ok = begin_value(w, key, kv->type, &val);
    if (ok && kv->type == DY_GGUF_STRING) {
        put_str(&val, kv->v.s.ptr, kv->v.s.len);
    } else if (ok && kv->type == DY_GGUF_ARRAY) {
        put_u32(&val, (uint32_t)kv->v.arr.type);
        put_u64(&val, kv->v.arr.n);
        if (kv->v.arr.type == DY_GGUF_STRING)
            for (uint64_t i = 0; i < kv->v.arr.n; i++)
                put_str(&val, kv->v.arr.strings[i].ptr, kv->v.arr.strings[i].len);
        else if (kv->v.arr.n)
            dy_buf_append(&val, kv->v.arr.data, kv->v.arr.n * scalar_size(kv->v.arr.type));
    } else if (ok) {
        put_scalar(&val, kv);
    }
    ok = ok && set_value(w, key, val);
    free(key);
    return ok;
}

bool dy_gguf_writer_copy_tokenizer(dy_gguf_writer *w, const dy_gguf_file *src)
{
    static const char prefix[] = "tokenizer.";
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const dy_gguf_kv *kv = &src->kv[i];
        if (kv->key.len >= sizeof prefix - 1 &&
            memcmp(kv->key.ptr, prefix, sizeof prefix - 1) == 0 && !dy_gguf_writer_set_kv(w, kv))
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------- tensors */

uint64_t dy_gguf_tensor_bytes(dy_type type, uint32_t n_dims, const int64_t *ne)
{
    if (n_dims < 1 || n_dims > DY_GGUF_MAX_DIMS || !dy_type_is_weight(type) ||
        ne[0] <= 0 || !dy_type_row_ok(type, ne[0]))
        return 0;
    uint64_t rows = 1;
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] <= 0 || rows > (UINT64_C(1) << 40) / (uint64_t)ne[d])
            return 0;
        rows *= (uint64_t)ne[d];
    }
    return rows * dy_type_row_bytes(type, ne[0]);
}

static bool tensor_exists(const dy_gguf_writer *w, const char *name)
{
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return true;
    return false;
}

bool dy_gguf_writer_add_tensor(dy_gguf_writer *w, const char *name, uint32_t n_dims,
                            const int64_t *ne, dy_type type, const void *data, uint64_t nbytes)
{
    if (w->f)
        return wfail(w, "tensor '%s' added after writing began", name);
    if (!name || !*name || strlen(name) >= DY_GGUF_WRITE_MAX_NAME)
        return wfail(w, "tensor name '%s' is empty or longer than %d bytes", name ? name : "",
                     DY_GGUF_WRITE_MAX_NAME - 1);
    if (tensor_exists(w, name))
        return wfail(w, "duplicate tensor name '%s'", name);
    uint64_t size = dy_gguf_tensor_bytes(type, n_dims, ne);
    if (size == 0)
        return wfail(w, "tensor '%s': %u dims of type %s do not make a valid tensor (row "
                     "length %lld)", name, n_dims, dy_type_name(type), (long long)ne[0]);
    if (size != nbytes)
        return wfail(w, "tensor '%s': %llu bytes given, its type and shape need %llu", name,
                     (unsigned long long)nbytes, (unsigned long long)size);
    if (w->n_t == w->cap_t &&
        !dy_array_reserve((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t))
        return wfail(w, "out of memory for tensor '%s'", name);
    wtensor *t = &w->t[w->n_t];
    *t = (wtensor){.name = strdup(name), .n_dims = n_dims, .type = type, .data = data,
                   .nbytes = size};
    if (!t->name)
        return wfail(w, "out of memory for tensor '%s'", name);
    for (uint32_t d = 0; d < DY_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    w->n_t++;
    return true;
}

/* ---------------------------------------------------------------- the file */

static uint64_t pad_to(uint64_t n)
{
    return (n + DY_GGUF_WRITE_ALIGNMENT - 1) / DY_GGUF_WRITE_ALIGNMENT * DY_GGUF_WRITE_ALIGNMENT;
}

static bool out(dy_gguf_writer *w, const void *p, size_t n)
{
    if (w->failed)
        return false;
    errno = 0;
    if (n && fwrite(p, 1, n, w->f) != n)
        return wfail(w, "%s: write failed: %s", w->path, strerror(errno ? errno : EIO));
    return true;
}

static bool out_zeros(dy_gguf_writer *w, size_t n)
{
    static const uint8_t zeros[DY_GGUF_WRITE_ALIGNMENT];
    return out(w, zeros, n);
}

/* Drops the temporary file and the write state; the target is untouched. */
static void abandon(dy_gguf_writer *w)
{
    if (w->f)
        fclose(w->f);
    if (w->tmp)
        unlink(w->tmp);
    free(w->iobuf);
    free(w->tmp);
    free(w->path);
    w->f = NULL;
    w->iobuf = w->tmp = w->path = NULL;
}

/* Creates "<path>.<pid>.<n>.tmp" next to the target (same file system, so rename is atomic)
 * with mode 0666 less the umask, like any file the user creates. */
static bool open_tmp(dy_gguf_writer *w, const char *path)
{
    size_t len = strlen(path) + 64;
    char *tmp = malloc(len);
    w->path = strdup(path);
    if (!w->path || !tmp) {
        free(tmp);
        return wfail(w, "%s: out of memory", path);
    }
    int fd = -1;
    for (int i = 0; fd < 0 && i < 100; i++) {
        snprintf(tmp, len, "%s.%ld.%d.tmp", path, (long)getpid(), i);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        free(tmp); /* nothing of ours to remove */
        return wfail(w, "%s: cannot create: %s", path, strerror(e));
    }
    w->tmp = tmp;
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        close(fd);
        return wfail(w, "%s: cannot open: %s", path, strerror(errno));
    }
    /* Large writes straight from the caller's buffer bypass stdio's; the buffer helps the
     * many small header writes. */
    w->iobuf = malloc(IO_BUF_BYTES);
    if (w->iobuf)
        setvbuf(w->f, w->iobuf, _IOFBF, IO_BUF_BYTES);
    return true;
}

static void put_tensor_info(dy_buf *b, const wtensor *t)
{
    put_str(b, t->name, strlen(t->name));
    put_u32(b, t->n_dims);
    for (uint32_t d = 0; d < t->n_dims; d++)
        put_u64(b, (uint64_t)t->ne[d]);
    put_u32(b, (uint32_t)t->type);
    put_u64(b, t->offset);
}

/* Header, metadata (general.alignment last) and tensor infos, padded to the alignment. */
static bool write_header(dy_gguf_writer *w)
{
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += pad_to(w->t[i].nbytes);
    }
    w->data_bytes = off;
    dy_progress_set_total(w->progress, (double)off);
    dy_buf b = {0};
    put_u32(&b, GGUF_MAGIC);
    put_u32(&b, GGUF_VERSION);
    put_u64(&b, w->n_t);
    put_u64(&b, w->n_kv + 1);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&b, w->kv[i].key, strlen(w->kv[i].key));
        dy_buf_append(&b, w->kv[i].val.data, w->kv[i].val.len);
    }
    put_str(&b, "general.alignment", strlen("general.alignment"));
    put_u32(&b, DY_GGUF_UINT32);
    put_u32(&b, DY_GGUF_WRITE_ALIGNMENT);
    for (size_t i = 0; i < w->n_t; i++)
        put_tensor_info(&b, &w->t[i]);
    bool ok = !b.oom ? out(w, b.data, b.len) && out_zeros(w, pad_to(b.len) - b.len)
                     : wfail(w, "%s: out of memory for the header", w->path);
    dy_buf_free(&b);
    return ok;
}

void dy_gguf_writer_set_progress(dy_gguf_writer *w, dy_progress *p)
{
    w->progress = p;
}

/* Where the data section's write is, on the caller's progress line. */
static void show_progress(dy_gguf_writer *w)
{
    double now = dy_now();
    if (!dy_progress_wants(w->progress, now))
        return;
    const uint64_t done = w->cur < w->n_t ? w->t[w->cur].offset + w->cur_done : w->data_bytes;
    char note[48];
    snprintf(note, sizeof note, "tensor %zu/%zu", w->cur < w->n_t ? w->cur + 1 : w->n_t, w->n_t);
    dy_progress_update(w->progress, (double)done, note, now);
}

/* Finishes the current tensor (its padding) and writes every following tensor that
 * carries its own data, stopping at the next one to be streamed. */
static bool advance(dy_gguf_writer *w)
{
    show_progress(w);
    while (w->cur < w->n_t) {
        wtensor *t = &w->t[w->cur];
        if (w->cur_done == t->nbytes) {
            if (!out_zeros(w, pad_to(t->nbytes) - t->nbytes))
                return false;
            w->cur++;
            w->cur_done = 0;
            continue;
        }
        if (!t->data || w->cur_done != 0)
            return true;
        if (!out(w, t->data, t->nbytes))
            return false;
        w->cur_done = t->nbytes;
        show_progress(w);
    }
    return true;
}

bool dy_gguf_writer_begin(dy_gguf_writer *w, const char *path, char *err, size_t errlen)
{
    if (w->f)
        wfail(w, "%s: already writing %s", path, w->path);
    if (w->failed)
        return report(w, err, errlen);
    w->cur = 0;
    w->cur_done = 0;
    if (!open_tmp(w, path) || !write_header(w) || !advance(w)) {
        abandon(w);
        return report(w, err, errlen);
    }
    return true;
}

long dy_gguf_writer_current(const dy_gguf_writer *w)
{
    return w->f && w->cur < w->n_t ? (long)w->cur : -1;
}

bool dy_gguf_writer_write_data(dy_gguf_writer *w, const void *p, size_t n, char *err, size_t errlen)
{
    if (!w->f)
        wfail(w, "no GGUF write in progress");
    else if (w->cur >= w->n_t)
        wfail(w, "%s: %zu bytes of data past the last tensor", w->path, n);
    else if (n > w->t[w->cur].nbytes - w->cur_done)
        wfail(w, "%s: tensor '%s': %zu bytes of data given, only %llu left to write", w->path,
              w->t[w->cur].name, n, (unsigned long long)(w->t[w->cur].nbytes - w->cur_done));
    if (w->failed || !out(w, p, n)) {
        abandon(w);
        return report(w, err, errlen);
    }
    w->cur_done += n;
    if (!advance(w)) {
        abandon(w);
        return report(w, err, errlen);
    }
    return true;
}

/* Flush, sync and close: write errors such as a full disk may surface only here. */
static bool close_file(dy_gguf_writer *w)
{
    FILE *f = w->f;
    w->f = NULL;
    int e = 0;
    errno = 0;
    if (fflush(f) != 0 || ferror(f))
        e = errno ? errno : EIO;
    else if (fsync(fileno(f)) != 0)
        e = errno;
    if (fclose(f) != 0 && !e)
        e = errno ? errno : EIO;
    return e ? wfail(w, "%s: write failed: %s", w->path, strerror(e)) : true;
}

bool dy_gguf_writer_finish(dy_gguf_writer *w, char *err, size_t errlen)
{
    if (!w->f)
        wfail(w, "no GGUF write in progress");
    else if (w->cur < w->n_t)
        wfail(w, "%s: tensor '%s': only %llu of %llu bytes written", w->path,
              w->t[w->cur].name, (unsigned long long)w->cur_done,
              (unsigned long long)w->t[w->cur].nbytes);
    if (w->failed || !close_file(w)) {
        abandon(w);
        return report(w, err, errlen);
    }
    if (rename(w->tmp, w->path) != 0) {
        wfail(w, "%s: cannot rename %s into place: %s", w->path, w->tmp, strerror(errno));
        abandon(w);
        return report(w, err, errlen);
    }
    free(w->tmp);
    w->tmp = NULL; /* renamed: nothing to remove */
    abandon(w);
    return true;
}

bool dy_gguf_writer_write_file(dy_gguf_writer *w, const char *path, char *err, size_t errlen)
{
    return dy_gguf_writer_begin(w, path, err, errlen) && dy_gguf_writer_finish(w, err, errlen);
}

/* ---------------------------------------------------------------- streamed rows */

typedef struct {
    dy_gguf_row_fn fill;
    void *ctx;
    dy_type type;
    int64_t cols, row0, nrows;
    size_t row_bytes;
    float *scratch; /* one row of floats per thread */
    uint8_t *dst;   /* nrows quantized rows */
} stream_job;

static void stream_work(void *p, int ith, int nth)
{
    stream_job *j = p;
    int64_t r0 = j->nrows * ith / nth, r1 = j->nrows * (ith + 1) / nth;
    float *row = j->scratch + (size_t)ith * (size_t)j->cols;
    for (int64_t r = r0; r < r1; r++) {
        uint8_t *out = j->dst + (size_t)r * j->row_bytes;
        if (j->type == DY_F32) {
            j->fill(j->ctx, j->row0 + r, (float *)out); /* no conversion to do */
            continue;
        }
        j->fill(j->ctx, j->row0 + r, row);
        dy_quantize_row(j->type, row, out, j->cols);
    }
}

/* Checks that the streamed tensor is the one the caller means to fill. */
static bool stream_matches(dy_gguf_writer *w, dy_type type, int64_t cols, int64_t rows)
{
    if (!w->f || w->cur >= w->n_t)
        return wfail(w, "no tensor is waiting for data");
    const wtensor *t = &w->t[w->cur];
    if (w->cur_done != 0 || t->type != type || t->ne[0] != cols ||
        t->nbytes != (uint64_t)rows * dy_type_row_bytes(type, cols))
        return wfail(w, "%s: tensor '%s' (%s, %lld columns) does not match the %lld x %lld %s "
                     "rows given", w->path, t->name, dy_type_name(t->type), (long long)t->ne[0],
                     (long long)rows, (long long)cols, dy_type_name(type));
    return true;
}

bool dy_gguf_writer_stream_rows(dy_gguf_writer *w, dy_pool *pool, dy_type type, int64_t cols,
                             int64_t rows, dy_gguf_row_fn fill, void *ctx, char *err,
                             size_t errlen)
{
    if (!stream_matches(w, type, cols, rows)) {
        abandon(w);
        return report(w, err, errlen);
    }
    int nth = pool ? dy_pool_size(pool) : 1;
    stream_job j = {.fill = fill, .ctx = ctx, .type = type, .cols = cols,
                    .row_bytes = dy_type_row_bytes(type, cols)};
    /* About 4 MiB of output per chunk: large writes, small memory. */
    int64_t chunk = (int64_t)((4u << 20) / j.row_bytes);
    chunk = chunk < 1 ? 1 : chunk > rows ? rows : chunk;
    j.scratch = malloc(sizeof(float) * (size_t)cols * (size_t)nth);
    j.dst = malloc(j.row_bytes * (size_t)chunk);
    bool ok = j.scratch && j.dst;
    if (!ok)
        wfail(w, "%s: out of memory", w->path);
    for (int64_t r = 0; ok && r < rows; r += chunk) {
        j.row0 = r;
        j.nrows = rows - r < chunk ? rows - r : chunk;
        if (pool)
            dy_pool_run(pool, stream_work, &j);
        else
            stream_work(&j, 0, 1);
        ok = dy_gguf_writer_write_data(w, j.dst, j.row_bytes * (size_t)j.nrows, err, errlen);
    }
    free(j.scratch);
    free(j.dst);
    if (!ok && w->f)
        abandon(w);
    return ok ? true : report(w, err, errlen);
}

/* ---------------------------------------------------------------- llama models */

dy_type dy_gguf_fallback_type(dy_type want, int64_t n)
{
    if (dy_type_row_ok(want, n))
        return want;
    return dy_type_row_ok(DY_Q8_0, n) ? DY_Q8_0 : DY_F16;
}

uint32_t dy_gguf_llama_file_type(dy_type t)
{
    switch (t) {
    case DY_F32: return 0;   /* LLAMA_FTYPE_ALL_F32 */
    case DY_F16: return 1;   /* MOSTLY_F16 */
    case DY_Q4_0: return 2;  /* MOSTLY_Q4_0 */
    case DY_Q8_0: return 7;  /* MOSTLY_Q8_0 */
    case DY_Q4_K: return 14; /* MOSTLY_Q4_K_S: Q4_K throughout */
    case DY_Q5_K: return 16; /* MOSTLY_Q5_K_S */
    case DY_Q6_K: return 18; /* MOSTLY_Q6_K */
    case DY_BF16: return 32; /* MOSTLY_BF16 */
    default: return 0;
    }
}

bool dy_gguf_writer_set_llama_hparams(dy_gguf_writer *w, const dy_hparams *hp)
{
    dy_gguf_writer_set_str(w, "general.architecture", "llama");
    dy_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)hp->vocab_size);
    dy_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)hp->ctx_len);
    dy_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)hp->dim);
    dy_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)hp->n_layers);
    dy_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)hp->hidden_dim);
    dy_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)hp->n_heads);
    dy_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)hp->n_kv_heads);
    /* Only when it is not the default dim / n_heads, as llama.cpp's converter does. */
    if (hp->n_heads > 0 && hp->head_dim * hp->n_heads != hp->dim) {
        dy_gguf_writer_set_u32(w, "llama.attention.key_length", (uint32_t)hp->head_dim);
        dy_gguf_writer_set_u32(w, "llama.attention.value_length", (uint32_t)hp->head_dim);
    }
    dy_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)hp->n_rot);
    dy_gguf_writer_set_f32(w, "llama.rope.freq_base", hp->rope_base);
    return dy_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", hp->rms_eps) &&
           !w->failed;
}

void dy_gguf_writer_free(dy_gguf_writer *w)
{
    if (!w)
        return;
    abandon(w);
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        dy_buf_free(&w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}
