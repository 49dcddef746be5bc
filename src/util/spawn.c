/* spawn.c — a child process that dies with its parent (see spawn.h). */
#include "util/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

pid_t dy_spawn(const char *prog, char *const argv[], int keep_fd, char *err, size_t errlen)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* Only async-signal-safe calls between fork and exec. Ignored signals and the mask
         * survive exec: without the defaults back the parent-death SIGTERM below could never
         * end an orphaned child. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) /* the parent died before prctl took effect */
            _exit(1);
        if (keep_fd >= 0)
            fcntl(keep_fd, F_SETFD, 0);
        execvp(prog, argv);
        _exit(127);
    }
    return pid;
}
