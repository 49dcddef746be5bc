/* xfer_frame.h — the header in front of each KV block sent over TCP (xfer.c, xfer_rx.c). */
#ifndef DYAD_XFER_FRAME_H
#define DYAD_XFER_FRAME_H

#include <stdint.h>

#define DY_XFER_MAGIC 0x564b5944u /* "DYKV" */

typedef struct {
    uint32_t magic;
    uint32_t nbytes;   /* the block's bytes that follow */
    uint64_t seq_id;
    int32_t dst;       /* destination block id */
    uint32_t kv_type;  /* dy_kv_type of the block: the receiver refuses another type even where
                        * the byte counts agree (f32 blocks of 8 positions are f16 blocks of 16) */
} dy_xfer_frame;

#endif
