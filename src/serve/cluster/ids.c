/* ids.c — cluster mode's random ids and incarnations (see ids.h), from getrandom, with the
 * pid and the clock when it fails. */
#include "serve/cluster/ids.h"

#include "util/clock.h"

#include <stdio.h>
#include <sys/random.h>
#include <unistd.h>

uint32_t dy_cluster_random_id(void)
{
    uint32_t v = 0;
    while ((v & 0x7fffffffu) == 0)
        if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
            v = (uint32_t)getpid() ^ (uint32_t)(dy_now() * 1e6);
    return v & 0x7fffffffu;
}

void dy_cluster_random_hex(char *out, size_t cap)
{
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (uint8_t)(dy_cluster_random_id() >> 3);
    size_t k = 0;
    if (cap)
        out[0] = 0;
    for (size_t i = 0; i < sizeof b && k + 3 <= cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%02x", b[i]);
}
