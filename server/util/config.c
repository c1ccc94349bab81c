/* config.c: the server's configuration -- defaults, ATTNBIAS_* environment
 * variables and flags, one table describing them all, and validation with
 * messages that name the flag and the value. */
#include "util/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct srv_config srv_cfg;

/* --linger-mb is at least the body cap plus this many MiB. */
#define LINGER_OVER_CAP_MB 8

enum opt_type {
  OPT_STR,
  OPT_PATH,
  OPT_MODE,
  OPT_INT,
  OPT_NUM,
  OPT_KEYFILE,
  OPT_FILE,
  OPT_ORIGIN,
  OPT_ACTION
};

/* Every flag: --name, its environment variable ATTNBIAS_<NAME> (upper case,
 * '-' -> '_'), where it goes, and its valid range.  For OPT_NUM `lo` is
 * exclusive when lo_open is set ("greater than 0"). */
struct opt {
  const char *name;
  enum opt_type type;
  size_t off;
  double lo, hi;
  int lo_open;
  const char *help;
};

#define OFF(f) offsetof(struct srv_config, f)
static const struct opt g_opts[] = {
    {"host", OPT_STR, OFF(host), 0, 0, 0,
     "listen address (default 127.0.0.1)"},
    {"port", OPT_INT, OFF(port), 0, 65535, 0,
     "listen port; 0 picks a free one and prints it (default 8080)"},
    {"unix-socket", OPT_PATH, OFF(unix_socket), 0, 0, 0,
     "listen on this Unix-domain socket instead of --host/--port"},
    {"unix-socket-mode", OPT_MODE, OFF(unix_socket_mode), 0, 0777, 0,
     "permissions of the socket file, octal like 660 (default: from the "
     "umask)"},
    {"threads", OPT_INT, OFF(threads), 1, 1024, 0,
     "worker pool size (default: CPUs this process may use)"},
    {"http-threads", OPT_INT, OFF(http_threads), 1, 64, 0,
     "HTTP polling threads (default: threads, within 2..8)"},
    {"max-queue", OPT_INT, OFF(max_queue), 1, 1000000, 0,
     "requests admitted and not finished; one more gets 503 (default 64)"},
    {"max-body-mb", OPT_NUM, OFF(max_body_mb), 0, 1048576, 1,
     "request body cap in MiB (default 256)"},
    {"max-output-mb", OPT_NUM, OFF(max_output_mb), 0, 1048576, 1,
     "cap on one response's tensors in MiB (default 1024)"},
    {"max-gflop", OPT_NUM, OFF(max_gflop), 0, 1e12, 1,
     "cap on one request's estimated work in GFLOP (default 10000)"},
    {"timeout-s", OPT_NUM, OFF(timeout_s), 0, 86400, 1,
     "idle connection timeout in seconds (default 30)"},
    {"max-connections", OPT_INT, OFF(max_connections), 1, 1000000, 0,
     "open connections; more wait in the accept queue (default 1024)"},
    {"max-connections-per-ip", OPT_INT, OFF(max_connections_per_ip), 1,
     1000000, 0,
     "connections one client address may hold; more are closed at accept "
     "(default 512; not applied on --unix-socket)"},
    {"header-timeout-s", OPT_NUM, OFF(header_timeout_s), 0, 86400, 1,
     "a request's headers must be complete this long after the connection "
     "opened (after --timeout-s of idling on a kept-alive one), else it is "
     "closed (default 10)"},
    {"body-grace-s", OPT_NUM, OFF(body_grace_s), 0, 86400, 0,
     "after this long a request body must keep --body-min-rate-kb on "
     "average, else its connection is closed (default 10)"},
    {"body-min-rate-kb", OPT_NUM, OFF(body_min_rate_kb), 0, 1048576, 1,
     "the minimum average rate of a request body after --body-grace-s, "
     "KiB/s (default 64)"},
    {"linger-s", OPT_NUM, OFF(linger_s), 0, 3600, 1,
     "a connection answered while its body still comes reads and drops "
     "the rest for at most this long before it closes (default 5)"},
    {"linger-mb", OPT_NUM, OFF(linger_mb), 0, 1048576 + 8, 1,
     "lingering reads and drops at most this many MiB; at least "
     "--max-body-mb + 8 (default --max-body-mb + 8)"},
    {"linger-max", OPT_INT, OFF(linger_max), 1, 1000000, 0,
     "connections lingering at a time; one more ends the oldest's "
     "(default 128)"},
    {"drain-s", OPT_NUM, OFF(drain_s), 0, 86400, 0,
     "on SIGTERM/SIGINT, seconds to finish open requests (default 30)"},
    {"api-key-file", OPT_KEYFILE, OFF(api_key), 0, 0, 0,
     "file whose first line is the API key (default: no key)"},
    /* HTTPS: the files are read by http/tls.c (at start, again on SIGHUP)
     * and by the health check's client. */
    {"tls-cert", OPT_FILE, OFF(tls_cert), 0, 0, 0,
     "serve HTTPS with this PEM certificate (chain); needs --tls-key; "
     "reread on SIGHUP"},
    {"tls-key", OPT_FILE, OFF(tls_key), 0, 0, 0,
     "the PEM private key of --tls-cert"},
    {"tls-ca", OPT_FILE, OFF(tls_ca), 0, 0, 0,
     "PEM CA(s) --healthcheck verifies the HTTPS server with (default: "
     "--tls-cert itself)"},
    {"cors-origin", OPT_ORIGIN, OFF(cors_origins), 0, 0, 0,
     "let pages from this origin (scheme://host[:port], or * without an "
     "API key) call the server from a browser; repeatable (default: none)"},
    {"healthcheck", OPT_ACTION, SRV_ACTION_HEALTHCHECK, 0, 0, 0,
     "GET /healthz on --host/--port (or --unix-socket); exit 0 if 200, "
     "else 1"},
    {"version", OPT_ACTION, SRV_ACTION_VERSION, 0, 0, 0,
     "print the version and exit"},
    {"help", OPT_ACTION, SRV_ACTION_HELP, 0, 0, 0, "print this help and exit"},
};
#define NOPTS (sizeof g_opts / sizeof g_opts[0])

static int failf(char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int failf(char *msg, size_t cap, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---------------------------------------------------------------------
 * CPUs
 * --------------------------------------------------------------------- */

/* ceil(quota / period) from a cgroup file pair, or 0 when unlimited or
 * unreadable. */
static int quota_cpus(double quota, double period)
{
  if (!(quota > 0) || !(period > 0))
    return 0;
  return (int)ceil(quota / period);
}

static int cgroup_v2_cpus(void)
{
  char path[600], line[512], max[32];
  FILE *f;
  double quota = 0, period = 0;
  int n = 0;

  /* The process's own cgroup ("0::/some/path"), else the mount's root
   * (what a container sees). */
  path[0] = '\0';
  f = fopen("/proc/self/cgroup", "r");
  if (f) {
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "0::", 3) == 0) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", line + 3);
        break;
      }
    fclose(f);
  }
  f = path[0] ? fopen(path, "r") : NULL;
  if (!f)
    f = fopen("/sys/fs/cgroup/cpu.max", "r");
  if (!f)
    return 0;
  if (fscanf(f, "%31s %lf", max, &period) == 2 && strcmp(max, "max") != 0) {
    quota = strtod(max, NULL);
    n = quota_cpus(quota, period);
  }
  fclose(f);
  return n;
}

static double read_number(const char *path)
{
  FILE *f = fopen(path, "r");
  double v = 0;

  if (!f)
    return 0;
  if (fscanf(f, "%lf", &v) != 1)
    v = 0;
  fclose(f);
  return v;
}

static int cgroup_v1_cpus(void)
{
  static const char *const dirs[] = {"/sys/fs/cgroup/cpu,cpuacct",
                                     "/sys/fs/cgroup/cpu"};
  char q[128], p[128];
  size_t i;

  for (i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    snprintf(q, sizeof q, "%s/cpu.cfs_quota_us", dirs[i]);
    snprintf(p, sizeof p, "%s/cpu.cfs_period_us", dirs[i]);
    int n = quota_cpus(read_number(q), read_number(p)); /* -1: unlimited */
    if (n > 0)
      return n;
  }
  return 0;
}

int srv_config_cpus(void)
{
  cpu_set_t set;
  int n = 1, q;

  if (sched_getaffinity(0, sizeof set, &set) == 0)
    n = CPU_COUNT(&set);
  q = cgroup_v2_cpus();
  if (q <= 0)
    q = cgroup_v1_cpus();
  if (q > 0 && q < n)
    n = q;
  return n > 0 ? n : 1;
}

/* ---------------------------------------------------------------------
 * Values
 * --------------------------------------------------------------------- */

static int read_key_file(const char *path, char *key, size_t cap, char *msg,
                         size_t msgcap, const char *src)
{
  FILE *f = fopen(path, "r");
  size_t n;

  if (!f)
    return failf(msg, msgcap, "%s: cannot open '%s': %s", src, path,
                 strerror(errno));
  if (!fgets(key, (int)cap, f)) {
    fclose(f);
    return failf(msg, msgcap, "%s: '%s' is empty; the API key is its first "
                 "line", src, path);
  }
  n = strcspn(key, "\r\n");
  if (n == strlen(key) && !feof(f) && n == cap - 1) {
    fclose(f);
    return failf(msg, msgcap, "%s: the key in '%s' is longer than %zu bytes",
                 src, path, cap - 2);
  }
  fclose(f);
  key[n] = '\0';
  if (n == 0)
    return failf(msg, msgcap, "%s: the first line of '%s' is empty; the "
                 "API key is that line", src, path);
  return 0;
}

/* One origin as browsers send it (RFC 6454): scheme "://" host [":" port],
 * no path, or "*". */
static int origin_ok(const char *s, size_t n)
{
  size_t i, h;

  if (n == 1 && s[0] == '*')
    return 1;
  if (n > 8 && strncmp(s, "https://", 8) == 0)
    h = 8;
  else if (n > 7 && strncmp(s, "http://", 7) == 0)
    h = 7;
  else
    return 0;
  for (i = h; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("-.:[]", s[i]))
      return 0;
  return s[n - 1] != ':' && s[h] != ':' && s[h] != '.';
}

int srv_config_origin_listed(const char *list, const char *origin, size_t n)
{
  const char *p = list;

  while (*p) {
    size_t k = strcspn(p, "\n");
    if (k == n && strncasecmp(p, origin, n) == 0)
      return 1;
    p += k;
    p += *p == '\n';
  }
  return 0;
}

/* --cors-origin: appended, one per line; an ATTNBIAS_CORS_ORIGIN value may
 * list several (separated by spaces or commas), and the first flag
 * replaces them. */
static int add_origins(struct srv_config *cfg, const char *val,
                       const char *src, char *msg, size_t msgcap)
{
  int from_env = src[0] != '-';
  const char *p = val;

  if (!from_env && cfg->cors_from_env) {
    cfg->cors_origins[0] = '\0';
    cfg->cors_from_env = 0;
  }
  if (from_env)
    cfg->cors_from_env = 1;
  do {
    size_t n, have = strlen(cfg->cors_origins);

    p += strspn(p, from_env ? " ,\t" : "");
    n = from_env ? strcspn(p, " ,\t") : strlen(p);
    if (!origin_ok(p, n))
      return failf(msg, msgcap,
                   "%s: '%.*s' is not an origin: scheme://host[:port] (http "
                   "or https, no path) or *",
                   src, (int)n, p);
    if (have + n + 2 > sizeof cfg->cors_origins)
      return failf(msg, msgcap, "%s: too many origins (%zu bytes at most)",
                   src, sizeof cfg->cors_origins - 1);
    if (have)
      cfg->cors_origins[have++] = '\n';
    memcpy(cfg->cors_origins + have, p, n);
    cfg->cors_origins[have + n] = '\0';
    p += n;
    if (from_env)
      p += strspn(p, " ,\t");
  } while (from_env && *p);
  return 0;
}

/* Parse `val` for option o into cfg; src names where it came from
 * ("--port" or "ATTNBIAS_PORT") for the message. */
static int set_value(struct srv_config *cfg, const struct opt *o,
                     const char *val, const char *src, char *msg,
                     size_t msgcap)
{
  char *field = (char *)cfg + o->off, *end;
  double d;
  long long l;

  switch (o->type) {
  case OPT_STR:
    if (!*val || strlen(val) >= sizeof cfg->host)
      return failf(msg, msgcap, "%s: '%s' is not a host name or address",
                   src, val);
    strcpy(field, val);
    return 0;
  case OPT_PATH:
    /* sun_path holds the path and its terminator. */
    if (!*val || strlen(val) >= sizeof cfg->unix_socket)
      return failf(msg, msgcap,
                   "%s: '%s' is not a socket path of 1 to %zu bytes (the "
                   "limit of a Unix-domain socket address)",
                   src, val, sizeof cfg->unix_socket - 1);
    strcpy(field, val);
    return 0;
  case OPT_MODE:
    /* Octal digits only (chmod's notation): "660", "0660". */
    errno = 0;
    l = strtoll(val, &end, 8);
    if (!*val || *end || errno || strspn(val, "01234567") != strlen(val) ||
        l < 0 || l > (long long)o->hi)
      return failf(msg, msgcap,
                   "%s: '%s' is not a file mode in octal, 0 to 0777 (e.g. "
                   "660)",
                   src, val);
    *(int *)(void *)field = (int)l;
    return 0;
  case OPT_INT:
    errno = 0;
    l = strtoll(val, &end, 10);
    if (!*val || *end || errno || l < (long long)o->lo || l > (long long)o->hi)
      return failf(msg, msgcap, "%s: '%s' is not an integer in %.0f..%.0f",
                   src, val, o->lo, o->hi);
    *(int *)(void *)field = (int)l;
    return 0;
  case OPT_NUM:
    errno = 0;
    d = strtod(val, &end);
    if (!*val || *end || errno || !isfinite(d) || d > o->hi ||
        (o->lo_open ? d <= o->lo : d < o->lo))
      return failf(msg, msgcap, "%s: '%s' is not a number %s %g and <= %g",
                   src, val, o->lo_open ? ">" : ">=", o->lo, o->hi);
    *(double *)(void *)field = d;
    return 0;
  case OPT_KEYFILE:
    return read_key_file(val, field, sizeof cfg->api_key, msg, msgcap, src);
  case OPT_FILE:
    /* Read later (and again on SIGHUP): here only its length is known. */
    if (!*val || strlen(val) >= sizeof cfg->tls_cert)
      return failf(msg, msgcap, "%s: '%s' is not a file path of 1 to %zu "
                   "bytes", src, val, sizeof cfg->tls_cert - 1);
    strcpy(field, val);
    return 0;
  case OPT_ORIGIN:
    return add_origins(cfg, val, src, msg, msgcap);
  case OPT_ACTION:
    break;
  }
  return 0;
}

static void defaults(struct srv_config *cfg)
{
  memset(cfg, 0, sizeof *cfg);
  strcpy(cfg->host, "127.0.0.1");
  cfg->port = 8080;
  cfg->threads = 0; /* resolved after parsing: CPUs */
  cfg->http_threads = 0;
  cfg->max_queue = 64;
  cfg->max_body_mb = 256;
  cfg->max_output_mb = 1024;
  cfg->max_gflop = 10000;
  cfg->timeout_s = 30;
  cfg->max_connections = 1024;
  cfg->drain_s = 30;
  cfg->unix_socket_mode = -1; /* the umask decides */
  cfg->max_connections_per_ip = 512;
  cfg->header_timeout_s = 10;
  cfg->body_grace_s = 10;
  cfg->body_min_rate_kb = 64;
  cfg->linger_s = 5;
  cfg->linger_mb = 0; /* resolved after parsing: max_body_mb + 8 */
  cfg->linger_max = 128;
}

int srv_config_load(struct srv_config *cfg, int argc, char **argv,
                    enum srv_action *action, char *msg, size_t msgcap)
{
  size_t i, k;
  int a;

  defaults(cfg);
  *action = SRV_ACTION_RUN;

  /* Environment first, so that flags overwrite it. */
  for (i = 0; i < NOPTS; i++) {
    char env[64] = "ATTNBIAS_";
    const char *val;
    if (g_opts[i].type == OPT_ACTION)
      continue;
    for (k = 0; g_opts[i].name[k] && k + 10 < sizeof env; k++)
      env[9 + k] = g_opts[i].name[k] == '-'
                       ? '_'
                       : (char)toupper((unsigned char)g_opts[i].name[k]);
    env[9 + k] = '\0';
    val = getenv(env);
    if (val && set_value(cfg, &g_opts[i], val, env, msg, msgcap) != 0)
      return -1;
  }

  for (a = 1; a < argc; a++) {
    const char *arg = argv[a], *name, *val = NULL, *eq;
    const struct opt *o = NULL;
    size_t len;
    char src[64];

    if (strncmp(arg, "--", 2) != 0)
      return failf(msg, msgcap, "unexpected argument '%s' (see --help)", arg);
    name = arg + 2;
    eq = strchr(name, '=');
    len = eq ? (size_t)(eq - name) : strlen(name);
    for (i = 0; i < NOPTS; i++)
      if (strlen(g_opts[i].name) == len &&
          strncmp(g_opts[i].name, name, len) == 0)
        o = &g_opts[i];
    if (!o)
      return failf(msg, msgcap, "unknown flag '%s' (see --help)", arg);
    snprintf(src, sizeof src, "--%s", o->name);
    if (o->type == OPT_ACTION) {
      if (eq)
        return failf(msg, msgcap, "%s takes no value", src);
      /* --help and --version win over everything else. */
      if (*action == SRV_ACTION_RUN || o->off != SRV_ACTION_HEALTHCHECK)
        *action = (enum srv_action)o->off;
      continue;
    }
    if (eq) {
      val = eq + 1;
    } else {
      if (a + 1 >= argc)
        return failf(msg, msgcap, "%s needs a value", src);
      val = argv[++a];
    }
    if (set_value(cfg, o, val, src, msg, msgcap) != 0)
      return -1;
  }

  if (cfg->unix_socket_mode >= 0 && !cfg->unix_socket[0])
    return failf(msg, msgcap,
                 "--unix-socket-mode (ATTNBIAS_UNIX_SOCKET_MODE) %o is set "
                 "but there is no --unix-socket to apply it to",
                 (unsigned)cfg->unix_socket_mode);
  /* (--healthcheck needs no key: it only trusts the certificate.) */
  if (!cfg->tls_cert[0] != !cfg->tls_key[0] &&
      (*action == SRV_ACTION_RUN || !cfg->tls_cert[0]))
    return failf(msg, msgcap,
                 "%s is set but %s is not: HTTPS needs both the certificate "
                 "and its private key",
                 cfg->tls_cert[0] ? "--tls-cert (ATTNBIAS_TLS_CERT)"
                                  : "--tls-key (ATTNBIAS_TLS_KEY)",
                 cfg->tls_cert[0] ? "--tls-key" : "--tls-cert");
  /* A server run has no use for a CA: it is there for --healthcheck (which
   * may run without the server's files), so on its own it is a mistake. */
  if (cfg->tls_ca[0] && !cfg->tls_cert[0] && *action == SRV_ACTION_RUN)
    return failf(msg, msgcap,
                 "--tls-ca (ATTNBIAS_TLS_CA) '%s' is set but there is no "
                 "--tls-cert: the CA is for --healthcheck against an HTTPS "
                 "server",
                 cfg->tls_ca);
  /* A key in a page is readable by whoever reads the page; a page from any
   * origin calling a keyed server can only be one holding that key. */
  if (cfg->api_key[0] && *action == SRV_ACTION_RUN &&
      srv_config_origin_listed(cfg->cors_origins, "*", 1))
    return failf(msg, msgcap,
                 "--cors-origin '*' with an API key: name the origins whose "
                 "pages may call this server instead");
  /* A client that sends a whole refused body before it reads gets the
   * answer if lingering reads that body: any body within the cap, and one
   * over it by up to 8 MiB. */
  if (cfg->linger_mb == 0)
    cfg->linger_mb = cfg->max_body_mb + LINGER_OVER_CAP_MB;
  else if (cfg->linger_mb < cfg->max_body_mb + LINGER_OVER_CAP_MB)
    return failf(msg, msgcap,
                 "--linger-mb (ATTNBIAS_LINGER_MB) %g is less than "
                 "--max-body-mb %g + %d: a client sending a refused body "
                 "within the cap before it reads would get a reset instead "
                 "of the answer",
                 cfg->linger_mb, cfg->max_body_mb, LINGER_OVER_CAP_MB);
  if (cfg->threads == 0)
    cfg->threads = srv_config_cpus();
  if (cfg->threads > 1024)
    cfg->threads = 1024;
  /* One polling thread stalls past ~128 connections, so at least two;
   * beyond eight they only add context switches. */
  if (cfg->http_threads == 0)
    cfg->http_threads = cfg->threads < 2 ? 2 : cfg->threads > 8 ? 8
                                                                 : cfg->threads;
  return 0;
}

void srv_config_usage(FILE *out)
{
  size_t i;

  fprintf(out,
          "usage: %s [flags]\n"
          "attnbias HTTP service: position encodings, RoPE, attention-bias "
          "tables and attention.\n\n"
          "Every flag can also be set by the environment variable "
          "ATTNBIAS_<NAME> (e.g. ATTNBIAS_MAX_BODY_MB);\nthe flag wins.\n\n",
          SRV_NAME);
  for (i = 0; i < NOPTS; i++) {
    char left[40];
    snprintf(left, sizeof left, "--%s%s", g_opts[i].name,
             g_opts[i].type == OPT_ACTION ? "" : " V");
    fprintf(out, "  %-26s %s\n", left, g_opts[i].help);
  }
}
