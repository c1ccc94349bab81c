/* fuzz.h: what the fuzz targets of tests/fuzz/ share.  Each target is one
 * file defining LLVMFuzzerTestOneInput; linked with libFuzzer (clang,
 * `make fuzz`) it is a fuzzer, linked with standalone.c it replays inputs
 * with any compiler (`make test`).  A target states properties with
 * FUZZ_CHECK: a broken one aborts, which libFuzzer reports as a crash and
 * the replay as a failed input. */
#ifndef ATTNBIAS_FUZZ_H
#define ATTNBIAS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort with the file, line and a printf message when cond is false. */
#define FUZZ_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond))                                                               \
      fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                       \
  } while (0)

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt,
               ...) __attribute__((format(printf, 4, 5), noreturn));

/* A call as http/ hands it to the codec and the handlers: route, an arena
 * of at most arena_cap bytes, response buffers of at most out_max bytes,
 * float32 output.  The body is the caller's to set. */
void fuzz_call_init(struct srv_call *c, const struct srv_route *route,
                    size_t arena_cap, size_t out_max);
/* Free everything the call holds (jobs, params, buffers, arena). */
void fuzz_call_free(struct srv_call *c);

/* The answer of c as the server sends it -- resp.body, then the segments
 * (c->resp.seg) -- in one malloc'd block of *len bytes. */
char *fuzz_answer(const struct srv_call *c, size_t *len);

/* An error the request pipeline reports must be one a client can read: a
 * 4xx status (5xx means the server is at fault, which the fuzzer's small
 * inputs never justify), a detail, and a problem+json body that parses
 * back with the same status. */
void fuzz_check_error(const struct srv_err *err);

/* The body routes of routes.def (POST /v1/...), by metrics name ("rope"),
 * or by index modulo their number (fuzz-routes.c). */
const struct srv_route *fuzz_route(const char *name);
const struct srv_route *fuzz_route_at(unsigned i);

/* The server's budgets in the route targets: 16 KiB of answer, 0.1 Mflop
 * (srv_cfg.max_output_mb, max_gflop); fuzz_budgets sets them. */
#define FUZZ_BUDGET_MB (1.0 / 64)
#define FUZZ_BUDGET_GFLOP 1e-4
void fuzz_budgets(void);

/* Decode the body and prepare the call as call/call.c does it: the codec,
 * the model config step (srv_config_apply: "model", "config", "layer" and
 * Hugging Face names), the route's prepare, an error in a field the config
 * filled in renamed after its key.  Returns 0, or -1 with err set. */
int fuzz_call_prepare(struct srv_call *c, struct srv_err *err);

/* Run the call after a successful prepare, as the server does it: every
 * job's pieces (a job failing for anything but memory is a broken
 * property), the route's finish, then the encoding (or the handler's own
 * body).  Returns 0, or -1 with err set (fuzz-routes.c). */
int fuzz_call_run(struct srv_call *c, struct srv_err *err);

/* After fuzz_call_run succeeded: the answer stays within a small multiple
 * of the output budget and the jobs' flops within the flop budget (the
 * handlers' estimates bound the work), a JSON answer parses, and
 * fuzz_check_ignored holds. */
void fuzz_check_answer(const struct srv_call *c);
/* The ignored-fields list (X-Attnbias-Ignored, sent with answers and
 * refusals alike) holds only bytes a header value may carry. */
void fuzz_check_ignored(const struct srv_call *c);

/* This file's own reading of float16 and bfloat16 (dtype AB_DTYPE_F16 or
 * AB_DTYPE_BF16) bits, and whether h is v rounded to nearest, ties to even
 * (overflow to infinity, NaN kept, the sign of zero kept). */
double fuzz_narrow_value(int dtype, uint16_t h);
int fuzz_is_nearest(int dtype, double v, uint16_t h);

#endif /* ATTNBIAS_FUZZ_H */
