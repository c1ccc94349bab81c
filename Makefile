# Makefile: builds libattnbias (static, shared, pkg-config), attnbiasd, the
# tests and the benchmark.  `make test` and `make run` install missing Debian
# packages first when run as root (lists: docker/packages-*.txt).
#
#   make            library + server          make test     all tests
#   make run        server on 127.0.0.1:8080  make bench    benchmark table
#   make asan       tests under ASan+UBSan    make install  PREFIX=/usr/local
#   make test-repeat N=10   the HTTP suite N times in a row, every core busy
#   make image      container image (podman)  make image-test  build + exercise it
#   make soak       a minute of overload (README "Reliability")

CC      ?= cc
OPT     ?= -O2
PREFIX  ?= /usr/local
BUILD   ?= build
PYTHON  ?= /usr/bin/python3

WARN     = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wvla \
           -Wno-unused-parameter -Werror=implicit-function-declaration
ifdef CI
WARN    += -Werror
endif
STD      = -std=c11 -D_GNU_SOURCE
BASE_CFLAGS = $(STD) $(WARN) $(OPT) -g -fPIC -fvisibility=hidden \
              -pthread -Ilib/include $(CFLAGS)

ISA_avx2   = -mavx2 -mfma -mf16c
ISA_avx512 = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c

# ---- sources --------------------------------------------------------------
LIB_SRC  := $(wildcard lib/src/*.c lib/src/bias/*.c lib/src/kernels/ref/*.c lib/src/kernels/x86/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
SRV_SRC  := $(shell find server -name '*.c' 2>/dev/null | sort)
SRV_MAIN := server/main.c
SRV_OBJ  := $(SRV_SRC:%.c=$(BUILD)/%.o)
# UNIT / SUNIT narrow the test binaries to some files (UNIT=tests/unit/test-rope.c).
UNIT     ?= $(wildcard tests/unit/*.c)
SUNIT    ?= $(wildcard tests/server/*.c)
TEST_SRC := $(wildcard tests/runner/*.c) $(UNIT)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
STEST_SRC := $(wildcard tests/runner/*.c) $(SUNIT)
STEST_OBJ := $(STEST_SRC:%.c=$(BUILD)/%.o)
SRV_LIB_OBJ := $(filter-out $(BUILD)/$(SRV_MAIN:%.c=%.o),$(SRV_OBJ))

SRV_PKGS  = libmicrohttpd jansson libuv libpng gnutls
SRV_CFLAGS = $(shell pkg-config --cflags $(SRV_PKGS) 2>/dev/null)
SRV_LIBS   = $(shell pkg-config --libs $(SRV_PKGS) 2>/dev/null)

LIB_A  = $(BUILD)/libattnbias.a
LIB_SO = $(BUILD)/libattnbias.so
LIB_PC = $(BUILD)/attnbias.pc
SERVER = $(BUILD)/attnbiasd
TESTS  = $(BUILD)/tests/run
STESTS = $(BUILD)/tests/run-server
SOAK_BIN = $(BUILD)/bench/soak

.PHONY: all lib server test test-unit test-http test-isa test-repeat run \
        bench deps npm-deps asan install clean
all: lib $(if $(SRV_SRC),server)
lib: $(LIB_A) $(LIB_SO) $(LIB_PC)
server: $(SERVER)

# ---- dependencies ---------------------------------------------------------
# Installs whichever package of docker/packages-build.txt is missing
# (apt-get install -y, as root on Debian); otherwise says what to install.
DEPS_STAMP = $(BUILD)/.deps-ok
deps: $(DEPS_STAMP)
$(DEPS_STAMP): docker/packages-build.txt docker/packages-runtime.txt
	@mkdir -p $(@D)
	@missing=""; for p in $$(grep -hv '^#' $^ | grep -v '^$$'); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' \
	    || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    (apt-get install -y -q $$missing || \
	     (apt-get update -q && apt-get install -y -q $$missing)) >$(BUILD)/apt.log 2>&1 \
	     || { cat $(BUILD)/apt.log; exit 1; }; \
	  else echo "missing Debian packages:$$missing (apt-get install them)"; \
	    exit 1; fi; fi; touch $@

# ---- npm: test tools pinned by committed lockfiles ---------------------------
# Each directory of NPM_DIRS is an npm project of tests (tests/clients: the
# OpenAPI linters and TypeScript client generators; tests/k8s: the
# Kubernetes schema validator; tests/browser: puppeteer-core, which drives
# Debian's chromium through the explorer page).  `make test` runs `npm ci` in one when its
# node_modules is missing or its lockfile changed (the stamp is the lockfile
# as installed), offline thereafter.  Without npm, root on Debian installs
# Debian's nodejs and npm first; otherwise the build stops and says so.
NPM_DIRS   = tests/clients tests/k8s tests/browser
NPM_STAMPS = $(NPM_DIRS:%=%/node_modules/.package-lock.attnbias)
npm-deps: $(NPM_STAMPS)
%/node_modules/.package-lock.attnbias: %/package.json %/package-lock.json | $(DEPS_STAMP)
	@command -v npm >/dev/null || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing: nodejs npm"; \
	    apt-get -o DPkg::Lock::Timeout=600 install -y -q nodejs npm \
	      >$(BUILD)/apt-npm.log 2>&1 || { cat $(BUILD)/apt-npm.log; exit 1; }; \
	  else echo "npm is missing (apt-get install nodejs npm)"; exit 1; fi
	@echo "npm ci in $*"
	@(cd $* && npm ci --no-audit --no-fund) >$(BUILD)/npm-$(notdir $*).log 2>&1 \
	  || { cat $(BUILD)/npm-$(notdir $*).log; exit 1; }
	@cp $*/package-lock.json $@

# ---- compile --------------------------------------------------------------
$(BUILD)/lib/src/kernels/x86/%avx2.o:   FLAGS_ISA = $(ISA_avx2)
$(BUILD)/lib/src/kernels/x86/%avx512.o: FLAGS_ISA = $(ISA_avx512)
$(BUILD)/lib/src/kernels/x86/%avx512bf16.o: FLAGS_ISA = $(ISA_avx512) -mavx512bf16

$(BUILD)/lib/%.o: lib/%.c
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) $(FLAGS_ISA) -MMD -MP -c $< -o $@

$(BUILD)/server/%.o: server/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) -Iserver $(SRV_CFLAGS) -MMD -MP -c $< -o $@

# The OpenAPI document is embedded in the binary (.incbin in health.c, path
# relative to this directory); -MMD cannot see that dependency.
$(BUILD)/server/handlers/health.o: api/openapi.yaml
$(BUILD)/server/handlers/page.o: web/index.html web/explorer.js web/explorer.css
# Likewise the model presets (.incbin in presets.c, listed in presets.def).
$(BUILD)/server/handlers/presets.o: $(wildcard models/*.json)

$(BUILD)/tests/server/%.o: tests/server/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) -Iserver -Itests/runner $(SRV_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) -Ilib/src -Itests/runner -MMD -MP -c $< -o $@

$(LIB_A): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(LIB_SO): $(LIB_OBJ)
	$(CC) -shared -pthread -Wl,-soname,libattnbias.so.0 -o $@ $^ -lm

# attnbias.pc.in with the prefix $(1) filled in.
PC_SUBST = sed -e 's|@PREFIX@|$(1)|' -e 's|@VERSION@|$(shell sed -n 's/.*AB_VERSION_STRING "\(.*\)"/\1/p' lib/include/attnbias.h)|' attnbias.pc.in

$(LIB_PC): attnbias.pc.in lib/include/attnbias.h
	$(call PC_SUBST,$(PREFIX)) > $@

$(SERVER): $(SRV_OBJ) $(LIB_A)
	$(CC) -pthread $(LDFLAGS) -o $@ $(SRV_OBJ) $(LIB_A) $(SRV_LIBS) -lm

$(TESTS): $(TEST_OBJ) $(LIB_A)
	$(CC) -pthread $(LDFLAGS) -o $@ $(TEST_OBJ) $(LIB_A) -lm

$(STESTS): $(STEST_OBJ) $(SRV_LIB_OBJ) $(LIB_A)
	$(CC) -pthread $(LDFLAGS) -o $@ $(STEST_OBJ) $(SRV_LIB_OBJ) $(LIB_A) $(SRV_LIBS) -lm

# ---- run and test ---------------------------------------------------------
run: $(DEPS_STAMP) $(SERVER)
	$(SERVER) --host 127.0.0.1 --port 8080

# The explorer page's test (tests/browser/test_explorer.py) drives Debian's
# chromium with puppeteer-core (tests/browser); as root it is installed when
# missing.
CHROMIUM_STAMP = $(BUILD)/.chromium-ok

test: $(DEPS_STAMP) npm-deps $(CHROMIUM_STAMP) all $(TESTS) $(if $(SUNIT),$(STESTS)) $(SOAK_BIN)
	@tests/run-all.sh $(BUILD) $(PYTHON)

$(CHROMIUM_STAMP): | $(DEPS_STAMP)
	@test -x /usr/bin/chromium || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing: chromium"; \
	    (apt-get -o DPkg::Lock::Timeout=600 install -y -q chromium || \
	     (apt-get -o DPkg::Lock::Timeout=600 update -q && \
	      apt-get -o DPkg::Lock::Timeout=600 install -y -q chromium)) \
	      >$(BUILD)/apt-chromium.log 2>&1 || { cat $(BUILD)/apt-chromium.log; exit 1; }; \
	  else echo "chromium is missing (apt-get install chromium)"; exit 1; fi
	@touch $@

test-unit: $(TESTS)
	$(TESTS)

# Every ISA this CPU runs, one after the other.
test-isa: $(TESTS)
	@for isa in ref avx2 avx512; do echo "## AB_ISA=$$isa"; \
	  AB_ISA=$$isa $(TESTS) || exit 1; done

# The HTTP suite N times in a row while a busy loop per core competes with
# it at the same priority; stops at the first failing run and keeps its log
# (tests/repeat.sh).  No test may depend on timing: this shows it.
N ?= 10
test-repeat: $(DEPS_STAMP) npm-deps all $(SOAK_BIN)
	@tests/repeat.sh $(BUILD) $(PYTHON) $(N)

asan:
	ATTNBIAS_TEST_LDFLAGS="-fsanitize=address,undefined" \
	$(MAKE) BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer" \
	  CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	  LDFLAGS="-fsanitize=address,undefined" test

# ---- benchmark --------------------------------------------------------------
# `make bench` builds bench/ at -O2 and links it with the normal library
# objects (the library itself is never built with -march=native), builds the
# server and the bare libmicrohttpd yardstick, then prints the table and
# writes bench/results.json.  BENCH_QUICK=1 for a fast smoke run.  It
# first installs what it measures with (bench-deps: wrk for the service
# rows, Debian's python3-torch with OpenBLAS for the torch peer) when run
# as root, like `make test`.
BENCH_SRC   := $(filter-out bench/bare-server.c bench/soak.c,$(wildcard bench/*.c))
BENCH_OBJ   := $(BENCH_SRC:%.c=$(BUILD)/%.o)
BENCH_BIN    = $(BUILD)/bench/bench
BARE_BIN     = $(BUILD)/bench/bare-server
# The codec rows call the server's codec: its objects (all but main.o) go
# in an archive so that only the members the codec needs are linked.
BENCH_CODEC := $(if $(wildcard server/codec/*.c),1,0)
BENCH_SRV_A := $(if $(filter 1,$(BENCH_CODEC)),$(BUILD)/bench/libsrv.a)
BENCH_CFLAGS = $(BASE_CFLAGS) -O2 -Iserver $(SRV_CFLAGS) \
               -DBENCH_HAVE_CODEC=$(BENCH_CODEC)

$(BUILD)/bench/probe-avx2.o:   FLAGS_ISA = -mavx2 -mfma
$(BUILD)/bench/probe-avx512.o: FLAGS_ISA = -mavx512f -mfma -mavx512bf16

$(BUILD)/bench/%.o: bench/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(BENCH_CFLAGS) $(FLAGS_ISA) -MMD -MP -c $< -o $@

# codec.o is compiled with or without the codec: rebuild it when that changes.
$(BUILD)/bench/codec.o: $(wildcard server/codec/*.c)

$(BUILD)/bench/libsrv.a: $(SRV_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BENCH_BIN): $(BENCH_OBJ) $(BENCH_SRV_A) $(LIB_A)
	$(CC) -pthread $(LDFLAGS) -o $@ $(BENCH_OBJ) $(BENCH_SRV_A) $(LIB_A) \
	  $(SRV_LIBS) -lm

$(BARE_BIN): bench/bare-server.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(BENCH_CFLAGS) -MMD -MP -o $@ $< \
	  $(shell pkg-config --libs libmicrohttpd 2>/dev/null)

.PHONY: bench-deps
bench: bench-deps $(DEPS_STAMP) $(BENCH_BIN) $(BARE_BIN) $(if $(SRV_SRC),$(SERVER))
	$(BENCH_BIN) --server $(SERVER) --bare $(BARE_BIN) \
	  --torch bench/torch_bench.py --python $(PYTHON) --lua bench/post.lua \
	  --out bench/results.json

# The bench's tools, as root: Debian's python3-torch (1.13) with OpenBLAS
# (without it torch runs on the reference BLAS, a strawman; the pthread
# build, whose threads torch's thread count governs), and wrk.  apt waits
# for a lock other users of the machine hold.  Not root: says what is
# missing, and the bench skips those rows with a clear line.
BENCH_APT = apt-get -o DPkg::Lock::Timeout=600
bench-deps:
	@missing=""; \
	$(PYTHON) -c 'import torch' 2>/dev/null || missing="$$missing python3-torch"; \
	dpkg-query -W -f='$${Status}' libopenblas0-pthread 2>/dev/null | \
	  grep -q 'ok installed' || missing="$$missing libopenblas0-pthread"; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	if [ -z "$$missing" ]; then echo "bench tools present (wrk, python3-torch, libopenblas0-pthread)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing:$$missing"; \
	  $(BENCH_APT) install -y -q $$missing || \
	    ($(BENCH_APT) update -q && $(BENCH_APT) install -y -q $$missing); \
	else echo "missing:$$missing (not root: install them with apt-get; the bench skips what needs them)"; fi

# ---- soak -------------------------------------------------------------------
# `make soak`: a minute of overload against attnbiasd on loopback
# (bench/soak.c; README "Reliability"): capacity measured first, then
# SOAK_CONNECTIONS connections offered SOAK_FACTOR times it for SOAK_SECONDS;
# prints a table, writes bench/soak.json, exits 1 on any failure.
SOAK_SECONDS     ?= 60
SOAK_CONNECTIONS ?= 256
SOAK_FACTOR      ?= 2
SOAK_OBJ          = $(addprefix $(BUILD)/bench/,soak.o common.o pool.o)

$(SOAK_BIN): $(SOAK_OBJ) $(LIB_A)
	$(CC) -pthread $(LDFLAGS) -o $@ $^ -lm

.PHONY: soak
soak: $(DEPS_STAMP) $(SERVER) $(SOAK_BIN)
	$(SOAK_BIN) --server $(SERVER) --seconds $(SOAK_SECONDS) \
	  --connections $(SOAK_CONNECTIONS) --factor $(SOAK_FACTOR) \
	  --out bench/soak.json

# ---- fuzzing ----------------------------------------------------------------
# `make fuzz` rebuilds the codec with clang's libFuzzer, ASan and UBSan in
# $(FUZZ_BUILD)/ and fuzzes tests/fuzz/fuzz-codec.c for FUZZ_SECONDS from a
# scratch copy of tests/fuzz/corpus/ (add any crash it finds there).
# `make fuzz-replay` replays the corpus with the normal compiler; the server
# test binary also replays it (tests/server/test-codec-fuzz.c).
FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_SRV     := $(wildcard server/codec/*.c) server/util/arena.c \
                server/util/buf.c server/util/err.c
FUZZ_SRV_OBJ  = $(FUZZ_SRV:%.c=$(BUILD)/%.o)
REPLAY        = $(BUILD)/tests/fuzz/replay

.PHONY: fuzz fuzz-replay
$(BUILD)/tests/fuzz/%.o: tests/fuzz/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) -Iserver $(SRV_CFLAGS) -MMD -MP -c $< -o $@

$(REPLAY): $(BUILD)/tests/fuzz/standalone.o $(BUILD)/tests/fuzz/fuzz-codec.o \
           $(FUZZ_SRV_OBJ) $(LIB_A)
	$(CC) -pthread $(LDFLAGS) -o $@ $^ $(SRV_LIBS) -lm

fuzz-replay: $(REPLAY)
	$(REPLAY) tests/fuzz/corpus

$(BUILD)/tests/fuzz/fuzz-codec: $(BUILD)/tests/fuzz/fuzz-codec.o \
                                $(FUZZ_SRV_OBJ) $(LIB_A)
	$(CC) -fsanitize=fuzzer,address,undefined -pthread -o $@ $^ \
	  $(SRV_LIBS) -lm

fuzz: $(DEPS_STAMP)
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT="-O1 -fno-omit-frame-pointer" \
	  CFLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
	  $(FUZZ_BUILD)/tests/fuzz/fuzz-codec
	@mkdir -p $(FUZZ_BUILD)/corpus && cp tests/fuzz/corpus/* $(FUZZ_BUILD)/corpus/
	$(FUZZ_BUILD)/tests/fuzz/fuzz-codec -max_total_time=$(FUZZ_SECONDS) \
	  -max_len=65536 -rss_limit_mb=2048 -artifact_prefix=$(FUZZ_BUILD)/ \
	  $(FUZZ_BUILD)/corpus

# ---- the container image (podman; docker/podman.py) -------------------------
# `make image` builds docker/Dockerfile as localhost/attnbias:latest;
# `make image-test` builds it under a throwaway tag and exercises the image
# (tests/image/test_image.py); `make scale-test` runs three replicas behind
# HAProxy through a rolling restart (tests/image/scale_test.py).  Each
# installs podman, runc and debootstrap (and HAProxy) when run as root, and
# makes the Debian base image once.
.PHONY: image image-test scale-test
image:
	$(PYTHON) docker/podman.py image --tag localhost/attnbias:latest

image-test: $(DEPS_STAMP)
	$(PYTHON) tests/image/test_image.py

scale-test: $(DEPS_STAMP)
	$(PYTHON) tests/image/scale_test.py

install: lib
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 lib/include/attnbias.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/libattnbias.so.0
	ln -sf libattnbias.so.0 $(DESTDIR)$(PREFIX)/lib/libattnbias.so
	$(call PC_SUBST,$(PREFIX)) > $(DESTDIR)$(PREFIX)/lib/pkgconfig/attnbias.pc
	chmod 644 $(DESTDIR)$(PREFIX)/lib/pkgconfig/attnbias.pc

clean:
	rm -rf $(BUILD) build-asan

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
