/* metrics.h: the service's counters (metrics.c, all thread-safe and
 * lock-free), recorded by http/ and the call pipeline, and their Prometheus
 * text. */
#ifndef SRV_METRICS_H
#define SRV_METRICS_H

#include "srv.h"

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

/* Open connections (accepted, not closed) by what they are doing. */
enum srv_conn_state {
  SRV_CONN_HEADERS, /* a request's headers are coming (a new connection:
                     * its first request) */
  SRV_CONN_IDLE,    /* kept alive after an answer, nothing sent since */
  SRV_CONN_BODY,    /* a request's body is coming */
  SRV_CONN_BUSY,    /* a request is computed or answered */
  SRV_CONN_STATES_
};

/* The gauges the renderer is given by the server that owns them. */
struct srv_gauges {
  int inflight;    /* requests begun and not yet completed */
  int queue_depth; /* admitted and not finished */
  int lingering;   /* answered, their refused body drained */
  int conns[SRV_CONN_STATES_]; /* open connections by state */
};

/* Prometheus text exposition (format 0.0.4) of the counters and g into
 * out.  0, or -1 when out ran out of room. */
int srv_metrics_render(struct srv_buf *out, const struct srv_gauges *g);

#endif /* SRV_METRICS_H */
