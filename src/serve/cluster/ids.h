/* ids.h — the random ids of cluster mode: a worker's and a node agent's id (the key of its
 * entry: "w" or "n" and the id in 8 hex digits) and the incarnation every entry carries
 * (random per process start). */
#ifndef DYAD_CLUSTER_IDS_H
#define DYAD_CLUSTER_IDS_H

#include <stddef.h>
#include <stdint.h>

/* A random id in [1, 2^31) (the worker loop keeps a worker's id in an int). */
uint32_t dy_cluster_random_id(void);
/* 32 random lowercase hex digits into out (fewer when cap is smaller), NUL-terminated. */
void dy_cluster_random_hex(char *out, size_t cap);

#endif
