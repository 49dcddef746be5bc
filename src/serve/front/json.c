/* json.c — see json.h. Owns the UTF-8 repair of strings on their way into JSON. */
#include "serve/front/json.h"
#include "util/buf.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- UTF-8 */

/* Length (1-4) of the well-formed UTF-8 sequence at s[0..n), or 0 if there is none (bad
 * lead byte, bad continuation, overlong form, surrogate, above U+10FFFF, or truncated). */
static int utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    int len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
            : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len <= 1 || (size_t)len > n)
        return len == 1 ? 1 : 0;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) ||
        (c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

static bool utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int l = utf8_seq((const unsigned char *)s + i, n - i);
        if (l == 0)
            return false;
        i += (size_t)l;
    }
    return true;
}

/* A copy of s[0..n) with every byte that is not part of a well-formed sequence replaced by
 * U+FFFD. malloc'd, NUL-terminated, length in *out_n. */
static char *utf8_fixed(const char *s, size_t n, size_t *out_n)
{
    char *o = malloc(n * 3 + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int l = utf8_seq((const unsigned char *)s + i, n - i);
        if (l > 0) {
            memcpy(o + k, s + i, (size_t)l);
            k += (size_t)l, i += (size_t)l;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3, i++;
        }
    }
    o[k] = 0;
    *out_n = k;
    return o;
}

json_t *dy_json_strn(const char *s, size_t n)
{
    if (!s)
        s = "", n = 0;
    if (utf8_valid(s, n))
        return json_stringn_nocheck(s, n);
    size_t fn;
    char *f = utf8_fixed(s, n, &fn);
    json_t *j = f ? json_stringn_nocheck(f, fn) : NULL;
    free(f);
    return j;
}

json_t *dy_json_str(const char *s)
{
    return dy_json_strn(s, s ? strlen(s) : 0);
}

/* ---------------------------------------------------------------- the builder */

void dy_jb_set(dy_jb *b, json_t *obj, const char *key, json_t *v)
{
    if (json_object_set_new(obj, key, v) != 0) /* releases v, also when obj is NULL */
        b->failed = true;
}

void dy_jb_set_first(dy_jb *b, json_t *obj, const char *key, size_t len, json_t *v)
{
    size_t kn;
    char *k = utf8_fixed(key ? key : "", key ? len : 0, &kn);
    if (!k || !obj || !v) {
        b->failed = true;
        json_decref(v);
    } else if (json_object_getn(obj, k, kn))
        json_decref(v);
    else if (json_object_setn_new_nocheck(obj, k, kn, v) != 0)
        b->failed = true;
    free(k);
}

void dy_jb_append(dy_jb *b, json_t *arr, json_t *v)
{
    if (json_array_append_new(arr, v) != 0) /* releases v, also when arr is NULL */
        b->failed = true;
}

json_t *dy_jb_tree(dy_jb *b, json_t *root)
{
    if (b->failed || !root) {
        b->failed = true;
        json_decref(root);
        return NULL;
    }
    return root;
}

static int dump_piece(const char *piece, size_t n, void *out)
{
    dy_buf_append(out, piece, n);
    return ((dy_buf *)out)->oom ? -1 : 0;
}

/* Not json_dumps: jansson ignores a failure to write an object's key, so under memory
 * pressure json_dumps can return text with a quote missing. The buffer's sticky flag sees
 * every failed append. */
char *dy_jb_dump(dy_jb *b, json_t *root, size_t flags)
{
    dy_buf text = {0};
    if (b->failed || !root || json_dump_callback(root, dump_piece, &text, flags) != 0 ||
        !dy_buf_cstr(&text)) {
        b->failed = true;
        dy_buf_free(&text);
        json_decref(root);
        return NULL;
    }
    json_decref(root);
    return (char *)text.data; /* dy_buf_cstr made it a string; the caller frees it */
}
