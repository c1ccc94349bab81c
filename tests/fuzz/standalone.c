/* standalone.c: replays fuzz inputs through LLVMFuzzerTestOneInput without
 * libFuzzer (the idea of jansson's standaloneengine.cc), so the corpus and
 * every past crash run as regression tests with any compiler.
 * Usage: <target> file-or-directory ...   (tests/fuzz/replay.sh runs each
 * target on tests/fuzz/corpus/<target>/) */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
  FILE *f = fopen(path, "rb");
  uint8_t *buf;
  long n;

  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
      fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return -1;
  }
  /* Exactly n bytes, so ASan sees any read past the input. */
  buf = malloc(n ? (size_t)n : 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return -1;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, (size_t)n);
  free(buf);
  return 0;
}

static int run_path(const char *path, int *count)
{
  struct stat st;
  DIR *d;
  struct dirent *e;
  char sub[4096];
  int rc = 0;

  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: cannot stat %s\n", path);
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (run_file(path) != 0)
      return -1;
    (*count)++;
    return 0;
  }
  d = opendir(path);
  if (!d)
    return -1;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    if (run_path(sub, count) != 0)
      rc = -1;
  }
  closedir(d);
  return rc;
}

int main(int argc, char **argv)
{
  int i, count = 0, rc = 0;

  if (argc < 2) {
    fprintf(stderr, "usage: %s file-or-directory ...\n", argv[0]);
    return 2;
  }
  for (i = 1; i < argc; i++)
    if (run_path(argv[i], &count) != 0)
      rc = 1;
  printf("replay: %d inputs, %s\n", count, rc ? "with errors" : "ok");
  return rc ? 1 : 0;
}
