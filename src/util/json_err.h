/* json_err.h — one wording for a JSON file that would not load, for every part that reads one
 * (`dyad plan quality`'s points, the simulator's cost models). It takes the fields of
 * jansson's json_error_t rather than the struct, so util/ needs no jansson. */
#ifndef DYAD_UTIL_JSON_ERR_H
#define DYAD_UTIL_JSON_ERR_H

#include <stddef.h>

/* Writes "PATH: line LINE: TEXT" into err, or "PATH: TEXT" when line is not positive (the
 * file could not be opened or read: jansson's text says why). */
void dy_json_load_error(char *err, size_t errlen, const char *path, int line, const char *text);

#endif
