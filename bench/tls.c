/* tls.c: the service over HTTPS.  The binary attention request of the
 * service section is sent to an attnbiasd started with --tls-cert and, in
 * the same rounds, to the plain-HTTP one (bench_service starts both).  One
 * small client makes both requests, the only difference being GnuTLS
 * between it and the socket, so the difference of the two times is what
 * TLS costs here: the handshake, and encrypting and decrypting the 100 MB
 * body and the 33 MB answer on both sides, which share the machine's
 * cores.  The certificate is a throwaway self-signed ECDSA P-256 one made
 * with GnuTLS; the client verifies the server with it. */
#include "bench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define CHECK(expr)                                                            \
  do {                                                                         \
    if ((rc = (expr)) < 0)                                                     \
      goto done;                                                               \
  } while (0)

static int write_datum(const char *path, const gnutls_datum_t *d)
{
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(d->data, 1, d->size, f) == d->size;

  if (f && fclose(f) != 0)
    ok = 0;
  return ok ? 0 : -1;
}

int bench_tls_cert(const char *dir, char *cert, char *key, size_t cap)
{
  gnutls_x509_privkey_t pk = NULL;
  gnutls_x509_crt_t crt = NULL;
  gnutls_datum_t pem = {NULL, 0};
  unsigned char serial[8], addr[4] = {127, 0, 0, 1};
  time_t now = time(NULL);
  int rc;

  snprintf(cert, cap, "%s/tls.crt", dir);
  snprintf(key, cap, "%s/tls.key", dir);
  CHECK(gnutls_x509_privkey_init(&pk));
  CHECK(gnutls_x509_privkey_generate(
      pk, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1),
      0));
  CHECK(gnutls_x509_crt_init(&crt));
  CHECK(gnutls_x509_crt_set_version(crt, 3));
  CHECK(gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof serial));
  serial[0] &= 0x7f; /* a positive serial */
  CHECK(gnutls_x509_crt_set_serial(crt, serial, sizeof serial));
  CHECK(gnutls_x509_crt_set_activation_time(crt, now - 60));
  CHECK(gnutls_x509_crt_set_expiration_time(crt, now + 86400));
  CHECK(gnutls_x509_crt_set_dn(crt, "CN=localhost", NULL));
  CHECK(gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, addr,
                                             sizeof addr,
                                             GNUTLS_FSAN_SET));
  CHECK(gnutls_x509_crt_set_key(crt, pk));
  CHECK(gnutls_x509_crt_sign2(crt, crt, pk, GNUTLS_DIG_SHA256, 0));
  CHECK(gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &pem));
  rc = write_datum(cert, &pem);
  gnutls_free(pem.data);
  pem.data = NULL;
  if (rc < 0)
    goto done;
  CHECK(gnutls_x509_privkey_export2(pk, GNUTLS_X509_FMT_PEM, &pem));
  rc = write_datum(key, &pem);
done:
  gnutls_free(pem.data);
  if (crt)
    gnutls_x509_crt_deinit(crt);
  if (pk)
    gnutls_x509_privkey_deinit(pk);
  return rc < 0 ? -1 : 0;
}

/* ==== a client for one request, plain or TLS ============================ */

struct conn {
  int fd;
  gnutls_session_t tls; /* NULL: plain HTTP */
  gnutls_certificate_credentials_t cred;
};

static void conn_close(struct conn *c)
{
  if (c->tls)
    gnutls_deinit(c->tls);
  if (c->cred)
    gnutls_certificate_free_credentials(c->cred);
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  c->tls = NULL;
  c->cred = NULL;
}

/* Connect to 127.0.0.1:port; with ca, TLS verified against it.  A 120 s
 * limit on every send and receive. */
static int conn_open(struct conn *c, int port, const char *ca)
{
  struct sockaddr_in sa;
  struct timeval tv = {120, 0};
  int one = 1, rc;

  memset(c, 0, sizeof *c);
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0)
    return -1;
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
    goto fail;
  if (!ca)
    return 0;
  if (gnutls_certificate_allocate_credentials(&c->cred) < 0 ||
      gnutls_certificate_set_x509_trust_file(c->cred, ca,
                                             GNUTLS_X509_FMT_PEM) <= 0 ||
      gnutls_init(&c->tls, GNUTLS_CLIENT) < 0 ||
      gnutls_set_default_priority(c->tls) < 0 ||
      gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, c->cred) < 0)
    goto fail;
  gnutls_session_set_verify_cert(c->tls, "127.0.0.1", 0);
  gnutls_transport_set_int(c->tls, c->fd);
  do
    rc = gnutls_handshake(c->tls);
  while (rc == GNUTLS_E_INTERRUPTED);
  if (rc < 0) {
    printf("   TLS handshake with 127.0.0.1:%d failed: %s\n", port,
           gnutls_strerror(rc));
    goto fail;
  }
  return 0;
fail:
  conn_close(c);
  return -1;
}

static int conn_write(struct conn *c, const char *p, size_t n)
{
  while (n) {
    ssize_t w = c->tls ? gnutls_record_send(c->tls, p, n)
                       : send(c->fd, p, n, MSG_NOSIGNAL);

    if (w == GNUTLS_E_INTERRUPTED || (w < 0 && errno == EINTR && !c->tls))
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Bytes read (0: the peer closed), or -1. */
static ssize_t conn_read(struct conn *c, char *p, size_t n)
{
  for (;;) {
    ssize_t k = c->tls ? gnutls_record_recv(c->tls, p, n)
                       : recv(c->fd, p, n, 0);

    if (k == GNUTLS_E_INTERRUPTED || (k < 0 && errno == EINTR && !c->tls))
      continue;
    if (c->tls && k == GNUTLS_E_PREMATURE_TERMINATION)
      return 0;
    return k < 0 ? -1 : k;
  }
}

/* The response read into a buffer kept across requests. */
struct answer {
  char *buf;
  size_t cap, len; /* len: body bytes, at buf + head */
  size_t head;
  int status;
};

/* POST the body to /v1/attention and read the whole answer (Content-Length
 * framed, or until the server closes). */
static int post(struct conn *c, const char *body, size_t blen,
                struct answer *a)
{
  char hdr[256];
  size_t have = 0, clen = (size_t)-1;
  int n = snprintf(hdr, sizeof hdr,
                   "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Connection: close\r\n"
                   "Content-Type: application/vnd.safetensors\r\n"
                   "Accept: application/vnd.safetensors\r\n"
                   "Content-Length: %zu\r\n\r\n",
                   blen);

  a->status = 0;
  a->head = a->len = 0;
  if (conn_write(c, hdr, (size_t)n) != 0 || conn_write(c, body, blen) != 0)
    return -1;
  for (;;) {
    ssize_t k;

    if (have + 65536 > a->cap) {
      size_t want = a->cap ? a->cap * 2 : (size_t)1 << 20;
      char *nb;

      if (a->head && clen != (size_t)-1 && a->head + clen + 1 > want)
        want = a->head + clen + 1;
      nb = realloc(a->buf, want);
      if (!nb)
        return -1;
      a->buf = nb;
      a->cap = want;
    }
    k = conn_read(c, a->buf + have, a->cap - have - 1);
    if (k < 0)
      return -1;
    have += (size_t)k;
    a->buf[have] = '\0';
    if (!a->head) {
      char *e = strstr(a->buf, "\r\n\r\n"), *cl;

      if (e) {
        a->head = (size_t)(e - a->buf) + 4;
        if (sscanf(a->buf, "HTTP/1.%*d %d", &a->status) != 1)
          return -1;
        for (cl = a->buf; (cl = strchr(cl, '\n')) && cl < e; cl++)
          if (strncasecmp(cl + 1, "content-length:", 15) == 0)
            clen = strtoul(cl + 16, NULL, 10);
      }
    }
    if (a->head && clen != (size_t)-1 && have - a->head >= clen) {
      a->len = clen;
      return 0;
    }
    if (k == 0) {
      a->len = a->head ? have - a->head : 0;
      return a->head && clen == (size_t)-1 ? 0 : -1;
    }
  }
}

/* One request on a new connection: its wall time in ms (the handshake's
 * alone in *hs_ms), or -1. */
static double one_request(int port, const char *ca, const char *body,
                          size_t blen, struct answer *a, double *hs_ms,
                          char *suite, size_t suite_cap)
{
  struct conn c;
  double t0 = bench_now(), t1;
  int rc;

  if (conn_open(&c, port, ca) != 0)
    return -1;
  t1 = bench_now();
  if (hs_ms)
    *hs_ms = (t1 - t0) * 1e3;
  if (c.tls && suite)
    snprintf(suite, suite_cap, "%s %s",
             gnutls_protocol_get_name(gnutls_protocol_get_version(c.tls)),
             gnutls_cipher_get_name(gnutls_cipher_get(c.tls)));
  rc = post(&c, body, blen, a);
  t1 = bench_now();
  conn_close(&c);
  if (rc != 0 || a->status != 200) {
    printf("   POST /v1/attention on port %d%s: %s %d\n", port,
           ca ? " (TLS)" : "", rc ? "failed, status" : "answered",
           a->status);
    return -1;
  }
  return (t1 - t0) * 1e3;
}

void bench_tls_attention(int http_port, int https_port, const char *ca)
{
  const int h = 32, n = g_opt.quick ? 512 : 2048, d = 128;
  const size_t per = (size_t)h * n * d;
  float *q = bench_alloc(per * 4), *k = bench_alloc(per * 4),
        *v = bench_alloc(per * 4);
  struct bench_samples plain = {0}, tls = {0}, hs = {0};
  struct answer a = {0};
  char suite[96] = "?";
  size_t blen = 0, plain_len = 0;
  char *body;
  int r, reps = g_opt.quick ? 2 : 5;

  bench_fill(q, per, 41, 1.0f);
  bench_fill(k, per, 42, 1.0f);
  bench_fill(v, per, 43, 1.0f);
  body = bench_safetensors_qkv(q, k, v, h, n, d, &blen);
  free(q);
  free(k);
  free(v);
  if (!body) {
    bench_skip("http_attention_tls", "out of memory");
    return;
  }
  /* r = -1 warms both up; then plain and TLS alternate, their order
   * swapped every round. */
  for (r = -1; r < reps; r++) {
    int tls_first = r > 0 && r % 2;
    double ms_plain = 0, ms_tls = 0, ms_hs = 0;

    for (int i = 0; i < 2; i++) {
      if ((i == 0) == tls_first) {
        ms_tls = one_request(https_port, ca, body, blen, &a, &ms_hs, suite,
                             sizeof suite);
      } else {
        ms_plain = one_request(http_port, NULL, body, blen, &a, NULL, NULL,
                               0);
        plain_len = a.len;
      }
    }
    if (ms_plain < 0 || ms_tls < 0)
      break;
    if (a.len != plain_len) {
      printf("   the TLS answer has %zu bytes, the plain one %zu\n", a.len,
             plain_len);
      break;
    }
    if (r >= 0) {
      bench_samples_add(&plain, ms_plain);
      bench_samples_add(&tls, ms_tls);
      bench_samples_add(&hs, ms_hs);
    }
  }
  if (plain.n && plain.n == tls.n) {
    printf("   http_attention N=%d over HTTPS (%s): %.1f ms [%.1f-%.1f]; "
           "plain HTTP in the same rounds %.1f ms [%.1f-%.1f] -> %.2fx "
           "(handshake %.1f ms; %.1f MB up, %.1f MB down)\n",
           n, suite, bench_median(&tls), bench_min(&tls), bench_max(&tls),
           bench_median(&plain), bench_min(&plain), bench_max(&plain),
           bench_median(&tls) / bench_median(&plain), bench_median(&hs),
           (double)blen * 1e-6, (double)plain_len * 1e-6);
    res_begin("http_attention_tls");
    res_int("N", n);
    res_str("tls", suite);
    res_num("ms_median", bench_median(&tls));
    res_num("plain_ms_median", bench_median(&plain));
    res_num("handshake_ms", bench_median(&hs));
    res_end();
  } else {
    bench_skip("http_attention_tls", "the requests did not complete");
  }
  free(a.buf);
  free(body);
}
