/* wire.c — see wire.h. Encoders append fields to a dy_buf; decoders walk the payload with a
 * bounds-checked reader and insist on consuming it exactly. */
#include "serve/wire/wire.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- encoding */

static void put(dy_buf *b, const void *p, size_t n)
{
    dy_buf_append(b, p, n);
}

static void put_u8(dy_buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u32(dy_buf *b, uint32_t v) { put(b, &v, 4); }
static void put_i32(dy_buf *b, int32_t v) { put(b, &v, 4); }
static void put_u64(dy_buf *b, uint64_t v) { put(b, &v, 8); }
static void put_f32(dy_buf *b, float v) { put(b, &v, 4); }
static void put_f64(dy_buf *b, double v) { put(b, &v, 8); }

static void put_bytes(dy_buf *b, const char *s, uint32_t n)
{
    put_u32(b, n);
    put(b, s, n);
}

/* A peer's name (get_name reads it back). */
static void put_name(dy_buf *b, const char *name)
{
    put_bytes(b, name, (uint32_t)strnlen(name, DY_WIRE_MAX_PEER));
}

/* Writes a header with a placeholder length; end_frame fills it in. */
static size_t begin_frame(dy_buf *b, dy_msg_type t)
{
    size_t at = b->len;
    put_u32(b, DY_WIRE_MAGIC);
    uint16_t ver = DY_WIRE_VERSION, type = (uint16_t)t;
    put(b, &ver, 2);
    put(b, &type, 2);
    put_u32(b, 0);
    return at;
}

static bool end_frame(dy_buf *b, size_t at)
{
    if (b->oom)
        return false;
    size_t payload = b->len - at - DY_WIRE_HEADER;
    if (payload > DY_WIRE_MAX_PAYLOAD) {
        b->len = at;
        return false;
    }
    uint32_t n = (uint32_t)payload;
    memcpy(b->data + at + 8, &n, 4);
    return true;
}

bool dy_wire_hello(dy_buf *b, const dy_msg_hello *m)
{
    size_t at = begin_frame(b, DY_MSG_HELLO);
    put_u32(b, m->worker_id);
    put_u32(b, m->pid);
    put_u64(b, m->fingerprint);
    put_u32(b, m->ctx_len);
    put_u32(b, m->vocab_size);
    put_u32(b, m->kv_blocks);
    put_u32(b, m->block_size);
    put_u8(b, m->role);
    put_u32(b, m->block_bytes);
    put_bytes(b, m->shm_name, (uint32_t)strnlen(m->shm_name, DY_WIRE_MAX_PEER));
    put_bytes(b, m->tcp_addr, (uint32_t)strnlen(m->tcp_addr, DY_WIRE_MAX_PEER));
    return end_frame(b, at);
}

bool dy_wire_request(dy_buf *b, const dy_msg_request *m)
{
    if (m->n_stops > DY_WIRE_MAX_STOPS || m->n_logprobs > DY_WIRE_MAX_TOP)
        return false;
    uint32_t grammar_len = m->grammar ? m->grammar_len : 0;
    if (grammar_len > DY_WIRE_MAX_GRAMMAR)
        return false;
    size_t at = begin_frame(b, DY_MSG_REQUEST);
    put_u64(b, m->id);
    put_u32(b, m->max_tokens);
    put_f32(b, m->temperature);
    put_f32(b, m->top_p);
    put_f32(b, m->min_p);
    put_i32(b, m->top_k);
    put_u64(b, m->seed);
    put_u32(b, m->stream);
    put_u32(b, m->n_samples);
    put_u8(b, m->ignore_eos);
    put_u8(b, m->want_logprobs);
    put_u8(b, m->n_logprobs);
    put_u8(b, m->n_stops);
    put_u8(b, m->remote_prefill);
    put_u64(b, m->session);
    put_u32(b, m->hold_ms);
    for (int i = 0; i < m->n_stops; i++)
        put_bytes(b, m->stops[i], (uint32_t)strnlen(m->stops[i], DY_WIRE_MAX_STOP_LEN));
    put_bytes(b, m->grammar, grammar_len);
    put_u32(b, m->n_prompt);
    put(b, m->prompt, sizeof(int32_t) * m->n_prompt);
    return end_frame(b, at);
}

bool dy_wire_cancel(dy_buf *b, const dy_msg_cancel *m)
{
    size_t at = begin_frame(b, DY_MSG_CANCEL);
    put_u64(b, m->id);
    return end_frame(b, at);
}

bool dy_wire_token(dy_buf *b, const dy_msg_token *m)
{
    if (m->n_top > DY_WIRE_MAX_TOP || m->text_len > DY_WIRE_MAX_TEXT)
        return false;
    size_t at = begin_frame(b, DY_MSG_TOKEN);
    put_u64(b, m->id);
    put_i32(b, m->token);
    put_f32(b, m->logprob);
    put_u8(b, m->n_top);
    for (int i = 0; i < m->n_top; i++) {
        put_i32(b, m->top_ids[i]);
        put_f32(b, m->top_logprobs[i]);
    }
    put_bytes(b, m->text, m->text_len);
    return end_frame(b, at);
}

bool dy_wire_done(dy_buf *b, const dy_msg_done *m)
{
    if (m->text_len > DY_WIRE_MAX_TEXT)
        return false;
    size_t at = begin_frame(b, DY_MSG_DONE);
    put_u64(b, m->id);
    put_u8(b, m->finish);
    put_u32(b, m->prompt_tokens);
    put_u32(b, m->cached_tokens);
    put_u32(b, m->completion_tokens);
    put_u32(b, m->queue_us);
    put_u8(b, m->tier_outcome);
    put_u32(b, m->tier_tokens);
    put_u32(b, m->tier_load_us);
    put_u32(b, m->tier_recompute_us);
    put_u32(b, m->tier_wait_us);
    put_bytes(b, m->text, m->text_len);
    return end_frame(b, at);
}

static void put_tier_stats(dy_buf *b, const dy_msg_tier_stats *t)
{
    put_u8(b, t->on);
    put_u32(b, t->slots);
    put_u32(b, t->used);
    put_u64(b, t->blocks_in);
    put_u64(b, t->blocks_out);
    put_u64(b, t->bytes_in);
    put_u64(b, t->bytes_out);
    put_f64(b, t->seconds_in);
    put_f64(b, t->seconds_out);
    put_u64(b, t->evicted);
    put_u64(b, t->bad);
    put_u64(b, t->errors);
}

bool dy_wire_stats(dy_buf *b, const dy_msg_stats *m)
{
    size_t at = begin_frame(b, DY_MSG_STATS);
    put_u32(b, m->running);
    put_u32(b, m->waiting);
    put_u64(b, m->queued_prefill_tokens);
    put_u32(b, m->kv_blocks_used);
    put_u32(b, m->kv_blocks_total);
    put_u64(b, m->prompt_tokens);
    put_u64(b, m->generated_tokens);
    put_u64(b, m->cache_lookup_blocks);
    put_u64(b, m->cache_hit_blocks);
    put_u64(b, m->preemptions);
    put_u64(b, m->steps);
    put_f64(b, m->step_seconds);
    put_u32(b, m->active_decode_blocks);
    put_u64(b, m->kv_event_seq);
    put_u64(b, m->shm_bytes);
    for (int t = 0; t < 2; t++)
        put_tier_stats(b, &m->tiers[t]);
    put_u64(b, m->tier_loads);
    put_u64(b, m->tier_recomputes);
    put_u64(b, m->tier_load_failures);
    put_u32(b, m->hold_sessions);
    put_u32(b, m->hold_pinned);
    put_u64(b, m->hold_prefetched_blocks);
    put_u64(b, m->hold_expired);
    put_u64(b, m->hold_parked_blocks);
    return end_frame(b, at);
}

bool dy_wire_shutdown(dy_buf *b)
{
    return end_frame(b, begin_frame(b, DY_MSG_SHUTDOWN));
}

static void put_ids(dy_buf *b, const int32_t *ids, uint32_t n)
{
    put_u32(b, n);
    put(b, ids, sizeof(int32_t) * n);
}

bool dy_wire_kv_alloc(dy_buf *b, const dy_msg_kv_alloc *m)
{
    size_t at = begin_frame(b, DY_MSG_KV_ALLOC);
    put_u64(b, m->id);
    put_u8(b, m->local);
    put_u32(b, m->cached_tokens);
    put_u32(b, m->first_block);
    put_ids(b, m->blocks, m->n_blocks);
    return end_frame(b, at);
}

bool dy_wire_prefill(dy_buf *b, const dy_msg_prefill *m)
{
    size_t at = begin_frame(b, DY_MSG_PREFILL);
    put_u64(b, m->id);
    put_u8(b, m->xfer);
    put_name(b, m->peer);
    put_u32(b, m->first_block);
    put_ids(b, m->dest, m->n_blocks);
    put_ids(b, m->prompt, m->n_prompt);
    return end_frame(b, at);
}

bool dy_wire_prefill_done(dy_buf *b, const dy_msg_prefill_done *m)
{
    if (m->text_len > DY_WIRE_MAX_TEXT)
        return false;
    size_t at = begin_frame(b, DY_MSG_PREFILL_DONE);
    put_u64(b, m->id);
    put_u8(b, m->ok);
    put_u64(b, m->bytes);
    put_f64(b, m->prefill_seconds);
    put_f64(b, m->transfer_seconds);
    put_u32(b, m->computed_tokens);
    put_u32(b, m->cached_tokens);
    put_bytes(b, m->text, m->text_len);
    return end_frame(b, at);
}

bool dy_wire_kv_ready(dy_buf *b, const dy_msg_kv_ready *m)
{
    size_t at = begin_frame(b, DY_MSG_KV_READY);
    put_u64(b, m->id);
    put_u8(b, m->ok);
    put_u32(b, m->n_blocks);
    return end_frame(b, at);
}

/* The encoders check what the decoders check, so a frame we write is one we accept. */
static bool event_ok(const dy_kv_event *e)
{
    return e->kind <= DY_KV_EV_CLEARED && e->tier <= DY_WIRE_MAX_KV_TIER;
}

bool dy_wire_kv_events(dy_buf *b, const dy_msg_kv_events *m)
{
    if (m->seq == 0 || m->n_events > DY_WIRE_MAX_KV_EVENTS)
        return false;
    for (uint32_t i = 0; i < m->n_events; i++)
        if (!event_ok(&m->events[i]))
            return false;
    size_t at = begin_frame(b, DY_MSG_KV_EVENTS);
    put_u32(b, m->worker_id);
    put_u64(b, m->seq);
    put_u32(b, m->n_events);
    for (uint32_t i = 0; i < m->n_events; i++) {
        const dy_kv_event *e = &m->events[i];
        bool cleared = e->kind == DY_KV_EV_CLEARED;
        put_u8(b, e->kind);
        put_u8(b, e->tier);
        put_u64(b, cleared ? 0 : e->hash);
        put_u64(b, cleared ? 0 : e->parent);
    }
    return end_frame(b, at);
}

bool dy_wire_kv_snapshot(dy_buf *b, const dy_msg_kv_snapshot *m)
{
    if (m->n_blocks > DY_WIRE_MAX_KV_BLOCKS || m->n_parts == 0 ||
        m->n_parts > DY_WIRE_MAX_KV_PARTS || m->part >= m->n_parts)
        return false;
    for (uint32_t i = 0; i < m->n_blocks; i++)
        if (m->blocks[i].tier > DY_WIRE_MAX_KV_TIER)
            return false;
    size_t at = begin_frame(b, DY_MSG_KV_SNAPSHOT);
    put_u32(b, m->worker_id);
    put_u64(b, m->seq);
    put_u32(b, m->part);
    put_u32(b, m->n_parts);
    put_u32(b, m->n_blocks);
    for (uint32_t i = 0; i < m->n_blocks; i++) {
        put_u64(b, m->blocks[i].hash);
        put_u64(b, m->blocks[i].parent);
        put_u8(b, m->blocks[i].tier);
    }
    return end_frame(b, at);
}

bool dy_wire_kv_resync(dy_buf *b, const dy_msg_kv_resync *m)
{
    if (m->reason < DY_RESYNC_GAP || m->reason > DY_RESYNC_ERROR)
        return false;
    size_t at = begin_frame(b, DY_MSG_KV_RESYNC);
    put_u8(b, m->reason);
    put_u64(b, m->seen_seq);
    return end_frame(b, at);
}

bool dy_wire_role(dy_buf *b, const dy_msg_role *m)
{
    if (m->role > DY_ROLE_DECODE)
        return false;
    size_t at = begin_frame(b, DY_MSG_ROLE);
    put_u8(b, m->role);
    return end_frame(b, at);
}

bool dy_wire_peer_gone(dy_buf *b, const dy_msg_peer_gone *m)
{
    if (!m->peer[0])
        return false;
    size_t at = begin_frame(b, DY_MSG_PEER_GONE);
    put_name(b, m->peer);
    return end_frame(b, at);
}

bool dy_wire_hold(dy_buf *b, const dy_msg_hold *m)
{
    if (!m->session || (m->expected_ms > DY_WIRE_MAX_HOLD_MS && m->expected_ms != DY_WIRE_NO_HOLD))
        return false;
    size_t at = begin_frame(b, DY_MSG_HOLD);
    put_u64(b, m->session);
    put_u32(b, m->expected_ms);
    put_u8(b, m->release);
    return end_frame(b, at);
}

/* ---------------------------------------------------------------- decoding */

typedef struct {
    const uint8_t *p;
    size_t n, pos;
    char *err;
    size_t errlen;
    bool bad;
} reader;

static bool bad(reader *r, const char *fmt, ...)
{
    if (r->bad)
        return false;
    r->bad = true;
    int k = snprintf(r->err, r->errlen, "payload offset %zu: ", r->pos);
    if (k >= 0 && (size_t)k < r->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool get(reader *r, void *dst, size_t n)
{
    if (r->bad)
        return false;
    if (n > r->n - r->pos)
        return bad(r, "truncated (%zu bytes needed, %zu left)", n, r->n - r->pos);
    memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return true;
}

static uint8_t get_u8(reader *r) { uint8_t v = 0; get(r, &v, 1); return v; }
static uint32_t get_u32(reader *r) { uint32_t v = 0; get(r, &v, 4); return v; }
static int32_t get_i32(reader *r) { int32_t v = 0; get(r, &v, 4); return v; }
static uint64_t get_u64(reader *r) { uint64_t v = 0; get(r, &v, 8); return v; }
static double get_f64(reader *r) { double v = 0; get(r, &v, 8); return v; }

static float get_f32(reader *r)
{
    float v = 0;
    get(r, &v, 4);
    if (!isfinite(v) && !r->bad)
        bad(r, "non-finite float");
    return v;
}

/* A length-prefixed byte string of at most max bytes, left in place. */
static const char *get_bytes(reader *r, uint32_t *len, uint32_t max)
{
    *len = get_u32(r);
    if (r->bad)
        return NULL;
    if (*len > max) {
        bad(r, "string of %u bytes exceeds %u", *len, max);
        return NULL;
    }
    if (*len > r->n - r->pos) {
        bad(r, "truncated string");
        return NULL;
    }
    const char *s = (const char *)r->p + r->pos;
    r->pos += *len;
    return s;
}

static bool finish(reader *r)
{
    if (!r->bad && r->pos != r->n)
        bad(r, "%zu trailing bytes", r->n - r->pos);
    return !r->bad;
}

#define READER(p, n, err, errlen) {(p), (n), 0, (err), (errlen), false}

bool dy_wire_header(const uint8_t hdr[DY_WIRE_HEADER], dy_msg_type *type, uint32_t *len,
                    char *err, size_t errlen)
{
    uint32_t magic;
    uint16_t ver, t;
    memcpy(&magic, hdr, 4);
    memcpy(&ver, hdr + 4, 2);
    memcpy(&t, hdr + 6, 2);
    memcpy(len, hdr + 8, 4);
    if (magic != DY_WIRE_MAGIC) {
        snprintf(err, errlen, "bad frame magic 0x%08x", magic);
        return false;
    }
    if (ver != DY_WIRE_VERSION) {
        snprintf(err, errlen, "wire version %u, this build speaks %u", ver, DY_WIRE_VERSION);
        return false;
    }
    if (t < DY_MSG_HELLO || t > DY_MSG_LAST) {
        snprintf(err, errlen, "unknown message type %u", t);
        return false;
    }
    if (*len > DY_WIRE_MAX_PAYLOAD) {
        snprintf(err, errlen, "frame of %u bytes exceeds the %u limit", *len, DY_WIRE_MAX_PAYLOAD);
        return false;
    }
    *type = (dy_msg_type)t;
    return true;
}

/* A length-prefixed name of at most DY_WIRE_MAX_PEER bytes, copied NUL-terminated. */
static bool get_name(reader *r, char out[DY_WIRE_MAX_PEER + 1])
{
    uint32_t len;
    const char *s = get_bytes(r, &len, DY_WIRE_MAX_PEER);
    if (!s)
        return false;
    if (memchr(s, 0, len))
        return bad(r, "name with a NUL byte");
    memcpy(out, s, len);
    out[len] = 0;
    return true;
}

/* A count-prefixed array of int32 ids (at most max), copied into a malloc'd array. */
static int32_t *get_ids(reader *r, uint32_t *n, uint32_t max)
{
    *n = get_u32(r);
    if (r->bad)
        return NULL;
    if (*n > max || *n > (r->n - r->pos) / 4) {
        bad(r, "%u ids do not fit the payload", *n);
        return NULL;
    }
    int32_t *ids = malloc(4 * (size_t)(*n ? *n : 1));
    if (!ids) {
        bad(r, "out of memory");
        return NULL;
    }
    get(r, ids, 4 * (size_t)*n);
    return ids;
}

bool dy_wire_decode_hello(const uint8_t *p, size_t n, dy_msg_hello *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    m->worker_id = get_u32(&r);
    m->pid = get_u32(&r);
    m->fingerprint = get_u64(&r);
    m->ctx_len = get_u32(&r);
    m->vocab_size = get_u32(&r);
    m->kv_blocks = get_u32(&r);
    m->block_size = get_u32(&r);
    m->role = get_u8(&r);
    m->block_bytes = get_u32(&r);
    if (!r.bad && m->role > DY_ROLE_DECODE)
        return bad(&r, "unknown worker role %u", m->role);
    return get_name(&r, m->shm_name) && get_name(&r, m->tcp_addr) && finish(&r);
}

/* The request's grammar text: length 0 is none (NULL); otherwise a NUL-terminated copy, so
 * that it outlives the frame buffer. */
static bool get_grammar(reader *r, dy_msg_request *m)
{
    uint32_t len;
    const char *s = get_bytes(r, &len, DY_WIRE_MAX_GRAMMAR);
    if (!s)
        return false;
    if (len == 0)
        return true;
    if (memchr(s, 0, len))
        return bad(r, "grammar with a NUL byte");
    if (!(m->grammar = malloc((size_t)len + 1)))
        return bad(r, "out of memory for a grammar of %u bytes", len);
    memcpy(m->grammar, s, len);
    m->grammar[len] = 0;
    m->grammar_len = len;
    return true;
}

bool dy_wire_decode_request(const uint8_t *p, size_t n, dy_msg_request *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    memset(m, 0, sizeof *m);
    m->id = get_u64(&r);
    m->max_tokens = get_u32(&r);
    m->temperature = get_f32(&r);
    m->top_p = get_f32(&r);
    m->min_p = get_f32(&r);
    m->top_k = get_i32(&r);
    m->seed = get_u64(&r);
    m->stream = get_u32(&r);
    m->n_samples = get_u32(&r);
    m->ignore_eos = get_u8(&r);
    m->want_logprobs = get_u8(&r);
    m->n_logprobs = get_u8(&r);
    m->n_stops = get_u8(&r);
    m->remote_prefill = get_u8(&r);
    m->session = get_u64(&r);
    m->hold_ms = get_u32(&r);
    if (m->n_logprobs > DY_WIRE_MAX_TOP)
        return bad(&r, "%u logprobs exceed %d", m->n_logprobs, DY_WIRE_MAX_TOP);
    if (!r.bad && (m->n_samples == 0 || m->n_samples > DY_WIRE_MAX_SAMPLES))
        return bad(&r, "%u samples (1 to %d allowed)", m->n_samples, DY_WIRE_MAX_SAMPLES);
    if (!r.bad && m->hold_ms > DY_WIRE_MAX_HOLD_MS && m->hold_ms != DY_WIRE_NO_HOLD)
        return bad(&r, "hold of %u ms", m->hold_ms);
    if (m->n_stops > DY_WIRE_MAX_STOPS)
        return bad(&r, "%u stop strings exceed %d", m->n_stops, DY_WIRE_MAX_STOPS);
    for (int i = 0; i < m->n_stops; i++) {
        uint32_t len;
        const char *s = get_bytes(&r, &len, DY_WIRE_MAX_STOP_LEN);
        if (!s)
            return false;
        if (memchr(s, 0, len))
            return bad(&r, "stop string with a NUL byte");
        memcpy(m->stops[i], s, len);
        m->stops[i][len] = 0;
    }
    if (!get_grammar(&r, m))
        return false;
    m->n_prompt = get_u32(&r);
    if (r.bad)
        return false;
    if (m->n_prompt == 0 || m->n_prompt > (r.n - r.pos) / 4 || (r.n - r.pos) != 4 * (size_t)m->n_prompt)
        return bad(&r, "prompt of %u tokens does not match the %zu bytes left", m->n_prompt,
                   r.n - r.pos);
    /* Copied out: the payload need not be 4-byte aligned. */
    m->prompt = malloc(4 * (size_t)m->n_prompt);
    if (!m->prompt)
        return bad(&r, "out of memory for %u prompt tokens", m->n_prompt);
    get(&r, m->prompt, 4 * (size_t)m->n_prompt);
    return finish(&r);
}

void dy_msg_request_free(dy_msg_request *m)
{
    free(m->prompt);
    m->prompt = NULL;
    free(m->grammar);
    m->grammar = NULL;
    m->grammar_len = 0;
}

bool dy_wire_decode_cancel(const uint8_t *p, size_t n, dy_msg_cancel *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    m->id = get_u64(&r);
    return finish(&r);
}

bool dy_wire_decode_token(const uint8_t *p, size_t n, dy_msg_token *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    memset(m, 0, sizeof *m);
    m->id = get_u64(&r);
    m->token = get_i32(&r);
    m->logprob = get_f32(&r);
    m->n_top = get_u8(&r);
    if (m->n_top > DY_WIRE_MAX_TOP)
        return bad(&r, "%u top logprobs exceed %d", m->n_top, DY_WIRE_MAX_TOP);
    for (int i = 0; i < m->n_top; i++) {
        m->top_ids[i] = get_i32(&r);
        m->top_logprobs[i] = get_f32(&r);
    }
    m->text = get_bytes(&r, &m->text_len, DY_WIRE_MAX_TEXT);
    return finish(&r);
}

bool dy_wire_decode_done(const uint8_t *p, size_t n, dy_msg_done *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    m->id = get_u64(&r);
    m->finish = get_u8(&r);
    m->prompt_tokens = get_u32(&r);
    m->cached_tokens = get_u32(&r);
    m->completion_tokens = get_u32(&r);
    m->queue_us = get_u32(&r);
    m->tier_outcome = get_u8(&r);
    m->tier_tokens = get_u32(&r);
    m->tier_load_us = get_u32(&r);
    m->tier_recompute_us = get_u32(&r);
    m->tier_wait_us = get_u32(&r);
    if (!r.bad && (m->finish < DY_END_STOP || m->finish > DY_END_ERROR))
        return bad(&r, "unknown finish reason %u", m->finish);
    if (!r.bad && m->tier_outcome > DY_WIRE_MAX_TIER_OUTCOME)
        return bad(&r, "unknown KV tier outcome %u", m->tier_outcome);
    m->text = get_bytes(&r, &m->text_len, DY_WIRE_MAX_TEXT);
    return finish(&r);
}

/* false if the numbers cannot be right (the reader's own errors are its own). */
static bool get_tier_stats(reader *r, dy_msg_tier_stats *t)
{
    t->on = get_u8(r);
    t->slots = get_u32(r);
    t->used = get_u32(r);
    t->blocks_in = get_u64(r);
    t->blocks_out = get_u64(r);
    t->bytes_in = get_u64(r);
    t->bytes_out = get_u64(r);
    t->seconds_in = get_f64(r);
    t->seconds_out = get_f64(r);
    t->evicted = get_u64(r);
    t->bad = get_u64(r);
    t->errors = get_u64(r);
    return r->bad || (t->on <= 1 && t->used <= t->slots && t->seconds_in >= 0 &&
                      isfinite(t->seconds_in) && t->seconds_out >= 0 && isfinite(t->seconds_out));
}

bool dy_wire_decode_stats(const uint8_t *p, size_t n, dy_msg_stats *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    m->running = get_u32(&r);
    m->waiting = get_u32(&r);
    m->queued_prefill_tokens = get_u64(&r);
    m->kv_blocks_used = get_u32(&r);
    m->kv_blocks_total = get_u32(&r);
    m->prompt_tokens = get_u64(&r);
    m->generated_tokens = get_u64(&r);
    m->cache_lookup_blocks = get_u64(&r);
    m->cache_hit_blocks = get_u64(&r);
    m->preemptions = get_u64(&r);
    m->steps = get_u64(&r);
    m->step_seconds = get_f64(&r);
    m->active_decode_blocks = get_u32(&r);
    m->kv_event_seq = get_u64(&r);
    m->shm_bytes = get_u64(&r);
    for (int t = 0; t < 2 && !r.bad; t++)
        if (!get_tier_stats(&r, &m->tiers[t]))
            return bad(&r, "bad KV tier counters");
    m->tier_loads = get_u64(&r);
    m->tier_recomputes = get_u64(&r);
    m->tier_load_failures = get_u64(&r);
    m->hold_sessions = get_u32(&r);
    m->hold_pinned = get_u32(&r);
    m->hold_prefetched_blocks = get_u64(&r);
    m->hold_expired = get_u64(&r);
    m->hold_parked_blocks = get_u64(&r);
    if (!r.bad && !(m->step_seconds >= 0 && isfinite(m->step_seconds)))
        return bad(&r, "bad step time");
    return finish(&r);
}

void dy_msg_kv_alloc_free(dy_msg_kv_alloc *m)
{
    free(m->blocks);
    m->blocks = NULL;
}

void dy_msg_prefill_free(dy_msg_prefill *m)
{
    free(m->dest);
    free(m->prompt);
    m->dest = m->prompt = NULL;
}

#define MAX_IDS (DY_WIRE_MAX_PAYLOAD / 4)

bool dy_wire_decode_kv_alloc(const uint8_t *p, size_t n, dy_msg_kv_alloc *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    memset(m, 0, sizeof *m);
    m->id = get_u64(&r);
    m->local = get_u8(&r);
    m->cached_tokens = get_u32(&r);
    m->first_block = get_u32(&r);
    m->blocks = get_ids(&r, &m->n_blocks, MAX_IDS);
    return finish(&r);
}

bool dy_wire_decode_prefill(const uint8_t *p, size_t n, dy_msg_prefill *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    memset(m, 0, sizeof *m);
    m->id = get_u64(&r);
    m->xfer = get_u8(&r);
    if (!r.bad && m->xfer != DY_XFER_SHM && m->xfer != DY_XFER_TCP &&
        m->xfer != DY_XFER_UCX)
        return bad(&r, "unknown transfer kind %u", m->xfer);
    if (!get_name(&r, m->peer))
        return false;
    m->first_block = get_u32(&r);
    m->dest = get_ids(&r, &m->n_blocks, MAX_IDS);
    if (!r.bad)
        m->prompt = get_ids(&r, &m->n_prompt, MAX_IDS);
    if (!r.bad && m->n_prompt == 0)
        return bad(&r, "empty prompt");
    return finish(&r);
}

bool dy_wire_decode_prefill_done(const uint8_t *p, size_t n, dy_msg_prefill_done *m, char *err,
                                 size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    memset(m, 0, sizeof *m);
    m->id = get_u64(&r);
    m->ok = get_u8(&r);
    m->bytes = get_u64(&r);
    m->prefill_seconds = get_f64(&r);
    m->transfer_seconds = get_f64(&r);
    m->computed_tokens = get_u32(&r);
    m->cached_tokens = get_u32(&r);
    if (!r.bad && !(m->prefill_seconds >= 0 && m->transfer_seconds >= 0 &&
                    isfinite(m->prefill_seconds) && isfinite(m->transfer_seconds)))
        return bad(&r, "bad durations");
    m->text = get_bytes(&r, &m->text_len, DY_WIRE_MAX_TEXT);
    return finish(&r);
}

bool dy_wire_decode_kv_ready(const uint8_t *p, size_t n, dy_msg_kv_ready *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    m->id = get_u64(&r);
    m->ok = get_u8(&r);
    m->n_blocks = get_u32(&r);
    return finish(&r);
}

/* A count of `size`-byte records (at most max), checked against the bytes left before
 * anything is allocated; returns a malloc'd array of n dy_kv_event, or NULL. */
static dy_kv_event *get_kv_array(reader *r, uint32_t *n, uint32_t max, size_t size)
{
    *n = get_u32(r);
    if (r->bad)
        return NULL;
    if (*n > max || *n > (r->n - r->pos) / size) {
        bad(r, "%u KV records do not fit the payload", *n);
        return NULL;
    }
    dy_kv_event *a = malloc(sizeof *a * (size_t)(*n ? *n : 1));
    if (!a)
        bad(r, "out of memory for %u KV records", *n);
    return a;
}

void dy_msg_kv_events_free(dy_msg_kv_events *m)
{
    free(m->events);
    m->events = NULL;
    m->n_events = 0;
}

void dy_msg_kv_snapshot_free(dy_msg_kv_snapshot *m)
{
    free(m->blocks);
    m->blocks = NULL;
    m->n_blocks = 0;
}

bool dy_wire_decode_kv_events(const uint8_t *p, size_t n, dy_msg_kv_events *m, char *err,
                              size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    memset(m, 0, sizeof *m);
    m->worker_id = get_u32(&r);
    m->seq = get_u64(&r);
    if (!r.bad && m->seq == 0)
        return bad(&r, "KV event batch with seq 0");
    m->events = get_kv_array(&r, &m->n_events, DY_WIRE_MAX_KV_EVENTS, 18);
    for (uint32_t i = 0; i < m->n_events && !r.bad; i++) {
        dy_kv_event *e = &m->events[i];
        e->kind = get_u8(&r);
        e->tier = get_u8(&r);
        e->hash = get_u64(&r);
        e->parent = get_u64(&r);
        if (e->kind > DY_KV_EV_CLEARED)
            bad(&r, "unknown KV event kind %u", e->kind);
        else if (e->tier > DY_WIRE_MAX_KV_TIER)
            bad(&r, "unknown KV tier %u", e->tier);
        else if (e->kind == DY_KV_EV_CLEARED && (e->hash || e->parent))
            bad(&r, "CLEARED event with a hash");
    }
    if (finish(&r))
        return true;
    dy_msg_kv_events_free(m);
    return false;
}

bool dy_wire_decode_kv_snapshot(const uint8_t *p, size_t n, dy_msg_kv_snapshot *m, char *err,
                                size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    memset(m, 0, sizeof *m);
    m->worker_id = get_u32(&r);
    m->seq = get_u64(&r);
    m->part = get_u32(&r);
    m->n_parts = get_u32(&r);
    if (!r.bad && (m->n_parts == 0 || m->n_parts > DY_WIRE_MAX_KV_PARTS || m->part >= m->n_parts))
        return bad(&r, "snapshot part %u of %u", m->part, m->n_parts);
    m->blocks = get_kv_array(&r, &m->n_blocks, DY_WIRE_MAX_KV_BLOCKS, 17);
    for (uint32_t i = 0; i < m->n_blocks && !r.bad; i++) {
        dy_kv_event *e = &m->blocks[i];
        e->kind = DY_KV_EV_STORED;
        e->hash = get_u64(&r);
        e->parent = get_u64(&r);
        e->tier = get_u8(&r);
        if (e->tier > DY_WIRE_MAX_KV_TIER)
            bad(&r, "unknown KV tier %u", e->tier);
    }
    if (finish(&r))
        return true;
    dy_msg_kv_snapshot_free(m);
    return false;
}

bool dy_wire_decode_kv_resync(const uint8_t *p, size_t n, dy_msg_kv_resync *m, char *err,
                              size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    m->reason = get_u8(&r);
    m->seen_seq = get_u64(&r);
    if (!r.bad && (m->reason < DY_RESYNC_GAP || m->reason > DY_RESYNC_ERROR))
        return bad(&r, "unknown resync reason %u", m->reason);
    return finish(&r);
}

bool dy_wire_decode_role(const uint8_t *p, size_t n, dy_msg_role *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    m->role = get_u8(&r);
    if (!r.bad && m->role > DY_ROLE_DECODE)
        return bad(&r, "unknown role %u", m->role);
    return finish(&r);
}

bool dy_wire_decode_hold(const uint8_t *p, size_t n, dy_msg_hold *m, char *err, size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    m->session = get_u64(&r);
    m->expected_ms = get_u32(&r);
    m->release = get_u8(&r);
    if (!r.bad && !m->session)
        return bad(&r, "HOLD for no session");
    if (!r.bad && m->expected_ms > DY_WIRE_MAX_HOLD_MS && m->expected_ms != DY_WIRE_NO_HOLD)
        return bad(&r, "hold of %u ms", m->expected_ms);
    if (!r.bad && m->release > 1)
        return bad(&r, "bad release flag %u", m->release);
    return finish(&r);
}

bool dy_wire_decode_peer_gone(const uint8_t *p, size_t n, dy_msg_peer_gone *m, char *err,
                              size_t errlen)
{
    reader r = READER(p, n, err, errlen);
    if (!get_name(&r, m->peer))
        return false;
    if (!m->peer[0])
        return bad(&r, "empty peer name");
    return finish(&r);
}

bool dy_wire_check_payload(dy_msg_type t, const uint8_t *p, size_t n, char *err, size_t errlen)
{
    union {
        dy_msg_hello h;
        dy_msg_request r;
        dy_msg_cancel c;
        dy_msg_token t;
        dy_msg_done d;
        dy_msg_stats s;
        dy_msg_kv_alloc ka;
        dy_msg_prefill pf;
        dy_msg_prefill_done pd;
        dy_msg_kv_ready kr;
        dy_msg_kv_events ke;
        dy_msg_kv_snapshot ks;
        dy_msg_kv_resync rs;
        dy_msg_role ro;
        dy_msg_peer_gone pg;
        dy_msg_hold ho;
    } m;
    memset(&m, 0, sizeof m);
    bool ok = false;
    switch (t) {
    case DY_MSG_HELLO: ok = dy_wire_decode_hello(p, n, &m.h, err, errlen); break;
    case DY_MSG_REQUEST:
        ok = dy_wire_decode_request(p, n, &m.r, err, errlen);
        dy_msg_request_free(&m.r);
        break;
    case DY_MSG_CANCEL: ok = dy_wire_decode_cancel(p, n, &m.c, err, errlen); break;
    case DY_MSG_TOKEN: ok = dy_wire_decode_token(p, n, &m.t, err, errlen); break;
    case DY_MSG_DONE: ok = dy_wire_decode_done(p, n, &m.d, err, errlen); break;
    case DY_MSG_STATS: ok = dy_wire_decode_stats(p, n, &m.s, err, errlen); break;
    case DY_MSG_SHUTDOWN:
        ok = n == 0;
        if (!ok)
            snprintf(err, errlen, "SHUTDOWN with a %zu-byte payload", n);
        break;
    case DY_MSG_KV_ALLOC:
        ok = dy_wire_decode_kv_alloc(p, n, &m.ka, err, errlen);
        dy_msg_kv_alloc_free(&m.ka);
        break;
    case DY_MSG_PREFILL:
        ok = dy_wire_decode_prefill(p, n, &m.pf, err, errlen);
        dy_msg_prefill_free(&m.pf);
        break;
    case DY_MSG_PREFILL_DONE: ok = dy_wire_decode_prefill_done(p, n, &m.pd, err, errlen); break;
    case DY_MSG_KV_READY: ok = dy_wire_decode_kv_ready(p, n, &m.kr, err, errlen); break;
    case DY_MSG_KV_EVENTS:
        ok = dy_wire_decode_kv_events(p, n, &m.ke, err, errlen);
        dy_msg_kv_events_free(&m.ke);
        break;
    case DY_MSG_KV_SNAPSHOT:
        ok = dy_wire_decode_kv_snapshot(p, n, &m.ks, err, errlen);
        dy_msg_kv_snapshot_free(&m.ks);
        break;
    case DY_MSG_KV_RESYNC: ok = dy_wire_decode_kv_resync(p, n, &m.rs, err, errlen); break;
    case DY_MSG_ROLE: ok = dy_wire_decode_role(p, n, &m.ro, err, errlen); break;
    case DY_MSG_PEER_GONE: ok = dy_wire_decode_peer_gone(p, n, &m.pg, err, errlen); break;
    case DY_MSG_HOLD: ok = dy_wire_decode_hold(p, n, &m.ho, err, errlen); break;
    default: snprintf(err, errlen, "unknown frame type %d", (int)t); break;
    }
    return ok;
}
