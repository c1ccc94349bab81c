/* bench.c: `make bench` -- the attnbias benchmark program.  Measures the
 * roofline of this machine (FMA peak, triad and non-temporal triad
 * bandwidth) and then, with the same thread count in the same run, the
 * library's attention, RoPE and bias-table jobs, the server's codecs, the
 * service end to end on loopback against a bare libmicrohttpd server, and
 * torch as a peer.  Prints one table on stdout as it goes and writes
 * results.json (shape documented in bench/README.md).
 *
 *   bench [--threads N] [--quick]
 *         [--only attention,decode,long,rope,bias,encoding,codec,service]
 *         [--out FILE] [--attn-shapes HxNxd,...]
 *         [--server attnbiasd] [--bare bare-server]
 *         [--torch torch_bench.py] [--lua post.lua] [--python PY]
 *         [--http-seconds S]
 * Environment: BENCH_QUICK=1, BENCH_THREADS=N, BENCH_ONLY=list,
 * BENCH_ATTN_SHAPES=list. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

struct bench_opts g_opt;

/* ==== options ============================================================ */

int bench_want(const char *name)
{
  const char *p = g_opt.only;
  size_t n = strlen(name);

  if (!p || !*p)
    return 1;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);

    if (len == n && strncmp(p, name, n) == 0)
      return 1;
    p += len + (e ? 1 : 0);
  }
  return 0;
}

static int cpus_available(void)
{
  cpu_set_t set;

  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  return 2;
}

static void usage(FILE *f)
{
  fprintf(f,
          "usage: bench [--threads N] [--quick] [--only LIST] [--out FILE]\n"
          "             [--attn-shapes HxNxd,...]\n"
          "             [--server attnbiasd] [--bare bare-server]\n"
          "             [--torch torch_bench.py] [--lua post.lua]\n"
          "             [--python PY] [--http-seconds S]\n"
          "LIST: comma-separated of attention,decode,long,rope,bias,encoding,"
          "codec,service "
          "(none: probes only)\n"
          "--attn-shapes: only these attention shapes (e.g. 32x2048x128)\n"
          "env: BENCH_QUICK=1, BENCH_THREADS=N, BENCH_ONLY=LIST, "
          "BENCH_ATTN_SHAPES\n");
}

static void parse_opts(int argc, char **argv)
{
  const char *e;
  int i;

  g_opt.threads = cpus_available();
  g_opt.out = "bench/results.json";
  g_opt.lua = "bench/post.lua";
  g_opt.python = "/usr/bin/python3";
  g_opt.http_seconds = 3.0;
  if ((e = getenv("BENCH_QUICK")) && *e && strcmp(e, "0") != 0)
    g_opt.quick = 1;
  if ((e = getenv("BENCH_THREADS")) && atoi(e) > 0)
    g_opt.threads = atoi(e);
  if ((e = getenv("BENCH_ONLY")) && *e)
    g_opt.only = e;
  if ((e = getenv("BENCH_ATTN_SHAPES")) && *e)
    g_opt.attn_shapes = e;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

#define TAKE(flag) (strcmp(a, flag) == 0 && v && (i++, 1))
    if (strcmp(a, "--quick") == 0)
      g_opt.quick = 1;
    else if (TAKE("--threads"))
      g_opt.threads = atoi(v);
    else if (TAKE("--only"))
      g_opt.only = v;
    else if (TAKE("--attn-shapes"))
      g_opt.attn_shapes = v;
    else if (TAKE("--out"))
      g_opt.out = v;
    else if (TAKE("--server"))
      g_opt.server = v;
    else if (TAKE("--bare"))
      g_opt.bare = v;
    else if (TAKE("--torch"))
      g_opt.torch = v;
    else if (TAKE("--lua"))
      g_opt.lua = v;
    else if (TAKE("--python"))
      g_opt.python = v;
    else if (TAKE("--http-seconds"))
      g_opt.http_seconds = atof(v);
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else {
      fprintf(stderr, "bench: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      exit(2);
    }
#undef TAKE
  }
  if (g_opt.only) {
    static const char *const known[] = {"attention", "decode", "long",
                                        "rope",      "bias",   "encoding",
                                        "codec",     "service", "none"};
    const char *p = g_opt.only;

    /* A typo would silently skip everything: name it instead. */
    while (*p) {
      size_t len = strcspn(p, ","), k, ok = 0;

      for (k = 0; k < sizeof known / sizeof known[0]; k++)
        ok |= len == strlen(known[k]) && strncmp(p, known[k], len) == 0;
      if (!ok && len) {
        fprintf(stderr, "bench: --only: unknown section '%.*s'\n", (int)len,
                p);
        usage(stderr);
        exit(2);
      }
      p += len + (p[len] == ',');
    }
  }
  if (g_opt.threads < 1 || g_opt.threads > 256) {
    fprintf(stderr, "bench: --threads %d must be in 1..256\n", g_opt.threads);
    exit(2);
  }
  if (!(g_opt.http_seconds > 0 && g_opt.http_seconds <= 60)) {
    fprintf(stderr, "bench: --http-seconds %g must be in (0, 60]\n",
            g_opt.http_seconds);
    exit(2);
  }
  if (g_opt.quick && g_opt.http_seconds > 1.0)
    g_opt.http_seconds = 1.0;
}

/* ==== output: sections on stdout, entries for results.json ============= */

void bench_section(const char *fmt, ...)
{
  va_list ap;

  printf("\n== ");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf(" ==\n");
  fflush(stdout);
}

void bench_skip(const char *what, const char *fmt, ...)
{
  va_list ap;

  printf("  SKIPPED %s: ", what);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}

/* Entries are kept structured until res_write, because a percentage of a
 * ceiling is only final once the whole run has probed the machine. */
enum res_kind { RES_STR, RES_NUM, RES_INT, RES_PCT };

struct res_field {
  const char *key;  /* string literal */
  enum res_kind kind;
  char str[48];
  double num;
  enum bench_ceiling ceil;
};

#define RES_MAX_FIELDS 16
struct res_entry {
  char name[32];
  int n;
  struct res_field f[RES_MAX_FIELDS];
};

static struct res_entry *g_res;
static int g_res_count, g_res_cap, g_res_open;

static struct res_field *res_field(const char *key, enum res_kind kind)
{
  struct res_entry *e;

  if (!g_res_open)
    return NULL;
  e = &g_res[g_res_count - 1];
  if (e->n == RES_MAX_FIELDS) {
    fprintf(stderr, "bench: entry %s has too many fields\n", e->name);
    return NULL;
  }
  e->f[e->n].key = key;
  e->f[e->n].kind = kind;
  return &e->f[e->n++];
}

void res_begin(const char *name)
{
  if (g_res_count == g_res_cap) {
    g_res_cap = g_res_cap ? 2 * g_res_cap : 64;
    g_res = realloc(g_res, (size_t)g_res_cap * sizeof *g_res);
    if (!g_res) {
      fprintf(stderr, "bench: out of memory\n");
      exit(2);
    }
  }
  memset(&g_res[g_res_count], 0, sizeof g_res[0]);
  snprintf(g_res[g_res_count].name, sizeof g_res[0].name, "%s", name);
  g_res_count++;
  g_res_open = 1;
}

void res_str(const char *key, const char *val)
{
  struct res_field *f = res_field(key, RES_STR);

  if (f)
    snprintf(f->str, sizeof f->str, "%s", val);
}

void res_num(const char *key, double val)
{
  struct res_field *f = res_field(key, RES_NUM);

  if (f)
    f->num = val;
}

void res_int(const char *key, int64_t val)
{
  struct res_field *f = res_field(key, RES_INT);

  if (f)
    f->num = (double)val;
}

void res_pct(const char *key, double val, enum bench_ceiling ceil)
{
  struct res_field *f = res_field(key, RES_PCT);

  if (f) {
    f->num = val;
    f->ceil = ceil;
  }
}

void res_end(void) { g_res_open = 0; }

/* A JSON string (the bench's own names: plain ASCII, escaped anyway). */
static void json_string(FILE *f, const char *s)
{
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;

    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

static void json_number(FILE *f, double v)
{
  if (isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fputs("null", f); /* JSON has no NaN or infinities */
}

int res_write(const char *path, const struct bench_machine *m,
              const char *isa)
{
  const double ceiling[3] = {m->fma_gflops, m->triad_gbs, m->nt_store_gbs};
  FILE *f = fopen(path, "w");
  int i, j;

  if (!f) {
    fprintf(stderr, "bench: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"machine\": {\"cpu_model\": ");
  json_string(f, m->cpu_model);
  fprintf(f, ", \"avx512f\": %s, \"avx512_bf16\": %s, \"avx512_fp16\": %s, "
             "\"amx\": %s, \"fma_gflops\": ",
          m->avx512f ? "true" : "false", m->avx512_bf16 ? "true" : "false",
          m->avx512_fp16 ? "true" : "false", m->amx ? "true" : "false");
  json_number(f, m->fma_gflops);
  fprintf(f, ", \"bf16_dot_gflops\": ");
  json_number(f, m->bf16_dot_gflops);
  fprintf(f, ", \"bf16_dot_vs_fma\": ");
  json_number(f, m->bf16_dot_vs_fma);
  fprintf(f, ", \"triad_gbs\": ");
  json_number(f, m->triad_gbs);
  fprintf(f, ", \"nt_store_gbs\": ");
  json_number(f, m->nt_store_gbs);
  fprintf(f, ", \"threads\": %d, \"isa\": ", m->threads);
  json_string(f, isa);
  fprintf(f, "},\n  \"results\": [");
  for (i = 0; i < g_res_count; i++) {
    const struct res_entry *e = &g_res[i];

    fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
    json_string(f, e->name);
    for (j = 0; j < e->n; j++) {
      const struct res_field *fl = &e->f[j];

      fprintf(f, ", ");
      json_string(f, fl->key);
      fprintf(f, ": ");
      switch (fl->kind) {
      case RES_STR: json_string(f, fl->str); break;
      case RES_INT: fprintf(f, "%lld", (long long)fl->num); break;
      case RES_NUM: json_number(f, fl->num); break;
      case RES_PCT: json_number(f, 100.0 * fl->num / ceiling[fl->ceil]); break;
      }
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "bench: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* ==== main =============================================================== */

int main(int argc, char **argv)
{
  struct bench_machine m = {0};
  struct bench_pool *pool;
  double t0 = bench_now();
  int rc = 0;

  parse_opts(argc, argv);
  bench_children_guard();
  setvbuf(stdout, NULL, _IOLBF, 0);

  printf("attnbias %s bench: kernels %s, %d threads%s\n", ab_version(),
         ab_isa_name(), g_opt.threads, g_opt.quick ? ", QUICK smoke run" : "");
  printf("times are medians of interleaved repetitions (min-max in "
         "brackets); %% are of this run's probes\n");

  bench_cpu_describe(&m);
  printf("machine: %s; avx512f %s, avx512_bf16 %s, avx512_fp16 %s, amx %s\n",
         m.cpu_model, m.avx512f ? "yes" : "no", m.avx512_bf16 ? "yes" : "no",
         m.avx512_fp16 ? "yes" : "no", m.amx ? "yes" : "no");
  pool = bench_pool_new(g_opt.threads);
  bench_probes(pool, &m);

  if (g_opt.torch && (bench_want("attention") || bench_want("rope")))
    peer_start();
  else if (!g_opt.torch)
    bench_skip("torch peer", "no --torch script given");

  if (bench_want("attention"))
    bench_attention(pool);
  if (bench_want("decode"))
    bench_decode(pool);
  if (bench_want("long"))
    bench_long(pool);
  if (bench_want("rope"))
    bench_rope(pool);
  peer_stop();
  if (bench_want("bias"))
    bench_bias(pool);
  if (bench_want("encoding"))
    bench_encoding(pool);
  if (bench_want("codec"))
    bench_codec();
  if (bench_want("service"))
    bench_service(pool);

  bench_probes_done(&m);
  printf("\nmachine (best repetitions of the run): %s; FMA %.1f GFLOP/s, "
         "bf16 dot %.1f GFLOP/s, triad %.1f GB/s, NT-store triad %.1f GB/s\n",
         m.cpu_model, m.fma_gflops, m.bf16_dot_gflops, m.triad_gbs,
         m.nt_store_gbs);
  bench_pool_free(pool);
  if (res_write(g_opt.out, &m, ab_isa_name()) == 0)
    printf("\nwrote %s (%d entries) in %.0f s\n", g_opt.out, g_res_count,
           bench_now() - t0);
  else
    rc = 1;
  free(g_res);
  return rc;
}
