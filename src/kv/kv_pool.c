/* kv_pool.c — see kv_pool.h. */
#include "kv/kv_pool.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef enum { STORE_HEAP, STORE_SHM, STORE_NONE } pool_store;

static const char *const type_names[DY_KV_N_TYPES + 1] = {"f32", "f16", "q8_0", NULL};

const char *dy_kv_type_name(dy_kv_type t)
{
    return (unsigned)t < DY_KV_N_TYPES ? type_names[t] : NULL;
}

const char *const *dy_kv_type_names(void)
{
    return type_names;
}

size_t dy_kv_head_bytes(dy_kv_type t, int head_dim)
{
    switch (t) {
    case DY_KV_F16:
        return 2 * (size_t)head_dim;
    case DY_KV_Q8_0:
        return sizeof(float) + (size_t)head_dim;
    default:
        return sizeof(float) * (size_t)head_dim;
    }
}

static bool shape_ok(const dy_kv_shape *s)
{
    return s->block_size > 0 && s->block_size <= 4096 && s->n_layers > 0 && s->kv_dim > 0 &&
           s->head_dim > 0 && s->kv_dim % s->head_dim == 0 && (unsigned)s->type < DY_KV_N_TYPES;
}

static size_t row_bytes(const dy_kv_shape *s)
{
    return (size_t)(s->kv_dim / s->head_dim) * dy_kv_head_bytes(s->type, s->head_dim);
}

size_t dy_kv_shape_block_bytes(const dy_kv_shape *s)
{
    return (size_t)s->block_size * (size_t)s->n_layers * 2 * row_bytes(s);
}

/* The shared-memory object's size: the blocks, then the descriptor. */
static size_t shm_size(size_t data_bytes)
{
    return data_bytes + sizeof(dy_kv_shm_desc);
}

/* Creates, sizes and maps the shared-memory object, and writes its descriptor. */
static void *shm_create(dy_kv_pool *p, const char *shm_name)
{
    snprintf(p->shm_name, sizeof p->shm_name, "%s", shm_name);
    p->map_bytes = shm_size(p->data_bytes);
    void *data = NULL;
    int fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    /* posix_fallocate reserves the pages now: a /dev/shm too small for the pool is an
     * error here, not a SIGBUS at the first write past its room. */
    if (fd >= 0 && ftruncate(fd, (off_t)p->map_bytes) == 0 &&
        posix_fallocate(fd, 0, (off_t)p->map_bytes) == 0) {
        void *m = mmap(NULL, p->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                       fd, 0);
        data = m == MAP_FAILED ? NULL : m;
    }
    if (fd >= 0)
        close(fd);
    if (!data && fd >= 0)
        shm_unlink(shm_name);
    if (fd < 0)
        p->shm_name[0] = 0;
    if (data) {
        const dy_kv_shm_desc d = {DY_KV_SHM_MAGIC, (uint32_t)p->type,
                                  p->data_bytes / (size_t)p->n_blocks, (uint64_t)p->n_blocks};
        memcpy((char *)data + p->data_bytes, &d, sizeof d);
    }
    return data;
}

static dy_kv_pool *pool_new(int n_blocks, const dy_kv_shape *s, pool_store store,
                            const char *shm_name)
{
    if (n_blocks <= 0 || !shape_ok(s))
        return NULL;
    const size_t block_bytes = dy_kv_shape_block_bytes(s);
    if ((size_t)n_blocks > (SIZE_MAX - sizeof(dy_kv_shm_desc)) / block_bytes)
        return NULL;
    dy_kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n_blocks = n_blocks;
    p->block_size = s->block_size;
    p->n_layers = s->n_layers;
    p->kv_dim = s->kv_dim;
    p->head_dim = s->head_dim;
    p->type = s->type;
    p->row_bytes = row_bytes(s);
    p->data_bytes = store == STORE_NONE ? 0 : (size_t)n_blocks * block_bytes;
    if (store == STORE_SHM)
        /* Shared memory, zero-filled, allocated now (see the header) so that the prefill
         * worker's copies into it run at memcpy speed. */
        p->data = shm_create(p, shm_name);
    else if (store == STORE_HEAP)
        /* calloc: untouched pages cost nothing until a block is first written. */
        p->data = calloc((size_t)n_blocks, block_bytes);
    p->refcount = calloc((size_t)n_blocks, sizeof *p->refcount);
    p->free_list = malloc((size_t)n_blocks * sizeof *p->free_list);
    if ((store != STORE_NONE && !p->data) || !p->refcount || !p->free_list) {
        dy_kv_pool_free(p);
        return NULL;
    }
    /* Lowest ids on top of the stack, so a fresh pool hands out 0, 1, 2, ... */
    for (int i = 0; i < n_blocks; i++)
        p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return p;
}

dy_kv_pool *dy_kv_pool_make(int n_blocks, const dy_kv_shape *s, const char *shm_name)
{
    return pool_new(n_blocks, s, shm_name ? STORE_SHM : STORE_HEAP, shm_name);
}

static dy_kv_shape f32_shape(int block_size, int n_layers, int kv_dim)
{
    return (dy_kv_shape){block_size, n_layers, kv_dim, kv_dim, DY_KV_F32};
}

dy_kv_pool *dy_kv_pool_new(int n_blocks, int block_size, int n_layers, int kv_dim)
{
    const dy_kv_shape s = f32_shape(block_size, n_layers, kv_dim);
    return pool_new(n_blocks, &s, STORE_HEAP, NULL);
}

dy_kv_pool *dy_kv_pool_new_shared(int n_blocks, int block_size, int n_layers, int kv_dim,
                                  const char *shm_name)
{
    const dy_kv_shape s = f32_shape(block_size, n_layers, kv_dim);
    return pool_new(n_blocks, &s, STORE_SHM, shm_name);
}

dy_kv_pool *dy_kv_pool_new_meta(int n_blocks, int block_size, int n_layers, int kv_dim)
{
    const dy_kv_shape s = f32_shape(block_size, n_layers, kv_dim);
    return pool_new(n_blocks, &s, STORE_NONE, NULL);
}

bool dy_kv_shm_read_desc(int fd, size_t size, dy_kv_shm_desc *out, char *err, size_t errlen)
{
    if (size < sizeof *out ||
        pread(fd, out, sizeof *out, (off_t)(size - sizeof *out)) != (ssize_t)sizeof *out ||
        out->magic != DY_KV_SHM_MAGIC || out->type >= DY_KV_N_TYPES || out->block_bytes == 0 ||
        out->n_blocks > (size - sizeof *out) / out->block_bytes) {
        snprintf(err, errlen, "not a dyad KV pool (no valid descriptor after its blocks)");
        return false;
    }
    return true;
}

void dy_kv_pool_free(dy_kv_pool *p)
{
    if (!p)
        return;
    if (p->shm_name[0]) {
        if (p->data)
            munmap(p->data, p->map_bytes);
        shm_unlink(p->shm_name);
    } else
        free(p->data);
    free(p->refcount);
    free(p->free_list);
    free(p);
}

size_t dy_kv_bytes_per_block(int block_size, int n_layers, int kv_dim)
{
    const dy_kv_shape s = f32_shape(block_size, n_layers, kv_dim);
    return dy_kv_shape_block_bytes(&s);
}

size_t dy_kv_block_bytes(const dy_kv_pool *p)
{
    return (size_t)p->block_size * (size_t)p->n_layers * 2 * p->row_bytes;
}

int32_t dy_kv_alloc(dy_kv_pool *p)
{
    if (p->n_free == 0)
        return -1;
    int32_t b = p->free_list[--p->n_free];
    p->refcount[b] = 1;
    return b;
}

void dy_kv_ref(dy_kv_pool *p, int32_t block)
{
    p->refcount[block]++;
}

void dy_kv_unref(dy_kv_pool *p, int32_t block)
{
    if (--p->refcount[block] == 0)
        p->free_list[p->n_free++] = block;
}

void dy_kv_copy_block(dy_kv_pool *p, int32_t dst, int32_t src)
{
    if (!p->data) /* a metadata-only pool: nothing to copy */
        return;
    const size_t bytes = dy_kv_block_bytes(p);
    memcpy(dy_kv_block_data(p, dst), dy_kv_block_data(p, src), bytes);
}
