/* jsonmem.h: jansson's allocator with a per-thread budget, so that parsing
 * one request text cannot take more than a bounded amount of memory (main.c
 * installs it; call/call.c opens a budget around decoding a body). */
#ifndef SRV_JSONMEM_H
#define SRV_JSONMEM_H

#include <stddef.h>

/* Make jansson allocate through the budgeted functions.  Call once, before
 * any jansson value exists (jansson's rule for json_set_alloc_funcs).  Not
 * thread-safe.  Without it the budget functions below still work but never
 * refuse anything. */
void srv_jsonmem_install(void);

/* From now on, on the calling thread, jansson allocations may hold at most
 * `cap` bytes at once (counted as malloc_usable_size); one past it fails
 * (jansson then reports "out of memory" and gives up).  Values allocated
 * before keep working; only this thread is affected. */
void srv_jsonmem_begin(size_t cap);

/* Close the calling thread's budget.  Returns 1 if an allocation was
 * refused since srv_jsonmem_begin, else 0; *peak (if not NULL) receives the
 * most bytes held at once. */
int srv_jsonmem_end(size_t *peak);

/* The budget for parsing one request: the larger of 64 MiB and eight
 * times the body cap.  Measured with jansson 2.14: nested arrays of typical
 * floats ("0.123456,") take ~8x their text, of one-digit numbers ("0,")
 * ~19x, and texts such as "{},{},..." that only exist to exhaust memory
 * ~60x.  (Large "data" arrays never reach jansson: the codec lifts them.) */
size_t srv_jsonmem_request_cap(size_t max_body);

#endif /* SRV_JSONMEM_H */
