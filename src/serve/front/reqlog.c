/* reqlog.c — see reqlog.h. */
#include "serve/front/reqlog.h"
#include "serve/front/json.h"
#include "util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dy_reqlog {
    FILE *f;           /* stderr, or a file opened here */
    pthread_mutex_t mu;
};

dy_reqlog *dy_reqlog_open(const char *path, char *err, size_t errlen)
{
    dy_reqlog *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (!strcmp(path, "-"))
        l->f = stderr;
    else
        l->f = fopen(path, "ae");
    if (!l->f) {
        snprintf(err, errlen, "--request-log '%s': %s", path, strerror(errno));
        free(l);
        return NULL;
    }
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

void dy_reqlog_close(dy_reqlog *l)
{
    if (!l)
        return;
    if (l->f != stderr)
        fclose(l->f);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* "2026-11-29T14:05:09.123Z" */
static void utc_now(char *buf, size_t len)
{
    double now = dy_wall_now();
    time_t sec = (time_t)now;
    int ms = (int)((now - (double)sec) * 1e3);
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03dZ", ms > 999 ? 999 : ms);
}

void dy_reqlog_write(dy_reqlog *l, json_t *entry)
{
    if (!l || !entry) {
        json_decref(entry);
        return;
    }
    char when[40];
    utc_now(when, sizeof when);
    /* "time" first: build the line as {"time": ..., then the entry's fields}. A line that
     * cannot be built whole is not written. */
    dy_jb b = {0};
    json_t *line = json_object();
    dy_jb_set(&b, line, "time", json_string(when));
    if (json_object_update(line, entry) != 0)
        b.failed = true;
    json_decref(entry);
    char *text = dy_jb_dump(&b, line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (!text)
        return;
    pthread_mutex_lock(&l->mu);
    fputs(text, l->f);
    fputc('\n', l->f);
    fflush(l->f);
    pthread_mutex_unlock(&l->mu);
    free(text);
}
