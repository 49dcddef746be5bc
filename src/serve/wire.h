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

#define DY_WIRE_MAGIC 0x44415944u /* "DYAD" as little-endian bytes */
#define DY_WIRE_VERSION 1
#define DY_WIRE_HEADER 12
#define DY_WIRE_MAX_PAYLOAD (16u << 20)
#define DY_WIRE_MAX_STOPS 8
#define DY_WIRE_MAX_STOP_LEN 256
#define DY_WIRE_MAX_TOP 20
#define DY_WIRE_MAX_TEXT 4096

typedef enum {
    DY_MSG_HELLO = 1,    /* worker → frontend, once: what it serves */
    DY_MSG_REQUEST = 2,  /* frontend → worker: generate for one sequence */
    DY_MSG_CANCEL = 3,   /* frontend → worker: stop a sequence, free its blocks */
    DY_MSG_TOKEN = 4,    /* worker → frontend: one generated token */
    DY_MSG_DONE = 5,     /* worker → frontend: a sequence ended */
    DY_MSG_STATS = 6,    /* worker → frontend: load and counters */
    DY_MSG_SHUTDOWN = 7, /* frontend → worker: finish what runs, then exit */
} dy_msg_type;

typedef enum {
    DY_END_STOP = 1,      /* EOS or a stop string */
    DY_END_LENGTH = 2,    /* max_tokens or the context length */
    DY_END_CANCELLED = 3, /* the client went away */
    DY_END_ERROR = 4,     /* the request could not run (message in DONE) */
} dy_end;

typedef struct {
    uint32_t worker_id, pid;
    uint64_t fingerprint;
    uint32_t ctx_len, vocab_size, kv_blocks, block_size;
} dy_msg_hello;

typedef struct {
    uint64_t id;
    uint32_t max_tokens;
    float temperature, top_p, min_p;
    int32_t top_k;
    uint64_t seed;
    uint32_t stream;     /* the sample index's random stream (n samples of one request) */
    uint8_t ignore_eos;
    uint8_t n_logprobs;  /* top alternatives per token; 0 = none */
    uint8_t want_logprobs;
    uint8_t n_stops;
    char stops[DY_WIRE_MAX_STOPS][DY_WIRE_MAX_STOP_LEN + 1];
    uint32_t n_prompt;
    int32_t *prompt;     /* decode: malloc'd copy, freed by dy_msg_request_free */
} dy_msg_request;

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
    uint8_t finish;      /* dy_end */
    uint32_t prompt_tokens, cached_tokens, completion_tokens;
    uint32_t queue_us;   /* from arrival at the worker to its first scheduled step */
    uint32_t text_len;   /* trailing text released at the end, or the error message */
    const char *text;
} dy_msg_done;

typedef struct {
    uint32_t running, waiting;
    uint64_t queued_prefill_tokens;
    uint32_t kv_blocks_used, kv_blocks_total;
    uint64_t prompt_tokens, generated_tokens;        /* computed since start */
    uint64_t cache_lookup_blocks, cache_hit_blocks;
    uint64_t preemptions, steps;
    double step_seconds;                            /* sum over all steps */
} dy_msg_stats;

/* A growable byte buffer for encoding. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
    bool oom;
} dy_buf;

void dy_buf_free(dy_buf *b);

/* Each encoder appends one whole frame to b (false if out of memory or too large). */
bool dy_wire_hello(dy_buf *b, const dy_msg_hello *m);
bool dy_wire_request(dy_buf *b, const dy_msg_request *m);
bool dy_wire_cancel(dy_buf *b, const dy_msg_cancel *m);
bool dy_wire_token(dy_buf *b, const dy_msg_token *m);
bool dy_wire_done(dy_buf *b, const dy_msg_done *m);
bool dy_wire_stats(dy_buf *b, const dy_msg_stats *m);
bool dy_wire_shutdown(dy_buf *b);

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

#endif
