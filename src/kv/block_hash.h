/* block_hash.h — the chained KV block hash, the contract between the router and the workers:
 * a worker's prefix cache files a full block under the same hash that the frontend computes
 * for that block of a prompt, so both must come from here.
 *
 *     h_0 = xxh3(fingerprint ‖ tokens of block 0),  h_i = xxh3(h_{i-1} ‖ tokens of block i)
 *
 * The fingerprint is the model's (workers report it in HELLO), so different models never
 * share blocks. Every block size is hashed the same way. */
#ifndef DYAD_KV_BLOCK_HASH_H
#define DYAD_KV_BLOCK_HASH_H

#include <stdint.h>

/* The hash of one full block of n tokens whose predecessor's hash is `parent` (the
 * fingerprint for a prompt's first block). */
uint64_t dy_block_hash(uint64_t parent, const int32_t *tokens, int n);

/* The hashes of the full blocks of tokens[0..n_tokens) into out[0..n_tokens / block_size),
 * chained from `parent`: the fingerprint when tokens start a prompt, else the hash of the
 * block before them. Returns that number of full blocks (0 when block_size < 1). */
int dy_block_hashes(uint64_t parent, const int32_t *tokens, int n_tokens, int block_size,
                    uint64_t *out);

#endif
