/* spawn.h — starting a child process that dies with its parent: the fork and exec of the
 * frontend's workers (serve/front/fleet_proc.c) and of a node agent's (serve/cluster/node.c).
 * The child gets the default signal mask and dispositions back (a parent that takes SIGINT and
 * SIGTERM with sigwait blocks them, and a mask survives exec), is sent SIGTERM when its parent
 * dies (PR_SET_PDEATHSIG), and keeps keep_fd open across exec (-1: none). */
#ifndef DYAD_UTIL_SPAWN_H
#define DYAD_UTIL_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

/* The child's pid, or -1 with why in err (fork failed). An exec that fails ends the child with
 * status 127. */
pid_t dy_spawn(const char *prog, char *const argv[], int keep_fd, char *err, size_t errlen);

#endif
