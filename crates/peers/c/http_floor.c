/*
 * The floor under every HTTP/1.1 server of E6: the least one can do per
 * request on this kernel. One thread, level-triggered epoll, one recv per
 * readable connection and one send of canned responses: each request's
 * end (the empty line after its head) gets the plaintext response iomux
 * sends, byte for byte as long. No parser beyond finding that line: no
 * method, path or header is read, and no request may carry a body (wrk's
 * GETs carry none).
 *
 * An end of head split across reads is found all the same: each
 * connection keeps how much of "\r\n\r\n" its last read ended with.
 * What a real server spends beyond this floor is its own; what the floor
 * spends is the kernel's (syscalls, TCP over loopback, sleeping and
 * waking).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "floor.h"

/* OUT_SIZE holds the responses to a full read of the shortest requests
 * (4 bytes: "\r\n\r\n" alone), MAX_FDS descriptors keep their state. */
enum { MAX_EVENTS = 512, READ_SIZE = 16 * 1024, MAX_FDS = 4096 };

/* iomux's plaintext response, with a date of the same length. */
static const char RESPONSE[] = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n"
                               "Server: iomux\r\nDate: Mon, 07 Dec 2026 00:00:00 GMT\r\n\r\nHello, World!";
enum { RESPONSE_LEN = sizeof RESPONSE - 1, OUT_SIZE = (READ_SIZE / 4) * RESPONSE_LEN };

/* The ends of heads in in[0..n], *matched being how much of "\r\n\r\n"
 * came just before in[0] and, on return, just before in[n]. */
static size_t heads_ended(const char *in, size_t n, unsigned char *matched) {
    static const char end[] = "\r\n\r\n";
    size_t ended = 0;
    unsigned char m = *matched;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == end[m])
            m++;
        else
            m = in[i] == '\r' ? 1 : 0;
        if (m == 4) {
            ended++;
            m = 0;
        }
    }
    *matched = m;
    return ended;
}

int c_http_floor_serve(int ep, int listen_fd, const char **failed) {
    static char in[READ_SIZE], out[OUT_SIZE];
    static unsigned char matched[MAX_FDS];
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
            size_t responses = r > 0 ? heads_ended(in, (size_t)r, &matched[fd]) : 0;
            size_t o = responses * RESPONSE_LEN;
            for (size_t k = 0; k < responses; k++)
                memcpy(out + k * RESPONSE_LEN, RESPONSE, RESPONSE_LEN);
            /* Small responses into an empty socket buffer: a short send
             * would mean a client that stopped reading; the floor drops
             * it, as it drops one that closed. */
            if (r <= 0 || (o && send(fd, out, o, MSG_NOSIGNAL) != (ssize_t)o)) {
                matched[fd] = 0; /* for the next connection on this descriptor */
                close(fd);       /* also leaves the epoll set: its only descriptor */
            }
        }
    }
}
