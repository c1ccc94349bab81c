/* attention.c: POST /v1/attention -- full attention with GQA, causal and
 * window masks, key lengths, soft-capping, additive biases, and RoPE and a
 * position bias fused in; returns output and optionally lse and weights, or
 * a PNG picture of the weights of some heads (Accept: image/png). */
#include "params.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Bits of "return". */
enum { RET_OUTPUT = 1u << 0, RET_LSE = 1u << 1, RET_WEIGHTS = 1u << 2 };

/* The attention "rope" object's position members (srv_ptab_rope_attn binds
 * its offsets 0 and sizeof(json_t *) to this). */
struct rope_pos_json {
  const json_t *q_positions, *k_positions;
};
_Static_assert(offsetof(struct rope_pos_json, k_positions) ==
                   sizeof(const json_t *),
               "srv_ptab_rope_attn offsets");

struct attn_req {
  struct ab_tensor q, k, v, attn_bias;
  int layout, causal;
  double scale, softcap;
  int64_t q_offset, sliding;
  const json_t *rope_obj, *bias_obj, *kv_lens, *window;
  unsigned ret;
  struct srv_picture pic;
  int64_t batch;
  /* image/png: the weights [B, Hq, Nq, Nk] (not an output), drawn by
   * srv_h_attention_finish, and the query position of their row 0 */
  float *weights;
  int64_t Hq, Nq, Nk, row0;
  /* resolved */
  struct srv_rope_cfg rope;
  struct rope_pos_json rope_pos;
  struct ab_bias_params bias;
  int32_t *kv;
  int64_t *qpos, *kpos;
  struct ab_attn_params ap;
};
/* REQ(f): where the parameter parser stores member f of the request
 * (struct attn_req). */
#define REQ(f) offsetof(struct attn_req, f)

/* ==== table ============================================================= */

static const struct srv_choice layouts[] = {
    {"bhsd", AB_LAYOUT_BHSD, "[batch, heads, seq, dim] (PyTorch SDPA)"},
    {"bshd", AB_LAYOUT_BSHD,
     "[batch, seq, heads, dim] (FlashAttention, HF hidden states)"},
    {NULL, 0, NULL}};
static const struct srv_choice returns[] = {
    {"output", 0, "[B, Hq, Nq, Dv] in the request's layout"},
    {"lse", 1, "[B, Hq, Nq]: log-sum-exp of the final scores per row"},
    {"weights", 2, "[B, Hq, Nq, Nk]: the softmax probabilities"},
    {NULL, 0, NULL}};

static const struct srv_param attn_params[] = {
    {.name = "q", .type = SRV_PT_TENSOR, .flags = SRV_PF_REQ, .off = REQ(q),
     .desc = "[B, Hq, Nq, D] (bhsd) or [B, Nq, Hq, D] (bshd); rank 3 means "
             "B = 1, rank 2 one head"},
    {.name = "k", .type = SRV_PT_TENSOR, .flags = SRV_PF_REQ, .off = REQ(k),
     .desc = "[B, Hkv, Nk, D]; Hq must be a multiple of Hkv (GQA/MQA)"},
    {.name = "v", .type = SRV_PT_TENSOR, .flags = SRV_PF_REQ, .off = REQ(v),
     .desc = "[B, Hkv, Nk, Dv]"},
    {.name = "layout", .type = SRV_PT_ENUM, .flags = SRV_PF_DEF,
     .def = AB_LAYOUT_BHSD, .choices = layouts, .off = REQ(layout),
     .desc = "axis order of q, k, v and output"},
    {.name = "scale", .type = SRV_PT_NUM, .off = REQ(scale),
     .def_rule = "1/sqrt(D)", .desc = "multiplies q.k (T5 uses 1)"},
    {.name = "causal", .type = SRV_PT_BOOL, .flags = SRV_PF_DEF, .def = 0,
     .off = REQ(causal), .desc = "keys after the query position are masked"},
    {.name = "q_offset", .type = SRV_PT_INT, .off = REQ(q_offset),
     .def_rule = "Nk - Nq",
     .desc = "position of query row 0 (keys sit at 0..Nk-1); the default "
             "is bottom-right alignment"},
    {.name = "rope", .type = SRV_PT_OBJECT, .off = REQ(rope_obj),
     .desc = "RoPE on q and k before the scores: the /v1/rope config "
             "fields plus q_positions, k_positions"},
    {.name = "bias", .type = SRV_PT_OBJECT, .off = REQ(bias_obj),
     .desc = "position bias computed in the kernel: method and the /v1/bias "
             "method parameters (num_heads, lengths, offset and causality "
             "come from this request)"},
    {.name = "attn_bias", .type = SRV_PT_TENSOR, .off = REQ(attn_bias),
     .desc = "additive float bias broadcastable to [B, Hq, Nq, Nk] "
             "(head-major in both layouts)"},
    {.name = "kv_lens", .type = SRV_PT_INTS, .flags = SRV_PF_MIN, .min = 0,
     .off = REQ(kv_lens),
     .desc = "[B]: keys j >= kv_lens[b] are masked (each 0..Nk)"},
    {.name = "window", .type = SRV_PT_INTS, .flags = SRV_PF_MIN, .min = -1,
     .off = REQ(window),
     .desc = "inclusive [left, right], -1 unbounded: key j is visible iff "
             "p_q - left <= j <= p_q + right"},
    {.name = "sliding_window", .type = SRV_PT_INT, .flags = SRV_PF_MIN,
     .min = 1, .off = REQ(sliding),
     .desc = "HF form: W means window [W-1, 0] (not with window)"},
    {.name = "softcap", .type = SRV_PT_NUM, .flags = SRV_PF_DEF | SRV_PF_MIN,
     .def = 0, .min = 0, .off = REQ(softcap),
     .desc = "c*tanh(s/c) on the scaled scores before the bias; 0 is off"},
    {.name = "return", .type = SRV_PT_ENUMS, .flags = SRV_PF_DEF,
     .def = RET_OUTPUT, .choices = returns, .off = REQ(ret),
     .desc = "the outputs to send (image/png: the weights are drawn, "
             "whatever it says)"},
    SRV_PICTURE_PARAMS(REQ(pic)),
    {.name = "batch", .type = SRV_PT_INT, .flags = SRV_PF_DEF | SRV_PF_MIN,
     .def = 0, .min = 0, .off = REQ(batch),
     .desc = "the batch entry drawn when Accept is image/png"},
};
const struct srv_ptable srv_ptab_attention =
    SRV_PTABLE("attention", "full attention with masks, biases and RoPE",
               attn_params);

/* ==== helpers =========================================================== */

/* [B, H, N, D] of a rank-2..4 tensor in a layout. */
static void view_dims(const struct ab_tensor *t, int layout, int64_t d[4])
{
  const int64_t *s = t->shape;

  switch (t->ndim) {
  case 4:
    d[0] = s[0];
    d[1] = layout == AB_LAYOUT_BHSD ? s[1] : s[2];
    d[2] = layout == AB_LAYOUT_BHSD ? s[2] : s[1];
    d[3] = s[3];
    break;
  case 3:
    d[0] = 1;
    d[1] = layout == AB_LAYOUT_BHSD ? s[0] : s[1];
    d[2] = layout == AB_LAYOUT_BHSD ? s[1] : s[0];
    d[3] = s[2];
    break;
  default:
    d[0] = 1;
    d[1] = 1;
    d[2] = s[0];
    d[3] = t->ndim > 1 ? s[1] : 1;
    break;
  }
}

/* A member that the attention request gives itself may not appear inside
 * a sub-object: say where it belongs. */
static int forbid(const struct srv_pctx *sub, const json_t *obj,
                  const char *const *names, const char *why,
                  struct srv_err *err)
{
  char ptr[256];
  int i;

  for (i = 0; names[i]; i++)
    if (json_object_get(obj, names[i]))
      return srv_fail(err, 400, srv_pctx_ptr(sub, names[i], ptr, sizeof ptr),
                      "%s cannot be given inside %s: %s", names[i],
                      sub->ptr + 1, why);
  return 0;
}

static int parse_rope(const struct srv_pctx *pc, struct attn_req *rq,
                      int64_t D, int64_t Nq, int64_t Nk, struct srv_err *err)
{
  static const char *const top_only[] = {"q", "k", "layout", NULL};
  static const char *const pos_only[] = {"positions", NULL};
  struct srv_pctx rc;
  struct srv_pbind pos = {&srv_ptab_rope_attn, &rq->rope_pos, 0};
  const struct srv_ptable *tabs[2] = {&srv_ptab_rope_config,
                                      &srv_ptab_rope_attn};
  int64_t n, mx;
  int flat_ok;

  srv_pctx_child(pc, "rope", &rc);
  if (forbid(&rc, rq->rope_obj, top_only,
             "the attention request's own q, k and layout are used", err) ||
      forbid(&rc, rq->rope_obj, pos_only,
             "use q_positions and k_positions", err))
    return -1;
  if (srv_rope_parse(&rc, rq->rope_obj, D, &rq->rope, err) != 0 ||
      srv_params_parse(&rc, rq->rope_obj, &pos, err) != 0)
    return -1;
  srv_params_unknown(&rc, rq->rope_obj, tabs, 2, NULL);
  flat_ok = rq->rope.p.rope_type != AB_ROPE_VISION2D;
  if (rq->rope_pos.q_positions &&
      srv_rope_positions(rc.c, rq->rope_pos.q_positions, "/rope/q_positions",
                         rq->rope.n_axes, flat_ok, Nq, &rq->qpos, &n, &mx,
                         err) != 0)
    return -1;
  if (rq->rope_pos.k_positions &&
      srv_rope_positions(rc.c, rq->rope_pos.k_positions, "/rope/k_positions",
                         rq->rope.n_axes, flat_ok, Nk, &rq->kpos, &n, &mx,
                         err) != 0)
    return -1;
  rq->ap.rope = &rq->rope.p;
  rq->ap.rope_seq_len = rq->rope.seq_len;
  rq->ap.q_positions = rq->qpos;
  rq->ap.k_positions = rq->kpos;
  return 0;
}

static int parse_bias(const struct srv_pctx *pc, struct attn_req *rq,
                      int64_t Hq, struct srv_err *err)
{
  static const char *const geometry[] = {"num_heads", "q_len", "k_len",
                                         "q_offset",  "causal", "window",
                                         "sliding_window", NULL};
  static const char *const known[] = {"method", NULL};
  struct srv_pctx bc;
  const struct srv_ptable *tabs[1];
  int method;

  srv_pctx_child(pc, "bias", &bc);
  if (forbid(&bc, rq->bias_obj, geometry,
             "heads, lengths, offset, causality and window come from the "
             "attention request",
             err))
    return -1;
  if (srv_params_enum(&bc, rq->bias_obj, &srv_param_bias_method, &method,
                      err) < 0)
    return -1;
  ab_bias_params_init(&rq->bias);
  rq->bias.method = (enum ab_bias_method)method;
  rq->bias.num_heads = Hq;
  if (srv_bias_parse_method(&bc, rq->bias_obj, &rq->bias, err) != 0)
    return -1;
  tabs[0] = srv_bias_method_params((enum ab_bias_method)method);
  srv_params_unknown(&bc, rq->bias_obj, tabs, 1, known);
  rq->ap.bias = &rq->bias;
  return 0;
}

/* kv_lens as int32 [B], each 0..Nk. */
static int parse_kv_lens(struct srv_call *c, struct attn_req *rq, int64_t B,
                         int64_t Nk, struct srv_err *err)
{
  int64_t *v;
  size_t n = json_array_size(rq->kv_lens), i;

  if ((int64_t)n != B)
    return srv_fail(err, 400, "/kv_lens",
                    "kv_lens has %zu entries; it needs one per batch entry "
                    "(%lld)",
                    n, (long long)B);
  v = srv_arena_alloc(&c->arena, n * sizeof *v);
  rq->kv = srv_arena_alloc(&c->arena, n * sizeof *rq->kv);
  if (!v || !rq->kv)
    return srv_fail(err, 500, "/kv_lens", "out of memory");
  srv_params_ints(rq->kv_lens, v);
  for (i = 0; i < n; i++) {
    if (v[i] > Nk) {
      char ptr[48];
      snprintf(ptr, sizeof ptr, "/kv_lens/%zu", i);
      return srv_fail(err, 400, ptr,
                      "kv_lens[%zu] = %lld exceeds the key length %lld", i,
                      (long long)v[i], (long long)Nk);
    }
    rq->kv[i] = (int32_t)v[i];
  }
  rq->ap.kv_lens = rq->kv;
  return 0;
}

/* The body is still arriving (c->req.body_avail bytes are in): the job may
 * be built before q, k, v and attn_bias are there (inputs_later), but any
 * other tensor it reads while being built -- a bias table, FIRE weights --
 * must be in already. */
static int later_ready(struct srv_call *c, struct attn_req *rq,
                       struct srv_err *err)
{
  const char *in_end = c->req.body + c->req.body_avail;
  int i;

  for (i = 0; i < c->in.nbin; i++) {
    const struct ab_tensor *t = &c->in.bin[i].t;
    const char *p = t->data;
    if (p == rq->q.data || p == rq->k.data || p == rq->v.data ||
        p == rq->attn_bias.data)
      continue;
    if (p + ab_tensor_numel(t) * (int64_t)ab_dtype_size(
                                     (enum ab_dtype)t->dtype) > in_end)
      return srv_fail(err, 400, NULL, "tensor \"%.60s\" has not arrived yet",
                      c->in.bin[i].name);
  }
  rq->ap.inputs_later = 1;
  return 0;
}

/* ==== image/png ========================================================= */

/* Accept: image/png: the same attention, with every weight kept (the
 * picture's heads are chosen after the fact) and nothing declared as an
 * output; srv_h_attention_finish draws.  The budget counts what is held:
 * the weights and the output in float32 (4 bytes each: Nq x Nk per head
 * and batch entry -- the reason large requests refuse a picture before
 * they refuse the numbers) and the picture's pixels. */
static int prepare_picture(struct srv_call *c, const struct srv_pctx *pc,
                           const struct srv_pbind *b, struct attn_req *rq,
                           const int64_t qd[4], const int64_t kd[4],
                           const int64_t vd[4], const int64_t *oshape,
                           const int64_t *wshape, double flops,
                           struct srv_err *err)
{
  struct ab_attn_params *ap = &rq->ap;
  double rows = (double)qd[0] * (double)qd[1] * (double)qd[2];
  int r = rq->q.ndim;
  ab_job_t *job = NULL;
  enum ab_status st;

  if (rq->batch >= qd[0])
    return srv_fail(err, 400, "/batch",
                    "batch %lld does not exist: the batch size is %lld",
                    (long long)rq->batch, (long long)qd[0]);
  if (srv_picture_select(pc, &rq->pic, srv_pbind_seen(b, "head"), qd[1],
                         err) != 0)
    return -1;
  if (srv_check_budget(c,
                       4.0 * rows * ((double)kd[2] + (double)vd[3]) +
                           srv_codec_png_bound(rq->pic.n),
                       flops, err) != 0)
    return -1;
  ap->out = srv_tensor_alloc(c, "output", AB_DTYPE_F32, r, oshape, err);
  ap->weights = ap->out ? srv_tensor_alloc(c, "weights", AB_DTYPE_F32, r,
                                           wshape, err)
                        : NULL;
  if (!ap->weights)
    return -1;
  rq->weights = ap->weights;
  rq->Hq = qd[1];
  rq->Nq = qd[2];
  rq->Nk = kd[2];
  rq->row0 = ap->has_q_offset ? ap->q_offset : kd[2] - qd[2];
  st = ab_attention_job(ap, &job);
  if (st != AB_STATUS_OK)
    return srv_fail_lib(err, st, "", NULL);
  return srv_add_job(c, job, err);
}

int srv_h_attention_finish(struct srv_call *c, struct srv_err *err)
{
  struct attn_req *rq = c->plan.state;
  char title[64];

  if (c->in.fmt != SRV_FMT_PNG || !rq || !rq->weights)
    return 0;
  snprintf(title, sizeof title, "attention weights, batch %lld",
           (long long)rq->batch);
  return srv_picture_draw(c, &rq->pic,
                          rq->weights + rq->batch * rq->Hq * rq->Nq * rq->Nk,
                          1, rq->Nq, rq->Nk, rq->row0, title, 1, err);
}

/* ==== the handler ======================================================= */

int srv_h_attention(struct srv_call *c, struct srv_err *err)
{
  struct srv_pctx pc;
  struct attn_req *rq;
  struct srv_pbind b;
  const struct srv_ptable *tabs[2];
  struct ab_attn_params *ap;
  int64_t qd[4], kd[4], vd[4], oshape[4], lshape[3], wshape[4];
  double flops, bytes;
  int r, i;
  ab_job_t *job = NULL;
  enum ab_status st;

  if (!(rq = srv_handler_begin(c, &pc, sizeof *rq, err)))
    return -1;
  b = (struct srv_pbind){&srv_ptab_attention, rq, 0};
  if (srv_params_parse(&pc, c->in.params, &b, err) != 0)
    return -1;

  ap = &rq->ap;
  ab_attn_params_init(ap);
  /* The pool's threads run the pieces: a decoding step is cut for them,
   * not for a machine of many threads. */
  ap->threads = srv_cfg.threads > 0 ? srv_cfg.threads : 0;
  ap->q = &rq->q;
  ap->k = &rq->k;
  ap->v = &rq->v;
  ap->layout = (enum ab_layout)rq->layout;
  ap->has_scale = srv_pbind_seen(&b, "scale");
  ap->scale = rq->scale;
  ap->softcap = rq->softcap;
  ap->causal = rq->causal;
  ap->has_q_offset = srv_pbind_seen(&b, "q_offset");
  ap->q_offset = rq->q_offset;
  if (srv_window_parse(&pc, rq->window, rq->sliding,
                       srv_pbind_seen(&b, "sliding_window"), &ap->window_left,
                       &ap->window_right, err) != 0)
    return -1;

  /* Shapes first (the library checks ranks, batch, GQA, head sizes from
   * the descriptors alone); the rope and bias objects need D and Hq. */
  if (ab_attention_flops(ap) < 0)
    return srv_fail_lib(err, ab_last_error()->status, "", NULL);
  view_dims(&rq->q, rq->layout, qd);
  view_dims(&rq->k, rq->layout, kd);
  view_dims(&rq->v, rq->layout, vd);

  if (rq->rope_obj && parse_rope(&pc, rq, qd[3], qd[2], kd[2], err) != 0)
    return -1;
  if (rq->bias_obj && parse_bias(&pc, rq, qd[1], err) != 0)
    return -1;
  if (rq->kv_lens && parse_kv_lens(c, rq, qd[0], kd[2], err) != 0)
    return -1;
  if (rq->attn_bias.data)
    ap->attn_bias = &rq->attn_bias;
  tabs[0] = &srv_ptab_attention;
  tabs[1] = &srv_ptab_output;
  srv_params_unknown(&pc, c->in.params, tabs, 2, NULL);
  srv_params_unused_bin(&pc);

  /* Everything again, now with rope, bias, kv_lens and attn_bias. */
  flops = ab_attention_flops(ap);
  if (flops < 0)
    return srv_fail_lib(err, ab_last_error()->status, "", NULL);

  /* Outputs keep the rank of the inputs: output is q's shape with Dv last;
   * lse and weights drop the axes q does not have. */
  r = rq->q.ndim;
  for (i = 0; i < r; i++)
    oshape[i] = rq->q.shape[i];
  oshape[r - 1] = vd[3];
  {
    const int64_t full_l[3] = {qd[0], qd[1], qd[2]};
    const int64_t full_w[4] = {qd[0], qd[1], qd[2], kd[2]};
    for (i = 0; i < r - 1; i++)
      lshape[i] = full_l[3 - (r - 1) + i];
    for (i = 0; i < r; i++)
      wshape[i] = full_w[4 - r + i];
  }
  if (c->in.fmt == SRV_FMT_PNG)
    return prepare_picture(c, &pc, &b, rq, qd, kd, vd, oshape, wshape, flops,
                           err);
  {
    double rows = (double)qd[0] * (double)qd[1] * (double)qd[2];
    bytes = rq->ret & RET_OUTPUT ? srv_out_bytes(c, rows * (double)vd[3]) : 0;
    if (rq->ret & RET_LSE)
      bytes += srv_out_bytes(c, rows);
    if (rq->ret & RET_WEIGHTS)
      bytes += srv_out_bytes(c, rows * (double)kd[2]);
  }
  if (srv_check_budget(c, bytes, flops, err) != 0)
    return -1;

  /* Not asked for, output is not sent; the kernel writes it all the same. */
  ap->out = rq->ret & RET_OUTPUT
                ? srv_output_tensor(c, "output", AB_DTYPE_F32, r, oshape, err)
                : srv_tensor_alloc(c, "output", AB_DTYPE_F32, r, oshape, err);
  if (!ap->out)
    return -1;
  if (rq->ret & RET_LSE) {
    ap->lse = srv_output_tensor(c, "lse", AB_DTYPE_F32, r - 1, lshape, err);
    if (!ap->lse)
      return -1;
  }
  if (rq->ret & RET_WEIGHTS) {
    ap->weights =
        srv_output_tensor(c, "weights", AB_DTYPE_F32, r, wshape, err);
    if (!ap->weights)
      return -1;
  }
  if (c->req.body_avail && later_ready(c, rq, err) != 0)
    return -1;
  st = ab_attention_job(ap, &job);
  if (st != AB_STATUS_OK)
    return srv_fail_lib(err, st, "", NULL);
  return srv_add_job(c, job, err);
}
