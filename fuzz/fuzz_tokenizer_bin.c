/* fuzz_tokenizer_bin.c — libFuzzer target for the llama2.c tokenizer.bin reader, and for
 * tokenizing with whatever vocabulary it accepts. */
#include "engine/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-tok", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64], err[1024];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    dy_tokenizer *t = dy_tokenizer_from_llama2c(path, 512, err, sizeof err);
    if (t) {
        int32_t ids[256];
        dy_tokenize(t, "Once upon a time, \xe2\x96\x81 caf\xc3\xa9 123", 27, true, false, ids, 256);
        dy_tokenizer_free(t);
    }
    close(fd);
    return 0;
}
