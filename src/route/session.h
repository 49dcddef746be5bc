/* session.h — the conversations the frontend has seen (dyad.session), for the tool-call hold
 * (docs/kv-tiers.md): which worker served each one's last turn (its next turn goes back there,
 * where its KV is held), and how long each tool takes — the time from an answer that called
 * it to the conversation's next turn — learned as a running mean per tool name. Pure: the
 * caller passes the time in and hashes the names. */
#ifndef DYAD_ROUTE_SESSION_H
#define DYAD_ROUTE_SESSION_H

#include <stdint.h>

typedef struct dy_sessions dy_sessions;

/* Room for max_sessions conversations (the least recently ended is forgotten past that) and
 * max_tools tool names (tools beyond are not learned). NULL if out of memory or a bound < 1. */
dy_sessions *dy_sessions_new(int max_sessions, int max_tools);
void dy_sessions_free(dy_sessions *s);
int dy_sessions_count(const dy_sessions *s);

/* A turn of session `key` (non-zero) arrives at `now`: the worker that served its last turn,
 * or -1 (new, forgotten, or its worker gone). If that turn's answer called a tool, the time
 * since it ended is one observation of that tool's duration. */
int dy_sessions_arrive(dy_sessions *s, uint64_t key, double now);
/* The worker that served the session's last turn (-1: none), without counting an arrival. */
int dy_sessions_worker(const dy_sessions *s, uint64_t key);
/* The turn ended on `worker` at `now`; `tool` is the name hash of the first tool its answer
 * called, 0 if none. Returns the seconds the next turn is expected after now: the tool's mean
 * so far, or -1 when not known (no call, a tool never timed, or no room to remember it). */
double dy_sessions_end(dy_sessions *s, uint64_t key, int worker, uint64_t tool, double now);
/* The worker is gone: its sessions' next turns go wherever the router sends them. */
void dy_sessions_forget_worker(dy_sessions *s, int worker);
/* A tool's mean duration so far (seconds) and how many times it was timed; -1 and 0 if never. */
double dy_sessions_tool_mean(const dy_sessions *s, uint64_t tool, int *timed);

#endif
