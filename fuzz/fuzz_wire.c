/* fuzz_wire.c — libFuzzer target for the frontend↔worker frame decoders: the input is a byte
 * stream cut into frames exactly as a socket reader would, and every frame goes through the
 * decoder of its type. Decoders must accept or reject, never crash or over-read.
 *   ./build-fuzz/fuzz_wire -max_total_time=600 build-fuzz/corpus-wire fuzz/corpus-wire */
#include "serve/wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    size_t pos = 0;
    while (size - pos >= DY_WIRE_HEADER) {
        dy_msg_type t;
        uint32_t len;
        if (!dy_wire_header(data + pos, &t, &len, err, sizeof err) ||
            len > size - pos - DY_WIRE_HEADER)
            return 0;
        dy_wire_check_payload(t, data + pos + DY_WIRE_HEADER, len, err, sizeof err);
        pos += DY_WIRE_HEADER + len;
    }
    return 0;
}
