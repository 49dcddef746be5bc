/* clock.h — the one clock: monotonic seconds, and condition waits with deadlines on it.
 * Policy code never calls these; the caller reads the time and passes it in. */
#ifndef DYAD_UTIL_CLOCK_H
#define DYAD_UTIL_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* Seconds on CLOCK_MONOTONIC (arbitrary origin; only differences mean anything). */
double dy_now(void);
/* The same clock in nanoseconds. */
uint64_t dy_now_ns(void);
/* Wall-clock seconds since the Unix epoch (for timestamps shown to people, never deadlines). */
double dy_wall_now(void);

/* Initialises a condition variable whose timed waits use CLOCK_MONOTONIC; 0 or an errno. */
int dy_cond_init(pthread_cond_t *cv);
/* Waits on cv (mu held) until signalled or until the monotonic time `deadline` (dy_now()
 * seconds). 0 when woken, ETIMEDOUT at the deadline. cv must come from dy_cond_init. */
int dy_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline);
/* The same for at most `seconds` from now. */
int dy_cond_wait_for(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds);

#endif
