/* tokenizer.h — text ↔ token ids for the vocabularies llama-family models ship:
 *  - SentencePiece-style BPE with byte fallback (GGUF `tokenizer.ggml.model = llama`, and
 *    llama2.c's tokenizer.bin), where token scores are merge priorities;
 *  - byte-level BPE (GGUF `gpt2`) with a merges list and the pre-tokenizer named by
 *    `tokenizer.ggml.pre` (default/gpt-2, llama-bpe), its regexes run by PCRE2.
 * It also keeps the special tokens, add_bos/add_eos and the chat template for the server. */
#ifndef DYAD_TOKENIZER_H
#define DYAD_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "engine/gguf.h"

typedef struct dy_tokenizer dy_tokenizer;

typedef enum { DY_VOCAB_SPM = 1, DY_VOCAB_BPE = 2 } dy_vocab_kind;

/* From a GGUF's tokenizer.ggml.* metadata. NULL and a message in err on failure. */
dy_tokenizer *dy_tokenizer_from_gguf(const dy_gguf_file *g, char *err, size_t errlen);
/* From a llama2.c tokenizer.bin for a model with `vocab_size` tokens (BOS 1, EOS 2). */
dy_tokenizer *dy_tokenizer_from_llama2c(const char *path, int vocab_size, char *err, size_t errlen);
void dy_tokenizer_free(dy_tokenizer *t);

int dy_tokenizer_vocab_size(const dy_tokenizer *t);
dy_vocab_kind dy_tokenizer_kind(const dy_tokenizer *t);
int32_t dy_tokenizer_bos(const dy_tokenizer *t); /* -1 if none */
int32_t dy_tokenizer_eos(const dy_tokenizer *t); /* -1 if none */
bool dy_tokenizer_add_bos(const dy_tokenizer *t);
/* True for control tokens that end generation (EOS, EOT, ...). */
bool dy_tokenizer_is_eog(const dy_tokenizer *t, int32_t id);
/* The GGUF's tokenizer.chat_template, or NULL. */
const char *dy_tokenizer_chat_template(const dy_tokenizer *t);
/* Token text as stored in the vocabulary (NULL if id out of range). */
const char *dy_tokenizer_token_text(const dy_tokenizer *t, int32_t id);
/* The longest token text in the vocabulary, in bytes: no token's piece is longer (a piece
 * decodes the text's escapes, which only shortens it). */
int dy_tokenizer_max_token_bytes(const dy_tokenizer *t);

/* Tokenize `len` bytes of `text`. add_bos prepends BOS when the vocab has one;
 * parse_special lets special-token texts such as "<s>" in the input become their ids.
 * Writes at most `cap` ids; returns the total number of ids (which may exceed cap: call
 * again with a larger buffer), or -1 on error. */
int dy_tokenize(const dy_tokenizer *t, const char *text, size_t len, bool add_bos,
                bool parse_special, int32_t *ids, int cap);

/* The bytes that token `id` contributes to the text when it follows `prev` (-1 at start):
 * byte tokens <0xNN> become the byte, SPM's ▁ becomes a space, byte-level BPE is mapped
 * back to bytes, and the space the SPM tokenizer adds after BOS is dropped. Control tokens
 * give "". Returns the length (may exceed cap; output truncated then). */
int dy_token_to_piece(const dy_tokenizer *t, int32_t prev, int32_t id, char *buf, int cap);

#endif
