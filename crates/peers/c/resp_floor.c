/*
 * The floor under every RESP server: the least one can do per request on
 * this kernel. One thread, level-triggered epoll, one recv per readable
 * connection and one send of canned replies: no keyspace, no parser
 * beyond the request's shape and its command's first letter. GET gets a
 * 3-byte value, SET "+OK", INCR ":1", anything else (redis-benchmark's
 * CONFIG GET) an empty array.
 *
 * Valid only where every read holds whole requests, as without pipelining
 * (redis-benchmark -P 1) with small requests over loopback: the floor
 * keeps nothing between reads, so a request split across reads goes
 * unanswered or is answered out of step. What a real server spends beyond
 * this floor is its own; what the floor spends is the kernel's (syscalls,
 * TCP over loopback, sleeping and waking).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

enum { MAX_EVENTS = 512, READ_SIZE = 16 * 1024, OUT_SIZE = 64 * 1024 };

static int fail(const char **failed, const char *call) {
    int err = errno;
    *failed = call;
    return -err;
}

/* The number in a "*N\r\n" or "$N\r\n" line at p (bounded by end): past
 * the line, or NULL. At most 9 digits, so *n can neither overflow nor
 * reach past any buffer a length is checked against. */
static const char *number(const char *p, const char *end, long *n) {
    const char *start = p;
    *n = 0;
    while (p < end && *p >= '0' && *p <= '9' && p - start < 9)
        *n = *n * 10 + (*p++ - '0');
    return p > start && end - p >= 2 && p[0] == '\r' && p[1] == '\n' ? p + 2 : NULL;
}

/* The canned reply for the command whose name starts at name. */
static const char *reply_for(char first, size_t *len) {
    static const char get[] = "$3\r\nxxx\r\n", set[] = "+OK\r\n", incr[] = ":1\r\n", other[] = "*0\r\n";
    const char *r;
    switch (first | 0x20) { /* ASCII lower case */
    case 'g': r = get; *len = sizeof get - 1; break;
    case 's': r = set; *len = sizeof set - 1; break;
    case 'i': r = incr; *len = sizeof incr - 1; break;
    default: r = other; *len = sizeof other - 1; break;
    }
    return r;
}

/* Canned replies for the whole multibulk requests in in[0..n] into out; their length. */
static size_t answer(const char *in, size_t n, char *out) {
    const char *p = in, *end = in + n;
    size_t o = 0;
    while (p < end && *p == '*' && o + 16 <= OUT_SIZE) {
        long args, len;
        const char *q = number(p + 1, end, &args);
        if (!q || args < 1 || q >= end || *q != '$')
            break;
        const char *name = number(q + 1, end, &len);
        if (!name || name >= end)
            break;
        size_t rlen;
        const char *r = reply_for(*name, &rlen);
        memcpy(out + o, r, rlen);
        o += rlen;
        /* Skip the request's arguments: each "$len\r\n" then len bytes and "\r\n". */
        p = q;
        for (long i = 0; i < args && p && p < end && *p == '$'; i++) {
            const char *body = number(p + 1, end, &len);
            p = body && end - body >= len + 2 ? body + len + 2 : NULL;
        }
        if (!p)
            break;
    }
    return o;
}

int c_resp_floor_open(int listen_fd, const char **failed) {
    int flags = fcntl(listen_fd, F_GETFL);
    if (flags < 0 || fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return fail(failed, "fcntl(O_NONBLOCK)");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return fail(failed, "epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listen_fd};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &ev) < 0) {
        int r = fail(failed, "epoll_ctl(ADD listener)");
        close(ep);
        return r;
    }
    return ep;
}

int c_resp_floor_serve(int ep, int listen_fd, const char **failed) {
    static char in[READ_SIZE], out[OUT_SIZE];
    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return fail(failed, "epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == listen_fd) {
                for (;;) {
                    int c = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (c < 0) {
                        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                            break;
                        return fail(failed, "accept4");
                    }
                    struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &e) < 0)
                        close(c);
                }
                continue;
            }
            ssize_t r = recv(fd, in, sizeof in, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r <= 0) {
                close(fd); /* also leaves the epoll set: its only descriptor */
                continue;
            }
            size_t o = answer(in, (size_t)r, out);
            /* Small replies into an empty socket buffer: a short send would
             * mean a client that stopped reading; the floor drops it. */
            if (o && send(fd, out, o, MSG_NOSIGNAL) != (ssize_t)o)
                close(fd);
        }
    }
}
