/* client.c: the tiny HTTP client behind --healthcheck (Docker's
 * HEALTHCHECK runs the binary itself; the runtime image has no curl).
 * Against an HTTPS server (--tls-cert or --tls-ca given) it speaks TLS
 * through GnuTLS and verifies the server's certificate: against the CAs of
 * --tls-ca, or else against --tls-cert itself (GnuTLS trusts a certificate
 * found in its trust list as it is, so the server's own file pins what it
 * must serve, self-signed or not). */
#include "http/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* One connection to the server: plain, or TLS over the socket. */
struct hc_conn {
  int fd;
  gnutls_session_t tls;                      /* NULL: plain HTTP */
  gnutls_certificate_credentials_t cred;
};

static void hc_close(struct hc_conn *c)
{
  if (c->tls) {
    gnutls_bye(c->tls, GNUTLS_SHUT_WR);
    gnutls_deinit(c->tls);
  }
  if (c->cred)
    gnutls_certificate_free_credentials(c->cred);
  close(c->fd);
}

/* The socket is blocking with 5-second timeouts: GNUTLS_E_AGAIN is one of
 * them running out, as fatal as any other error here. */
static ssize_t hc_send(struct hc_conn *c, const char *p, size_t n)
{
  ssize_t k;

  if (!c->tls)
    return send(c->fd, p, n, MSG_NOSIGNAL);
  do
    k = gnutls_record_send(c->tls, p, n);
  while (k == GNUTLS_E_INTERRUPTED);
  return k < 0 ? -1 : k;
}

static ssize_t hc_recv(struct hc_conn *c, char *p, size_t n)
{
  ssize_t k;

  if (!c->tls)
    return recv(c->fd, p, n, 0);
  do
    k = gnutls_record_recv(c->tls, p, n);
  while (k == GNUTLS_E_INTERRUPTED);
  /* A server that closes without close_notify has still answered. */
  return k == GNUTLS_E_PREMATURE_TERMINATION ? 0 : k < 0 ? -1 : k;
}

/* 1 when host is a loopback or wildcard address: the certificate's names
 * are those clients use, not this machine's view of itself, so they are
 * not checked there (the chain still is). */
static int is_local(const char *host)
{
  return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "::1") == 0 ||
         strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0;
}

static int is_address(const char *host)
{
  unsigned char buf[sizeof(struct in6_addr)];

  return inet_pton(AF_INET, host, buf) == 1 ||
         inet_pton(AF_INET6, host, buf) == 1;
}

/* TLS handshake on c->fd, verifying the server's certificate (and its
 * name against `name` unless NULL). */
static int hc_tls(struct hc_conn *c, const char *name, const char *shown)
{
  const char *trust = srv_cfg.tls_ca[0] ? srv_cfg.tls_ca : srv_cfg.tls_cert;
  const char *flag = srv_cfg.tls_ca[0] ? "--tls-ca" : "--tls-cert";
  int rc;

  rc = gnutls_certificate_allocate_credentials(&c->cred);
  if (rc == 0) {
    rc = gnutls_certificate_set_x509_trust_file(c->cred, trust,
                                                GNUTLS_X509_FMT_PEM);
    if (rc <= 0) {
      fprintf(stderr, "%s: healthcheck: %s '%s' holds no PEM certificate "
              "to verify the server with%s%s\n", SRV_NAME, flag, trust,
              rc < 0 ? ": " : "", rc < 0 ? gnutls_strerror(rc) : "");
      return -1;
    }
  }
  if (rc >= 0)
    rc = gnutls_init(&c->tls, GNUTLS_CLIENT);
  if (rc >= 0)
    rc = gnutls_priority_set_direct(c->tls, srv_tls_priorities, NULL);
  if (rc >= 0)
    rc = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, c->cred);
  if (rc < 0) {
    fprintf(stderr, "%s: healthcheck: cannot set up TLS: %s\n", SRV_NAME,
            gnutls_strerror(rc));
    return -1;
  }
  gnutls_session_set_verify_cert(c->tls, name, 0);
  /* SNI for a name (an address literal is not one). */
  if (name && !is_address(name))
    gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, name, strlen(name));
  gnutls_transport_set_int(c->tls, c->fd);
  gnutls_handshake_set_timeout(c->tls, 5000);
  do
    rc = gnutls_handshake(c->tls);
  while (rc == GNUTLS_E_INTERRUPTED);
  if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
    gnutls_datum_t why = {NULL, 0};
    gnutls_certificate_verification_status_print(
        gnutls_session_get_verify_cert_status(c->tls),
        gnutls_certificate_type_get(c->tls), &why, 0);
    fprintf(stderr, "%s: healthcheck: %s's certificate is not trusted by "
            "%s '%s': %s\n", SRV_NAME, shown, flag, trust,
            why.data ? (const char *)why.data : "?");
    gnutls_free(why.data);
    return -1;
  }
  if (rc < 0) {
    fprintf(stderr, "%s: healthcheck: TLS handshake with %s failed: %s\n",
            SRV_NAME, shown, gnutls_strerror(rc));
    return -1;
  }
  return 0;
}

/* Send GET /healthz on fd (over TLS when the server speaks HTTPS) and read
 * the status line: 0 on a 200.  Closes fd.  name: the host name the
 * certificate must carry, NULL: not checked. */
static int ask_healthz(int fd, const char *target, const char *name,
                       const char *shown)
{
  struct hc_conn c = {fd, NULL, NULL};
  char req[512], resp[256];
  int status = 0;
  size_t got = 0;
  ssize_t n;
  int tls = srv_cfg.tls_cert[0] || srv_cfg.tls_ca[0];

  if (tls && hc_tls(&c, name, shown) != 0) {
    hc_close(&c);
    return -1;
  }
  snprintf(req, sizeof req,
           "GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
           target);
  if (hc_send(&c, req, strlen(req)) != (ssize_t)strlen(req)) {
    fprintf(stderr, "%s: healthcheck: cannot send the request\n", SRV_NAME);
    hc_close(&c);
    return -1;
  }
  /* The status line is all we need. */
  while (got < sizeof resp - 1 && !memchr(resp, '\n', got) &&
         (n = hc_recv(&c, resp + got, sizeof resp - 1 - got)) > 0)
    got += (size_t)n;
  hc_close(&c);
  resp[got] = '\0';
  if (got == 0) {
    fprintf(stderr, "%s: healthcheck: %s closed the connection without an "
            "answer%s\n", SRV_NAME, shown,
            tls ? "" : " (if it serves HTTPS, give --tls-ca or --tls-cert)");
    return -1;
  }
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
  return ask_healthz(fd, "localhost", NULL, shown);
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
  return ask_healthz(fd, target, is_local(target) ? NULL : target, shown);
}
