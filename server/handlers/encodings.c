/* encodings.c: POST /v1/encodings -- absolute position encodings
 * (sinusoidal, learned, integer, binary), alone or added to x. */
#include "params.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* Everything one request needs, in the arena. */
struct enc_req {
  struct ab_encoding_params p; /* first: tests read defaults through it */
  const json_t *positions;
  struct ab_tensor x, table;
};

/* REQ(f): where the parameter parser stores member f of the request
 * (struct enc_req). */
#define REQ(f) offsetof(struct enc_req, f)

/* ==== tables ============================================================ */

static const struct srv_choice enc_method_choices[] = {
    {"sinusoidal", AB_ENC_SINUSOIDAL,
     "Vaswani et al.: sin and cos of the position at geometric frequencies"},
    {"learned", AB_ENC_LEARNED,
     "rows of a learned table (GPT-2 wpe, BERT, OPT/BART with offset 2)"},
    {"integer", AB_ENC_INTEGER, "every column is p / normalize (didactic)"},
    {"binary", AB_ENC_BINARY,
     "column c is bit c of the position, least significant first "
     "(didactic)"},
    {NULL, 0, NULL}};

static const struct srv_choice sin_layouts[] = {
    {"interleaved", AB_SIN_INTERLEAVED,
     "paper: even columns sin, odd cos, frequency base^(-2k/dim)"},
    {"concat", AB_SIN_CONCAT, "[sin | cos] with the same frequencies (HF "
                              "Marian, Pegasus)"},
    {"tensor2tensor", AB_SIN_T2T,
     "[sin | cos], frequency base^(-k/(dim/2-1)), odd dim zero-padded "
     "(fairseq, tensor2tensor, Whisper)"},
    {NULL, 0, NULL}};

static const struct srv_param enc_common[] = {
    {.name = "method", .type = SRV_PT_ENUM,
     .flags = SRV_PF_REQ | SRV_PF_NOSTORE, .choices = enc_method_choices,
     .desc = "which encoding"},
    {.name = "positions", .type = SRV_PT_POSITIONS, .flags = SRV_PF_REQ,
     .off = REQ(positions),
     .desc = "n (positions 0..n-1) or a list of positions (fractional ones "
             "allowed for sinusoidal and integer)"},
    {.name = "x", .type = SRV_PT_TENSOR, .off = REQ(x),
     .desc = "optional [..., n, dim]: the only output is then x + encoding, "
             "broadcast over the leading axes"},
};

static const struct srv_param enc_sinusoidal[] = {
    {.name = "dim", .type = SRV_PT_INT, .flags = SRV_PF_REQ | SRV_PF_MIN,
     .min = 1, .off = REQ(p.dim),
     .desc = "columns; even for interleaved and concat, >= 4 for "
             "tensor2tensor"},
    {.name = "base", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN_EXCL, .def = 10000, .min = 0,
     .off = REQ(p.base), .desc = "frequency base"},
    {.name = "layout", .type = SRV_PT_ENUM, .flags = SRV_PF_DEF,
     .def = AB_SIN_INTERLEAVED, .choices = sin_layouts, .off = REQ(p.layout),
     .desc = "column layout and frequency formula"},
};

static const struct srv_param enc_learned[] = {
    {.name = "table", .type = SRV_PT_TENSOR, .flags = SRV_PF_REQ,
     .off = REQ(table), .desc = "the embedding matrix [rows, dim]"},
    {.name = "offset", .type = SRV_PT_INT, .flags = SRV_PF_DEF, .def = 0,
     .off = REQ(p.offset),
     .desc = "row = position + offset (OPT/BART use 2); a row outside the "
             "table is a 400"},
    {.name = "dim", .type = SRV_PT_INT, .flags = SRV_PF_MIN, .min = 1,
     .off = REQ(p.dim), .def_rule = "the table's column count",
     .desc = "optional; must equal the table's column count"},
};

static const struct srv_param enc_integer[] = {
    {.name = "dim", .type = SRV_PT_INT, .flags = SRV_PF_REQ | SRV_PF_MIN,
     .min = 1, .off = REQ(p.dim), .desc = "columns (all equal)"},
    {.name = "normalize", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN_EXCL, .def = 1, .min = 0,
     .off = REQ(p.normalize), .desc = "divisor: PE[p, c] = p / normalize"},
};

static const struct srv_param enc_binary[] = {
    {.name = "dim", .type = SRV_PT_INT, .flags = SRV_PF_REQ | SRV_PF_MIN,
     .min = 1, .off = REQ(p.dim),
     .desc = "columns: bits 0..dim-1 of each (non-negative, integral) "
             "position"},
};

const struct srv_ptable srv_ptab_enc_common = SRV_PTABLE(
    "encodings", "absolute position encodings, alone or added to x",
    enc_common);

static const struct srv_ptable tab_sinusoidal = SRV_PTABLE(
    "sinusoidal", "sin/cos at geometric frequencies (Vaswani et al. 2017)",
    enc_sinusoidal);
static const struct srv_ptable tab_learned = SRV_PTABLE(
    "learned", "rows of a learned position table", enc_learned);
static const struct srv_ptable tab_integer = SRV_PTABLE(
    "integer", "the position itself, scaled: PE[p, c] = p / normalize",
    enc_integer);
static const struct srv_ptable tab_binary = SRV_PTABLE(
    "binary", "the bits of the position: PE[p, c] = (p >> c) & 1",
    enc_binary);

/* Indexed by enum ab_enc_method. */
const struct srv_ptable *const srv_ptab_enc_methods[] = {
    &tab_sinusoidal, &tab_learned, &tab_integer, &tab_binary};
const int srv_ptab_enc_nmethods =
    (int)(sizeof srv_ptab_enc_methods / sizeof srv_ptab_enc_methods[0]);

/* ==== positions ========================================================= */

/* Positions as doubles: n for the integer form, else the list (numbers;
 * the library checks integrality where the method needs it). */
static int read_positions(struct srv_call *c, const json_t *j, int64_t n,
                          double **out, struct srv_err *err)
{
  double *pos;
  int64_t i;

  if ((uint64_t)n > SIZE_MAX / sizeof(double))
    return srv_fail(err, 413, "/positions", "%lld positions are too many",
                    (long long)n);
  pos = srv_arena_alloc(&c->arena, (size_t)n * sizeof(double));
  if (!pos)
    return srv_fail(err, 500, "/positions",
                    "cannot allocate %lld positions", (long long)n);
  if (!json_is_array(j)) {
    for (i = 0; i < n; i++)
      pos[i] = (double)i;
  } else {
    for (i = 0; i < n; i++) {
      const json_t *e = json_array_get(j, (size_t)i);
      if (!json_is_number(e)) {
        char ptr[64];
        snprintf(ptr, sizeof ptr, "/positions/%lld", (long long)i);
        return srv_fail(err, 400, ptr,
                        "positions[%lld] must be a number (a list of "
                        "positions is flat)",
                        (long long)i);
      }
      pos[i] = json_number_value(e);
    }
  }
  *out = pos;
  return 0;
}

/* ==== the handler ======================================================= */

int srv_h_encodings(struct srv_call *c, struct srv_err *err)
{
  struct srv_pctx pc;
  struct enc_req *rq;
  struct srv_pbind common, meth;
  const struct srv_ptable *tabs[3];
  int method;
  int64_t n, dim, numel;
  double *pos = NULL, out_numel, temp_bytes;
  float *out;
  enum ab_status st;

  if (!(rq = srv_handler_begin(c, &pc, sizeof *rq, err)))
    return -1;
  ab_encoding_params_init(&rq->p);

  if (srv_params_enum(&pc, c->in.params, &enc_common[0], &method, err) < 0)
    return -1;
  rq->p.method = (enum ab_enc_method)method;
  common = (struct srv_pbind){&srv_ptab_enc_common, rq, 0};
  meth = (struct srv_pbind){srv_ptab_enc_methods[method], rq, 0};
  if (srv_params_parse(&pc, c->in.params, &common, err) != 0 ||
      srv_params_parse(&pc, c->in.params, &meth, err) != 0)
    return -1;
  tabs[0] = &srv_ptab_enc_common;
  tabs[1] = srv_ptab_enc_methods[method];
  tabs[2] = &srv_ptab_output;
  srv_params_unknown(&pc, c->in.params, tabs, 3, NULL);
  srv_params_unused_bin(&pc);

  if (rq->p.method == AB_ENC_LEARNED) {
    if (rq->table.ndim != 2)
      return srv_fail(err, 400, "/table",
                      "table must be a matrix [rows, dim], got rank %d",
                      (int)rq->table.ndim);
    rq->p.table = &rq->table;
    /* dim is the table's width unless given (then the library checks that
     * the two agree). */
    if (!srv_pbind_seen(&meth, "dim"))
      rq->p.dim = rq->table.shape[1];
  }
  dim = rq->p.dim;
  n = srv_positions_count(rq->positions);

  if (rq->x.data) {
    const struct ab_tensor *x = &rq->x;
    if (x->ndim < 2 || x->shape[x->ndim - 1] != dim ||
        x->shape[x->ndim - 2] != n)
      return srv_fail(err, 400, "/x",
                      "x must end in [n, dim] = [%lld, %lld], got a rank-%d "
                      "tensor ending in %lld",
                      (long long)n, (long long)dim, (int)x->ndim,
                      (long long)x->shape[x->ndim - 1]);
  }

  /* Budget before any allocation: the output plus the positions. */
  out_numel = rq->x.data ? srv_numel_d(&rq->x) : (double)n * (double)dim;
  temp_bytes = 8.0 * (double)n;
  if (srv_check_budget(c, srv_out_bytes(c, out_numel) + temp_bytes,
                       20.0 * (double)n * (double)dim, err) != 0)
    return -1;
  if (ab_mul_overflow(n, dim, &numel) != 0)
    return srv_fail(err, 413, "/positions", "the encoding is too large");
  if (read_positions(c, rq->positions, n, &pos, err) != 0)
    return -1;

  /* The encoding (or x + encoding) is computed by a library job, so the
   * pool does the work, split by rows, not this HTTP thread. */
  {
    ab_job_t *job = NULL;
    int64_t shape[2] = {n, dim};

    out = rq->x.data ? srv_output_tensor(c, "x", AB_DTYPE_F32, rq->x.ndim,
                                         rq->x.shape, err)
                     : srv_output_tensor(c, "encoding", AB_DTYPE_F32, 2,
                                         shape, err);
    if (!out)
      return -1;
    st = ab_encoding_job(&rq->p, pos, n, rq->x.data ? &rq->x : NULL, out,
                         &job);
    if (st != AB_STATUS_OK)
      return srv_fail_lib(err, st, "", NULL);
    if (srv_add_job(c, job, err) != 0)
      return -1;
  }
  return 0;
}
