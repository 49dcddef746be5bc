/* end.h — how a sequence or a request ended: the one vocabulary of the server. A worker puts
 * it in DONE frames; the frontend keeps it per choice, turns it into the OpenAI finish_reason
 * (openai.c), counts requests by it (dyad_requests_total{outcome=...}) and writes it to the
 * request log. Its names are what clients, metrics and logs show. */
#ifndef DYAD_END_H
#define DYAD_END_H

/* In rising severity: a request's outcome is the most severe end among its choices. */
typedef enum {
    DY_END_NONE = 0,      /* not ended (yet): a streamed chunk's finish_reason is null */
    DY_END_STOP = 1,      /* EOS or a stop string */
    DY_END_LENGTH = 2,    /* max_tokens or the context length */
    DY_END_CANCELLED = 3, /* the client went away */
    DY_END_ERROR = 4,     /* the request could not run (message in DONE) */
    DY_END_REJECTED = 5,  /* a request refused before it ran (bad input, queue full, no worker):
                           * an outcome of the frontend, never in a DONE frame */
    DY_END_N
} dy_end;

/* "stop", "length", "cancelled", "error", "rejected"; "none" for DY_END_NONE. */
const char *dy_end_name(dy_end e);

#endif
