/* client.c: the tiny HTTP client behind --healthcheck (Docker's
 * HEALTHCHECK runs the binary itself; the runtime image has no curl). */
#include "http/http.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Send GET /healthz on fd and read the status line: 0 on a 200. */
static int ask_healthz(int fd, const char *target, const char *shown)
{
  char req[512], resp[256];
  int status = 0;
  size_t got = 0;
  ssize_t n;

  snprintf(req, sizeof req,
           "GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
           target);
  if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
    fprintf(stderr, "%s: healthcheck: cannot send the request\n", SRV_NAME);
    close(fd);
    return -1;
  }
  /* The status line is all we need. */
  while (got < sizeof resp - 1 && !memchr(resp, '\n', got) &&
         (n = recv(fd, resp + got, sizeof resp - 1 - got, 0)) > 0)
    got += (size_t)n;
  close(fd);
  resp[got] = '\0';
  if (sscanf(resp, "HTTP/%*d.%*d %d", &status) != 1 || status != 200) {
    fprintf(stderr, "%s: healthcheck: %s answered '%.*s'\n", SRV_NAME, shown,
            (int)strcspn(resp, "\r\n"), resp);
    return -1;
  }
  return 0;
}

int srv_http_healthcheck_unix(const char *path)
{
  char shown[160];
  int fd = srv_unix_connect(path, 5);

  snprintf(shown, sizeof shown, "unix:%s", path);
  if (fd < 0) {
    fprintf(stderr, "%s: healthcheck: cannot connect to %s: %s\n", SRV_NAME,
            shown, strerror(errno));
    return -1;
  }
  return ask_healthz(fd, "localhost", shown);
}

int srv_http_healthcheck(const char *host, int port)
{
  struct addrinfo hints, *ai = NULL, *p;
  struct timeval tv = {5, 0};
  char service[16], shown[300];
  const char *target = host;
  int fd = -1, rc;

  /* A wildcard listen address is reachable on loopback. */
  if (strcmp(host, "0.0.0.0") == 0 || *host == '\0')
    target = "127.0.0.1";
  else if (strcmp(host, "::") == 0)
    target = "::1";
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  snprintf(service, sizeof service, "%d", port);
  rc = getaddrinfo(target, service, &hints, &ai);
  if (rc != 0) {
    fprintf(stderr, "%s: healthcheck: cannot resolve %s: %s\n", SRV_NAME,
            target, gai_strerror(rc));
    return -1;
  }
  for (p = ai; p; p = p->ai_next) {
    fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
    if (fd < 0)
      continue;
    /* On Linux SO_SNDTIMEO also bounds connect(). */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, p->ai_addr, p->ai_addrlen) == 0)
      break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  if (fd < 0) {
    fprintf(stderr, "%s: healthcheck: cannot connect to %s:%d\n", SRV_NAME,
            target, port);
    return -1;
  }
  snprintf(shown, sizeof shown, "%s:%d", target, port);
  return ask_healthz(fd, target, shown);
}
