/* json.h — the frontend's one discipline for building JSON with jansson (responses, chunks,
 * error objects, the `dyad` object, request-log lines): a builder records the first failure
 * (an allocation, or a value jansson refuses), so a tree is assembled without a check per
 * call, and the caller checks once at the end. A result is whole or not made at all: never a
 * response with fields silently missing. Strings from the model or the client are arbitrary
 * bytes; they become valid UTF-8 here (jansson only holds valid UTF-8). */
#ifndef DYAD_FRONT_JSON_H
#define DYAD_FRONT_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    bool failed;  /* something was lost: the tree must not be used */
} dy_jb;

/* obj[key] = v, taking v's reference. v NULL (whatever made it failed) or obj NULL is a
 * failure too, so calls nest: dy_jb_set(b, o, "usage", usage_json(b, u)). */
void dy_jb_set(dy_jb *b, json_t *obj, const char *key, json_t *v);
/* obj[key] = v under a key of arbitrary bytes (made valid as dy_json_strn does), unless obj
 * already has that key: then the first value stays and v is released. */
void dy_jb_set_first(dy_jb *b, json_t *obj, const char *key, size_t len, json_t *v);
/* Appends v to arr, taking v's reference (NULL arr or v: a failure). */
void dy_jb_append(dy_jb *b, json_t *arr, json_t *v);

/* root if nothing failed; otherwise NULL, and root is released. */
json_t *dy_jb_tree(dy_jb *b, json_t *root);
/* root as text (jansson's JSON_* dump flags), malloc'd, if nothing failed; otherwise NULL.
 * Releases root either way. */
char *dy_jb_dump(dy_jb *b, json_t *root, size_t flags);

/* A JSON string of s[0..n): bytes that are not part of well-formed UTF-8 become U+FFFD. A
 * NULL s is "". NULL only when out of memory. */
json_t *dy_json_strn(const char *s, size_t n);
json_t *dy_json_str(const char *s);

#endif
