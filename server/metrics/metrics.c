/* metrics.c: the service's counters and their Prometheus text exposition
 * (format 0.0.4).  Every counter is a relaxed atomic: recording costs a few
 * uncontended atomic adds per request and rendering reads a snapshot that
 * may be a few requests apart between series, which Prometheus tolerates. */
#include "metrics/metrics.h"
#include "work/work.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define MAX_ROUTES 48 /* routes.def entries + 1 for "no route" */
#define NSTATUS 600   /* counters indexed by status code 0..599 */

/* Latency bucket upper bounds in seconds: 1 ms (tiny requests answered
 * inline) up to a minute (large attention), roughly x2.5 apart. */
static const double g_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                  0.05,  0.1,    0.25,  0.5,  1,
                                  2.5,   5,      10,    30,   60};
#define NBUCKETS (sizeof g_bounds / sizeof g_bounds[0])

struct route_stats {
  _Atomic uint64_t status[NSTATUS];
  _Atomic uint64_t bucket[NBUCKETS + 1]; /* last: +Inf only */
  _Atomic uint64_t count;
  _Atomic uint64_t sum_ns;
  _Atomic uint64_t kernel_ns;
};

static struct route_stats g_routes[MAX_ROUTES];
static _Atomic uint64_t g_bytes_in, g_bytes_out;
static _Atomic uint64_t g_rejected[SRV_REJECT_COUNT_];

static const char *const g_reject_label[] = {
#define SRV_X_(name, label) label,
    SRV_REJECT_MAP(SRV_X_)
#undef SRV_X_
};

/* attnbias_open_connections{state}, in the order of enum srv_conn_state. */
static const char *const conn_state_label[SRV_CONN_STATES_] = {
    "headers", "idle", "body", "busy"};

#define ADD(var, v) atomic_fetch_add_explicit(&(var), (v), memory_order_relaxed)
#define GET(var) atomic_load_explicit(&(var), memory_order_relaxed)

static uint64_t to_ns(double s)
{
  return s > 0 ? (uint64_t)(s * 1e9 + 0.5) : 0;
}

static struct route_stats *route_stats(int route)
{
  if (route < 0 || route >= MAX_ROUTES - 1)
    route = MAX_ROUTES - 1; /* "none": no route matched */
  return &g_routes[route];
}

void srv_metrics_kernel(int route, double kernel_seconds)
{
  ADD(route_stats(route)->kernel_ns, to_ns(kernel_seconds));
}

void srv_metrics_request(int route, int status, double seconds,
                         uint64_t bytes_in, uint64_t bytes_out)
{
  struct route_stats *r = route_stats(route);
  size_t b = 0;

  if (status >= 0 && status < NSTATUS)
    ADD(r->status[status], 1);
  while (b < NBUCKETS && seconds > g_bounds[b])
    b++;
  ADD(r->bucket[b], 1);
  ADD(r->count, 1);
  ADD(r->sum_ns, to_ns(seconds));
  ADD(g_bytes_in, bytes_in);
  ADD(g_bytes_out, bytes_out);
}

void srv_metrics_reject(enum srv_reject why)
{
  if ((int)why >= 0 && why < SRV_REJECT_COUNT_)
    ADD(g_rejected[why], 1);
}

/* The label of route index i: its routes.def name, "none" past the end. */
static const char *route_label(size_t i, const struct srv_route *tab,
                               size_t n)
{
  return i < n ? tab[i].name : "none";
}

int srv_metrics_render(struct srv_buf *out, const struct srv_gauges *g)
{
  size_t n, i, b, nlab;
  const struct srv_route *tab = srv_route_table(&n);
  int rc = 0, s;

  /* Label indices: the routes, then MAX_ROUTES-1 for unmatched requests
   * (srv_metrics_request files those there). */
  nlab = n < MAX_ROUTES - 1 ? n : MAX_ROUTES - 1;

  rc |= srv_buf_printf(out,
                       "# HELP attnbias_info Build information.\n"
                       "# TYPE attnbias_info gauge\n"
                       "attnbias_info{version=\"%s\",isa=\"%s\"} 1\n",
                       ab_version(), ab_isa_name());
  rc |= srv_buf_printf(out,
                       "# HELP attnbias_pool_threads Worker pool threads.\n"
                       "# TYPE attnbias_pool_threads gauge\n"
                       "attnbias_pool_threads %d\n",
                       srv_work_threads());

  rc |= srv_buf_printf(out, "# HELP attnbias_requests_total Requests "
                            "answered, by route and status.\n"
                            "# TYPE attnbias_requests_total counter\n");
  for (i = 0; i <= nlab; i++) {
    size_t idx = i < nlab ? i : MAX_ROUTES - 1;
    for (s = 0; s < NSTATUS; s++) {
      uint64_t v = GET(g_routes[idx].status[s]);
      if (v)
        rc |= srv_buf_printf(out,
                             "attnbias_requests_total{route=\"%s\","
                             "status=\"%d\"} %llu\n",
                             route_label(i, tab, nlab), s,
                             (unsigned long long)v);
    }
  }

  rc |= srv_buf_printf(out,
                       "# HELP attnbias_request_duration_seconds Time from "
                       "the request's headers to the end of its response, "
                       "by route.\n"
                       "# TYPE attnbias_request_duration_seconds histogram\n");
  for (i = 0; i <= nlab; i++) {
    size_t idx = i < nlab ? i : MAX_ROUTES - 1;
    const struct route_stats *r = &g_routes[idx];
    const char *name = route_label(i, tab, nlab);
    uint64_t cum = 0;

    if (idx == MAX_ROUTES - 1 && GET(r->count) == 0)
      continue; /* no unmatched request yet: no series */
    for (b = 0; b < NBUCKETS; b++) {
      cum += GET(r->bucket[b]);
      rc |= srv_buf_printf(out,
                           "attnbias_request_duration_seconds_bucket{route="
                           "\"%s\",le=\"%g\"} %llu\n",
                           name, g_bounds[b], (unsigned long long)cum);
    }
    cum += GET(r->bucket[NBUCKETS]);
    rc |= srv_buf_printf(
        out,
        "attnbias_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} "
        "%llu\n"
        "attnbias_request_duration_seconds_sum{route=\"%s\"} %.9f\n"
        "attnbias_request_duration_seconds_count{route=\"%s\"} %llu\n",
        name, (unsigned long long)cum, name, (double)GET(r->sum_ns) * 1e-9,
        name, (unsigned long long)cum);
  }

  rc |= srv_buf_printf(out,
                       "# HELP attnbias_inflight_requests Requests being "
                       "received, computed or sent.\n"
                       "# TYPE attnbias_inflight_requests gauge\n"
                       "attnbias_inflight_requests %d\n"
                       "# HELP attnbias_queue_depth Requests admitted to "
                       "the work queue and not finished (limit "
                       "--max-queue).\n"
                       "# TYPE attnbias_queue_depth gauge\n"
                       "attnbias_queue_depth %d\n"
                       "# HELP attnbias_pool_calls Calls on the worker "
                       "pool: waiting for a thread, computing, or waiting "
                       "for the bytes of a body still arriving.\n"
                       "# TYPE attnbias_pool_calls gauge\n"
                       "attnbias_pool_calls %d\n"
                       "# HELP attnbias_lingering_connections Connections "
                       "answered while their body still came, draining it "
                       "before they close (limit --linger-max).\n"
                       "# TYPE attnbias_lingering_connections gauge\n"
                       "attnbias_lingering_connections %d\n"
                       "# HELP attnbias_memory_kept_bytes Freed large "
                       "blocks kept resident for the next large request "
                       "(returned after 10 s unused).\n"
                       "# TYPE attnbias_memory_kept_bytes gauge\n"
                       "attnbias_memory_kept_bytes %zu\n",
                       g->inflight, g->queue_depth, srv_work_busy(),
                       g->lingering, srv_mem_kept());
  rc |= srv_buf_printf(out,
                       "# HELP attnbias_open_connections Connections "
                       "accepted and not closed, by state (limit "
                       "--max-connections; more wait in the kernel's "
                       "queue).\n"
                       "# TYPE attnbias_open_connections gauge\n");
  for (i = 0; i < SRV_CONN_STATES_; i++)
    rc |= srv_buf_printf(out, "attnbias_open_connections{state=\"%s\"} %d\n",
                         conn_state_label[i], g->conns[i]);
  rc |= srv_buf_printf(out,
                       "# HELP attnbias_bytes_received_total Request body "
                       "bytes received.\n"
                       "# TYPE attnbias_bytes_received_total counter\n"
                       "attnbias_bytes_received_total %llu\n"
                       "# HELP attnbias_bytes_sent_total Response body "
                       "bytes sent.\n"
                       "# TYPE attnbias_bytes_sent_total counter\n"
                       "attnbias_bytes_sent_total %llu\n",
                       (unsigned long long)GET(g_bytes_in),
                       (unsigned long long)GET(g_bytes_out));

  rc |= srv_buf_printf(out,
                       "# HELP attnbias_kernel_seconds_total Thread-seconds "
                       "spent in kernels, by route.\n"
                       "# TYPE attnbias_kernel_seconds_total counter\n");
  for (i = 0; i < nlab; i++)
    rc |= srv_buf_printf(out,
                         "attnbias_kernel_seconds_total{route=\"%s\"} %.9f\n",
                         tab[i].name,
                         (double)GET(g_routes[i].kernel_ns) * 1e-9);

  rc |= srv_buf_printf(out,
                       "# HELP attnbias_rejected_total Requests refused or "
                       "cut short, by reason.\n"
                       "# TYPE attnbias_rejected_total counter\n");
  for (i = 0; i < SRV_REJECT_COUNT_; i++)
    rc |= srv_buf_printf(out, "attnbias_rejected_total{reason=\"%s\"} %llu\n",
                         g_reject_label[i],
                         (unsigned long long)GET(g_rejected[i]));
  return rc ? -1 : 0;
}
