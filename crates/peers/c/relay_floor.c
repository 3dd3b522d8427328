/*
 * The floor under every TCP proxy: the least a relay can do per message on
 * this kernel. One thread, level-triggered epoll; each accepted connection
 * gets its own upstream connection (a blocking connect: over loopback it
 * completes at once), and each readable side makes one recv, then one send
 * of what it read to its partner. Nothing else: no buffering, no
 * half-close (an end of input or an error closes both), no backpressure.
 *
 * Valid only where every send completes at once, as for small requests
 * and replies over loopback (wrk's GETs through it to nginx): a short send
 * closes the pair. What a real proxy spends beyond this floor is its own;
 * what the floor spends is the kernel's (syscalls, TCP over loopback,
 * sleeping and waking).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { MAX_EVENTS = 512, READ_SIZE = 64 * 1024, MAX_FDS = 1 << 16 };

/* Each descriptor's partner, -1 for none (the listener, a closed one). */
static int partner[MAX_FDS];

static int fail(const char **failed, const char *call) {
    int err = errno;
    *failed = call;
    return -err;
}

static void close_pair(int fd) {
    int p = partner[fd];
    if (p >= 0) {
        partner[p] = -1;
        close(p); /* also leaves the epoll set: its only descriptor */
    }
    partner[fd] = -1;
    close(fd);
}

/* Opened by resp_floor.c's c_resp_floor_open: the same non-blocking
 * listener in a new epoll set. */

/* A new client: its upstream connection, both watched; on any failure
 * both are closed (the client sees its end at once). */
static void pair(int ep, int c, const struct sockaddr_in *up) {
    int one = 1;
    int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (u < 0 || c >= MAX_FDS || u >= MAX_FDS || setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0 ||
        connect(u, (const struct sockaddr *)up, sizeof *up) < 0 || fcntl(u, F_SETFL, O_NONBLOCK | O_RDWR) < 0) {
        if (u >= 0)
            close(u);
        close(c);
        return;
    }
    partner[c] = u;
    partner[u] = c;
    struct epoll_event ec = {.events = EPOLLIN, .data.fd = c}, eu = {.events = EPOLLIN, .data.fd = u};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ec) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, u, &eu) < 0)
        close_pair(c);
}

int c_relay_floor_serve(int ep, int listen_fd, const struct sockaddr_in *up, const char **failed) {
    static char buf[READ_SIZE];
    struct epoll_event events[MAX_EVENTS];
    for (int i = 0; i < MAX_FDS; i++)
        partner[i] = -1;
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
                    pair(ep, c, up);
                }
                continue;
            }
            if (partner[fd] < 0)
                continue; /* closed earlier in this batch with its partner */
            ssize_t r = recv(fd, buf, sizeof buf, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r <= 0 || send(partner[fd], buf, (size_t)r, MSG_NOSIGNAL) != r)
                close_pair(fd);
        }
    }
}
