/* worker_link.h — `dyad worker --cluster nats://HOST:PORT`: a worker that joins a cluster on
 * its own host (docs/cluster.md). The worker loop (serve/worker/worker.c) runs unchanged on
 * one end of a socket pair; this file carries the other end over NATS:
 *   - frames from any frontend arrive on dyad.w.<key>.in, each with its reply subject (that
 *     frontend's inbox for this worker); REQUEST and PREFILL remember it for their ids;
 *   - TOKEN, DONE, KV_ALLOC and PREFILL_DONE go to the inbox of the frontend that sent the
 *     sequence; HELLO, STATS, KV_EVENTS and KV_SNAPSHOT go to dyad.w.<key>.out, which every
 *     frontend that uses the worker hears;
 *   - dyad.w.<key>.hello answers the latest HELLO frame (a frontend that finds the worker in
 *     the registry asks it first);
 *   - the registry entry (registry.h) is written at HELLO and again every lease / 3 with the
 *     load of the latest STATS; after a reconnect to NATS with a new incarnation, since what
 *     frontends sent meanwhile is lost: they let the worker go and attach it again.
 * SIGINT or SIGTERM makes it leave cleanly: the entry says "draining" (frontends place
 * nothing new there), the sequences running finish (up to the drain timeout), the entry is
 * deleted, and the worker ends. */
#ifndef DYAD_CLUSTER_WORKER_LINK_H
#define DYAD_CLUSTER_WORKER_LINK_H

#include "serve/wire/worker_args.h"

/* Runs worker c in the cluster c->cluster until it is told to stop or its model cannot be
 * loaded; returns the process's exit status (2: a bad setting, with the reason on stderr). */
int dy_cluster_worker_run(dy_worker_config *c);

#endif
