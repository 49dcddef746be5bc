/* kernel_micro.c — a microbenchmark of one matmul call on one thread, at each kernel level
 * named: random weights of a type (rows × cols) against B random activation rows, the call
 * repeated and the fastest repetition kept (the machine is shared; the minimum is the least
 * disturbed), levels alternated round by round so a change in load hits them alike. Prints
 * GFLOP/s (2·rows·cols·B per call) per level, and checks the levels agree bit for bit; also the
 * fastest conversion of the B activation rows into the weight type's partner format.
 *
 * Built by CMake as build/kernel_micro (not part of the test suite). Usage:
 *   build/kernel_micro TYPE ROWS COLS B REPS LEVEL...   e.g. f32 768 768 128 20 avx512vnni avx512
 * The activation conversion is timed apart from the matmul; levels the CPU lacks are refused. */
#include "engine/kernels.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse_level(const char *s, dy_simd *out)
{
    for (int l = DY_SIMD_SCALAR; l <= DY_SIMD_AVX512; l++)
        if (strcmp(dy_simd_name((dy_simd)l), s) == 0) {
            *out = (dy_simd)l;
            return true;
        }
    return false;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s TYPE ROWS COLS B REPS LEVEL...\n", argv[0]);
        return 2;
    }
    dy_type t;
    if (!dy_type_parse(argv[1], &t)) {
        fprintf(stderr, "kernel_micro: unknown type '%s'\n", argv[1]);
        return 2;
    }
    const int64_t rows = atoll(argv[2]), cols = atoll(argv[3]);
    const int B = atoi(argv[4]), reps = atoi(argv[5]), nl = argc - 6;
    if (rows <= 0 || cols <= 0 || B <= 0 || reps <= 0 || nl > 4 ||
        cols % dy_type_block_elems(t) != 0) {
        fprintf(stderr, "kernel_micro: bad sizes (cols must be a multiple of the block)\n");
        return 2;
    }
    dy_simd lv[4];
    const dy_simd best = dy_simd_detect();
    for (int i = 0; i < nl; i++)
        if (!parse_level(argv[6 + i], &lv[i]) || lv[i] > best) {
            fprintf(stderr, "kernel_micro: level '%s' unknown or not on this CPU\n", argv[6 + i]);
            return 2;
        }
    const size_t rb = dy_type_row_bytes(t, cols);
    uint8_t *wq = malloc((size_t)rows * rb);
    float *wf = malloc((size_t)cols * sizeof(float)), *X = malloc((size_t)B * cols * sizeof(float));
    void *act = malloc(dy_act_bytes(t, cols, B));
    float *Y[4];
    for (int i = 0; i < nl; i++)
        Y[i] = malloc((size_t)B * rows * sizeof(float));
    if (!wq || !wf || !X || !act) {
        fprintf(stderr, "kernel_micro: out of memory\n");
        return 1;
    }
    uint64_t s = 42;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            wf[i] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23) * 0.1f;
        }
        dy_quantize_row(t, wf, wq + (size_t)r * rb, cols);
    }
    for (int64_t i = 0; i < (int64_t)B * cols; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        X[i] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23);
    }
    const dy_mat W = {.type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = wq};
    double best_s[4], best_c[4];
    for (int i = 0; i < nl; i++)
        best_s[i] = best_c[i] = 1e30;
    for (int rep = 0; rep < reps; rep++)
        for (int i = 0; i < nl; i++) {
            const double c0 = dy_now();
            dy_act_convert(lv[i], t, X, cols, cols, 0, B, act);
            const double dc = dy_now() - c0;
            if (dc < best_c[i])
                best_c[i] = dc;
            const double t0 = dy_now();
            dy_matmul_rows(lv[i], &W, act, B, Y[i], rows, 0, rows);
            const double dt = dy_now() - t0;
            if (dt < best_s[i])
                best_s[i] = dt;
        }
    const double flop = 2.0 * (double)rows * (double)cols * B;
    for (int i = 0; i < nl; i++) {
        const bool same = memcmp(Y[i], Y[0], (size_t)B * rows * sizeof(float)) == 0;
        printf("%s %lldx%lld B=%d %-10s %8.2f GFLOP/s  %9.1f us  convert %7.1f us  %s\n", argv[1],
               (long long)rows, (long long)cols, B, dy_simd_name(lv[i]), flop / best_s[i] / 1e9,
               best_s[i] * 1e6, best_c[i] * 1e6, same ? "same bits" : "DIFFERENT BITS");
    }
    return 0;
}
