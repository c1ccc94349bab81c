/* presets.c: the model presets -- models/<name>.json, each a published
 * config.json (or the part of it that bears on attention) with the address
 * it was taken from -- embedded in the binary at build time, as health.c
 * embeds the OpenAPI document, so that the runtime image needs no data
 * files.  Parsed once, on first use; read-only afterwards. */
#include "config.h"

#include <pthread.h>
#include <string.h>

/* One .rodata blob per file; the assembler includes it relative to the
 * directory make runs in (the Makefile makes presets.o depend on the
 * files). */
#define SRV_PRESET(id, path)                                                   \
  __asm__(".section .rodata\n"                                                 \
          ".balign 16\n"                                                       \
          "preset_" #id "_begin:\n"                                            \
          ".incbin \"" path "\"\n"                                             \
          "preset_" #id "_end:\n"                                              \
          ".byte 0\n"                                                          \
          ".previous\n");                                                      \
  extern const char preset_##id##_begin[]                                      \
      __attribute__((visibility("hidden")));                                   \
  extern const char preset_##id##_end[] __attribute__((visibility("hidden")));
#include "presets.def"
#undef SRV_PRESET

static const struct {
  const char *begin, *end, *path;
} g_files[] = {
#define SRV_PRESET(id, path) {preset_##id##_begin, preset_##id##_end, path},
#include "presets.def"
#undef SRV_PRESET
};
#define NFILES ((int)(sizeof g_files / sizeof g_files[0]))

static json_t *g_presets[NFILES];
static int g_count;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void)
{
  int i;

  for (i = 0; i < NFILES; i++) {
    json_error_t e;
    json_t *p = json_loadb(g_files[i].begin,
                           (size_t)(g_files[i].end - g_files[i].begin),
                           JSON_REJECT_DUPLICATES, &e);
    /* A malformed file is a build mistake that the tests catch (every
     * file must appear in GET /v1/models); it is skipped, not fatal. */
    if (!p || !json_is_string(json_object_get(p, "name")) ||
        !json_is_object(json_object_get(p, "config"))) {
      srv_log("preset %s is not valid: %s", g_files[i].path,
              p ? "no name or config" : e.text);
      json_decref(p);
      continue;
    }
    g_presets[g_count++] = p;
  }
}

int srv_preset_count(void)
{
  pthread_once(&g_once, load);
  return g_count;
}

const json_t *srv_preset_at(int i)
{
  pthread_once(&g_once, load);
  return i >= 0 && i < g_count ? g_presets[i] : NULL;
}

const json_t *srv_preset_find(const char *name)
{
  int i;

  pthread_once(&g_once, load);
  for (i = 0; name && i < g_count; i++)
    if (strcmp(json_string_value(json_object_get(g_presets[i], "name")),
               name) == 0)
      return g_presets[i];
  return NULL;
}
