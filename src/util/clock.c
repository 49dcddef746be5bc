/* clock.c — see clock.h. */
#include "util/clock.h"

#include <math.h>
#include <time.h>

double dy_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t dy_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double dy_wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int dy_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc)
        return rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

/* Far enough to mean "no deadline" and still convert to time_t without overflow. */
#define FAR_FUTURE_S 1e15

int dy_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline)
{
    if (!(deadline > 0)) /* also NaN */
        deadline = 0;
    if (deadline > FAR_FUTURE_S)
        deadline = FAR_FUTURE_S;
    double whole = floor(deadline);
    struct timespec ts = {(time_t)whole, (long)((deadline - whole) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(cv, mu, &ts);
}

int dy_cond_wait_for(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds)
{
    return dy_cond_wait_until(cv, mu, dy_now() + (seconds > 0 ? seconds : 0));
}
