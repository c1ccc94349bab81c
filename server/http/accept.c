/* accept.c: the listening socket, and the thread that accepts on it and
 * hands every connection to libmicrohttpd (MHD_add_connection).
 *
 * Why attnbiasd accepts by itself.  libmicrohttpd 0.9.75 stops accepting
 * with MHD_quiesce_daemon, and with a pool of polling threads that races
 * with the threads: quiesce sets a worker's was_quiesced, then removes the
 * listening socket from that worker's epoll set and panics on any error
 * (daemon.c, "Failed to remove listen FD from epoll set"), while the
 * worker, awake for any reason, sees was_quiesced and removes it first --
 * or has just removed it at its connection limit.  The process aborts on
 * SIGTERM.  The daemon runs with MHD_USE_NO_LISTEN_SOCKET instead: no
 * polling thread ever holds a listening socket, and stopping is ours --
 * this thread ends, what the kernel had queued is taken in, the socket is
 * closed (srv_accept_stop).
 *
 * What MHD_add_connection does in 0.9.75 with a pool: it picks a worker
 * (the descriptor's number modulo the pool size; the next with room if
 * that one is full), sets the connection up on the calling thread -- the
 * per-address count of MHD_OPTION_PER_IP_CONNECTION_LIMIT (a refusal
 * closes the socket and returns MHD_NO with errno ENFILE) and the TLS
 * session -- queues it for the worker and wakes it through its
 * inter-thread channel.  The worker's thread then counts it against its
 * connection limit and calls the notify-connection callback
 * (MHD_CONNECTION_NOTIFY_STARTED) as for a connection it accepted itself.
 * One trap: when that count finds the worker at its limit, 0.9.75 returns
 * with the worker's cleanup mutex still locked (fixed upstream in 2023),
 * and the worker deadlocks at its next cleanup -- the drain then hangs for
 * ever in MHD_stop_daemon.  So no worker may reach its limit: each gets
 * --max-connections and a margin (see srv_http_start), and
 * --max-connections itself is kept here, against guard.c's registry,
 * which holds every connection from before its hand-over to its close.
 * At the limit this thread stops accepting (further connections wait in
 * the kernel's queue, as they did with libmicrohttpd's own accept) until
 * the registry says one closed. */
#include "http/http.h"

#include <microhttpd.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* After accept() failed for want of descriptors or memory, it is tried
 * again when a connection closes, or after this long. */
#define RETRY_MS 100

static struct {
  struct MHD_Daemon *daemon;
  int lfd, epfd, wakefd;
  pthread_t thread;
  int running;
  int starved; /* accept() failed for want of resources (logged once) */
  _Atomic int stop;
} a = {.lfd = -1, .epfd = -1, .wakefd = -1};

int srv_listen_tcp(const char *host, int port, int *bound, char *msg,
                   size_t cap)
{
  struct addrinfo hints, *ai = NULL;
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  char serv[16];
  int fd, rc, one = 1;

  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  snprintf(serv, sizeof serv, "%d", port);
  rc = getaddrinfo(host, serv, &hints, &ai);
  if (rc != 0 || !ai) {
    snprintf(msg, cap, "cannot resolve --host %s: %s", host,
             gai_strerror(rc));
    return -1;
  }
  fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    /* As libmicrohttpd set its own: a restarted server binds its port
     * while the connections of the previous one are in TIME_WAIT, and an
     * IPv6 address means IPv6 only. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6)
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  }
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
      listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
    snprintf(msg, cap, "cannot listen on %s:%d: %s", host, port,
             strerror(errno));
    if (fd >= 0)
      close(fd);
    freeaddrinfo(ai);
    return -1;
  }
  freeaddrinfo(ai);
  *bound = ntohs(ss.ss_family == AF_INET6
                     ? ((struct sockaddr_in6 *)&ss)->sin6_port
                     : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

/* A connection accepted on fd: recorded (guard.c), then libmicrohttpd's. */
static void hand_over(int fd, const struct sockaddr *sa, socklen_t len)
{
  struct srv_conn *c = srv_guard_accepted(fd);

  if (!c) {
    close(fd); /* out of memory: the client sees its connection closed */
    return;
  }
  if (MHD_add_connection(a.daemon, fd, sa, len) != MHD_YES) {
    /* libmicrohttpd has closed the socket.  ENFILE is the per-address
     * limit: no worker is ever at its connection limit. */
    int e = errno;

    srv_guard_refused(c);
    if (e == ENFILE)
      srv_metrics_reject(SRV_REJECT_PER_IP_LIMIT);
  }
}

/* Accept until the kernel's queue is empty, or --max-connections are open
 * (then wakefd, when not -1, is written to once one closes).  Returns how
 * many were taken, or -1 when accept() ran out of descriptors or memory
 * (to be tried again later). */
static int take_queued(int wakefd)
{
  int n = 0;

  while (srv_guard_room(srv_cfg.max_connections, wakefd)) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd = accept4(a.lfd, (struct sockaddr *)&ss, &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd >= 0) {
      a.starved = 0;
      hand_over(fd, (struct sockaddr *)&ss, len);
      n++;
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED)
      continue; /* a client that reset while queued */
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      break;
    if (!a.starved)
      srv_log("accept: %s; trying again as connections close",
              strerror(errno));
    a.starved = 1;
    return -1; /* EMFILE, ENFILE, ENOBUFS, ENOMEM */
  }
  return n;
}

static void wake(void)
{
  uint64_t one = 1;
  ssize_t w = write(a.wakefd, &one, sizeof one); /* full: already woken */

  (void)w;
}

/* The listening socket is edge-triggered in our epoll set: every wake-up
 * (a new connection, a closed one making room, a retry) accepts until the
 * queue is empty or no room is left, so none is left unseen. */
static void *accept_main(void *arg)
{
  int retry = 0;

  (void)arg;
  while (!atomic_load(&a.stop)) {
    struct epoll_event ev[2];
    int i, n = epoll_wait(a.epfd, ev, 2, retry ? RETRY_MS : -1);

    for (i = 0; i < n; i++)
      if (ev[i].data.fd == a.wakefd) {
        uint64_t v;
        ssize_t r = read(a.wakefd, &v, sizeof v);

        (void)r;
      }
    if (atomic_load(&a.stop))
      break;
    retry = take_queued(a.wakefd) < 0;
  }
  return NULL;
}

int srv_accept_start(int lfd, struct MHD_Daemon *daemon)
{
  struct epoll_event lev = {.events = EPOLLIN | EPOLLET, .data.fd = lfd};
  struct epoll_event wev = {.events = EPOLLIN};

  a.daemon = daemon;
  a.lfd = lfd;
  a.starved = 0;
  atomic_store(&a.stop, 0);
  a.epfd = epoll_create1(EPOLL_CLOEXEC);
  a.wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  wev.data.fd = a.wakefd;
  if (a.epfd < 0 || a.wakefd < 0 ||
      epoll_ctl(a.epfd, EPOLL_CTL_ADD, lfd, &lev) != 0 ||
      epoll_ctl(a.epfd, EPOLL_CTL_ADD, a.wakefd, &wev) != 0 ||
      pthread_create(&a.thread, NULL, accept_main, NULL) != 0) {
    srv_log("cannot start the accepting thread");
    srv_accept_stop();
    return -1;
  }
  a.running = 1;
  return 0;
}

void srv_accept_stop(void)
{
  int n = 0;

  if (a.running) {
    atomic_store(&a.stop, 1);
    wake();
    pthread_join(a.thread, NULL);
    a.running = 0;
    /* The registry must not write to the descriptor closed below. */
    srv_guard_room_cancel();
    /* Connections the kernel completed before the close below would be
     * reset by it, and a client that has sent its request on one (a load
     * balancer's new connection to this replica) could not tell whether
     * it was received.  They are taken in and answered as every request
     * during the drain is (503, Connection: close); what arrives after
     * the last accept is refused by the kernel. */
    n = take_queued(-1);
  }
  if (a.lfd >= 0)
    close(a.lfd);
  if (a.epfd >= 0)
    close(a.epfd);
  if (a.wakefd >= 0)
    close(a.wakefd);
  a.lfd = a.epfd = a.wakefd = -1;
  if (n > 0)
    srv_log("drain: %d connection(s) queued in the kernel taken in, to be "
            "answered",
            n);
}
