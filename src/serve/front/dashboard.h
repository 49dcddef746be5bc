/* dashboard.h — the dashboard page (src/serve/front/dashboard.html, docs/dashboard.md),
 * embedded into the binary at build time by cmake/embed.cmake: one static HTML file with its
 * script and styles, served at GET /dashboard. It carries no data; its script reads
 * GET /v1/dyad/status. */
#ifndef DYAD_DASHBOARD_H
#define DYAD_DASHBOARD_H

#include <stddef.h>

extern const unsigned char dy_dashboard_html[]; /* NUL-terminated */
extern const size_t dy_dashboard_html_len;

#endif
