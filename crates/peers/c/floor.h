/*
 * What the C floors share: one event loop's wait and accept, on
 * level-triggered epoll, each accepted connection read for EPOLLIN.
 */
#ifndef IOMUX_FLOOR_H
#define IOMUX_FLOOR_H

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* -errno, with *failed naming the call that failed. */
static inline int floor_fail(const char **failed, const char *call) {
    int err = errno;
    *failed = call;
    return -err;
}

/* Events ready in ep (at most max), waiting as long as it takes; -errno
 * on failure. */
static inline int floor_wait(int ep, struct epoll_event *events, int max, const char **failed) {
    for (;;) {
        int n = epoll_wait(ep, events, max, -1);
        if (n >= 0 || errno != EINTR)
            return n < 0 ? floor_fail(failed, "epoll_wait") : n;
    }
}

/* Every pending connection on listen_fd, non-blocking, watched in ep for
 * EPOLLIN; one at or past max_fds (the floor's tables) is closed. 0, or
 * -errno when accepting failed for another reason than a client's. */
static inline int floor_accept_all(int ep, int listen_fd, int max_fds, const char **failed) {
    for (;;) {
        int c = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                return 0;
            return floor_fail(failed, "accept4");
        }
        struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
        if (c >= max_fds || epoll_ctl(ep, EPOLL_CTL_ADD, c, &e) < 0)
            close(c);
    }
}

#endif
