/* harness.c — see harness.h. */
#include "harness.h"

#include <sanitizer/common_interface_defs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int fz_memfile(const uint8_t *data, size_t size, char path[64])
{
    int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return -1;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

void fz_check(int cond, const char *fmt, ...)
{
    if (cond)
        return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(msg, sizeof msg, "fuzz check failed: ");
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    /* Written where the sanitizers report, which stays open when libFuzzer's -close_fd_mask
     * silences the product's own stderr. */
    __sanitizer_report_error_summary(msg);
    abort();
}
