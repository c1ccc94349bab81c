/* config.h: reading srv_cfg from flags and ATTNBIAS_* environment
 * variables (main.c, and the unit tests). */
#ifndef SRV_CONFIG_H
#define SRV_CONFIG_H

#include "srv.h"

#include <stddef.h>
#include <stdio.h>

enum srv_action {
  SRV_ACTION_RUN = 0,
  SRV_ACTION_HELP,
  SRV_ACTION_VERSION,
  SRV_ACTION_HEALTHCHECK
};

/* Fill cfg from the defaults, then the environment (ATTNBIAS_<NAME>, e.g.
 * ATTNBIAS_MAX_BODY_MB), then argv (--name value or --name=value; a flag
 * wins over the environment).  Validates every value and reads the API key
 * file.  Returns 0 and sets *action, or -1 with a message naming the flag
 * (or variable) and the value in msg.  Not thread-safe (reads getenv). */
int srv_config_load(struct srv_config *cfg, int argc, char **argv,
                    enum srv_action *action, char *msg, size_t msgcap);

/* CPUs this process may use: the affinity mask, capped by a cgroup v2
 * cpu.max or v1 CFS quota (rounded up); at least 1. */
int srv_config_cpus(void);

/* Whether origin[0..n) is one of the lines of list (--cors-origin's
 * srv_cfg.cors_origins), compared without regard to case. */
int srv_config_origin_listed(const char *list, const char *origin, size_t n);

/* The usage text of --help. */
void srv_config_usage(FILE *out);

#endif /* SRV_CONFIG_H */
