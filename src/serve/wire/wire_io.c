/* wire_io.c — see wire_io.h. */
#include "serve/wire/wire_io.h"
#include "util/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void dy_conn_init(dy_conn *c, int fd)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
}

void dy_conn_free(dy_conn *c)
{
    free(c->buf);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

long dy_conn_fill(dy_conn *c)
{
    /* Drop consumed frames first so the buffer does not grow without bound. */
    if (c->consumed) {
        memmove(c->buf, c->buf + c->consumed, c->len - c->consumed);
        c->len -= c->consumed;
        c->consumed = 0;
    }
    if (c->cap - c->len < 65536) {
        size_t cap = c->cap ? c->cap * 2 : 131072;
        uint8_t *b = realloc(c->buf, cap);
        if (!b)
            return -1;
        c->buf = b;
        c->cap = cap;
    }
    for (;;) {
        ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (n > 0) {
            c->len += (size_t)n;
            return n;
        }
        if (n == 0)
            return 0;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
    }
}

bool dy_conn_pending(const dy_conn *c)
{
    return c->len > c->consumed;
}

dy_conn_result dy_conn_next(dy_conn *c, dy_msg_type *type, const uint8_t **payload, uint32_t *len,
                 char *err, size_t errlen)
{
    size_t avail = c->len - c->consumed;
    if (avail < DY_WIRE_HEADER)
        return DY_CONN_PARTIAL;
    const uint8_t *h = c->buf + c->consumed;
    if (!dy_wire_header(h, type, len, err, errlen))
        return DY_CONN_CORRUPT;
    if (avail < DY_WIRE_HEADER + (size_t)*len)
        return DY_CONN_PARTIAL;
    *payload = h + DY_WIRE_HEADER;
    c->consumed += DY_WIRE_HEADER + *len;
    return DY_CONN_FRAME;
}

/* Sends without blocking and waits in poll, so that a peer that stops reading can be given
 * up on (timeout_s > 0) instead of holding the writer forever. */
static bool write_all(int fd, const void *p, size_t n, double timeout_s)
{
    const char *s = p;
    double deadline = timeout_s > 0 ? dy_now() + timeout_s : 0;
    while (n > 0) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            s += k;
            n -= (size_t)k;
            if (timeout_s > 0)
                deadline = dy_now() + timeout_s; /* it is reading: the wait starts again */
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (timeout_s > 0 && dy_now() >= deadline) {
                errno = ETIMEDOUT;
                return false;
            }
            struct pollfd pf = {fd, POLLOUT, 0};
            poll(&pf, 1, 100);
        } else
            return false;
    }
    return true;
}

bool dy_write_all(int fd, const void *p, size_t n)
{
    return write_all(fd, p, n, 0);
}

bool dy_write_all_within(int fd, const void *p, size_t n, double timeout_s)
{
    return write_all(fd, p, n, timeout_s);
}

bool dy_conn_pump(int fd, void (*each)(void *ctx, dy_msg_type t, const uint8_t *frame, size_t len),
                  void *ctx, char *err, size_t errlen)
{
    dy_conn conn;
    dy_conn_init(&conn, fd);
    dy_conn_result k = DY_CONN_PARTIAL;
    while (k != DY_CONN_CORRUPT && dy_conn_fill(&conn) > 0) {
        dy_msg_type t;
        const uint8_t *p;
        uint32_t len;
        while ((k = dy_conn_next(&conn, &t, &p, &len, err, errlen)) == DY_CONN_FRAME)
            each(ctx, t, p - DY_WIRE_HEADER, DY_WIRE_HEADER + (size_t)len);
    }
    dy_conn_free(&conn);
    return k != DY_CONN_CORRUPT;
}
