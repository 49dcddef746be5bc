/* fault.c — fault injection for `dyad-fault`, the test build of dyad (#18: SQLite's
 * discipline). Linked with -Wl,--wrap=... so that every allocation (malloc, calloc, realloc,
 * strdup, strndup) and every socket read and send (read, recv, send) made by dyad's own code
 * passes through here; the libraries it links use their own references and are not touched.
 * Nothing happens until the process receives SIGUSR2; from then on, until the next SIGUSR2:
 *   DYAD_FAULT_EVERY=N (default 11; 0: none)  every Nth allocation fails;
 *   DYAD_FAULT_SHORT_IO=1                     reads and sends move 1 to 7 bytes at a time
 *                                             (as a busy network may), never failing;
 *   DYAD_FAULT_SEND_EVERY=N (default 0: none) every Nth send fails with EPIPE, sending
 *                                             nothing (as when the peer's socket broke).
 * Disarming prints "dyad-fault PID: F of A allocations failed" to stderr, for the test's
 * counts, and so does exit. Test code: the environment and a signal handler are fine here,
 * and never in the product. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __real_recv(int fd, void *buf, size_t n, int flags);
ssize_t __real_send(int fd, const void *buf, size_t n, int flags);
ssize_t __wrap_read(int fd, void *buf, size_t n);
ssize_t __wrap_recv(int fd, void *buf, size_t n, int flags);
ssize_t __wrap_send(int fd, const void *buf, size_t n, int flags);

static atomic_bool armed;
static atomic_ulong calls, failed, io_calls, sends;
static unsigned long every = 11, send_every;
static bool short_io;

/* Appends v in decimal (async-signal-safe, unlike snprintf). */
static char *put_number(char *p, unsigned long v)
{
    char digits[24];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    while (n > 0)
        *p++ = digits[--n];
    return p;
}

static char *put_text(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

/* "dyad-fault PID: F of A allocations failed" on stderr, from a signal handler or at exit. */
static void report(void)
{
    char line[128], *p = line;
    p = put_text(p, "dyad-fault ");
    p = put_number(p, (unsigned long)getpid());
    p = put_text(p, ": ");
    p = put_number(p, atomic_load(&failed));
    p = put_text(p, " of ");
    p = put_number(p, atomic_load(&calls));
    p = put_text(p, " allocations failed\n");
    if (write(2, line, (size_t)(p - line)) < 0)
        return;
}

/* SIGUSR2: faults on, or off with the counts so far reported (workers often end without
 * running atexit handlers). */
static void toggle(int sig)
{
    (void)sig;
    bool was = atomic_load(&armed);
    atomic_store(&armed, !was);
    if (was)
        report();
}

__attribute__((constructor)) static void fault_init(void)
{
    const char *e = getenv("DYAD_FAULT_EVERY");
    if (e && atoi(e) >= 0)
        every = (unsigned long)atoi(e);
    const char *io = getenv("DYAD_FAULT_SHORT_IO");
    short_io = io && atoi(io) > 0;
    const char *se = getenv("DYAD_FAULT_SEND_EVERY");
    if (se && atoi(se) > 0)
        send_every = (unsigned long)atoi(se);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = toggle;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    atexit(report);
}

/* True when this allocation is to fail. */
static int fail_now(void)
{
    if (!atomic_load_explicit(&armed, memory_order_relaxed) || every == 0)
        return 0;
    if ((atomic_fetch_add(&calls, 1) + 1) % every != 0)
        return 0;
    atomic_fetch_add(&failed, 1);
    return 1;
}

void *__wrap_malloc(size_t n)
{
    return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
    return fail_now() ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
    return fail_now() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return fail_now() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return fail_now() ? NULL : __real_strndup(s, n);
}

/* The bytes one socket call may move: all of them, or 1 to 7 when short I/O is on. */
static size_t io_size(size_t n)
{
    if (!short_io || !atomic_load_explicit(&armed, memory_order_relaxed) || n <= 1)
        return n;
    size_t k = 1 + atomic_fetch_add(&io_calls, 1) % 7;
    return k < n ? k : n;
}

ssize_t __wrap_read(int fd, void *buf, size_t n)
{
    return __real_read(fd, buf, io_size(n));
}

ssize_t __wrap_recv(int fd, void *buf, size_t n, int flags)
{
    return __real_recv(fd, buf, io_size(n), flags);
}

ssize_t __wrap_send(int fd, const void *buf, size_t n, int flags)
{
    if (send_every && atomic_load_explicit(&armed, memory_order_relaxed) &&
        (atomic_fetch_add(&sends, 1) + 1) % send_every == 0) {
        errno = EPIPE;
        return -1;
    }
    return __real_send(fd, buf, io_size(n), flags);
}
