/* test_bench_workload.c — workload generation and input files: Mooncake blocks give the same
 * tokens for the same hash id (so two requests sharing hash ids share their token prefix, also
 * after length scaling and capping), prompts are deterministic per seed, shared-prefix groups,
 * Azure and length-table CSVs with bad lines (error naming FILE:LINE, or skipped and
 * counted), timestamps, the means of Poisson/gamma arrival gaps and the arrival schedule
 * (dyb_arrivals) that `dyad bench` sends by and `dyad sim run` simulates, request lengths
 * without their tokens (dyb_workload_lengths, for `dyad sim bench`). The real traces in
 * ../shared are parsed too when present. */
#include "testutil.h"
#include "bench/bench_rng.h"
#include "bench/bench_run.h"
#include "bench/bench_trace.h"
#include "bench/bench_workload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes text to a new temporary file; returns its path (malloc'd). */
static char *temp_file(const char *text)
{
    char *path = strdup("/tmp/dyad_test_bench_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

static void drop_file(char *path)
{
    unlink(path);
    free(path);
}

static dyb_workload_config base_config(void)
{
    return (dyb_workload_config){.isl = 64, .osl = 8, .vocab_size = 32000, .seed = 1,
                                 .time_scale = 1, .length_scale = 1};
}

static dyb_workload *must_load(const dyb_workload_config *c)
{
    char err[512] = "";
    dyb_workload *w = dyb_workload_new(c, err, sizeof err);
    if (!w)
        fail_msg("%s", err);
    return w;
}

static long common_prefix(const dyb_request *a, const dyb_request *b)
{
    long n = a->isl < b->isl ? a->isl : b->isl, i = 0;
    while (i < n && a->tokens[i] == b->tokens[i])
        i++;
    return i;
}

/* Row 2 arrives before row 1 in time: rows are sorted. */
static const char *const mooncake =
    "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 10, \"hash_ids\": [0, 1, 2]}\n"
    "{\"timestamp\": 1000, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
    "\n"
    "{\"timestamp\": 500, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 3]}\n";

static void test_mooncake_blocks_reproduce_prefixes(void **st)
{
    (void)st;
    char *path = temp_file(mooncake);
    dyb_workload_config c = base_config();
    c.trace = path;
    c.time_scale = 2;
    dyb_workload *w = must_load(&c);
    assert_int_equal(dyb_workload_rows(w), 3);
    assert_true(dyb_workload_timed(w));
    assert_float_equal(dyb_workload_arrival_ms(w, 1), 1000, 1e-9); /* 500 ms × 2 */
    assert_float_equal(dyb_workload_arrival_ms(w, 2), 2000, 1e-9);
    dyb_request r0, r1, r2, again;
    assert_int_equal(dyb_workload_make(w, 0, false, &r0), 0);
    assert_int_equal(dyb_workload_make(w, 2, false, &r1), 0); /* the 700-token row */
    assert_int_equal(dyb_workload_make(w, 1, false, &r2), 0); /* the [0, 3] row */
    assert_int_equal(r0.isl, 1100);
    assert_int_equal(r0.osl, 10);
    assert_int_equal(r1.isl, 700);
    assert_int_equal(common_prefix(&r0, &r1), 700); /* blocks 0 and 1 (truncated) shared */
    assert_int_equal(common_prefix(&r0, &r2), 512); /* only block 0 shared */
    for (long i = 0; i < r0.isl; i++)
        assert_true(r0.tokens[i] >= 3 && r0.tokens[i] < 32000);
    assert_int_equal(dyb_workload_make(w, 0, false, &again), 0);
    assert_memory_equal(again.tokens, r0.tokens, sizeof(int32_t) * 1100);
    dyb_request_free(&again);
    /* past the end */
    assert_int_equal(dyb_workload_make(w, 3, false, &again), -1);
    /* warmup: same lengths, fresh tokens */
    assert_int_equal(dyb_workload_make(w, 0, true, &again), 0);
    assert_int_equal(again.isl, 1100);
    assert_true(common_prefix(&again, &r0) < 4);
    dyb_request_free(&again);
    dyb_request_free(&r0);
    dyb_request_free(&r1);
    dyb_request_free(&r2);
    dyb_workload_free(w);

    /* another workload with the same seed: the same tokens; another seed: others */
    dyb_workload *same = must_load(&c);
    c.seed = 2;
    dyb_workload *other = must_load(&c);
    dyb_request a, b;
    assert_int_equal(dyb_workload_make(same, 0, false, &a), 0);
    assert_int_equal(dyb_workload_make(other, 0, false, &b), 0);
    assert_true(common_prefix(&a, &b) < 4);
    dyb_request_free(&b);
    c.seed = 1;
    dyb_workload *third = must_load(&c);
    assert_int_equal(dyb_workload_make(third, 0, false, &b), 0);
    assert_int_equal(common_prefix(&a, &b), 1100);
    dyb_request_free(&a);
    dyb_request_free(&b);
    dyb_workload_free(same);
    dyb_workload_free(other);
    dyb_workload_free(third);
    drop_file(path);
}

static void test_mooncake_length_scale_and_caps_keep_prefixes(void **st)
{
    (void)st;
    char *path = temp_file(mooncake);
    dyb_workload_config c = base_config();
    c.trace = path;
    c.length_scale = 0.5;
    c.max_isl = 320;
    c.max_osl = 4;
    dyb_workload *w = must_load(&c);
    assert_int_equal(dyb_workload_block_tokens(w), 256);
    dyb_request r0, r1, r2;
    assert_int_equal(dyb_workload_make(w, 0, false, &r0), 0);
    assert_int_equal(dyb_workload_make(w, 2, false, &r1), 0);
    assert_int_equal(dyb_workload_make(w, 1, false, &r2), 0);
    assert_int_equal(r0.isl, 320); /* 550 capped */
    assert_int_equal(r0.osl, 4);   /* 5 capped */
    assert_int_equal(r1.isl, 320); /* 350 capped */
    assert_int_equal(r2.isl, 300);
    assert_int_equal(r2.osl, 3);   /* 2.5 rounds to 3 */
    assert_int_equal(common_prefix(&r0, &r1), 320);
    assert_int_equal(common_prefix(&r0, &r2), 256);
    dyb_request_free(&r0);
    dyb_request_free(&r1);
    dyb_request_free(&r2);
    dyb_workload_free(w);
    drop_file(path);
}

static void test_mooncake_bad_lines(void **st)
{
    (void)st;
    const char *text =
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n"
        "{\"timestamp\": 0, \"input_length\": \"ten\", \"output_length\": 1}\n"
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [-1]}\n"
        "not json\n"
        "[1, 2]\n"
        "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1}\n";
    char err[512];
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    dyb_trace t = {0};
    assert_int_equal(dyb_trace_read_mooncake(f, "m.jsonl", false, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "m.jsonl:2:"));
    assert_non_null(strstr(err, "input_length"));
    fclose(f);
    dyb_trace_free(&t);
    f = fmemopen((void *)text, strlen(text), "r");
    assert_int_equal(dyb_trace_read_mooncake(f, "m.jsonl", true, &t, err, sizeof err), 0);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.skipped, 4);
    assert_non_null(strstr(t.first_bad, "m.jsonl:2:"));
    assert_float_equal(t.rows[1].t_ms, 5, 0);
    assert_int_equal(t.rows[1].n_hash, 0);
    fclose(f);
    dyb_trace_free(&t);
}

static const char *const azure =
    "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
    "2023-11-16 18:15:46.6805900,374,44\r\n"
    "2023-11-16 18:15:50.9951690,396,109\r\n"
    "2023-11-16 18:15:51,abc,3\r\n"
    "yesterday,10,3\r\n"
    "2023-11-16 18:15:52.5,10\r\n"
    "2023-11-16 18:16:00.0000000,20,0\r\n";

static void test_azure_csv(void **st)
{
    (void)st;
    char err[512];
    dyb_trace t = {0};
    FILE *f = fmemopen((void *)azure, strlen(azure), "r");
    assert_int_equal(dyb_trace_read_azure(f, "az.csv", false, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "az.csv:4: ContextTokens"));
    fclose(f);
    dyb_trace_free(&t);

    f = fmemopen((void *)azure, strlen(azure), "r");
    assert_int_equal(dyb_trace_read_azure(f, "az.csv", true, &t, err, sizeof err), 0);
    fclose(f);
    assert_int_equal(t.skipped, 3);
    assert_int_equal(t.n, 3);
    assert_true(t.has_time);
    assert_float_equal(t.rows[0].t_ms, 0, 0);
    assert_float_equal(t.rows[1].t_ms, 4314.579, 1e-3);
    assert_float_equal(t.rows[2].t_ms, 13319.41, 1e-3);
    assert_int_equal(t.rows[1].in_len, 396);
    assert_int_equal(t.rows[1].out_len, 109);
    assert_int_equal(t.rows[2].out_len, 0);
    dyb_trace_free(&t);

    /* the workload turns a 0-token output into max_tokens 1 */
    char *path = temp_file(azure);
    dyb_workload_config c = base_config();
    c.trace = path;
    c.skip_bad_lines = true;
    dyb_workload *w = must_load(&c);
    const char *first;
    assert_int_equal(dyb_workload_skipped(w, &first), 3);
    dyb_request r;
    assert_int_equal(dyb_workload_make(w, 2, false, &r), 0);
    assert_int_equal(r.isl, 20);
    assert_int_equal(r.osl, 1);
    dyb_request_free(&r);
    dyb_workload_free(w);
    /* without skipping, the workload reports the file and line */
    c.skip_bad_lines = false;
    char e2[512];
    assert_null(dyb_workload_new(&c, e2, sizeof e2));
    assert_non_null(strstr(e2, ":4: ContextTokens"));
    drop_file(path);
}

static void test_lengths_csv_columns(void **st)
{
    (void)st;
    const char *text = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                       "74,918,992,0.08\n"
                       "290,905,1195,0.32\n";
    char err[512];
    dyb_trace t = {0};
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_int_equal(dyb_trace_read_lengths(f, "s.csv", NULL, NULL, false, &t, err, sizeof err),
                     0);
    fclose(f);
    assert_int_equal(t.n, 2);
    assert_false(t.has_time);
    assert_int_equal(t.rows[1].in_len, 290);
    assert_int_equal(t.rows[1].out_len, 905);
    dyb_trace_free(&t);
    /* named columns, quoted fields, any order */
    const char *q = "\"out\",name,\"in\"\n\"7\",\"a, b\",\"3\"\n";
    f = fmemopen((void *)q, strlen(q), "r");
    assert_int_equal(dyb_trace_read_lengths(f, "q.csv", "in", "out", false, &t, err, sizeof err),
                     0);
    fclose(f);
    assert_int_equal(t.n, 1);
    assert_int_equal(t.rows[0].in_len, 3);
    assert_int_equal(t.rows[0].out_len, 7);
    dyb_trace_free(&t);
    /* unknown columns: the message lists the header */
    f = fmemopen((void *)q, strlen(q), "r");
    assert_int_equal(dyb_trace_read_lengths(f, "q.csv", NULL, NULL, false, &t, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "q.csv:1:"));
    assert_non_null(strstr(err, "out, name, in"));
    fclose(f);
    dyb_trace_free(&t);
}

static void test_table_workload_is_deterministic(void **st)
{
    (void)st;
    char *path = temp_file("input_length,output_length\n100,10\n200,20\n300,30\n");
    dyb_workload_config c = base_config();
    c.lengths_csv = path;
    c.length_scale = 0.1;
    dyb_workload *w = must_load(&c);
    assert_int_equal(dyb_workload_rows(w), -1);
    int seen[4] = {0};
    for (long i = 0; i < 60; i++) {
        dyb_request a, b;
        assert_int_equal(dyb_workload_make(w, i, false, &a), 0);
        assert_int_equal(dyb_workload_make(w, i, false, &b), 0);
        assert_int_equal(a.isl, b.isl);
        assert_int_equal(a.osl * 10, a.isl);
        assert_memory_equal(a.tokens, b.tokens, sizeof(int32_t) * (size_t)a.isl);
        seen[a.isl / 10]++;
        dyb_request_free(&a);
        dyb_request_free(&b);
    }
    assert_true(seen[1] > 5 && seen[2] > 5 && seen[3] > 5);
    dyb_workload_free(w);
    drop_file(path);
}

/* dyb_workload_lengths gives the lengths dyb_workload_make gives, for a trace, a table and
 * fixed lengths, in any round, and fails past a trace's end. */
static void assert_lengths_match(const dyb_workload *w, long n)
{
    for (long i = 0; i < n; i++) {
        dyb_request r;
        long isl = -1, osl = -1;
        assert_int_equal(dyb_workload_make(w, i, false, &r), 0);
        assert_int_equal(dyb_workload_lengths(w, i, &isl, &osl), 0);
        assert_int_equal(isl, r.isl);
        assert_int_equal(osl, r.osl);
        dyb_request_free(&r);
    }
}

static void test_lengths_without_tokens(void **st)
{
    (void)st;
    char *trace = temp_file(mooncake);
    char *table = temp_file("input_length,output_length\n100,10\n200,20\n300,30\n");
    dyb_workload_config c = base_config();
    c.trace = trace;
    c.length_scale = 0.5;
    c.max_isl = 400;
    dyb_workload *w = must_load(&c);
    assert_lengths_match(w, 3);
    long isl, osl;
    assert_int_equal(dyb_workload_lengths(w, 3, &isl, &osl), -1);
    dyb_workload_free(w);
    c = base_config();
    c.lengths_csv = table;
    w = must_load(&c);
    assert_lengths_match(w, 40);
    dyb_workload_set_round(w, 3);
    assert_lengths_match(w, 40);
    dyb_workload_free(w);
    c = base_config();
    w = must_load(&c);
    assert_lengths_match(w, 5);
    dyb_workload_free(w);
    drop_file(trace);
    drop_file(table);
}

static void test_prefix_groups(void **st)
{
    (void)st;
    dyb_workload_config c = base_config();
    c.isl = 300;
    c.prefix_groups = 3;
    c.prefix_len = 100;
    dyb_workload *w = must_load(&c);
    dyb_request r[40];
    int32_t firsts[3];
    int n_firsts = 0;
    for (int i = 0; i < 40; i++) {
        assert_int_equal(dyb_workload_make(w, i, false, &r[i]), 0);
        int k = 0;
        while (k < n_firsts && firsts[k] != r[i].tokens[0])
            k++;
        if (k == n_firsts) {
            assert_true(n_firsts < 3);
            firsts[n_firsts++] = r[i].tokens[0];
        }
    }
    assert_int_equal(n_firsts, 3);
    for (int i = 1; i < 40; i++) {
        long cp = common_prefix(&r[0], &r[i]);
        /* the same group: exactly the prefix is shared; another: (almost) nothing */
        assert_true(cp == 100 || (cp < 3 && r[i].tokens[0] != r[0].tokens[0]));
    }
    for (int i = 0; i < 40; i++)
        dyb_request_free(&r[i]);
    dyb_workload_free(w);
    /* a prefix longer than the prompt: the whole prompt is the (truncated) prefix */
    c.isl = 50;
    w = must_load(&c);
    dyb_request a, b;
    long i = 1;
    assert_int_equal(dyb_workload_make(w, 0, false, &a), 0);
    do {
        assert_int_equal(dyb_workload_make(w, i++, false, &b), 0);
        if (b.tokens[0] == a.tokens[0])
            break;
        dyb_request_free(&b);
    } while (i < 100);
    assert_int_equal(common_prefix(&a, &b), 50);
    dyb_request_free(&a);
    dyb_request_free(&b);
    dyb_workload_free(w);
}

/* Sweep rounds: round 0 is the seed's own prompts; another round draws fresh ones (no shared
 * prefix with round 0's), and sharing inside the round — prefix groups — is kept. */
static void test_rounds_draw_fresh_prompts(void **st)
{
    (void)st;
    dyb_workload_config c = base_config();
    c.isl = 200;
    c.prefix_groups = 2;
    c.prefix_len = 64;
    dyb_workload *w = must_load(&c);
    dyb_request a0, a1, b1[10];
    assert_int_equal(dyb_workload_make(w, 0, false, &a0), 0);
    dyb_workload_set_round(w, 1);
    assert_int_equal(dyb_workload_make(w, 0, false, &a1), 0);
    assert_true(common_prefix(&a0, &a1) < 3);
    int shared = 0;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(dyb_workload_make(w, i + 1, false, &b1[i]), 0);
        assert_true(common_prefix(&a0, &b1[i]) < 3);
        shared += common_prefix(&a1, &b1[i]) == 64;
    }
    assert_true(shared > 0); /* the round's own groups still share their prefix */
    dyb_workload_set_round(w, 0);
    dyb_request again;
    assert_int_equal(dyb_workload_make(w, 0, false, &again), 0);
    assert_int_equal(common_prefix(&a0, &again), 200);
    dyb_request_free(&a0);
    dyb_request_free(&a1);
    dyb_request_free(&again);
    for (int i = 0; i < 10; i++)
        dyb_request_free(&b1[i]);
    dyb_workload_free(w);
}

static void test_datetime(void **st)
{
    (void)st;
    double ms;
    assert_int_equal(dyb_parse_datetime_ms("1970-01-01 00:00:00", &ms), 0);
    assert_float_equal(ms, 0, 0);
    assert_int_equal(dyb_parse_datetime_ms("2000-03-01T00:00:01.25Z", &ms), 0);
    assert_float_equal(ms, 951868801250.0, 1e-3);
    assert_int_equal(dyb_parse_datetime_ms("2023-11-16 18:15:46.6805900", &ms), 0);
    assert_float_equal(ms, 1700158546680.59, 1e-2);
    assert_int_equal(dyb_parse_datetime_ms("2023-13-16 18:15:46", &ms), -1);
    assert_int_equal(dyb_parse_datetime_ms("2023-11-16 18:15", &ms), -1);
    assert_int_equal(dyb_parse_datetime_ms("2023-11-16 18:15:46.", &ms), -1);
    assert_int_equal(dyb_parse_datetime_ms("2023-11-16 18:15:46 junk", &ms), -1);
}

/* Mean and squared coefficient of variation of n gaps at `rate` with shape `b`. */
static void gap_moments(double rate, double b, double *mean, double *cv2)
{
    dyb_rng r = dyb_rng_keyed(7, DYB_DOMAIN_ARRIVAL, 0);
    const int n = 200000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        double g = dyb_interarrival_ms(&r, rate, b);
        assert_true(g >= 0);
        s += g;
        s2 += g * g;
    }
    *mean = s / n;
    *cv2 = (s2 / n - *mean * *mean) / (*mean * *mean);
}

static void test_arrival_gaps(void **st)
{
    (void)st;
    const double shapes[4] = {1, 0.25, 0.5, 4};
    for (int i = 0; i < 4; i++) {
        double mean, cv2;
        gap_moments(4, shapes[i], &mean, &cv2);
        assert_float_equal(mean, 250, 250 * 0.02);               /* 1000 / rate */
        assert_float_equal(cv2, 1 / shapes[i], 0.06 / shapes[i]); /* gamma: CV² = 1/shape */
    }
    dyb_rng r = dyb_rng_keyed(0, 0, 0);
    assert_float_equal(dyb_interarrival_ms(&r, INFINITY, 1), 0, 0);
    /* the same seed gives the same gaps */
    dyb_rng a = dyb_rng_keyed(3, DYB_DOMAIN_ARRIVAL, 0), b = dyb_rng_keyed(3, DYB_DOMAIN_ARRIVAL, 0);
    for (int i = 0; i < 100; i++)
        assert_float_equal(dyb_interarrival_ms(&a, 2, 0.5), dyb_interarrival_ms(&b, 2, 0.5), 0);
}

/* An open loop starts at 0 and adds the seed's gamma gaps; a trace replays its (sorted,
 * scaled) times; warmup draws from another stream. */
static void test_arrival_schedule(void **st)
{
    (void)st;
    dyb_workload_config c = base_config();
    dyb_workload *w = must_load(&c);
    dyb_arrivals a, warm;
    dyb_arrivals_init(&a, w, false, 4, 1, 9, false);
    dyb_arrivals_init(&warm, w, false, 4, 1, 9, true);
    dyb_rng gaps = dyb_rng_keyed(9, DYB_DOMAIN_ARRIVAL, 0);
    double t = 0;
    bool differ = false;
    for (long i = 0; i < 50; i++) {
        assert_int_equal(a.index, i);
        assert_float_equal(a.next_ms, t, 1e-9);
        differ |= a.next_ms != warm.next_ms;
        t += dyb_interarrival_ms(&gaps, 4, 1);
        dyb_arrivals_advance(&a);
        dyb_arrivals_advance(&warm);
    }
    assert_true(differ);
    assert_float_equal(t / 50, 250, 100); /* about 1000 / rate */
    dyb_workload_free(w);

    char *path = temp_file(mooncake);
    c.trace = path;
    c.time_scale = 0.5;
    w = must_load(&c);
    dyb_arrivals_init(&a, w, true, 0, 1, 9, false);
    const double want[3] = {0, 250, 500};
    for (int i = 0; i < 3; i++, dyb_arrivals_advance(&a))
        assert_float_equal(a.next_ms, want[i], 1e-9);
    dyb_workload_free(w);
    drop_file(path);
}

static void test_shared_traces_parse(void **st)
{
    (void)st;
    const char *files[3] = {"../shared/traces/mooncake_conversation_trace.jsonl",
                            "../shared/traces/azure2023_conv.csv",
                            "../shared/traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"};
    const size_t rows[3] = {12031, 19366, 30731};
    for (int i = 0; i < 3; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s", tu_path(files[i]));
        if (!tu_exists(path)) {
            print_message("skipping %s: not present\n", files[i]);
            continue;
        }
        char err[512];
        dyb_trace t = {0};
        int rc = i < 2 ? dyb_trace_load(path, false, &t, err, sizeof err)
                       : dyb_lengths_load(path, NULL, NULL, false, &t, err, sizeof err);
        if (rc != 0)
            fail_msg("%s", err);
        assert_int_equal(t.n, rows[i]);
        assert_int_equal(t.skipped, 0);
        if (i == 0) /* ceil(input_length / 512) hash ids on every row */
            for (size_t k = 0; k < t.n; k++)
                assert_int_equal(t.rows[k].n_hash, (size_t)(t.rows[k].in_len + 511) / 512);
        if (i == 1) /* about an hour */
            assert_float_equal(t.rows[t.n - 1].t_ms / 1000, 3500, 60);
        dyb_trace_free(&t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mooncake_blocks_reproduce_prefixes),
        cmocka_unit_test(test_mooncake_length_scale_and_caps_keep_prefixes),
        cmocka_unit_test(test_mooncake_bad_lines),
        cmocka_unit_test(test_azure_csv),
        cmocka_unit_test(test_lengths_csv_columns),
        cmocka_unit_test(test_table_workload_is_deterministic),
        cmocka_unit_test(test_lengths_without_tokens),
        cmocka_unit_test(test_prefix_groups),
        cmocka_unit_test(test_rounds_draw_fresh_prompts),
        cmocka_unit_test(test_datetime),
        cmocka_unit_test(test_arrival_gaps),
        cmocka_unit_test(test_arrival_schedule),
        cmocka_unit_test(test_shared_traces_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
