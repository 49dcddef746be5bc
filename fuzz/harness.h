/* harness.h — what every libFuzzer target in fuzz/ shares: an input handed to a product
 * function as the file it would open (an in-memory file), and the check that turns a broken
 * property into a crash the fuzzer records. */
#ifndef DYAD_FUZZ_HARNESS_H
#define DYAD_FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* An in-memory file holding data[0..size): its descriptor (close it when done), and in
 * path a name that opens it ("/proc/self/fd/N"). -1 when the file could not be made. */
int fz_memfile(const uint8_t *data, size_t size, char path[64]);

/* Aborts with the message (on the sanitizers' report stream) when cond is false: a property
 * the product promises is broken. */
void fz_check(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
