/* tokenizer_spm.c — SentencePiece-style BPE (GGUF `llama` vocabularies and llama2.c's
 * tokenizer.bin): start from one symbol per UTF-8 character and keep merging the adjacent
 * pair whose concatenation is the highest-scoring vocabulary entry (leftmost on ties);
 * whatever is left that is not a token falls back to byte tokens <0xNN>. Same result as
 * llama.cpp's llm_tokenizer_spm and llama2.c's encode(). */
#include "engine/tokenizer_impl.h"

#include <stdlib.h>

typedef struct {
    const dy_tokenizer *t;
    const char *s;
    dy_tok_symbol *sym;
    dy_tok_heap heap;
} spm_state;

/* Queues the merge of symbols l and r if their concatenation is a token, by its score. */
static void add_bigram(void *ctx, int l, int r)
{
    spm_state *st = ctx;
    size_t size = st->sym[l].n + st->sym[r].n;
    int32_t id = dy_tok_map_get(&st->t->vocab, st->s + st->sym[l].off, size);
    if (id < 0)
        return;
    dy_tok_heap_push(&st->heap, (dy_tok_bigram){.left = l, .right = r, .prio = st->t->score[id], .size = size});
}

/* A byte that is not covered by any token: its <0xNN> token, else the unknown token. */
static void push_byte(const dy_tokenizer *t, unsigned char c, dy_tok_vec *out)
{
    int32_t id = t->byte_token[c];
    if (id < 0)
        id = dy_tok_map_get(&t->vocab, (const char *)&c, 1);
    if (id < 0)
        id = t->unk;
    if (id >= 0)
        dy_tok_vec_push(out, id);
}

bool dy_spm_encode(const dy_tokenizer *t, const char *s, size_t n, dy_tok_vec *out)
{
    spm_state st = {.t = t, .s = s};
    int count = dy_tok_split_chars(s, n, &st.sym);
    if (count < 0)
        return false;
    dy_tok_merge_symbols(st.sym, count, &st.heap, add_bigram, &st);
    bool ok = !st.heap.failed;
    for (int i = count > 0 ? 0 : -1; ok && i >= 0; i = st.sym[i].next) {
        const dy_tok_symbol *y = &st.sym[i];
        int32_t id = dy_tok_map_get(&t->vocab, s + y->off, y->n);
        if (id >= 0) {
            dy_tok_vec_push(out, id);
            continue;
        }
        for (size_t j = 0; j < y->n; j++)
            push_byte(t, (unsigned char)s[y->off + j], out);
    }
    free(st.heap.v);
    free(st.sym);
    return ok && !out->failed;
}
