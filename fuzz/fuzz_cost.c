/* fuzz_cost.c — libFuzzer target for the simulator's cost-model files (sim/cost.c), read as
 * `dyad sim run --cost`, `dyad plan` and `dyad serve --cost-model` read them (dy_cost_load on a
 * path; here an in-memory file).
 *
 * Beyond "no crash, no leak": a refused file is an error naming it; a loaded model prices every
 * step shape and transfer with a time that is a number and not negative; dy_cost_save writes it
 * as a file that loads back to the same model (every accessor and price equal, to the bit); and
 * a roofline re-targeted to each TP degree either refuses with a message or still prices.
 *   ./build-fuzz/fuzz_cost -max_total_time=600 build-fuzz/corpus-cost fuzz/corpus-cost */
#include "harness.h"
#include "sim/cost.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

static const dy_step_shape SHAPES[] = {
    {0, 0, 0, 0},      {1, 1, 0, 0},           {512, 131328, 0, 0},
    {0, 0, 1, 100},    {128, 10000, 16, 4096}, {8192, 33558528, 256, 1048576},
};
static const int64_t BYTES[] = {0, 1, 4096, 1 << 20, 1LL << 40};
#define N_SHAPES (sizeof SHAPES / sizeof *SHAPES)
#define N_BYTES (sizeof BYTES / sizeof *BYTES)

static void check_prices(const dy_cost_model *m)
{
    for (size_t i = 0; i < N_SHAPES; i++) {
        double s = dy_cost_step_seconds(m, &SHAPES[i]);
        fz_check(s >= 0, "shape %zu costs %g s", i, s); /* false for NaN too */
    }
    for (size_t i = 0; i < N_BYTES; i++) {
        double s = dy_cost_transfer_seconds(m, BYTES[i]);
        fz_check(s >= 0, "%lld bytes take %g s", (long long)BYTES[i], s);
    }
}

static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

static void check_same(const dy_cost_model *a, const dy_cost_model *b)
{
    fz_check(same_str(dy_cost_name(a), dy_cost_name(b)) &&
                 same_str(dy_cost_served_model(a), dy_cost_served_model(b)) &&
                 same_str(dy_cost_hardware(a), dy_cost_hardware(b)),
             "the names changed on a save and load");
    fz_check(dy_cost_get_kind(a) == dy_cost_get_kind(b) && dy_cost_tp(a) == dy_cost_tp(b) &&
                 dy_cost_threads(a) == dy_cost_threads(b) &&
                 dy_cost_kv_bytes_per_token(a) == dy_cost_kv_bytes_per_token(b) &&
                 dy_cost_kv_capacity_tokens(a) == dy_cost_kv_capacity_tokens(b),
             "the kind, TP, threads or KV figures changed on a save and load");
    for (size_t i = 0; i < N_SHAPES; i++) {
        double x = dy_cost_step_seconds(a, &SHAPES[i]), y = dy_cost_step_seconds(b, &SHAPES[i]);
        fz_check(!memcmp(&x, &y, sizeof x), "shape %zu: %.17g s, %.17g s after a save and load", i,
                 x, y);
    }
    for (size_t i = 0; i < N_BYTES; i++) {
        double x = dy_cost_transfer_seconds(a, BYTES[i]), y = dy_cost_transfer_seconds(b, BYTES[i]);
        fz_check(!memcmp(&x, &y, sizeof x), "%lld bytes: %.17g s, %.17g s after a save and load",
                 (long long)BYTES[i], x, y);
    }
}

static void check_round_trip(const dy_cost_model *m)
{
    char path[64], err[512] = "";
    int fd = fz_memfile(NULL, 0, path);
    if (fd < 0)
        return;
    fz_check(dy_cost_save(m, path, err, sizeof err) == 0, "saving: %s", err);
    dy_cost_model *back = dy_cost_load(path, err, sizeof err);
    fz_check(back != NULL, "the saved model does not load: %s", err);
    check_same(m, back);
    dy_cost_free(back);
    close(fd);
}

static void check_tp_degrees(dy_cost_model *m)
{
    static const int degrees[] = {8, 4, 2, 1};
    for (size_t i = 0; i < sizeof degrees / sizeof *degrees; i++) {
        char err[512] = "";
        if (dy_cost_set_tp(m, degrees[i], err, sizeof err) == 0) {
            fz_check(dy_cost_tp(m) == degrees[i], "set TP %d, got %d", degrees[i], dy_cost_tp(m));
            check_prices(m);
        } else
            fz_check(err[0] != 0, "TP %d refused without a message", degrees[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[512] = "";
    int fd = fz_memfile(data, size, path);
    if (fd < 0)
        return 0;
    dy_cost_model *m = dy_cost_load(path, err, sizeof err);
    if (m) {
        check_prices(m);
        check_round_trip(m);
        if (dy_cost_get_kind(m) == DY_COST_ROOFLINE)
            check_tp_degrees(m);
        dy_cost_free(m);
    } else
        fz_check(!strncmp(err, path, strlen(path)), "the error does not name the file: '%s'", err);
    close(fd);
    return 0;
}
