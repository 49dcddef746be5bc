/* registry.c — the worker registry's entries (see registry.h): their keys, their JSON values
 * written and read through one table of fields (so a field is added in one place and always
 * round-trips), and the lease state `dyad cluster status` shows. The functions over NATS are
 * in registry_nats.c. Everything here is pure: no NATS, no clock. */
#include "serve/cluster/registry.h"

#include "kv/kv_pool.h"
#include "serve/wire/wire.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names of the enumerated fields ------------------------------------------------------ */

static const char *role_name(int v)
{
    switch (v) {
    case DY_ROLE_AGG: return "agg";
    case DY_ROLE_PREFILL: return "prefill";
    case DY_ROLE_DECODE: return "decode";
    }
    return NULL;
}

static const char *kv_type_name(int v)
{
    return v >= 0 && v < DY_KV_N_TYPES ? dy_kv_type_name((dy_kv_type)v) : NULL;
}

/* A worker with no KV receiver (a prefill worker, or one that only serves locally) has none. */
static const char *xfer_name(int v)
{
    switch (v) {
    case 0: return "";
    case DY_XFER_TCP: return "tcp";
    case DY_XFER_UCX: return "ucx";
    }
    return NULL;
}

const char *dy_reg_role_name(int role)
{
    return role_name(role);
}

/* ---- the table of fields ------------------------------------------------------------------ */

typedef enum {
    T_U32,    /* an integer in [lo, hi] */
    T_STR,    /* a string of 1 to DY_REG_MAX_STR printable bytes (0 with may_be_empty) */
    T_HEX,    /* a string of hex digits (incarnation) */
    T_HEX64,  /* exactly 16 hex digits: a uint64_t */
    T_NAME,   /* one of name(0..max_value) */
    T_LEASE,  /* seconds in (0, 3600] */
    T_BOOL,
} ftype;

typedef struct {
    const char *key;
    ftype type;
    size_t off;                 /* into dy_reg_entry */
    double lo, hi;              /* T_U32 */
    bool may_be_empty;          /* T_STR */
    const char *(*name)(int v); /* T_NAME: the name of each value, NULL for none */
    int max_value;              /* T_NAME: values are 0..max_value */
} field;

#define OFF(m) offsetof(dy_reg_entry, m)
#define U32_MAX_D 4294967295.0

static const field fields[] = {
    {.key = "id", .type = T_U32, .off = OFF(id), .lo = 0, .hi = U32_MAX_D},
    {.key = "incarnation", .type = T_HEX, .off = OFF(incarnation)},
    {.key = "host", .type = T_STR, .off = OFF(host)},
    {.key = "pid", .type = T_U32, .off = OFF(pid), .lo = 1, .hi = U32_MAX_D},
    {.key = "role", .type = T_NAME, .off = OFF(role), .name = role_name,
     .max_value = DY_ROLE_DECODE},
    {.key = "model", .type = T_STR, .off = OFF(model)},
    {.key = "fingerprint", .type = T_HEX64, .off = OFF(fingerprint)},
    /* the same bounds as `dyad worker --block-size` and --threads */
    {.key = "block_size", .type = T_U32, .off = OFF(block_size), .lo = 1, .hi = 256},
    {.key = "kv_blocks", .type = T_U32, .off = OFF(kv_blocks), .lo = 1, .hi = U32_MAX_D},
    {.key = "kv_type", .type = T_NAME, .off = OFF(kv_type), .name = kv_type_name,
     .max_value = DY_KV_N_TYPES - 1},
    {.key = "kv_addr", .type = T_STR, .off = OFF(kv_addr), .may_be_empty = true},
    {.key = "kv_transfer", .type = T_NAME, .off = OFF(kv_transfer), .name = xfer_name,
     .max_value = DY_XFER_UCX},
    {.key = "threads", .type = T_U32, .off = OFF(threads), .lo = 1, .hi = 256},
    {.key = "lease_s", .type = T_LEASE, .off = OFF(lease_s)},
    {.key = "draining", .type = T_BOOL, .off = OFF(draining)},
};

#define LOFF(m) (offsetof(dy_reg_entry, load) + offsetof(dy_reg_load, m))
static const field load_fields[] = {
    {.key = "running", .type = T_U32, .off = LOFF(running), .lo = 0, .hi = U32_MAX_D},
    {.key = "waiting", .type = T_U32, .off = LOFF(waiting), .lo = 0, .hi = U32_MAX_D},
    {.key = "kv_used", .type = T_U32, .off = LOFF(kv_used), .lo = 0, .hi = U32_MAX_D},
    {.key = "kv_total", .type = T_U32, .off = LOFF(kv_total), .lo = 0, .hi = U32_MAX_D},
};
#define N(a) (sizeof a / sizeof a[0])
#define LEASE_MAX_S 3600.0

/* ---- keys --------------------------------------------------------------------------------- */

void dy_reg_key(uint32_t id, char key[DY_REG_KEY_LEN + 1])
{
    snprintf(key, DY_REG_KEY_LEN + 1, "w%08" PRIx32, id);
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool all_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_hex(s[i]))
            return false;
    return true;
}

bool dy_reg_parse_key(const char *key, uint32_t *id)
{
    /* lowercase only, as dy_reg_key writes it: "wDEADBEEF" would be a second key for one id */
    if (!key || key[0] != 'w' || strlen(key) != DY_REG_KEY_LEN)
        return false;
    for (int i = 1; i < DY_REG_KEY_LEN; i++)
        if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f')))
            return false;
    *id = (uint32_t)strtoul(key + 1, NULL, 16);
    return true;
}

/* ---- encoding ----------------------------------------------------------------------------- */

static json_t *field_json(const dy_reg_entry *e, const field *f, char hex[17])
{
    const void *src = (const char *)e + f->off;
    switch (f->type) {
    case T_U32: return json_integer(*(const uint32_t *)src);
    case T_STR:
    case T_HEX: return json_string(src);
    case T_HEX64:
        snprintf(hex, 17, "%016" PRIx64, *(const uint64_t *)src);
        return json_string(hex);
    case T_NAME: {
        const char *name = f->name(*(const int *)src);
        return name ? json_string(name) : NULL;
    }
    case T_LEASE: return json_real(*(const double *)src);
    case T_BOOL: return json_boolean(*(const bool *)src);
    }
    return NULL;
}

/* Sets every field of the table on obj; false if one could not be made. */
static bool set_fields(json_t *obj, const dy_reg_entry *e, const field *t, size_t n)
{
    char hex[17];
    for (size_t i = 0; i < n; i++)
        if (json_object_set_new(obj, t[i].key, field_json(e, &t[i], hex)) != 0)
            return false;
    return true;
}

json_t *dy_reg_to_json(const dy_reg_entry *e)
{
    json_t *obj = json_object(), *load = json_object();
    bool ok = obj && load && set_fields(obj, e, fields, N(fields)) &&
              set_fields(load, e, load_fields, N(load_fields));
    if (ok && json_object_set(obj, "load", load) == 0) {
        json_decref(load);
        return obj;
    }
    json_decref(load);
    json_decref(obj);
    return NULL;
}

int dy_reg_encode(const dy_reg_entry *e, char *out, size_t cap)
{
    json_t *obj = dy_reg_to_json(e);
    if (!obj || cap == 0) {
        json_decref(obj);
        return -1;
    }
    size_t need = json_dumpb(obj, out, cap, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    if (need == 0 || need >= cap) /* 0: jansson could not write it */
        return -1;
    out[need] = 0;
    return (int)need;
}

/* ---- decoding ----------------------------------------------------------------------------- */

typedef struct {
    char *err;
    size_t errlen;
    const char *prefix; /* "load." inside the load object */
} reader;

static bool fail(const reader *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes "prefix.key: message" into err; false. */
static bool fail(const reader *r, const char *key, const char *fmt, ...)
{
    char msg[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "%s%s: %s", r->prefix, key, msg);
    return false;
}

/* The accepted names of an enumerated field, ", "-separated, for its error. */
static void names_of(const field *f, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (int v = 0; v <= f->max_value; v++) {
        const char *name = f->name(v);
        if (name && len < cap)
            len += (size_t)snprintf(out + len, cap - len, "%s\"%s\"", len ? ", " : "", name);
    }
}

static bool read_name(const reader *r, const field *f, const json_t *v, int *dst)
{
    const char *s = json_string_value(v);
    for (int i = 0; s && i <= f->max_value; i++)
        if (f->name(i) && !strcmp(f->name(i), s)) {
            *dst = i;
            return true;
        }
    char names[128];
    names_of(f, names, sizeof names);
    return fail(r, f->key, "must be one of %s", names);
}

/* Strings are shown on operators' terminals: no control characters. */
static bool printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

static bool read_string(const reader *r, const field *f, const json_t *v, char *dst)
{
    if (!json_is_string(v))
        return fail(r, f->key, "must be a string");
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n > DY_REG_MAX_STR)
        return fail(r, f->key, "longer than %d bytes", DY_REG_MAX_STR);
    if (n == 0 && !f->may_be_empty)
        return fail(r, f->key, "must not be empty");
    if (f->type == T_HEX && !all_hex(s, n))
        return fail(r, f->key, "must be hex digits");
    if (!printable(s, n))
        return fail(r, f->key, "holds a control character");
    memcpy(dst, s, n + 1);
    return true;
}

static bool read_field(const reader *r, const field *f, const json_t *v, dy_reg_entry *e)
{
    void *dst = (char *)e + f->off;
    if (!v)
        return fail(r, f->key, "missing");
    switch (f->type) {
    case T_U32: {
        json_int_t x = json_integer_value(v);
        if (!json_is_integer(v) || x < f->lo || x > f->hi)
            return fail(r, f->key, "must be an integer in [%.0f, %.0f]", f->lo, f->hi);
        *(uint32_t *)dst = (uint32_t)x;
        return true;
    }
    case T_STR:
    case T_HEX: return read_string(r, f, v, dst);
    case T_HEX64: {
        const char *s = json_string_value(v);
        if (!s || json_string_length(v) != 16 || !all_hex(s, 16))
            return fail(r, f->key, "must be a string of 16 hex digits");
        *(uint64_t *)dst = strtoull(s, NULL, 16);
        return true;
    }
    case T_NAME: return read_name(r, f, v, dst);
    case T_LEASE: {
        double x = json_number_value(v);
        if (!json_is_number(v) || !(x > 0 && x <= LEASE_MAX_S))
            return fail(r, f->key, "must be a number of seconds in (0, %.0f]", LEASE_MAX_S);
        *(double *)dst = x;
        return true;
    }
    case T_BOOL:
        if (!json_is_boolean(v))
            return fail(r, f->key, "must be true or false");
        *(bool *)dst = json_is_true(v);
        return true;
    }
    return fail(r, f->key, "unknown field type");
}

/* Keys the table does not have are ignored: a newer worker may add a field, and a misspelt
 * one still fails, as the field it meant is missing. */
static bool read_fields(const reader *r, const json_t *obj, const field *t, size_t n,
                        dy_reg_entry *e)
{
    for (size_t i = 0; i < n; i++)
        if (!read_field(r, &t[i], json_object_get(obj, t[i].key), e))
            return false;
    return true;
}

/* What the fields cannot say one at a time. */
static bool check_entry(const reader *r, const dy_reg_entry *e)
{
    if ((e->kv_addr[0] == 0) != (e->kv_transfer == 0))
        return fail(r, "kv_transfer", "must be \"\" exactly when kv_addr is \"\"");
    if (e->load.kv_used > e->load.kv_total)
        return fail(r, "load.kv_used", "%" PRIu32 " is more than load.kv_total (%" PRIu32 ")",
                    e->load.kv_used, e->load.kv_total);
    return true;
}

static bool decode_root(const reader *r, const json_t *root, dy_reg_entry *e)
{
    if (!json_is_object(root))
        return fail(r, "value", "must be a JSON object");
    if (!read_fields(r, root, fields, N(fields), e))
        return false;
    const json_t *load = json_object_get(root, "load");
    if (!load)
        return fail(r, "load", "missing");
    if (!json_is_object(load))
        return fail(r, "load", "must be an object");
    reader in_load = {r->err, r->errlen, "load."};
    return read_fields(&in_load, load, load_fields, N(load_fields), e) && check_entry(r, e);
}

bool dy_reg_decode(const void *value, size_t len, dy_reg_entry *e, char *err, size_t errlen)
{
    reader r = {err, errlen, ""};
    memset(e, 0, sizeof *e);
    if (len > DY_REG_MAX_VALUE)
        return fail(&r, "value", "%zu bytes, more than %d", len, DY_REG_MAX_VALUE);
    json_error_t je;
    json_t *root = json_loadb(value ? value : "", value ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fail(&r, "value", "not JSON: %s (at byte %d)", je.text, je.position);
    bool ok = decode_root(&r, root, e);
    json_decref(root);
    if (!ok)
        memset(e, 0, sizeof *e);
    return ok;
}

/* ---- leases ------------------------------------------------------------------------------- */

bool dy_reg_lease_state(double age_s, double lease_s, char *out, size_t cap)
{
    bool expired = age_s > lease_s;
    if (expired)
        snprintf(out, cap, "EXPIRED %.1f s ago (lease %g s)", age_s - lease_s, lease_s);
    else
        snprintf(out, cap, "renewed %.1f s ago / lease %g s", age_s, lease_s);
    return expired;
}
