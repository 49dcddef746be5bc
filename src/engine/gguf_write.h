/* gguf_write.h — writing GGUF v3 files. A dy_gguf_writer collects metadata and tensor
 * descriptions in memory, then writes the file in one pass: header, metadata, tensor
 * infos, and the data section (general.alignment 32, every tensor padded), into a temporary
 * file beside the target that is renamed into place only once everything is on disk, so a
 * failed or interrupted write never leaves a half-written output under the target's name.
 *
 * Tensor data either comes from a pointer given with the tensor, or is streamed in
 * afterwards with dy_gguf_writer_write_data (for models too large to hold converted in
 * memory): tensors are written in the order they were added, and whenever the next one has
 * a pointer it is written without being asked.
 *
 * Metadata setters and dy_gguf_writer_add_tensor record the first error they meet (bad
 * argument, out of memory) in the writer; dy_gguf_writer_begin then fails with that message,
 * so a caller may set many keys and check once. Reading GGUF lives in gguf.h. */
#ifndef DYAD_GGUF_WRITE_H
#define DYAD_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/threadpool.h"
#include "util/progress.h"

#define DY_GGUF_WRITE_ALIGNMENT 32
/* ggml's GGML_MAX_NAME, NUL included: llama.cpp rejects longer tensor names. */
#define DY_GGUF_WRITE_MAX_NAME 64

typedef struct dy_gguf_writer dy_gguf_writer;

dy_gguf_writer *dy_gguf_writer_new(void);
/* Frees the writer; if a write is in progress it is abandoned and its temporary file
 * removed (the target is left as it was). */
void dy_gguf_writer_free(dy_gguf_writer *w);

/* Metadata. Setting a key that is already set replaces its value in place (keeping its
 * position). Keys are kept in the order first set. general.alignment is managed by the
 * writer and cannot be set. */
bool dy_gguf_writer_set_u32(dy_gguf_writer *w, const char *key, uint32_t v);
bool dy_gguf_writer_set_i32(dy_gguf_writer *w, const char *key, int32_t v);
bool dy_gguf_writer_set_f32(dy_gguf_writer *w, const char *key, float v);
bool dy_gguf_writer_set_bool(dy_gguf_writer *w, const char *key, bool v);
bool dy_gguf_writer_set_str(dy_gguf_writer *w, const char *key, const char *v);
bool dy_gguf_writer_set_arr_str(dy_gguf_writer *w, const char *key, const char *const *v, size_t n);
/* The same with counted strings (which may hold any bytes). */
bool dy_gguf_writer_set_arr_strn(dy_gguf_writer *w, const char *key, const dy_gguf_str *v,
                                 size_t n);
bool dy_gguf_writer_set_arr_f32(dy_gguf_writer *w, const char *key, const float *v, size_t n);
bool dy_gguf_writer_set_arr_i32(dy_gguf_writer *w, const char *key, const int32_t *v, size_t n);
/* Copies one metadata entry read by gguf.h, of any type (general.alignment is skipped). */
bool dy_gguf_writer_set_kv(dy_gguf_writer *w, const dy_gguf_kv *kv);
/* Copies every `tokenizer.*` entry of src (vocabulary, scores, types, merges, special ids,
 * add_bos/add_eos, chat template, ...). */
bool dy_gguf_writer_copy_tokenizer(dy_gguf_writer *w, const dy_gguf_file *src);
bool dy_gguf_writer_has_key(const dy_gguf_writer *w, const char *key);

/* Adds a tensor: n_dims in [1, 4], ne[0] the row length (a multiple of the type's block
 * size), nbytes its size (checked against type and shape). `data` (nbytes bytes, which
 * must stay valid until written) or NULL to stream it with dy_gguf_writer_write_data. */
bool dy_gguf_writer_add_tensor(dy_gguf_writer *w, const char *name, uint32_t n_dims,
                               const int64_t *ne, dy_type type, const void *data, uint64_t nbytes);
/* The size of a tensor of this type and shape, or 0 if its rows do not fit the type. */
uint64_t dy_gguf_tensor_bytes(dy_type type, uint32_t n_dims, const int64_t *ne);

/* Shows the write's progress on p (may be NULL): bytes of the data section written of its
 * total (which begin sets), and the tensor being written. p stays the caller's. */
void dy_gguf_writer_set_progress(dy_gguf_writer *w, dy_progress *p);

/* Starts writing `path`: creates the temporary file and writes everything up to the data
 * of the first tensor that is to be streamed. Errors ("path: problem") go to err. */
bool dy_gguf_writer_begin(dy_gguf_writer *w, const char *path, char *err, size_t errlen);
/* Appends n bytes of data to the tensor being streamed; a call may not run past the end of
 * that tensor. */
bool dy_gguf_writer_write_data(dy_gguf_writer *w, const void *p, size_t n, char *err,
                               size_t errlen);
/* The index (in add order) of the tensor that dy_gguf_writer_write_data fills next, or -1
 * when every tensor is written. */
long dy_gguf_writer_current(const dy_gguf_writer *w);
/* Checks every tensor was written in full, flushes and syncs the file, and renames it to
 * the target. On any failure the temporary file is removed. */
bool dy_gguf_writer_finish(dy_gguf_writer *w, char *err, size_t errlen);
/* begin + finish, for writers whose tensors all carry their data. */
bool dy_gguf_writer_write_file(dy_gguf_writer *w, const char *path, char *err, size_t errlen);

/* Produces row `row` (cols floats) of a tensor being streamed. Called from several threads
 * at once, on different rows, so it must depend on nothing but the row. */
typedef void (*dy_gguf_row_fn)(void *ctx, int64_t row, float *dst);
/* Streams the whole current tensor (rows x cols, stored as `type`; both must match what
 * was added): rows come from fill, are quantized to `type` on pool's threads (pool may be
 * NULL) a chunk at a time, and written. Memory use is a few MiB whatever the tensor. */
bool dy_gguf_writer_stream_rows(dy_gguf_writer *w, dy_pool *pool, dy_type type, int64_t cols,
                                int64_t rows, dy_gguf_row_fn fill, void *ctx, char *err,
                                size_t errlen);

/* ---- llama models: what `dyad convert` and `dyad gen-model` both write. */

/* The type a weight matrix with rows of n elements is stored as when `want` is asked for:
 * want itself when the rows fit its blocks, else Q8_0 when they fit 32-element blocks, else
 * F16 (llama.cpp's quantizer likewise falls back to a type whose block fits, F16 last). */
dy_type dy_gguf_fallback_type(dy_type want, int64_t n);
/* llama.cpp's general.file_type (enum llama_ftype) for a file mostly of type t. */
uint32_t dy_gguf_llama_file_type(dy_type t);
/* Sets general.architecture = "llama" and the llama.* hyper-parameters with the value
 * types llama.cpp reads (integers as u32, floats as f32). */
bool dy_gguf_writer_set_llama_hparams(dy_gguf_writer *w, const dy_hparams *hp);

#endif
