/* xfer_ucx.c — KV transfer over UCX (see xfer_ucx.h): the sender's endpoint and the
 * receiver's listener thread. Built only where CMake found libucx (DYAD_HAVE_UCX); otherwise
 * every entry point says so. UCX picks its transports from the environment (UCX_TLS: tcp and
 * shared memory on one host, RDMA where the hardware has it). */
#include "serve/worker/xfer_ucx.h"

#include <stdio.h>

#ifndef DYAD_HAVE_UCX

#define NO_UCX "this dyad was built without UCX (libucx-dev was not found when it was " \
               "configured); use --kv-transfer tcp, or install libucx-dev and rebuild"

bool dy_xfer_ucx_built(void)
{
    return false;
}

dy_xfer_ucx_tx *dy_xfer_ucx_connect(const char *peer, char *err, size_t errlen)
{
    (void)peer;
    snprintf(err, errlen, NO_UCX);
    return NULL;
}

void dy_xfer_ucx_disconnect(dy_xfer_ucx_tx *t)
{
    (void)t;
}

int dy_xfer_ucx_send(dy_xfer_ucx_tx *t, const dy_xfer_frame *hdrs, const void *const *blocks,
                     int n, size_t bb, char *err, size_t errlen)
{
    (void)t, (void)hdrs, (void)blocks, (void)n, (void)bb;
    snprintf(err, errlen, NO_UCX);
    return -1;
}

dy_xfer_ucx_rx *dy_xfer_ucx_listen(dy_xfer_rx *rx, const char *host, int port, char *addr,
                                   size_t addrlen, char *err, size_t errlen)
{
    (void)rx, (void)host, (void)port, (void)addr, (void)addrlen;
    snprintf(err, errlen, NO_UCX);
    return NULL;
}

void dy_xfer_ucx_stop(dy_xfer_ucx_rx *u)
{
    (void)u;
}

#else

#include "util/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#define AM_BLOCK 1          /* the active message id of a KV block */
#define CONNECT_TIMEOUT_S 5 /* a receiver that does not answer by then is unreachable */
#define STALL_TIMEOUT_S 10  /* a send with no block completed for this long fails */
#define MAX_EPS 64

/* The status a refusal sends back, per reason (the sender names the reason from it). */
#define REFUSE_MISMATCH UCS_ERR_UNSUPPORTED
#define REFUSE_UNEXPECTED UCS_ERR_REJECTED
#define REFUSE_BAD UCS_ERR_INVALID_PARAM

bool dy_xfer_ucx_built(void)
{
    return true;
}

/* A context and worker of their own, with a wake-up fd so waits sleep instead of spinning. */
static int make_worker(ucp_context_h *ctx, ucp_worker_h *w, int *efd, char *err, size_t errlen)
{
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                      .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP, .name = "dyad-kv"};
    ucs_status_t s = ucp_init(&p, NULL, ctx);
    if (s != UCS_OK) {
        snprintf(err, errlen, "UCX: ucp_init: %s", ucs_status_string(s));
        *ctx = NULL;
        return -1;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((s = ucp_worker_create(*ctx, &wp, w)) != UCS_OK ||
        (s = ucp_worker_get_efd(*w, efd)) != UCS_OK) {
        snprintf(err, errlen, "UCX: worker: %s", ucs_status_string(s));
        if (s != UCS_OK && *w)
            ucp_worker_destroy(*w);
        *w = NULL;
        ucp_cleanup(*ctx);
        *ctx = NULL;
        return -1;
    }
    return 0;
}

/* Progresses w; when it had nothing to do, sleeps on its fd (or extra, if >= 0) for up to ms.
 * Returns whether extra became readable. */
static bool progress_or_wait(ucp_worker_h w, int efd, int extra, int ms)
{
    if (ucp_worker_progress(w))
        return false;
    if (ucp_worker_arm(w) == UCS_ERR_BUSY)
        return false;
    struct pollfd pf[2] = {{efd, POLLIN, 0}, {extra, POLLIN, 0}};
    return poll(pf, extra >= 0 ? 2 : 1, ms) > 0 && extra >= 0 && pf[1].revents;
}

/* Waits for a request (a status pointer of a _nbx call) to finish, up to timeout_s. */
static ucs_status_t wait_request(ucp_worker_h w, int efd, ucs_status_ptr_t r, double timeout_s)
{
    if (r == NULL)
        return UCS_OK;
    if (UCS_PTR_IS_ERR(r))
        return UCS_PTR_STATUS(r);
    double end = dy_now() + timeout_s;
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS && dy_now() < end)
        progress_or_wait(w, efd, -1, 1);
    if (s == UCS_INPROGRESS)
        ucp_request_cancel(w, r);
    ucp_request_free(r);
    return s == UCS_INPROGRESS ? UCS_ERR_TIMED_OUT : s;
}

/* Closes an endpoint: gracefully when it is healthy, otherwise (or when that takes long) by
 * force. */
static void close_ep(ucp_worker_h w, int efd, ucp_ep_h ep, bool failed)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = failed ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    if (wait_request(w, efd, ucp_ep_close_nbx(ep, &p), 1) == UCS_ERR_TIMED_OUT && !failed) {
        p.flags = UCP_EP_CLOSE_FLAG_FORCE;
        wait_request(w, efd, ucp_ep_close_nbx(ep, &p), 1);
    }
}

/* Whether a is one of this host's IPv4 addresses (in this network namespace). */
static bool is_local(const struct sockaddr *a)
{
    if (a->sa_family != AF_INET)
        return false;
    const struct in_addr ip = ((const struct sockaddr_in *)a)->sin_addr;
    if ((ntohl(ip.s_addr) >> 24) == 127)
        return true;
    struct ifaddrs *ifs = NULL;
    bool local = false;
    if (getifaddrs(&ifs) != 0)
        return false;
    for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next)
        local = i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == ip.s_addr;
    freeifaddrs(ifs);
    return local;
}

/* How an endpoint to a peer at a handles failures. Between hosts UCX reports a peer that
 * died or went away (PEER). On one host that mode rules out UCX's shared-memory transports
 * (in 1.13 they cannot detect a dead peer), which move blocks with one copy instead of
 * through loopback TCP; there a dead peer shows as a send that stalls (STALL_TIMEOUT_S).
 * Both ends decide from the other's address, so they agree. */
static ucp_err_handling_mode_t err_mode_for(const struct sockaddr *a)
{
    return is_local(a) ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
}

static int parse_addr(const char *hostport, struct sockaddr_in *a, char *err, size_t errlen)
{
    struct addrinfo *ai = NULL;
    if (dy_xfer_resolve(hostport, AF_INET, &ai, err, errlen) != 0)
        return -1;
    memcpy(a, ai->ai_addr, sizeof *a);
    freeaddrinfo(ai);
    return 0;
}

/* ---------------------------------------------------------------- sender */

typedef struct send_state send_state;

struct dy_xfer_ucx_tx {
    char name[DY_WIRE_MAX_PEER + 1];
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd;
    ucp_ep_h ep;
    ucs_status_t failed; /* set by the endpoint's error handler */
    send_state *abandoned;
};

typedef struct {
    send_state *st;
    int index;
} send_slot;

/* One send's blocks in flight: on the heap, because a send UCX never completes (a peer on
 * this host that died, err_mode_for) leaves it referenced until the worker goes. */
struct send_state {
    int pending;         /* blocks in flight */
    ucs_status_t first;  /* the first failure, or UCS_OK */
    int first_index;     /* its block */
    double last_done;    /* when a block last completed */
    send_state *next;    /* abandoned sends, freed with the worker */
    dy_xfer_frame *hdrs; /* the headers, as long as UCX may read them */
    send_slot slots[];
};

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    dy_xfer_ucx_tx *t = arg;
    t->failed = status;
}

void dy_xfer_ucx_disconnect(dy_xfer_ucx_tx *t)
{
    if (!t)
        return;
    if (t->ep)
        close_ep(t->worker, t->efd, t->ep, t->failed != UCS_OK);
    if (t->worker)
        ucp_worker_destroy(t->worker);
    if (t->ctx)
        ucp_cleanup(t->ctx);
    while (t->abandoned) {
        send_state *next = t->abandoned->next;
        free(t->abandoned->hdrs);
        free(t->abandoned);
        t->abandoned = next;
    }
    free(t);
}

dy_xfer_ucx_tx *dy_xfer_ucx_connect(const char *peer, char *err, size_t errlen)
{
    struct sockaddr_in a;
    if (parse_addr(peer, &a, err, errlen) != 0)
        return NULL;
    dy_xfer_ucx_tx *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(t->name, sizeof t->name, "%s", peer);
    if (make_worker(&t->ctx, &t->worker, &t->efd, err, errlen) != 0) {
        free(t);
        return NULL;
    }
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
        .sockaddr = {(const struct sockaddr *)&a, sizeof a},
        .err_mode = err_mode_for((const struct sockaddr *)&a),
        .err_handler = {on_ep_error, t},
    };
    ucs_status_t s = ucp_ep_create(t->worker, &ep, &t->ep);
    if (s == UCS_OK) {
        /* The connection is made in the background: a flush completes once it is up, or
         * fails when the receiver refuses or cannot be reached. */
        ucp_request_param_t fp = {0};
        s = wait_request(t->worker, t->efd, ucp_ep_flush_nbx(t->ep, &fp), CONNECT_TIMEOUT_S);
        if (s == UCS_OK && t->failed != UCS_OK)
            s = t->failed;
    } else
        t->ep = NULL;
    if (s != UCS_OK) {
        char why[64] = "";
        if (s == UCS_ERR_TIMED_OUT)
            snprintf(why, sizeof why, " (no answer within %d s)", CONNECT_TIMEOUT_S);
        snprintf(err, errlen, "cannot connect to UCX KV receiver %s: %s%s", peer,
                 ucs_status_string(s), why);
        t->failed = s;
        dy_xfer_ucx_disconnect(t);
        return NULL;
    }
    return t;
}

static void on_sent(void *request, ucs_status_t status, void *user)
{
    send_slot *slot = user;
    send_state *st = slot->st;
    if (status != UCS_OK && st->first == UCS_OK) {
        st->first = status;
        st->first_index = slot->index;
    }
    st->pending--;
    st->last_done = dy_now();
    ucp_request_free(request);
}

static void refusal_message(const dy_xfer_ucx_tx *t, const dy_xfer_frame *h, ucs_status_t s,
                            char *err, size_t errlen)
{
    if (s == REFUSE_MISMATCH)
        snprintf(err, errlen, "UCX KV receiver %s refused a %s block of %u bytes: its pool "
                 "holds other blocks (every worker of a deployment needs the same --kv-type "
                 "and --block-size; its log names them)", t->name,
                 dy_kv_type_name((dy_kv_type)h->kv_type), h->nbytes);
    else if (s == REFUSE_UNEXPECTED)
        snprintf(err, errlen, "UCX KV receiver %s refused block %d for sequence %llu: it does "
                 "not expect that block", t->name, h->dst, (unsigned long long)h->seq_id);
    else
        snprintf(err, errlen, "sending to UCX KV receiver %s: %s", t->name,
                 ucs_status_string(s));
}

/* Starts every block's send; stops at the first that fails to start. */
static void start_sends(dy_xfer_ucx_tx *t, send_state *st, const void *const *blocks, int n,
                        size_t bb)
{
    for (int i = 0; i < n; i++) {
        st->slots[i] = (send_slot){st, i};
        /* Rendezvous: the receiver pulls the block into place, and the send completes only
         * then (or with the receiver's refusal). */
        ucp_request_param_t p = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                            UCP_OP_ATTR_FIELD_FLAGS,
            .flags = UCP_AM_SEND_FLAG_RNDV, .cb.send = on_sent, .user_data = &st->slots[i]};
        ucs_status_ptr_t r = ucp_am_send_nbx(t->ep, AM_BLOCK, &st->hdrs[i], sizeof st->hdrs[i],
                                             blocks[i], bb, &p);
        if (UCS_PTR_IS_ERR(r)) {
            st->first = UCS_PTR_STATUS(r);
            st->first_index = i;
            return;
        }
        if (UCS_PTR_IS_PTR(r))
            st->pending++;
    }
}

/* The receiver went away or stalled: the endpoint is closed by force, which completes the
 * blocks still in flight with an error, except where UCX cannot tell (err_mode_for); then
 * st stays with t. Returns whether st may be freed. */
static bool give_up(dy_xfer_ucx_tx *t, send_state *st)
{
    ucs_status_t why = t->failed != UCS_OK ? t->failed : UCS_ERR_TIMED_OUT;
    close_ep(t->worker, t->efd, t->ep, true);
    t->ep = NULL;
    t->failed = why;
    for (double end = dy_now() + 1; st->pending > 0 && dy_now() < end;)
        progress_or_wait(t->worker, t->efd, -1, 1);
    if (st->first == UCS_OK || st->first == UCS_ERR_CANCELED) {
        st->first = why;
        st->first_index = -1;
    }
    if (st->pending == 0)
        return true;
    st->next = t->abandoned;
    t->abandoned = st;
    return false;
}

int dy_xfer_ucx_send(dy_xfer_ucx_tx *t, const dy_xfer_frame *hdrs, const void *const *blocks,
                     int n, size_t bb, char *err, size_t errlen)
{
    if (t->failed != UCS_OK || !t->ep) {
        snprintf(err, errlen, "UCX KV receiver %s: %s (the connection needs reopening)",
                 t->name, ucs_status_string(t->failed));
        return -1;
    }
    send_state *st = calloc(1, sizeof *st + sizeof st->slots[0] * (size_t)(n ? n : 1));
    if (st)
        st->hdrs = malloc(sizeof *hdrs * (size_t)(n ? n : 1));
    if (!st || !st->hdrs) {
        free(st);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(st->hdrs, hdrs, sizeof *hdrs * (size_t)n);
    st->first = UCS_OK;
    st->first_index = -1;
    st->last_done = dy_now();
    start_sends(t, st, blocks, n, bb);
    while (st->pending > 0 && t->failed == UCS_OK && dy_now() - st->last_done < STALL_TIMEOUT_S)
        progress_or_wait(t->worker, t->efd, -1, 1);
    bool own = st->pending == 0 || give_up(t, st);
    const ucs_status_t first = st->first;
    const dy_xfer_frame h = hdrs[st->first_index >= 0 ? st->first_index : 0];
    if (own) {
        free(st->hdrs);
        free(st);
    }
    if (first == UCS_OK)
        return 0;
    if (first == UCS_ERR_TIMED_OUT)
        snprintf(err, errlen, "UCX KV receiver %s took no block for %d s", t->name,
                 STALL_TIMEOUT_S);
    else
        refusal_message(t, &h, first, err, errlen);
    return -1;
}

/* ---------------------------------------------------------------- receiver */

typedef struct {
    ucp_ep_h ep;
    bool failed;   /* closed by the thread's loop, outside UCX's callbacks */
    uint64_t age;  /* when it connected, in connections */
} rx_ep;

typedef struct {
    dy_xfer_ucx_rx *u;
    dy_xfer_frame h;
} rx_pending;

struct dy_xfer_ucx_rx {
    dy_xfer_rx *rx;
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd, wake[2];
    ucp_listener_h listener;
    pthread_t thread;
    bool running;
    rx_ep eps[2 * MAX_EPS]; /* up to MAX_EPS live, and failed ones not yet closed */
    int n_eps;
    uint64_t n_connected;
};

static void on_rx_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)status;
    dy_xfer_ucx_rx *u = arg;
    for (int i = 0; i < u->n_eps; i++)
        if (u->eps[i].ep == ep)
            u->eps[i].failed = true; /* closed by the thread's loop, outside the callback */
}

static void on_conn_request(ucp_conn_request_h req, void *arg)
{
    dy_xfer_ucx_rx *u = arg;
    ucp_conn_request_attr_t ca = {.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};
    if (ucp_conn_request_query(req, &ca) != UCS_OK) {
        ucp_listener_reject(u->listener, req);
        return;
    }
    int live = 0, oldest = -1;
    for (int i = 0; i < u->n_eps; i++)
        if (!u->eps[i].failed) {
            live++;
            oldest = oldest < 0 || u->eps[i].age < u->eps[oldest].age ? i : oldest;
        }
    if (u->n_eps == 2 * MAX_EPS) {
        fprintf(stderr, "dyad worker: UCX KV receiver: too many senders; refusing another\n");
        ucp_listener_reject(u->listener, req);
        return;
    }
    if (live >= MAX_EPS) /* senders on this host that died are not reported (err_mode_for): */
        u->eps[oldest].failed = true; /* the oldest endpoint makes room */
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .conn_request = req,
        .err_mode = err_mode_for((const struct sockaddr *)&ca.client_address),
        .err_handler = {on_rx_ep_error, u},
    };
    ucp_ep_h ep;
    if (ucp_ep_create(u->worker, &p, &ep) == UCS_OK)
        u->eps[u->n_eps++] = (rx_ep){ep, false, u->n_connected++};
}

static void on_received(void *request, ucs_status_t status, size_t length, void *user)
{
    (void)length;
    rx_pending *pd = user;
    if (status == UCS_OK)
        dy_xfer_rx_done(pd->u->rx, &pd->h);
    else
        fprintf(stderr, "dyad worker: UCX KV receiver: block %d for sequence %llu: %s\n",
                pd->h.dst, (unsigned long long)pd->h.seq_id, ucs_status_string(status));
    free(pd);
    ucp_request_free(request);
}

/* One block's active message: admitted (its bytes received into the destination block) or
 * refused, its status then completing the sender's send. */
static ucs_status_t on_block(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    dy_xfer_ucx_rx *u = arg;
    dy_xfer_frame h;
    const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
    if (header_length != sizeof h) {
        fprintf(stderr, "dyad worker: UCX KV receiver: a message with a %zu-byte header (not "
                "a KV frame); refused\n", header_length);
        return rndv ? REFUSE_BAD : UCS_OK;
    }
    memcpy(&h, header, sizeof h);
    uint8_t *dst = NULL;
    dy_xfer_admit a = length == h.nbytes ? dy_xfer_rx_admit(u->rx, &h, &dst)
                                         : DY_XFER_ADMIT_MISMATCH;
    if (a == DY_XFER_ADMIT_MISMATCH && length != h.nbytes)
        fprintf(stderr, "dyad worker: UCX KV receiver: a frame of %u bytes carrying %zu; "
                "refused\n", h.nbytes, length);
    if (a != DY_XFER_ADMIT_OK)
        return !rndv ? UCS_OK : a == DY_XFER_ADMIT_MISMATCH ? REFUSE_MISMATCH
                              : a == DY_XFER_ADMIT_UNEXPECTED ? REFUSE_UNEXPECTED : REFUSE_BAD;
    if (!rndv) { /* a small block sent eagerly: its bytes are here already */
        memcpy(dst, data, length);
        dy_xfer_rx_done(u->rx, &h);
        return UCS_OK;
    }
    rx_pending *pd = malloc(sizeof *pd);
    if (!pd)
        return UCS_ERR_NO_MEMORY;
    *pd = (rx_pending){u, h};
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.recv_am = on_received, .user_data = pd};
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(u->worker, data, dst, length, &p);
    if (r == NULL) {
        dy_xfer_rx_done(u->rx, &h);
        free(pd);
    } else if (UCS_PTR_IS_ERR(r)) {
        fprintf(stderr, "dyad worker: UCX KV receiver: receiving block %d: %s\n", h.dst,
                ucs_status_string(UCS_PTR_STATUS(r)));
        free(pd);
    }
    return UCS_INPROGRESS; /* UCX owns the data descriptor from ucp_am_recv_data_nbx on */
}

static void close_failed_eps(dy_xfer_ucx_rx *u)
{
    for (int i = u->n_eps - 1; i >= 0; i--)
        if (u->eps[i].failed) {
            ucp_ep_h ep = u->eps[i].ep;
            u->eps[i] = u->eps[--u->n_eps];
            close_ep(u->worker, u->efd, ep, true);
        }
}

static void *rx_main(void *arg)
{
    dy_xfer_ucx_rx *u = arg;
    for (;;) {
        if (progress_or_wait(u->worker, u->efd, u->wake[0], 100))
            return NULL;
        close_failed_eps(u);
    }
}

void dy_xfer_ucx_stop(dy_xfer_ucx_rx *u)
{
    if (!u)
        return;
    if (u->running && write(u->wake[1], "x", 1) == 1)
        pthread_join(u->thread, NULL);
    if (u->listener)
        ucp_listener_destroy(u->listener);
    for (int i = 0; i < u->n_eps; i++)
        close_ep(u->worker, u->efd, u->eps[i].ep, true);
    if (u->worker)
        ucp_worker_destroy(u->worker);
    if (u->ctx)
        ucp_cleanup(u->ctx);
    for (int i = 0; i < 2; i++)
        if (u->wake[i] >= 0)
            close(u->wake[i]);
    free(u);
}

dy_xfer_ucx_rx *dy_xfer_ucx_listen(dy_xfer_rx *rx, const char *host, int port, char *addr,
                                   size_t addrlen, char *err, size_t errlen)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        snprintf(err, errlen, "UCX KV receiver on %s:%d: not an IPv4 address", host, port);
        return NULL;
    }
    dy_xfer_ucx_rx *u = calloc(1, sizeof *u);
    if (!u) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    u->rx = rx;
    u->wake[0] = u->wake[1] = -1;
    if (make_worker(&u->ctx, &u->worker, &u->efd, err, errlen) != 0 ||
        pipe2(u->wake, O_CLOEXEC) != 0) {
        if (u->ctx)
            snprintf(err, errlen, "UCX KV receiver: pipe: %s", strerror(errno));
        dy_xfer_ucx_stop(u);
        return NULL;
    }
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = AM_BLOCK, .cb = on_block, .arg = u};
    ucp_listener_params_t lp = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {(const struct sockaddr *)&a, sizeof a},
        .conn_handler = {on_conn_request, u}};
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    ucs_status_t s = ucp_worker_set_am_recv_handler(u->worker, &hp);
    if (s == UCS_OK && (s = ucp_listener_create(u->worker, &lp, &u->listener)) != UCS_OK)
        u->listener = NULL;
    if (s == UCS_OK)
        s = ucp_listener_query(u->listener, &la);
    if (s != UCS_OK) {
        snprintf(err, errlen, "UCX KV receiver on %s:%d: %s", host, port, ucs_status_string(s));
        dy_xfer_ucx_stop(u);
        return NULL;
    }
    snprintf(addr, addrlen, "%s:%d", host, ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port));
    if (pthread_create(&u->thread, NULL, rx_main, u) != 0) {
        snprintf(err, errlen, "cannot start the UCX KV receiver thread");
        dy_xfer_ucx_stop(u);
        return NULL;
    }
    u->running = true;
    return u;
}

#endif
