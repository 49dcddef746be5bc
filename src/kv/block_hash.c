/* block_hash.c — see block_hash.h. */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include "kv/block_hash.h"

#include <string.h>
#include <xxhash.h>

#define HASH_SEED 0x6479616442484b56ull /* fixed: every worker must compute the same hashes */
#define ONE_SHOT_TOKENS 256 /* blocks up to this size are hashed from one stack buffer */

uint64_t dy_block_hash(uint64_t parent, const int32_t *tokens, int n)
{
    const size_t bytes = sizeof(int32_t) * (size_t)(n > 0 ? n : 0);
    if (n <= ONE_SHOT_TOKENS) {
        int32_t buf[2 + ONE_SHOT_TOKENS]; /* parent ‖ tokens */
        memcpy(buf, &parent, sizeof parent);
        if (bytes)
            memcpy(buf + 2, tokens, bytes);
        return XXH3_64bits_withSeed(buf, sizeof parent + bytes, HASH_SEED);
    }
    /* Larger blocks: the same digest of parent ‖ tokens, fed in two pieces. */
    XXH3_state_t st;
    XXH3_64bits_reset_withSeed(&st, HASH_SEED);
    XXH3_64bits_update(&st, &parent, sizeof parent);
    XXH3_64bits_update(&st, tokens, bytes);
    return XXH3_64bits_digest(&st);
}

int dy_block_hashes(uint64_t parent, const int32_t *tokens, int n_tokens, int block_size,
                    uint64_t *out)
{
    if (block_size < 1 || n_tokens < block_size)
        return 0;
    const int n = n_tokens / block_size;
    for (int i = 0; i < n; i++)
        parent = out[i] = dy_block_hash(parent, tokens + (size_t)i * block_size, block_size);
    return n;
}
