/* nats_conn.h — one connection to the NATS server of a cluster (docs/cluster.md), shared by
 * workers, frontends and `dyad cluster status`. The URL is checked before anything is tried
 * (nats://HOST:PORT, or several separated by commas). Connecting retries with a backoff that
 * doubles from 0.25 s up to 5 s, saying on stderr why each try failed, until timeout_s has
 * passed: never a hang. Once connected the client reconnects by itself after the server goes
 * away (restarts, partitions) for as long as the process runs, buffering what is published
 * meanwhile up to a bound; `on_change` hears of each disconnect and reconnect. */
#ifndef DYAD_CLUSTER_NATS_CONN_H
#define DYAD_CLUSTER_NATS_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether url is a NATS URL this client takes (no connection made); false with why in err. */
bool dy_nats_url_check(const char *url, char *err, size_t errlen);

#ifdef DYAD_HAVE_NATS
#include <nats/nats.h>

typedef struct {
    const char *url;       /* --cluster */
    const char *name;      /* the connection's name, as the server shows it ("dyad worker 3") */
    const char *who;       /* the prefix of its log lines ("dyad worker") */
    double timeout_s;      /* give up connecting after this long; 0: one try */
    /* Called from the client's thread on a disconnect (up = false) and a reconnect; not for
     * the disconnect dy_nats_close itself causes. A call under way when dy_nats_close is called
     * may still be finishing as it returns: ctx must outlive the connection (keep it for the
     * process's life, or free it after nats_CloseAndWait). NULL: nobody is told. */
    void (*on_change)(void *ctx, bool up);
    void *ctx;
} dy_nats_opts;

/* NULL (with the last try's reason in err) when no try succeeded within timeout_s. */
natsConnection *dy_nats_connect(const dy_nats_opts *o, char *err, size_t errlen);
/* Closes and destroys nc (NULL is fine). */
void dy_nats_close(natsConnection *nc);
/* How many times nc has reconnected since it was made. Core NATS is at most once: what was
 * published to a subscription of ours while we were away, or by us to one of a peer that was
 * away, is gone, so a stream of frames that spans a reconnect may have a hole. Anything that
 * arrives on the new connection is read after this count went up (the client counts the
 * reconnect before it reads from the new socket). */
uint64_t dy_nats_reconnects(natsConnection *nc);
/* natsStatus_GetText(s), with the calling thread's last error from the client when it
 * belongs to s and says more ("Not Found (stream not found)"). */
void dy_nats_reason(natsStatus s, char *out, size_t cap);
/* Ends an asynchronous subscription so that none of its callbacks runs after it returns (their
 * closure may go then): drained and waited for, up to timeout_s; if the connection cannot
 * drain (it is down), unsubscribed, which stops new deliveries. Then destroyed. NULL is fine;
 * *sub is set to NULL. */
void dy_nats_unsubscribe(natsSubscription **sub, double timeout_s);
#endif

#endif
