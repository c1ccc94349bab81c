/* mhd-tuning.h: libmicrohttpd settings that attnbiasd and the bench's bare
 * server (bench/bare-server.c) share, so that the bench compares like with
 * like.  Header-only: just constants. */
#ifndef SRV_MHD_TUNING_H
#define SRV_MHD_TUNING_H

#include <stddef.h>

/* Per-connection memory (MHD_OPTION_CONNECTION_MEMORY_LIMIT): headers and
 * the read buffer, which takes half of it -- the most one recv() reads of
 * a body.  libmicrohttpd 0.9.75 zeroes the whole block after every request
 * on a kept-alive connection (MHD_pool_reset), so its size is paid per
 * request: measured on the reference VM, 1 MiB gave 26-30k small requests
 * per second and 128 KiB 62-68k, while a 100 MB body arrived as fast
 * (64 KiB reads are as good as 512 KiB ones on loopback TCP; MHD's 32 KiB
 * default was 30-80 % slower for large bodies).  It also bounds the
 * request line and headers MHD accepts (half of it, 64 KiB). */
#ifndef SRV_MHD_CONN_MEMORY /* -D for experiments */
#define SRV_MHD_CONN_MEMORY ((size_t)128 << 10)
#endif

#endif
