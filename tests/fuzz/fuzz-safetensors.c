/* fuzz-safetensors.c: safetensors request bodies -- the 8-byte header
 * length, the JSON header (dtypes, shapes, data_offsets, overlaps,
 * alignment), __metadata__ and the parameters in __metadata__.params --
 * then what the server does with them.
 *
 * Input: byte 0 chooses, the rest is the body.
 *   bits 0-1  the body route (fuzz_route_at): its prepare runs on the
 *             decoded body, with the small budgets of the route targets
 *   bits 2-6  for a route that may start early (SRV_ROUTE_EARLY), how much
 *             of the data section has arrived, in 32ths; 0: not early
 * Properties:
 *   - every decoded tensor is found by its name (srv_codec_tensor) as the
 *     same tensor (unless __metadata__.params gives the field too: 400);
 *   - the decoded tensors written back as a safetensors answer (tensors of
 *     64 KiB or more as segments, as the server sends them) decode to the
 *     same names, shapes and values;
 *   - refusals are readable 4xx (fuzz_check_error), accepted calls run and
 *     answer within the budgets (fuzz_call_run, fuzz_check_answer);
 *   - early: prepare on a body whose missing bytes are garbage, the rest
 *     arriving before the run, gives the very answer of the whole body --
 *     prepare may read only what has arrived -- and is never accepted where
 *     the whole body is refused. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_CAP ((size_t)64 << 20)
/* What the bytes that have not arrived hold while an early prepare runs. */
#define NOT_ARRIVED 0xa5

static void call_begin(struct srv_call *c, const struct srv_route *route,
                       const char *body, size_t len)
{
  fuzz_call_init(c, route, 0, 0);
  c->req.content_type = "application/vnd.safetensors";
  c->req.body = len ? body : NULL;
  c->req.body_len = len;
  c->resp.seg_ok = 1;
}

static int same_values(const struct ab_tensor *a, const struct ab_tensor *b)
{
  int64_t n = ab_tensor_numel(a), i;
  int same = 1;

  if (n != ab_tensor_numel(b) || a->ndim != b->ndim)
    return 0;
  for (i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i])
      return 0;
  if (a->dtype == AB_DTYPE_I32 || b->dtype == AB_DTYPE_I32)
    return a->dtype == b->dtype &&
           memcmp(a->data, b->data, (size_t)n * sizeof(int32_t)) == 0;
  {
    /* Every float dtype reads exactly as float32 from float64 here (the
     * answer is float64, converted from what came in). */
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    FUZZ_CHECK(x && y, "out of memory (%lld floats)", (long long)n);
    FUZZ_CHECK(ab_tensor_to_f32(a, x) == AB_STATUS_OK &&
                   ab_tensor_to_f32(b, y) == AB_STATUS_OK,
               "conversion: %s", ab_last_error()->msg);
    for (i = 0; i < n && same; i++)
      same = memcmp(&x[i], &y[i], sizeof x[i]) == 0 ||
             (x[i] != x[i] && y[i] != y[i]);
    free(x);
    free(y);
  }
  return same;
}

/* Lookups by name, and the round trip through a safetensors answer. */
static void check_tensors(struct srv_call *c)
{
  struct srv_call back;
  struct srv_err err;
  char *a;
  size_t alen;
  int i, n = c->in.nbin < SRV_MAX_OUTPUTS ? c->in.nbin : SRV_MAX_OUTPUTS;

  for (i = 0; i < c->in.nbin; i++) {
    const struct srv_named_tensor *nt = &c->in.bin[i];
    struct ab_tensor t;
    int r = srv_codec_tensor(c, nt->name, 1, &t, &err);
    /* Refused only when __metadata__.params says the same field again. */
    FUZZ_CHECK(r != 0 && (r < 0 || t.data == nt->t.data),
               "tensor \"%s\" not found by its name", nt->name);
    if (r < 0) {
      FUZZ_CHECK(err.http == 400 && strstr(err.detail, "given twice"),
                 "tensor \"%s\": %s", nt->name, err.detail);
      return;
    }
  }
  if (!n)
    return;
  c->plan.noutputs = 0;
  for (i = 0; i < n; i++) {
    struct srv_output *o = &c->plan.outputs[c->plan.noutputs++];
    memset(o, 0, sizeof *o);
    o->name = c->in.bin[i].name;
    o->t = c->in.bin[i].t;
  }
  c->in.fmt = SRV_FMT_SAFETENSORS;
  c->in.out_dtype = AB_DTYPE_F64;
  if (srv_codec_encode(c, &err) != 0) {
    fuzz_check_error(&err);
    return;
  }
  a = fuzz_answer(c, &alen);
  call_begin(&back, c->req.route, a, alen);
  FUZZ_CHECK(srv_codec_decode_request(&back, &err) == 0,
             "the safetensors answer does not decode: %s", err.detail);
  FUZZ_CHECK(back.in.nbin == n, "%d tensors written, %d read back", n,
             back.in.nbin);
  for (i = 0; i < n; i++) {
    struct ab_tensor t;
    FUZZ_CHECK(srv_codec_tensor(&back, c->in.bin[i].name, 1, &t, &err) == 1,
               "tensor \"%s\" lost in the answer", c->in.bin[i].name);
    FUZZ_CHECK(same_values(&c->in.bin[i].t, &t),
               "tensor \"%s\" changed in the answer", c->in.bin[i].name);
  }
  fuzz_call_free(&back);
  free(a);
}

/* Decode and prepare body (body_avail bytes in, 0: all), run, and return
 * the answer (malloc'd), or NULL when refused. */
static char *serve(const struct srv_route *route, const char *body,
                   size_t len, size_t avail, const char *rest,
                   size_t *alen)
{
  struct srv_call c;
  struct srv_err err;
  char *a = NULL;

  call_begin(&c, route, body, len);
  c.req.body_avail = avail;
  memset(&err, 0, sizeof err);
  if (fuzz_call_prepare(&c, &err) == 0 && (!avail || c.plan.njobs == 1)) {
    if (avail) {
      /* The rest arrives; the server's gate would run each piece once
       * the bytes it reads are in. */
      memcpy((char *)body + avail, rest, len - avail);
      c.req.body_avail = 0;
    }
    if (fuzz_call_run(&c, &err) == 0) {
      fuzz_check_answer(&c);
      a = fuzz_answer(&c, alen);
    } else {
      fuzz_check_error(&err);
    }
  } else if (!avail) {
    fuzz_check_error(&err);
  }
  fuzz_check_ignored(&c);
  fuzz_call_free(&c);
  return a;
}

/* Bytes of the body present when the route may start early: the header
 * and `k`/32 of the data section (mhd.c starts once the header is in);
 * 0 when the body cannot go early. */
static size_t early_avail(const struct srv_route *route, const uint8_t *body,
                          size_t len, unsigned k)
{
  uint64_t hlen = 0;
  int i;

  if (!(route->flags & SRV_ROUTE_EARLY) || !k || len < 8)
    return 0;
  for (i = 7; i >= 0; i--)
    hlen = hlen << 8 | body[i];
  if (hlen >= len - 8)
    return 0; /* no data section: complete as soon as the header is */
  return 8 + (size_t)hlen + (len - 8 - (size_t)hlen) * k / 32;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static int init;
  const struct srv_route *route;
  const uint8_t *body = data + 1;
  size_t len = size ? size - 1 : 0, avail, alen = 0, elen = 0;
  struct srv_call c;
  struct srv_err err;
  char *whole, *early, *copy;

  if (!init) {
    fuzz_budgets();
    init = 1;
  }
  if (!size)
    return 0;
  route = fuzz_route_at(data[0] & 3);

  /* The codec alone, with a capped arena. */
  call_begin(&c, route, (const char *)body, len);
  c.arena.cap = ARENA_CAP;
  memset(&err, 0, sizeof err);
  if (srv_codec_decode_request(&c, &err) == 0)
    check_tensors(&c);
  else
    fuzz_check_error(&err);
  fuzz_call_free(&c);

  /* The route, on the whole body. */
  whole = serve(route, (const char *)body, len, 0, NULL, &alen);

  /* The route, early, from a copy whose missing bytes are garbage. */
  avail = early_avail(route, body, len, (data[0] >> 2) & 31);
  if (avail) {
    copy = malloc(len);
    FUZZ_CHECK(copy != NULL, "out of memory (%zu bytes)", len);
    memcpy(copy, body, avail);
    memset(copy + avail, NOT_ARRIVED, len - avail);
    early = serve(route, copy, len, avail, (const char *)body + avail, &elen);
    if (early) {
      FUZZ_CHECK(whole != NULL,
                 "accepted early with %zu of %zu bytes, refused whole", avail,
                 len);
      FUZZ_CHECK(elen == alen && memcmp(early, whole, alen) == 0,
                 "the early answer (%zu bytes, %zu of %zu in) differs from "
                 "the whole body's (%zu bytes)",
                 elen, avail, len, alen);
    }
    free(early);
    free(copy);
  }
  free(whole);
  return 0;
}
