/* test_cluster_nats.c — the worker registry and the NATS connection (serve/cluster/) against a
 * real nats-server with JetStream, which the test starts itself on a free loopback port with
 * a scratch store: an entry put is seen by a watch with every field, listed with a fresh write
 * time, and seen GONE once deleted; an entry among a new watch's initial values carries its
 * age from the server's timestamp; a value that does not decode (or a key that is not a
 * worker's) makes the watch report -1 naming the key, and the watch goes on; `dyad cluster
 * status` lists the entries, marks an old one EXPIRED and counts them in --json; connecting
 * to a closed port fails within the timeout naming the URL; and a connection lives through a
 * restart of the server, its owner told of the disconnect and the reconnect.
 *
 * Without nats-server (or in a build without libnats) it says so and exits 77, which ctest
 * reports as skipped, unless DYAD_REQUIRE_TOOLS is set (scripts/test.sh): then it fails. */
#include "testutil.h"
#include "serve/cluster/nats_conn.h"
#include "serve/cluster/registry.h"
#include "serve/wire/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int unavailable(const char *why)
{
    if (getenv("DYAD_REQUIRE_TOOLS")) {
        printf("FAIL: %s (DYAD_REQUIRE_TOOLS is set: run scripts/install-deps.sh)\n", why);
        return 1;
    }
    printf("SKIP: %s\n", why);
    return 77;
}

#ifndef DYAD_HAVE_NATS
int main(void)
{
    return unavailable("dyad was built without NATS (libnats-dev)");
}
#else
#include "util/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    char exe[4096]; /* nats-server */
    pid_t pid;
    int port;
    char dir[64];
    char url[64];
} server;

/* A loopback port nothing listens on now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static bool port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Debian installs nats-server in /usr/sbin, which a user's PATH often lacks. */
static bool find_nats_server(char path[4096])
{
    const char *env = getenv("PATH");
    char dirs[8192];
    snprintf(dirs, sizeof dirs, "%s:/usr/sbin:/usr/local/sbin", env ? env : "");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(path, 4096, "%s/nats-server", d);
        if (access(path, X_OK) == 0)
            return true;
    }
    return false;
}

/* Starts nats-server -js on s->port with its store in s->dir; waits until it listens. */
static void start_server(server *s)
{
    char port[16], log[96];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(log, sizeof log, "%s/nats-server.log", s->dir);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        FILE *f = freopen(log, "a", stdout);
        if (f && dup2(fileno(f), STDERR_FILENO) >= 0)
            execl(s->exe, "nats-server", "-js", "-a", "127.0.0.1", "-p", port, "-sd", s->dir,
                  (char *)NULL);
        _exit(127);
    }
    for (double until = dy_now() + 15; !port_open(s->port); usleep(20000))
        if (dy_now() > until || waitpid(s->pid, NULL, WNOHANG) == s->pid)
            fail_msg("nats-server did not start on port %d (see %s)", s->port, log);
}

static void stop_server(server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
}

static int setup(void **state)
{
    server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_true(find_nats_server(s->exe));
    strcpy(s->dir, "/tmp/dyad-test-nats-XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    s->port = free_port();
    snprintf(s->url, sizeof s->url, "nats://127.0.0.1:%d", s->port);
    start_server(s);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    server *s = *state;
    stop_server(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s->dir);
    free(s);
    return 0;
}

static natsConnection *connect_to(const char *url, double timeout_s)
{
    char err[512] = "";
    dy_nats_opts o = {.url = url, .name = "test_cluster_nats", .who = "test_cluster_nats",
                      .timeout_s = timeout_s};
    natsConnection *nc = dy_nats_connect(&o, err, sizeof err);
    if (!nc)
        fail_msg("%s", err);
    return nc;
}

/* The registry, emptied: each test starts from no entries, whatever an earlier one left. */
static kvStore *open_registry(natsConnection *nc)
{
    char err[512] = "";
    kvStore *kv = dy_reg_open(nc, 60, err, sizeof err);
    if (!kv)
        fail_msg("%s", err);
    int n = 0;
    dy_reg_item *items = dy_reg_list(kv, 5, &n, err, sizeof err);
    if (!items)
        fail_msg("%s", err);
    for (int i = 0; i < n; i++)
        assert_int_equal(kvStore_Delete(kv, items[i].key), NATS_OK);
    free(items);
    return kv;
}

/* A test's connection, its registry (emptied) and, once started, a watch of it. */
typedef struct {
    natsConnection *nc;
    kvStore *kv;
    dy_reg_watch *w;
} session;

static session open_session(const server *s)
{
    session x = {.nc = connect_to(s->url, 5)};
    x.kv = open_registry(x.nc);
    return x;
}

static dy_reg_watch *start_watch(session *x)
{
    char err[512] = "";
    x->w = dy_reg_watch_start(x->kv, err, sizeof err);
    if (!x->w)
        fail_msg("%s", err);
    return x->w;
}

static void close_session(session *x)
{
    dy_reg_watch_stop(x->w);
    kvStore_Destroy(x->kv);
    dy_nats_close(x->nc);
}

static dy_reg_entry entry(uint32_t id, int role, double lease_s)
{
    dy_reg_entry e = {.id = id, .pid = 1000 + (id & 0xff), .role = role,
                      .fingerprint = 0x0123456789abcdefull, .block_size = 16,
                      .kv_blocks = 512, .threads = 2, .lease_s = lease_s,
                      .load = {.running = 3, .waiting = 1, .kv_used = 40, .kv_total = 512}};
    strcpy(e.incarnation, "c0ffee");
    strcpy(e.host, "hostA");
    strcpy(e.model, "stories260K.bin");
    if (role != DY_ROLE_PREFILL) {
        strcpy(e.kv_addr, "127.0.0.1:39211");
        e.kv_transfer = DY_XFER_TCP;
    }
    return e;
}

static void put(kvStore *kv, const dy_reg_entry *e)
{
    char err[512] = "";
    if (!dy_reg_put(kv, e, err, sizeof err))
        fail_msg("%s", err);
}

static void delete(kvStore *kv, uint32_t id)
{
    char err[512] = "";
    if (!dy_reg_delete(kv, id, err, sizeof err))
        fail_msg("%s", err);
}

/* The next change of w within 5 s; fails the test on an error or nothing. */
static dy_reg_change next_change(dy_reg_watch *w, uint32_t *id, dy_reg_entry *e)
{
    char err[512] = "";
    dy_reg_change kind = 0;
    int rc = dy_reg_watch_next(w, 5, &kind, id, e, err, sizeof err);
    if (rc != 1)
        fail_msg("watch_next: %d (%s)", rc, err);
    return kind;
}

static const dy_reg_item *find(const dy_reg_item *items, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(items[i].key, key))
            return &items[i];
    return NULL;
}

static void test_put_watch_list_delete(void **state)
{
    server *s = *state;
    session x = open_session(s);
    kvStore *kv = x.kv;
    char err[512] = "";
    dy_reg_watch *w = start_watch(&x);
    dy_reg_entry e = entry(0x1234abcd, DY_ROLE_DECODE, 3), got;
    e.draining = true;
    put(kv, &e);
    uint32_t id = 0;
    assert_int_equal(next_change(w, &id, &got), DY_REG_PUT);
    assert_true(dy_reg_watch_synced(w)); /* the bucket's initial values came before */
    assert_int_equal(id, e.id);
    assert_int_equal(got.id, e.id);
    assert_string_equal(got.host, e.host);
    assert_string_equal(got.kv_addr, e.kv_addr);
    assert_int_equal(got.role, DY_ROLE_DECODE);
    assert_true(got.fingerprint == e.fingerprint);
    assert_true(got.draining);
    assert_int_equal(got.load.kv_used, 40);
    assert_true(dy_reg_watch_age(w) < 2);

    int n = 0;
    dy_reg_item *items = dy_reg_list(kv, 5, &n, err, sizeof err);
    assert_non_null(items);
    const dy_reg_item *it = find(items, n, "w1234abcd");
    assert_non_null(it);
    assert_true(it->ok);
    assert_int_equal(it->e.pid, e.pid);
    assert_true(it->age_s >= 0 && it->age_s < 2);
    free(items);

    delete(kv, e.id);
    id = 0;
    assert_int_equal(next_change(w, &id, &got), DY_REG_GONE);
    assert_int_equal(id, e.id);
    items = dy_reg_list(kv, 5, &n, err, sizeof err);
    assert_non_null(items);
    assert_null(find(items, n, "w1234abcd")); /* deleted entries are not listed */
    free(items);
    /* nothing more: a quiet watch times out with 0 */
    dy_reg_change kind;
    assert_int_equal(dy_reg_watch_next(w, 0.2, &kind, &id, &got, err, sizeof err), 0);
    close_session(&x);
}

/* An entry written before the watch started comes with its age, not the time it arrived. */
static void test_initial_values_carry_their_age(void **state)
{
    server *s = *state;
    session x = open_session(s);
    kvStore *kv = x.kv;
    dy_reg_entry e = entry(0x00a9e001, DY_ROLE_PREFILL, 1), got;
    put(kv, &e);
    usleep(1200 * 1000);
    dy_reg_watch *w = start_watch(&x);
    uint32_t id = 0;
    assert_int_equal(next_change(w, &id, &got), DY_REG_PUT);
    assert_int_equal(id, e.id);
    assert_false(dy_reg_watch_synced(w)); /* it was one of the initial values */
    double age = dy_reg_watch_age(w);
    if (!(age >= 1.0 && age < 5))
        fail_msg("age %g s, not about 1.2 s", age);
    delete(kv, e.id);
    close_session(&x);
}

static void test_undecodable_values(void **state)
{
    server *s = *state;
    session x = open_session(s);
    kvStore *kv = x.kv;
    char err[512] = "";
    dy_reg_watch *w = start_watch(&x);
    uint64_t rev;
    dy_reg_change kind;
    uint32_t id;
    dy_reg_entry got, e = entry(0x0000beef, DY_ROLE_AGG, 3);
    /* not JSON, another id than its key's, a key that is not a worker's */
    assert_int_equal(kvStore_PutString(&rev, kv, "w0000beef", "{bad"), NATS_OK);
    assert_int_equal(dy_reg_watch_next(w, 5, &kind, &id, &got, err, sizeof err), -1);
    assert_non_null(strstr(err, "w0000beef: value: not JSON"));
    char value[DY_REG_MAX_VALUE + 1];
    e.id = 0x0000beee;
    assert_true(dy_reg_encode(&e, value, sizeof value) > 0);
    assert_int_equal(kvStore_PutString(&rev, kv, "w0000beef", value), NATS_OK);
    assert_int_equal(dy_reg_watch_next(w, 5, &kind, &id, &got, err, sizeof err), -1);
    assert_non_null(strstr(err, "w0000beef: id:"));
    assert_int_equal(kvStore_PutString(&rev, kv, "config", "{}"), NATS_OK);
    assert_int_equal(dy_reg_watch_next(w, 5, &kind, &id, &got, err, sizeof err), -1);
    assert_non_null(strstr(err, "config: not a worker's key"));
    /* the watch goes on */
    e.id = 0x0000beef;
    put(kv, &e);
    assert_int_equal(next_change(w, &id, &got), DY_REG_PUT);
    assert_int_equal(got.role, DY_ROLE_AGG);
    /* a list shows the bad one with its reason */
    assert_int_equal(kvStore_PutString(&rev, kv, "w0000bad0", "[]"), NATS_OK);
    int n = 0;
    dy_reg_item *items = dy_reg_list(kv, 5, &n, err, sizeof err);
    assert_non_null(items);
    const dy_reg_item *bad = find(items, n, "w0000bad0");
    assert_non_null(bad);
    assert_false(bad->ok);
    assert_non_null(strstr(bad->why, "must be a JSON object"));
    assert_non_null(find(items, n, "w0000beef"));
    assert_true(find(items, n, "w0000beef")->ok);
    free(items);
    assert_int_equal(kvStore_Delete(kv, "w0000bad0"), NATS_OK);
    assert_int_equal(kvStore_Delete(kv, "config"), NATS_OK);
    delete(kv, e.id);
    close_session(&x);
}

/* `dyad cluster status ARGS` (this build's); its stdout (free()) and exit status. */
static char *run_status(const char *url, const char *extra, int *rc)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/dyad' cluster status --cluster %s %s", DYAD_BINARY_DIR, url,
             extra);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    for (size_t got; (got = fread(out + len, 1, cap - 1 - len, p)) > 0;)
        len += got;
    int status = pclose(p);
    *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

static void test_status_lists_workers(void **state)
{
    server *s = *state;
    session x = open_session(s);
    kvStore *kv = x.kv;
    dy_reg_entry d = entry(0x0d0d0001, DY_ROLE_DECODE, 30);
    dy_reg_entry p = entry(0x0b0b0002, DY_ROLE_PREFILL, 0.2); /* expires at once */
    put(kv, &d);
    put(kv, &p);
    usleep(400 * 1000);
    int rc = -1;
    char *out = run_status(s->url, "", &rc);
    assert_int_equal(rc, 0);
    const char *line = strstr(out, "0d0d0001  decode ");
    if (!line || !strstr(out, "0b0b0002  prefill"))
        fail_msg("the workers are not listed:\n%s", out);
    assert_non_null(strstr(line, "hostA pid 1001  stories260K.bin  block 16  kv "
                                 "127.0.0.1:39211 tcp  threads 2  renewed "));
    assert_non_null(strstr(line, "running 3 waiting 1  kv blocks 40/512"));
    assert_non_null(strstr(strstr(out, "0b0b0002"), "kv -  threads 2  EXPIRED "));
    if (!strstr(out, "2 workers: 1 prefill, 1 decode, 0 aggregated; 1 lease expired\n"))
        fail_msg("no summary line:\n%s", out);
    free(out);

    out = run_status(s->url, "--json", &rc);
    assert_int_equal(rc, 0);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    if (!doc)
        fail_msg("--json: %s:\n%s", je.text, out);
    json_t *counts = json_object_get(doc, "counts");
    assert_int_equal(json_integer_value(json_object_get(counts, "workers")), 2);
    assert_int_equal(json_integer_value(json_object_get(counts, "expired")), 1);
    json_t *workers = json_object_get(doc, "workers");
    assert_int_equal(json_array_size(workers), 2);
    json_t *first = json_array_get(workers, 0); /* key order: w0b0b0002 first */
    assert_string_equal(json_string_value(json_object_get(first, "role")), "prefill");
    assert_true(json_is_true(json_object_get(first, "lease_expired")));
    assert_string_equal(json_string_value(json_object_get(first, "fingerprint")),
                        "0123456789abcdef");
    json_decref(doc);
    free(out);
    delete(kv, d.id);
    delete(kv, p.id);
    close_session(&x);
}

static void test_closed_port_fails_in_time(void **state)
{
    (void)state;
    char url[64], err[512] = "";
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", free_port());
    dy_nats_opts o = {.url = url, .who = "test_cluster_nats (a closed port, on purpose)",
                      .timeout_s = 1};
    double t0 = dy_now();
    assert_null(dy_nats_connect(&o, err, sizeof err));
    double took = dy_now() - t0;
    if (!(took >= 0.9 && took < 2.5))
        fail_msg("gave up after %g s, not about 1 s", took);
    assert_non_null(strstr(err, url));
    o.timeout_s = 0; /* one try */
    t0 = dy_now();
    assert_null(dy_nats_connect(&o, err, sizeof err));
    assert_true(dy_now() - t0 < 1);
    o.url = "nats:/127.0.0.1";
    assert_null(dy_nats_connect(&o, err, sizeof err));
    assert_non_null(strstr(err, "must be nats://HOST:PORT"));
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int downs, ups;
} changes;

static void on_change(void *ctx, bool up)
{
    changes *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (up)
        c->ups++;
    else
        c->downs++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Waits up to 15 s until *count is at least 1. */
static bool wait_for(changes *c, int *count)
{
    double until = dy_now() + 15;
    pthread_mutex_lock(&c->mu);
    while (*count < 1 && dy_now() < until)
        dy_cond_wait_until(&c->cv, &c->mu, until);
    bool ok = *count >= 1;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* Last: it restarts the server. */
static void test_reconnects_after_a_restart(void **state)
{
    server *s = *state;
    /* static: the client may still be finishing a callback as the test returns */
    static changes c = {.mu = PTHREAD_MUTEX_INITIALIZER};
    assert_int_equal(dy_cond_init(&c.cv), 0);
    char err[512] = "";
    dy_nats_opts o = {.url = s->url, .name = "test_cluster_nats", .who = "test_cluster_nats",
                      .timeout_s = 5, .on_change = on_change, .ctx = &c};
    natsConnection *nc = dy_nats_connect(&o, err, sizeof err);
    assert_non_null(nc);
    kvStore *kv = open_registry(nc);
    dy_reg_watch *w = dy_reg_watch_start(kv, err, sizeof err);
    assert_non_null(w);
    stop_server(s);
    assert_true(wait_for(&c, &c.downs));
    start_server(s);
    assert_true(wait_for(&c, &c.ups));
    /* the bucket lived through it (file storage), and the same store works again */
    dy_reg_entry e = entry(0x00ee0001, DY_ROLE_AGG, 3);
    double until = dy_now() + 10;
    while (!dy_reg_put(kv, &e, err, sizeof err) && dy_now() < until)
        usleep(100 * 1000); /* JetStream may take a moment to come back */
    int n = 0;
    dy_reg_item *items = dy_reg_list(kv, 5, &n, err, sizeof err);
    if (!items)
        fail_msg("%s", err);
    assert_non_null(find(items, n, "w00ee0001"));
    free(items);
    /* a watch started before the restart goes on: a frontend keeps seeing its workers */
    uint32_t id = 0;
    dy_reg_entry got;
    dy_reg_change kind = 0;
    int rc = 0;
    for (until = dy_now() + 10; rc == 0 && dy_now() < until;)
        rc = dy_reg_watch_next(w, 1, &kind, &id, &got, err, sizeof err);
    if (rc != 1 || kind != DY_REG_PUT || id != e.id)
        fail_msg("the watch after a restart: %d, kind %d, id %08x (%s)", rc, (int)kind,
                 (unsigned)id, err);
    dy_reg_watch_stop(w);
    kvStore_Destroy(kv);
    dy_nats_close(nc);
    pthread_mutex_lock(&c.mu);
    assert_int_equal(c.downs, 1); /* the close itself is not reported */
    assert_int_equal(c.ups, 1);
    pthread_mutex_unlock(&c.mu);
}

int main(void)
{
    char exe[4096];
    if (!find_nats_server(exe))
        return unavailable("nats-server is not installed");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_watch_list_delete),
        cmocka_unit_test(test_initial_values_carry_their_age),
        cmocka_unit_test(test_undecodable_values),
        cmocka_unit_test(test_status_lists_workers),
        cmocka_unit_test(test_closed_port_fails_in_time),
        cmocka_unit_test(test_reconnects_after_a_restart),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    nats_Close();
    return rc;
}
#endif
