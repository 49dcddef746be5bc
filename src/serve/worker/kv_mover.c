/* kv_mover.c — see kv_mover.h. One thread, one mutex: a ring of jobs, of which [head, head +
 * n_done) are finished, the next n_queued wait, and the thread takes them in order. */
#include "serve/worker/kv_mover.h"
#include "util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

struct dy_kv_mover {
    pthread_mutex_t mu;
    pthread_cond_t work;
    pthread_t thread;
    bool stop;
    dy_kv_move *ring;
    int cap, head, n_done, n_running, n_queued;
    size_t queued_bytes;
};

uint64_t dy_kv_block_checksum(const void *data, size_t bytes)
{
    return XXH3_64bits(data, bytes);
}

/* pwrite/pread until all `bytes` are moved; false (errno set) on an error or end of file. */
static bool file_io(bool write, int fd, void *buf, size_t bytes, off_t off)
{
    char *p = buf;
    while (bytes > 0) {
        ssize_t k = write ? pwrite(fd, p, bytes, off) : pread(fd, p, bytes, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = write ? ENOSPC : EIO; /* a short file: truncated under us */
            return false;
        }
        p += k;
        off += k;
        bytes -= (size_t)k;
    }
    return true;
}

static void run_job(dy_kv_move *j)
{
    double t0 = dy_now();
    j->ok = true;
    j->err = 0;
    switch (j->kind) {
    case DY_MOVE_MEM:
        memcpy(j->dst, j->src, j->bytes);
        break;
    case DY_MOVE_TO_FILE:
        j->checksum = dy_kv_block_checksum(j->src, j->bytes);
        if (!(j->ok = file_io(true, j->fd, (void *)j->src, j->bytes, j->off)))
            j->err = errno;
        break;
    case DY_MOVE_FROM_FILE:
        if (!(j->ok = file_io(false, j->fd, j->dst, j->bytes, j->off)))
            j->err = errno;
        else
            j->ok = dy_kv_block_checksum(j->dst, j->bytes) == j->checksum; /* err 0: bad bytes */
        break;
    }
    j->seconds = dy_now() - t0;
}

static void *mover_main(void *arg)
{
    dy_kv_mover *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->n_queued && !m->stop)
            pthread_cond_wait(&m->work, &m->mu);
        if (!m->n_queued)
            break; /* stopping, and nothing left */
        int at = (m->head + m->n_done) % m->cap; /* the oldest queued job */
        m->n_queued--;
        m->n_running = 1;
        m->queued_bytes -= m->ring[at].bytes;
        dy_kv_move job = m->ring[at];
        pthread_mutex_unlock(&m->mu);
        run_job(&job);
        pthread_mutex_lock(&m->mu);
        m->ring[at] = job;
        m->n_running = 0;
        m->n_done++;
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

dy_kv_mover *dy_kv_mover_new(int cap)
{
    if (cap < 1)
        return NULL;
    dy_kv_mover *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->ring = malloc(sizeof *m->ring * (size_t)cap);
    m->cap = cap;
    if (!m->ring) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->work, NULL);
    if (pthread_create(&m->thread, NULL, mover_main, m) != 0) {
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->work);
        free(m->ring);
        free(m);
        return NULL;
    }
    return m;
}

void dy_kv_mover_free(dy_kv_mover *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_signal(&m->work);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->work);
    free(m->ring);
    free(m);
}

bool dy_kv_mover_submit(dy_kv_mover *m, const dy_kv_move *job)
{
    pthread_mutex_lock(&m->mu);
    int outstanding = m->n_done + m->n_running + m->n_queued;
    bool ok = outstanding < m->cap;
    if (ok) {
        m->ring[(m->head + outstanding) % m->cap] = *job;
        m->n_queued++;
        m->queued_bytes += job->bytes;
        pthread_cond_signal(&m->work);
    }
    pthread_mutex_unlock(&m->mu);
    return ok;
}

int dy_kv_mover_take(dy_kv_mover *m, dy_kv_move *out, int cap)
{
    pthread_mutex_lock(&m->mu);
    int n = 0;
    for (; n < cap && m->n_done > 0; n++) {
        out[n] = m->ring[m->head];
        m->head = (m->head + 1) % m->cap;
        m->n_done--;
    }
    pthread_mutex_unlock(&m->mu);
    return n;
}

int dy_kv_mover_outstanding(dy_kv_mover *m)
{
    pthread_mutex_lock(&m->mu);
    int n = m->n_done + m->n_running + m->n_queued;
    pthread_mutex_unlock(&m->mu);
    return n;
}

size_t dy_kv_mover_queued_bytes(dy_kv_mover *m)
{
    pthread_mutex_lock(&m->mu);
    size_t b = m->queued_bytes;
    pthread_mutex_unlock(&m->mu);
    return b;
}
