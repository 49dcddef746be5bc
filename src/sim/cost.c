/* cost.c — cost-model files (read, validate, write) and the two step-time formulas. Every
 * field of the format is one row of a table below; the loader, the validator and the writer
 * all walk those tables, so a field is added in one place and always round-trips. The fit from
 * `dyad bench engine --json` is in cost_fit.c. */
#include "sim/cost.h"
#include "sim/cost_internal.h"
#include "util/json_err.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Activations cross NVLink in bf16 in the TP all-reduce. */
#define ACT_BYTES 2.0
/* Two all-reduces per layer: after attention and after the MLP (Megatron-style TP). */
#define ALLREDUCES_PER_LAYER 2.0

typedef enum {
    F_STR,     /* a string */
    F_OPT_STR, /* a string, or absent */
    F_NONNEG,  /* a number >= 0 */
    F_OPT_NONNEG, /* a number >= 0, or absent (0; not written when 0) */
    F_POS,     /* a number > 0 */
    F_FRAC,    /* a number in (0, 1] */
    F_INT,     /* an integer >= 1 */
    F_INT64,   /* an integer >= 1, 64-bit */
} field_type;

typedef struct {
    const char *key;
    field_type type;
    size_t off; /* into dy_cost_model */
} field;

typedef struct {
    const char *key; /* the object's key at the top level; NULL: the top level itself */
    const field *fields;
    int n;
} section;

#define F(k, t, member) {k, t, offsetof(dy_cost_model, member)}
#define N(a) ((int)(sizeof a / sizeof a[0]))

static const field measured_top[] = {
    F("name", F_STR, name),
    F("source", F_OPT_STR, source),
};
static const field measured_engine[] = {
    F("model", F_STR, engine.model),
    F("threads", F_INT, engine.threads),
    F("fixed_ms", F_NONNEG, engine.fixed_ms),
    F("prefill_ms_per_token", F_NONNEG, engine.prefill_ms_per_token),
    F("prefill_ms_per_context", F_NONNEG, engine.prefill_ms_per_context),
    F("decode_ms_per_seq", F_NONNEG, engine.decode_ms_per_seq),
    F("decode_ms_per_context", F_NONNEG, engine.decode_ms_per_context),
    F("token_overhead_ms", F_OPT_NONNEG, engine.token_overhead_ms),
    F("source", F_OPT_STR, engine.source),
};
static const field measured_kv[] = {
    F("bytes_per_token", F_INT64, kv.bytes_per_token),
    F("capacity_tokens", F_INT64, kv.capacity_tokens),
};
static const field measured_transfer[] = {
    F("backend", F_STR, xfer.backend),
    F("gbps", F_POS, xfer.gbps),
    F("latency_us", F_NONNEG, xfer.latency_us),
    F("source", F_OPT_STR, xfer.source),
};
static const section measured_sections[] = {
    {NULL, measured_top, N(measured_top)},
    {"engine", measured_engine, N(measured_engine)},
    {"kv", measured_kv, N(measured_kv)},
    {"transfer", measured_transfer, N(measured_transfer)},
};

static const field roofline_top[] = {
    F("name", F_STR, name),
    F("source", F_OPT_STR, source),
    F("tp", F_INT, tp),
};
static const field roofline_hardware[] = {
    F("name", F_STR, hw.name),
    F("hbm_gbps", F_POS, hw.hbm_gbps),
    F("hbm_gb", F_POS, hw.hbm_gb),
    F("bf16_tflops", F_POS, hw.bf16_tflops),
    F("fp8_tflops", F_POS, hw.fp8_tflops),
    F("nvlink_gbps", F_POS, hw.nvlink_gbps),
    F("allreduce_latency_us", F_NONNEG, hw.allreduce_latency_us),
    F("source", F_OPT_STR, hw.source),
};
static const field roofline_model[] = {
    F("name", F_STR, model.name),
    F("params", F_POS, model.params),
    F("layers", F_INT, model.layers),
    F("hidden", F_INT, model.hidden),
    F("heads", F_INT, model.heads),
    F("kv_heads", F_INT, model.kv_heads),
    F("head_dim", F_INT, model.head_dim),
    F("weight_bytes_per_param", F_POS, model.weight_bytes_per_param),
    F("kv_bytes_per_elem", F_POS, model.kv_bytes_per_elem),
    F("source", F_OPT_STR, model.source),
};
static const field roofline_efficiency[] = {
    F("prefill_compute", F_FRAC, eff.prefill_compute),
    F("decode_bandwidth", F_FRAC, eff.decode_bandwidth),
    F("overhead_ms", F_NONNEG, eff.overhead_ms),
    F("memory_utilization", F_FRAC, eff.memory_utilization),
    F("source", F_OPT_STR, eff.source),
};
static const field roofline_transfer[] = {
    F("backend", F_STR, xfer.backend),
    F("gbps_per_gpu", F_POS, xfer.gbps),
    F("latency_us", F_NONNEG, xfer.latency_us),
    F("source", F_OPT_STR, xfer.source),
};
static const section roofline_sections[] = {
    {NULL, roofline_top, N(roofline_top)},
    {"hardware", roofline_hardware, N(roofline_hardware)},
    {"model", roofline_model, N(roofline_model)},
    {"efficiency", roofline_efficiency, N(roofline_efficiency)},
    {"transfer", roofline_transfer, N(roofline_transfer)},
};

static const char *kind_names[] = {"measured", "roofline"};

static void sections_of(dy_cost_kind k, const section **s, int *n)
{
    *s = k == DY_COST_MEASURED ? measured_sections : roofline_sections;
    *n = k == DY_COST_MEASURED ? N(measured_sections) : N(roofline_sections);
}

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct {
    const char *path;
    char *err;
    size_t errlen;
} reader;

static int fail(const reader *r, const char *obj, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes "PATH: obj.key: message" and returns -1. */
static int fail(const reader *r, const char *obj, const char *key, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "%s: %s%s%s: %s", r->path, obj ? obj : "", obj ? "." : "",
             key, msg);
    return -1;
}

static const char *type_rule(field_type t)
{
    switch (t) {
    case F_STR:
    case F_OPT_STR: return "must be a string";
    case F_NONNEG:
    case F_OPT_NONNEG: return "must be a number >= 0";
    case F_POS: return "must be a number > 0";
    case F_FRAC: return "must be a number in (0, 1]";
    case F_INT:
    case F_INT64: return "must be an integer >= 1";
    }
    return "invalid";
}

static bool value_ok(field_type t, const json_t *v)
{
    switch (t) {
    case F_STR:
    case F_OPT_STR: return json_is_string(v);
    case F_NONNEG:
    case F_OPT_NONNEG: return json_is_number(v) && json_number_value(v) >= 0;
    case F_POS: return json_is_number(v) && json_number_value(v) > 0;
    case F_FRAC:
        return json_is_number(v) && json_number_value(v) > 0 && json_number_value(v) <= 1;
    case F_INT: return json_is_integer(v) && json_integer_value(v) >= 1 &&
                       json_integer_value(v) <= 1 << 30;
    case F_INT64: return json_is_integer(v) && json_integer_value(v) >= 1;
    }
    return false;
}

static int store(dy_cost_model *m, const field *f, const json_t *v)
{
    void *dst = (char *)m + f->off;
    switch (f->type) {
    case F_STR:
    case F_OPT_STR:
        if (!(*(char **)dst = strdup(json_string_value(v))))
            return -1;
        return 0;
    case F_NONNEG:
    case F_OPT_NONNEG:
    case F_POS:
    case F_FRAC: *(double *)dst = json_number_value(v); return 0;
    case F_INT: *(int *)dst = (int)json_integer_value(v); return 0;
    case F_INT64: *(int64_t *)dst = (int64_t)json_integer_value(v); return 0;
    }
    return -1;
}

static bool in_section(const section *s, const char *key)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->fields[i].key, key))
            return true;
    return false;
}

/* A key the format does not have is refused: a misspelt field must not read as missing. */
static int check_keys(const reader *r, const json_t *obj, const section *s, int n)
{
    const section *own = &s[0];
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        bool known = in_section(own, key) || (!own->key && !strcmp(key, "kind"));
        for (int i = 1; i < n && !own->key; i++)
            known = known || !strcmp(s[i].key, key); /* the top level holds the sections */
        if (!known)
            return fail(r, own->key, key, "unknown field");
    }
    return 0;
}

/* Reads the section s[0]; the top level (s[0].key == NULL) also holds the sections s[1..n). */
static int read_section(const reader *r, const json_t *root, const section *sections, int n,
                        dy_cost_model *m)
{
    const section *s = &sections[0];
    const json_t *obj = s->key ? json_object_get(root, s->key) : root;
    if (!obj)
        return fail(r, NULL, s->key, "missing");
    if (!json_is_object(obj))
        return fail(r, NULL, s->key, "must be an object");
    if (check_keys(r, obj, sections, n) != 0)
        return -1;
    for (int i = 0; i < s->n; i++) {
        const field *f = &s->fields[i];
        const json_t *v = json_object_get(obj, f->key);
        if (!v && (f->type == F_OPT_STR || f->type == F_OPT_NONNEG))
            continue;
        if (!v)
            return fail(r, s->key, f->key, "missing");
        if (!value_ok(f->type, v))
            return fail(r, s->key, f->key, "%s", type_rule(f->type));
        if (store(m, f, v) != 0)
            return fail(r, s->key, f->key, "out of memory");
    }
    return 0;
}

static int read_kind(const reader *r, const json_t *root, dy_cost_kind *k)
{
    const json_t *v = json_object_get(root, "kind");
    if (!v)
        return fail(r, NULL, "kind", "missing");
    for (int i = 0; i < 2; i++)
        if (json_is_string(v) && !strcmp(json_string_value(v), kind_names[i])) {
            *k = (dy_cost_kind)i;
            return 0;
        }
    return fail(r, NULL, "kind", "must be \"measured\" or \"roofline\"");
}

/* Bytes of KV one token occupies in the whole model, from its shape. */
static double roofline_kv_bytes_per_token(const dy_cost_model *m)
{
    return 2.0 * m->model.layers * m->model.kv_heads * m->model.head_dim *
           m->model.kv_bytes_per_elem;
}

/* Checks that the TP degree splits the model and that its weights fit, and derives the KV
 * figures the accessors report. */
static int apply_tp(dy_cost_model *m, int tp, const reader *r)
{
    if (tp != 1 && tp != 2 && tp != 4 && tp != 8)
        return fail(r, NULL, "tp", "must be 1, 2, 4 or 8");
    if (m->model.kv_heads % tp || m->model.heads % tp)
        return fail(r, NULL, "tp", "must divide model.heads (%d) and model.kv_heads (%d)",
                    m->model.heads, m->model.kv_heads);
    double free_bytes = m->hw.hbm_gb * 1e9 * tp * m->eff.memory_utilization -
                        m->model.params * m->model.weight_bytes_per_param;
    double per_token = roofline_kv_bytes_per_token(m);
    if (free_bytes < per_token)
        return fail(r, NULL, "tp", "%d × %g GB leaves no room for KV after the weights", tp,
                    m->hw.hbm_gb);
    m->tp = tp;
    m->kv.bytes_per_token = (int64_t)per_token;
    m->kv.capacity_tokens = (int64_t)(free_bytes / per_token);
    return 0;
}

dy_cost_model *dy_cost_load(const char *path, char *err, size_t errlen)
{
    reader r = {path, err, errlen};
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        dy_json_load_error(err, errlen, path, jerr.line, jerr.text);
        return NULL;
    }
    dy_cost_model *m = calloc(1, sizeof *m);
    int rc = -1;
    if (!m) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: must be a JSON object", path);
        goto out;
    }
    if (read_kind(&r, root, &m->kind) != 0)
        goto out;
    const section *s;
    int n;
    sections_of(m->kind, &s, &n);
    for (int i = 0; i < n; i++)
        if (read_section(&r, root, &s[i], i ? 1 : n, m) != 0)
            goto out;
    rc = m->kind == DY_COST_ROOFLINE ? apply_tp(m, m->tp, &r) : 0;
out:
    json_decref(root);
    if (rc != 0) {
        dy_cost_free(m);
        return NULL;
    }
    return m;
}

/* ---- writing ---------------------------------------------------------------------------- */

static json_t *field_json(const dy_cost_model *m, const field *f)
{
    const void *src = (const char *)m + f->off;
    switch (f->type) {
    case F_STR:
    case F_OPT_STR: return *(char *const *)src ? json_string(*(char *const *)src) : NULL;
    case F_OPT_NONNEG:
        return *(const double *)src > 0 ? json_real(*(const double *)src) : NULL;
    case F_NONNEG:
    case F_POS:
    case F_FRAC: return json_real(*(const double *)src);
    case F_INT: return json_integer(*(const int *)src);
    case F_INT64: return json_integer(*(const int64_t *)src);
    }
    return NULL;
}

static json_t *model_json(const dy_cost_model *m)
{
    json_t *root = json_object();
    json_object_set_new(root, "kind", json_string(kind_names[m->kind]));
    const section *s;
    int n;
    sections_of(m->kind, &s, &n);
    for (int i = 0; i < n; i++) {
        json_t *obj = s[i].key ? json_object() : root;
        for (int j = 0; j < s[i].n; j++) {
            json_t *v = field_json(m, &s[i].fields[j]);
            if (v)
                json_object_set_new(obj, s[i].fields[j].key, v);
        }
        if (s[i].key)
            json_object_set_new(root, s[i].key, obj);
    }
    return root;
}

int dy_cost_save(const dy_cost_model *m, const char *path, char *err, size_t errlen)
{
    json_t *root = model_json(m);
    /* 17 significant digits: every double reads back to the same bits. */
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                                            JSON_REAL_PRECISION(17));
    json_decref(root);
    if (rc != 0)
        snprintf(err, errlen, "%s: cannot write", path);
    return rc ? -1 : 0;
}

void dy_cost_free(dy_cost_model *m)
{
    if (!m)
        return;
    const section *s;
    int n;
    sections_of(m->kind, &s, &n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < s[i].n; j++)
            if (s[i].fields[j].type == F_STR || s[i].fields[j].type == F_OPT_STR)
                free(*(char **)((char *)m + s[i].fields[j].off));
    free(m);
}

/* ---- pricing ---------------------------------------------------------------------------- */

static double measured_step_seconds(const dy_cost_model *m, const dy_step_shape *s)
{
    const double ms = m->engine.fixed_ms + m->engine.prefill_ms_per_token * s->prefill_tokens +
                      m->engine.prefill_ms_per_context * (double)s->prefill_context +
                      (m->engine.decode_ms_per_seq + m->engine.token_overhead_ms) *
                          s->decode_seqs +
                      m->engine.decode_ms_per_context * (double)s->decode_context;
    return ms / 1e3;
}

/* Bytes one GPU of the TP group reads from HBM: its shard of the weights once, the KV the
 * decoding sequences attend to, and the KV the prefill tokens write. */
static double roofline_bytes(const dy_cost_model *m, const dy_step_shape *s)
{
    const double weights = m->model.params * m->model.weight_bytes_per_param;
    const double kv = roofline_kv_bytes_per_token(m) *
                      ((double)s->decode_context + s->prefill_tokens);
    return (weights + kv) / m->tp;
}

/* Seconds of tensor-core time on one GPU at peak: the linear layers (2 FLOPs per parameter
 * per token, at fp8 peak when the weights are one byte) and attention (QKᵀ and PV: 4 FLOPs per
 * head dimension per attended position per layer, in bf16), each split over the TP group. */
static double roofline_compute_seconds(const dy_cost_model *m, const dy_step_shape *s)
{
    const double tokens = (double)s->prefill_tokens + s->decode_seqs;
    const double linear_peak =
        (m->model.weight_bytes_per_param <= 1 ? m->hw.fp8_tflops : m->hw.bf16_tflops) * 1e12;
    const double linear = 2.0 * m->model.params * tokens / linear_peak;
    const double attended = (double)s->prefill_context + (double)s->decode_context;
    const double attention = 4.0 * m->model.layers * m->model.heads * m->model.head_dim *
                             attended / (m->hw.bf16_tflops * 1e12);
    return (linear + attention) / m->tp;
}

/* Ring all-reduce of the step's activations, twice per layer: each GPU sends and receives
 * 2(tp-1)/tp of the buffer over one direction of its NVLink (half the datasheet figure, which
 * counts both directions). */
static double roofline_allreduce_seconds(const dy_cost_model *m, const dy_step_shape *s)
{
    if (m->tp == 1)
        return 0;
    const double tokens = (double)s->prefill_tokens + s->decode_seqs;
    const double buffer = tokens * m->model.hidden * ACT_BYTES;
    const double wire = 2.0 * (m->tp - 1) / m->tp * buffer / (m->hw.nvlink_gbps / 2 * 1e9);
    return ALLREDUCES_PER_LAYER * m->model.layers * (wire + m->hw.allreduce_latency_us * 1e-6);
}

static double roofline_step_seconds(const dy_cost_model *m, const dy_step_shape *s)
{
    const double memory =
        roofline_bytes(m, s) / (m->hw.hbm_gbps * 1e9 * m->eff.decode_bandwidth);
    const double compute = roofline_compute_seconds(m, s) / m->eff.prefill_compute;
    return fmax(memory, compute) + roofline_allreduce_seconds(m, s) + m->eff.overhead_ms / 1e3;
}

double dy_cost_step_seconds(const dy_cost_model *m, const dy_step_shape *s)
{
    if (s->prefill_tokens == 0 && s->decode_seqs == 0)
        return 0;
    return m->kind == DY_COST_MEASURED ? measured_step_seconds(m, s)
                                       : roofline_step_seconds(m, s);
}

double dy_cost_transfer_seconds(const dy_cost_model *m, int64_t bytes)
{
    if (bytes <= 0)
        return 0;
    /* A roofline worker's GPUs each ship their own KV-head shard over their own NIC. */
    const double gbps = m->kind == DY_COST_ROOFLINE ? m->xfer.gbps * m->tp : m->xfer.gbps;
    return m->xfer.latency_us * 1e-6 + (double)bytes / (gbps * 1e9);
}

/* ---- accessors -------------------------------------------------------------------------- */

const char *dy_cost_name(const dy_cost_model *m) { return m->name; }
const char *dy_cost_served_model(const dy_cost_model *m)
{
    return m->kind == DY_COST_MEASURED ? m->engine.model : m->model.name;
}
const char *dy_cost_hardware(const dy_cost_model *m)
{
    return m->kind == DY_COST_ROOFLINE ? m->hw.name : NULL;
}
dy_cost_kind dy_cost_get_kind(const dy_cost_model *m) { return m->kind; }
int64_t dy_cost_kv_bytes_per_token(const dy_cost_model *m) { return m->kv.bytes_per_token; }
int64_t dy_cost_kv_capacity_tokens(const dy_cost_model *m) { return m->kv.capacity_tokens; }
int dy_cost_tp(const dy_cost_model *m) { return m->kind == DY_COST_ROOFLINE ? m->tp : 1; }
int dy_cost_threads(const dy_cost_model *m)
{
    return m->kind == DY_COST_MEASURED ? m->engine.threads : 0;
}

int dy_cost_set_tp(dy_cost_model *m, int tp, char *err, size_t errlen)
{
    reader r = {m->name, err, errlen};
    if (m->kind != DY_COST_ROOFLINE) {
        snprintf(err, errlen, "%s: a measured model has no TP degree", m->name);
        return -1;
    }
    return apply_tp(m, tp, &r);
}
