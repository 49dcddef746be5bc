/* fuzz_tokenizer_bin.c — libFuzzer target for the llama2.c tokenizer.bin reader, and for
 * tokenizing with whatever vocabulary it accepts. */
#include "engine/tokenizer.h"
#include "harness.h"

#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024] = "";
    int fd = fz_memfile(data, size, path);
    if (fd < 0)
        return 0;
    dy_tokenizer *t = dy_tokenizer_from_llama2c(path, 512, err, sizeof err);
    fz_check(t || err[0], "a tokenizer refused without a message");
    if (t) {
        int32_t ids[256];
        dy_tokenize(t, "Once upon a time, \xe2\x96\x81 caf\xc3\xa9 123", 27, true, false, ids, 256);
        dy_tokenizer_free(t);
    }
    close(fd);
    return 0;
}
