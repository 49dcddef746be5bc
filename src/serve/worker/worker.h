/* worker.h — a worker process: one model, one engine, one scheduler, and a step loop that
 * serves the sequences its frontend sends over one socket (wire.h frames). Each step it
 * reads new requests and cancellations, runs the scheduler's plan through the engine,
 * samples, detokenizes, applies stop strings and sends tokens back. */
#ifndef DYAD_WORKER_H
#define DYAD_WORKER_H

#include <stdint.h>
#include "serve/wire/worker_args.h"

/* Runs until the frontend closes the socket or asks to shut down. Returns the process exit
 * status (0, or 1 with a message on stderr when the model or engine cannot be set up). */
int dy_worker_run(const dy_worker_config *cfg);

#endif
