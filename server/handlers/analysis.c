/* analysis.c: POST /v1/analysis -- what a position encoding does at a
 * length, in numbers and pictures (docs/methods.md#analysis):
 *
 *   kind "rope"    per frequency pair of a RoPE configuration: frequencies
 *                  and wavelengths before and after its scaling, turns
 *                  within the trained length and within seq_len, whether
 *                  every angle at seq_len was seen in training, the factor
 *                  and band of each pair; RoFormer's decay bound and the
 *                  mean cosine against distance;
 *   kind "bias"    per head of a bias family: ALiBi's slopes, how far each
 *                  head sees before its bias cuts a weight 10x and 100x,
 *                  T5's buckets and where they begin, the bias against
 *                  distance;
 *   kind "extend"  the planner: from the trained length to seq_len, the
 *                  settings of linear, NTK-aware, dynamic NTK, YaRN and
 *                  Llama 3 scaling (each pasteable into a config.json),
 *                  with the per-pair numbers of each side by side.
 *
 * The request fields are those of /v1/rope and /v1/bias, parsed by their
 * tables (a config resolver filling those fields serves this route too);
 * every formula is the library's (ab_rope_pairs, ab_rope_decay_job,
 * ab_t5_bucket_starts, ab_alibi_slopes, ab_bias_table_job).  Accept:
 * image/png draws one plot of the answer (server/codec/plot.c). */
#include "params.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define TWO_PI 6.283185307179586476925286766559
/* seq_len is a position count: RoPE's positions stop at 2^53. */
#define SEQ_MAX 9007199254740992.0
#define POINTS_MAX 65536
#define INT32_LIMIT 2147483647
#define SEEN_SLACK (1.0 + 1e-12)

enum kind { KIND_ROPE = 0, KIND_BIAS = 1, KIND_EXTEND = 2 };
enum plot {
  PLOT_WAVELENGTH = 0,
  PLOT_DECAY = 1,
  PLOT_SCALE = 2,
  PLOT_BIAS = 3,
  PLOT_REACH = 4,
  PLOT_BUCKETS = 5
};

/* The extension methods of kind "extend", in the order of their rows.
 * "none" runs the trained frequencies at the target length (the baseline
 * the others are compared with). */
static const struct {
  const char *name;
  enum ab_rope_type type;
} g_methods[] = {
    {"none", AB_ROPE_DEFAULT},  {"linear", AB_ROPE_LINEAR},
    {"ntk", AB_ROPE_NTK},       {"dynamic", AB_ROPE_DYNAMIC},
    {"yarn", AB_ROPE_YARN},     {"llama3", AB_ROPE_LLAMA3},
};
#define NMETHODS ((int)(sizeof g_methods / sizeof g_methods[0]))
_Static_assert(NMETHODS + 1 <= SRV_MAX_JOBS, "a decay job per method");

/* The per-pair outputs of kind rope (one row) and extend (a row per
 * method), in the arena. */
struct pair_out {
  double *inv, *wl, *scale, *ramp, *turns;
  int32_t *band, *seen;
};

struct analysis_req {
  int kind, plot;
  int64_t seq_len, points, num_heads;
  /* rope, extend */
  struct srv_rope_cfg cfg;
  int64_t trained; /* the length the unscaled frequencies were trained at */
  int64_t P, N, rows; /* pairs, decay distances, rows (methods) */
  double *inv_orig, *wl_orig, *dist, *bound, *mean;
  struct pair_out po;
  /* bias */
  int method;
  struct ab_bias_params bp;
  int has_bias, two_dir;
  int64_t nbd; /* T5 buckets of one direction */
  float *tmp_bias, *bias, *bias_after;
  int32_t *tmp_buckets, *buckets, *buckets_after, *starts;
  double *slopes, *reach10, *reach100;
};
#define AR(f) offsetof(struct analysis_req, f)

/* ==== tables ============================================================ */

static const struct srv_choice kinds[] = {
    {"rope", KIND_ROPE,
     "per frequency pair: wavelengths, turns, what scaling did, the "
     "long-term decay"},
    {"bias", KIND_BIAS,
     "per head: ALiBi's reach, T5's buckets, the bias against distance"},
    {"extend", KIND_EXTEND,
     "planner: linear, NTK, dynamic NTK, YaRN and Llama 3 settings from the "
     "trained length to seq_len, side by side"},
    {NULL, 0, NULL}};

static const struct srv_choice plots[] = {
    {"wavelength", PLOT_WAVELENGTH,
     "rope, extend: wavelength per pair, trained and target lengths marked"},
    {"decay", PLOT_DECAY,
     "rope, extend: RoFormer's decay bound and the mean cosine against "
     "distance"},
    {"scale", PLOT_SCALE,
     "rope, extend: the factor each pair's frequency is multiplied by"},
    {"bias", PLOT_BIAS, "bias: the bias against distance, a line per head"},
    {"reach", PLOT_REACH,
     "bias: per head, the distances at which the bias cuts a weight 10x and "
     "100x"},
    {"buckets", PLOT_BUCKETS,
     "bias (t5): the bucket of each distance, both directions"},
    {NULL, 0, NULL}};

static const struct srv_param analysis_params[] = {
    {.name = "kind", .type = SRV_PT_ENUM, .flags = SRV_PF_REQ,
     .choices = kinds, .off = AR(kind), .desc = "what to analyse"},
    {.name = "seq_len", .type = SRV_PT_INT,
     .flags = SRV_PF_REQ | SRV_PF_MIN | SRV_PF_MAX, .min = 1, .max = SEQ_MAX,
     .off = AR(seq_len),
     .desc = "the context length analysed (extend: the target length)"},
    {.name = "points", .type = SRV_PT_INT,
     .flags = SRV_PF_DEF | SRV_PF_MIN | SRV_PF_MAX, .def = 256, .min = 2,
     .max = POINTS_MAX, .off = AR(points),
     .desc = "distances the decay curves are sampled at, evenly from 0 to "
             "seq_len - 1 (every distance when seq_len is smaller)"},
    {.name = "plot", .type = SRV_PT_ENUM, .choices = plots, .off = AR(plot),
     .def_rule = "wavelength (rope), bias (bias; buckets for t5 without a "
                 "table), scale (extend)",
     .desc = "the picture drawn when Accept is image/png"},
};
const struct srv_ptable srv_ptab_analysis = SRV_PTABLE(
    "analysis", "what a position encoding does at a length", analysis_params);

/* Kind bias beside the method's own parameters (its selector "method" is
 * srv_param_bias_method). */
static const struct srv_param analysis_bias_params[] = {
    {.name = "num_heads", .type = SRV_PT_INT,
     .flags = SRV_PF_REQ | SRV_PF_MIN, .min = 1, .off = AR(num_heads),
     .desc = "heads of the bias family (kind bias)"},
};
const struct srv_ptable srv_ptab_analysis_bias = SRV_PTABLE(
    "analysis bias", "kind bias: the bias family's heads",
    analysis_bias_params);

/* ==== outputs =========================================================== */

/* A float64 output: a vector [cols] (rows 0) or a matrix [rows, cols]. */
static double *out_f64(struct srv_call *c, const char *name, int64_t rows,
                       int64_t cols, struct srv_err *err)
{
  int64_t shape[2] = {rows, cols};

  return rows ? srv_output_tensor(c, name, AB_DTYPE_F64, 2, shape, err)
              : srv_output_tensor(c, name, AB_DTYPE_F64, 1, &shape[1], err);
}

static int32_t *out_i32(struct srv_call *c, const char *name, int64_t rows,
                        int64_t cols, struct srv_err *err)
{
  int64_t shape[2] = {rows, cols};

  return rows ? srv_output_tensor(c, name, AB_DTYPE_I32, 2, shape, err)
              : srv_output_tensor(c, name, AB_DTYPE_I32, 1, &shape[1], err);
}

/* The per-pair outputs, [rows, P] (rows 0: vectors [P]). */
static int declare_pairs(struct srv_call *c, int64_t rows, int64_t P,
                         struct pair_out *o, struct srv_err *err)
{
  return !(o->inv = out_f64(c, "inv_freq", rows, P, err)) ||
                 !(o->wl = out_f64(c, "wavelength", rows, P, err)) ||
                 !(o->scale = out_f64(c, "scale", rows, P, err)) ||
                 !(o->ramp = out_f64(c, "ramp", rows, P, err)) ||
                 !(o->band = out_i32(c, "band", rows, P, err)) ||
                 !(o->turns = out_f64(c, "turns", rows, P, err)) ||
                 !(o->seen = out_i32(c, "seen", rows, P, err))
             ? -1
             : 0;
}

/* Whether every angle a pair reaches at seq_len was reached in training
 * (the test YaRN's NTK-by-parts builds on, Peng et al. 2023, section 3.2):
 * a pair whose trained wavelength fits in the trained length has turned
 * through every angle; any other has seen angles up to trained * theta
 * only, and the scaled pair must stay below that at seq_len. */
static int angles_seen(double inv_orig, double inv, int64_t trained,
                       int64_t seq_len)
{
  double seen_max = (double)trained * inv_orig;

  /* The slack is rounding's: interpolation by exactly seq_len / trained
   * (linear, a fully interpolated YaRN or Llama 3 pair) lands on the
   * trained angle itself. */
  return seen_max >= TWO_PI || (double)seq_len * inv <= seen_max * SEEN_SLACK;
}

/* Row `row` of the per-pair outputs from the library's pairs. */
static void fill_pairs(const struct pair_out *o, int64_t row,
                       const struct ab_rope_pair *pr, int64_t P,
                       int64_t trained, int64_t seq_len)
{
  int64_t k;

  for (k = 0; k < P; k++) {
    const int64_t i = row * P + k;
    o->inv[i] = pr[k].inv_freq;
    o->wl[i] = TWO_PI / pr[k].inv_freq;
    o->scale[i] = pr[k].scale;
    o->ramp[i] = pr[k].ramp;
    o->band[i] = pr[k].band;
    o->turns[i] = (double)seq_len * pr[k].inv_freq / TWO_PI;
    o->seen[i] = angles_seen(pr[k].inv_freq_original, pr[k].inv_freq,
                             trained, seq_len);
  }
}

/* The distances of the decay curves: every one below seq_len, or about
 * `points` of them from 0 to seq_len - 1 spaced evenly on a log scale
 * (the decay happens at every scale: within tens of tokens for the fast
 * pairs, thousands for the slow), rounded to integers, without repeats. */
static int decay_distances(struct srv_call *c, struct analysis_req *rq,
                           struct srv_err *err)
{
  const int64_t S = rq->seq_len;
  int64_t i, n = 0, want = S < rq->points ? S : rq->points;
  double *r = srv_arena_alloc(&c->arena, (size_t)want * sizeof *r);

  if (!r)
    return srv_fail(err, 500, NULL, "out of memory");
  if (want == S) {
    for (n = 0; n < S; n++)
      r[n] = (double)n;
  } else {
    r[n++] = 0;
    for (i = 0; i < want - 1; i++) {
      double frac = want > 2 ? (double)i / (double)(want - 2) : 1.0;
      double v = nearbyint(exp(log((double)(S - 1)) * frac));
      if (v > r[n - 1])
        r[n++] = v;
    }
    r[n - 1] = (double)(S - 1); /* the last, whatever exp() rounded to */
  }
  if (!(rq->dist = out_f64(c, "decay_distance", 0, n, err)))
    return -1;
  memcpy(rq->dist, r, (size_t)n * sizeof *r);
  rq->N = n;
  return 0;
}

/* The decay curves of row `row` (its frequencies inv[row]) as a job. */
static int decay_job(struct srv_call *c, struct analysis_req *rq, int64_t row,
                     struct srv_err *err)
{
  ab_job_t *job = NULL;
  enum ab_status st =
      ab_rope_decay_job(rq->po.inv + row * rq->P, rq->P, rq->dist, rq->N,
                        rq->bound + row * rq->N, rq->mean + row * rq->N, &job);

  if (st != AB_STATUS_OK)
    return srv_fail_lib(err, st, "", NULL);
  return srv_add_job(c, job, err);
}

/* ==== kinds rope and extend ============================================= */

/* The trained length: original_max_position_embeddings where the config
 * has one (it names the length the unscaled frequencies were trained at),
 * else max_position_embeddings. */
static int trained_length(const struct srv_rope_cfg *cfg, int64_t *out,
                          struct srv_err *err)
{
  *out = cfg->p.original_max_position_embeddings > 0
             ? cfg->p.original_max_position_embeddings
             : cfg->p.max_position_embeddings;
  if (*out <= 0)
    return srv_fail(err, 400, "/max_position_embeddings",
                    "this analysis needs the trained context length: give "
                    "max_position_embeddings (or "
                    "original_max_position_embeddings)");
  return 0;
}

static int check_plot(struct analysis_req *rq, int dflt, unsigned allowed,
                      const char *kind, struct srv_err *err)
{
  if (rq->plot < 0)
    rq->plot = dflt;
  if (!((allowed >> rq->plot) & 1))
    return srv_fail(err, 400, "/plot", "plot \"%s\" is not drawn for %s",
                    plots[rq->plot].name, kind);
  return 0;
}

/* Parse the RoPE fields and what rope and extend share: budget, pairs,
 * the decay distances. */
static int rope_common(struct srv_call *c, struct srv_pctx *pc,
                       struct analysis_req *rq, int64_t rows,
                       struct srv_err *err)
{
  const struct srv_ptable *tabs[3] = {&srv_ptab_analysis,
                                      &srv_ptab_rope_config, &srv_ptab_output};
  double m = rows ? (double)rows : 1.0, P, N, numel;
  const unsigned rope_plots =
      1u << PLOT_WAVELENGTH | 1u << PLOT_DECAY | 1u << PLOT_SCALE;

  if (srv_rope_parse(pc, c->in.params, 0, &rq->cfg, err) != 0)
    return -1;
  srv_params_unknown(pc, c->in.params, tabs, 3, NULL);
  srv_params_unused_bin(pc);
  if (rq->cfg.p.rope_type == AB_ROPE_XPOS)
    return srv_fail(err, 400, "/rope_scaling/rope_type",
                    "xpos adds a per-pair decay of its own that this "
                    "analysis does not model; analyse its rotation as "
                    "rope_type default");
  if (check_plot(rq, rq->kind == KIND_ROPE ? PLOT_WAVELENGTH : PLOT_SCALE,
                 rope_plots, kinds[rq->kind].name, err) != 0 ||
      trained_length(&rq->cfg, &rq->trained, err) != 0)
    return -1;

  /* Everything here is sized by the pairs and the distances. */
  rq->P = rq->cfg.n_freq;
  P = (double)rq->P;
  N = (double)(rq->seq_len < rq->points ? rq->seq_len : rq->points);
  numel = m * P * 7 + 3 * P + N * (1 + 2 * m);
  return srv_check_budget(c, srv_out_bytes(c, numel) + 48 * P,
                          40.0 * m * N * P, err);
}

static int prepare_rope(struct srv_call *c, struct srv_pctx *pc,
                        struct analysis_req *rq, struct srv_err *err)
{
  struct ab_rope_pair *pr;
  struct ab_rope_scaling_info info;
  double *turns_trained;
  enum ab_status st;
  int64_t k;

  if (rope_common(c, pc, rq, 0, err) != 0)
    return -1;
  pr = srv_arena_alloc(&c->arena, (size_t)rq->P * sizeof *pr);
  if (!pr)
    return srv_fail(err, 500, NULL, "out of memory");
  st = ab_rope_pairs(&rq->cfg.p, rq->seq_len, pr, &info);
  if (st != AB_STATUS_OK)
    return srv_fail_lib(err, st, "", NULL);

  if (srv_output_scalar(c, "trained_len", (double)rq->trained, err) ||
      srv_output_scalar(c, "attention_scaling", info.attention_factor, err) ||
      srv_output_scalar(c, "rope_theta", info.rope_theta, err) ||
      srv_output_scalar(c, "factor", info.factor, err) ||
      srv_output_scalar(c, "rotary_dim", (double)info.rotary_dim, err))
    return -1;
  if (rq->cfg.p.rope_type == AB_ROPE_YARN &&
      (srv_output_scalar(c, "yarn_low", info.yarn_low, err) ||
       srv_output_scalar(c, "yarn_high", info.yarn_high, err)))
    return -1;
  if (!(rq->inv_orig = out_f64(c, "inv_freq_original", 0, rq->P, err)) ||
      !(rq->wl_orig = out_f64(c, "wavelength_original", 0, rq->P, err)) ||
      !(turns_trained = out_f64(c, "turns_trained", 0, rq->P, err)) ||
      declare_pairs(c, 0, rq->P, &rq->po, err) != 0)
    return -1;
  for (k = 0; k < rq->P; k++) {
    rq->inv_orig[k] = pr[k].inv_freq_original;
    rq->wl_orig[k] = TWO_PI / pr[k].inv_freq_original;
    turns_trained[k] = (double)rq->trained * pr[k].inv_freq_original / TWO_PI;
  }
  fill_pairs(&rq->po, 0, pr, rq->P, rq->trained, rq->seq_len);
  rq->rows = 1;
  /* The curves after the pairs, in the answer as in the method. */
  if (decay_distances(c, rq, err) != 0 ||
      !(rq->bound = out_f64(c, "decay_bound", 0, rq->N, err)) ||
      !(rq->mean = out_f64(c, "decay_mean_cos", 0, rq->N, err)))
    return -1;
  return decay_job(c, rq, 0, err);
}

/* The rope_scaling factor of method `mi` for an extension by s: s itself,
 * except for dynamic NTK, whose HF form scales the base by
 * factor * l / L - (factor - 1) at length l > L: factor 1 makes that l / L,
 * the dynamic scaling of the YaRN paper (section 3.3), which meets the
 * NTK-aware base exactly at the target (a factor of s would overshoot it,
 * s^2 - s + 1 there). */
static double method_factor(int mi, double s)
{
  switch (g_methods[mi].type) {
  case AB_ROPE_DEFAULT: return -1.0; /* none */
  case AB_ROPE_DYNAMIC: return 1.0;
  default: return s;
  }
}

/* The config.json fields of method `mi` extending the trained length to
 * seq_len by factor s: what to paste over the model's own (head_dim and the
 * partial rotary settings stay as they are).  New reference. */
static json_t *method_config(int mi, const struct analysis_req *rq, double s,
                             const struct ab_rope_scaling_info *info)
{
  json_t *cfg = json_object(), *sc = json_object();
  const char *name = g_methods[mi].name;
  const enum ab_rope_type t = g_methods[mi].type;

  /* NTK-aware scaling is carried as the adjusted base (bloc97's form;
   * configs have no rope_type for it); every other method keeps the
   * trained one (dynamic NTK adjusts it itself, length by length). */
  json_object_set_new(cfg, "rope_theta",
                      json_real(t == AB_ROPE_NTK ? info->rope_theta
                                                 : rq->cfg.p.rope_theta));
  /* Dynamic NTK measures from max_position_embeddings (HF): it must stay
   * the trained length.  The others declare the new context. */
  json_object_set_new(cfg, "max_position_embeddings",
                      json_integer(t == AB_ROPE_DYNAMIC ? rq->trained
                                                        : rq->seq_len));
  if (t == AB_ROPE_DEFAULT || t == AB_ROPE_NTK) {
    json_decref(sc);
    json_object_set_new(cfg, "rope_scaling", json_null());
    return cfg;
  }
  json_object_set_new(sc, "rope_type", json_string(name));
  json_object_set_new(sc, "factor", json_real(method_factor(mi, s)));
  if (t == AB_ROPE_YARN || t == AB_ROPE_LLAMA3)
    json_object_set_new(sc, "original_max_position_embeddings",
                        json_integer(rq->trained));
  if (t == AB_ROPE_YARN) { /* the paper's recommended range */
    json_object_set_new(sc, "beta_fast", json_real(32));
    json_object_set_new(sc, "beta_slow", json_real(1));
  }
  if (t == AB_ROPE_LLAMA3) { /* Meta's Llama 3.1 bands */
    json_object_set_new(sc, "low_freq_factor", json_real(1));
    json_object_set_new(sc, "high_freq_factor", json_real(4));
  }
  json_object_set_new(cfg, "rope_scaling", sc);
  return cfg;
}

/* The RoPE parameters of method `mi` on the trained config. */
static void method_params(int mi, const struct analysis_req *rq, double s,
                          struct ab_rope_params *p)
{
  *p = rq->cfg.p;
  p->rope_type = g_methods[mi].type;
  p->factor = method_factor(mi, s);
  p->max_position_embeddings = g_methods[mi].type == AB_ROPE_DYNAMIC
                                   ? rq->trained
                                   : rq->seq_len;
  p->original_max_position_embeddings = rq->trained;
  p->beta_fast = 32.0;
  p->beta_slow = 1.0;
  p->low_freq_factor = 1.0;
  p->high_freq_factor = 4.0;
}

static int prepare_extend(struct srv_call *c, struct srv_pctx *pc,
                          struct analysis_req *rq, struct srv_err *err)
{
  struct ab_rope_pair *pr;
  struct ab_rope_params p[NMETHODS];
  struct ab_rope_scaling_info info[NMETHODS];
  json_t *names, *configs;
  double s, *att, *theta, *turns_trained;
  enum ab_status st;
  int mi, rc;
  int64_t k;

  if (rope_common(c, pc, rq, NMETHODS, err) != 0)
    return -1;
  if (rq->cfg.p.rope_type != AB_ROPE_DEFAULT)
    return srv_fail(err, 400, "/rope_scaling/rope_type",
                    "extend plans from the trained, unscaled configuration; "
                    "drop rope_scaling %s (kind rope analyses it)",
                    ab_rope_type_name(rq->cfg.p.rope_type));
  if (rq->seq_len <= rq->trained)
    return srv_fail(err, 400, "/seq_len",
                    "extend plans a longer context: seq_len %lld must exceed "
                    "the trained length %lld",
                    (long long)rq->seq_len, (long long)rq->trained);
  s = (double)rq->seq_len / (double)rq->trained;
  for (mi = 0; mi < NMETHODS; mi++) {
    method_params(mi, rq, s, &p[mi]);
    if ((st = ab_rope_pairs(&p[mi], rq->seq_len, NULL, &info[mi])))
      return srv_fail_lib(err, st, "", NULL);
  }

  /* The settings first: they are what a reader looks for. */
  names = json_array();
  configs = json_object();
  for (mi = 0; names && configs && mi < NMETHODS; mi++) {
    json_array_append_new(names, json_string(g_methods[mi].name));
    json_object_set_new(configs, g_methods[mi].name,
                        method_config(mi, rq, s, &info[mi]));
  }
  rc = !names || !configs
           ? srv_fail(err, 500, NULL, "out of memory")
           : srv_output_scalar(c, "trained_len", (double)rq->trained, err) ||
                 srv_output_scalar(c, "factor", s, err) ||
                 srv_output_json(c, "methods", names, err) ||
                 srv_output_json(c, "configs", configs, err);
  json_decref(names);
  json_decref(configs);
  if (rc)
    return -1;

  pr = srv_arena_alloc(&c->arena, (size_t)rq->P * sizeof *pr);
  if (!pr)
    return srv_fail(err, 500, NULL, "out of memory");
  if (!(turns_trained = out_f64(c, "turns_trained", 0, rq->P, err)) ||
      declare_pairs(c, NMETHODS, rq->P, &rq->po, err) != 0 ||
      !(att = out_f64(c, "attention_factor", 0, NMETHODS, err)) ||
      !(theta = out_f64(c, "rope_theta", 0, NMETHODS, err)) ||
      decay_distances(c, rq, err) != 0 ||
      !(rq->bound = out_f64(c, "decay_bound", NMETHODS, rq->N, err)) ||
      !(rq->mean = out_f64(c, "decay_mean_cos", NMETHODS, rq->N, err)))
    return -1;
  for (mi = 0; mi < NMETHODS; mi++) {
    if ((st = ab_rope_pairs(&p[mi], rq->seq_len, pr, NULL)))
      return srv_fail_lib(err, st, "", NULL);
    fill_pairs(&rq->po, mi, pr, rq->P, rq->trained, rq->seq_len);
    att[mi] = info[mi].attention_factor;
    theta[mi] = info[mi].rope_theta;
    if (decay_job(c, rq, mi, err) != 0)
      return -1;
  }
  for (k = 0; k < rq->P; k++) /* pr holds the last method's: same origin */
    turns_trained[k] = (double)rq->trained * pr[k].inv_freq_original / TWO_PI;
  rq->rows = NMETHODS;
  return 0;
}

/* ==== kind bias ========================================================= */

static int prepare_bias(struct srv_call *c, struct srv_pctx *pc,
                        struct analysis_req *rq, struct srv_err *err)
{
  struct srv_pbind b = {&srv_ptab_analysis_bias, rq, 0};
  static const char *const extra[] = {"method", NULL};
  const struct srv_ptable *tabs[4];
  const unsigned bias_plots =
      1u << PLOT_BIAS | 1u << PLOT_REACH | 1u << PLOT_BUCKETS;
  struct ab_geometry g;
  ab_job_t *job = NULL;
  enum ab_status st;
  int64_t S = rq->seq_len, H, h;
  double cells, numel;

  if (srv_params_enum(pc, c->in.params, &srv_param_bias_method, &rq->method,
                      err) < 0 ||
      srv_params_parse(pc, c->in.params, &b, err) != 0)
    return -1;
  H = rq->num_heads;
  ab_bias_params_init(&rq->bp);
  rq->bp.method = (enum ab_bias_method)rq->method;
  rq->bp.num_heads = H;
  if (srv_bias_parse_method(pc, c->in.params, &rq->bp, err) != 0)
    return -1;
  tabs[0] = &srv_ptab_analysis;
  tabs[1] = &srv_ptab_analysis_bias;
  tabs[2] = srv_bias_method_params(rq->method);
  tabs[3] = &srv_ptab_output;
  srv_params_unknown(pc, c->in.params, tabs, 4, extra);
  srv_params_unused_bin(pc);

  rq->has_bias = rq->method != AB_BIAS_T5 || rq->bp.table;
  rq->two_dir = rq->method == AB_BIAS_T5 && rq->bp.bidirectional;
  if (check_plot(rq, rq->has_bias ? PLOT_BIAS : PLOT_BUCKETS, bias_plots,
                 "kind bias", err) != 0)
    return -1;
  if (rq->plot == PLOT_BUCKETS && rq->method != AB_BIAS_T5)
    return srv_fail(err, 400, "/plot", "buckets exist only for method t5");
  if (rq->plot != PLOT_BUCKETS && !rq->has_bias)
    return srv_fail(err, 400, "/table",
                    "plot \"%s\" needs the bias values: t5 needs its table "
                    "[num_buckets, num_heads]",
                    plots[rq->plot].name);
  if (rq->method == AB_BIAS_T5 && rq->bp.max_distance > INT32_LIMIT)
    return srv_fail(err, 400, "/relative_attention_max_distance",
                    "relative_attention_max_distance %lld: the analysis "
                    "gives distances as int32, at most %d",
                    (long long)rq->bp.max_distance, INT32_LIMIT);

  /* Budget: the curves (twice when both directions differ), buckets. */
  cells = (double)S * (double)H * (rq->two_dir ? 2 : 1);
  numel = (rq->has_bias ? cells + 2.0 * (double)H : 0) + (double)H +
          (rq->method == AB_BIAS_T5 ? 2.0 * (double)S + 64 : 0);
  if (srv_check_budget(c, srv_out_bytes(c, numel) + 8.0 * cells,
                       cells * srv_bias_cell_flops(rq->bp.method), err) != 0)
    return -1;

  if (rq->method == AB_BIAS_ALIBI) {
    /* The float32 slopes the table multiplies by: explicit ones rounded as
     * the library rounds them, else ggml's formula. */
    float *f = srv_arena_alloc(&c->arena, (size_t)H * sizeof *f);
    if (!f || !(rq->slopes = out_f64(c, "slopes", 0, H, err)))
      return f ? -1 : srv_fail(err, 500, NULL, "out of memory");
    if (rq->bp.slopes_f64) {
      for (h = 0; h < H; h++)
        f[h] = (float)rq->bp.slopes_f64[h];
    } else if ((st = ab_alibi_slopes(H, rq->bp.max_bias, f)) != AB_STATUS_OK) {
      return srv_fail_lib(err, st, "", NULL);
    }
    for (h = 0; h < H; h++)
      rq->slopes[h] = f[h];
  }
  if (rq->method == AB_BIAS_T5) {
    int64_t nb = rq->bp.table ? rq->bp.table->shape[0] : rq->bp.num_buckets;
    int64_t *first, i;
    rq->nbd = rq->bp.bidirectional ? nb / 2 : nb;
    first = srv_arena_alloc(&c->arena, (size_t)rq->nbd * sizeof *first);
    if (!first)
      return srv_fail(err, 500, NULL, "out of memory");
    st = ab_t5_bucket_starts(nb, rq->bp.bidirectional, rq->bp.max_distance,
                             first);
    if (st != AB_STATUS_OK)
      return srv_fail_lib(err, st, "", NULL);
    if (srv_output_scalar(c, "saturation_distance",
                          (double)first[rq->nbd - 1], err) != 0 ||
        !(rq->starts = out_i32(c, "bucket_start", 0, rq->nbd, err)))
      return -1;
    for (i = 0; i < rq->nbd; i++)
      rq->starts[i] = (int32_t)first[i];
  }
  if (rq->has_bias &&
      (!(rq->reach10 = out_f64(c, "reach_10", 0, H, err)) ||
       !(rq->reach100 = out_f64(c, "reach_100", 0, H, err))))
    return -1;

  /* Keys before the query: one row, the query last, the library's own
   * table (finish turns it into distance order). */
  if (rq->has_bias) {
    rq->tmp_bias = srv_arena_alloc(&c->arena, (size_t)(H * S) * sizeof(float));
    if (!rq->tmp_bias ||
        !(rq->bias = srv_output_tensor(c, "bias", AB_DTYPE_F32, 2,
                                       (int64_t[2]){H, S}, err)))
      return rq->tmp_bias ? -1 : srv_fail(err, 500, NULL, "out of memory");
  }
  if (rq->method == AB_BIAS_T5) {
    rq->tmp_buckets = srv_arena_alloc(&c->arena, (size_t)S * sizeof(int32_t));
    if (!rq->tmp_buckets || !(rq->buckets = out_i32(c, "buckets", 0, S, err)))
      return rq->tmp_buckets ? -1 : srv_fail(err, 500, NULL, "out of memory");
  }
  ab_geometry_init(&g, 1, S); /* the query at S - 1 */
  st = ab_bias_table_job(&rq->bp, &g, rq->tmp_bias, rq->tmp_buckets, &job);
  if (st != AB_STATUS_OK)
    return srv_fail_lib(err, st, "", NULL);
  if (srv_add_job(c, job, err) != 0)
    return -1;
  if (!rq->two_dir)
    return 0;

  /* T5's keys after the query have buckets of their own: the query first,
   * so that key j is at distance j. */
  if ((rq->has_bias &&
       !(rq->bias_after = srv_output_tensor(c, "bias_after", AB_DTYPE_F32, 2,
                                            (int64_t[2]){H, S}, err))) ||
      !(rq->buckets_after = out_i32(c, "buckets_after", 0, S, err)))
    return -1;
  ab_geometry_init(&g, 1, S);
  g.q_offset = 0;
  st = ab_bias_table_job(&rq->bp, &g, rq->bias_after, rq->buckets_after, &job);
  if (st != AB_STATUS_OK)
    return srv_fail_lib(err, st, "", NULL);
  return srv_add_job(c, job, err);
}

/* After the jobs: the table's row in distance order, and the reach of each
 * head -- closed form for ALiBi (ln(ratio) / m), else the first distance
 * whose bias is ln(ratio) below the bias at distance 0 (+inf when none
 * within seq_len). */
static void bias_finish(struct analysis_req *rq)
{
  const int64_t S = rq->seq_len, H = rq->num_heads;
  int64_t h, r;

  for (r = 0; rq->buckets && r < S; r++)
    rq->buckets[r] = rq->tmp_buckets[S - 1 - r];
  if (!rq->has_bias)
    return;
  for (h = 0; h < H; h++) {
    const float *src = rq->tmp_bias + h * S;
    float *dst = rq->bias + h * S;
    for (r = 0; r < S; r++)
      dst[r] = src[S - 1 - r];
  }
  for (h = 0; h < H; h++) {
    const float *row = rq->bias + h * S;
    double *out[2] = {&rq->reach10[h], &rq->reach100[h]};
    const double drop[2] = {log(10.0), log(100.0)};
    int i;
    for (i = 0; i < 2; i++) {
      if (rq->method == AB_BIAS_ALIBI) {
        *out[i] = rq->slopes[h] > 0 ? drop[i] / rq->slopes[h] : INFINITY;
        continue;
      }
      *out[i] = INFINITY;
      for (r = 0; r < S; r++)
        if ((double)row[0] - (double)row[r] >= drop[i]) {
          *out[i] = (double)r;
          break;
        }
    }
  }
}

/* ==== pictures ========================================================== */

/* A float32 table as doubles (the plots' series), in the arena. */
static double *widen_f32(struct srv_call *c, const float *v, int64_t n)
{
  double *d = srv_arena_alloc(&c->arena, (size_t)n * sizeof *d);
  int64_t i;

  for (i = 0; d && i < n; i++)
    d[i] = v[i];
  return d;
}

static const char *arena_printf(struct srv_call *c, const char *fmt,
                                long long v)
{
  char buf[64];

  snprintf(buf, sizeof buf, fmt, v);
  return srv_arena_strdup(&c->arena, buf);
}

/* Kinds rope and extend: wavelength, decay or scale against the pair index
 * or the distance, a line per row (rope: the configuration, with its
 * unscaled wavelengths dashed; extend: a method each). */
static int draw_rope(struct srv_call *c, struct analysis_req *rq,
                     struct srv_plot *pl, struct srv_err *err)
{
  struct srv_plot_series *ser;
  struct srv_plot_mark *mk;
  const int scaled =
      rq->kind == KIND_ROPE && rq->cfg.p.rope_type != AB_ROPE_DEFAULT;
  const char *type = ab_rope_type_name(rq->cfg.p.rope_type);
  int64_t r, i;
  int n = 0;

  ser = srv_arena_calloc(&c->arena, (size_t)rq->rows + 2, sizeof *ser);
  mk = srv_arena_calloc(&c->arena, 2, sizeof *mk);
  if (!ser || !mk)
    return srv_fail(err, 500, NULL, "out of memory drawing the plot");
  if (rq->plot == PLOT_DECAY) {
    /* Both curves relative to distance 0, where each is at its largest:
     * the bound starts at (P+1)/2, the mean cosine at 1. */
    for (r = 0; r < rq->rows; r++) {
      double *y = srv_arena_alloc(&c->arena, (size_t)rq->N * sizeof *y);
      if (!y)
        return srv_fail(err, 500, NULL, "out of memory drawing the plot");
      for (i = 0; i < rq->N; i++)
        y[i] = rq->bound[r * rq->N + i] / rq->bound[r * rq->N];
      ser[n++] = (struct srv_plot_series){
          rq->kind == KIND_ROPE ? "RoFormer bound" : g_methods[r].name,
          rq->dist, y, rq->N, SRV_PLOT_LINE};
    }
    if (rq->kind == KIND_ROPE)
      ser[n++] = (struct srv_plot_series){"mean cos(r theta_k)", rq->dist,
                                          rq->mean, rq->N, SRV_PLOT_LINE};
    pl->title = rq->kind == KIND_ROPE
                    ? "RoPE long-term decay (RoFormer 3.4.3)"
                    : "RoPE long-term decay of each method at seq_len";
    pl->xlabel = "relative distance r (tokens)";
    pl->xlog = 1;
    pl->ylabel = "value / value at r = 0";
    if (rq->trained < rq->seq_len)
      mk[pl->nmarks++] = (struct srv_plot_mark){
          1, (double)rq->trained,
          arena_printf(c, "trained %lld", (long long)rq->trained)};
  } else {
    const double *rows = rq->plot == PLOT_SCALE ? rq->po.scale : rq->po.wl;
    if (rq->plot == PLOT_WAVELENGTH && scaled)
      ser[n++] = (struct srv_plot_series){"unscaled", NULL, rq->wl_orig, rq->P,
                                          SRV_PLOT_DASHED};
    for (r = 0; r < rq->rows; r++)
      ser[n++] = (struct srv_plot_series){
          rq->kind == KIND_EXTEND ? g_methods[r].name : type, NULL,
          rows + r * rq->P, rq->P, SRV_PLOT_LINE};
    pl->xlabel = "pair index k";
    pl->ylog = 1;
    if (rq->plot == PLOT_SCALE) {
      pl->title = rq->kind == KIND_ROPE
                      ? "RoPE frequency factor per pair"
                      : "frequency factor per pair, each method";
      pl->ylabel = "scaled / original frequency";
    } else {
      pl->title = "RoPE wavelength per pair";
      pl->ylabel = "wavelength 2 pi / theta_k";
      mk[pl->nmarks++] = (struct srv_plot_mark){
          0, (double)rq->trained,
          arena_printf(c, "trained %lld", (long long)rq->trained)};
      if (rq->seq_len != rq->trained)
        mk[pl->nmarks++] = (struct srv_plot_mark){
            0, (double)rq->seq_len,
            arena_printf(c, "seq_len %lld", (long long)rq->seq_len)};
    }
  }
  pl->series = ser;
  pl->nseries = n;
  pl->marks = mk;
  return 0;
}

/* Kind bias: the bias against distance (a line per head), the reach of
 * each head, or T5's buckets. */
static int draw_bias(struct srv_call *c, struct analysis_req *rq,
                     struct srv_plot *pl, struct srv_err *err)
{
  const int64_t S = rq->seq_len, H = rq->num_heads;
  const char *method = ab_bias_method_name(rq->bp.method);
  struct srv_plot_series *ser;
  struct srv_plot_mark *mk;
  char title[96];
  int64_t h;
  int n = 0;

  ser = srv_arena_calloc(&c->arena, (size_t)H + 2, sizeof *ser);
  mk = srv_arena_calloc(&c->arena, 2, sizeof *mk);
  if (!ser || !mk)
    return srv_fail(err, 500, NULL, "out of memory drawing the plot");
  pl->series = ser;
  pl->marks = mk;
  if (rq->plot == PLOT_BUCKETS) {
    double *b = srv_arena_alloc(&c->arena, (size_t)S * 2 * sizeof *b);
    if (!b)
      return srv_fail(err, 500, NULL, "out of memory drawing the plot");
    for (h = 0; h < S; h++) {
      b[h] = rq->buckets[h];
      b[S + h] = rq->buckets_after ? rq->buckets_after[h] : 0;
    }
    ser[n++] = (struct srv_plot_series){"keys before the query", NULL, b, S,
                                        SRV_PLOT_STEPS};
    if (rq->buckets_after)
      ser[n++] = (struct srv_plot_series){"keys after the query", NULL, b + S,
                                          S, SRV_PLOT_STEPS};
    mk[pl->nmarks++] = (struct srv_plot_mark){
        1, (double)rq->starts[rq->nbd - 1],
        arena_printf(c, "last bucket from %lld",
                     (long long)rq->starts[rq->nbd - 1])};
    pl->title = "T5 bucket of each distance";
    pl->xlabel = "distance |key - query| (tokens)";
    pl->ylabel = "bucket";
  } else if (rq->plot == PLOT_REACH) {
    ser[n++] = (struct srv_plot_series){"weight / 10", NULL, rq->reach10, H,
                                        SRV_PLOT_MARKERS};
    ser[n++] = (struct srv_plot_series){"weight / 100", NULL, rq->reach100, H,
                                        SRV_PLOT_MARKERS};
    snprintf(title, sizeof title,
             "%s: distance at which the bias alone cuts a weight", method);
    pl->title = srv_arena_strdup(&c->arena, title);
    pl->xlabel = "head";
    pl->ylabel = "distance (tokens)";
    pl->ylog = 1;
  } else {
    double lowest = 0;
    for (h = 0; h < H; h++) {
      double *y = widen_f32(c, rq->bias + h * S, S);
      const char *lb = arena_printf(c, "head %lld", (long long)h);
      int64_t i;
      if (!y || !lb)
        return srv_fail(err, 500, NULL, "out of memory drawing the plot");
      for (i = 0; i < S; i++)
        lowest = y[i] < lowest ? y[i] : lowest;
      ser[n++] = (struct srv_plot_series){
          lb, NULL, y, S,
          rq->bp.method == AB_BIAS_T5 ? SRV_PLOT_STEPS : SRV_PLOT_LINE};
    }
    if ((rq->bp.method == AB_BIAS_ALIBI ||
         rq->bp.method == AB_BIAS_KERPLE) &&
        lowest > -20 * log(100.0)) {
      /* Their bias is 0 at distance 0: these lines are the reach (drawn
       * while they stand apart from the axis). */
      mk[pl->nmarks++] =
          (struct srv_plot_mark){0, -log(10.0), "weight / 10"};
      mk[pl->nmarks++] =
          (struct srv_plot_mark){0, -log(100.0), "weight / 100"};
    } else if (rq->bp.method == AB_BIAS_FIRE && rq->bp.L < (double)S) {
      mk[pl->nmarks++] = (struct srv_plot_mark){
          1, rq->bp.L, arena_printf(c, "L = %lld", (long long)rq->bp.L)};
    }
    snprintf(title, sizeof title, "%s bias against distance (query at %lld)",
             method, (long long)(S - 1));
    pl->title = srv_arena_strdup(&c->arena, title);
    pl->xlabel = "distance to an earlier key (tokens)";
    pl->ylabel = "bias added to the score";
  }
  pl->nseries = n;
  return 0;
}

static int draw(struct srv_call *c, struct analysis_req *rq,
                struct srv_err *err)
{
  struct srv_plot pl;

  memset(&pl, 0, sizeof pl);
  if ((rq->kind == KIND_BIAS ? draw_bias(c, rq, &pl, err)
                             : draw_rope(c, rq, &pl, err)) != 0)
    return -1;
  if (srv_codec_png_plot(&pl, &c->plan.custom, err) != 0)
    return -1;
  c->plan.custom_type = "image/png";
  return 0;
}

/* ==== the handler ======================================================= */

int srv_h_analysis(struct srv_call *c, struct srv_err *err)
{
  struct srv_pctx pc;
  struct analysis_req *rq;
  struct srv_pbind b;

  if (!(rq = srv_handler_begin(c, &pc, sizeof *rq, err)))
    return -1;
  rq->plot = -1;
  b = (struct srv_pbind){&srv_ptab_analysis, rq, 0};
  if (srv_params_parse(&pc, c->in.params, &b, err) != 0)
    return -1;
  if (!srv_pbind_seen(&b, "plot"))
    rq->plot = -1;
  switch (rq->kind) {
  case KIND_ROPE:
    return prepare_rope(c, &pc, rq, err);
  case KIND_EXTEND:
    return prepare_extend(c, &pc, rq, err);
  default:
    return prepare_bias(c, &pc, rq, err);
  }
}

int srv_h_analysis_finish(struct srv_call *c, struct srv_err *err)
{
  struct analysis_req *rq = c->plan.state;

  if (!rq)
    return 0;
  if (rq->kind == KIND_BIAS)
    bias_finish(rq);
  if (c->in.fmt != SRV_FMT_PNG)
    return 0;
  return draw(c, rq, err);
}
