/* fields.c — a JSON object read and written through a table of fields (see fields.h): the
 * types, their ranges, and the refusal that names the field. Pure: no NATS, no clock. */
#include "serve/cluster/fields.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool dy_field_fail(const dy_freader *r, const char *key, const char *fmt, ...)
{
    char msg[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "%s%s: %s", r->prefix, key, msg);
    return false;
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

bool dy_field_printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

/* ---- writing ------------------------------------------------------------------------------ */

static json_t *field_json(const void *base, const dy_field *f, char hex[17])
{
    const void *src = (const char *)base + f->off;
    switch (f->type) {
    case DY_F_U32: return json_integer(*(const uint32_t *)src);
    case DY_F_STR:
    case DY_F_HEX: return json_string(src);
    case DY_F_HEX64:
        snprintf(hex, 17, "%016" PRIx64, *(const uint64_t *)src);
        return json_string(hex);
    case DY_F_NAME: {
        const char *name = f->name(*(const int *)src);
        return name ? json_string(name) : NULL;
    }
    case DY_F_LEASE: return json_real(*(const double *)src);
    case DY_F_BOOL: return json_boolean(*(const bool *)src);
    }
    return NULL;
}

bool dy_fields_set(json_t *obj, const void *base, const dy_field *t, size_t n)
{
    char hex[17];
    for (size_t i = 0; i < n; i++)
        if (json_object_set_new(obj, t[i].key, field_json(base, &t[i], hex)) != 0)
            return false;
    return true;
}

/* ---- reading ------------------------------------------------------------------------------ */

/* The accepted names of an enumerated field, ", "-separated, for its error. */
static void names_of(const dy_field *f, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (int v = 0; v <= f->max_value; v++) {
        const char *name = f->name(v);
        if (name && len < cap)
            len += (size_t)snprintf(out + len, cap - len, "%s\"%s\"", len ? ", " : "", name);
    }
}

static bool read_name(const dy_freader *r, const dy_field *f, const json_t *v, int *dst)
{
    const char *s = json_string_value(v);
    for (int i = 0; s && i <= f->max_value; i++)
        if (f->name(i) && !strcmp(f->name(i), s)) {
            *dst = i;
            return true;
        }
    char names[128];
    names_of(f, names, sizeof names);
    return dy_field_fail(r, f->key, "must be one of %s", names);
}

static bool read_string(const dy_freader *r, const dy_field *f, const json_t *v, char *dst)
{
    if (!json_is_string(v))
        return dy_field_fail(r, f->key, "must be a string");
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n > DY_FIELD_MAX_STR)
        return dy_field_fail(r, f->key, "longer than %d bytes", DY_FIELD_MAX_STR);
    if (n == 0 && !f->may_be_empty)
        return dy_field_fail(r, f->key, "must not be empty");
    if (f->type == DY_F_HEX && !all_hex(s, n))
        return dy_field_fail(r, f->key, "must be hex digits");
    if (!dy_field_printable(s, n))
        return dy_field_fail(r, f->key, "holds a control character");
    memcpy(dst, s, n + 1);
    return true;
}

static bool read_field(const dy_freader *r, const dy_field *f, const json_t *v, void *base)
{
    void *dst = (char *)base + f->off;
    if (!v)
        return dy_field_fail(r, f->key, "missing");
    switch (f->type) {
    case DY_F_U32: {
        json_int_t x = json_integer_value(v);
        if (!json_is_integer(v) || x < f->lo || x > f->hi)
            return dy_field_fail(r, f->key, "must be an integer in [%.0f, %.0f]", f->lo, f->hi);
        *(uint32_t *)dst = (uint32_t)x;
        return true;
    }
    case DY_F_STR:
    case DY_F_HEX: return read_string(r, f, v, dst);
    case DY_F_HEX64: {
        const char *s = json_string_value(v);
        if (!s || json_string_length(v) != 16 || !all_hex(s, 16))
            return dy_field_fail(r, f->key, "must be a string of 16 hex digits");
        *(uint64_t *)dst = strtoull(s, NULL, 16);
        return true;
    }
    case DY_F_NAME: return read_name(r, f, v, dst);
    case DY_F_LEASE: {
        double x = json_number_value(v);
        if (!json_is_number(v) || !(x > 0 && x <= DY_FIELD_LEASE_MAX_S))
            return dy_field_fail(r, f->key, "must be a number of seconds in (0, %.0f]",
                                 DY_FIELD_LEASE_MAX_S);
        *(double *)dst = x;
        return true;
    }
    case DY_F_BOOL:
        if (!json_is_boolean(v))
            return dy_field_fail(r, f->key, "must be true or false");
        *(bool *)dst = json_is_true(v);
        return true;
    }
    return dy_field_fail(r, f->key, "unknown field type");
}

bool dy_fields_read(const dy_freader *r, const json_t *obj, const dy_field *t, size_t n,
                    void *base)
{
    for (size_t i = 0; i < n; i++)
        if (!read_field(r, &t[i], json_object_get(obj, t[i].key), base))
            return false;
    return true;
}

json_t *dy_fields_load(const dy_freader *r, const char *what, const void *data, size_t len,
                       size_t max)
{
    if (len > max) {
        dy_field_fail(r, what, "%zu bytes, more than %zu", len, max);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(data ? data : "", data ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        dy_field_fail(r, what, "not JSON: %s (at byte %d)", je.text, je.position);
    else if (!json_is_object(root)) {
        dy_field_fail(r, what, "must be a JSON object");
        json_decref(root);
        return NULL;
    }
    return root;
}

bool dy_fields_decode(const char *what, const void *data, size_t len, size_t max,
                      bool (*fn)(const dy_freader *r, const json_t *root, void *out), void *out,
                      char *err, size_t errlen)
{
    dy_freader r = {err, errlen, ""};
    json_t *root = dy_fields_load(&r, what, data, len, max);
    bool ok = root && fn(&r, root, out);
    json_decref(root);
    return ok;
}
