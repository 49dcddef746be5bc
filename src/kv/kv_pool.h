/* kv_pool.h — the paged KV cache's storage: a fixed number of blocks, each holding the keys
 * and values of `block_size` consecutive positions of one sequence for every layer, with a
 * free list and reference counts. A sequence's KV is the list of its block ids (its block
 * table); blocks need not be contiguous or in order in the pool. Within a block, layer l's
 * keys are one [block_size][kv_dim] f32 array followed by its values, so a whole block is one
 * contiguous byte range (what KV transfer ships). */
#ifndef DYAD_KV_POOL_H
#define DYAD_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n_blocks;
    int block_size;  /* positions per block */
    int n_layers;
    int kv_dim;      /* n_kv_heads × head_dim */
    float *data;
    int32_t *refcount;
    int32_t *free_list; /* stack of free block ids */
    int n_free;
    size_t data_bytes;
    char shm_name[64];  /* non-empty when data lives in a named shared-memory object */
} dy_kv_pool;

/* NULL if the arguments are out of range or memory is short. */
dy_kv_pool *dy_kv_pool_new(int n_blocks, int block_size, int n_layers, int kv_dim);
/* The same, with the block storage in a POSIX shared-memory object called shm_name (e.g.
 * "/dyad-kv-123-0"), so that a prefill worker on this host can write blocks straight into it.
 * Its pages are allocated and mapped up front (MAP_POPULATE): the pool is committed memory
 * from the start, and no KV transfer pays for first-touch page allocation
 * (docs/disaggregation-results.md, "Transfer cost"). The object is unlinked by dy_kv_pool_free. */
dy_kv_pool *dy_kv_pool_new_shared(int n_blocks, int block_size, int n_layers, int kv_dim,
                                  const char *shm_name);
/* The same bookkeeping (reference counts, free list, block size and shape) with no block
 * storage at all: data is NULL and data_bytes 0. For a simulator, whose workers schedule
 * over pools of GPU size but never run attention; dy_kv_copy_block does nothing on it and
 * dy_kv_keys / dy_kv_values must not be called. */
dy_kv_pool *dy_kv_pool_new_meta(int n_blocks, int block_size, int n_layers, int kv_dim);
void dy_kv_pool_free(dy_kv_pool *p);

/* Bytes of one block of a model of this shape: block_size positions × n_layers × (keys and
 * values) × kv_dim floats. The one formula; callable before a pool exists (sizing one). */
size_t dy_kv_bytes_per_block(int block_size, int n_layers, int kv_dim);
/* Bytes of one block of this pool (all layers, keys and values). */
size_t dy_kv_block_bytes(const dy_kv_pool *p);
/* Takes a free block (refcount 1), or -1 when none is free. */
int32_t dy_kv_alloc(dy_kv_pool *p);
/* Adds a reference (a second sequence shares the block). */
void dy_kv_ref(dy_kv_pool *p, int32_t block);
/* Drops a reference; the block returns to the free list at zero. */
void dy_kv_unref(dy_kv_pool *p, int32_t block);
/* Copies one whole block (every layer's keys and values). */
void dy_kv_copy_block(dy_kv_pool *p, int32_t dst, int32_t src);

static inline float *dy_kv_keys(const dy_kv_pool *p, int32_t block, int layer)
{
    return p->data + (((size_t)block * (size_t)p->n_layers + (size_t)layer) * 2) *
                         (size_t)p->block_size * (size_t)p->kv_dim;
}

static inline float *dy_kv_values(const dy_kv_pool *p, int32_t block, int layer)
{
    return dy_kv_keys(p, block, layer) + (size_t)p->block_size * (size_t)p->kv_dim;
}

#endif
