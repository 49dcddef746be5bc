/* testutil.h — small helpers shared by the cmocka tests: paths into the source tree,
 * whole-file reads, a test data stream and the simulator tests' cost model. Tests include <cmocka.h> after the headers cmocka needs. */
#ifndef DYAD_TESTUTIL_H
#define DYAD_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sched/step_shape.h"

/* DYAD_SOURCE_DIR "/" rel, in a static buffer that the next call overwrites. */
const char *tu_path(const char *rel);
/* Reads a whole file; returns a malloc'd buffer (NUL-terminated, *len excludes the NUL) or
 * NULL if the file cannot be read. */
char *tu_read_file(const char *path, size_t *len);
/* True if the file exists (used to skip tests on optional data). */
int tu_exists(const char *path);

/* A deterministic xorshift64 stream for test data: the caller owns the state (non-zero). */
uint64_t tu_rng_u64(uint64_t *state);
/* Uniform in (0, 1), and standard normal (Box-Muller), from the same stream. */
float tu_rng_uniform(uint64_t *state);
float tu_rng_normal(uint64_t *state);
/* Fills n bytes with a pattern that differs with salt (KV pools in the transfer tests). */
void tu_fill_pattern(void *p, size_t n, unsigned salt);

/* The simulator tests' hand-computation cost model: 1 ms a step, 0.01 ms a prompt token,
 * 0.1 ms a decoding sequence; every KV transfer 0.5 ms. */
extern const dy_step_costs tu_sim_costs;
/* The balance criterion's and the planner's: 1 ms a step, 0.1 ms a prompt token, 0.5 ms a
 * decoding sequence, no cost for context; transfers 0.25 ms (0 for no bytes). */
extern const dy_step_costs tu_plan_costs;

#endif
