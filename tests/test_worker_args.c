/* test_worker_args.c — the worker's command line (serve/wire/worker_args.h): the argument
 * vector the frontend builds parses back to the same settings, for several configurations;
 * an empty command line gives the defaults; bad values, unknown and abbreviated options are
 * rejected with the option named; `dyad serve`'s share of the table is the shared settings
 * under its names. */
#include "testutil.h"
#include "serve/wire/wire.h"
#include "serve/wire/worker_args.h"

#include <string.h>

static void assert_same_str(const char *a, const char *b)
{
    if (!a || !b)
        assert_ptr_equal(a, b);
    else
        assert_string_equal(a, b);
}

static void assert_same(const dy_worker_config *a, const dy_worker_config *b)
{
    assert_same_str(a->model, b->model);
    assert_same_str(a->tokenizer, b->tokenizer);
    assert_same_str(a->kv_listen, b->kv_listen);
    /* an unset receiver (0) is the default, TCP */
    assert_int_equal(a->kv_receiver ? a->kv_receiver : DY_XFER_TCP, b->kv_receiver);
    assert_int_equal(a->fd, b->fd);
    assert_int_equal(a->worker_id, b->worker_id);
    assert_int_equal(a->threads, b->threads);
    assert_int_equal(a->kv_blocks, b->kv_blocks);
    assert_int_equal(a->kv_mem_mib, b->kv_mem_mib);
    assert_int_equal(a->block_size, b->block_size);
    assert_int_equal(a->kv_type, b->kv_type);
    assert_int_equal(a->max_batch_tokens, b->max_batch_tokens);
    assert_int_equal(a->max_running, b->max_running);
    assert_int_equal(a->no_prefix_cache, b->no_prefix_cache);
    assert_int_equal(a->no_kv_events, b->no_kv_events);
    assert_int_equal(a->role, b->role);
    assert_int_equal(a->kv_host_mib, b->kv_host_mib);
    assert_same_str(a->kv_disk_dir, b->kv_disk_dir);
    assert_true(a->kv_disk_gib == b->kv_disk_gib);
    assert_int_equal(a->kv_offload, b->kv_offload);
    assert_int_equal(a->kv_disk_min_uses, b->kv_disk_min_uses);
    assert_int_equal(a->kv_hold, b->kv_hold);
    assert_true(a->kv_hold_ttl_s == b->kv_hold_ttl_s);
    assert_true(a->kv_hold_margin_ms == b->kv_hold_margin_ms);
    assert_true(a->kv_hold_share == b->kv_hold_share);
}

/* parse(["worker", argv(c)...]) must be c. */
static void round_trip(const dy_worker_config *c)
{
    char *argv[DY_WORKER_ARGV_MAX + 1], store[DY_WORKER_ARGV_STORE], err[256] = "";
    argv[0] = "worker";
    int n = dy_worker_args_argv(c, argv + 1, DY_WORKER_ARGV_MAX, store, sizeof store);
    assert_true(n >= 0);
    assert_null(argv[n + 1]);
    dy_worker_config back;
    assert_int_equal(dy_worker_args_parse(n + 1, argv, &back, err, sizeof err), DY_OPTS_OK);
    assert_string_equal(err, "");
    assert_same(c, &back);
}

static dy_worker_config defaults(void)
{
    dy_worker_config c;
    char *argv[] = {"worker"}, err[256];
    assert_int_equal(dy_worker_args_parse(1, argv, &c, err, sizeof err), DY_OPTS_OK);
    return c;
}

static void test_defaults(void **state)
{
    (void)state;
    dy_worker_config c = defaults();
    assert_null(c.model);
    assert_null(c.tokenizer);
    assert_null(c.kv_listen);
    assert_int_equal(c.fd, -1);
    assert_int_equal(c.worker_id, 0);
    assert_int_equal(c.threads, 1);
    assert_int_equal(c.kv_mem_mib, 256);
    assert_int_equal(c.kv_blocks, 0);
    assert_int_equal(c.block_size, 16);
    assert_int_equal(c.max_batch_tokens, 512);
    assert_int_equal(c.max_running, 64);
    assert_false(c.no_prefix_cache);
    assert_false(c.no_kv_events);
    assert_int_equal(c.role, DY_ROLE_AGG);
    assert_int_equal(c.kv_host_mib, 0);
    assert_null(c.kv_disk_dir);
    assert_true(c.kv_disk_gib == 4);
    assert_int_equal(c.kv_offload, 0);
    assert_int_equal(c.kv_type, 0); /* f32 */
    assert_int_equal(c.kv_disk_min_uses, 2);
    assert_int_equal(c.kv_hold, 0);
    assert_true(c.kv_hold_ttl_s == 300 && c.kv_hold_margin_ms == 20 && c.kv_hold_share == 0.5);
    /* The defaults need no arguments at all. */
    char *argv[4], store[DY_WORKER_ARGV_STORE];
    assert_int_equal(dy_worker_args_argv(&c, argv, 4, store, sizeof store), 0);
    assert_null(argv[0]);
}

static void test_round_trips(void **state)
{
    (void)state;
    dy_worker_config c = defaults();
    round_trip(&c);
    /* What `dyad serve` starts: an aggregated worker, then a decode worker with everything
     * away from its default. */
    c.fd = 5;
    c.worker_id = 3;
    c.model = "/models/stories260K.bin";
    c.tokenizer = "/models/tok512.bin";
    round_trip(&c);
    c = (dy_worker_config){.model = "m.gguf", .fd = 0, .worker_id = 1 << 20, .threads = 256,
                           .kv_blocks = 2, .kv_mem_mib = 1 << 20, .block_size = 256, .kv_type = 2,
                           .max_batch_tokens = 65536, .max_running = 4096,
                           .no_prefix_cache = true, .no_kv_events = true,
                           .role = DY_ROLE_DECODE, .kv_listen = "10.0.0.2:0",
                           .kv_receiver = DY_XFER_UCX,
                           .kv_host_mib = 4096, .kv_disk_dir = "/var/tmp/kv",
                           .kv_disk_gib = 0.25, .kv_offload = 1, .kv_disk_min_uses = 5,
                           .kv_hold = 1, .kv_hold_ttl_s = 2.5, .kv_hold_margin_ms = 7,
                           .kv_hold_share = 0.25};
    round_trip(&c);
    c.role = DY_ROLE_PREFILL;
    c.kv_listen = NULL;
    c.tokenizer = "a path with spaces/tok.bin";
    c.threads = 1;
    c.kv_blocks = 0;
    c.kv_type = 1;
    round_trip(&c);
}

static void test_argv_names_its_options(void **state)
{
    (void)state;
    dy_worker_config c = defaults();
    c.fd = 7;
    c.model = "m.gguf";
    c.no_kv_events = true;
    c.role = DY_ROLE_DECODE;
    char *argv[DY_WORKER_ARGV_MAX], store[DY_WORKER_ARGV_STORE];
    int n = dy_worker_args_argv(&c, argv, DY_WORKER_ARGV_MAX, store, sizeof store);
    const char *want[] = {"--model", "m.gguf", "--no-kv-events", "--fd", "7", "--role", "decode"};
    assert_int_equal(n, 7);
    for (int i = 0; i < n; i++)
        assert_string_equal(argv[i], want[i]);
    /* Too little room is an error, never a cut-off vector. */
    assert_int_equal(dy_worker_args_argv(&c, argv, 4, store, sizeof store), -1);
    assert_int_equal(dy_worker_args_argv(&c, argv, DY_WORKER_ARGV_MAX, store, 8), -1);
}

/* A frontend's worker settings never had the cluster options' defaults (they are not in
 * serve's table): whatever they hold, the argument vector leaves them out, and keeps
 * --switchable, which the planner's workers need. */
static void test_cluster_options_stay_out_of_argv(void **state)
{
    (void)state;
    dy_worker_config c = defaults();
    assert_null(c.cluster);
    assert_true(c.cluster_lease_s == 3 && c.cluster_timeout_s == 60 && c.cluster_drain_s == 30);
    c.cluster_lease_s = c.cluster_timeout_s = c.cluster_drain_s = 0;
    c.switchable = true;
    c.fd = 4;
    char *argv[DY_WORKER_ARGV_MAX], store[DY_WORKER_ARGV_STORE];
    int n = dy_worker_args_argv(&c, argv, DY_WORKER_ARGV_MAX, store, sizeof store);
    const char *want[] = {"--fd", "4", "--switchable"};
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++)
        assert_string_equal(argv[i], want[i]);
    /* By hand they parse as any option. */
    char *hand[] = {"worker", "--cluster", "nats://h:4222", "--cluster-lease", "1.5",
                    "--cluster-host", "hostA"}, err[256] = "";
    assert_int_equal(dy_worker_args_parse(7, hand, &c, err, sizeof err), DY_OPTS_OK);
    assert_string_equal(c.cluster, "nats://h:4222");
    assert_true(c.cluster_lease_s == 1.5);
    assert_string_equal(c.cluster_host, "hostA");
}

/* argv must be rejected, and the message must contain `needle`. */
static void rejects(const char *needle, int argc, char **argv)
{
    dy_worker_config c;
    char err[256] = "";
    assert_int_equal(dy_worker_args_parse(argc, argv, &c, err, sizeof err), DY_OPTS_BAD);
    if (!strstr(err, needle))
        fail_msg("'%s' does not mention '%s'", err, needle);
}

static void test_bad_values(void **state)
{
    (void)state;
    rejects("--threads: 'x' is not an integer in [1, 256]", 3,
            (char *[]){"worker", "--threads", "x", NULL});
    rejects("--threads", 3, (char *[]){"worker", "--threads", "0", NULL});
    rejects("--kv-type: 'q4_0' is not f32, f16 or q8_0", 3,
            (char *[]){"worker", "--kv-type", "q4_0", NULL});
    rejects("--kv-blocks", 3, (char *[]){"worker", "--kv-blocks", "1", NULL});
    rejects("--block-size", 3, (char *[]){"worker", "--block-size", "257", NULL});
    rejects("--fd", 3, (char *[]){"worker", "--fd", "-1", NULL});
    rejects("--max-running", 3, (char *[]){"worker", "--max-running", "12abc", NULL});
    rejects("--role: 'both' is not agg, prefill or decode", 3,
            (char *[]){"worker", "--role", "both", NULL});
    rejects("--model needs a value", 2, (char *[]){"worker", "--model", NULL});
    rejects("unknown option '--frobnicate'", 2, (char *[]){"worker", "--frobnicate", NULL});
    rejects("unknown option '--thread'", 3, (char *[]){"worker", "--thread", "2", NULL});
    rejects("unknown option 'stray'", 2, (char *[]){"worker", "stray", NULL});
    rejects("unknown option '--no-kv-events=1'", 2,
            (char *[]){"worker", "--no-kv-events=1", NULL});
    rejects("--kv-host-mem", 3, (char *[]){"worker", "--kv-host-mem", "-1", NULL});
    rejects("--kv-disk-mem", 3, (char *[]){"worker", "--kv-disk-mem", "0", NULL});
    rejects("--kv-offload: 'lazy' is not write-through or write-back", 3,
            (char *[]){"worker", "--kv-offload", "lazy", NULL});
    rejects("--kv-disk-min-uses", 3, (char *[]){"worker", "--kv-disk-min-uses", "0", NULL});
    rejects("--kv-disk-dir needs --kv-host-mem", 3,
            (char *[]){"worker", "--kv-disk-dir", "/tmp", NULL});
    rejects("--kv-hold prefetch needs --kv-host-mem", 3,
            (char *[]){"worker", "--kv-hold", "prefetch", NULL});
    rejects("--kv-hold-share", 3, (char *[]){"worker", "--kv-hold-share", "1.5", NULL});
    rejects("--kv-hold-ttl", 3, (char *[]){"worker", "--kv-hold-ttl", "0", NULL});
}

static void test_equals_form_and_help(void **state)
{
    (void)state;
    dy_worker_config c;
    char err[256];
    char *argv[] = {"worker", "--threads=3", "--role=prefill", NULL};
    assert_int_equal(dy_worker_args_parse(3, argv, &c, err, sizeof err), DY_OPTS_OK);
    assert_int_equal(c.threads, 3);
    assert_int_equal(c.role, DY_ROLE_PREFILL);
    char *help[] = {"worker", "--threads", "2", "--help", NULL};
    assert_int_equal(dy_worker_args_parse(4, help, &c, err, sizeof err), DY_OPTS_HELP);
}

static void test_serve_share(void **state)
{
    (void)state;
    dy_worker_config c;
    dy_opt opts[DY_WORKER_MAX_OPTS];
    int n = dy_worker_args_opts(&c, DY_WORKER_OPTS_SHARED, opts);
    const char *want[] = {"model", "tokenizer", "threads-per-worker", "kv-mem", "kv-blocks",
                          "block-size", "kv-type", "max-batch-tokens", "max-running", "no-prefix-cache",
                          "no-kv-events", "kv-host-mem", "kv-disk-dir", "kv-disk-mem",
                          "kv-offload", "kv-disk-min-uses", "kv-hold", "kv-hold-ttl",
                          "kv-hold-margin", "kv-hold-share", "kv-hold-disk-after"};
    assert_int_equal(n, sizeof want / sizeof want[0]);
    for (int i = 0; i < n; i++)
        assert_string_equal(opts[i].name, want[i]);
    /* Parsed under serve's names, the values land in the worker's settings. */
    char *argv[] = {"serve", "--threads-per-worker", "4", "--no-kv-events", NULL}, err[256];
    assert_int_equal(dy_opts_parse(opts, n, 4, argv, NULL, err, sizeof err), DY_OPTS_OK);
    assert_int_equal(c.threads, 4);
    assert_true(c.no_kv_events);
    assert_int_equal(c.kv_mem_mib, 256);
    char *bad[] = {"serve", "--threads", "4", NULL};
    assert_int_equal(dy_opts_parse(opts, n, 3, bad, NULL, err, sizeof err), DY_OPTS_BAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_argv_names_its_options),
        cmocka_unit_test(test_cluster_options_stay_out_of_argv),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_equals_form_and_help),
        cmocka_unit_test(test_serve_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
