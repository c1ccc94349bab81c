/* mhd.c: the libmicrohttpd glue -- the daemon, a request's life on the HTTP
 * side (limits, framing, routing, auth, admission, collecting the body,
 * suspend/resume around the pool, sending), drain and stop.
 *
 * A request's record (struct srv_req) is reference-counted: MHD holds one
 * reference from the first access-handler call until its completion
 * notification, and the pool holds one while the call is on it, so that
 * neither side can free it under the other.  The connection is suspended
 * before the call is handed to the pool and resumed, from the loop thread,
 * once its response is ready; MHD then calls the access handler again and
 * the response is queued there.  A large binary attention body is handed
 * to the pool while it still arrives instead (try_early): its pieces run
 * as their bytes come in, and its streamed answer is queued at the body's
 * end. */
#include "http/http.h"
#include "http/mhd-tuning.h"
#include "work/work.h"

#include <microhttpd.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A request refused on its headers (401, 404, 413, 415, 503, ...) may
 * have a body on the way.  It is answered at once, the answer says
 * Connection: close, and the connection ends with a bounded lingering
 * close (guard.c): what the client still sends is read and dropped, within
 * --linger-s and --linger-mb, so that a client writing its whole body
 * before it reads -- Python's http.client and urllib, requests, most HTTP
 * clients: all but those sending Expect: 100-continue -- gets the answer
 * instead of a reset, while nobody makes the server read a large refused
 * body to its end.  A body declared at most this large is read and dropped
 * instead, and answered at its end on a connection that stays open: it
 * costs less than a new connection.  A chunked body that crosses the cap
 * mid-way -- no length told in advance -- is read on for this much more:
 * if it ends there, the 413 follows; else the connection is cut, since
 * libmicrohttpd can answer only before or after a body. */
#define SMALL_REFUSED_BODY ((unsigned long long)64 << 10)

/* A binary attention body at least this large starts computing as soon as
 * its safetensors header is in: each piece runs once the bytes it reads
 * have arrived (srv_call_start_early), so the kernel overlaps the upload
 * -- fully on a network slower than the kernel.  Smaller bodies take less
 * time to arrive than the extra bookkeeping would save. */
#define EARLY_MIN_BYTES ((unsigned long long)4 << 20)

/* Bytes MHD asks a streamed response for at a time (its send buffer). */
#define STREAM_BLOCK ((size_t)256 << 10)

enum stage {
  STAGE_BODY,    /* collecting the body */
  STAGE_DISCARD, /* refused: dropping a small body, answering at its end */
  STAGE_POOL,    /* suspended, the call is on the pool */
  STAGE_READY,   /* the response is in rq->call, to be queued */
  STAGE_SENT     /* a response has been queued */
};

struct srv_req {
  struct srv_call call;
  struct MHD_Connection *conn;
  struct srv_conn *guard; /* the connection's deadlines (guard.c) */
  _Atomic int refs;
  enum stage stage;
  int route;             /* index in the route table, -1: none */
  _Atomic int admitted;  /* holds a --max-queue slot (given back by the
                          * HTTP or the loop thread, whichever is first) */
  int close;             /* send Connection: close */
  int has_body;          /* a body follows the headers */
  int counted;           /* already in the metrics (a reject) */
  int stream_whole;      /* MHD took a streamed answer's last bytes */
  int early_run;         /* computing while the body arrives: 1 started,
                          * 0 not yet tried, -1 not for this request */
  int status;            /* status queued, 0: none */
  struct srv_err early;  /* headers of an early error (Allow, ...) */
  struct srv_buf body;
  size_t discarded;      /* body bytes read and dropped (STAGE_DISCARD) */
  size_t discard_max;    /* ... at most, else the connection is cut */
  size_t received;       /* body bytes read (the call may free the body) */
  unsigned long long length; /* Content-Length, 0: none (or chunked) */
  uint64_t t0_ns;
  uint64_t bytes_out;
  const char *origin;    /* the Origin header (CORS), or NULL */
  int preflight;         /* answered as a CORS preflight (cors_methods) */
  char cors_methods[32];
  char method[16];
  char path[256];
};

static struct MHD_Daemon *g_daemon;
static int g_port;
static _Atomic int g_draining;
static _Atomic int g_inflight; /* requests begun, not completed */
static _Atomic int g_queue;    /* admitted, not finished */
static size_t g_max_body;      /* bytes */

int srv_http_inflight(void) { return atomic_load(&g_inflight); }
int srv_http_awaited(void) { return srv_guard_awaited(); }
int srv_http_queue_depth(void) { return atomic_load(&g_queue); }
void srv_http_connections(int n[SRV_CONN_STATES_]) { srv_guard_states(n); }
int srv_http_lingering(void) { return srv_guard_lingering(); }
int srv_http_draining(void) { return atomic_load(&g_draining); }

int srv_http_metrics(struct srv_buf *out)
{
  struct srv_gauges g = {srv_http_inflight(), srv_http_queue_depth(),
                         srv_http_lingering(), {0}};

  srv_http_connections(g.conns);
  return srv_metrics_render(out, &g);
}

int srv_http_port(void) { return g_port; }

/* ---------------------------------------------------------------------
 * The request record
 * --------------------------------------------------------------------- */

static void unadmit(struct srv_req *rq)
{
  if (atomic_exchange(&rq->admitted, 0))
    atomic_fetch_sub(&g_queue, 1);
}

static void req_release(struct srv_req *rq)
{
  if (atomic_fetch_sub(&rq->refs, 1) != 1)
    return;
  unadmit(rq);
  srv_call_release(&rq->call);
  srv_buf_free(&rq->body);
  free(rq);
}

/* Take one slot of --max-queue, or fail when all are taken. */
static int admit(struct srv_req *rq)
{
  int cur = atomic_load(&g_queue);

  do {
    if (cur >= srv_cfg.max_queue)
      return -1;
  } while (!atomic_compare_exchange_weak(&g_queue, &cur, cur + 1));
  atomic_store(&rq->admitted, 1);
  return 0;
}

/* ---------------------------------------------------------------------
 * Sending
 * --------------------------------------------------------------------- */

/* MHD is done with a response (sent, or dropped with its connection):
 * drop the reference send_call took so that the bytes stay put. */
static void response_done(void *cls)
{
  req_release(cls);
}

/* "<sep><name>;dur=<ms with 3 decimals>" for ns nanoseconds (rounded to
 * the microsecond) at out; its length, 0 when it does not fit in cap
 * (with its terminating NUL).  No printf: this runs for every request. */
static size_t put_phase(char *out, size_t cap, const char *sep,
                        const char *name, uint64_t ns)
{
  uint64_t us = (ns + 500) / 1000, ms = us / 1000;
  char digits[24];
  size_t ls = strlen(sep), ln = strlen(name), nd = 0, n;

  do
    digits[nd++] = (char)('0' + ms % 10);
  while ((ms /= 10) != 0);
  n = ls + ln + 5 + nd + 4;
  if (n + 1 > cap)
    return 0;
  memcpy(out, sep, ls);
  memcpy(out + ls, name, ln);
  memcpy(out + ls + ln, ";dur=", 5);
  out += ls + ln + 5;
  while (nd)
    *out++ = digits[--nd];
  out[0] = '.';
  out[1] = (char)('0' + us / 100 % 10);
  out[2] = (char)('0' + us / 10 % 10);
  out[3] = (char)('0' + us % 10);
  out[4] = '\0';
  return n;
}

/* The Server-Timing value of a call (W3C Server Timing): how long each
 * phase that was reached took, in ms -- reading the body, decoding and
 * preparing, waiting for the pool, computing, encoding -- and the metric
 * `stream` (no duration) for a response sent while it is computed.  Empty
 * when nothing applies (an early refusal). */
static void server_timing(const struct srv_req *rq, char *out, size_t cap)
{
  const struct srv_call *c = &rq->call;
  struct {
    const char *name;
    uint64_t from, to;
  } ph[] = {
      {"read", rq->t0_ns, c->ts.body},
      {"prepare", c->ts.decode, c->ts.prepared},
      {"queue", c->ts.prepared, c->ts.run_start},
      {"compute", c->ts.run_start, c->ts.run_end},
      {"encode", c->ts.run_end ? c->ts.run_end : c->ts.prepared,
       c->ts.encoded},
  };
  /* An early call's pool is at work while its headers are made: only
   * read and prepare are known (and the pool's fields are not read). */
  size_t i, n = 0, nph = rq->early_run == 1 ? 2 : sizeof ph / sizeof ph[0];

  out[0] = '\0';
  for (i = 0; i < nph; i++) {
    size_t k;

    if (!ph[i].from || !ph[i].to || ph[i].to < ph[i].from)
      continue;
    k = put_phase(out + n, cap - n, n ? ", " : "", ph[i].name,
                  ph[i].to - ph[i].from);
    if (k == 0) {
      out[n] = '\0';
      return;
    }
    n += k;
  }
  /* A streamed response goes out while it is computed: no compute or
   * encode time can be known when the headers are sent. */
  if (c->run.stream && cap - n > 16)
    n += (size_t)snprintf(out + n, cap - n, "%sstream", n ? ", " : "");
  /* Computing began while the body arrived: pieces done by its end. */
  if (rq->early_run == 1 && cap - n > 64)
    snprintf(out + n, cap - n, "%searly;desc=\"%lld/%lld\"", n ? ", " : "",
             (long long)c->run.early_done, (long long)c->run.early_pieces);
}

/* MHD_get_connection_values callback: any Prefer header field asking for
 * handling=strict sets the call's strict mode. */
static enum MHD_Result prefer_field(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value)
{
  (void)kind;
  if (key && value && strcasecmp(key, "Prefer") == 0 &&
      srv_prefer_strict(value))
    *(int *)cls = 1;
  return MHD_YES;
}

/* Request headers every POST call reads beside its body. */
static void read_call_headers(struct srv_call *c, struct MHD_Connection *conn)
{
  c->req.content_type =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
  c->req.accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
  c->req.infer_header = MHD_lookup_connection_value(
      conn, MHD_HEADER_KIND, "Inference-Header-Content-Length");
  c->req.strict = 0;
  MHD_get_connection_values(conn, MHD_HEADER_KIND, prefer_field,
                            &c->req.strict);
}

/* The headers every response of a call carries beside its body. */
static void add_headers(struct srv_req *rq, struct MHD_Response *r)
{
  struct srv_call *c = &rq->call;
  char timing[256];

  if (c->resp.status != 204)
    MHD_add_response_header(r, "Content-Type",
                            c->resp.type ? c->resp.type
                                         : "application/octet-stream");
  srv_cors_headers(r, rq->origin, rq->preflight ? rq->cors_methods : NULL);
  /* Names made safe for a header value by srv_codec_ignore. */
  if (c->in.ignored.len)
    MHD_add_response_header(r, "X-Attnbias-Ignored", c->in.ignored.data);
  if (c->req.strict)
    MHD_add_response_header(r, "Preference-Applied", "handling=strict");
  /* Config key names: printable ASCII by construction (the key table). */
  if (c->in.cfg_used[0])
    MHD_add_response_header(r, "X-Attnbias-Config-Used", c->in.cfg_used);
  if (c->in.cfg_upstream[0])
    MHD_add_response_header(r, "X-Attnbias-Config-Upstream",
                            c->in.cfg_upstream);
  if (c->in.cfg_layer[0])
    MHD_add_response_header(r, "X-Attnbias-Config-Layer", c->in.cfg_layer);
  if (c->resp.infer_header) {
    char n[24];
    snprintf(n, sizeof n, "%zu", c->resp.infer_header);
    MHD_add_response_header(r, "Inference-Header-Content-Length", n);
  }
  server_timing(rq, timing, sizeof timing);
  if (timing[0])
    MHD_add_response_header(r, "Server-Timing", timing);
  /* Only a full queue says when to retry: a server shutting down sends
   * none, its clients should go elsewhere. */
  if (c->resp.status == 503 && rq->early.retry_after > 0) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", rq->early.retry_after);
    MHD_add_response_header(r, "Retry-After", ra);
  }
  if (c->resp.status == 405 && rq->early.allow[0])
    MHD_add_response_header(r, "Allow", rq->early.allow);
  if (c->resp.status == 401)
    MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"attnbias\"");
  /* A handler's own headers go with its own answer only, never with an
   * error that replaced it. */
  if (c->plan.custom_headers && c->resp.status >= 200 && c->resp.status < 300)
    for (int i = 0; i < c->plan.ncustom_headers; i++)
      MHD_add_response_header(r, c->plan.custom_headers[i][0],
                              c->plan.custom_headers[i][1]);
  /* While draining every response closes its connection, so that clients
   * move to another instance. */
  if (rq->close || atomic_load(&g_draining))
    MHD_add_response_header(r, "Connection", "close");
}

/* Queue the response held in rq->call (status, body, type), with the
 * headers that the status and the server's state call for.  MHD sends the
 * call's own buffers -- resp.body, then any tensor left in place by the
 * encoder (c->resp.seg) -- without a copy; the request record, and with it
 * the call, lives until MHD lets go of the response. */
static enum MHD_Result send_call(struct srv_req *rq, struct MHD_Connection *conn)
{
  struct srv_call *c = &rq->call;
  struct MHD_Response *r;
  enum MHD_Result ok;
  size_t len = c->resp.body.len;
  int i;

  atomic_fetch_add(&rq->refs, 1); /* dropped by response_done */
  if (c->resp.nseg > 0) {
    struct MHD_IoVec iov[1 + SRV_MAX_OUTPUTS];
    unsigned n = 0;

    if (c->resp.body.len) {
      iov[n].iov_base = c->resp.body.data;
      iov[n++].iov_len = c->resp.body.len;
    }
    for (i = 0; i < c->resp.nseg; i++) {
      iov[n].iov_base = c->resp.seg[i].data;
      iov[n++].iov_len = c->resp.seg[i].len;
      len += c->resp.seg[i].len;
    }
    r = MHD_create_response_from_iovec(iov, n, response_done, rq);
  } else {
    r = MHD_create_response_from_buffer_with_free_callback_cls(
        len, c->resp.body.data ? c->resp.body.data : (void *)"", response_done,
        rq);
  }
  if (!r) {
    req_release(rq);
    return MHD_NO;
  }
  add_headers(rq, r);
  ok = MHD_queue_response(conn, (unsigned)c->resp.status, r);
  MHD_destroy_response(r);
  rq->status = c->resp.status;
  rq->bytes_out = len;
  rq->stage = STAGE_SENT;
  /* The work is over once its response is queued: free the slot now
   * rather than when the client has read it all. */
  unadmit(rq);
  return ok;
}

static void notice_peer_eof(struct MHD_Connection *conn);

/* 1 when the client waits for "100 Continue" before sending its body. */
static int expects_continue(struct MHD_Connection *conn)
{
  const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Expect");

  return v && strcasecmp(v, "100-continue") == 0;
}

/* Read and drop the rest of the body -- at most SMALL_REFUSED_BODY more
 * bytes, else the connection is cut -- and send the answer in rq->call at
 * its end. */
static enum MHD_Result discard_body(struct srv_req *rq,
                                    struct MHD_Connection *conn)
{
  rq->stage = STAGE_DISCARD;
  rq->discard_max = rq->discarded + SMALL_REFUSED_BODY;
  notice_peer_eof(conn);
  return MHD_YES;
}

/* Send the answer held in rq->call instead of running the call (see
 * SMALL_REFUSED_BODY).  Without a body the answer waits for MHD's next
 * call, which comes at once: a
 * response queued with the headers would make MHD close the connection,
 * and a bodiless request need not lose its keep-alive connection for a
 * 404 or a 401.  A small declared body is read and dropped first.  Any
 * other body is not read: the answer goes out now, and the guard drains
 * what follows it before the connection closes. */
static enum MHD_Result send_early(struct srv_req *rq,
                                  struct MHD_Connection *conn)
{
  if (!rq->has_body) {
    rq->stage = STAGE_READY;
    return MHD_YES;
  }
  if (!rq->close && rq->length && rq->length <= SMALL_REFUSED_BODY &&
      !expects_continue(conn)) {
    srv_guard_body(rq->guard);
    return discard_body(rq, conn);
  }
  rq->close = 1;
  srv_guard_linger(rq->guard);
  return send_call(rq, conn);
}

/* Answer e instead of running the call: send_early. */
static enum MHD_Result send_error(struct srv_req *rq,
                                  struct MHD_Connection *conn,
                                  const struct srv_err *e)
{
  rq->early = *e;
  srv_call_fail(&rq->call, e);
  return send_early(rq, conn);
}

/* A CORS preflight: 204 with the path's methods, before the API key and
 * the method checks (a browser sends no credentials on a preflight). */
static enum MHD_Result send_preflight(struct srv_req *rq,
                                      struct MHD_Connection *conn,
                                      const char *url)
{
  struct srv_err err;

  if (srv_cors_preflight(url, rq->origin, &err, rq->cors_methods,
                         sizeof rq->cors_methods) != 0)
    return send_error(rq, conn, &err);
  rq->preflight = 1;
  rq->call.resp.status = 204;
  return send_early(rq, conn);
}

/* ---------------------------------------------------------------------
 * Checks on the headers
 * --------------------------------------------------------------------- */

struct framing {
  int n_length, n_encoding, conflict;
  const char *length;
  const char *encoding;
};

static enum MHD_Result framing_iter(void *cls, enum MHD_ValueKind kind,
                                    const char *key, size_t key_size,
                                    const char *value, size_t value_size)
{
  struct framing *f = cls;

  (void)kind;
  (void)key_size;
  (void)value_size;
  if (strcasecmp(key, "Content-Length") == 0) {
    if (f->n_length && strcmp(f->length, value ? value : "") != 0)
      f->conflict = 1;
    f->length = value ? value : "";
    f->n_length++;
  } else if (strcasecmp(key, "Transfer-Encoding") == 0) {
    f->encoding = value ? value : "";
    f->n_encoding++;
  }
  return MHD_YES;
}

/* 1 when the transfer-coding s[0..n) (optional whitespace around it) is
 * "chunked". */
static int coding_is_chunked(const char *s, size_t n)
{
  while (n && (*s == ' ' || *s == '\t')) {
    s++;
    n--;
  }
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
    n--;
  return n == 7 && strncasecmp(s, "chunked", 7) == 0;
}

/* RFC 9112 6.3: a message with both Content-Length and Transfer-Encoding,
 * or with differing Content-Lengths, is a request-smuggling vector: 400.
 * So is a Transfer-Encoding whose last coding is not "chunked" (the body
 * length cannot be known: 400); "chunked" after another coding (gzip, ...)
 * is well framed but asks for a decoding this server does not do: 501
 * (RFC 9112 6.1).  libmicrohttpd would otherwise read such a body until
 * the client closes. */
static int check_framing(struct MHD_Connection *conn, struct srv_err *err,
                         unsigned long long *length, int *has_body)
{
  struct framing f = {0, 0, 0, NULL, NULL};

  MHD_get_connection_values_n(conn, MHD_HEADER_KIND, framing_iter, &f);
  if (f.conflict)
    return srv_fail(err, 400, NULL,
                    "the request has several Content-Length headers that "
                    "disagree");
  if (f.n_length && f.n_encoding)
    return srv_fail(err, 400, NULL,
                    "the request has both Content-Length and "
                    "Transfer-Encoding; its framing is ambiguous");
  if (f.n_encoding > 1)
    return srv_fail(err, 400, NULL,
                    "the request has several Transfer-Encoding headers; "
                    "send one, \"chunked\"");
  /* libmicrohttpd recognises the value "chunked" in any case but keeps
   * trailing whitespace; anything else it does not refuse, it reads until
   * the client closes. */
  if (f.n_encoding && strcasecmp(f.encoding, "chunked") != 0) {
    const char *last = strrchr(f.encoding, ',');
    const char *tail = last ? last + 1 : f.encoding;
    if (last && coding_is_chunked(tail, strlen(tail)))
      return srv_fail(err, 501, NULL,
                      "Transfer-Encoding \"%.100s\": only \"chunked\" is "
                      "supported, not other transfer codings",
                      f.encoding);
    return srv_fail(err, 400, NULL,
                    "Transfer-Encoding \"%.100s\" is not \"chunked\"; the "
                    "body length cannot be determined",
                    f.encoding);
  }
  *length = 0;
  if (f.n_length) {
    char *end;
    *length = strtoull(f.length, &end, 10);
  }
  *has_body = f.n_encoding || *length > 0;
  return 0;
}

/* libmicrohttpd 0.9.x's edge-triggered epoll loses an end of stream that
 * is already queued when it reads the last bytes before it: a short read
 * clears its "readable" mark, and a FIN that was queued with the data
 * raises no new edge.  A client that sends headers (or part of a body) and
 * closes at once would then keep its request -- and its --max-queue slot --
 * until --timeout-s.  So while a body is expected, peek: when the peer has
 * finished sending (recv gives 0), shut our read side, which wakes epoll
 * again; MHD then reads the end of stream and closes the connection if the
 * request is incomplete, or answers it if it is complete (half-closing
 * clients keep working: no byte can follow their FIN).  One non-blocking
 * syscall per body callback; the level-triggered poll mode would avoid it
 * but measured at half the small-request rate. */
static void notice_peer_eof(struct MHD_Connection *conn)
{
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  char ch;

  if (ci && recv(ci->connect_fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
    shutdown(ci->connect_fd, SHUT_RD);
}

/* Constant-time comparison of the bearer token with the configured key:
 * the time taken depends on the lengths only, never on where they differ. */
static int key_matches(const char *given, size_t n)
{
  const char *key = srv_cfg.api_key;
  size_t klen = strlen(key), i;
  unsigned char diff = (unsigned char)(n != klen);

  for (i = 0; i < klen; i++)
    diff |= (unsigned char)(key[i] ^ (i < n ? given[i] : 0));
  return diff == 0;
}

static int check_auth(struct MHD_Connection *conn, struct srv_err *err)
{
  const char *h =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
  size_t n;

  if (!h)
    return srv_fail(err, 401, NULL,
                    "this server needs an API key: send the header "
                    "'Authorization: Bearer <key>'");
  if (strncasecmp(h, "Bearer ", 7) != 0)
    return srv_fail(err, 401, NULL,
                    "the Authorization header must use the Bearer scheme");
  h += 7;
  while (*h == ' ')
    h++;
  n = strlen(h);
  while (n && (h[n - 1] == ' ' || h[n - 1] == '\t'))
    n--;
  if (!key_matches(h, n))
    return srv_fail(err, 401, NULL, "the API key is not valid");
  return 0;
}

/* ---------------------------------------------------------------------
 * The access handler
 * --------------------------------------------------------------------- */

/* URL unescaping (MHD_OPTION_UNESCAPE_CALLBACK): libmicrohttpd's own, except
 * that a URL holding %00 is left as sent.  Decoded, the NUL would end the
 * path the handlers see early -- "/healthz%00x" read as "/healthz", "/%00"
 * as the explorer page -- so such a URL matches no route (404) instead. */
static size_t unescape_url(void *cls, struct MHD_Connection *conn, char *s)
{
  const char *p;

  (void)cls;
  (void)conn;
  for (p = s; *p; p++)
    if (p[0] == '%' && p[1] == '0' && p[2] == '0')
      return strlen(s);
  return MHD_http_unescape(s);
}

/* The connection's record in guard.c (set by on_connection). */
static struct srv_conn *conn_guard(struct MHD_Connection *conn)
{
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

  return ci ? ci->socket_context : NULL;
}

/* First call for a request: the headers are in, no byte of the body has
 * been read.  Every refusal the headers decide happens here (see
 * send_error for what becomes of a body that follows). */
static enum MHD_Result on_headers(struct MHD_Connection *conn, const char *url,
                                  const char *method, void **con_cls)
{
  struct srv_req *rq = calloc(1, sizeof *rq);
  const struct srv_route *route;
  unsigned long long length = 0;
  int has_body = 0;
  struct srv_err err;
  size_t ntab, i;

  if (!rq)
    return MHD_NO;
  atomic_init(&rq->refs, 1);
  rq->conn = conn;
  rq->guard = conn_guard(conn);
  rq->route = -1;
  rq->t0_ns = srv_now_ns();
  srv_guard_busy(rq->guard); /* the headers are in */
  srv_strcpy(rq->method, sizeof rq->method, method);
  srv_strcpy(rq->path, sizeof rq->path, url);
  /* The path is unescaped (%0A is a newline): keep log lines whole. */
  for (i = 0; rq->path[i]; i++)
    if ((unsigned char)rq->path[i] < 0x20 || rq->path[i] == 0x7f)
      rq->path[i] = '?';
  srv_buf_init(&rq->body, g_max_body);
  *con_cls = rq;
  atomic_fetch_add(&g_inflight, 1);

  route = srv_route_find(method, url, &err);
  srv_call_init(&rq->call, route);
  if (route)
    rq->route = (int)(route - srv_route_table(&ntab));
  else if (err.http == 405)
    rq->route = srv_route_path_index(url);

  if (check_framing(conn, &err, &length, &has_body) != 0) {
    /* Where the body ends is unknown: nothing can follow the answer. */
    rq->close = 1;
    rq->has_body = 1;
    srv_metrics_reject(SRV_REJECT_BAD_FRAMING);
    return send_error(rq, conn, &err);
  }
  rq->has_body = has_body;
  rq->length = length;
  rq->origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
  if (srv_cors_is_preflight(
          method, rq->origin,
          MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                      "Access-Control-Request-Method")))
    return send_preflight(rq, conn, url);
  if (!route)
    return send_error(rq, conn, &err);
  if (atomic_load(&g_draining) && strcmp(route->path, "/healthz") != 0 &&
      strcmp(route->path, "/v2/health/live") != 0) {
    srv_fail(&err, 503, NULL,
             "the server is shutting down; send the request elsewhere");
    srv_metrics_reject(SRV_REJECT_DRAINING);
    return send_error(rq, conn, &err);
  }
  if (srv_cfg.api_key[0] && !(route->flags & SRV_ROUTE_PUBLIC) &&
      check_auth(conn, &err) != 0) {
    srv_metrics_reject(SRV_REJECT_UNAUTHORIZED);
    return send_error(rq, conn, &err);
  }
  if (length > g_max_body) {
    srv_fail(&err, 413, NULL,
             "the body has %llu bytes, more than this server's "
             "--max-body-mb %g",
             length, srv_cfg.max_body_mb);
    srv_metrics_reject(SRV_REJECT_BODY_TOO_LARGE);
    return send_error(rq, conn, &err);
  }
  if (!(route->flags & SRV_ROUTE_BODY) && has_body) {
    /* Refused before it is read: a body nobody reads would still be held
     * (outside --max-queue, which counts only computing routes). */
    if (length)
      srv_fail(&err, 400, NULL,
               "%s %s takes no request body; this one declares %llu bytes "
               "(Content-Length)",
               route->method, route->path, length);
    else
      srv_fail(&err, 400, NULL,
               "%s %s takes no request body; this one is chunked "
               "(Transfer-Encoding)",
               route->method, route->path);
    return send_error(rq, conn, &err);
  }
  if ((route->flags & SRV_ROUTE_BODY) &&
      srv_codec_check_media(
          route, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                             "Content-Type"),
          MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept"),
          &err) != 0)
    return send_error(rq, conn, &err); /* 415, 406 */
  if ((route->flags & SRV_ROUTE_BODY) && admit(rq) != 0) {
    srv_fail(&err, 503, NULL,
             "the work queue is full (%d requests admitted, --max-queue); "
             "retry later",
             srv_cfg.max_queue);
    err.retry_after = 1;
    srv_metrics_reject(SRV_REJECT_QUEUE_FULL);
    return send_error(rq, conn, &err);
  }
  /* The declared length is within the cap: take it at once rather than
   * growing by doubling (untouched pages cost nothing until written). */
  if (length && srv_buf_reserve(&rq->body, (size_t)length) != 0) {
    srv_fail(&err, 500, NULL, "cannot allocate %llu bytes for the body",
             length);
    return send_error(rq, conn, &err);
  }
  rq->stage = STAGE_BODY;
  if (has_body) {
    srv_guard_body(rq->guard);
    notice_peer_eof(conn);
  }
  return MHD_YES;
}

/* Loop thread: the pool finished the call; its response is in rq->call. */
static void on_pool_done(struct srv_call *c, void *arg)
{
  struct srv_req *rq = arg;

  (void)c;
  rq->stage = STAGE_READY;
  MHD_resume_connection(rq->conn);
  req_release(rq); /* the pool's reference */
}

/* ---- streamed responses (srv_call_stream_begin) ---- */

/* MHD thread, inside stream_read: nothing to send until wake. */
static void stream_suspend(void *arg)
{
  struct srv_req *rq = arg;

  MHD_suspend_connection(rq->conn);
}

/* Pool thread: bytes are ready for a reader that suspended. */
static void stream_wake(void *arg)
{
  struct srv_req *rq = arg;

  MHD_resume_connection(rq->conn);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
  struct srv_req *rq = cls;
  long n = srv_call_stream_read(&rq->call, pos, buf, max, stream_suspend, rq);

  if (n > 0 && pos + (uint64_t)n >= srv_call_stream_length(&rq->call))
    rq->stream_whole = 1; /* MHD has the last bytes */
  /* A failure after the status line went out can only cut the body:
   * the client sees fewer bytes than Content-Length said. */
  return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : (ssize_t)n;
}

/* Loop thread: every piece of a streamed call has run (the reader was
 * woken for the last bytes, or for the failure).  The queue slot is held
 * until now, as for a call that is answered after its pool run. */
static void on_stream_done(struct srv_call *c, void *arg)
{
  struct srv_req *rq = arg;

  srv_metrics_kernel(rq->route, c->ts.kernel_seconds);
  if (atomic_load(&c->run.cancel))
    srv_log("%s %s: the client went away; the rest of its job was skipped "
            "(%.3f kernel-seconds spent)",
            rq->method, rq->path, c->ts.kernel_seconds);
  unadmit(rq);
  req_release(rq); /* the pool's reference */
}

/* Hand a streaming call to the pool and queue its response at once: MHD
 * sends its bytes as the pieces finish, suspending the connection while
 * it waits for more. */
static struct MHD_Response *stream_response(struct srv_req *rq)
{
  struct MHD_Response *r;

  atomic_fetch_add(&rq->refs, 1); /* dropped by response_done */
  r = MHD_create_response_from_callback(srv_call_stream_length(&rq->call),
                                        STREAM_BLOCK, stream_read, rq,
                                        response_done);
  if (!r) {
    req_release(rq);
    return NULL;
  }
  add_headers(rq, r);
  return r;
}

static enum MHD_Result stream_queue(struct srv_req *rq,
                                    struct MHD_Connection *conn,
                                    struct MHD_Response *r)
{
  enum MHD_Result ok =
      MHD_queue_response(conn, (unsigned)rq->call.resp.status, r);

  MHD_destroy_response(r);
  rq->status = rq->call.resp.status;
  rq->bytes_out = srv_call_stream_length(&rq->call);
  rq->stage = STAGE_SENT;
  return ok;
}

static enum MHD_Result stream_call(struct srv_req *rq,
                                   struct MHD_Connection *conn)
{
  /* The headers are made before the pool can touch the call (it writes
   * c->ts, kernel_seconds included). */
  struct MHD_Response *r = stream_response(rq);

  if (!r)
    return MHD_NO;
  atomic_fetch_add(&rq->refs, 1); /* the pool's */
  if (srv_call_submit(&rq->call, on_stream_done, rq) != 0) {
    req_release(rq);
    MHD_destroy_response(r); /* response_done drops its reference */
    return send_call(rq, conn); /* the 503 that srv_call_submit set */
  }
  return stream_queue(rq, conn, r);
}

/* A body chunk arrived: once the safetensors header of a large body is
 * in, try to start its call while the rest arrives (EARLY_MIN_BYTES). */
static void try_early(struct srv_req *rq, struct MHD_Connection *conn)
{
  struct srv_call *c = &rq->call;
  int64_t head;

  if (!(c->req.route->flags & SRV_ROUTE_EARLY) ||
      rq->length < EARLY_MIN_BYTES) {
    rq->early_run = -1;
    return;
  }
  head = srv_codec_st_head(rq->body.data, rq->body.len, rq->length);
  if (head < 0) {
    rq->early_run = -1; /* not safetensors, or not valid: the end will tell */
    return;
  }
  if (head == 0 || rq->body.len < (uint64_t)head)
    return;
  rq->early_run = -1;
  read_call_headers(c, conn);
  /* The buffer holds the declared length (reserved with the headers), so
   * it never moves; the call must not free it (no body_buf). */
  c->req.body = rq->body.data;
  c->req.body_len = (size_t)rq->length;
  c->req.body_avail = rq->body.len;
  atomic_fetch_add(&rq->refs, 1); /* the pool's, if it starts */
  if (srv_call_start_early(c, stream_wake, rq, on_stream_done, rq))
    rq->early_run = 1;
  else
    req_release(rq); /* not the last reference: MHD holds one */
}

/* The body of an early call is complete: its answer goes out as the
 * pieces finish (or its error, if the job has already failed). */
static enum MHD_Result on_early_body_done(struct srv_req *rq,
                                          struct MHD_Connection *conn)
{
  struct MHD_Response *r;

  rq->call.ts.body = srv_now_ns();
  if (srv_call_early_end(&rq->call))
    return send_call(rq, conn);
  r = stream_response(rq);
  return r ? stream_queue(rq, conn, r) : MHD_NO;
}

/* The body is complete: run the call (inline, or suspend and hand it to
 * the pool). */
static enum MHD_Result on_body_done(struct srv_req *rq,
                                    struct MHD_Connection *conn)
{
  struct srv_call *c = &rq->call;

  c->ts.body = srv_now_ns();
  c->req.body = rq->body.data ? rq->body.data : "";
  c->req.body_len = rq->body.len;
  c->req.body_buf = rq->body.data ? &rq->body : NULL;
  read_call_headers(c, conn);

  if (srv_call_prepare(c) == 0) {
    int streaming;

    if (srv_call_is_tiny(c)) {
      srv_call_run_inline(c);
    } else if ((streaming = srv_call_stream_begin(c, stream_wake, rq)) != 0) {
      return streaming > 0 ? stream_call(rq, conn) : send_call(rq, conn);
    } else {
      /* Suspend first: the pool may finish, and resume, before
       * srv_call_submit returns. */
      atomic_fetch_add(&rq->refs, 1);
      rq->stage = STAGE_POOL;
      MHD_suspend_connection(conn);
      if (srv_call_submit(c, on_pool_done, rq) == 0)
        return MHD_YES;
      rq->stage = STAGE_READY;
      MHD_resume_connection(conn);
      req_release(rq);
      return MHD_YES; /* MHD calls again after the resume: send then */
    }
  }
  return send_call(rq, conn);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
  struct srv_req *rq = *con_cls;
  struct srv_err err;
  size_t n = *upload_size;

  (void)cls;
  (void)version;
  if (!rq)
    return on_headers(conn, url, method, con_cls);

  switch (rq->stage) {
  case STAGE_BODY:
    if (n == 0) {
      srv_guard_busy(rq->guard);
      return rq->early_run == 1 ? on_early_body_done(rq, conn)
                                : on_body_done(rq, conn);
    }
    *upload_size = 0;
    srv_guard_body_bytes(rq->guard, n);
    if (srv_buf_append(&rq->body, upload, n) == 0) {
      rq->received += n;
      if (rq->early_run == 1)
        srv_work_gate_advance(&rq->call, rq->body.len);
      else if (rq->early_run == 0 && rq->length)
        try_early(rq, conn);
      /* A complete Content-Length body needs no peek: MHD calls again
       * with 0 bytes at once. */
      if (rq->length == 0 || rq->body.len < rq->length)
        notice_peer_eof(conn);
      return MHD_YES;
    }
    if (rq->body.len + n <= g_max_body) {
      srv_log("out of memory collecting a body of %zu bytes",
              rq->body.len + n);
      return MHD_NO;
    }
    /* Only a chunked body can get here (a Content-Length over the cap was
     * refused with the headers). */
    rq->discarded = rq->body.len + n;
    srv_buf_free(&rq->body);
    srv_metrics_reject(SRV_REJECT_BODY_TOO_LARGE);
    srv_fail(&err, 413, NULL,
             "the chunked body is larger than this server's "
             "--max-body-mb %g",
             srv_cfg.max_body_mb);
    rq->early = err;
    srv_call_fail(&rq->call, &err);
    return discard_body(rq, conn);

  case STAGE_DISCARD:
    if (n == 0) {
      srv_guard_busy(rq->guard);
      return send_call(rq, conn); /* the refusal, now the body is over */
    }
    *upload_size = 0;
    srv_guard_body_bytes(rq->guard, n);
    rq->discarded += n;
    if (rq->discarded > rq->discard_max) {
      /* A chunked body going on past the cap: no answer can be sent in
       * its middle, so the connection is cut (the 413 was counted). */
      srv_log("%s %s: the chunked body goes on past --max-body-mb %g; "
              "connection cut",
              rq->method, rq->path, srv_cfg.max_body_mb);
      rq->counted = 1;
      return MHD_NO;
    }
    notice_peer_eof(conn);
    return MHD_YES;

  case STAGE_READY:
    return send_call(rq, conn);

  case STAGE_POOL:
  case STAGE_SENT:
  default:
    /* Nothing to do until the pool resumes us / MHD sends. */
    *upload_size = 0;
    return MHD_YES;
  }
}

/* The request is over (answered, or its connection is gone): log it,
 * count it, drop MHD's reference. */
static void on_completed(void *cls, struct MHD_Connection *conn,
                         void **con_cls, enum MHD_RequestTerminationCode toe)
{
  struct srv_req *rq = *con_cls;
  double secs;
  uint64_t in;
  int cut_short, cut;

  (void)cls;
  if (!rq)
    return;
  *con_cls = NULL;
  cut = srv_guard_cut(rq->guard); /* counted by guard.c */
  secs = (double)(srv_now_ns() - rq->t0_ns) * 1e-9;
  in = rq->discarded ? rq->discarded : rq->received;
  /* A streamed answer counts once MHD took its last bytes: one cut short
   * (the client gone, the drain deadline) is a rejection, although its
   * status line went out, and the pool skips what is left of its job.
   * (toe alone cannot tell: a client that closes the moment it has read a
   * whole answer often gets "error" from MHD.)  Its kernel time is counted
   * when its job ends (on_stream_done), which may come later. */
  cut_short = rq->call.run.stream && !rq->stream_whole;
  if (rq->status && !cut_short)
    srv_metrics_request(rq->route, rq->status, secs, in, rq->bytes_out);
  else if (!rq->counted && cut < 0)
    srv_metrics_reject(atomic_load(&g_draining) ? SRV_REJECT_CUT
                                                : SRV_REJECT_CLIENT_CLOSED);
  if (cut_short) {
    atomic_store(&rq->call.run.cancel, 1);
    /* An early call's items may be parked, waiting for bytes. */
    srv_work_gate_advance(&rq->call, 0);
  }
  /* Streamed and early calls count theirs when their job ends (an early
   * call that failed before its body ended has no stream any more). */
  if (!rq->call.run.stream && rq->early_run != 1)
    srv_metrics_kernel(rq->route, rq->call.ts.kernel_seconds);
  if (cut == SRV_REJECT_SLOW_UPLOAD)
    srv_log("%s %s: the body arrives too slowly (%llu bytes in %.1f s: "
            "under --body-min-rate-kb %g after --body-grace-s %g); "
            "connection closed",
            rq->method, rq->path, (unsigned long long)in, secs,
            srv_cfg.body_min_rate_kb, srv_cfg.body_grace_s);
  else if (rq->status && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
    srv_log("%s %s %d in=%llu out=%llu %.3fms", rq->method, rq->path,
            rq->status, (unsigned long long)in,
            (unsigned long long)rq->bytes_out, secs * 1e3);
  else
    srv_log("%s %s %d in=%llu out=%llu %.3fms (connection closed: %s)",
            rq->method, rq->path, rq->status, (unsigned long long)in,
            (unsigned long long)rq->bytes_out, secs * 1e3,
            toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? "timeout"
            : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN
                ? "shutdown"
                : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? "client"
                                                             : "error");
  /* A client that half-closed after its request: the same lost end of
   * stream would keep the idle keep-alive connection until --timeout-s. */
  if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
    notice_peer_eof(conn);
  /* A kept-alive connection may idle --timeout-s (libmicrohttpd's own
   * limit) before its next request; then the header deadline runs. */
  srv_guard_headers_after(rq->guard, srv_cfg.timeout_s);
  rq->guard = NULL; /* the connection may close before rq is freed */
  atomic_fetch_sub(&g_inflight, 1);
  req_release(rq);
}

/* libmicrohttpd has a request's line (its headers may still come): from
 * now on the drain waits for it (srv_guard_awaited). */
static void *on_request_line(void *cls, const char *uri,
                             struct MHD_Connection *conn)
{
  (void)cls;
  (void)uri;
  srv_guard_begun(conn_guard(conn));
  return NULL; /* on_headers makes the request's record */
}

/* libmicrohttpd took up a connection, or is about to close its socket
 * (its TLS session already freed): its record in guard.c (the socket
 * context) follows it, carrying the certificate set tls.c gave it. */
static void on_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
  (void)cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct srv_conn *c = ci ? srv_guard_open(ci->connect_fd) : NULL;

    /* Without a record the handshake finds no certificate and fails. */
    srv_conn_set_tls(c, c ? srv_tls_conn_acquire() : NULL);
    *socket_context = c;
  } else {
    srv_tls_conn_release(srv_conn_tls(*socket_context));
    srv_conn_set_tls(*socket_context, NULL);
    srv_guard_close(*socket_context);
    *socket_context = NULL;
  }
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
  char msg[512];
  size_t n;

  (void)cls;
  vsnprintf(msg, sizeof msg, fmt, ap);
  n = strlen(msg);
  while (n && msg[n - 1] == '\n')
    msg[--n] = '\0';
  srv_log("libmicrohttpd: %s", msg);
}

/* ---------------------------------------------------------------------
 * Daemon lifecycle
 * --------------------------------------------------------------------- */

int srv_http_start(void)
{
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                   MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                   MHD_USE_NO_LISTEN_SOCKET;
  char msg[512], shown[300];
  unsigned timeout, threads;
  struct MHD_OptionItem pool[2] = {{MHD_OPTION_END, 0, NULL},
                                   {MHD_OPTION_END, 0, NULL}};
  struct MHD_OptionItem tls[3] = {{MHD_OPTION_END, 0, NULL}};
  int lfd;

  /* The listening socket is ours (accept.c says why). */
  if (srv_cfg.unix_socket[0])
    lfd = srv_unix_listen(srv_cfg.unix_socket, srv_cfg.unix_socket_mode,
                          SOMAXCONN, msg, sizeof msg);
  else
    lfd = srv_listen_tcp(srv_cfg.host, srv_cfg.port, &g_port, msg,
                         sizeof msg);
  if (lfd < 0) {
    srv_log("%s", msg);
    return -1;
  }

  g_max_body = srv_cfg.max_body_mb * 1048576.0 >= (double)(SIZE_MAX / 2)
                   ? SIZE_MAX / 2
                   : (size_t)(srv_cfg.max_body_mb * 1048576.0);
  if (g_max_body == 0)
    g_max_body = 1; /* a srv_buf ceiling of 0 would mean none */
  /* MHD counts whole seconds; round up so that 0.5 does not mean "never". */
  timeout = (unsigned)srv_cfg.timeout_s;
  if ((double)timeout < srv_cfg.timeout_s)
    timeout++;
  threads = (unsigned)(srv_cfg.http_threads > 0 ? srv_cfg.http_threads : 1);
  if (threads > (unsigned)srv_cfg.max_connections)
    threads = (unsigned)srv_cfg.max_connections;

  /* HTTPS: libmicrohttpd's own TLS, the certificate from http/tls.c. */
  if (srv_tls_enabled()) {
    flags |= MHD_USE_TLS;
    srv_tls_daemon_options(tls);
  }

  /* A pool of one polling thread is no pool: MHD warns if asked for it. */
  if (threads > 1)
    pool[0] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE,
                                      (intptr_t)threads, NULL};

  if (srv_guard_start() != 0) {
    close(lfd);
    srv_unix_remove();
    return -1;
  }
  /* MHD splits its connection limit evenly over the pool: each polling
   * thread may then hold all --max-connections, which accept.c keeps, so
   * that none ever reaches its own (see accept.c).  Two more each: the
   * registry lets a connection go in the notify-connection callback, a
   * moment before its thread takes it off its own count, so a thread may
   * still count one closing connection when the next one reaches it. */
  g_daemon = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, NULL,
      /* First, so that MHD's messages about the other options use it. */
      MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
      MHD_OPTION_ARRAY, pool,
      MHD_OPTION_ARRAY, tls,
      MHD_OPTION_CONNECTION_TIMEOUT, timeout,
      MHD_OPTION_CONNECTION_LIMIT,
      ((unsigned)srv_cfg.max_connections + 2) * threads,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, SRV_MHD_CONN_MEMORY,
      MHD_OPTION_URI_LOG_CALLBACK, on_request_line, NULL,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
      MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL,
      MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      (unsigned)srv_cfg.max_connections_per_ip,
      MHD_OPTION_END);
  if (!g_daemon) {
    srv_log("cannot start libmicrohttpd");
    srv_guard_stop();
    close(lfd);
    srv_unix_remove();
    return -1;
  }
  if (srv_accept_start(lfd, g_daemon) != 0) {
    MHD_stop_daemon(g_daemon);
    g_daemon = NULL;
    srv_guard_stop();
    srv_unix_remove();
    return -1;
  }
  if (srv_cfg.unix_socket[0]) {
    g_port = 0;
    printf("%s listening on unix:%s\n", SRV_NAME, srv_cfg.unix_socket);
    fflush(stdout);
    return 0;
  }
  snprintf(shown, sizeof shown, strchr(srv_cfg.host, ':') ? "[%s]" : "%s",
           srv_cfg.host);
  printf("%s listening on %s://%s:%d\n", SRV_NAME,
         srv_tls_enabled() ? "https" : "http", shown, g_port);
  fflush(stdout);
  return 0;
}

void srv_http_drain(void)
{
  if (!g_daemon || atomic_exchange(&g_draining, 1))
    return;
  /* From here every new request is refused (503); then no new connection
   * is taken, those the kernel has queued are, and the socket closes: new
   * clients are refused by the kernel. */
  srv_accept_stop();
  /* A Unix socket's path goes with it: new clients get ENOENT at once. */
  srv_unix_remove();
}

void srv_http_stop(void)
{
  if (!g_daemon)
    return;
  srv_accept_stop(); /* (stopped already if the server drained) */
  /* No connection is suspended here: main stops the pool first, and the
   * pool resumes every connection it holds before it stops. */
  MHD_stop_daemon(g_daemon);
  g_daemon = NULL;
  srv_guard_stop(); /* what still lingers is closed */
  srv_unix_remove();
}
