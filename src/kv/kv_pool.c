/* kv_pool.c — see kv_pool.h. */
#include "kv/kv_pool.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef enum { STORE_HEAP, STORE_SHM, STORE_NONE } pool_store;

static dy_kv_pool *pool_new(int n_blocks, int block_size, int n_layers, int kv_dim,
                            pool_store store, const char *shm_name)
{
    if (n_blocks <= 0 || block_size <= 0 || block_size > 4096 || n_layers <= 0 || kv_dim <= 0)
        return NULL;
    const size_t block_bytes = dy_kv_bytes_per_block(block_size, n_layers, kv_dim);
    if ((size_t)n_blocks > SIZE_MAX / block_bytes)
        return NULL;
    dy_kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->n_layers = n_layers;
    p->kv_dim = kv_dim;
    p->data_bytes = store == STORE_NONE ? 0 : (size_t)n_blocks * block_bytes;
    if (store == STORE_SHM) {
        /* Shared memory, zero-filled, allocated now (see the header) so that the prefill
         * worker's copies into it run at memcpy speed. */
        snprintf(p->shm_name, sizeof p->shm_name, "%s", shm_name);
        int fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        /* posix_fallocate reserves the pages now: a /dev/shm too small for the pool is an
         * error here, not a SIGBUS at the first write past its room. */
        if (fd >= 0 && ftruncate(fd, (off_t)p->data_bytes) == 0 &&
            posix_fallocate(fd, 0, (off_t)p->data_bytes) == 0) {
            void *m = mmap(NULL, p->data_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                           fd, 0);
            p->data = m == MAP_FAILED ? NULL : m;
        }
        if (fd >= 0)
            close(fd);
        if (!p->data && fd >= 0)
            shm_unlink(shm_name);
        if (fd < 0)
            p->shm_name[0] = 0;
    } else if (store == STORE_HEAP)
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

dy_kv_pool *dy_kv_pool_new(int n_blocks, int block_size, int n_layers, int kv_dim)
{
    return pool_new(n_blocks, block_size, n_layers, kv_dim, STORE_HEAP, NULL);
}

dy_kv_pool *dy_kv_pool_new_shared(int n_blocks, int block_size, int n_layers, int kv_dim,
                                  const char *shm_name)
{
    return pool_new(n_blocks, block_size, n_layers, kv_dim, STORE_SHM, shm_name);
}

dy_kv_pool *dy_kv_pool_new_meta(int n_blocks, int block_size, int n_layers, int kv_dim)
{
    return pool_new(n_blocks, block_size, n_layers, kv_dim, STORE_NONE, NULL);
}

void dy_kv_pool_free(dy_kv_pool *p)
{
    if (!p)
        return;
    if (p->shm_name[0]) {
        if (p->data)
            munmap(p->data, p->data_bytes);
        shm_unlink(p->shm_name);
    } else
        free(p->data);
    free(p->refcount);
    free(p->free_list);
    free(p);
}

size_t dy_kv_bytes_per_block(int block_size, int n_layers, int kv_dim)
{
    return (size_t)block_size * (size_t)n_layers * 2 * (size_t)kv_dim * sizeof(float);
}

size_t dy_kv_block_bytes(const dy_kv_pool *p)
{
    return dy_kv_bytes_per_block(p->block_size, p->n_layers, p->kv_dim);
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
    memcpy((char *)p->data + (size_t)dst * bytes, (const char *)p->data + (size_t)src * bytes, bytes);
}
