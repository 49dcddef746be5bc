/* fuzz_model.c — libFuzzer target for the model-file parsers. The input becomes an
 * in-memory file (memfd) and goes through the whole loader: GGUF header, metadata, tensor
 * infos, hyper-parameters, shapes and the GGUF tokenizer when the input starts with "GGUF";
 * the llama2.c checkpoint loader (with the bundled tokenizer.bin) otherwise. The loader must
 * return a model or an error message, never crash or read out of bounds.
 *   cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DDYAD_FUZZ=ON
 *   ninja -C build-fuzz fuzz_model
 *   ./build-fuzz/fuzz_model -max_total_time=600 build-fuzz/corpus-model fuzz/corpus-model */
#include "engine/model.h"
#include "harness.h"

#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024] = "";
    int fd = fz_memfile(data, size, path);
    if (fd < 0)
        return 0;
    const char *tok = size >= 4 && data[0] == 'G' && data[1] == 'G' && data[2] == 'U' &&
                              data[3] == 'F'
                          ? NULL
                          : DYAD_SOURCE_DIR "/models/tok512.bin";
    dy_model *m = dy_model_load(path, tok, err, sizeof err);
    fz_check(m || err[0], "a model refused without a message");
    dy_model_free(m);
    close(fd);
    return 0;
}
