/* wire.h — the messages between the frontend and its workers, as length-prefixed, versioned
 * binary frames. A frame is a 12-byte header (magic "DYAD", version, type, payload length)
 * and a little-endian payload. Decoding checks every length and count against the bytes
 * received; a bad frame is an error, never a crash (fuzz/fuzz_wire.c). Encoding and decoding
 * are pure; reading frames off a socket lives in wire_io.c. */
#ifndef DYAD_WIRE_H
#define DYAD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kv/kv_event.h"
#include "serve/wire/end.h"
#include "util/buf.h"

#define DY_WIRE_MAGIC 0x44415944u /* "DYAD" as little-endian bytes */
#define DY_WIRE_VERSION 6
#define DY_WIRE_HEADER 12
#define DY_WIRE_MAX_PAYLOAD (16u << 20)
#define DY_WIRE_MAX_STOPS 8
#define DY_WIRE_MAX_STOP_LEN 256
#define DY_WIRE_MAX_TOP 20
#define DY_WIRE_MAX_TEXT 4096
#define DY_WIRE_MAX_SAMPLES 128 /* samples of one request (n, best_of) */
#define DY_WIRE_MAX_GRAMMAR (1u << 20) /* bytes of a request's grammar text */
#define DY_WIRE_MAX_KV_EVENTS 65536 /* events in one KV_EVENTS frame (18 bytes each) */
#define DY_WIRE_MAX_KV_BLOCKS 65536 /* blocks in one KV_SNAPSHOT part (17 bytes each) */
#define DY_WIRE_MAX_KV_PARTS 65536  /* parts of one snapshot */
#define DY_WIRE_MAX_KV_TIER (DY_KV_N_TIERS - 1) /* DY_KV_TIER_* of kv/kv_event.h */
/* What happened to a request's prompt prefix that was in a lower KV tier (DONE.tier_outcome;
 * serve/worker/kv_tiers.h). */
typedef enum {
    DY_TIER_NONE = 0,        /* no block of its prompt was in a lower tier */
    DY_TIER_LOADED = 1,
    DY_TIER_RECOMPUTED = 2,  /* computing was estimated cheaper */
    DY_TIER_LOAD_FAILED = 3, /* a copy failed (a bad checksum, a disk error): recomputed */
} dy_tier_outcome;
#define DY_WIRE_MAX_TIER_OUTCOME DY_TIER_LOAD_FAILED

typedef enum {
    DY_MSG_HELLO = 1,    /* worker → frontend, once: what it serves */
    DY_MSG_REQUEST = 2,  /* frontend → worker: generate for one sequence */
    DY_MSG_CANCEL = 3,   /* frontend → worker: stop a sequence, free its blocks */
    DY_MSG_TOKEN = 4,    /* worker → frontend: one generated token */
    DY_MSG_DONE = 5,     /* worker → frontend: a sequence ended */
    DY_MSG_STATS = 6,    /* worker → frontend: load and counters */
    DY_MSG_SHUTDOWN = 7, /* frontend → worker: finish what runs, then exit */
    /* Disaggregated prefill (docs/disaggregation.md): */
    DY_MSG_KV_ALLOC = 8,     /* decode worker → frontend: the blocks it set aside for a prompt */
    DY_MSG_PREFILL = 9,      /* frontend → prefill worker: compute a prompt, ship its KV */
    DY_MSG_PREFILL_DONE = 10,/* prefill worker → frontend: shipped (bytes, time) or failed */
    DY_MSG_KV_READY = 11,    /* frontend → decode worker: the KV has arrived (or prefill locally) */
    /* KV events: the router's mirror of each worker's prefix index (src/serve/worker/kv_publish.h): */
    DY_MSG_KV_EVENTS = 12,   /* worker → frontend: a numbered batch of index changes */
    DY_MSG_KV_SNAPSHOT = 13, /* worker → frontend: every indexed block, in one or more parts */
    DY_MSG_KV_RESYNC = 14,   /* frontend → worker: send a snapshot */
    /* The planner (docs/planner.md): */
    DY_MSG_ROLE = 15,        /* frontend → an idle worker: take another role, answer HELLO */
    DY_MSG_PEER_GONE = 16,   /* frontend → workers: a decode worker's KV pool is gone, unmap it */
    /* The tool-call hold (docs/kv-tiers.md): */
    DY_MSG_HOLD = 17,        /* frontend → worker: when a held session is expected back, or let it go */
    DY_MSG_LAST = DY_MSG_HOLD,
} dy_msg_type;

typedef enum { DY_ROLE_AGG = 0, DY_ROLE_PREFILL = 1, DY_ROLE_DECODE = 2 } dy_worker_role;
/* The name of a decode worker's shared-memory KV pool under /dev/shm, from its pid and
 * worker id: the worker creates it, the frontend parses it back to remove pools of workers
 * that died unseen. */
#define DY_KV_SHM_NAME "dyad-kv-%d-%d"
typedef enum { DY_XFER_SHM = 1, DY_XFER_TCP = 2, DY_XFER_UCX = 3 } dy_xfer_kind;
/* Whether blocks of kind go to a receiver at "host:port" (the decode worker's HELLO tcp_addr)
 * rather than into a shared-memory pool. */
#define DY_XFER_NETWORKED(kind) ((kind) == DY_XFER_TCP || (kind) == DY_XFER_UCX)

#define DY_WIRE_MAX_PEER 128

typedef struct {
    uint32_t worker_id, pid;
    uint64_t fingerprint;
    uint32_t ctx_len, vocab_size, kv_blocks, block_size;
    uint8_t role;                     /* dy_worker_role */
    uint32_t block_bytes;             /* bytes of one KV block */
    char shm_name[DY_WIRE_MAX_PEER + 1]; /* decode/agg: its KV pool's shared-memory name, or "" */
    char tcp_addr[DY_WIRE_MAX_PEER + 1]; /* decode/agg: "host:port" of its KV receiver
                                          * (TCP or UCX), or "" */
} dy_msg_hello;

typedef struct {
    uint64_t id;
    uint8_t local;          /* 1: no blocks set aside, the decode worker prefills itself */
    uint32_t cached_tokens; /* prompt tokens it already holds (prefix cache) */
    uint32_t first_block;   /* index in the prompt of the first block to receive */
    uint32_t n_blocks;
    int32_t *blocks;        /* its block ids, n_blocks; decode: malloc'd (dy_msg_kv_alloc_free) */
} dy_msg_kv_alloc;

typedef struct {
    uint64_t id;
    uint8_t xfer;           /* dy_xfer_kind */
    char peer[DY_WIRE_MAX_PEER + 1]; /* shm name or "host:port" */
    uint32_t first_block, n_blocks;
    int32_t *dest;          /* the decode worker's block ids */
    uint32_t n_prompt;      /* tokens to compute: positions [0, n_prompt) */
    int32_t *prompt;
} dy_msg_prefill;

typedef struct {
    uint64_t id;
    uint8_t ok;
    uint64_t bytes;
    double prefill_seconds, transfer_seconds;
    uint32_t computed_tokens, cached_tokens;
    uint32_t text_len;      /* the error, when not ok */
    const char *text;
} dy_msg_prefill_done;

typedef struct {
    uint64_t id;
    uint8_t ok;             /* 0: the prefill failed, compute the prompt locally */
    uint32_t n_blocks;      /* blocks that were sent */
} dy_msg_kv_ready;

void dy_msg_kv_alloc_free(dy_msg_kv_alloc *m);
void dy_msg_prefill_free(dy_msg_prefill *m);

typedef struct {
    uint64_t id;
    uint32_t max_tokens;
    float temperature, top_p, min_p;
    int32_t top_k;
    uint64_t seed;
    uint32_t stream;     /* the first sample's random stream */
    uint32_t n_samples;  /* samples sharing this prompt (1..DY_WIRE_MAX_SAMPLES): sample i has
                          * id `id + i` and random stream `stream + i`; the prompt is computed
                          * once and its KV blocks are shared (docs/repeated-sampling.md) */
    uint8_t ignore_eos;
    uint8_t n_logprobs;  /* top alternatives per token; 0 = none */
    uint8_t want_logprobs;
    uint8_t n_stops;
    uint8_t remote_prefill; /* decode worker: set blocks aside and wait for KV_READY */
    char stops[DY_WIRE_MAX_STOPS][DY_WIRE_MAX_STOP_LEN + 1];
    uint32_t grammar_len; /* 0: unconstrained */
    char *grammar;       /* the grammar every sample follows (grammar.h's notation), or NULL;
                          * decode: a malloc'd NUL-terminated copy, freed by dy_msg_request_free */
    uint64_t session;    /* the conversation it is a turn of (dyad.session, hashed); 0: none */
    uint32_t hold_ms;    /* dyad.hold.expected_ms; DY_WIRE_NO_HOLD: none given */
    uint32_t n_prompt;
    int32_t *prompt;     /* decode: malloc'd copy, freed by dy_msg_request_free */
} dy_msg_request;

#define DY_WIRE_NO_HOLD UINT32_MAX
#define DY_WIRE_MAX_HOLD_MS 86400000u /* a day */

/* HOLD: session `session`'s turn has ended; it is expected back in expected_ms (from when
 * the frontend sends this), or not at any known time (DY_WIRE_NO_HOLD), or, with release,
 * not held at all. */
typedef struct {
    uint64_t session;
    uint32_t expected_ms;
    uint8_t release;
} dy_msg_hold;

void dy_msg_request_free(dy_msg_request *m);

typedef struct {
    uint64_t id;
} dy_msg_cancel;

typedef struct {
    uint64_t id;
    int32_t token;
    float logprob;
    uint8_t n_top;
    int32_t top_ids[DY_WIRE_MAX_TOP];
    float top_logprobs[DY_WIRE_MAX_TOP];
    uint32_t text_len;   /* text this token releases (after stop-string holding) */
    const char *text;    /* decode: points into the frame buffer */
} dy_msg_token;

typedef struct {
    uint64_t id;
    uint8_t finish;      /* dy_end (end.h): DY_END_STOP … DY_END_ERROR */
    uint32_t prompt_tokens, cached_tokens, completion_tokens;
    uint32_t queue_us;   /* from arrival at the worker to its first scheduled step */
    /* its prompt's prefix in a lower KV tier (kv_tiers.h): what happened, the tokens loaded,
     * and the estimates the choice was made on (µs; UINT32_MAX: not measured yet) */
    uint8_t tier_outcome;
    uint32_t tier_tokens, tier_load_us, tier_recompute_us;
    uint32_t tier_wait_us;   /* measured: how long it waited for the copies */
    uint32_t text_len;   /* trailing text released at the end, or the error message */
    const char *text;
} dy_msg_done;

/* One lower KV tier of a worker (host memory, disk), in STATS. */
typedef struct {
    uint8_t on;                      /* 0: not configured, or switched off by an error */
    uint32_t slots, used;            /* blocks it can hold; READY or being written */
    uint64_t blocks_in, blocks_out;  /* copies written into it; copies read out of it */
    uint64_t bytes_in, bytes_out;
    double seconds_in, seconds_out;  /* the copies' own time, summed */
    uint64_t evicted, bad, errors;   /* slots reclaimed; failed checksums; I/O errors */
} dy_msg_tier_stats;

typedef struct {
    uint32_t running, waiting;
    uint64_t queued_prefill_tokens;
    uint32_t kv_blocks_used, kv_blocks_total;
    uint64_t prompt_tokens, generated_tokens;        /* computed since start */
    uint64_t cache_lookup_blocks, cache_hit_blocks;
    uint64_t preemptions, steps;
    double step_seconds;                            /* sum over all steps */
    uint32_t active_decode_blocks; /* blocks in the block tables of running sequences, counted
                                    * once per sequence (shared prefixes too): what one decode
                                    * step's attention reads */
    uint64_t kv_event_seq;         /* seq of the last KV_EVENTS or KV_SNAPSHOT sent before this
                                    * frame: a receiver behind it has lost a batch */
    uint64_t shm_bytes;            /* shared memory it has mapped: its own KV pool when that is
                                    * shared, plus the decode workers' pools it writes into */
    dy_msg_tier_stats tiers[2];    /* [0] host, [1] disk */
    uint64_t tier_loads, tier_recomputes, tier_load_failures; /* prompts whose prefix was in
                                    * a lower tier: loaded, computed instead, load failed */
    uint32_t hold_sessions, hold_pinned;  /* conversations held; blocks or slots pinned for them */
    uint64_t hold_prefetched_blocks, hold_expired; /* brought up ahead of a turn; holds let go
                                    * at their TTL */
    uint64_t hold_parked_blocks;   /* held blocks sent to disk for a long wait */
} dy_msg_stats;

/* KV events. Each KV_EVENTS batch takes the next sequence number (the first is 1); a snapshot
 * carries the number of the last batch before it (0 if none), so the batch after a snapshot
 * with seq S is S + 1. A receiver that sees any other number has lost a batch: it ignores
 * batches and sends one KV_RESYNC until a snapshot arrives.
 *   KV_EVENTS    worker_id u32, seq u64, n u32, n × (kind u8, tier u8, hash u64, parent u64)
 *   KV_SNAPSHOT  worker_id u32, seq u64, part u32, n_parts u32, n u32,
 *                n × (hash u64, parent u64, tier u8)
 *   KV_RESYNC    reason u8, seen_seq u64
 * A CLEARED event has hash and parent 0. A snapshot larger than DY_WIRE_MAX_KV_BLOCKS goes as
 * parts 0 … n_parts-1, consecutive on the stream and with the same seq; the receiver replaces
 * its picture of the worker when the last part has arrived. */
typedef struct {
    uint32_t worker_id;
    uint64_t seq;
    uint32_t n_events;
    dy_kv_event *events;  /* decode: malloc'd (dy_msg_kv_events_free) */
} dy_msg_kv_events;

typedef struct {
    uint32_t worker_id;
    uint64_t seq;
    uint32_t part, n_parts;
    uint32_t n_blocks;
    dy_kv_event *blocks;  /* hash, parent, tier (kind: STORED); decode: malloc'd */
} dy_msg_kv_snapshot;

typedef enum {
    DY_RESYNC_GAP = 1,   /* a batch's seq was not the next one */
    DY_RESYNC_START = 2, /* the frontend has no picture of this worker (start, restart) */
    DY_RESYNC_ERROR = 3, /* its picture is inconsistent (say, a snapshot part out of order) */
} dy_resync_reason;

typedef struct {
    uint8_t reason;       /* dy_resync_reason */
    uint64_t seen_seq;    /* the last seq the frontend applied (for logs) */
} dy_msg_kv_resync;

/* ROLE  role u8: sent only to a worker with nothing in flight; it answers with a new HELLO in
 * that role (and a KV snapshot), keeping its process, model and cache. */
typedef struct {
    uint8_t role; /* dy_worker_role */
} dy_msg_role;

/* PEER_GONE  name bytes: the decode worker whose KV pool (its shared-memory name, or its
 * receiver's "host:port") this is has died, stopped or left the decode role; a worker that
 * holds that pool open closes it, so a dead pool's memory is not kept mapped. */
typedef struct {
    char peer[DY_WIRE_MAX_PEER + 1];
} dy_msg_peer_gone;

/* Safe after a failed decode too. */
void dy_msg_kv_events_free(dy_msg_kv_events *m);
void dy_msg_kv_snapshot_free(dy_msg_kv_snapshot *m);

/* Each encoder appends one whole frame to b (false if out of memory or too large). */
bool dy_wire_hello(dy_buf *b, const dy_msg_hello *m);
bool dy_wire_request(dy_buf *b, const dy_msg_request *m);
bool dy_wire_cancel(dy_buf *b, const dy_msg_cancel *m);
bool dy_wire_token(dy_buf *b, const dy_msg_token *m);
bool dy_wire_done(dy_buf *b, const dy_msg_done *m);
bool dy_wire_stats(dy_buf *b, const dy_msg_stats *m);
bool dy_wire_shutdown(dy_buf *b);
bool dy_wire_kv_alloc(dy_buf *b, const dy_msg_kv_alloc *m);
bool dy_wire_prefill(dy_buf *b, const dy_msg_prefill *m);
bool dy_wire_prefill_done(dy_buf *b, const dy_msg_prefill_done *m);
bool dy_wire_kv_ready(dy_buf *b, const dy_msg_kv_ready *m);
bool dy_wire_kv_events(dy_buf *b, const dy_msg_kv_events *m);
bool dy_wire_kv_snapshot(dy_buf *b, const dy_msg_kv_snapshot *m);
bool dy_wire_kv_resync(dy_buf *b, const dy_msg_kv_resync *m);
bool dy_wire_role(dy_buf *b, const dy_msg_role *m);
bool dy_wire_peer_gone(dy_buf *b, const dy_msg_peer_gone *m);
bool dy_wire_hold(dy_buf *b, const dy_msg_hold *m);

/* Reads a frame header: false (and a message) if the magic, version, type or length is bad. */
bool dy_wire_header(const uint8_t hdr[DY_WIRE_HEADER], dy_msg_type *type, uint32_t *len,
                    char *err, size_t errlen);

/* Decoders over one payload: false and a message if it is malformed. Pointers in the result
 * point into `p`. */
bool dy_wire_decode_hello(const uint8_t *p, size_t n, dy_msg_hello *m, char *err, size_t errlen);
bool dy_wire_decode_request(const uint8_t *p, size_t n, dy_msg_request *m, char *err, size_t errlen);
bool dy_wire_decode_cancel(const uint8_t *p, size_t n, dy_msg_cancel *m, char *err, size_t errlen);
bool dy_wire_decode_token(const uint8_t *p, size_t n, dy_msg_token *m, char *err, size_t errlen);
bool dy_wire_decode_done(const uint8_t *p, size_t n, dy_msg_done *m, char *err, size_t errlen);
bool dy_wire_decode_stats(const uint8_t *p, size_t n, dy_msg_stats *m, char *err, size_t errlen);
bool dy_wire_decode_kv_alloc(const uint8_t *p, size_t n, dy_msg_kv_alloc *m, char *err, size_t errlen);
bool dy_wire_decode_prefill(const uint8_t *p, size_t n, dy_msg_prefill *m, char *err, size_t errlen);
bool dy_wire_decode_prefill_done(const uint8_t *p, size_t n, dy_msg_prefill_done *m, char *err,
                                 size_t errlen);
bool dy_wire_decode_kv_ready(const uint8_t *p, size_t n, dy_msg_kv_ready *m, char *err, size_t errlen);
bool dy_wire_decode_kv_events(const uint8_t *p, size_t n, dy_msg_kv_events *m, char *err,
                              size_t errlen);
bool dy_wire_decode_kv_snapshot(const uint8_t *p, size_t n, dy_msg_kv_snapshot *m, char *err,
                                size_t errlen);
bool dy_wire_decode_kv_resync(const uint8_t *p, size_t n, dy_msg_kv_resync *m, char *err,
                              size_t errlen);
bool dy_wire_decode_role(const uint8_t *p, size_t n, dy_msg_role *m, char *err, size_t errlen);
bool dy_wire_decode_hold(const uint8_t *p, size_t n, dy_msg_hold *m, char *err, size_t errlen);
bool dy_wire_decode_peer_gone(const uint8_t *p, size_t n, dy_msg_peer_gone *m, char *err,
                              size_t errlen);

/* Whether p[0..n) is a valid payload of a frame of type t: the type's decoder run over it, and
 * what it allocated freed again. For bytes that are only passed on (serve/cluster/ carries
 * frames over NATS without handling them), so that a bad one is dropped where it came in. */
bool dy_wire_check_payload(dy_msg_type t, const uint8_t *p, size_t n, char *err, size_t errlen);

#endif
