/* main.c: attnbiasd's entry point -- configuration, signals, and the order
 * in which the parts start and stop.  Nothing else lives here. */
#include "http/http.h"
#include "util/config.h"
#include "util/jsonmem.h"
#include "work/work.h"

#include <signal.h>
#include <stdio.h>
#include <time.h>

/* Wait for SIGTERM/SIGINT/SIGHUP (blocked in every thread, so they queue
 * for this one). */
static int wait_signal(const sigset_t *set, double timeout_s)
{
  struct timespec ts;
  int sig;

  if (timeout_s < 0) {
    while (sigwait(set, &sig) != 0)
      ;
    return sig;
  }
  ts.tv_sec = (time_t)timeout_s;
  ts.tv_nsec = (long)((timeout_s - (double)ts.tv_sec) * 1e9);
  sig = sigtimedwait(set, NULL, &ts);
  return sig > 0 ? sig : 0;
}

static double mono_s(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* SIGHUP: read the TLS certificate and key again (new connections get
 * them; open ones keep theirs); a reload that fails changes nothing. */
static void reload(void)
{
  char msg[1024];

  if (!srv_tls_enabled())
    srv_log("SIGHUP: nothing to reload (no --tls-cert)");
  else if (srv_tls_reload(msg, sizeof msg) == 0)
    srv_log("SIGHUP: TLS reloaded: %s", msg);
  else
    srv_log("SIGHUP: TLS reload failed, serving the previous certificate: "
            "%s", msg);
}

/* Wait up to `secs` for the open requests to end; returns how many are
 * still open (0: none). */
static int wait_idle(const sigset_t *set, double secs)
{
  double deadline = mono_s() + secs;
  int left;

  /* A call whose client went away still runs on the pool until it sees
   * it (c->run.cancel): count it too, so the drain deadline holds.  So
   * do refused connections still lingering (at most --linger-s): their
   * clients, still sending, get the 503 rather than a reset.  And so do
   * connections whose request has not reached the handler yet -- sent but
   * unread, or a new connection's first -- so that they are answered
   * rather than closed unanswered; only those kept alive with nothing
   * sent since their last answer are not waited for. */
  while ((left = srv_http_inflight() + srv_http_awaited() +
                 srv_work_busy() + srv_http_lingering()) > 0) {
    double rest = deadline - mono_s();
    int sig;

    if (rest <= 0)
      break;
    sig = wait_signal(set, rest < 0.01 ? rest : 0.01);
    if (sig == SIGHUP) {
      reload();
    } else if (sig > 0) {
      srv_log("second signal: cutting the drain short");
      break;
    }
  }
  return left;
}

/* docs/http.md#draining: stop accepting, let every open request finish
 * within --drain-s, then cut what remains.  A second signal cuts at once. */
static void drain(const sigset_t *set)
{
  int left;

  srv_http_drain();
  left = wait_idle(set, srv_cfg.drain_s);
  if (left > 0) {
    srv_log("drain: %d request(s) or job(s) still open; cutting them",
            left);
    /* The pool skips what it has not started and its calls answer 503;
     * once it has stopped, a moment lets those answers go out before the
     * connections close. */
    srv_work_cancel();
    srv_work_stop();
    wait_idle(set, 0.25);
  }
}

int main(int argc, char **argv)
{
  enum srv_action action;
  char msg[1024];
  sigset_t set;
  int sig;

  if (srv_config_load(&srv_cfg, argc, argv, &action, msg, sizeof msg) != 0) {
    fprintf(stderr, "%s: %s\n", SRV_NAME, msg);
    return 2;
  }
  switch (action) {
  case SRV_ACTION_HELP:
    srv_config_usage(stdout);
    return 0;
  case SRV_ACTION_VERSION:
    printf("%s %s (kernels: %s)\n", SRV_NAME, ab_version(), ab_isa_name());
    return 0;
  case SRV_ACTION_HEALTHCHECK:
    /* A server that closes first (TLS's close_notify then meets a closed
     * socket) has answered: no SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    if (srv_cfg.unix_socket[0])
      return srv_http_healthcheck_unix(srv_cfg.unix_socket) == 0 ? 0 : 1;
    return srv_http_healthcheck(srv_cfg.host, srv_cfg.port) == 0 ? 0 : 1;
  case SRV_ACTION_RUN:
    break;
  }

  /* Before any thread exists: jansson's allocator (it must be set before
   * jansson allocates anything) and hash seed (its lazy init is not
   * thread-safe), and the signal mask every thread inherits. */
  srv_jsonmem_install();
  json_object_seed(0);
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-response is not fatal */

  /* The certificate and key before anything starts: a wrong file is a
   * configuration error, reported as such. */
  if (srv_tls_enabled() && srv_tls_start(msg, sizeof msg) != 0) {
    fprintf(stderr, "%s: %s\n", SRV_NAME, msg);
    return 2;
  }
  if (srv_work_start(srv_cfg.threads) != 0) {
    fprintf(stderr, "%s: cannot start the worker pool\n", SRV_NAME);
    return 1;
  }
  srv_probe.draining = srv_http_draining;
  srv_probe.metrics = srv_http_metrics;
  if (srv_http_start() != 0) {
    srv_work_stop();
    srv_tls_stop();
    return 1;
  }
  srv_log("%s %s ready: kernels %s, %d pool threads, %d HTTP threads, "
          "max queue %d%s%s",
          SRV_NAME, ab_version(), ab_isa_name(), srv_cfg.threads,
          srv_cfg.http_threads, srv_cfg.max_queue,
          srv_cfg.api_key[0] ? ", API key required" : "",
          srv_tls_enabled() ? ", HTTPS" : "");

  while ((sig = wait_signal(&set, -1)) == SIGHUP)
    reload();
  srv_log("%s: draining (up to %g s)", sig == SIGINT ? "SIGINT" : "SIGTERM",
          srv_cfg.drain_s);
  drain(&set);
  /* Order matters: the pool resumes every connection it holds before it
   * stops, and MHD must not stop with a suspended connection. */
  srv_work_stop(); /* (a no-op if the drain already stopped it) */
  srv_http_stop();
  srv_tls_stop();
  srv_log("stopped");
  return 0;
}
