/* test_kv_codec.c — the KV element types: the bytes of a block of each type, the row layout of
 * kv/kv_pool.h, and the store/load round trip within each format's bound (f16: within 2^-11
 * relative in its normal range; q8_0: within max|x| / 254 of the head at that position, exact
 * zeros for a zero head), block copies of each type, read back with the same bits at every kernel level the CPU has; the
 * shared-memory pool's descriptor. */
#include "testutil.h"
#include "engine/kv_codec.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static void test_block_bytes(void **st)
{
    (void)st;
    /* 2 layers × 16 positions × (K and V) × 3 heads of 8 */
    const int per = 2 * 16 * 2 * 3;
    const size_t want[DY_KV_N_TYPES] = {(size_t)per * 8 * 4, (size_t)per * 8 * 2,
                                        (size_t)per * (4 + 8)};
    for (int t = 0; t < DY_KV_N_TYPES; t++) {
        const dy_kv_shape s = {16, 2, 24, 8, (dy_kv_type)t};
        assert_int_equal(dy_kv_shape_block_bytes(&s), want[t]);
        dy_kv_pool *p = dy_kv_pool_make(3, &s, NULL);
        assert_non_null(p);
        assert_int_equal(dy_kv_block_bytes(p), want[t]);
        assert_int_equal(p->row_bytes, 3 * dy_kv_head_bytes((dy_kv_type)t, 8));
        assert_int_equal(dy_kv_block_data(p, 2) - dy_kv_block_data(p, 0), 2 * want[t]);
        assert_int_equal(dy_kv_value_rows(p, 0, 1) - dy_kv_key_rows(p, 0, 1), 16 * p->row_bytes);
        /* a block copy (forked samples) moves the whole block and nothing past it */
        for (size_t i = 0; i < p->data_bytes; i++)
            ((uint8_t *)p->data)[i] = (uint8_t)(i * 7u + 1);
        uint8_t *after = malloc(want[t]);
        assert_non_null(after);
        memcpy(after, dy_kv_block_data(p, 2), want[t]);
        dy_kv_copy_block(p, 1, 0);
        assert_memory_equal(dy_kv_block_data(p, 1), dy_kv_block_data(p, 0), want[t]);
        assert_memory_equal(dy_kv_block_data(p, 2), after, want[t]);
        free(after);
        dy_kv_pool_free(p);
    }
    assert_string_equal(dy_kv_type_name(DY_KV_Q8_0), "q8_0");
    assert_null(dy_kv_type_name((dy_kv_type)7));
    const dy_kv_shape bad = {16, 2, 24, 7, DY_KV_Q8_0}; /* head_dim must divide kv_dim */
    assert_null(dy_kv_pool_make(3, &bad, NULL));
}

/* Encodes a row of kv_dim values, decodes each head at every level and checks the bound. */
static void round_trip(dy_kv_type t, const float *x, int kv_dim, int hd)
{
    const size_t hb = dy_kv_head_bytes(t, hd);
    uint8_t *row = malloc(hb * (size_t)(kv_dim / hd));
    float *y = malloc(sizeof(float) * (size_t)hd), *z = malloc(sizeof(float) * (size_t)hd);
    assert_true(row && y && z);
    dy_kv_encode_row(t, x, kv_dim, hd, row);
    for (int h = 0; h < kv_dim / hd; h++) {
        const float *xh = x + (size_t)h * hd;
        dy_kv_decode_head(DY_SIMD_SCALAR, t, row + (size_t)h * hb, hb, 1, hd, y);
        float amax = 0;
        for (int i = 0; i < hd; i++)
            amax = fmaxf(amax, fabsf(xh[i]));
        for (int i = 0; i < hd; i++) {
            const double err = fabs((double)y[i] - xh[i]);
            const double bound = t == DY_KV_F16 ? ldexp(fabs(xh[i]), -11) + 1e-7
                                                : amax / 254.0 * (1 + 1e-6);
            if (!(err <= bound))
                fail_msg("%s, head %d of %d, value %d: %.9g stored as %.9g (bound %.3g)",
                         dy_kv_type_name(t), h, hd, i, xh[i], y[i], bound);
            if (amax == 0)
                assert_true(y[i] == 0);
        }
        for (int lv = DY_SIMD_SCALAR + 1; lv <= (int)dy_simd_detect(); lv++) {
            dy_kv_decode_head((dy_simd)lv, t, row + (size_t)h * hb, hb, 1, hd, z);
            assert_memory_equal(y, z, sizeof(float) * (size_t)hd);
        }
    }
    free(row);
    free(y);
    free(z);
}

static void fill(float *x, int n, float scale)
{
    for (int i = 0; i < n; i++)
        x[i] = scale * tu_rng_normal(&rng_state);
}

static void check_type(dy_kv_type t)
{
    const int hds[] = {8, 12, 20, 64, 128};
    float x[4 * 128];
    for (size_t k = 0; k < sizeof hds / sizeof *hds; k++) {
        const int hd = hds[k];
        fill(x, 4 * hd, 1.0f);
        round_trip(t, x, 4 * hd, hd);
        fill(x, 4 * hd, 300.0f); /* large values (f16's range reaches 65504) */
        round_trip(t, x, 4 * hd, hd);
        fill(x, 4 * hd, 1e-3f);
        memset(x + hd, 0, sizeof(float) * (size_t)hd); /* a zero head */
        x[2 * hd + 3] = 50.0f; /* one outlier sets its head's scale */
        round_trip(t, x, 4 * hd, hd);
    }
}

static void test_f16_round_trip(void **st)
{
    (void)st;
    check_type(DY_KV_F16);
}

static void test_q8_0_round_trip(void **st)
{
    (void)st;
    check_type(DY_KV_Q8_0);
}

/* Strided decode (several positions of one head in a row-major block) reads the right rows. */
static void test_strided_decode(void **st)
{
    (void)st;
    const int hd = 16, heads = 3, n = 5;
    const dy_kv_shape s = {n, 1, heads * hd, hd, DY_KV_Q8_0};
    dy_kv_pool *p = dy_kv_pool_make(1, &s, NULL);
    assert_non_null(p);
    float x[5][48], y[5 * 16], direct[16];
    for (int r = 0; r < n; r++) {
        fill(x[r], heads * hd, 1.0f + (float)r);
        dy_kv_encode_row(DY_KV_Q8_0, x[r], heads * hd, hd, dy_kv_key_rows(p, 0, 0) + r * p->row_bytes);
    }
    const size_t hb = dy_kv_head_bytes(DY_KV_Q8_0, hd);
    for (int lv = DY_SIMD_SCALAR; lv <= (int)dy_simd_detect(); lv++) {
        dy_kv_decode_head((dy_simd)lv, DY_KV_Q8_0, dy_kv_key_rows(p, 0, 0) + 2 * hb, p->row_bytes,
                          n, hd, y);
        for (int r = 0; r < n; r++) {
            dy_kv_decode_head(DY_SIMD_SCALAR, DY_KV_Q8_0,
                              dy_kv_key_rows(p, 0, 0) + r * p->row_bytes + 2 * hb, hb, 1, hd,
                              direct);
            assert_memory_equal(y + r * hd, direct, sizeof direct);
            for (int i = 0; i < hd; i++)
                assert_true(fabsf(direct[i] - x[r][2 * hd + i]) <= (6.0f + r) / 254.0f * 4);
        }
    }
    dy_kv_pool_free(p);
}

/* A shared-memory pool ends in a descriptor naming its type and block size. */
static void test_shm_descriptor(void **st)
{
    (void)st;
    char name[64];
    snprintf(name, sizeof name, "/dyad-test-kvdesc-%d", (int)getpid());
    const dy_kv_shape s = {4, 2, 16, 8, DY_KV_F16};
    dy_kv_pool *p = dy_kv_pool_make(5, &s, name);
    assert_non_null(p);
    int fd = shm_open(name, O_RDONLY, 0);
    assert_true(fd >= 0);
    struct stat stt;
    assert_int_equal(fstat(fd, &stt), 0);
    dy_kv_shm_desc d;
    char err[256];
    assert_true(dy_kv_shm_read_desc(fd, (size_t)stt.st_size, &d, err, sizeof err));
    assert_int_equal(d.type, DY_KV_F16);
    assert_int_equal(d.block_bytes, dy_kv_block_bytes(p));
    assert_int_equal(d.n_blocks, 5);
    /* a size that cuts the descriptor off is refused */
    assert_false(dy_kv_shm_read_desc(fd, (size_t)stt.st_size - 8, &d, err, sizeof err));
    assert_non_null(strstr(err, "descriptor"));
    close(fd);
    dy_kv_pool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_bytes),
        cmocka_unit_test(test_f16_round_trip),
        cmocka_unit_test(test_q8_0_round_trip),
        cmocka_unit_test(test_strided_decode),
        cmocka_unit_test(test_shm_descriptor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
