/* test_block_hash.c — the chained block hash (kv/block_hash.h): one definition for every
 * block size, h_i = xxh3(h_{i-1} ‖ tokens of block i), and the full blocks of a prompt. */
#include "testutil.h"
#include "kv/block_hash.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define HASH_SEED 0x6479616442484b56ull /* as in block_hash.c: the contract's constant */

/* The definition, computed the slow way: parent ‖ tokens in one heap buffer. */
static uint64_t reference(uint64_t parent, const int32_t *tokens, int n)
{
    size_t bytes = sizeof parent + sizeof(int32_t) * (size_t)n;
    unsigned char *buf = malloc(bytes);
    assert_non_null(buf);
    memcpy(buf, &parent, sizeof parent);
    memcpy(buf + sizeof parent, tokens, sizeof(int32_t) * (size_t)n);
    uint64_t h = XXH3_64bits_withSeed(buf, bytes, HASH_SEED);
    free(buf);
    return h;
}

static void test_every_block_size_hashes_the_same_way(void **st)
{
    (void)st;
    static const int sizes[] = {1, 16, 255, 256, 257, 300, 1024};
    int32_t *tok = malloc(sizeof(int32_t) * 1024);
    assert_non_null(tok);
    for (int i = 0; i < 1024; i++)
        tok[i] = i * 7 + 3;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        assert_true(dy_block_hash(42, tok, sizes[k]) == reference(42, tok, sizes[k]));
    free(tok);
}

static void test_hashes_chain_over_full_blocks(void **st)
{
    (void)st;
    int32_t tok[37];
    for (int i = 0; i < 37; i++)
        tok[i] = 100 + i;
    uint64_t h[4] = {0};
    assert_int_equal(dy_block_hashes(7, tok, 37, 16, h), 2); /* the partial block is left out */
    assert_true(h[0] == dy_block_hash(7, tok, 16));
    assert_true(h[1] == dy_block_hash(h[0], tok + 16, 16));
    assert_true(h[2] == 0);
    /* Continuing a chain from a block's hash gives the same hashes as from the start. */
    uint64_t rest;
    assert_int_equal(dy_block_hashes(h[0], tok + 16, 21, 16, &rest), 1);
    assert_true(rest == h[1]);
    /* A different fingerprint (another model) shares no block. */
    uint64_t o[2];
    dy_block_hashes(8, tok, 32, 16, o);
    assert_true(o[0] != h[0] && o[1] != h[1]);
}

static void test_short_or_bad_input_has_no_blocks(void **st)
{
    (void)st;
    int32_t tok[4] = {1, 2, 3, 4};
    uint64_t h[1];
    assert_int_equal(dy_block_hashes(1, tok, 3, 4, h), 0);
    assert_int_equal(dy_block_hashes(1, tok, 4, 0, h), 0);
    assert_int_equal(dy_block_hashes(1, tok, 0, 4, h), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_block_size_hashes_the_same_way),
        cmocka_unit_test(test_hashes_chain_over_full_blocks),
        cmocka_unit_test(test_short_or_bad_input_has_no_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
