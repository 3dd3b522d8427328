/*
 * The floor under a pub/sub server's fan-out: the least a RESP server can
 * do per published message on this kernel. One thread, level-triggered
 * epoll. A connection's first command decides what it is:
 * - SUBSCRIBE ch: a subscriber (of every channel: the load has one), sent
 *   redis's confirmation;
 * - PUBLISH ch payload: a publisher. Each read (up to 256 KiB) is parsed
 *   whole: every complete PUBLISH gets `:N` (N subscribers) and its push
 *   (`*3 message ch payload`) is appended to one batch; then each
 *   subscriber gets the whole batch in one write, the publisher its
 *   replies in one write. Nothing else: no channel table, no patterns, no
 *   output buffering (a short write to a subscriber closes it), no limits.
 * - PUBSUB NUMSUB ch: `*2 ch N`, for the load's final count.
 * Valid where writes complete at once, as for subscribers that read as
 * fast as they can over loopback. What a server spends beyond it is its
 * own; what the floor spends is the kernel's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "floor.h"

enum { MAX_EVENTS = 256, READ_SIZE = 256 * 1024, MAX_FDS = 1 << 16, MAX_SUBS = 4096 };

enum role { NONE, SUBSCRIBER, PUBLISHER };

/* Each descriptor's role, and a publisher's unparsed input. */
static enum role role[MAX_FDS];
static char *pending[MAX_FDS];
static size_t pending_len[MAX_FDS];
static int subs[MAX_SUBS];
static int nsubs;

static void drop_conn(int fd) {
    if (role[fd] == SUBSCRIBER) {
        for (int i = 0; i < nsubs; i++) {
            if (subs[i] == fd) {
                subs[i] = subs[--nsubs];
                break;
            }
        }
    }
    role[fd] = NONE;
    free(pending[fd]);
    pending[fd] = NULL;
    pending_len[fd] = 0;
    close(fd);
}

/* One multibulk request at `p` (of `len` bytes): its argument count and
 * each argument's start and length; 0 while incomplete, -1 if malformed,
 * else the bytes it takes. */
static long parse(const char *p, size_t len, int *argc, const char **argv, size_t *argl, int max) {
    size_t at = 0;
    if (len < 1 || p[0] != '*')
        return len ? -1 : 0;
    char *end;
    const char *nl = memchr(p, '\n', len);
    if (!nl)
        return 0;
    long n = strtol(p + 1, &end, 10);
    if (n < 1 || n > max)
        return -1;
    at = (size_t)(nl - p) + 1;
    for (long i = 0; i < n; i++) {
        if (at >= len)
            return 0;
        if (p[at] != '$')
            return -1;
        nl = memchr(p + at, '\n', len - at);
        if (!nl)
            return 0;
        long l = strtol(p + at + 1, &end, 10);
        if (l < 0)
            return -1;
        at = (size_t)(nl - p) + 1;
        if (at + (size_t)l + 2 > len)
            return 0;
        argv[i] = p + at;
        argl[i] = (size_t)l;
        at += (size_t)l + 2;
    }
    *argc = (int)n;
    return (long)at;
}

static int eq(const char *a, size_t al, const char *b) {
    return al == strlen(b) && strncasecmp(a, b, al) == 0;
}

static int write_all(int fd, const char *b, size_t n) {
    return send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* Grows `*buf` to hold `need` more bytes after `*len`. */
static int reserve(char **buf, size_t *cap, size_t len, size_t need) {
    if (len + need <= *cap)
        return 1;
    size_t want = (len + need) * 2;
    char *grown = realloc(*buf, want);
    if (!grown)
        return 0;
    *buf = grown;
    *cap = want;
    return 1;
}

/* Parses everything `fd` sent so far; publishes go out in one batch. */
static void serve_input(int fd, char *in, size_t n) {
    static char *batch, *replies;
    static size_t batch_cap, replies_cap;
    size_t batch_len = 0, replies_len = 0;
    char *data = in;
    size_t len = n;
    if (pending_len[fd]) {
        char *joined = realloc(pending[fd], pending_len[fd] + n);
        if (!joined)
            return drop_conn(fd);
        memcpy(joined + pending_len[fd], in, n);
        pending[fd] = joined;
        data = joined;
        len = pending_len[fd] + n;
    }
    size_t at = 0;
    for (;;) {
        int argc = 0;
        const char *argv[3];
        size_t argl[3];
        long used = parse(data + at, len - at, &argc, argv, argl, 3);
        if (used == 0)
            break;
        if (used < 0)
            return drop_conn(fd);
        at += (size_t)used;
        char head[96];
        if (argc == 2 && eq(argv[0], argl[0], "SUBSCRIBE")) {
            if (role[fd] != SUBSCRIBER && nsubs < MAX_SUBS) {
                role[fd] = SUBSCRIBER;
                subs[nsubs++] = fd;
            }
            int h = snprintf(head, sizeof head, "*3\r\n$9\r\nsubscribe\r\n$%zu\r\n", argl[1]);
            if (!write_all(fd, head, (size_t)h) || !write_all(fd, argv[1], argl[1]) || !write_all(fd, "\r\n:1\r\n", 6))
                return drop_conn(fd);
        } else if (argc == 3 && eq(argv[0], argl[0], "PUBLISH")) {
            if (role[fd] != SUBSCRIBER) /* one stays in subs[] until dropped */
                role[fd] = PUBLISHER;
            int h = snprintf(head, sizeof head, "*3\r\n$7\r\nmessage\r\n$%zu\r\n", argl[1]);
            int t = 0;
            char tail[32];
            t = snprintf(tail, sizeof tail, "\r\n$%zu\r\n", argl[2]);
            if (!reserve(&batch, &batch_cap, batch_len, (size_t)h + argl[1] + (size_t)t + argl[2] + 2) ||
                !reserve(&replies, &replies_cap, replies_len, 32))
                return drop_conn(fd);
            memcpy(batch + batch_len, head, (size_t)h);
            batch_len += (size_t)h;
            memcpy(batch + batch_len, argv[1], argl[1]);
            batch_len += argl[1];
            memcpy(batch + batch_len, tail, (size_t)t);
            batch_len += (size_t)t;
            memcpy(batch + batch_len, argv[2], argl[2]);
            batch_len += argl[2];
            memcpy(batch + batch_len, "\r\n", 2);
            batch_len += 2;
            replies_len += (size_t)snprintf(replies + replies_len, 32, ":%d\r\n", nsubs);
        } else if (argc == 3 && eq(argv[0], argl[0], "PUBSUB")) {
            int h = snprintf(head, sizeof head, "*2\r\n$%zu\r\n", argl[2]);
            char count[32];
            int c = snprintf(count, sizeof count, "\r\n:%d\r\n", nsubs);
            if (!write_all(fd, head, (size_t)h) || !write_all(fd, argv[2], argl[2]) || !write_all(fd, count, (size_t)c))
                return drop_conn(fd);
        } else {
            return drop_conn(fd);
        }
    }
    /* One write for the publisher first, so that it publishes again while
     * the batch goes out (iomux's order too: the handler's replies are
     * queued before the pushes); then one write per subscriber. */
    if (replies_len && !write_all(fd, replies, replies_len)) {
        drop_conn(fd);
        fd = -1; /* the batch still goes out */
    }
    if (batch_len) {
        for (int i = 0; i < nsubs;) {
            int s = subs[i];
            if (!write_all(s, batch, batch_len))
                drop_conn(s); /* takes subs[i]'s place with the last one */
            else
                i++;
        }
    }
    if (fd < 0)
        return;
    /* Keep an incomplete request for the next read. */
    size_t rest = len - at;
    if (rest == 0) {
        free(pending[fd]);
        pending[fd] = NULL;
        pending_len[fd] = 0;
        return;
    }
    char *kept = malloc(rest);
    if (!kept)
        return drop_conn(fd);
    memcpy(kept, data + at, rest);
    free(pending[fd]);
    pending[fd] = kept;
    pending_len[fd] = rest;
}

/* Opened by resp_floor.c's c_resp_floor_open: the same non-blocking
 * listener in a new epoll set. */

int c_pubsub_floor_serve(int ep, int listen_fd, const char **failed) {
    static char in[READ_SIZE];
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
            ssize_t r = recv(fd, in, sizeof in, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r <= 0) {
                drop_conn(fd);
                continue;
            }
            serve_input(fd, in, (size_t)r);
        }
    }
}
