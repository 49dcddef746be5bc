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
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
    GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
} gguf_vtype;

typedef struct {
    const char *ptr; /* points into the mapping; NOT NUL-terminated */
    uint64_t len;
} gguf_str;

/* One metadata value. Scalars are widened; arrays point at their raw little-endian
 * elements inside the mapping (strings in an array are decoded on demand). */
typedef struct {
    gguf_str key;
    gguf_vtype type;
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
        gguf_str s;
        struct {
            gguf_vtype type;
            uint64_t n;
            const uint8_t *data;     /* first element */
            const gguf_str *strings; /* for string arrays: n decoded entries */
        } arr;
    } v;
} gguf_kv;

#define GGUF_MAX_DIMS 4

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length (fastest-varying) */
    uint32_t type;             /* a ggml type (see quant.h) */
    uint64_t offset;           /* relative to the data section */
    uint64_t nbytes;
    const void *data;          /* inside the mapping */
} gguf_tensor;

typedef struct {
    char *path;
    uint32_t version;
    uint64_t alignment;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    const uint8_t *map; /* the whole file, read-only */
    size_t size;
    uint64_t data_offset;
    bool mapped; /* true when gguf_open mapped the file (gguf_close unmaps it) */
} gguf_file;

/* Opens and validates `path`. On failure returns NULL and writes "path: offset N: problem"
 * into err. Tensors of types dyad cannot compute with are accepted here (the model loader
 * rejects them by name), but their sizes must still be computable. */
gguf_file *gguf_open(const char *path, char *err, size_t errlen);
/* The same over a buffer (not copied; must outlive the result). Used by the fuzzer. */
gguf_file *gguf_parse(const uint8_t *buf, size_t size, const char *name, char *err, size_t errlen);
void gguf_close(gguf_file *g);

const gguf_kv *gguf_find(const gguf_file *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);
/* Typed getters: return false (and leave *out alone) if the key is missing or of a type
 * that does not convert exactly (integers of any width convert among themselves when the
 * value fits; float32/float64 convert to double). */
bool gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out);
bool gguf_get_i64(const gguf_file *g, const char *key, int64_t *out);
bool gguf_get_f64(const gguf_file *g, const char *key, double *out);
bool gguf_get_bool(const gguf_file *g, const char *key, bool *out);
/* Returns a malloc'd NUL-terminated copy, or NULL if missing / not a string. */
char *gguf_get_str(const gguf_file *g, const char *key);
/* An array of the given element type, or NULL. */
const gguf_kv *gguf_get_arr(const gguf_file *g, const char *key, gguf_vtype elem_type);
bool gguf_str_eq(gguf_str s, const char *c);

#endif
