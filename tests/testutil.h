/* testutil.h — small helpers shared by the cmocka tests: paths into the source tree and
 * whole-file reads. Tests include <cmocka.h> after the headers cmocka needs. */
#ifndef DYAD_TESTUTIL_H
#define DYAD_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* DYAD_SOURCE_DIR "/" rel, in a static buffer that the next call overwrites. */
const char *tu_path(const char *rel);
/* Reads a whole file; returns a malloc'd buffer (NUL-terminated, *len excludes the NUL) or
 * NULL if the file cannot be read. */
char *tu_read_file(const char *path, size_t *len);
/* True if the file exists (used to skip tests on optional data). */
int tu_exists(const char *path);

#endif
