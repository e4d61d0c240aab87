/* The launch server: a small single-threaded process, one per Python process and runtime build, that
 * forks one child per launch. Python never forks: a fork in a multithreaded interpreter runs every
 * library's fork handlers in the middle of other threads' work (OpenBLAS stops its worker threads,
 * silently corrupting another thread's matrix product), and copies the interpreter's page tables.
 *
 * Protocol, over the SOCK_SEQPACKET socket whose number is argv[1]: each request is a wm_request with
 * three descriptors attached: the shared region (status page, launch description, arguments), the
 * kernel library, and a reply socket. On the reply socket the server sends an int32 (0, or -errno if
 * it could not fork) with the child's pidfd attached, and, once the child has been reaped, its int32
 * wait status. Python waits on the reply socket with a time limit and kills through the pidfd. A
 * launch whose caller hangs up its reply socket is killed; when Python goes away (end of file on the
 * request socket) the server kills its children and exits; a child dies with the server. */
#include "wm_internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every Linux architecture */
#endif

#define WM_MAX_LIVE 1024

typedef struct wm_live {
    pid_t pid;
    int pidfd;
    int reply;
    int abandoned; /* the caller hung up; the child has been killed */
} wm_live;

static int wm_recv_request(int sock, wm_request *req, int fds[3]) {
    char control[CMSG_SPACE(3 * sizeof(int))];
    struct iovec iov = {.iov_base = req, .iov_len = sizeof *req};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    ssize_t got;
    do got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (got < 0 && errno == EINTR);
    if (got <= 0) return (int)got; /* end of file: Python is gone */
    int count = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            memcpy(fds, CMSG_DATA(c), (size_t)(count < 3 ? count : 3) * sizeof(int));
        }
    }
    if (count != 3 || got != (ssize_t)sizeof *req || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        for (int i = 0; i < count && i < 3; i++) close(fds[i]);
        return -2; /* malformed: dropped */
    }
    return 1;
}

static void wm_reply(int sock, int32_t value, int fd) {
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &value, .iov_len = sizeof value};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(control, 0, sizeof control);
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    while (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
}

static int wm_check_request(const wm_request *req) {
    if (req->magic != WM_REQUEST_MAGIC || req->desc_bytes != sizeof(wm_launch_desc) ||
        req->buffer_bytes != sizeof(wm_buffer)) {
        return -EPROTO;
    }
    return wm_pool_reserve(req->workers, req->threads, req->stack_bytes);
}

static void wm_start(int sock, wm_live *live, int *nlive, const wm_request *req, const int fds[3]) {
    int err = *nlive == WM_MAX_LIVE ? -EAGAIN : wm_check_request(req);
    pid_t server = getpid();
    pid_t pid = err ? -1 : fork();
    if (pid == 0) {
        /* A launch never outlives its server (killed, say, along with a stuck test run). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != server) _exit(5);
        close(sock);
        close(fds[2]);
        for (int i = 0; i < *nlive; i++) {
            close(live[i].pidfd);
            close(live[i].reply);
        }
        signal(SIGPIPE, SIG_DFL);
        wm_launch_child(fds[0], fds[1]);
    }
    if (pid < 0 && !err) err = -errno;
    close(fds[0]);
    close(fds[1]);
    int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    if (pid > 0 && pidfd < 0) {
        err = -errno;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    if (err) {
        wm_reply(fds[2], err, -1);
        close(fds[2]);
        return;
    }
    wm_reply(fds[2], 0, pidfd);
    live[(*nlive)++] = (wm_live){pid, pidfd, fds[2], 0};
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int sock = atoi(argv[1]);
    signal(SIGPIPE, SIG_IGN); /* a reply to a vanished caller fails with EPIPE instead */
    static wm_live live[WM_MAX_LIVE];
    static struct pollfd polled[2 * WM_MAX_LIVE + 1];
    int nlive = 0;
    for (;;) {
        /* The request socket, then per live launch its pidfd (readable once the child has exited) and
         * its reply socket (hung up if the caller gave up on the launch: the child is killed). */
        polled[0] = (struct pollfd){.fd = sock, .events = POLLIN};
        for (int i = 0; i < nlive; i++) {
            polled[2 * i + 1] = (struct pollfd){.fd = live[i].pidfd, .events = POLLIN};
            polled[2 * i + 2] = (struct pollfd){.fd = live[i].abandoned ? -1 : live[i].reply, .events = 0};
        }
        if (poll(polled, (nfds_t)(2 * nlive + 1), -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        /* Downwards, so that the entry moved into a freed slot has been looked at already. */
        for (int i = nlive - 1; i >= 0; i--) {
            if (polled[2 * i + 2].revents & (POLLHUP | POLLERR)) {
                kill(live[i].pid, SIGKILL);
                live[i].abandoned = 1;
            }
            if (!polled[2 * i + 1].revents) continue;
            int status = 0;
            while (waitpid(live[i].pid, &status, 0) < 0 && errno == EINTR) {
            }
            wm_reply(live[i].reply, status, -1);
            close(live[i].reply);
            close(live[i].pidfd);
            live[i] = live[--nlive];
        }
        if (polled[0].revents) {
            wm_request req;
            int fds[3];
            int got = wm_recv_request(sock, &req, fds);
            if (got == 0 || got == -1) break;
            if (got == 1) wm_start(sock, live, &nlive, &req, fds);
        }
    }
    for (int i = 0; i < nlive; i++) kill(live[i].pid, SIGKILL);
    for (int i = 0; i < nlive; i++) waitpid(live[i].pid, NULL, 0);
    return 0;
}
