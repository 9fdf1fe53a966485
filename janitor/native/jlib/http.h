/*
 * jlib/http.h: HTTP/1.1 to the janitor daemon on its Unix socket (see buf.h for jlib).
 *
 * One request, one answer, on a connection of its own, every step under one deadline: no
 * wait is unbounded. The answer is taken whole (Content-Length, or to the end of the
 * connection; chunks are refused) and at most HTTP_MAX_ANSWER bytes. The lines put in `why`
 * when it fails speak of "the daemon", as the guard shows or logs them.
 */

#ifndef JLIB_HTTP_H
#define JLIB_HTTP_H

#include <signal.h>
#include <stdint.h>

#include "buf.h"

/* The most connecting may take, and the largest answer read. */
#define HTTP_CONNECT_MS 2000
#define HTTP_MAX_ANSWER (1 << 20)

struct http_answer {
    int status;
    struct buf body;
};

/* A connected socket (non-blocking, close-on-exec, no SIGPIPE), or -1 with `why` set. */
int http_connect(const char *socket_path, int64_t deadline, struct buf *why);
/* Send all of `data` by the deadline: 0, or -1 with errno. */
int http_send_all(int fd, const char *data, size_t len, int64_t deadline);
/* Append a request with a JSON body (none when NULL) to `req`. */
void http_request_text(struct buf *req, const char *method, const char *url, const char *body,
                       int close_after);
/* `s` escaped for a URL's path (RFC 3986's unreserved characters kept). */
void http_url_escape(struct buf *b, const char *s);
/* When set, and what it points to turns non-zero (a signal handler sets it), a wait for the
 * daemon gives up: the call fails as if it timed out. A signal that comes just before the wait
 * blocks is not lost when http_cancel_fd is the read end of the handler's self-pipe (the wait
 * also wakes when it turns readable); without one, only a signal during the wait ends it. */
extern volatile sig_atomic_t *http_cancel;
extern int http_cancel_fd;
/* One request, one answer, within timeout_ms. 0 with `ans` filled (its body to be freed), or
 * -1 with `why` set (no daemon, a broken or late answer). */
int http_call(const char *socket_path, const char *method, const char *url, const char *body,
              int timeout_ms, struct http_answer *ans, struct buf *why);

#endif
