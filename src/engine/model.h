/* model.h — a llama-family model in memory: hyper-parameters and weight matrices, loaded
 * from a GGUF file or a llama2.c checkpoint. Weights stay in the memory-mapped file (they are
 * never copied); only the small norm vectors are kept as owned f32 arrays. Loading checks
 * every tensor's presence, type and shape against the hyper-parameters. */
#ifndef DYAD_MODEL_H
#define DYAD_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "engine/gguf.h"
#include "engine/kernels.h"
#include "engine/tokenizer.h"

typedef struct {
    int dim;         /* embedding width */
    int hidden_dim;  /* FFN width */
    int n_layers;
    int n_heads;
    int n_kv_heads;  /* < n_heads for grouped-query attention */
    int head_dim;
    int vocab_size;
    int ctx_len;     /* the longest sequence the model was trained for */
    int n_rot;       /* leading dimensions of each head that RoPE rotates */
    float rope_base;
    float rms_eps;
} dy_hparams;

typedef struct {
    const float *attn_norm, *ffn_norm; /* dim floats each */
    dy_mat wq, wk, wv, wo;             /* wq: dim → n_heads·head_dim, wk/wv: dim → kv dim */
    dy_mat w_gate, w_down, w_up;       /* SwiGLU: down(silu(gate·x) ⊙ up·x) */
} dy_layer;

typedef enum { DY_FILE_GGUF = 1, DY_FILE_LLAMA2C = 2 } dy_file_kind;

typedef struct {
    dy_hparams hp;
    dy_file_kind kind;
    char *path;
    dy_mat tok_embd;        /* vocab × dim */
    dy_mat output;          /* vocab × dim; the same data as tok_embd when tied */
    const float *out_norm;  /* dim floats */
    dy_layer *layers;
    float *norms;           /* owned storage behind every norm vector */
    dy_gguf_file *gguf;        /* set for GGUF models */
    void *map;              /* set for llama2.c checkpoints */
    size_t map_size;
    dy_tokenizer *tok;      /* may be NULL for a llama2.c checkpoint without tokenizer */
    uint64_t fingerprint;   /* identifies model + tokenizer (mixed into KV block hashes) */
} dy_model;

/* Loads a model. `path` may be a GGUF file or a llama2.c checkpoint (told apart by the
 * magic). For a checkpoint, `tokenizer_path` names the llama2.c tokenizer.bin (NULL: none,
 * then the model can only run on token ids). For GGUF the tokenizer inside the file is used
 * unless tokenizer_path is given. NULL and a message naming the file on failure. */
dy_model *dy_model_load(const char *path, const char *tokenizer_path, char *err, size_t errlen);
void dy_model_free(dy_model *m);

/* Bytes of weights read by one decode step (every matrix once, plus one embedding row). */
uint64_t dy_model_weight_bytes(const dy_model *m);
/* The dominant weight type (of wq in layer 0), for reports. */
dy_type dy_model_weight_type(const dy_model *m);

#endif
