/* tls.c: HTTPS -- the certificate and key of --tls-cert/--tls-key served
 * through libmicrohttpd's own TLS (GnuTLS), and their reload on SIGHUP.
 *
 * libmicrohttpd would take the PEM text once, at start.  To replace it
 * while connections are open, the daemon is given a certificate callback
 * instead (MHD_OPTION_HTTPS_CERT_CALLBACK), and the certificate and key
 * live in a reference-counted `struct cert_set`:
 *   - g_current holds one reference to the set new connections get;
 *   - each connection takes one when it is accepted (MHD's connection
 *     notification, kept in its socket context) and drops it when it is
 *     closed, after libmicrohttpd has freed its GnuTLS session -- which
 *     keeps pointers to the set it was handed;
 *   - the callback hands a handshake the set of its connection.
 * A reload builds a new set, swaps it in and drops g_current's reference
 * to the old one, which is freed when its last connection closes: an open
 * keep-alive connection keeps working on the certificate it began with,
 * a new one gets the new certificate, and nothing is freed under a
 * handshake.  A reload that fails (a file missing, a key that is not the
 * certificate's) changes nothing. */
#include "http/http.h"

#include <errno.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* TLS 1.3 and 1.2 only; for 1.2 only forward-secret ECDHE key exchange
 * with AEAD ciphers (AES-GCM, ChaCha20-Poly1305): the "intermediate"
 * profile of current server guides, minus the finite-field DHE suites.
 * The server's order of preference wins. */
const char srv_tls_priorities[] =
    "SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:"
    "-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305:"
    "-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:%SERVER_PRECEDENCE";

/* A certificate file holds the server's certificate and the intermediates
 * that lead to its CA: a handful in practice. */
#define MAX_CHAIN 16
/* PEM files larger than this are not certificates or keys. */
#define MAX_PEM_BYTES ((size_t)1 << 20)

struct cert_set {
  _Atomic int refs;
  unsigned ncerts;
  gnutls_pcert_st certs[MAX_CHAIN];
  gnutls_privkey_t key;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cert_set *g_current; /* under g_lock; holds a reference */

static void set_free(struct cert_set *s)
{
  unsigned i;

  for (i = 0; i < s->ncerts; i++)
    gnutls_pcert_deinit(&s->certs[i]);
  if (s->key)
    gnutls_privkey_deinit(s->key);
  free(s);
}

static void set_release(struct cert_set *s)
{
  if (s && atomic_fetch_sub(&s->refs, 1) == 1)
    set_free(s);
}

/* The set new connections get, with a reference for the caller. */
static struct cert_set *set_acquire(void)
{
  struct cert_set *s;

  pthread_mutex_lock(&g_lock);
  s = g_current;
  if (s)
    atomic_fetch_add(&s->refs, 1);
  pthread_mutex_unlock(&g_lock);
  return s;
}

/* The message of a failure into msg; -1 for `return FAIL(...)`. */
#define FAIL(...) (snprintf(msg, cap, __VA_ARGS__), -1)

/* The whole of a PEM file into d (the caller frees d->data). */
static int read_pem(const char *flag, const char *path, gnutls_datum_t *d,
                    char *msg, size_t cap)
{
  FILE *f = fopen(path, "rb");
  size_t n = 0, got;
  unsigned char *buf;

  d->data = NULL;
  d->size = 0;
  if (!f)
    return FAIL("%s: cannot open '%s': %s", flag, path, strerror(errno));
  buf = malloc(MAX_PEM_BYTES + 1);
  if (!buf) {
    fclose(f);
    return FAIL("%s: out of memory reading '%s'", flag, path);
  }
  while (n <= MAX_PEM_BYTES &&
         (got = fread(buf + n, 1, MAX_PEM_BYTES + 1 - n, f)) > 0)
    n += got;
  if (ferror(f)) {
    int e = errno;
    fclose(f);
    free(buf);
    return FAIL("%s: cannot read '%s': %s", flag, path, strerror(e));
  }
  fclose(f);
  if (n > MAX_PEM_BYTES) {
    free(buf);
    return FAIL("%s: '%s' is larger than %zu bytes; it is not a "
                "PEM certificate or key",
                flag, path, MAX_PEM_BYTES);
  }
  d->data = buf;
  d->size = (unsigned)n;
  return 0;
}

/* 0 when the private key is the one of the certificate's public key
 * (their key IDs, hashes of the public key, are equal). */
static int key_matches_cert(gnutls_privkey_t key, gnutls_pcert_st *cert)
{
  unsigned char a[64], b[64];
  size_t na = sizeof a, nb = sizeof b;
  gnutls_pubkey_t pub;
  int rc = -1;

  if (gnutls_pubkey_init(&pub) < 0)
    return -1;
  if (gnutls_pubkey_import_privkey(pub, key, 0, 0) == 0 &&
      gnutls_pubkey_get_key_id(pub, GNUTLS_KEYID_USE_SHA256, a, &na) == 0 &&
      gnutls_pubkey_get_key_id(cert->pubkey, GNUTLS_KEYID_USE_SHA256, b,
                               &nb) == 0 &&
      na == nb && memcmp(a, b, na) == 0)
    rc = 0;
  gnutls_pubkey_deinit(pub);
  return rc;
}

/* "subject ..., valid until YYYY-MM-DD" of the set's first certificate, for
 * the log (which certificate is served, and for how long). */
static void describe(const struct cert_set *s, char *out, size_t cap)
{
  gnutls_x509_crt_t crt;
  gnutls_datum_t dn = {NULL, 0};
  time_t until;
  struct tm tm;
  char date[32] = "?";

  snprintf(out, cap, "?");
  if (gnutls_x509_crt_init(&crt) < 0)
    return;
  if (gnutls_x509_crt_import(crt, &s->certs[0].cert, GNUTLS_X509_FMT_DER) ==
      0) {
    until = gnutls_x509_crt_get_expiration_time(crt);
    if (until != (time_t)-1 && gmtime_r(&until, &tm))
      strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &tm);
    if (gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0) {
      snprintf(out, cap, "'%s' (%u in the chain), valid until %s",
               (const char *)dn.data, s->ncerts, date);
      gnutls_free(dn.data);
    }
  }
  gnutls_x509_crt_deinit(crt);
}

/* Read --tls-cert and --tls-key into a new set (one reference). */
static struct cert_set *load_set(char *msg, size_t cap)
{
  struct cert_set *s = calloc(1, sizeof *s);
  gnutls_datum_t pem = {NULL, 0};
  unsigned n = MAX_CHAIN;
  int rc;

  if (!s) {
    snprintf(msg, cap, "out of memory loading the TLS certificate");
    return NULL;
  }
  atomic_init(&s->refs, 1);
  if (read_pem("--tls-cert", srv_cfg.tls_cert, &pem, msg, cap) != 0)
    goto fail;
  rc = gnutls_pcert_list_import_x509_raw(s->certs, &n, &pem,
                                         GNUTLS_X509_FMT_PEM, 0);
  free(pem.data);
  if (rc == GNUTLS_E_SHORT_MEMORY_BUFFER) {
    snprintf(msg, cap, "--tls-cert: '%s' holds more than %d certificates",
             srv_cfg.tls_cert, MAX_CHAIN);
    goto fail;
  }
  if (rc < 0 || n == 0) {
    snprintf(msg, cap, "--tls-cert: '%s' is not a PEM certificate: %s",
             srv_cfg.tls_cert, rc < 0 ? gnutls_strerror(rc) : "none found");
    goto fail;
  }
  s->ncerts = n;

  if (read_pem("--tls-key", srv_cfg.tls_key, &pem, msg, cap) != 0)
    goto fail;
  rc = gnutls_privkey_init(&s->key);
  if (rc == 0)
    rc = gnutls_privkey_import_x509_raw(s->key, &pem, GNUTLS_X509_FMT_PEM,
                                        NULL, 0);
  free(pem.data);
  if (rc < 0) {
    snprintf(msg, cap,
             "--tls-key: '%s' is not an unencrypted PEM private key: %s",
             srv_cfg.tls_key, gnutls_strerror(rc));
    goto fail;
  }
  if (key_matches_cert(s->key, &s->certs[0]) != 0) {
    snprintf(msg, cap,
             "--tls-key: '%s' is not the private key of the certificate in "
             "--tls-cert '%s' (its first one)",
             srv_cfg.tls_key, srv_cfg.tls_cert);
    goto fail;
  }
  return s;

fail:
  set_free(s);
  return NULL;
}

/* Make s the set new connections get. */
static void install(struct cert_set *s)
{
  struct cert_set *old;

  pthread_mutex_lock(&g_lock);
  old = g_current;
  g_current = s;
  pthread_mutex_unlock(&g_lock);
  set_release(old);
}

int srv_tls_enabled(void)
{
  return srv_cfg.tls_cert[0] != '\0';
}

int srv_tls_start(char *msg, size_t cap)
{
  struct cert_set *s;
  char what[600];

  if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
      MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES)
    return FAIL("--tls-cert: this libmicrohttpd (%s) was built without "
                "TLS support (GnuTLS); HTTPS is not available",
                MHD_get_version());
  s = load_set(msg, cap);
  if (!s)
    return -1;
  describe(s, what, sizeof what);
  install(s);
  srv_log("TLS: serving certificate %s", what);
  return 0;
}

int srv_tls_reload(char *msg, size_t cap)
{
  struct cert_set *s = load_set(msg, cap);
  char what[600];

  if (!s)
    return -1;
  describe(s, what, sizeof what);
  install(s);
  snprintf(msg, cap, "new connections get certificate %s", what);
  return 0;
}

void srv_tls_stop(void)
{
  install(NULL);
}

/* ---------------------------------------------------------------------
 * The daemon's side
 * --------------------------------------------------------------------- */

void *srv_tls_conn_acquire(void)
{
  return srv_tls_enabled() ? set_acquire() : NULL;
}

void srv_tls_conn_release(void *set)
{
  set_release(set);
}

/* GnuTLS asks for the certificate of a handshake: the set its connection
 * took when it was accepted (libmicrohttpd makes the connection the
 * session's pointer). */
static int on_certificate(gnutls_session_t session,
                          const gnutls_datum_t *req_ca_dn, int nreqs,
                          const gnutls_pk_algorithm_t *pk_algos,
                          int pk_algos_length, gnutls_pcert_st **pcert,
                          unsigned int *pcert_length,
                          gnutls_privkey_t *privkey)
{
  struct MHD_Connection *conn = gnutls_session_get_ptr(session);
  const union MHD_ConnectionInfo *ci;
  struct cert_set *s;

  (void)req_ca_dn;
  (void)nreqs;
  (void)pk_algos;
  (void)pk_algos_length;
  ci = conn ? MHD_get_connection_info(conn,
                                      MHD_CONNECTION_INFO_SOCKET_CONTEXT)
            : NULL;
  s = ci ? srv_conn_tls(ci->socket_context) : NULL;
  if (!s)
    return -1; /* the handshake fails; the connection is closed */
  *pcert = s->certs;
  *pcert_length = s->ncerts;
  *privkey = s->key;
  return 0;
}

void srv_tls_daemon_options(struct MHD_OptionItem *items)
{
  items[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
                                     (void *)on_certificate};
  items[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                     (void *)srv_tls_priorities};
  items[2] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}
