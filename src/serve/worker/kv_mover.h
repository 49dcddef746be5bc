/* kv_mover.h — the thread that moves KV blocks between a worker's tiers, so that no copy
 * ever runs on the step loop. A job is one block: memory to memory (the primary pool and the
 * host tier), memory to a file or a file to memory (the disk tier, with pwrite/pread). Every
 * job is timed; a write to a file returns the checksum of what it wrote, a read from one
 * checks what it read against the checksum it is given. The loop submits jobs and, once per
 * iteration, takes the finished ones; it never waits on the thread. */
#ifndef DYAD_KV_MOVER_H
#define DYAD_KV_MOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum {
    DY_MOVE_MEM,       /* src → dst */
    DY_MOVE_TO_FILE,   /* src → fd at off; checksum out */
    DY_MOVE_FROM_FILE, /* fd at off → dst; checked against checksum */
} dy_move_kind;

typedef struct {
    dy_move_kind kind;
    const void *src;
    void *dst;
    int fd;
    off_t off;
    size_t bytes;
    uint64_t checksum;   /* TO_FILE: set by the mover; FROM_FILE: the expected one */
    /* the caller's, returned as given: what the job was for */
    int purpose;
    int32_t a, b;
    uint64_t id;
    /* set by the mover */
    bool ok;
    int err;             /* errno of a failed read or write; 0 for a bad checksum */
    double seconds;      /* the copy itself, not its wait in the queue */
} dy_kv_move;

typedef struct dy_kv_mover dy_kv_mover;

/* A mover with room for `cap` jobs submitted and not yet taken. NULL if out of memory or the
 * thread cannot start. */
dy_kv_mover *dy_kv_mover_new(int cap);
/* Waits for the jobs in flight, then stops the thread. */
void dy_kv_mover_free(dy_kv_mover *m);
/* Queues a job; false when `cap` jobs are already submitted and not taken. */
bool dy_kv_mover_submit(dy_kv_mover *m, const dy_kv_move *job);
/* Moves up to cap finished jobs to out, in the order they finished; never blocks. */
int dy_kv_mover_take(dy_kv_mover *m, dy_kv_move *out, int cap);
/* Jobs submitted and not yet taken (queued, running or finished). */
int dy_kv_mover_outstanding(dy_kv_mover *m);
/* Bytes of the jobs queued and not yet started. */
size_t dy_kv_mover_queued_bytes(dy_kv_mover *m);

/* The checksum a block carries on disk. */
uint64_t dy_kv_block_checksum(const void *data, size_t bytes);

#endif
