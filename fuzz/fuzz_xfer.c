/* fuzz_xfer.c — libFuzzer target for the TCP KV-transfer receiver (src/serve/worker/xfer_rx.c):
 * a real receiver on loopback, over a small KV pool, expecting the blocks of two sequences as a
 * decode worker does before a remote prefill. Each input is the byte stream one peer connection
 * sends (per-block dy_xfer_frame headers, each followed by the block's bytes); the connection is
 * then closed and the target waits until the receiver has closed its side, so every byte was
 * handled.
 *
 * Beyond "no crash, no leak": the receiver must count exactly the blocks the framing rules
 * admit — read in order, each header needs the magic, the pool's block size and KV type and a
 * block its sequence expects and has not received, and the first header that breaks a rule ends the
 * connection — and each block it counts must hold the bytes sent for it.
 *   ./build-fuzz/fuzz_xfer -max_total_time=600 build-fuzz/corpus-xfer fuzz/corpus-xfer */
#include "harness.h"
#include "kv/kv_pool.h"
#include "serve/wire/xfer_frame.h"
#include "serve/worker/xfer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A pool of 8 blocks of 16 bytes (1 position, 1 layer, keys and values of 2 floats), and what
 * it expects: sequence 7 blocks 1, 2 and 3; sequence 9 block 5. */
enum { N_BLOCKS = 8, N_EXPECTED = 4 };
static const struct {
    uint64_t seq;
    int32_t block;
} EXPECTED[N_EXPECTED] = {{7, 1}, {7, 2}, {7, 3}, {9, 5}};

typedef struct {
    dy_kv_pool *pool;
    dy_xfer_rx *rx;
    struct sockaddr_in addr;
    unsigned connections; /* made so far: picks each one's source address */
} receiver;

static receiver *the_receiver(void)
{
    static receiver r; /* started once: a worker's receiver also outlives its connections */
    if (!r.rx) {
        char err[256];
        r.pool = dy_kv_pool_new(N_BLOCKS, 1, 1, 2);
        fz_check(r.pool != NULL, "no KV pool");
        r.rx = dy_xfer_rx_start(DY_XFER_TCP, r.pool, "127.0.0.1", 0, err, sizeof err);
        fz_check(r.rx != NULL, "the receiver did not start: %s", err);
        const char *a = dy_xfer_rx_addr(r.rx);
        r.addr = (struct sockaddr_in){.sin_family = AF_INET,
                                      .sin_port = htons((uint16_t)atoi(strchr(a, ':') + 1))};
        inet_pton(AF_INET, "127.0.0.1", &r.addr.sin_addr);
    }
    return &r;
}

static void expect_blocks(dy_xfer_rx *rx)
{
    int32_t seq7[] = {1, 2, 3}, seq9[] = {5};
    dy_xfer_rx_forget(rx, 7);
    dy_xfer_rx_forget(rx, 9);
    dy_xfer_rx_expect(rx, 7, seq7, 3);
    dy_xfer_rx_expect(rx, 9, seq9, 1);
}

/* Binds fd to one of 127.0.0.2 … 127.0.0.254 in turn. The receiver closes first, so each
 * connection leaves a TIME_WAIT pair behind for a minute; from a single source address a fast
 * run uses up the ephemeral ports within seconds, from 253 it does not. */
static bool bind_next_source(int fd, receiver *r)
{
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(0x7f000002u + r->connections++ % 253u);
    return bind(fd, (const struct sockaddr *)&src, sizeof src) == 0;
}

/* Sends the stream on one connection and waits for the receiver to close it. */
static void send_stream(receiver *r, const uint8_t *data, size_t size)
{
    /* A connect can fail for the harness's own reasons after a few hundred thousand runs (a
     * source address whose ports are all held by TIME_WAIT pairs, the receiver's backlog):
     * the next source address is tried before the run is called broken. */
    int fd = -1, err = 0;
    for (int attempt = 0; attempt < 253 && fd < 0; attempt++) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        fz_check(fd >= 0, "no socket: %s", strerror(errno));
        if (!bind_next_source(fd, r) ||
            connect(fd, (const struct sockaddr *)&r->addr, sizeof r->addr) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    fz_check(fd >= 0, "cannot connect to the receiver: %s", strerror(err));
    for (size_t off = 0; off < size;) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the receiver refused a header and closed the connection */
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char c;
    while (recv(fd, &c, 1, 0) > 0) {
    }
    close(fd);
}

/* ---------------------------------------------------------------- the framing rules */

static int expected_index(uint64_t seq, int32_t block)
{
    for (int i = 0; i < N_EXPECTED; i++)
        if (EXPECTED[i].seq == seq && EXPECTED[i].block == block)
            return i;
    return -1;
}

/* The blocks the rules admit, each with the offset of its bytes in the stream (where[i], -1
 * for a block not received). */
static int admitted_blocks(const uint8_t *data, size_t size, size_t block_bytes,
                           dy_kv_type pool_type, long where[N_EXPECTED])
{
    int count = 0;
    for (int i = 0; i < N_EXPECTED; i++)
        where[i] = -1;
    for (size_t off = 0; size - off >= sizeof(dy_xfer_frame);) {
        dy_xfer_frame h;
        memcpy(&h, data + off, sizeof h);
        int i = expected_index(h.seq_id, h.dst);
        if (h.magic != DY_XFER_MAGIC || h.nbytes != block_bytes ||
            h.kv_type != (uint32_t)pool_type || i < 0 || where[i] >= 0)
            break;
        off += sizeof h;
        if (size - off < block_bytes)
            break;
        where[i] = (long)off;
        count++;
        off += block_bytes;
    }
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    receiver *r = the_receiver();
    size_t block_bytes = dy_kv_block_bytes(r->pool);
    memset(r->pool->data, 0, r->pool->data_bytes);
    expect_blocks(r->rx);
    send_stream(r, data, size);

    long where[N_EXPECTED];
    int want = admitted_blocks(data, size, block_bytes, r->pool->type, where);
    int got = dy_xfer_rx_received(r->rx, 7) + dy_xfer_rx_received(r->rx, 9);
    fz_check(got == want, "the receiver counted %d blocks; the framing admits %d", got, want);
    for (int i = 0; i < N_EXPECTED; i++)
        if (where[i] >= 0)
            fz_check(!memcmp(dy_kv_keys(r->pool, EXPECTED[i].block, 0), data + where[i], block_bytes),
                     "block %d does not hold the bytes sent for it", EXPECTED[i].block);
    return 0;
}
