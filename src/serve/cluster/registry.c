/* registry.c — the worker registry's entries (see registry.h): their keys, their JSON values
 * written and read through one table of fields (serve/cluster/fields.h: a field is added in
 * one place and always round-trips), and the lease state `dyad cluster status` shows. The functions over NATS are
 * in registry_nats.c. Everything here is pure: no NATS, no clock. */
#include "serve/cluster/registry.h"

#include "kv/kv_pool.h"
#include "serve/cluster/fields.h"
#include "serve/wire/wire.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names of the enumerated fields ------------------------------------------------------ */

static const char *role_name(int v)
{
    switch (v) {
    case DY_ROLE_AGG: return "agg";
    case DY_ROLE_PREFILL: return "prefill";
    case DY_ROLE_DECODE: return "decode";
    }
    return NULL;
}

static const char *kv_type_name(int v)
{
    return v >= 0 && v < DY_KV_N_TYPES ? dy_kv_type_name((dy_kv_type)v) : NULL;
}

/* A worker with no KV receiver (a prefill worker, or one that only serves locally) has none. */
static const char *xfer_name(int v)
{
    switch (v) {
    case 0: return "";
    case DY_XFER_TCP: return "tcp";
    case DY_XFER_UCX: return "ucx";
    }
    return NULL;
}

const char *dy_reg_role_name(int role)
{
    return role_name(role);
}

/* ---- the table of fields ------------------------------------------------------------------ */

#define OFF(m) offsetof(dy_reg_entry, m)
#define U32_MAX_D 4294967295.0

static const dy_field fields[] = {
    {.key = "id", .type = DY_F_U32, .off = OFF(id), .lo = 0, .hi = U32_MAX_D},
    {.key = "incarnation", .type = DY_F_HEX, .off = OFF(incarnation)},
    {.key = "host", .type = DY_F_STR, .off = OFF(host)},
    {.key = "pid", .type = DY_F_U32, .off = OFF(pid), .lo = 1, .hi = U32_MAX_D},
    {.key = "role", .type = DY_F_NAME, .off = OFF(role), .name = role_name,
     .max_value = DY_ROLE_DECODE},
    {.key = "model", .type = DY_F_STR, .off = OFF(model)},
    {.key = "fingerprint", .type = DY_F_HEX64, .off = OFF(fingerprint)},
    /* the same bounds as `dyad worker --block-size` and --threads */
    {.key = "block_size", .type = DY_F_U32, .off = OFF(block_size), .lo = 1, .hi = 256},
    {.key = "kv_blocks", .type = DY_F_U32, .off = OFF(kv_blocks), .lo = 1, .hi = U32_MAX_D},
    {.key = "kv_type", .type = DY_F_NAME, .off = OFF(kv_type), .name = kv_type_name,
     .max_value = DY_KV_N_TYPES - 1},
    {.key = "kv_addr", .type = DY_F_STR, .off = OFF(kv_addr), .may_be_empty = true},
    {.key = "kv_transfer", .type = DY_F_NAME, .off = OFF(kv_transfer), .name = xfer_name,
     .max_value = DY_XFER_UCX},
    {.key = "threads", .type = DY_F_U32, .off = OFF(threads), .lo = 1, .hi = 256},
    {.key = "lease_s", .type = DY_F_LEASE, .off = OFF(lease_s)},
    {.key = "draining", .type = DY_F_BOOL, .off = OFF(draining)},
};

#define LOFF(m) (offsetof(dy_reg_entry, load) + offsetof(dy_reg_load, m))
static const dy_field load_fields[] = {
    {.key = "running", .type = DY_F_U32, .off = LOFF(running), .lo = 0, .hi = U32_MAX_D},
    {.key = "waiting", .type = DY_F_U32, .off = LOFF(waiting), .lo = 0, .hi = U32_MAX_D},
    {.key = "kv_used", .type = DY_F_U32, .off = LOFF(kv_used), .lo = 0, .hi = U32_MAX_D},
    {.key = "kv_total", .type = DY_F_U32, .off = LOFF(kv_total), .lo = 0, .hi = U32_MAX_D},
};
#define N(a) (sizeof a / sizeof a[0])

/* ---- keys --------------------------------------------------------------------------------- */

void dy_reg_key(uint32_t id, char key[DY_REG_KEY_LEN + 1])
{
    snprintf(key, DY_REG_KEY_LEN + 1, "w%08" PRIx32, id);
}

bool dy_reg_parse_key(const char *key, uint32_t *id)
{
    /* lowercase only, as dy_reg_key writes it: "wDEADBEEF" would be a second key for one id */
    if (!key || key[0] != 'w' || strlen(key) != DY_REG_KEY_LEN)
        return false;
    for (int i = 1; i < DY_REG_KEY_LEN; i++)
        if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f')))
            return false;
    *id = (uint32_t)strtoul(key + 1, NULL, 16);
    return true;
}

/* ---- encoding ----------------------------------------------------------------------------- */

json_t *dy_reg_to_json(const dy_reg_entry *e)
{
    json_t *obj = json_object(), *load = json_object();
    bool ok = obj && load && dy_fields_set(obj, e, fields, N(fields)) &&
              dy_fields_set(load, e, load_fields, N(load_fields));
    if (ok && json_object_set(obj, "load", load) == 0) {
        json_decref(load);
        return obj;
    }
    json_decref(load);
    json_decref(obj);
    return NULL;
}

int dy_reg_encode(const dy_reg_entry *e, char *out, size_t cap)
{
    json_t *obj = dy_reg_to_json(e);
    if (!obj || cap == 0) {
        json_decref(obj);
        return -1;
    }
    size_t need = json_dumpb(obj, out, cap, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    if (need == 0 || need >= cap) /* 0: jansson could not write it */
        return -1;
    out[need] = 0;
    return (int)need;
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* What the fields cannot say one at a time. */
static bool check_entry(const dy_freader *r, const dy_reg_entry *e)
{
    if ((e->kv_addr[0] == 0) != (e->kv_transfer == 0))
        return dy_field_fail(r, "kv_transfer", "must be \"\" exactly when kv_addr is \"\"");
    if (e->load.kv_used > e->load.kv_total)
        return dy_field_fail(r, "load.kv_used",
                             "%" PRIu32 " is more than load.kv_total (%" PRIu32 ")",
                             e->load.kv_used, e->load.kv_total);
    return true;
}

static bool decode_root(const dy_freader *r, const json_t *root, void *out)
{
    dy_reg_entry *e = out;
    if (!dy_fields_read(r, root, fields, N(fields), e))
        return false;
    const json_t *load = json_object_get(root, "load");
    if (!load)
        return dy_field_fail(r, "load", "missing");
    if (!json_is_object(load))
        return dy_field_fail(r, "load", "must be an object");
    dy_freader in_load = {r->err, r->errlen, "load."};
    return dy_fields_read(&in_load, load, load_fields, N(load_fields), e) && check_entry(r, e);
}

bool dy_reg_decode(const void *value, size_t len, dy_reg_entry *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    bool ok = dy_fields_decode("value", value, len, DY_REG_MAX_VALUE, decode_root, e, err,
                               errlen);
    if (!ok)
        memset(e, 0, sizeof *e);
    return ok;
}

/* ---- leases ------------------------------------------------------------------------------- */

bool dy_reg_lease_state(double age_s, double lease_s, char *out, size_t cap)
{
    bool expired = age_s > lease_s;
    if (expired)
        snprintf(out, cap, "EXPIRED %.1f s ago (lease %g s)", age_s - lease_s, lease_s);
    else
        snprintf(out, cap, "renewed %.1f s ago / lease %g s", age_s, lease_s);
    return expired;
}
