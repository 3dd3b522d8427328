/*
 * A plain C echo server, the classic shape: one thread, level-triggered
 * epoll, up to 512 events per epoll_wait, non-blocking sockets, accept
 * until EAGAIN, 64 KiB reads written straight back. After a short write
 * the connection keeps the unsent bytes, stops being read and waits for
 * EPOLLOUT; once they are out it is read again.
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

enum { MAX_EVENTS = 512, READ_SIZE = 64 * 1024 };

/* A connection, in a table indexed by its descriptor. */
struct conn {
    int open;
    /* The bytes a short write left, from off to len; NULL when none. */
    char *pending;
    size_t len, off;
};

struct table {
    struct conn *c;
    size_t cap;
};

/* Records the failing call; returns -errno (read before anything else can change it). */
static int fail(const char **failed, const char *call) {
    int err = errno;
    *failed = call;
    return -err;
}

/* The slot for fd, growing the table as descriptors grow; NULL when out of memory. */
static struct conn *slot(struct table *t, int fd) {
    if ((size_t)fd >= t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap <= (size_t)fd)
            cap *= 2;
        struct conn *c = realloc(t->c, cap * sizeof *c);
        if (!c)
            return NULL;
        memset(c + t->cap, 0, (cap - t->cap) * sizeof *c);
        t->c = c;
        t->cap = cap;
    }
    return &t->c[fd];
}

static void close_conn(struct table *t, int fd) {
    struct conn *c = &t->c[fd];
    free(c->pending);
    memset(c, 0, sizeof *c);
    /* Closing the only descriptor of the socket also removes it from epoll. */
    close(fd);
}

static int watch(int ep, int op, int fd, unsigned events, const char **failed) {
    struct epoll_event ev = {.events = events, .data.fd = fd};
    if (epoll_ctl(ep, op, fd, &ev) < 0)
        return fail(failed, op == EPOLL_CTL_ADD ? "epoll_ctl(ADD)" : "epoll_ctl(MOD)");
    return 0;
}

static int accept_all(int ep, int lfd, struct table *t, const char **failed) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            /* That connection died before it was accepted: take the next one. */
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            /* Out of descriptors or memory: stop rather than spin on a listener that stays readable. */
            return fail(failed, "accept4");
        }
        struct conn *c = slot(t, fd);
        if (!c) {
            close(fd);
            *failed = "realloc (connection table)";
            return -ENOMEM;
        }
        int err = watch(ep, EPOLL_CTL_ADD, fd, EPOLLIN, failed);
        if (err < 0) {
            close(fd);
            return err;
        }
        c->open = 1;
    }
}

/* One read and its echo. A connection's own failure closes it; only the server's stops the server. */
static int echo(int ep, int fd, struct table *t, char *buf, const char **failed) {
    struct conn *c = &t->c[fd];
    ssize_t n = recv(fd, buf, READ_SIZE, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n <= 0) {
        close_conn(t, fd);
        return 0;
    }
    /* MSG_NOSIGNAL: a peer gone is an error here, not a SIGPIPE for the process. */
    ssize_t w = send(fd, buf, (size_t)n, MSG_NOSIGNAL);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            close_conn(t, fd);
            return 0;
        }
        w = 0;
    }
    if (w == n)
        return 0;
    c->pending = malloc((size_t)(n - w));
    if (!c->pending) {
        *failed = "malloc (unsent bytes)";
        return -ENOMEM;
    }
    memcpy(c->pending, buf + w, (size_t)(n - w));
    c->len = (size_t)(n - w);
    c->off = 0;
    return watch(ep, EPOLL_CTL_MOD, fd, EPOLLOUT, failed);
}

/* Sends what a short write left; reading resumes once it is all out. */
static int flush(int ep, int fd, struct table *t, const char **failed) {
    struct conn *c = &t->c[fd];
    ssize_t w = send(fd, c->pending + c->off, c->len - c->off, MSG_NOSIGNAL);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            close_conn(t, fd);
        return 0;
    }
    c->off += (size_t)w;
    if (c->off < c->len)
        return 0;
    free(c->pending);
    c->pending = NULL;
    c->len = c->off = 0;
    return watch(ep, EPOLL_CTL_MOD, fd, EPOLLIN, failed);
}

int c_epoll_echo_open(int listen_fd, const char **failed) {
    int flags = fcntl(listen_fd, F_GETFL);
    if (flags < 0)
        return fail(failed, "fcntl(F_GETFL) on the listener");
    if (fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return fail(failed, "fcntl(F_SETFL, O_NONBLOCK) on the listener");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return fail(failed, "epoll_create1");
    int err = watch(ep, EPOLL_CTL_ADD, listen_fd, EPOLLIN, failed);
    if (err < 0) {
        close(ep);
        return err;
    }
    return ep;
}

int c_epoll_echo_serve(int ep, int listen_fd, const char **failed) {
    struct epoll_event events[MAX_EVENTS];
    struct table t = {NULL, 0};
    char *buf = malloc(READ_SIZE);
    if (!buf) {
        *failed = "malloc (read buffer)";
        return -ENOMEM;
    }
    int err = 0;
    while (err == 0) {
        int n = epoll_wait(ep, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            err = fail(failed, "epoll_wait");
            break;
        }
        for (int i = 0; i < n && err == 0; i++) {
            int fd = events[i].data.fd;
            if (fd == listen_fd) {
                err = accept_all(ep, listen_fd, &t, failed);
                continue;
            }
            /* Closed earlier in this batch. */
            if ((size_t)fd >= t.cap || !t.c[fd].open)
                continue;
            /* EPOLLERR/EPOLLHUP come with either interest; the failing call then closes the connection. */
            if (t.c[fd].pending)
                err = flush(ep, fd, &t, failed);
            else
                err = echo(ep, fd, &t, buf, failed);
        }
    }
    for (size_t fd = 0; fd < t.cap; fd++)
        if (t.c[fd].open)
            close_conn(&t, (int)fd);
    free(t.c);
    free(buf);
    return err;
}
