/* bare-server.c: the yardstick of the service benchmark -- a bare
 * libmicrohttpd server that reads any request body and answers a fixed
 * body (the bytes of one real attnbiasd response, read from a file) with
 * the same threading mode as attnbiasd.  Whatever attnbiasd does beyond
 * this (parsing, computing, encoding, metrics) is what the ratio
 * attnbiasd / bare measures.
 *
 *   bare-server [--host 127.0.0.1] [--port 0] [--threads N (MHD's pool)]
 *               --body FILE [--type application/json]
 * Prints "listening on http://HOST:PORT" on stdout; exits on SIGTERM or
 * SIGINT.  Loopback by default; for benchmarks only. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../server/http/mhd-tuning.h"

static volatile sig_atomic_t g_stop;
static char *g_body;
static size_t g_len;
static const char *g_type = "application/json";

static void on_signal(int sig)
{
  (void)sig;
  g_stop = 1;
}

/* Consume the body as it arrives; answer once it is complete.  The
 * response is created per request from the shared buffer (persistent: MHD
 * neither copies nor frees it), as cheaply as MHD allows. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *conn,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
  static int marker;
  struct MHD_Response *resp;
  enum MHD_Result ret;

  (void)cls;
  (void)url;
  (void)method;
  (void)version;
  (void)upload;
  if (*con_cls == NULL) {
    *con_cls = &marker; /* first call: headers only */
    return MHD_YES;
  }
  if (*upload_size) {
    *upload_size = 0; /* discard the bytes */
    return MHD_YES;
  }
  resp = MHD_create_response_from_buffer(g_len, g_body,
                                         MHD_RESPMEM_PERSISTENT);
  if (!resp)
    return MHD_NO;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, g_type);
  ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return ret;
}

static char *slurp(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  char *s = NULL;
  long n;

  if (!f)
    return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
      fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1)) &&
      fread(s, 1, (size_t)n, f) == (size_t)n) {
    *len = (size_t)n;
  } else {
    free(s);
    s = NULL;
  }
  fclose(f);
  return s;
}

int main(int argc, char **argv)
{
  const char *host = "127.0.0.1", *body = NULL;
  int port = 0, threads = 2, i;
  unsigned int flags;
  struct sockaddr_in sa;
  struct MHD_Daemon *d;
  const union MHD_DaemonInfo *info;

  for (i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--host") == 0)
      host = argv[i + 1];
    else if (strcmp(argv[i], "--port") == 0)
      port = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--threads") == 0)
      threads = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--body") == 0)
      body = argv[i + 1];
    else if (strcmp(argv[i], "--type") == 0)
      g_type = argv[i + 1];
    else
      break;
  }
  if (i != argc || !body || port < 0 || port > 65535 || threads < 1 ||
      threads > 256) {
    fprintf(stderr, "usage: bare-server [--host H] [--port P] [--threads N] "
                    "--body FILE [--type CONTENT_TYPE]\n");
    return 2;
  }
  if (!(g_body = slurp(body, &g_len))) {
    fprintf(stderr, "bare-server: cannot read %s\n", body);
    return 1;
  }
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
    fprintf(stderr, "bare-server: --host %s is not an IPv4 address\n", host);
    return 2;
  }
  /* The threading mode of attnbiasd (server/http/mhd.c): MHD's own pool
   * of polling threads with epoll, suspend/resume enabled (it changes how
   * MHD wakes its threads), the same per-connection memory. */
  flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
          MHD_ALLOW_SUSPEND_RESUME;
  d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handle, NULL,
                       MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                       MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)threads,
                       MHD_OPTION_CONNECTION_LIMIT, 1024u,
                       MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                       MHD_OPTION_CONNECTION_MEMORY_LIMIT, SRV_MHD_CONN_MEMORY,
                       MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, "bare-server: cannot start on %s:%d\n", host, port);
    return 1;
  }
  info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  printf("listening on http://%s:%u\n", host,
         info ? (unsigned)info->port : (unsigned)port);
  fflush(stdout);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  while (!g_stop)
    usleep(100000); /* no race between the check and a pause() */
  MHD_stop_daemon(d);
  free(g_body);
  return 0;
}
