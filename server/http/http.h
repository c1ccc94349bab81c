/* http.h: private to server/http/ (and main.c) -- what the MHD glue
 * (mhd.c), the call pipeline (call.c), the metrics (metrics.c) and the
 * health-check client (client.c) share beyond srv.h. */
#ifndef SRV_HTTP_H
#define SRV_HTTP_H

#include "srv.h"

#include <stdatomic.h>
#include <stdint.h>

/* Why a request was turned away or cut short (attnbias_rejected_total). */
#define SRV_REJECT_MAP(X)                                                      \
  X(QUEUE_FULL, "queue_full")                                                  \
  X(BODY_TOO_LARGE, "body_too_large")                                          \
  X(UNAUTHORIZED, "unauthorized")                                              \
  X(DRAINING, "draining")                                                      \
  X(BAD_FRAMING, "bad_framing")                                                \
  X(OVER_BUDGET, "over_budget")                                                \
  X(CLIENT_CLOSED, "client_closed")                                            \
  X(CUT, "cut_at_drain_deadline")                                              \
  X(SLOW_UPLOAD, "slow_upload")                                                \
  X(HEADER_TIMEOUT, "header_timeout")                                          \
  X(LINGER_TIME, "linger_time")                                                \
  X(LINGER_BYTES, "linger_bytes")                                              \
  X(LINGER_FULL, "linger_full")                                                \
  X(PER_IP_LIMIT, "per_ip_limit")

enum srv_reject {
#define SRV_X_(name, label) SRV_REJECT_##name,
  SRV_REJECT_MAP(SRV_X_)
#undef SRV_X_
  SRV_REJECT_COUNT_
};

/* ---- call.c: a call's pipeline, knows nothing about MHD ------------- */

/* Zero c and set up its arena and buffers for `route`. */
void srv_call_init(struct srv_call *c, const struct srv_route *route);
/* Free everything c owns (jobs, params, buffers, arena); c->body is the
 * caller's. */
void srv_call_release(struct srv_call *c);
/* Make e the call's response: status and problem+json body. */
void srv_call_fail(struct srv_call *c, const struct srv_err *e);
/* Decode the body (c->body complete) and run the handler's prepare.
 * Returns 0 when the call is ready to run, -1 when its response (an error)
 * is ready in c. */
int srv_call_prepare(struct srv_call *c);
/* 1 when the prepared call's estimated flops and output bytes are small
 * enough that running it on the calling thread beats the pool hand-off. */
int srv_call_is_tiny(const struct srv_call *c);
/* Run the jobs here, then finish and encode: the response is ready. */
void srv_call_run_inline(struct srv_call *c);
/* Hand the prepared call to the pool.  Returns 0: done(c, arg) will run on
 * the loop thread once the response is ready in c; or -1: the pool refused
 * (shutting down) and the response (a 503) is ready now. */
int srv_call_submit(struct srv_call *c,
                    void (*done)(struct srv_call *c, void *arg), void *arg);

/* Streaming: a prepared call whose response is binary (safetensors, .npy)
 * made only of float32 outputs that its one job writes in place, with no
 * finish step, is encoded before it runs, and its bytes go out as the
 * pieces finish: a byte is sent once every piece that writes at or below
 * it is done (ab_job_piece_first).  Returns 1: c->stream is set, the
 * response layout (c->resp_body, c->resp_seg, status 200) is final, and
 * the call is to be submitted with srv_call_submit, whose done still comes
 * last; 0: not a streaming call (c unchanged); -1: the response could not
 * be encoded and c holds the error to send instead of running.  wake(arg)
 * will be called from a pool thread when bytes a reader waits for are
 * ready (see srv_call_stream_read). */
int srv_call_stream_begin(struct srv_call *c, void (*wake)(void *arg),
                          void *arg);
/* Copy response bytes from `pos` (at most max) into buf.  Returns the
 * count (> 0); or 0 after calling suspend(arg) when none are ready yet
 * (wake follows when some are, never before suspend returned); or -1
 * when the pieces failed and the response cannot be completed. */
long srv_call_stream_read(struct srv_call *c, uint64_t pos, char *buf,
                          size_t max, void (*suspend)(void *arg),
                          void *arg);
/* The whole response's length. */
uint64_t srv_call_stream_length(const struct srv_call *c);

/* Computing while the body arrives.  c->body points at a buffer that will
 * hold all c->body_len bytes and never moves; c->body_avail (> 0) of them
 * are in, at least the whole safetensors header.  When the route allows it
 * (SRV_ROUTE_EARLY) and the call prepares without reading tensor data
 * and streams its answer (srv_call_stream_begin), it is submitted gated:
 * each piece runs once the bytes it reads are in (the caller reports them
 * with srv_work_gate_advance).  Returns 1 then -- done(c, arg) comes as
 * for srv_call_submit, and srv_call_early_end follows the body's end;
 * else 0 with c back as srv_call_init left it (the caller re-sets the
 * request fields and prepares at the body's end as usual, reporting any
 * error then). */
int srv_call_start_early(struct srv_call *c, void (*wake)(void *arg),
                         void *wake_arg,
                         void (*done)(struct srv_call *c, void *arg),
                         void *done_arg);
/* The body of an early call is complete.  Returns 0: send the streamed
 * answer; 1: the job has already failed (cancelled: the drain deadline)
 * and c holds the error response to send instead, not streamed. */
int srv_call_early_end(struct srv_call *c);

/* ---- metrics.c: counters (all thread-safe, lock-free) ---------------- */

/* One request answered in full: route index into srv_route_table (-1 for
 * requests that matched no route), status sent, wall time and body bytes
 * both ways.  A request whose answer was cut (client gone, drain deadline)
 * counts under srv_metrics_reject instead. */
void srv_metrics_request(int route, int status, double seconds,
                         uint64_t bytes_in, uint64_t bytes_out);
/* Kernel thread-seconds spent for a route's call, once its pool work is
 * over (for a streamed call that may be after its request completed). */
void srv_metrics_kernel(int route, double kernel_seconds);
void srv_metrics_reject(enum srv_reject why);

/* ---- mhd.c: gauges read by the metrics ------------------------------- */
int srv_http_inflight(void);    /* requests begun and not yet completed */
/* Connections whose request the drain waits for though it has not begun
 * (see srv_guard_awaited). */
int srv_http_awaited(void);
int srv_http_queue_depth(void); /* admitted and not finished */
/* Open connections (accepted, not closed) by what they are doing. */
enum srv_conn_state {
  SRV_CONN_HEADERS, /* a request's headers are coming (a new connection:
                     * its first request) */
  SRV_CONN_IDLE,    /* kept alive after an answer, nothing sent since */
  SRV_CONN_BODY,    /* a request's body is coming */
  SRV_CONN_BUSY,    /* a request is computed or answered */
  SRV_CONN_STATES_
};
void srv_http_connections(int n[SRV_CONN_STATES_]);
int srv_http_lingering(void);   /* answered, their refused body drained */

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
