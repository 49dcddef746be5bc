/* cmd_bench_xfer.c — `dyad bench xfer`: what moving KV costs. Copies the same blocks with a
 * plain memcpy (the floor), through the shared-memory backend, and over TCP on loopback, and
 * prints GB/s for each; with --listen / --connect the TCP sender and receiver run in separate
 * processes (on separate hosts or network namespaces). Block size follows a model shape
 * (16 positions × layers × 2 × KV width × 4 bytes). A benchmark: prints, asserts nothing. */
#include "cli/args.h"
#include "cli/commands.h"
#include "serve/worker/xfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char xfer_usage[] =
    "usage: dyad bench xfer [--shape 15m|110m|1b] [--mib N] [--reps N]\n"
    "       dyad bench xfer --listen HOST:PORT [--shape S] [--mib N]   (receiver)\n"
    "       dyad bench xfer --connect HOST:PORT [--shape S] [--mib N]  (sender)\n"
    "Moves N MiB (default 256) of KV blocks of the shape's size: memcpy, shared memory, TCP.\n";

typedef struct {
    const char *name;
    int layers, kv_dim;
} shape;

static const shape shapes[] = {{"15m", 6, 288}, {"110m", 12, 768}, {"1b", 22, 256}};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct {
    const shape *sh;
    int mib, reps, n;
    const char *listen, *connect;
} xopts;

static dy_kv_pool *make_pool(const xopts *o, const char *shm)
{
    dy_kv_pool *p = shm ? dy_kv_pool_new_shared(o->n, 16, o->sh->layers, o->sh->kv_dim, shm)
                        : dy_kv_pool_new(o->n, 16, o->sh->layers, o->sh->kv_dim);
    if (p)
        memset(p->data, 1, p->data_bytes); /* touch every page before timing */
    return p;
}

static void report(const char *what, double bytes, double s)
{
    printf("%-28s %8.1f MiB in %8.3f ms: %6.2f GB/s\n", what, bytes / (1 << 20), s * 1e3,
           bytes / s / 1e9);
}

static int run_local(const xopts *o)
{
    char name[64], err[256];
    snprintf(name, sizeof name, "/dyad-bench-xfer-%d", (int)getpid());
    dy_kv_pool *src = make_pool(o, NULL), *dst = make_pool(o, name);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)o->n);
    if (!src || !dst || !ids) {
        fprintf(stderr, "dyad bench xfer: out of memory for %d blocks\n", o->n);
        return 1;
    }
    for (int i = 0; i < o->n; i++)
        ids[i] = i;
    const size_t bb = dy_kv_block_bytes(src);
    double total = (double)bb * o->n, best_mem = 1e9, best_shm = 1e9, best_tcp = 1e9;
    dy_xfer_peer *shm = dy_xfer_open(DY_XFER_SHM, name, bb, err, sizeof err);
    dy_xfer_rx *rx = dy_xfer_rx_start(dst, "127.0.0.1", 0, err, sizeof err);
    dy_xfer_peer *tcp = rx ? dy_xfer_open(DY_XFER_TCP, dy_xfer_rx_addr(rx), bb, err, sizeof err) : NULL;
    if (!shm || !tcp) {
        fprintf(stderr, "dyad bench xfer: %s\n", err);
        return 1;
    }
    uint64_t bytes;
    /* Alternate the three so machine noise spreads over all of them. */
    for (int r = 0; r < o->reps; r++) {
        double t0 = now_s();
        for (int i = 0; i < o->n; i++)
            memcpy(dy_kv_keys(dst, i, 0), dy_kv_keys(src, i, 0), bb);
        double t1 = now_s();
        dy_xfer_send(shm, 1, src, ids, ids, o->n, &bytes, err, sizeof err);
        double t2 = now_s();
        dy_xfer_rx_expect(rx, (uint64_t)r + 10, ids, o->n);
        dy_xfer_send(tcp, (uint64_t)r + 10, src, ids, ids, o->n, &bytes, err, sizeof err);
        while (dy_xfer_rx_received(rx, (uint64_t)r + 10) < o->n)
            ;
        double t3 = now_s();
        dy_xfer_rx_forget(rx, (uint64_t)r + 10);
        best_mem = t1 - t0 < best_mem ? t1 - t0 : best_mem;
        best_shm = t2 - t1 < best_shm ? t2 - t1 : best_shm;
        best_tcp = t3 - t2 < best_tcp ? t3 - t2 : best_tcp;
    }
    printf("shape %s: %zu bytes per block of 16 positions (%zu per token); min of %d reps\n",
           o->sh->name, bb, bb / 16, o->reps);
    report("memcpy (floor)", total, best_mem);
    report("shared memory (dyad)", total, best_shm);
    report("TCP loopback (dyad)", total, best_tcp);
    dy_xfer_close(tcp);
    dy_xfer_close(shm);
    dy_xfer_rx_stop(rx);
    dy_kv_pool_free(src);
    dy_kv_pool_free(dst);
    free(ids);
    return 0;
}

static int run_remote(const xopts *o)
{
    char err[256];
    dy_kv_pool *pool = make_pool(o, NULL);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)o->n);
    if (!pool || !ids)
        return 1;
    for (int i = 0; i < o->n; i++)
        ids[i] = i;
    double total = (double)dy_kv_block_bytes(pool) * o->n;
    if (o->listen) {
        char host[128];
        snprintf(host, sizeof host, "%s", o->listen);
        char *colon = strrchr(host, ':');
        if (!colon) {
            fprintf(stderr, "dyad bench xfer: --listen needs HOST:PORT\n");
            return 2;
        }
        *colon = 0;
        dy_xfer_rx *rx = dy_xfer_rx_start(pool, host, atoi(colon + 1), err, sizeof err);
        if (!rx) {
            fprintf(stderr, "dyad bench xfer: %s\n", err);
            return 1;
        }
        dy_xfer_rx_expect(rx, 1, ids, o->n);
        printf("listening on %s\n", dy_xfer_rx_addr(rx));
        fflush(stdout);
        double t0 = 0;
        while (dy_xfer_rx_received(rx, 1) < o->n) {
            if (t0 == 0 && dy_xfer_rx_received(rx, 1) > 0)
                t0 = now_s();
            usleep(100);
        }
        report("TCP receive", total, now_s() - t0);
        dy_xfer_rx_stop(rx);
    } else {
        dy_xfer_peer *p = dy_xfer_open(DY_XFER_TCP, o->connect, dy_kv_block_bytes(pool), err, sizeof err);
        uint64_t bytes;
        double t0 = now_s();
        if (!p || dy_xfer_send(p, 1, pool, ids, ids, o->n, &bytes, err, sizeof err) != 0) {
            fprintf(stderr, "dyad bench xfer: %s\n", err);
            return 1;
        }
        report("TCP send", total, now_s() - t0);
        dy_xfer_close(p);
    }
    dy_kv_pool_free(pool);
    free(ids);
    return 0;
}

int cmd_bench_xfer(int argc, char **argv)
{
    xopts o = {.sh = &shapes[1], .mib = 256, .reps = 5};
    const char *v;
    bool bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(xfer_usage, stdout);
            return 0;
        } else if (arg_take("bench xfer", argc, argv, &i, "--shape", &v, &bad)) {
            o.sh = NULL;
            for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
                if (!strcmp(v, shapes[k].name))
                    o.sh = &shapes[k];
            if (!o.sh) {
                fprintf(stderr, "dyad bench xfer: --shape: '%s' is not 15m, 110m or 1b\n", v);
                bad = true;
            }
        } else if (arg_take("bench xfer", argc, argv, &i, "--mib", &v, &bad))
            bad = !arg_int("bench xfer", "--mib", v, 1, 65536, &o.mib);
        else if (arg_take("bench xfer", argc, argv, &i, "--reps", &v, &bad))
            bad = !arg_int("bench xfer", "--reps", v, 1, 1000, &o.reps);
        else if (arg_take("bench xfer", argc, argv, &i, "--listen", &v, &bad))
            o.listen = v;
        else if (arg_take("bench xfer", argc, argv, &i, "--connect", &v, &bad))
            o.connect = v;
        else if (!bad) {
            fprintf(stderr, "dyad bench xfer: unknown option '%s'\n", argv[i]);
            bad = true;
        }
    }
    if (bad)
        return 2;
    size_t bb = dy_kv_bytes_per_block(16, o.sh->layers, o.sh->kv_dim);
    o.n = (int)(((size_t)o.mib << 20) / bb);
    if (o.n < 1)
        o.n = 1;
    return o.listen || o.connect ? run_remote(&o) : run_local(&o);
}
