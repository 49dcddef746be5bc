/* schema_impl.h — what the files of the JSON Schema compiler share: the writers of grammar
 * text (schema.c) and the pattern compiler (schema_regex.c). Private to grammar/. */
#ifndef DYAD_GRAMMAR_SCHEMA_IMPL_H
#define DYAD_GRAMMAR_SCHEMA_IMPL_H

#include "grammar/schema.h"

#include <stdbool.h>
#include <stdint.h>

/* One byte (or range) inside [...]: letters and digits as themselves, anything else as \xHH so
 * no member can be read as syntax. */
void dy_schema_class_byte(dy_buf *out, unsigned c);
void dy_schema_class_range(dy_buf *out, unsigned lo, unsigned hi);
/* A quantifier for {min,max} (unbounded: max ignored), "" for exactly one. */
void dy_schema_quantifier(dy_buf *out, uint64_t min, uint64_t max, bool unbounded);

/* One bound: minimum/maximum inclusive, exclusiveMinimum/exclusiveMaximum (a number, or the
 * draft-4 boolean that makes minimum/maximum exclusive). */
typedef struct {
    bool set, excl;
    const char *key;   /* the keyword that set it, for errors */
    bool is_int;       /* the value is an integer within int64 */
    int64_t i;         /* is_int: the value */
    double d;
} bound;

/* Integers lo..hi (each end optional): a '-' and magnitudes for the negative ones, then the
 * non-negative ones. */
void dy_schema_integer_range(dy_buf *b, bool has_lo, int64_t lo, bool has_hi, int64_t hi);
/* Numbers between integer-valued bounds (fractions free inside, zero at an inclusive end). */
void dy_schema_number_range(dy_buf *b, const bound *lo, const bound *hi);

/* A pattern's compile: rules it refers to are named from prefix (prefix-char, and prefix-dot,
 * which the caller emits when used_dot is set); on failure, why says what and where. */
typedef struct {
    const char *prefix;
    bool used_dot;
    char why[192];
} dy_schema_regex;

/* Appends the string's grammar (its quotes included) for the pattern; false with rx->why. */
bool dy_schema_pattern(dy_schema_regex *rx, const char *pattern, size_t n, dy_buf *body);

#endif
