/* guard.c: the bounds on a connection that libmicrohttpd does not keep by
 * itself, kept by one thread of ours:
 *
 *   - a request's headers must be complete within --header-timeout-s of
 *     the connection's accept (libmicrohttpd only closes a connection that
 *     sends nothing for --timeout-s: a byte every few seconds keeps it);
 *   - a body must arrive at --body-min-rate-kb on average once
 *     --body-grace-s have passed since its headers (the rule of Apache's
 *     mod_reqtimeout: the deadline is grace + bytes / rate, so a body that
 *     keeps the rate is never cut, however large);
 *   - a connection answered while its body still comes is closed by a
 *     bounded lingering close (as nginx's lingering_close does it): the
 *     answer and a FIN go out, then what the client still sends is read
 *     and dropped for at most --linger-s and --linger-mb, at most
 *     --linger-max connections at a time, and only then is the socket
 *     closed.
 *
 * Why lingering needs a thread of its own: libmicrohttpd 0.9.75 accepts a
 * response either with the headers or after the whole body, and one
 * queued with the headers makes it close the connection right after
 * sending it (connection.c: discard_request, then MHD_CONN_MUST_CLOSE).
 * Closing a TCP socket with unread bytes, or receiving bytes after the
 * close, makes the kernel answer with a reset, and a client still writing
 * its body -- most do, without Expect: 100-continue -- gets ECONNRESET or
 * EPIPE instead of the answer.  How libmicrohttpd closes (read in its
 * 0.9.75 source): MHD_connection_mark_closed_ calls shutdown(SHUT_WR) --
 * the FIN after the answer, which is exactly what a lingering close
 * wants, and which acts on the socket, so a dup shares it -- and later, in
 * MHD_cleanup_connections, it calls the MHD_OPTION_NOTIFY_CONNECTION
 * callback with MHD_CONNECTION_NOTIFY_CLOSED, then removes the descriptor
 * from its epoll set (EPOLL_CTL_DEL) and close()s it.  No SO_LINGER, no
 * shutdown(SHUT_RD).  So srv_guard_close, called from that callback, dups
 * the descriptor: libmicrohttpd's close() then drops one reference to the
 * socket and the kernel keeps it open for ours.  (That EPOLL_CTL_DEL
 * matters: an epoll registration belongs to the open socket, not to the
 * descriptor number, so one left in its set would go on reporting our
 * socket's events for a freed connection.)  srv_guard_close shuts the
 * sending side down again, so as not to depend on libmicrohttpd's flags.
 * Only at libmicrohttpd's stop does it shut sockets down in both
 * directions, after which lingering is moot anyway.
 *
 * The registry holds every connection from its accept (accept.c: a
 * record is made before the socket is handed to libmicrohttpd, and waits
 * in `pending` until libmicrohttpd's notify-connection callback takes it
 * up, srv_guard_open) to the close (srv_guard_close).  Its count is the
 * one --max-connections applies to (srv_guard_room), and the drain asks it
 * which connections still wait for an answer (srv_guard_awaited).  The
 * registry and the hand-over list are under one mutex; the thread checks
 * the deadlines every `tick` and cuts with shutdown(SHUT_RDWR) while
 * holding that mutex, so the descriptor cannot be closed and reused under
 * it: libmicrohttpd closes only after srv_guard_close took it out.  The
 * phases and byte counts are written by libmicrohttpd's threads without
 * the lock (atomics): `since` is stored before `phase`, so a phase read
 * here comes with its own start time or a later one -- a deadline is
 * never computed from an older start.  Lingering sockets belong to the
 * thread alone once it has taken them from the hand-over list. */
#include "http/http.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a connection is doing: the states of the metrics (http.h). */
enum phase {
  PHASE_HEADERS = SRV_CONN_HEADERS, /* a request's headers are coming (or,
                                     * on a new connection, its first
                                     * request) */
  PHASE_IDLE = SRV_CONN_IDLE,       /* kept alive after an answer, no next
                                     * request seen */
  PHASE_BODY = SRV_CONN_BODY,       /* receiving a body */
  PHASE_BUSY = SRV_CONN_BUSY        /* computing or answering:
                                     * libmicrohttpd's timeout */
};

struct srv_conn {
  struct srv_conn *prev, *next; /* registry, hand-over or lingering list */
  int fd;
  int pending;               /* accepted, not yet taken up by
                              * libmicrohttpd (under the lock) */
  ino_t ino;                 /* pending: the socket's inode, to tell it
                              * from a later one with the same number */
  _Atomic int phase;
  _Atomic uint64_t since;    /* HEADERS, IDLE: due header_ns after it;
                              * BODY: its headers' time */
  _Atomic uint64_t received; /* BODY: bytes so far */
  _Atomic int cut;           /* 0, or 1 + the srv_reject it was cut for */
  _Atomic int linger;        /* answered with a body still coming */
  uint64_t deadline;         /* lingering: when it is closed at the latest */
  uint64_t left;             /* lingering: bytes it may still send */
  void *tls;                 /* tls.c's certificate set, or NULL */
};

static struct {
  pthread_mutex_t lock;
  struct srv_conn pending; /* registry: accepted, libmicrohttpd's soon */
  struct srv_conn conns;   /* registry: libmicrohttpd's connections */
  int nconns;              /* in pending and conns */
  int room_fd;             /* written to when one closes, or -1 */
  struct srv_conn handed;  /* to linger, not yet taken by the thread */
  struct srv_conn linger;  /* lingering, oldest first (thread only) */
  int nlinger;             /* in `linger` (thread only) */
  _Atomic int lingering;   /* handed + linger: the gauge */
  int epfd, wakefd;
  pthread_t thread;
  int inited, running;
  _Atomic int stop;
  uint64_t header_ns, grace_ns, tick_ns, linger_ns, linger_bytes;
  double rate; /* bytes per ns */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER,
       /* Empty from the start: the metrics read the registry whether or
        * not the server runs (the unit tests render them without one). */
       .pending = {.prev = &g.pending, .next = &g.pending},
       .conns = {.prev = &g.conns, .next = &g.conns},
       .room_fd = -1, .epfd = -1, .wakefd = -1};

/* How much one lingering socket may send per round before the others get
 * their turn (the epoll set is level-triggered: the rest comes next). */
#define LINGER_ROUND ((size_t)1 << 20)

static uint64_t ns_of(double s)
{
  return s > 0 ? (uint64_t)(s * 1e9) : 0;
}

/* ---------------------------------------------------------------------
 * Lists (circular, with the list head as sentinel)
 * --------------------------------------------------------------------- */

static void list_init(struct srv_conn *head)
{
  head->prev = head->next = head;
}

static void list_append(struct srv_conn *head, struct srv_conn *c)
{
  c->prev = head->prev;
  c->next = head;
  head->prev->next = c;
  head->prev = c;
}

static void list_remove(struct srv_conn *c)
{
  c->prev->next = c->next;
  c->next->prev = c->prev;
  c->prev = c->next = c;
}

static int list_empty(const struct srv_conn *head)
{
  return head->next == head;
}

/* Move every entry of src to the end of dst; src is left empty. */
static void list_splice(struct srv_conn *dst, struct srv_conn *src)
{
  if (list_empty(src))
    return;
  src->next->prev = dst->prev;
  src->prev->next = dst;
  dst->prev->next = src->next;
  dst->prev = src->prev;
  list_init(src);
}

/* ---------------------------------------------------------------------
 * libmicrohttpd's side
 * --------------------------------------------------------------------- */

/* Under g.lock: c leaves the registry (pending or not); a wait for room
 * ends. */
static void registry_remove(struct srv_conn *c)
{
  list_remove(c);
  c->pending = 0;
  g.nconns--;
  if (g.room_fd >= 0) {
    uint64_t one = 1;
    ssize_t w = write(g.room_fd, &one, sizeof one);

    (void)w;
    g.room_fd = -1;
  }
}

/* Under g.lock: 1 when the pending record c still names the socket that
 * was accepted -- libmicrohttpd drops a connection it failed to set up
 * (out of memory) without a callback, and its number may have been given
 * to another descriptor since. */
static int pending_alive(const struct srv_conn *c)
{
  struct stat st;

  return fstat(c->fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
         st.st_ino == c->ino;
}

int srv_guard_room(int max, int wakefd)
{
  int room;

  pthread_mutex_lock(&g.lock);
  room = g.nconns < max;
  if (!room)
    g.room_fd = wakefd;
  pthread_mutex_unlock(&g.lock);
  return room;
}

void srv_guard_states(int n[SRV_CONN_STATES_])
{
  struct srv_conn *c;
  int i;

  for (i = 0; i < SRV_CONN_STATES_; i++)
    n[i] = 0;
  pthread_mutex_lock(&g.lock);
  for (c = g.pending.next; c != &g.pending; c = c->next)
    n[PHASE_HEADERS]++;
  for (c = g.conns.next; c != &g.conns; c = c->next)
    n[atomic_load(&c->phase)]++;
  pthread_mutex_unlock(&g.lock);
}

void srv_guard_room_cancel(void)
{
  pthread_mutex_lock(&g.lock);
  g.room_fd = -1;
  pthread_mutex_unlock(&g.lock);
}

struct srv_conn *srv_guard_accepted(int fd)
{
  struct srv_conn *c = calloc(1, sizeof *c), *p;
  struct stat st;

  if (!c || fstat(fd, &st) != 0) {
    free(c);
    return NULL;
  }
  c->fd = fd;
  c->pending = 1;
  c->ino = st.st_ino;
  /* The header deadline counts from the accept. */
  atomic_init(&c->since, srv_now_ns());
  atomic_init(&c->phase, PHASE_HEADERS);
  pthread_mutex_lock(&g.lock);
  /* A pending record with this number is one libmicrohttpd dropped
   * unannounced: the kernel reuses a number only once it is closed. */
  for (p = g.pending.next; p != &g.pending; p = p->next)
    if (p->fd == fd) {
      registry_remove(p);
      free(p);
      break;
    }
  list_append(&g.pending, c);
  g.nconns++;
  pthread_mutex_unlock(&g.lock);
  return c;
}

void srv_guard_refused(struct srv_conn *c)
{
  if (!c)
    return;
  pthread_mutex_lock(&g.lock);
  registry_remove(c);
  pthread_mutex_unlock(&g.lock);
  free(c);
}

struct srv_conn *srv_guard_open(int fd)
{
  struct srv_conn *c;

  pthread_mutex_lock(&g.lock);
  for (c = g.pending.next; c != &g.pending; c = c->next)
    if (c->fd == fd)
      break;
  if (c != &g.pending) {
    list_remove(c);
    c->pending = 0;
    list_append(&g.conns, c);
    pthread_mutex_unlock(&g.lock);
    return c;
  }
  pthread_mutex_unlock(&g.lock);
  /* Not found: forgotten as dropped, then taken up after all. */
  c = calloc(1, sizeof *c);
  if (!c) {
    /* Unguarded, a connection could hold its slot for ever: have
     * libmicrohttpd drop it instead (its first read sees the end). */
    shutdown(fd, SHUT_RDWR);
    return NULL;
  }
  c->fd = fd;
  atomic_init(&c->since, srv_now_ns());
  atomic_init(&c->phase, PHASE_HEADERS);
  pthread_mutex_lock(&g.lock);
  list_append(&g.conns, c);
  g.nconns++;
  pthread_mutex_unlock(&g.lock);
  return c;
}

void srv_conn_set_tls(struct srv_conn *c, void *tls)
{
  if (c)
    c->tls = tls;
}

void *srv_conn_tls(const struct srv_conn *c)
{
  return c ? c->tls : NULL;
}

void srv_guard_close(struct srv_conn *c)
{
  int handed = 0;

  if (!c)
    return;
  pthread_mutex_lock(&g.lock);
  registry_remove(c);
  if (atomic_load(&c->linger) && g.running && !atomic_load(&g.stop)) {
    /* libmicrohttpd closes c->fd when we return: our dup keeps the
     * socket (see the top of the file). */
    c->fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
    if (c->fd >= 0) {
      /* Our end of stream follows the answer, so the client knows no
       * more comes.  libmicrohttpd has sent it already -- but not with
       * MHD_USE_TURBO, and over TLS perhaps only a close_notify. */
      shutdown(c->fd, SHUT_WR);
      list_append(&g.handed, c);
      atomic_fetch_add(&g.lingering, 1);
      handed = 1;
    }
  }
  pthread_mutex_unlock(&g.lock);
  if (handed) {
    uint64_t one = 1;
    ssize_t w = write(g.wakefd, &one, sizeof one); /* full: already woken */

    (void)w;
  } else {
    free(c);
  }
}

void srv_guard_headers_after(struct srv_conn *c, double idle_s)
{
  if (!c)
    return;
  atomic_store(&c->since, srv_now_ns() + ns_of(idle_s));
  atomic_store(&c->phase, PHASE_IDLE);
}

void srv_guard_begun(struct srv_conn *c)
{
  /* The deadline stays: counted from the accept, or from the last answer
   * on a kept-alive connection. */
  if (c)
    atomic_store(&c->phase, PHASE_HEADERS);
}

void srv_guard_body(struct srv_conn *c)
{
  if (!c)
    return;
  atomic_store(&c->received, 0);
  atomic_store(&c->since, srv_now_ns());
  atomic_store(&c->phase, PHASE_BODY);
}

void srv_guard_body_bytes(struct srv_conn *c, size_t n)
{
  if (c)
    atomic_fetch_add_explicit(&c->received, n, memory_order_relaxed);
}

void srv_guard_busy(struct srv_conn *c)
{
  if (c)
    atomic_store(&c->phase, PHASE_BUSY);
}

void srv_guard_linger(struct srv_conn *c)
{
  if (c)
    atomic_store(&c->linger, 1);
}

int srv_guard_cut(const struct srv_conn *c)
{
  return c ? atomic_load(&c->cut) - 1 : -1;
}

int srv_guard_lingering(void)
{
  return atomic_load(&g.lingering);
}

/* The drain's question.  Waited for: a connection not yet taken up by
 * libmicrohttpd; one that has had no request yet (a client connects to
 * send one: it gets its 503, or is cut at its header deadline); one whose
 * next request has begun (its request line is in) or whose bytes wait
 * unread in the socket.  Not waited for: one with a request in progress
 * (mhd.c counts those), one cut, and one kept alive with nothing sent
 * since its last answer -- libmicrohttpd closes those when it stops.  A
 * client that has closed its end is not waited for either: its read side
 * is shut so that libmicrohttpd, whose edge-triggered epoll may have
 * missed that end (see notice_peer_eof in mhd.c), sees it and closes. */
int srv_guard_awaited(void)
{
  struct srv_conn *c, *next;
  int n = 0;

  pthread_mutex_lock(&g.lock);
  for (c = g.pending.next; c != &g.pending; c = next) {
    next = c->next;
    if (pending_alive(c)) {
      n++;
    } else {
      registry_remove(c);
      free(c);
    }
  }
  for (c = g.conns.next; c != &g.conns; c = c->next) {
    int phase = atomic_load(&c->phase);
    ssize_t r;
    char ch;

    if (atomic_load(&c->cut) || phase == PHASE_BODY || phase == PHASE_BUSY)
      continue;
    r = recv(c->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0)
      shutdown(c->fd, SHUT_RD);
    else if (r > 0 || (phase == PHASE_HEADERS && (errno == EAGAIN ||
                                                  errno == EWOULDBLOCK)))
      n++;
  }
  pthread_mutex_unlock(&g.lock);
  return n;
}

/* ---------------------------------------------------------------------
 * The thread: deadlines
 * --------------------------------------------------------------------- */

/* Under g.lock: close c's connection in both directions; libmicrohttpd
 * reads the end of stream and closes it. */
static void cut(struct srv_conn *c, enum srv_reject why)
{
  /* Counted before the client can see it. */
  srv_metrics_reject(why);
  atomic_store(&c->cut, 1 + (int)why);
  shutdown(c->fd, SHUT_RDWR);
}

static void check_deadlines(uint64_t now)
{
  struct srv_conn *c, *next;
  int headers = 0;

  pthread_mutex_lock(&g.lock);
  /* A connection libmicrohttpd has not taken up by its header deadline
   * is looked at: forgotten if it dropped it (see pending_alive), else it
   * is only late, and its deadline runs on once libmicrohttpd has it. */
  for (c = g.pending.next; c != &g.pending; c = next) {
    uint64_t since = atomic_load(&c->since);

    next = c->next;
    if (now > since && now - since > g.header_ns && !pending_alive(c)) {
      registry_remove(c);
      free(c);
    }
  }
  for (c = g.conns.next; c != &g.conns; c = c->next) {
    int phase = atomic_load(&c->phase);
    uint64_t since = atomic_load(&c->since);

    if (atomic_load(&c->cut))
      continue;
    if ((phase == PHASE_HEADERS || phase == PHASE_IDLE) && now > since &&
        now - since > g.header_ns) {
      cut(c, SRV_REJECT_HEADER_TIMEOUT);
      headers++;
    } else if (phase == PHASE_BODY && now > since) {
      double allowed = (double)g.grace_ns +
                       (double)atomic_load(&c->received) / g.rate;

      if ((double)(now - since) > allowed)
        cut(c, SRV_REJECT_SLOW_UPLOAD); /* logged with its request */
    }
  }
  pthread_mutex_unlock(&g.lock);
  if (headers)
    srv_log("closed %d connection(s) whose request headers were not "
            "complete within --header-timeout-s %g",
            headers, srv_cfg.header_timeout_s);
}

/* ---------------------------------------------------------------------
 * The thread: lingering
 * --------------------------------------------------------------------- */

/* Close a lingering socket; why < 0: the client finished (its end of
 * stream or an error), nothing was cut.  The gauge and the counter change
 * before the client can see the close. */
static void linger_end(struct srv_conn *c, int why)
{
  atomic_fetch_sub(&g.lingering, 1);
  if (why >= 0)
    srv_metrics_reject((enum srv_reject)why);
  epoll_ctl(g.epfd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  list_remove(c);
  free(c);
  g.nlinger--;
}

/* Take the handed-over sockets: each may linger from now on, within the
 * bounds; past --linger-max the oldest makes room. */
static void linger_take(uint64_t now)
{
  struct srv_conn taken;

  list_init(&taken);
  pthread_mutex_lock(&g.lock);
  list_splice(&taken, &g.handed);
  pthread_mutex_unlock(&g.lock);
  while (!list_empty(&taken)) {
    struct srv_conn *c = taken.next;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};

    list_remove(c);
    if (g.nlinger >= srv_cfg.linger_max)
      linger_end(g.linger.next, SRV_REJECT_LINGER_FULL);
    c->deadline = now + g.linger_ns;
    c->left = g.linger_bytes;
    list_append(&g.linger, c);
    g.nlinger++;
    if (epoll_ctl(g.epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
      linger_end(c, -1);
  }
}

/* Read and drop what a lingering client sent, up to its byte bound. */
static void linger_read(struct srv_conn *c)
{
  static char sink[65536];
  size_t round = 0;

  while (round < LINGER_ROUND) {
    size_t want = c->left < sizeof sink ? (size_t)c->left : sizeof sink;
    ssize_t n = recv(c->fd, sink, want, MSG_DONTWAIT);

    if (n > 0) {
      c->left -= (uint64_t)n;
      round += (size_t)n;
      if (c->left == 0) {
        linger_end(c, SRV_REJECT_LINGER_BYTES);
        return;
      }
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      linger_end(c, -1); /* end of stream, or the client reset */
      return;
    }
  }
}

static void linger_expire(uint64_t now)
{
  while (!list_empty(&g.linger) && g.linger.next->deadline <= now)
    linger_end(g.linger.next, SRV_REJECT_LINGER_TIME);
}

static void *guard_main(void *arg)
{
  struct epoll_event ev[64];
  uint64_t next_check = srv_now_ns() + g.tick_ns;

  (void)arg;
  while (!atomic_load(&g.stop)) {
    uint64_t now = srv_now_ns(), until = next_check;
    int i, n, ms;

    if (!list_empty(&g.linger) && g.linger.next->deadline < until)
      until = g.linger.next->deadline;
    ms = until > now ? (int)((until - now + 999999) / 1000000) : 0;
    n = epoll_wait(g.epfd, ev, (int)(sizeof ev / sizeof ev[0]), ms);
    for (i = 0; i < n; i++) {
      if (ev[i].data.ptr) {
        linger_read(ev[i].data.ptr);
      } else {
        uint64_t v;
        ssize_t r = read(g.wakefd, &v, sizeof v);

        (void)r;
      }
    }
    now = srv_now_ns();
    linger_take(now);
    linger_expire(now);
    if (now >= next_check) {
      check_deadlines(now);
      next_check = now + g.tick_ns;
    }
  }
  return NULL;
}

/* ---------------------------------------------------------------------
 * Start and stop
 * --------------------------------------------------------------------- */

int srv_guard_start(void)
{
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  double shortest = srv_cfg.header_timeout_s;

  list_init(&g.pending);
  list_init(&g.conns);
  g.nconns = 0;
  g.room_fd = -1;
  list_init(&g.handed);
  list_init(&g.linger);
  g.nlinger = 0;
  g.inited = 1;
  atomic_store(&g.stop, 0);
  g.header_ns = ns_of(srv_cfg.header_timeout_s);
  g.grace_ns = ns_of(srv_cfg.body_grace_s);
  g.rate = srv_cfg.body_min_rate_kb * 1024.0 * 1e-9;
  g.linger_ns = ns_of(srv_cfg.linger_s);
  g.linger_bytes = (uint64_t)(srv_cfg.linger_mb * 1048576.0);
  /* A deadline is noticed at most a tick late: a quarter of the shortest
   * one, within 10..250 ms. */
  if (srv_cfg.body_grace_s > 0 && srv_cfg.body_grace_s < shortest)
    shortest = srv_cfg.body_grace_s;
  g.tick_ns = ns_of(shortest / 4);
  if (g.tick_ns < 10000000)
    g.tick_ns = 10000000;
  if (g.tick_ns > 250000000)
    g.tick_ns = 250000000;

  g.epfd = epoll_create1(EPOLL_CLOEXEC);
  g.wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (g.epfd < 0 || g.wakefd < 0 ||
      epoll_ctl(g.epfd, EPOLL_CTL_ADD, g.wakefd, &ev) != 0 ||
      pthread_create(&g.thread, NULL, guard_main, NULL) != 0) {
    srv_log("cannot start the connection guard thread");
    srv_guard_stop();
    return -1;
  }
  g.running = 1;
  return 0;
}

void srv_guard_stop(void)
{
  struct srv_conn *c;

  if (!g.inited)
    return;
  if (g.running) {
    uint64_t one = 1;
    ssize_t w;

    atomic_store(&g.stop, 1);
    w = write(g.wakefd, &one, sizeof one);
    (void)w;
    pthread_join(g.thread, NULL);
    g.running = 0;
  }
  /* libmicrohttpd has stopped: nothing is handed over any more. */
  linger_take(srv_now_ns());
  while (!list_empty(&g.linger))
    linger_end(g.linger.next, -1);
  while (!list_empty(&g.pending)) {
    c = g.pending.next;
    list_remove(c);
    free(c);
  }
  while (!list_empty(&g.conns)) {
    c = g.conns.next;
    list_remove(c);
    free(c);
  }
  g.nconns = 0;
  g.room_fd = -1;
  if (g.epfd >= 0)
    close(g.epfd);
  if (g.wakefd >= 0)
    close(g.wakefd);
  g.epfd = g.wakefd = -1;
  g.inited = 0;
}
