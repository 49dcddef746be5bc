/* fields.h — JSON objects of the cluster's buckets and requests read and written through one
 * table of fields (serve/cluster/registry.c's worker entries, node.h's node entries and
 * requests): each field names its key, its type and range, and where it lives in a C struct,
 * so a field is added in one place, always round-trips, and a refusal names the field
 * ("role: must be one of ..."). Pure: no NATS. */
#ifndef DYAD_CLUSTER_FIELDS_H
#define DYAD_CLUSTER_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#define DY_FIELD_MAX_STR 128 /* bytes of a T_STR / T_HEX string (DY_REG_MAX_STR) */
#define DY_FIELD_LEASE_MAX_S 3600.0

typedef enum {
    DY_F_U32,    /* an integer in [lo, hi], into a uint32_t */
    DY_F_STR,    /* a string of 1 to DY_FIELD_MAX_STR printable bytes (0 with may_be_empty) */
    DY_F_HEX,    /* a string of hex digits (an incarnation) */
    DY_F_HEX64,  /* exactly 16 hex digits: a uint64_t */
    DY_F_NAME,   /* one of name(0..max_value), into an int */
    DY_F_LEASE,  /* seconds in (0, 3600], into a double */
    DY_F_BOOL,
} dy_ftype;

typedef struct {
    const char *key;
    dy_ftype type;
    size_t off;                 /* into the struct */
    double lo, hi;              /* DY_F_U32 */
    bool may_be_empty;          /* DY_F_STR */
    const char *(*name)(int v); /* DY_F_NAME: the name of each value, NULL for none */
    int max_value;              /* DY_F_NAME: values are 0..max_value */
} dy_field;

/* Where a refusal goes, and the prefix of the field's name ("load." inside "load"). */
typedef struct {
    char *err;
    size_t errlen;
    const char *prefix;
} dy_freader;

/* Writes "prefix.key: message" into r->err; false. */
bool dy_field_fail(const dy_freader *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Reads every field of table t (n of them) from obj into base; keys the table does not have
 * are ignored (a newer writer may add one; a misspelt one fails, as the field it meant is
 * missing). false at the first bad one, named in r->err. */
bool dy_fields_read(const dy_freader *r, const json_t *obj, const dy_field *t, size_t n,
                    void *base);
/* Sets every field of t from base on obj; false if one could not be made. */
bool dy_fields_set(json_t *obj, const void *base, const dy_field *t, size_t n);
/* Whether s[0..n) holds no control character (strings end up on operators' terminals). */
bool dy_field_printable(const char *s, size_t n);
/* Parses one JSON object of at most max bytes (len, not NUL-terminated; duplicate keys
 * refused): the root, or NULL with "what: ..." in r->err. */
json_t *dy_fields_load(const dy_freader *r, const char *what, const void *data, size_t len,
                       size_t max);

/* Loads one object as dy_fields_load and decodes it with fn(r, root, out): what fn returns
 * (false also when it did not load), with the refusal in err. */
bool dy_fields_decode(const char *what, const void *data, size_t len, size_t max,
                      bool (*fn)(const dy_freader *r, const json_t *root, void *out), void *out,
                      char *err, size_t errlen);

#endif
