/* xfer_rx.c — the receiving side of KV transfer (see xfer.h): the expectations every
 * backend checks a block against, and the TCP receiver. Its thread polls the listening socket
 * and every peer connection; each connection reads a frame header, checks that its sequence
 * expects that destination block, then reads the block's bytes straight into the pool. A
 * frame that breaks the rules closes that connection. The UCX receiver (xfer_ucx.c) has a
 * thread of its own and applies the same rules (dy_xfer_rx_admit). */
#include "serve/worker/xfer.h"
#include "serve/wire/xfer_frame.h"
#include "serve/worker/xfer_ucx.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 64

typedef struct {
    uint64_t seq_id;
    int32_t *blocks;
    bool *got;
    int n, received;
} expectation;

typedef struct {
    int fd;
    dy_xfer_frame hdr;
    size_t hdr_got;      /* header bytes read so far */
    uint8_t *dst;        /* where the body goes, once the header is accepted */
    size_t body_got;
} conn;

struct dy_xfer_rx {
    dy_kv_pool *pool;
    dy_xfer_ucx_rx *ucx; /* the UCX receiver, or NULL for TCP */
    int listen_fd, wake[2];
    char addr[DY_WIRE_MAX_PEER + 1];
    pthread_t thread;
    pthread_mutex_t mu; /* guards exps */
    expectation *exps;
    int n_exps, cap_exps;
    conn conns[MAX_CONNS];
    int n_conns;
};

/* ---------------------------------------------------------------- expectations */

static int find_exp(dy_xfer_rx *rx, uint64_t id)
{
    for (int i = 0; i < rx->n_exps; i++)
        if (rx->exps[i].seq_id == id)
            return i;
    return -1;
}

void dy_xfer_rx_expect(dy_xfer_rx *rx, uint64_t seq_id, const int32_t *blocks, int n)
{
    pthread_mutex_lock(&rx->mu);
    if (rx->n_exps == rx->cap_exps) {
        int cap = rx->cap_exps ? rx->cap_exps * 2 : 16;
        expectation *e = realloc(rx->exps, sizeof *e * (size_t)cap);
        if (!e) {
            pthread_mutex_unlock(&rx->mu);
            return; /* the transfer will be refused and time out into local prefill */
        }
        rx->exps = e;
        rx->cap_exps = cap;
    }
    expectation *e = &rx->exps[rx->n_exps];
    e->seq_id = seq_id;
    e->n = n;
    e->received = 0;
    e->blocks = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    e->got = calloc((size_t)(n ? n : 1), sizeof(bool));
    if (e->blocks && e->got) {
        memcpy(e->blocks, blocks, sizeof(int32_t) * (size_t)n);
        rx->n_exps++;
    } else {
        free(e->blocks);
        free(e->got);
    }
    pthread_mutex_unlock(&rx->mu);
}

int dy_xfer_rx_received(dy_xfer_rx *rx, uint64_t seq_id)
{
    pthread_mutex_lock(&rx->mu);
    int i = find_exp(rx, seq_id), n = i >= 0 ? rx->exps[i].received : 0;
    pthread_mutex_unlock(&rx->mu);
    return n;
}

void dy_xfer_rx_forget(dy_xfer_rx *rx, uint64_t seq_id)
{
    pthread_mutex_lock(&rx->mu);
    int i = find_exp(rx, seq_id);
    if (i >= 0) {
        free(rx->exps[i].blocks);
        free(rx->exps[i].got);
        rx->exps[i] = rx->exps[--rx->n_exps];
        /* A connection mid-way through a block of this sequence finishes writing it; the
         * block stays owned by the sequence on the decode worker until it ends. */
    }
    pthread_mutex_unlock(&rx->mu);
}

/* ---------------------------------------------------------------- connections */

static void drop_conn(dy_xfer_rx *rx, int c)
{
    close(rx->conns[c].fd);
    rx->conns[c] = rx->conns[--rx->n_conns];
}

/* The index of dst among the blocks its sequence expects and has not received, or -1.
 * Call with mu held. */
static int expected_block(dy_xfer_rx *rx, uint64_t seq_id, int32_t dst, int *e)
{
    *e = find_exp(rx, seq_id);
    if (*e >= 0)
        for (int i = 0; i < rx->exps[*e].n; i++)
            if (rx->exps[*e].blocks[i] == dst && !rx->exps[*e].got[i])
                return i;
    return -1;
}

dy_xfer_admit dy_xfer_rx_admit(dy_xfer_rx *rx, const dy_xfer_frame *h, uint8_t **dst)
{
    if (h->magic != DY_XFER_MAGIC) {
        fprintf(stderr, "dyad worker: KV receiver: a frame without the KV magic; refused\n");
        return DY_XFER_ADMIT_BAD_MAGIC;
    }
    if (h->kv_type != (uint32_t)rx->pool->type || h->nbytes != dy_kv_block_bytes(rx->pool)) {
        const char *t = dy_kv_type_name((dy_kv_type)h->kv_type);
        fprintf(stderr, "dyad worker: KV receiver: refusing a %s block of %u bytes: this pool "
                "holds %s blocks of %zu bytes (every worker of a deployment needs the same "
                "--kv-type and --block-size)\n", t ? t : "unknown-type", h->nbytes,
                dy_kv_type_name(rx->pool->type), dy_kv_block_bytes(rx->pool));
        return DY_XFER_ADMIT_MISMATCH;
    }
    int e;
    pthread_mutex_lock(&rx->mu);
    int b = expected_block(rx, h->seq_id, h->dst, &e);
    pthread_mutex_unlock(&rx->mu);
    if (b < 0) {
        fprintf(stderr, "dyad worker: KV receiver: unexpected block %d for sequence %llu; "
                "refused\n", h->dst, (unsigned long long)h->seq_id);
        return DY_XFER_ADMIT_UNEXPECTED;
    }
    *dst = dy_kv_block_data(rx->pool, h->dst);
    return DY_XFER_ADMIT_OK;
}

void dy_xfer_rx_done(dy_xfer_rx *rx, const dy_xfer_frame *h)
{
    int e;
    pthread_mutex_lock(&rx->mu);
    int b = expected_block(rx, h->seq_id, h->dst, &e);
    if (b >= 0) {
        rx->exps[e].got[b] = true;
        rx->exps[e].received++;
    }
    pthread_mutex_unlock(&rx->mu);
}

/* Accepts a header (a refused one closes the connection: dy_xfer_rx_admit said why). */
static bool accept_header(dy_xfer_rx *rx, conn *k)
{
    if (dy_xfer_rx_admit(rx, &k->hdr, &k->dst) != DY_XFER_ADMIT_OK) {
        k->dst = NULL;
        return false;
    }
    k->body_got = 0;
    return true;
}

static void block_done(dy_xfer_rx *rx, conn *k)
{
    dy_xfer_rx_done(rx, &k->hdr);
    k->hdr_got = 0;
    k->dst = NULL;
}

/* Reads what the connection has; false when it must be closed. */
static bool read_conn(dy_xfer_rx *rx, conn *k)
{
    for (;;) {
        ssize_t n;
        if (!k->dst) {
            n = recv(k->fd, (uint8_t *)&k->hdr + k->hdr_got, sizeof k->hdr - k->hdr_got, MSG_DONTWAIT);
            if (n > 0 && (k->hdr_got += (size_t)n) == sizeof k->hdr && !accept_header(rx, k))
                return false; /* accept_header said why */
        } else {
            n = recv(k->fd, k->dst + k->body_got, k->hdr.nbytes - k->body_got, MSG_DONTWAIT);
            if (n > 0 && (k->body_got += (size_t)n) == k->hdr.nbytes)
                block_done(rx, k);
        }
        if (n == 0)
            return false;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
}

static void *rx_main(void *arg)
{
    dy_xfer_rx *rx = arg;
    for (;;) {
        struct pollfd pf[MAX_CONNS + 2];
        pf[0] = (struct pollfd){rx->wake[0], POLLIN, 0};
        pf[1] = (struct pollfd){rx->listen_fd, POLLIN, 0};
        for (int c = 0; c < rx->n_conns; c++)
            pf[c + 2] = (struct pollfd){rx->conns[c].fd, POLLIN, 0};
        int n = rx->n_conns;
        if (poll(pf, (nfds_t)n + 2, -1) < 0)
            continue;
        if (pf[0].revents)
            return NULL;
        for (int c = n - 1; c >= 0; c--)
            if (pf[c + 2].revents && !read_conn(rx, &rx->conns[c]))
                drop_conn(rx, c);
        if (pf[1].revents & POLLIN) {
            int fd = accept4(rx->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0 && rx->n_conns < MAX_CONNS)
                rx->conns[rx->n_conns++] = (conn){.fd = fd};
            else if (fd >= 0)
                close(fd);
        }
    }
}

/* ---------------------------------------------------------------- lifetime */

/* The UCX receiver: its own listener and thread (xfer_ucx.c). */
static dy_xfer_rx *start_ucx(dy_xfer_rx *rx, const char *host, int port, char *err,
                             size_t errlen)
{
    rx->listen_fd = -1;
    if (!(rx->ucx = dy_xfer_ucx_listen(rx, host, port, rx->addr, sizeof rx->addr, err,
                                       errlen))) {
        dy_xfer_rx_stop(rx);
        return NULL;
    }
    return rx;
}

dy_xfer_rx *dy_xfer_rx_start(dy_xfer_kind kind, dy_kv_pool *pool, const char *host, int port,
                             char *err, size_t errlen)
{
    dy_xfer_rx *rx = calloc(1, sizeof *rx);
    if (!rx) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    rx->pool = pool;
    rx->wake[0] = rx->wake[1] = -1;
    pthread_mutex_init(&rx->mu, NULL);
    if (kind == DY_XFER_UCX)
        return start_ucx(rx, host, port, err, errlen);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1;
    rx->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rx->listen_fd < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
        setsockopt(rx->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(rx->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(rx->listen_fd, 16) != 0 ||
        pipe2(rx->wake, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "KV receiver on %s:%d: %s", host, port, strerror(errno));
        dy_xfer_rx_stop(rx);
        return NULL;
    }
    socklen_t len = sizeof a;
    getsockname(rx->listen_fd, (struct sockaddr *)&a, &len);
    snprintf(rx->addr, sizeof rx->addr, "%s:%d", host, ntohs(a.sin_port));
    if (pthread_create(&rx->thread, NULL, rx_main, rx) != 0) {
        snprintf(err, errlen, "cannot start the KV receiver thread");
        close(rx->wake[1]);
        rx->wake[1] = -1;
        dy_xfer_rx_stop(rx);
        return NULL;
    }
    return rx;
}

void dy_xfer_rx_stop(dy_xfer_rx *rx)
{
    if (!rx)
        return;
    dy_xfer_ucx_stop(rx->ucx); /* its thread ends before the expectations go */
    if (rx->wake[1] >= 0) {
        if (write(rx->wake[1], "x", 1) == 1)
            pthread_join(rx->thread, NULL);
        close(rx->wake[1]);
    }
    if (rx->wake[0] >= 0)
        close(rx->wake[0]);
    for (int c = 0; c < rx->n_conns; c++)
        close(rx->conns[c].fd);
    if (rx->listen_fd >= 0)
        close(rx->listen_fd);
    for (int i = 0; i < rx->n_exps; i++) {
        free(rx->exps[i].blocks);
        free(rx->exps[i].got);
    }
    free(rx->exps);
    pthread_mutex_destroy(&rx->mu);
    free(rx);
}

const char *dy_xfer_rx_addr(const dy_xfer_rx *rx)
{
    return rx->addr;
}
