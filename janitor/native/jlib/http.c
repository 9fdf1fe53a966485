/* jlib/http.c: one HTTP/1.1 request to the daemon on its Unix socket (see http.h). */

#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"

static int set_flags(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return -1;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return -1;
#ifdef SO_NOSIGPIPE
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one) != 0) return -1;
#endif
    return 0;
}

#ifdef MSG_NOSIGNAL
#define SEND_FLAGS MSG_NOSIGNAL
#else
#define SEND_FLAGS 0
#endif

volatile sig_atomic_t *http_cancel;
int http_cancel_fd = -1;

static int cancelled(void) { return http_cancel != NULL && *http_cancel; }

/* Wait until fd is ready for `events` or the deadline passes: 1 ready, 0 timed out (or
 * cancelled by a signal: http_cancel, checked before each wait and woken by http_cancel_fd,
 * so a signal between the check and the poll is not slept through). */
static int wait_fd(int fd, short events, int64_t deadline) {
    for (;;) {
        if (cancelled()) return 0;
        int64_t left = deadline - now_ms();
        if (left <= 0) return 0;
        struct pollfd pfd[2] = {{fd, events, 0}, {http_cancel_fd, POLLIN, 0}};
        nfds_t n = http_cancel != NULL && http_cancel_fd >= 0 ? 2 : 1;
        int r = poll(pfd, n, left > INT_MAX ? INT_MAX : (int)left);
        if (r > 0 && pfd[0].revents) return 1;
        if (r < 0 && errno != EINTR) return -1;
        if (r > 0 && !cancelled()) { /* another signal's byte: drained (the pipe is non-blocking) */
            char drain[64];
            while (read(http_cancel_fd, drain, sizeof drain) > 0) {}
        }
    }
}

/* A connected socket, or -1 with `why` set. */
int http_connect(const char *socket_path, int64_t deadline, struct buf *why) {
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (socket_path == NULL || strlen(socket_path) >= sizeof sa.sun_path) {
        buf_fmt(why, "no daemon socket (%s)", socket_path ? "its path is too long" : "not set");
        return -1;
    }
    strcpy(sa.sun_path, socket_path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || set_flags(fd) != 0) {
        buf_fmt(why, "cannot open a socket: %s", strerror(errno));
        if (fd >= 0) (void)close(fd);
        return -1;
    }
    for (;;) {
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
        if (errno == EINTR) continue;
        if (errno == EAGAIN && now_ms() < deadline) { sleep_ms(5); continue; } /* backlog full */
        if (errno == EINPROGRESS) {
            int err = 0;
            socklen_t len = sizeof err;
            if (wait_fd(fd, POLLOUT, deadline) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
                return fd;
            errno = err ? err : ETIMEDOUT;
        }
        buf_fmt(why, "no daemon answers at %s (%s)", socket_path, strerror(errno));
        (void)close(fd);
        return -1;
    }
}

int http_send_all(int fd, const char *data, size_t len, int64_t deadline) {
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, data + off, len - off, SEND_FLAGS);
        if (n > 0) { off += (size_t)n; continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT, deadline) != 1) return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

void http_request_text(struct buf *req, const char *method, const char *url, const char *body,
                         int close_after) {
    size_t blen = body ? strlen(body) : 0;
    buf_fmt(req,
            "%s %s HTTP/1.1\r\nhost: janitor\r\ncontent-type: application/json\r\n"
            "content-length: %zu\r\n%s\r\n",
            method, url, blen, close_after ? "connection: close\r\n" : "");
    if (body) buf_add(req, body, blen);
}

/* Case-insensitive prefix match of a header line. */
static int header_is(const char *line, const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < n; i++) {
        char c = line[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != name[i]) return 0;
    }
    return 1;
}

/* One request, one answer, on a connection of its own. 0 with `ans` filled, or -1 with `why`
 * set (no daemon, a broken or late answer). */
int http_call(const char *socket_path, const char *method, const char *url, const char *body,
              int timeout_ms, struct http_answer *ans, struct buf *why) {
    int64_t deadline = now_ms() + timeout_ms;
    memset(ans, 0, sizeof *ans);
    int64_t connect_by = now_ms() + (timeout_ms < HTTP_CONNECT_MS ? timeout_ms : HTTP_CONNECT_MS);
    int fd = http_connect(socket_path, connect_by, why);
    if (fd < 0) return -1;
    struct buf req = {0}, in = {0};
    http_request_text(&req, method, url, body, 1);
    int rc = -1;
    if (req.failed || http_send_all(fd, req.p, req.len, deadline) != 0) {
        buf_fmt(why, "cannot send to the daemon at %s (%s)", socket_path, strerror(errno));
        goto out;
    }
    size_t head = 0, want = 0;
    int have_length = 0;
    for (;;) {
        char chunk[65536];
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int ready = wait_fd(fd, POLLIN, deadline);
            if (ready == 1) continue;
            buf_fmt(why, "the daemon at %s did not answer within %d s", socket_path,
                    timeout_ms / 1000);
            goto out;
        }
        if (n < 0) {
            buf_fmt(why, "reading the daemon's answer: %s", strerror(errno));
            goto out;
        }
        if (n > 0) buf_add(&in, chunk, (size_t)n);
        if (in.failed || in.len > HTTP_MAX_ANSWER) {
            buf_str(why, "the daemon's answer is too large");
            goto out;
        }
        if (head == 0 && in.len > 0) {
            char *sep = (char *)mem_find(in.p, in.len, "\r\n\r\n");
            if (sep != NULL) {
                head = (size_t)(sep - in.p) + 4;
                *sep = '\0';
                if (memchr(in.p, '\0', (size_t)(sep - in.p)) != NULL) {
                    buf_str(why, "the daemon answered something that is not HTTP");
                    goto out;
                }
                int status = 0;
                if (sscanf(in.p, "HTTP/1.%*1d %3d", &status) != 1 || status < 100 ||
                    status > 599) {
                    buf_str(why, "the daemon answered something that is not HTTP");
                    goto out;
                }
                ans->status = status;
                for (char *line = strstr(in.p, "\r\n"); line != NULL;
                     line = strstr(line + 2, "\r\n")) {
                    const char *h = line + 2;
                    if (header_is(h, "content-length:")) {
                        char *stop;
                        unsigned long long v = strtoull(h + 15, &stop, 10);
                        if (v > HTTP_MAX_ANSWER) {
                            buf_str(why, "the daemon's answer is too large");
                            goto out;
                        }
                        want = (size_t)v;
                        have_length = 1;
                    } else if (header_is(h, "transfer-encoding:")) {
                        buf_str(why, "the daemon answered in chunks");
                        goto out;
                    }
                }
                *sep = '\r';
            }
        }
        if (head != 0 && have_length && in.len >= head + want) break;
        if (n == 0) {
            if (head != 0 && !have_length) { want = in.len - head; break; }
            buf_fmt(why, "the daemon at %s closed the connection mid-answer", socket_path);
            goto out;
        }
    }
    buf_add(&ans->body, in.p + head, want);
    if (ans->body.failed) { buf_str(why, "out of memory"); goto out; }
    rc = 0;
out:
    (void)close(fd);
    buf_free(&req);
    buf_free(&in);
    if (rc != 0) buf_free(&ans->body);
    return rc;
}

void http_url_escape(struct buf *b, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p))
            buf_add(b, (const char *)p, 1);
        else
            buf_fmt(b, "%%%02X", *p);
    }
}
