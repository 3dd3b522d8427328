/*
 * The floor under every RESP server: the least one can do per request on
 * this kernel. One thread, level-triggered epoll, one recv per readable
 * connection and one send of canned replies: no keyspace, no parser
 * beyond the request's shape and its command's first letter. GET gets a
 * 3-byte value, SET "+OK", INCR ":1", anything else (redis-benchmark's
 * CONFIG GET) an empty array.
 *
 * A request split across reads (pipelined batches can be) is kept until
 * the rest arrives, up to CARRY_SIZE bytes a connection; a request that
 * is not RESP's multibulk shape closes its connection. What a real
 * server spends beyond this floor is its own; what the floor spends is
 * the kernel's (syscalls, TCP over loopback, sleeping and waking).
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

#include "floor.h"

/* OUT_SIZE holds the replies to a full buffer (CARRY_SIZE + READ_SIZE
 * bytes) of the shortest requests ("*1\r\n$1\r\nx\r\n", 11 bytes, 9-byte
 * replies at most: 14,243 bytes). CARRY_SIZE
 * bytes of an unfinished request are kept for each of MAX_FDS
 * descriptors: far more than redis-benchmark's requests. */
enum {
    MAX_EVENTS = 512,
    READ_SIZE = 16 * 1024,
    OUT_SIZE = 16 * 1024,
    CARRY_SIZE = 1024,
    MAX_FDS = 4096,
};

/* What parsing a request (or one of its lines) found. */
enum parsed { WHOLE, PARTIAL, BAD };

/* The number in a "*N\r\n" or "$N\r\n" line at p (bounded by end), into
 * *n, with *next past the line. At most 9 digits, so *n can neither
 * overflow nor reach past any buffer a length is checked against. */
static enum parsed number(const char *p, const char *end, long *n, const char **next) {
    const char *start = p;
    *n = 0;
    while (p < end && *p >= '0' && *p <= '9' && p - start < 9)
        *n = *n * 10 + (*p++ - '0');
    if (end - p < 2)
        return p == end || *p == '\r' ? PARTIAL : BAD;
    if (p == start || p[0] != '\r' || p[1] != '\n')
        return BAD;
    *next = p + 2;
    return WHOLE;
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

/* One request at in[0..n]: its canned reply into *reply and its length
 * into *used when it is whole. */
static enum parsed request(const char *in, const char *end, const char **reply, size_t *rlen, size_t *used) {
    long args, len;
    const char *p;
    if (in == end)
        return PARTIAL;
    if (*in != '*')
        return BAD;
    enum parsed got = number(in + 1, end, &args, &p);
    if (got != WHOLE)
        return got;
    if (args < 1)
        return BAD;
    for (long i = 0; i < args; i++) {
        if (p == end)
            return PARTIAL;
        if (*p != '$')
            return BAD;
        const char *body;
        got = number(p + 1, end, &len, &body);
        if (got != WHOLE)
            return got;
        if (end - body < len + 2)
            return PARTIAL;
        if (body[len] != '\r' || body[len + 1] != '\n')
            return BAD;
        if (i == 0) {
            if (len < 1)
                return BAD;
            *reply = reply_for(*body, rlen);
        }
        p = body + len + 2;
    }
    *used = (size_t)(p - in);
    return WHOLE;
}

/* Canned replies for the whole requests in in[0..n] into out: their
 * length, with *used the bytes those requests took; -1 on a request
 * that is not RESP. */
static long answer(const char *in, size_t n, char *out, size_t *used) {
    const char *p = in, *end = in + n;
    size_t o = 0;
    for (;;) {
        const char *reply = NULL;
        size_t rlen = 0, took = 0;
        enum parsed got = request(p, end, &reply, &rlen, &took);
        if (got == BAD)
            return -1;
        if (got == PARTIAL || o + rlen > OUT_SIZE)
            break;
        memcpy(out + o, reply, rlen);
        o += rlen;
        p += took;
    }
    *used = (size_t)(p - in);
    return (long)o;
}

int c_resp_floor_open(int listen_fd, const char **failed) {
    int flags = fcntl(listen_fd, F_GETFL);
    if (flags < 0 || fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return floor_fail(failed, "fcntl(O_NONBLOCK)");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return floor_fail(failed, "epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listen_fd};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &ev) < 0) {
        int r = floor_fail(failed, "epoll_ctl(ADD listener)");
        close(ep);
        return r;
    }
    return ep;
}

int c_resp_floor_serve(int ep, int listen_fd, const char **failed) {
    static char in[CARRY_SIZE + READ_SIZE], out[OUT_SIZE];
    static char carry[MAX_FDS][CARRY_SIZE];
    static size_t carried[MAX_FDS];
    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = floor_wait(ep, events, MAX_EVENTS, failed);
        if (n < 0)
            return n;
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == listen_fd) {
                int r = floor_accept_all(ep, listen_fd, MAX_FDS, failed);
                if (r < 0)
                    return r;
                continue;
            }
            /* The unfinished request kept from the last read, then this one. */
            size_t kept = carried[fd];
            memcpy(in, carry[fd], kept);
            ssize_t r = recv(fd, in + kept, READ_SIZE, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            size_t used = 0;
            long o = r > 0 ? answer(in, kept + (size_t)r, out, &used) : -1;
            size_t left = r > 0 ? kept + (size_t)r - used : 0;
            /* Small replies into an empty socket buffer: a short send would
             * mean a client that stopped reading; the floor drops it, as it
             * drops one that closed or sent what is not RESP. */
            if (o < 0 || left > CARRY_SIZE || (o > 0 && send(fd, out, (size_t)o, MSG_NOSIGNAL) != o)) {
                carried[fd] = 0;
                close(fd); /* also leaves the epoll set: its only descriptor */
                continue;
            }
            memcpy(carry[fd], in + used, left);
            carried[fd] = left;
        }
    }
}
