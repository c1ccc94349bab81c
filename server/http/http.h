/* http.h: private to server/http/ (and main.c) -- what the MHD glue
 * (mhd.c), the connection guard (guard.c), TLS, the Unix socket and the
 * health-check client (client.c) share beyond srv.h, and the parts below
 * them they drive: a call's pipeline and the metrics. */
#ifndef SRV_HTTP_H
#define SRV_HTTP_H

#include "call/call.h"
#include "metrics/metrics.h"
#include "srv.h"

#include <stdatomic.h>
#include <stdint.h>

/* ---- mhd.c: gauges ---------------------------------------------------- */
int srv_http_inflight(void);    /* requests begun and not yet completed */
/* Connections whose request the drain waits for though it has not begun
 * (see srv_guard_awaited). */
int srv_http_awaited(void);
int srv_http_queue_depth(void); /* admitted and not finished */
/* Open connections (accepted, not closed) by what they are doing (enum
 * srv_conn_state, metrics/metrics.h). */
void srv_http_connections(int n[SRV_CONN_STATES_]);
int srv_http_lingering(void);   /* answered, their refused body drained */
/* The metrics with this server's gauges (GET /metrics, through
 * srv_probe). */
int srv_http_metrics(struct srv_buf *out);

/* ---- guard.c: deadlines and lingering close ---------------------------
 * One record per libmicrohttpd connection, from its notify-connection
 * callback: the thread of guard.c cuts (shutdown) a connection whose
 * request headers are not complete --header-timeout-s after they became
 * due, or whose body falls under --body-min-rate-kb once --body-grace-s
 * have passed; and drains a connection answered while its body still
 * comes, within --linger-s and --linger-mb, before it is closed.  Every
 * srv_guard_* taking a record does nothing with NULL. */
struct srv_conn;

int srv_guard_start(void); /* before the daemon: 0, or -1 (logged) */
void srv_guard_stop(void); /* after it: closes what still lingers */
/* The registry counts every connection from its accept to its close.
 * srv_guard_room: 1 when fewer than max are open; else 0, and wakefd
 * (an eventfd, or -1) is written to once one closes, until
 * srv_guard_room_cancel. */
int srv_guard_room(int max, int wakefd);
void srv_guard_room_cancel(void);
void srv_guard_states(int n[SRV_CONN_STATES_]); /* connections open */
/* accept.c took a connection on fd, about to be handed to libmicrohttpd:
 * its headers are due from now.  NULL when out of memory. */
struct srv_conn *srv_guard_accepted(int fd);
/* libmicrohttpd refused it (and closed fd). */
void srv_guard_refused(struct srv_conn *c);
/* libmicrohttpd took up the connection on fd (its notify-connection
 * callback): its record, NULL when out of memory (fd is then shut down:
 * libmicrohttpd drops it). */
struct srv_conn *srv_guard_open(int fd);
/* libmicrohttpd is about to close c's descriptor: c lingers if
 * srv_guard_linger was called, else it is freed. */
void srv_guard_close(struct srv_conn *c);
/* A request completed: the next one's headers are due idle_s from now
 * (the time a kept-alive connection may wait for it). */
void srv_guard_headers_after(struct srv_conn *c, double idle_s);
void srv_guard_body(struct srv_conn *c);  /* a body begins now */
void srv_guard_body_bytes(struct srv_conn *c, size_t n);
void srv_guard_busy(struct srv_conn *c);  /* no deadline of ours */
/* A request's line is in, its headers may still come. */
void srv_guard_begun(struct srv_conn *c);
/* At the drain: how many connections are still to be answered although
 * no request of theirs has reached the access handler (see guard.c). */
int srv_guard_awaited(void);
/* The connection is answered with its body unread: linger at close. */
void srv_guard_linger(struct srv_conn *c);
/* The srv_reject c was cut for, or -1. */
int srv_guard_cut(const struct srv_conn *c);
int srv_guard_lingering(void);
/* The record also carries what tls.c gave the connection at accept (its
 * certificate set), for the handshake to find. */
void srv_conn_set_tls(struct srv_conn *c, void *tls);
void *srv_conn_tls(const struct srv_conn *c);

/* ---- client.c: --healthcheck ------------------------------------------ */

/* GET /healthz from host:port (a wildcard host means loopback) with a
 * 5-second limit.  Returns 0 when the answer is 200, else -1 (with a line
 * on stderr saying why). */
int srv_http_healthcheck(const char *host, int port);
/* The same over the Unix-domain socket at path (--unix-socket). */
int srv_http_healthcheck_unix(const char *path);

/* ---- tls.c: HTTPS (--tls-cert, --tls-key) ---------------------------- */

struct MHD_OptionItem;

/* The GnuTLS priority string of the server and of the health check: TLS
 * 1.2 and 1.3, forward-secret AEAD suites only. */
extern const char srv_tls_priorities[];
/* 1 when the server is to speak HTTPS (srv_cfg.tls_cert is set). */
int srv_tls_enabled(void);
/* Check that libmicrohttpd has TLS, read --tls-cert and --tls-key and make
 * them the certificate new connections get.  Returns 0, or -1 with a
 * message naming the flag, the file and the reason in msg. */
int srv_tls_start(char *msg, size_t cap);
/* SIGHUP: read both files again.  Returns 0 (msg says which certificate
 * new connections now get; open connections keep theirs), or -1 with the
 * reason in msg and the certificate served unchanged. */
int srv_tls_reload(char *msg, size_t cap);
/* After the daemon has stopped: drop the current certificate. */
void srv_tls_stop(void);
/* The daemon options of HTTPS, MHD_OPTION_END-terminated, into items[3]. */
void srv_tls_daemon_options(struct MHD_OptionItem *items);
/* A connection accepted / closed (after its TLS session was freed), from
 * mhd.c's notify-connection callback: the certificate set current at
 * accept, held until close (a SIGHUP never frees one in use).  NULL when
 * HTTPS is off. */
void *srv_tls_conn_acquire(void);
void srv_tls_conn_release(void *set);

/* ---- accept.c: the listening socket and the accepting thread -------- */

struct MHD_Daemon;

/* Bind and listen on host:port (port 0: any free one, told in *bound).
 * Returns the non-blocking listening fd, or -1 with the reason in msg. */
int srv_listen_tcp(const char *host, int port, int *bound, char *msg,
                   size_t cap);
/* Accept on lfd (non-blocking, listening; ours from now on, closed by
 * srv_accept_stop even when this fails) and hand each connection to
 * daemon, which runs with MHD_USE_NO_LISTEN_SOCKET.  0, or -1 (logged). */
int srv_accept_start(int lfd, struct MHD_Daemon *daemon);
/* Stop accepting: the thread ends, the connections the kernel has queued
 * are handed over, the socket is closed.  Later calls do nothing. */
void srv_accept_stop(void);

/* ---- cors.c: browsers (--cors-origin) -------------------------------- */

struct MHD_Response;

/* 1 when --cors-origin names at least one origin. */
int srv_cors_enabled(void);
/* 1 when a request is a CORS preflight to answer (CORS on, OPTIONS with
 * the Origin and Access-Control-Request-Method headers). */
int srv_cors_is_preflight(const char *method, const char *origin,
                          const char *request_method);
/* A preflight for path from origin: 0 with the path's methods in methods
 * (for Access-Control-Allow-Methods), or -1 with err (404 for an unknown
 * path, 403 for an origin not allowed). */
int srv_cors_preflight(const char *path, const char *origin,
                       struct srv_err *err, char *methods, size_t cap);
/* The CORS headers of an answer to a request from origin (NULL: none
 * sent); preflight_methods for a preflight's answer, else NULL. */
void srv_cors_headers(struct MHD_Response *r, const char *origin,
                      const char *preflight_methods);

/* ---- unix.c: the Unix-domain socket (--unix-socket) ---------------- */

/* Bind and listen on path (replacing a stale socket left by a server that
 * is gone, never a live one or another kind of file), with permissions
 * mode (-1: as the umask makes them).  Returns the non-blocking listening
 * fd, or -1 with a message naming the flag, the path and the reason in
 * msg. */
int srv_unix_listen(const char *path, int mode, int backlog, char *msg,
                    size_t cap);
/* Remove the socket file bound by srv_unix_listen, if it is still that
 * file; later calls do nothing. */
void srv_unix_remove(void);
/* A connected stream socket to path with send/receive timeouts, or -1 with
 * errno set. */
int srv_unix_connect(const char *path, int timeout_s);

#endif /* SRV_HTTP_H */
