/* unix.c: the Unix-domain socket listener (--unix-socket) and the
 * connection the health check makes to it.
 *
 * A client on the same host (a notebook, a pipeline, a sidecar sharing a
 * volume in a pod) skips the TCP/IP stack: a 100 MB safetensors body
 * arrives in about half the time it takes over loopback TCP, where the
 * congestion control paces it.  Access is the file's: the socket is
 * created with the process's umask, or --unix-socket-mode, in a directory
 * the operator chose.
 *
 * The path is ours only while we listen on it: a stale socket left by a
 * server that died is replaced, a live one (another server answers on it)
 * or any other kind of file is never touched, and at drain the path is
 * removed only if it is still the socket this process bound.  "Stale" is
 * decided under an exclusive lock on PATH.lock, held for the life of the
 * process (the kernel drops it when the process dies, however it dies):
 * without it, a socket another server has bound but not yet put to
 * listen() refuses connections just like a dead one's, and two servers
 * started together would each take the path from the other.  The lock
 * file stays: removing it would let a third server lock a new file while
 * the second still holds the old one. */
#include "http/http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* The socket file this process bound, to remove it at drain. */
static char g_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static dev_t g_dev;
static ino_t g_ino;
static int g_lock = -1; /* PATH.lock, flock()ed while we serve on PATH */

static int unix_addr(const char *path, struct sockaddr_un *a)
{
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (!*path || strlen(path) >= sizeof a->sun_path)
    return -1;
  memcpy(a->sun_path, path, strlen(path) + 1);
  return 0;
}

int srv_unix_connect(const char *path, int timeout_s)
{
  struct sockaddr_un a;
  struct timeval tv = {timeout_s, 0};
  int fd;

  if (unix_addr(path, &a) != 0) {
    errno = ENAMETOOLONG;
    return -1;
  }
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* A socket file at path: refuse when a server answers on it (connect
 * succeeds); remove it when nothing listens (ECONNREFUSED: its server is
 * gone).  Anything else at path is refused. */
static int clear_stale(const char *path, char *msg, size_t cap)
{
  struct stat st;
  int fd;

  if (lstat(path, &st) != 0) {
    if (errno == ENOENT)
      return 0;
    snprintf(msg, cap, "--unix-socket %s: %s", path, strerror(errno));
    return -1;
  }
  if (!S_ISSOCK(st.st_mode)) {
    snprintf(msg, cap,
             "--unix-socket %s: the path exists and is not a socket; "
             "not replacing it",
             path);
    return -1;
  }
  fd = srv_unix_connect(path, 1);
  if (fd >= 0) {
    close(fd);
    snprintf(msg, cap,
             "--unix-socket %s: another server is listening on this socket",
             path);
    return -1;
  }
  if (errno != ECONNREFUSED) {
    snprintf(msg, cap, "--unix-socket %s: %s", path, strerror(errno));
    return -1;
  }
  if (unlink(path) != 0 && errno != ENOENT) {
    snprintf(msg, cap, "--unix-socket %s: cannot remove the stale socket: %s",
             path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Lock PATH.lock for the life of the process, or say who holds it. */
static int take_lock(const char *path, char *msg, size_t cap)
{
  char lock[sizeof g_path + 8];

  snprintf(lock, sizeof lock, "%s.lock", path);
  g_lock = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (g_lock < 0) {
    snprintf(msg, cap, "--unix-socket %s: cannot open the lock file %s: %s",
             path, lock, strerror(errno));
    return -1;
  }
  if (flock(g_lock, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      snprintf(msg, cap,
               "--unix-socket %s: another server is listening on this "
               "socket, or starting to (it holds %s)",
               path, lock);
    else
      snprintf(msg, cap, "--unix-socket %s: cannot lock %s: %s", path, lock,
               strerror(errno));
    close(g_lock);
    g_lock = -1;
    return -1;
  }
  return 0;
}

int srv_unix_listen(const char *path, int mode, int backlog, char *msg,
                    size_t cap)
{
  struct sockaddr_un a;
  struct stat st;
  mode_t old_mask = 0;
  int fd, rc;

  if (unix_addr(path, &a) != 0) {
    snprintf(msg, cap, "--unix-socket %s: not a valid socket path", path);
    return -1;
  }
  if (take_lock(path, msg, cap) != 0)
    return -1;
  if (clear_stale(path, msg, cap) != 0)
    goto fail;
  /* Non-blocking: accept.c accepts on it until the queue is empty. */
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(msg, cap, "--unix-socket %s: socket: %s", path, strerror(errno));
    goto fail;
  }
  /* bind creates the file with 0777 less the umask: a umask made of the
   * mode's complement gives it the mode from the start, with no chmod by
   * name afterwards (which a symlink put in its place would redirect).
   * The umask is the process's, but no other thread creates files. */
  if (mode >= 0)
    old_mask = umask((mode_t)(~mode & 0777));
  rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  if (mode >= 0)
    umask(old_mask);
  if (rc != 0) {
    snprintf(msg, cap, "--unix-socket %s: %s", path, strerror(errno));
    close(fd);
    goto fail;
  }
  if (listen(fd, backlog) != 0 || lstat(path, &st) != 0) {
    snprintf(msg, cap, "--unix-socket %s: %s", path, strerror(errno));
    close(fd);
    unlink(path); /* the file bind just made */
    goto fail;
  }
  if (!S_ISSOCK(st.st_mode)) { /* replaced under us: not ours to remove */
    snprintf(msg, cap, "--unix-socket %s: replaced while starting", path);
    close(fd);
    goto fail;
  }
  memcpy(g_path, path, strlen(path) + 1);
  g_dev = st.st_dev;
  g_ino = st.st_ino;
  return fd;
fail:
  close(g_lock);
  g_lock = -1;
  return -1;
}

void srv_unix_remove(void)
{
  struct stat st;

  if (!g_path[0])
    return;
  /* Only the file we bound: an operator (or a new server) may have put
   * something else there since. */
  if (lstat(g_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == g_dev &&
      st.st_ino == g_ino)
    unlink(g_path);
  g_path[0] = '\0';
  if (g_lock >= 0) /* after the unlink: the next server may take the path */
    close(g_lock);
  g_lock = -1;
}
