/* test_sim_cost.c — cost models (sim/cost.h): a file round-trips through save and load; every
 * required field, missing or of the wrong type, is refused with the file and the field named
 * (driven by a table); a roofline step is priced as computed by hand on both sides of the
 * roofline, with and without tensor parallelism; transfers; the presets in the repository
 * load; the fit recovers known coefficients from a synthetic `dyad bench engine --json`; and
 * a backend's link is read from `dyad bench xfer --json`. */
#include "testutil.h"
#include "sim/cost.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char measured_json[] =
    "{\"kind\": \"measured\", \"name\": \"m\","
    " \"engine\": {\"model\": \"stories260K.bin\", \"threads\": 2, \"fixed_ms\": 1,"
    "  \"prefill_ms_per_token\": 0.01, \"prefill_ms_per_context\": 0.0001,"
    "  \"decode_ms_per_seq\": 0.1, \"decode_ms_per_context\": 0.001},"
    " \"kv\": {\"bytes_per_token\": 1280, \"capacity_tokens\": 65536},"
    " \"transfer\": {\"backend\": \"tcp\", \"gbps\": 2, \"latency_us\": 50}}";

/* Round numbers, so that the expected step times below are arithmetic one can check. */
static const char roofline_json[] =
    "{\"kind\": \"roofline\", \"name\": \"r\", \"tp\": 1,"
    " \"hardware\": {\"name\": \"toy\", \"hbm_gbps\": 1000, \"hbm_gb\": 100,"
    "  \"bf16_tflops\": 100, \"fp8_tflops\": 200, \"nvlink_gbps\": 400,"
    "  \"allreduce_latency_us\": 5},"
    " \"model\": {\"name\": \"toy\", \"params\": 1e10, \"layers\": 10, \"hidden\": 1000,"
    "  \"heads\": 10, \"kv_heads\": 2, \"head_dim\": 100, \"weight_bytes_per_param\": 1,"
    "  \"kv_bytes_per_elem\": 2},"
    " \"efficiency\": {\"prefill_compute\": 0.5, \"decode_bandwidth\": 0.8,"
    "  \"overhead_ms\": 1, \"memory_utilization\": 0.9},"
    " \"transfer\": {\"backend\": \"rdma\", \"gbps_per_gpu\": 50, \"latency_us\": 10}}";

static char tmp_path[256];

static const char *write_tmp(const char *text)
{
    snprintf(tmp_path, sizeof tmp_path, "/tmp/dyad-test-cost-%d.json", (int)getpid());
    FILE *f = fopen(tmp_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return tmp_path;
}

static dy_cost_model *load_text(const char *text)
{
    char err[512];
    dy_cost_model *m = dy_cost_load(write_tmp(text), err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    return m;
}

static void assert_near(double got, double want)
{
    if (fabs(got - want) > 1e-12 + 1e-9 * fabs(want))
        fail_msg("got %.15g, want %.15g", got, want);
}

/* ---------------------------------------------------------------- round trip */

static char *read_all(const char *path)
{
    size_t n;
    char *s = tu_read_file(path, &n);
    assert_non_null(s);
    return s;
}

static void round_trip(const char *text)
{
    char err[512], a[300], b[300];
    dy_cost_model *m = load_text(text);
    snprintf(a, sizeof a, "/tmp/dyad-test-cost-a-%d.json", (int)getpid());
    snprintf(b, sizeof b, "/tmp/dyad-test-cost-b-%d.json", (int)getpid());
    assert_int_equal(dy_cost_save(m, a, err, sizeof err), 0);
    dy_cost_model *m2 = dy_cost_load(a, err, sizeof err);
    if (!m2)
        fail_msg("%s", err);
    assert_int_equal(dy_cost_save(m2, b, err, sizeof err), 0);
    char *sa = read_all(a), *sb = read_all(b);
    assert_string_equal(sa, sb);
    assert_string_equal(dy_cost_name(m), dy_cost_name(m2));
    assert_int_equal(dy_cost_get_kind(m), dy_cost_get_kind(m2));
    assert_int_equal(dy_cost_kv_bytes_per_token(m), dy_cost_kv_bytes_per_token(m2));
    assert_int_equal(dy_cost_kv_capacity_tokens(m), dy_cost_kv_capacity_tokens(m2));
    assert_int_equal(dy_cost_tp(m), dy_cost_tp(m2));
    assert_int_equal(dy_cost_threads(m), dy_cost_threads(m2));
    const dy_step_shape shapes[] = {{100, 5050, 0, 0}, {0, 0, 8, 4096}, {37, 900, 5, 777}};
    for (int i = 0; i < 3; i++)
        assert_true(dy_cost_step_seconds(m, &shapes[i]) ==
                    dy_cost_step_seconds(m2, &shapes[i]));
    assert_true(dy_cost_transfer_seconds(m, 123456) == dy_cost_transfer_seconds(m2, 123456));
    free(sa);
    free(sb);
    unlink(a);
    unlink(b);
    dy_cost_free(m);
    dy_cost_free(m2);
}

static void test_round_trip(void **st)
{
    (void)st;
    round_trip(measured_json);
    round_trip(roofline_json);
}

/* ---------------------------------------------------------------- validation */

/* Every required field of each kind, and a value of the wrong type for it. */
typedef struct {
    const char *object; /* NULL: the top level */
    const char *key;
    const char *wrong; /* JSON text */
} required;

static const required measured_fields[] = {
    {NULL, "kind", "\"estimated\""},
    {NULL, "name", "7"},
    {NULL, "engine", "[]"},
    {"engine", "model", "1"},
    {"engine", "threads", "1.5"},
    {"engine", "fixed_ms", "\"1\""},
    {"engine", "prefill_ms_per_token", "-1"},
    {"engine", "prefill_ms_per_context", "null"},
    {"engine", "decode_ms_per_seq", "true"},
    {"engine", "decode_ms_per_context", "{}"},
    {NULL, "kv", "1"},
    {"kv", "bytes_per_token", "0"},
    {"kv", "capacity_tokens", "\"many\""},
    {NULL, "transfer", "\"tcp\""},
    {"transfer", "backend", "2"},
    {"transfer", "gbps", "0"},
    {"transfer", "latency_us", "-0.5"},
};

static const required roofline_fields[] = {
    {NULL, "kind", "1"},
    {NULL, "name", "[]"},
    {NULL, "tp", "2.5"},
    {NULL, "hardware", "\"H100\""},
    {"hardware", "name", "3"},
    {"hardware", "hbm_gbps", "0"},
    {"hardware", "hbm_gb", "\"80\""},
    {"hardware", "bf16_tflops", "-989"},
    {"hardware", "fp8_tflops", "null"},
    {"hardware", "nvlink_gbps", "false"},
    {"hardware", "allreduce_latency_us", "-1"},
    {NULL, "model", "[1]"},
    {"model", "name", "{}"},
    {"model", "params", "0"},
    {"model", "layers", "0"},
    {"model", "hidden", "1e3"},
    {"model", "heads", "\"10\""},
    {"model", "kv_heads", "-2"},
    {"model", "head_dim", "null"},
    {"model", "weight_bytes_per_param", "0"},
    {"model", "kv_bytes_per_elem", "\"fp8\""},
    {NULL, "efficiency", "0.5"},
    {"efficiency", "prefill_compute", "1.5"},
    {"efficiency", "decode_bandwidth", "0"},
    {"efficiency", "overhead_ms", "-1"},
    {"efficiency", "memory_utilization", "2"},
    {NULL, "transfer", "null"},
    {"transfer", "backend", "0"},
    {"transfer", "gbps_per_gpu", "-50"},
    {"transfer", "latency_us", "\"10us\""},
};

/* The good text with one field removed (wrong == NULL) or replaced. */
static char *mutate(const char *good, const required *f, const char *wrong)
{
    json_error_t jerr;
    json_t *root = json_loads(good, 0, &jerr);
    assert_non_null(root);
    json_t *obj = f->object ? json_object_get(root, f->object) : root;
    assert_non_null(json_object_get(obj, f->key));
    if (wrong) {
        json_t *v = json_loads(wrong, JSON_DECODE_ANY, &jerr);
        assert_non_null(v);
        json_object_set_new(obj, f->key, v);
    } else {
        json_object_del(obj, f->key);
    }
    char *text = json_dumps(root, 0);
    json_decref(root);
    return text;
}

static void expect_refused(const char *text, const required *f, const char *what)
{
    char err[512], want[600];
    dy_cost_model *m = dy_cost_load(write_tmp(text), err, sizeof err);
    if (m)
        fail_msg("%s%s%s (%s) was accepted", f->object ? f->object : "", f->object ? "." : "",
                 f->key, what);
    snprintf(want, sizeof want, "%s: %s%s%s: %s", tmp_path, f->object ? f->object : "",
             f->object ? "." : "", f->key, what);
    if (strncmp(err, want, strlen(want)))
        fail_msg("error \"%s\", want it to start \"%s\"", err, want);
}

static void check_fields(const char *good, const required *fields, int n)
{
    for (int i = 0; i < n; i++) {
        char *missing = mutate(good, &fields[i], NULL);
        expect_refused(missing, &fields[i], "missing");
        free(missing);
        char *wrong = mutate(good, &fields[i], fields[i].wrong);
        expect_refused(wrong, &fields[i], "must be");
        free(wrong);
    }
}

static void test_every_field_is_checked(void **st)
{
    (void)st;
    check_fields(measured_json, measured_fields, sizeof measured_fields / sizeof *measured_fields);
    check_fields(roofline_json, roofline_fields, sizeof roofline_fields / sizeof *roofline_fields);
}

static void test_unknown_and_malformed(void **st)
{
    (void)st;
    char err[512];
    char *text = strdup(measured_json);
    char *at = strstr(text, "\"fixed_ms\"");
    memcpy(at, "\"fixed_MS\"", 10); /* a typo must not silently become a missing default */
    assert_null(dy_cost_load(write_tmp(text), err, sizeof err));
    assert_non_null(strstr(err, "engine.fixed_MS: unknown field"));
    free(text);
    assert_null(dy_cost_load(write_tmp("{\"kind\": \"measured\","), err, sizeof err));
    assert_non_null(strstr(err, tmp_path));
    assert_non_null(strstr(err, "line 1"));
    assert_null(dy_cost_load("/nonexistent/costs.json", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/costs.json"));
    /* A TP degree that does not divide the heads (10) is refused at load. */
    text = strdup(roofline_json);
    memcpy(strstr(text, "\"tp\": 1"), "\"tp\": 4", 7);
    assert_null(dy_cost_load(write_tmp(text), err, sizeof err));
    assert_non_null(strstr(err, ": tp: must divide"));
    free(text);
    unlink(tmp_path);
}

/* ---------------------------------------------------------------- pricing */

static void test_measured_step(void **st)
{
    (void)st;
    dy_cost_model *m = load_text(measured_json);
    dy_step_shape s = {.prefill_tokens = 10, .prefill_context = 55, .decode_seqs = 4,
                       .decode_context = 400};
    /* 1 + 0.01·10 + 0.0001·55 + 0.1·4 + 0.001·400 ms */
    assert_near(dy_cost_step_seconds(m, &s), 1.9055e-3);
    dy_step_shape none = {0};
    assert_near(dy_cost_step_seconds(m, &none), 0);
    assert_int_equal(dy_cost_kv_bytes_per_token(m), 1280);
    assert_int_equal(dy_cost_kv_capacity_tokens(m), 65536);
    assert_int_equal(dy_cost_threads(m), 2);
    assert_int_equal(dy_cost_tp(m), 1);
    char err[256];
    assert_int_equal(dy_cost_set_tp(m, 2, err, sizeof err), -1);
    /* 50 µs + 1e6 bytes / 2 GB/s */
    assert_near(dy_cost_transfer_seconds(m, 1000000), 5.5e-4);
    assert_near(dy_cost_transfer_seconds(m, 0), 0);
    dy_cost_free(m);
}

/* Ten sequences decoding at context 1000: the weights dominate the bytes.
 *   bytes   = 1e10 (weights) + 8000 B/token (2·10 layers·2 heads·100·2 B) · 10000 = 1.008e10
 *   memory  = 1.008e10 / (1000 GB/s · 0.8)                              = 12.6 ms
 *   compute = (2·1e10·10 / 200 TFLOP/s + 4·10·10·100·10000 / 100 TFLOP/s) / 0.5 = 2.008 ms
 *   step    = max + 1 ms overhead                                        = 13.6 ms */
static void test_roofline_decode_is_bandwidth_bound(void **st)
{
    (void)st;
    dy_cost_model *m = load_text(roofline_json);
    dy_step_shape s = {.decode_seqs = 10, .decode_context = 10000};
    assert_near(dy_cost_step_seconds(m, &s), 0.0136);
    assert_int_equal(dy_cost_kv_bytes_per_token(m), 8000);
    /* (100 GB · 0.9 − 10 GB of weights) / 8000 B */
    assert_int_equal(dy_cost_kv_capacity_tokens(m), 10000000);
    dy_cost_free(m);
}

/* A 1000-token prompt: the linear layers dominate.
 *   compute = (2·1e10·1000 / 200 TFLOP/s + 4·10·10·100·500500 / 100 TFLOP/s) / 0.5
 *           = (0.1 + 2.002e-4) / 0.5 s = 200.4004 ms
 *   memory  = (1e10 + 8000·1000) / 8e11 = 12.51 ms;  step = 200.4004 + 1 ms
 * At TP 2 every term halves, and each of the 20 all-reduces moves 2·(1/2)·(1000·1000·2 B)
 * over 200 GB/s (one direction of 400) in 10 µs, plus 5 µs latency: 0.3 ms in all. */
static void test_roofline_prefill_is_compute_bound(void **st)
{
    (void)st;
    char err[256];
    dy_cost_model *m = load_text(roofline_json);
    dy_step_shape s = {.prefill_tokens = 1000, .prefill_context = 1000 * 1001 / 2};
    assert_near(dy_cost_step_seconds(m, &s), 0.2014004);
    assert_int_equal(dy_cost_set_tp(m, 2, err, sizeof err), 0);
    assert_int_equal(dy_cost_tp(m), 2);
    assert_near(dy_cost_step_seconds(m, &s), 0.1002002 + 0.0003 + 0.001);
    /* (200 GB · 0.9 − 10 GB) / 8000 B */
    assert_int_equal(dy_cost_kv_capacity_tokens(m), 21250000);
    dy_cost_free(m);
}

static void test_roofline_transfer_and_tp(void **st)
{
    (void)st;
    char err[256];
    dy_cost_model *m = load_text(roofline_json);
    /* 10 µs + 1 GB / 50 GB/s; at TP 2 two NICs carry it. */
    assert_near(dy_cost_transfer_seconds(m, 1000000000), 0.02001);
    assert_int_equal(dy_cost_set_tp(m, 2, err, sizeof err), 0);
    assert_near(dy_cost_transfer_seconds(m, 1000000000), 0.01001);
    assert_int_equal(dy_cost_set_tp(m, 3, err, sizeof err), -1);
    assert_non_null(strstr(err, "tp: must be 1, 2, 4 or 8"));
    assert_int_equal(dy_cost_set_tp(m, 4, err, sizeof err), -1); /* 10 heads */
    assert_int_equal(dy_cost_tp(m), 2);                           /* unchanged on failure */
    assert_int_equal(dy_cost_threads(m), 0);
    dy_cost_free(m);
}

/* ---------------------------------------------------------------- presets */

static const char *presets[] = {
    "sim/costs/h100-llama3.1-8b-fp8.json",
    "sim/costs/h100-llama3.1-70b-fp8.json",
    "sim/costs/h200-llama3.1-8b-fp8.json",
    "sim/costs/h200-llama3.1-70b-fp8.json",
};

static void test_presets_load(void **st)
{
    (void)st;
    char err[512];
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        dy_cost_model *m = dy_cost_load(tu_path(presets[i]), err, sizeof err);
        if (!m)
            fail_msg("%s", err);
        assert_int_equal(dy_cost_get_kind(m), DY_COST_ROOFLINE);
        /* Every TP degree the issue searches works where the weights fit; a decode step
         * is faster with more GPUs. */
        double last = 1e9;
        for (int tp = 1; tp <= 8; tp *= 2) {
            if (dy_cost_set_tp(m, tp, err, sizeof err) != 0)
                continue;
            dy_step_shape s = {.decode_seqs = 64, .decode_context = 64 * 2048};
            double t = dy_cost_step_seconds(m, &s);
            assert_true(t > 0 && t < last);
            last = t;
        }
        assert_true(last < 1e9);
        dy_cost_free(m);
    }
}

/* ---------------------------------------------------------------- fit */

typedef struct {
    double fixed, per_token, per_context, per_seq, per_decode_context;
} coefs;

static double step_ms(const coefs *c, double P, double Pctx, double D, double Dctx)
{
    return c->fixed + c->per_token * P + c->per_context * Pctx + c->per_seq * D +
           c->per_decode_context * Dctx;
}

/* A bench line as `dyad bench engine --json` prints it, with times from known coefficients,
 * each multiplied by 1 + noise·(a fixed pattern of ±1). */
static const char *write_bench(const coefs *c, double noise)
{
    static const int P[] = {1, 4, 16, 64, 128, 512}, C[] = {16, 64, 128, 512},
                     B[] = {1, 2, 4, 8, 16, 32, 64};
    char text[8192];
    int k = 0, sign = 1;
    k += snprintf(text + k, sizeof text - k,
                  "{\"model\":\"toy.bin\",\"type\":\"f32\",\"threads\":2,\"kernels\":\"avx2\","
                  "\"reps\":3,\"context\":1024,\"batch_context\":64,\"kv_bytes_per_token\":1280,"
                  "\"prefill\":[");
    for (int i = 0; i < 6; i++, sign = -sign)
        k += snprintf(text + k, sizeof text - k, "%s{\"p\":%d,\"ms\":%.17g}", i ? "," : "",
                      P[i], step_ms(c, P[i], P[i] * (P[i] + 1) / 2.0, 0, 0) * (1 + sign * noise));
    k += snprintf(text + k, sizeof text - k, "],\"decode\":[");
    for (int i = 0; i < 4; i++, sign = -sign)
        k += snprintf(text + k, sizeof text - k, "%s{\"context\":%d,\"ms_per_token\":%.17g}",
                      i ? "," : "", C[i], step_ms(c, 0, 0, 1, C[i]) * (1 + sign * noise));
    k += snprintf(text + k, sizeof text - k, "],\"batch\":[");
    for (int i = 0; i < 7; i++, sign = -sign)
        k += snprintf(text + k, sizeof text - k, "%s{\"b\":%d,\"ms\":%.17g}", i ? "," : "", B[i],
                      step_ms(c, 0, 0, B[i], 64.0 * B[i]) * (1 + sign * noise));
    snprintf(text + k, sizeof text - k, "],\"fit_a_ms\":0}\n");
    return write_tmp(text);
}

static const dy_cost_fit_opts fit_opts = {
    .kv_capacity_tokens = 4096, .xfer_backend = "shm", .xfer_gbps = 8, .xfer_latency_us = 20};

static void test_fit_recovers_known_coefficients(void **st)
{
    (void)st;
    char err[512], saved[300];
    const coefs c = {0.3, 0.02, 0.00004, 0.15, 0.0006};
    dy_cost_model *m = dy_cost_fit(write_bench(&c, 0), &fit_opts, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    const dy_step_shape s[] = {{200, 20100, 0, 0}, {0, 0, 24, 24 * 300}, {50, 3000, 7, 900}};
    for (int i = 0; i < 3; i++)
        assert_near(dy_cost_step_seconds(m, &s[i]),
                    step_ms(&c, s[i].prefill_tokens, (double)s[i].prefill_context,
                            s[i].decode_seqs, (double)s[i].decode_context) / 1e3);
    assert_string_equal(dy_cost_name(m), "toy.bin-2t");
    assert_int_equal(dy_cost_threads(m), 2);
    assert_int_equal(dy_cost_kv_bytes_per_token(m), 1280);
    assert_int_equal(dy_cost_kv_capacity_tokens(m), 4096);
    assert_near(dy_cost_transfer_seconds(m, 8000000), 20e-6 + 1e-3);
    /* What the fit writes is a valid cost-model file. */
    snprintf(saved, sizeof saved, "/tmp/dyad-test-cost-fit-%d.json", (int)getpid());
    assert_int_equal(dy_cost_save(m, saved, err, sizeof err), 0);
    dy_cost_model *back = dy_cost_load(saved, err, sizeof err);
    if (!back)
        fail_msg("%s", err);
    assert_true(dy_cost_step_seconds(back, &s[2]) == dy_cost_step_seconds(m, &s[2]));
    unlink(saved);
    dy_cost_free(back);
    dy_cost_free(m);
}

/* With a term that costs nothing and noisy times, the fit may want it negative; it keeps
 * every coefficient >= 0 and still prices within the noise. */
static void test_fit_keeps_coefficients_nonnegative(void **st)
{
    (void)st;
    char err[512];
    const coefs c = {0.0, 0.02, 0.0, 0.15, 0.0006};
    dy_cost_model *m = dy_cost_fit(write_bench(&c, 0.02), &fit_opts, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    char saved[300];
    snprintf(saved, sizeof saved, "/tmp/dyad-test-cost-nn-%d.json", (int)getpid());
    assert_int_equal(dy_cost_save(m, saved, err, sizeof err), 0);
    json_error_t jerr;
    json_t *root = json_load_file(saved, 0, &jerr);
    assert_non_null(root);
    const char *keys[] = {"fixed_ms", "prefill_ms_per_token", "prefill_ms_per_context",
                          "decode_ms_per_seq", "decode_ms_per_context"};
    for (int i = 0; i < 5; i++)
        assert_true(json_number_value(json_object_get(json_object_get(root, "engine"),
                                                      keys[i])) >= 0);
    json_decref(root);
    unlink(saved);
    dy_step_shape s = {.decode_seqs = 16, .decode_context = 16 * 64};
    double want = step_ms(&c, 0, 0, 16, 1024) / 1e3, got = dy_cost_step_seconds(m, &s);
    assert_true(fabs(got - want) < 0.05 * want);
    dy_cost_free(m);
}

static void test_fit_refuses_bad_bench(void **st)
{
    (void)st;
    char err[512];
    assert_null(dy_cost_fit(write_tmp("{\"model\":\"x\",\"threads\":2}\n"), &fit_opts, err,
                            sizeof err));
    assert_non_null(strstr(err, tmp_path));
    assert_null(dy_cost_fit(write_tmp("not json\n"), &fit_opts, err, sizeof err));
    assert_non_null(strstr(err, "line 1"));
    const coefs c = {0.3, 0.02, 0.00004, 0.15, 0.0006};
    dy_cost_fit_opts other = fit_opts;
    other.model = "absent.bin";
    assert_null(dy_cost_fit(write_bench(&c, 0), &other, err, sizeof err));
    assert_non_null(strstr(err, "absent.bin"));
    other = fit_opts;
    other.kv_capacity_tokens = 0;
    assert_null(dy_cost_fit(write_bench(&c, 0), &other, err, sizeof err));
    unlink(tmp_path);
}

static void test_read_xfer(void **st)
{
    (void)st;
    char err[512];
    double gbps = 0, lat = -1;
    const char *path = write_tmp(
        "{\"shape\":\"110m\",\"block_bytes\":1179648,\"backends\":["
        "{\"backend\":\"memcpy\",\"gbps\":6.2},"
        "{\"backend\":\"shm\",\"gbps\":6.5,\"latency_us\":0.5},"
        "{\"backend\":\"tcp\",\"gbps\":3.25,\"latency_us\":58}]}");
    assert_int_equal(dy_cost_read_xfer(path, "tcp", &gbps, &lat, err, sizeof err), 0);
    assert_near(gbps, 3.25);
    assert_near(lat, 58);
    assert_int_equal(dy_cost_read_xfer(path, "shm", &gbps, &lat, err, sizeof err), 0);
    assert_near(gbps, 6.5);
    assert_int_equal(dy_cost_read_xfer(path, "rdma", &gbps, &lat, err, sizeof err), -1);
    assert_non_null(strstr(err, "no \"rdma\""));
    /* memcpy is a floor, not a link: it has no latency to fit from. */
    assert_int_equal(dy_cost_read_xfer(path, "memcpy", &gbps, &lat, err, sizeof err), -1);
    assert_non_null(strstr(err, "backends[0]"));
    unlink(tmp_path);
}

/* ---------------------------------------------------------------- token overhead */

/* A measured model may price what a token costs outside the engine step: per decoding
 * sequence, optional (absent: 0, and not written back), never negative. */
static void test_token_overhead_field(void **state)
{
    (void)state;
    dy_cost_model *m = load_text(measured_json);
    dy_step_shape two = {.decode_seqs = 2, .decode_context = 100};
    double plain = dy_cost_step_seconds(m, &two);
    dy_cost_free(m);
    char *text = strdup(measured_json);
    assert_non_null(text);
    char *at = strstr(text, "\"decode_ms_per_context\"");
    assert_non_null(at);
    char with[2048];
    snprintf(with, sizeof with, "%.*s\"token_overhead_ms\": 0.5, %s", (int)(at - text), text, at);
    m = load_text(with);
    assert_near(dy_cost_step_seconds(m, &two), plain + 2 * 0.5e-3);
    char err[512];
    assert_int_equal(dy_cost_save(m, tmp_path, err, sizeof err), 0);
    char *saved = read_all(tmp_path);
    assert_non_null(strstr(saved, "token_overhead_ms"));
    free(saved);
    dy_cost_free(m);
    m = load_text(measured_json); /* absent: not written */
    assert_int_equal(dy_cost_save(m, tmp_path, err, sizeof err), 0);
    saved = read_all(tmp_path);
    assert_null(strstr(saved, "token_overhead_ms"));
    free(saved);
    dy_cost_free(m);
    snprintf(with, sizeof with, "%.*s\"token_overhead_ms\": -1, %s", (int)(at - text), text, at);
    assert_null(dy_cost_load(write_tmp(with), err, sizeof err));
    assert_non_null(strstr(err, "engine.token_overhead_ms: must be a number >= 0"));
    free(text);
}

/* From a real run's report: 2 requests of 100 prompt and 4 output tokens at a mean TPOT of
 * 3 ms; the model's engine gives 1 + 0.1 + 0.001 x context for one decoding sequence, at
 * contexts 102..104 for tokens 2..4 (mean 1.203 ms), so 1.797 ms a token is outside it. */
static void test_token_overhead_from_run(void **state)
{
    (void)state;
    dy_cost_model *m = load_text(measured_json);
    char err[512];
    write_tmp("{\"completed\": 2, \"input_tokens\": 200, \"output_tokens\": 8,"
              " \"tpot_ms\": {\"mean\": 3.0}}\n");
    assert_near(dy_cost_set_token_overhead(m, tmp_path, err, sizeof err), 1.797);
    assert_near(dy_cost_set_token_overhead(m, tmp_path, err, sizeof err), 1.797); /* again */
    dy_step_shape one = {.decode_seqs = 1, .decode_context = 102};
    assert_near(dy_cost_step_seconds(m, &one), (1 + 0.1 + 0.102 + 1.797) / 1e3);
    write_tmp("{\"completed\": 2, \"input_tokens\": 200, \"output_tokens\": 8,"
              " \"tpot_ms\": {\"mean\": 1.0}}\n"); /* faster than the engine: none */
    assert_near(dy_cost_set_token_overhead(m, tmp_path, err, sizeof err), 0);
    write_tmp("{\"completed\": 2, \"input_tokens\": 200}\n");
    assert_true(dy_cost_set_token_overhead(m, tmp_path, err, sizeof err) < 0);
    assert_non_null(strstr(err, "output_tokens: must be a number > 0"));
    dy_cost_free(m);
    m = load_text(roofline_json);
    assert_true(dy_cost_set_token_overhead(m, tmp_path, err, sizeof err) < 0);
    assert_non_null(strstr(err, "roofline"));
    dy_cost_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_every_field_is_checked),
        cmocka_unit_test(test_unknown_and_malformed),
        cmocka_unit_test(test_measured_step),
        cmocka_unit_test(test_roofline_decode_is_bandwidth_bound),
        cmocka_unit_test(test_roofline_prefill_is_compute_bound),
        cmocka_unit_test(test_roofline_transfer_and_tp),
        cmocka_unit_test(test_presets_load),
        cmocka_unit_test(test_fit_recovers_known_coefficients),
        cmocka_unit_test(test_fit_keeps_coefficients_nonnegative),
        cmocka_unit_test(test_fit_refuses_bad_bench),
        cmocka_unit_test(test_read_xfer),
        cmocka_unit_test(test_token_overhead_field),
        cmocka_unit_test(test_token_overhead_from_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
