/* test-codec-fuzz.c: every input of tests/fuzz/corpus/ (seeds and past
 * crashes) through the fuzz target, inside the normal server test binary,
 * so `make test` and `make asan` replay them without clang.  A crash, a
 * leak under ASan or a sanitizer report fails the test. */
#include "../fuzz/fuzz-codec.c"

#include "test.h"

#include <dirent.h>
#include <stdio.h>

TEST(fuzz_corpus_replay)
{
  DIR *d = opendir("tests/fuzz/corpus");
  struct dirent *e;
  int n = 0;

  if (!d) {
    fprintf(stderr, "  # skip: run from the source tree (tests/fuzz/corpus)\n");
    return 0;
  }
  while ((e = readdir(d)) != NULL) {
    char path[1024];
    FILE *f;
    long len;
    uint8_t *buf;
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "tests/fuzz/corpus/%s", e->d_name);
    f = fopen(path, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(len > 0 ? (size_t)len : 1);
    CHECK(buf != NULL);
    CHECK_EQ_I64(fread(buf, 1, (size_t)len, f), len);
    fclose(f);
    CHECK_EQ_I64(LLVMFuzzerTestOneInput(buf, (size_t)len), 0);
    free(buf);
    n++;
  }
  closedir(d);
  CHECK(n >= 10); /* the seeds are there */
  return 0;
}
