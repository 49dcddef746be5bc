/* gguf.h — reading GGUF files (v2 and v3): header, metadata key/values, tensor infos, and
 * the memory-mapped data section. Every count, length, offset, size and type is checked
 * against the file's size before it is used; a bad file yields an error message naming the
 * file, the byte offset and the problem. Writing GGUF lives in gguf_write.h. */
#ifndef DYAD_GGUF_H
#define DYAD_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef enum {
    DY_GGUF_UINT8 = 0, DY_GGUF_INT8 = 1, DY_GGUF_UINT16 = 2, DY_GGUF_INT16 = 3,
    DY_GGUF_UINT32 = 4, DY_GGUF_INT32 = 5, DY_GGUF_FLOAT32 = 6, DY_GGUF_BOOL = 7,
    DY_GGUF_STRING = 8, DY_GGUF_ARRAY = 9, DY_GGUF_UINT64 = 10, DY_GGUF_INT64 = 11,
    DY_GGUF_FLOAT64 = 12,
} dy_gguf_vtype;

typedef struct {
    const char *ptr; /* points into the mapping; NOT NUL-terminated */
    uint64_t len;
} dy_gguf_str;

/* One metadata value. Scalars are widened; arrays point at their raw little-endian
 * elements inside the mapping (strings in an array are decoded on demand). */
typedef struct {
    dy_gguf_str key;
    dy_gguf_vtype type;
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
        dy_gguf_str s;
        struct {
            dy_gguf_vtype type;
            uint64_t n;
            const uint8_t *data;     /* first element */
            const dy_gguf_str *strings; /* for string arrays: n decoded entries */
        } arr;
    } v;
} dy_gguf_kv;

#define DY_GGUF_MAX_DIMS 4

typedef struct {
    dy_gguf_str name;
    uint32_t n_dims;
    int64_t ne[DY_GGUF_MAX_DIMS]; /* ne[0] is the row length (fastest-varying) */
    uint32_t type;             /* a ggml type (see quant.h) */
    uint64_t offset;           /* relative to the data section */
    uint64_t nbytes;
    const void *data;          /* inside the mapping */
} dy_gguf_tensor;

typedef struct {
    char *path;
    uint32_t version;
    uint64_t alignment;
    uint64_t n_kv, n_tensors;
    dy_gguf_kv *kv;
    dy_gguf_tensor *tensors;
    const uint8_t *map; /* the whole file, read-only */
    size_t size;
    uint64_t data_offset;
    bool mapped; /* true when dy_gguf_open mapped the file (dy_gguf_close unmaps it) */
} dy_gguf_file;

/* Opens and validates `path`. On failure returns NULL and writes "path: offset N: problem"
 * into err. Tensors of types dyad cannot compute with are accepted here (the model loader
 * rejects them by name), but their sizes must still be computable. */
dy_gguf_file *dy_gguf_open(const char *path, char *err, size_t errlen);
/* The same over a buffer (not copied; must outlive the result). Used by the fuzzer. */
dy_gguf_file *dy_gguf_parse(const uint8_t *buf, size_t size, const char *name, char *err,
                            size_t errlen);
void dy_gguf_close(dy_gguf_file *g);

const dy_gguf_kv *dy_gguf_find(const dy_gguf_file *g, const char *key);
const dy_gguf_tensor *dy_gguf_find_tensor(const dy_gguf_file *g, const char *name);
/* Typed getters: return false (and leave *out alone) if the key is missing or of a type
 * that does not convert exactly (integers of any width convert among themselves when the
 * value fits; float32/float64 convert to double). */
bool dy_gguf_get_u64(const dy_gguf_file *g, const char *key, uint64_t *out);
bool dy_gguf_get_i64(const dy_gguf_file *g, const char *key, int64_t *out);
bool dy_gguf_get_f64(const dy_gguf_file *g, const char *key, double *out);
bool dy_gguf_get_bool(const dy_gguf_file *g, const char *key, bool *out);
/* Returns a malloc'd NUL-terminated copy, or NULL if missing / not a string. */
char *dy_gguf_get_str(const dy_gguf_file *g, const char *key);
/* An array of the given element type, or NULL. */
const dy_gguf_kv *dy_gguf_get_arr(const dy_gguf_file *g, const char *key, dy_gguf_vtype elem_type);
bool dy_gguf_str_eq(dy_gguf_str s, const char *c);

#endif
