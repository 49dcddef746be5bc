/* wire_io.h — frames over a socket: a receive buffer that yields whole frames as bytes
 * arrive, and a write that delivers a whole buffer. */
#ifndef DYAD_WIRE_IO_H
#define DYAD_WIRE_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "serve/wire/wire.h"

typedef struct {
    int fd;
    uint8_t *buf;
    size_t len, cap, consumed;
} dy_conn;

void dy_conn_init(dy_conn *c, int fd);
void dy_conn_free(dy_conn *c);
/* Reads what the socket has (one read call; blocks only if the fd is blocking). Returns the
 * bytes read, 0 at end of stream, -1 on error (EAGAIN counts as 1: nothing yet, no error). */
long dy_conn_fill(dy_conn *c);
typedef enum {
    DY_CONN_FRAME = 1,    /* a whole frame: type and payload set (valid until the next fill) */
    DY_CONN_PARTIAL = 0,  /* no whole frame yet: fill again */
    DY_CONN_CORRUPT = -1, /* the stream is corrupt (message in err): drop the connection */
} dy_conn_result;

/* Bytes received and not yet taken as frames (a frame may be waiting without a new read). */
bool dy_conn_pending(const dy_conn *c);
/* The next whole frame in the buffer. */
dy_conn_result dy_conn_next(dy_conn *c, dy_msg_type *type, const uint8_t **payload, uint32_t *len,
                 char *err, size_t errlen);
/* Writes all n bytes (waiting on a non-blocking fd). false on error or a closed peer. */
bool dy_write_all(int fd, const void *p, size_t n);
/* The same, giving up when the peer has taken nothing for timeout_s seconds (> 0; errno is
 * then ETIMEDOUT and part of the buffer may have gone: the stream is no longer usable). Works
 * on a blocking fd too. */
bool dy_write_all_within(int fd, const void *p, size_t n, double timeout_s);

/* Reads whole frames off the blocking fd until its end (or an error), calling each(ctx, type,
 * frame, len) for every frame, header included (frame[0..len)). Returns false if the stream
 * turned out corrupt, with the reason in err; true at a plain end. */
bool dy_conn_pump(int fd, void (*each)(void *ctx, dy_msg_type t, const uint8_t *frame, size_t len),
                  void *ctx, char *err, size_t errlen);

#endif
