/* kv_pool.h — the paged KV cache's storage: a fixed number of blocks, each holding the keys
 * and values of `block_size` consecutive positions of one sequence for every layer, with a
 * free list and reference counts. A sequence's KV is the list of its block ids (its block
 * table); blocks need not be contiguous or in order in the pool. Within a block, layer l's
 * keys are block_size rows (one per position) followed by as many rows of values, so a whole
 * block is one contiguous byte range (what KV transfer ships).
 *
 * The element type is the pool's (--kv-type). A row is n_kv_heads head segments of
 * dy_kv_head_bytes each:
 *   f32   head_dim floats (the default; what the engine computes)
 *   f16   head_dim IEEE half floats
 *   q8_0  one f32 scale d, then head_dim int8 q, the value being d·q; d = max|x| / 127 over
 *         that head's head_dim values at that position.
 * q8_0's scale is per (position, head), not per block of positions: rows are written one
 * position at a time (decode), and a scale shared with later positions would force the block's
 * earlier rows to be re-quantised, making a position's stored value depend on how the prompt
 * was cut into steps. Attention reads a key or value row of one head as one scale load
 * followed by head_dim contiguous bytes. */
#ifndef DYAD_KV_POOL_H
#define DYAD_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { DY_KV_F32 = 0, DY_KV_F16 = 1, DY_KV_Q8_0 = 2 } dy_kv_type;
#define DY_KV_N_TYPES 3

/* "f32", "f16", "q8_0" (NULL for an unknown value). */
const char *dy_kv_type_name(dy_kv_type t);
/* The names in type order, NULL-terminated (an option table's enum names). */
const char *const *dy_kv_type_names(void);
/* Bytes of one head's keys (or values) at one position. */
size_t dy_kv_head_bytes(dy_kv_type t, int head_dim);

/* The shape of a model's KV: what a pool and every copy of its blocks must agree on. */
typedef struct {
    int block_size;  /* positions per block */
    int n_layers;
    int kv_dim;      /* n_kv_heads × head_dim */
    int head_dim;    /* divides kv_dim */
    dy_kv_type type;
} dy_kv_shape;

typedef struct {
    int n_blocks;
    int block_size;  /* positions per block */
    int n_layers;
    int kv_dim;      /* n_kv_heads × head_dim */
    int head_dim;    /* the model's; kv_dim for the f32 pools of dy_kv_pool_new and friends */
    dy_kv_type type;
    size_t row_bytes;  /* one position's keys (or values): kv_dim / head_dim head segments */
    void *data;
    int32_t *refcount;
    int32_t *free_list; /* stack of free block ids */
    int n_free;
    size_t data_bytes;  /* the blocks' bytes */
    size_t map_bytes;   /* shared memory: the object's size (blocks, then a dy_kv_shm_desc) */
    char shm_name[64];  /* non-empty when data lives in a named shared-memory object */
} dy_kv_pool;

/* A pool of n_blocks blocks of shape s; the blocks are in a POSIX shared-memory object called
 * shm_name when it is not NULL (see dy_kv_pool_new_shared), on the heap otherwise. NULL if the
 * arguments are out of range or memory is short. */
dy_kv_pool *dy_kv_pool_make(int n_blocks, const dy_kv_shape *s, const char *shm_name);
/* Bytes of one block of shape s (all layers, keys and values). */
size_t dy_kv_shape_block_bytes(const dy_kv_shape *s);

/* What follows the blocks in a shared-memory pool, so that a process writing into the pool
 * checks it holds blocks of its own type and size before copying any. */
typedef struct {
    uint32_t magic;  /* DY_KV_SHM_MAGIC */
    uint32_t type;   /* dy_kv_type */
    uint64_t block_bytes;
    uint64_t n_blocks;
} dy_kv_shm_desc;
#define DY_KV_SHM_MAGIC 0x4853564bu /* "KVSH" */
/* Reads the descriptor of a shared-memory pool of object size size from fd; false (with the
 * reason in err) when it is missing or malformed. */
bool dy_kv_shm_read_desc(int fd, size_t size, dy_kv_shm_desc *out, char *err, size_t errlen);

/* The f32 pools of the constructors below (head_dim = kv_dim): NULL if the arguments are out
 * of range or memory is short. */
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

/* Bytes of one f32 block of a model of this shape: block_size positions × n_layers × (keys
 * and values) × kv_dim floats (dy_kv_shape_block_bytes for the other types). */
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

/* The first byte of a block: the byte range KV transfer and the tiers copy. */
static inline uint8_t *dy_kv_block_data(const dy_kv_pool *p, int32_t block)
{
    return (uint8_t *)p->data + (size_t)block * 2 * (size_t)p->n_layers *
                                    (size_t)p->block_size * p->row_bytes;
}

/* Layer layer's key rows of a block (block_size rows of row_bytes), any type. */
static inline uint8_t *dy_kv_key_rows(const dy_kv_pool *p, int32_t block, int layer)
{
    return dy_kv_block_data(p, block) +
           (size_t)layer * 2 * (size_t)p->block_size * p->row_bytes;
}

static inline uint8_t *dy_kv_value_rows(const dy_kv_pool *p, int32_t block, int layer)
{
    return dy_kv_key_rows(p, block, layer) + (size_t)p->block_size * p->row_bytes;
}

/* The same as floats: f32 pools only. */
static inline float *dy_kv_keys(const dy_kv_pool *p, int32_t block, int layer)
{
    return (float *)(void *)dy_kv_key_rows(p, block, layer);
}

static inline float *dy_kv_values(const dy_kv_pool *p, int32_t block, int layer)
{
    return (float *)(void *)dy_kv_value_rows(p, block, layer);
}

#endif
