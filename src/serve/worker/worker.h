/* worker.h — a worker process: one model, one engine, one scheduler, and a step loop that
 * serves the sequences its frontend sends over one socket (wire.h frames). Each step it
 * reads new requests and cancellations, runs the scheduler's plan through the engine,
 * samples, detokenizes, applies stop strings and sends tokens back. */
#ifndef DYAD_WORKER_H
#define DYAD_WORKER_H

#include <stdint.h>

typedef struct {
    const char *model, *tokenizer;
    int fd;               /* connected socket to the frontend */
    int worker_id;
    int threads;
    int kv_blocks;        /* 0: derive from kv_mem_mib */
    int kv_mem_mib;
    int block_size;
    int max_batch_tokens;
    int max_running;
    bool no_prefix_cache;
    bool no_kv_events;    /* publish no KV events (the router runs in approximate mode) */
    int role;              /* dy_worker_role (serve/wire/wire.h) */
    const char *kv_listen; /* decode role: "host:port" for the TCP KV receiver, or NULL */
} dy_worker_config;

/* Runs until the frontend closes the socket or asks to shut down. Returns the process exit
 * status (0, or 1 with a message on stderr when the model or engine cannot be set up). */
int dy_worker_run(const dy_worker_config *cfg);

#endif
