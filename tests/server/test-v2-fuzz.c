/* test-v2-fuzz.c: every input of tests/fuzz/corpus-v2/ (seeds and past
 * crashes) through the Open Inference Protocol fuzz target, inside the
 * normal server test binary, so that `make test` and `make asan` replay
 * them without clang (as test-codec-fuzz.c does for tests/fuzz/corpus/). */
#define FUZZ_V2_NO_ENTRY
#include "../fuzz/fuzz-v2.c"

#include "test.h"

#include <dirent.h>

#define CORPUS "tests/fuzz/corpus-v2"

/* One corpus file through the target: exactly its bytes in a block of
 * their own, so that ASan sees a read past them. */
static int replay_one(const char *name)
{
  char path[512];
  uint8_t *buf = NULL;
  long len = -1;
  FILE *f;

  snprintf(path, sizeof path, CORPUS "/%s", name);
  if (!(f = fopen(path, "rb")))
    return -1;
  if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 &&
      fseek(f, 0, SEEK_SET) == 0 && (buf = malloc(len ? (size_t)len : 1)) &&
      fread(buf, 1, (size_t)len, f) == (size_t)len)
    fuzz_v2_one(buf, (size_t)len);
  else
    len = -1;
  fclose(f);
  free(buf);
  return len < 0 ? -1 : 0;
}

TEST(fuzz_v2_corpus_replay)
{
  DIR *d = opendir(CORPUS);
  struct dirent *e;
  int n = 0;

  if (!d) {
    fprintf(stderr, "  # skip: run from the source tree (" CORPUS ")\n");
    return 0;
  }
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') {
      CHECK_EQ_I64(replay_one(e->d_name), 0);
      n++;
    }
  closedir(d);
  CHECK(n >= 8); /* the seeds are there */
  return 0;
}
