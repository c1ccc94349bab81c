# Makefile: builds libattnbias (static, shared, pkg-config), attnbiasd, the
# tests and the benchmark.  `make test` and `make run` install missing Debian
# packages first when run as root (lists: docker/packages-*.txt).
#
#   make            library + server          make test     all tests
#   make run        server on 127.0.0.1:8080  make bench    benchmark table
#   make asan       tests under ASan+UBSan    make install  PREFIX=/usr/local
#   make test-repeat N=10   the HTTP suite N times in a row, every core busy
#   make fuzz       libFuzzer targets, FUZZ_SECONDS each (TARGET=one of them;
#                   see "fuzzing" below and docs/internals/fuzzing.md)
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
# Shell: $missing = the packages of the lists $(1) not installed.
missing_pkgs = missing=""; \
  for p in $$(grep -hv '^\#' $(1) | grep -v '^$$'); do \
    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' \
      || missing="$$missing $$p"; done
# Shell: install the packages $(1) (apt's output to the file $(2)), waiting
# for anyone else's apt to finish; updates the index once if needed.
APT_GET = apt-get -o DPkg::Lock::Timeout=600
apt_install = ($(APT_GET) install -y -q $(1) || \
  ($(APT_GET) update -q && $(APT_GET) install -y -q $(1))) >$(2) 2>&1
deps: $(DEPS_STAMP)
$(DEPS_STAMP): docker/packages-build.txt docker/packages-runtime.txt
	@mkdir -p $(@D)
	@$(call missing_pkgs,$^); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    $(call apt_install,$$missing,$(BUILD)/apt.log) \
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
	    $(call apt_install,nodejs npm,$(BUILD)/apt-npm.log) \
	      || { cat $(BUILD)/apt-npm.log; exit 1; }; \
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

test: $(DEPS_STAMP) npm-deps $(CHROMIUM_STAMP) all $(TESTS) $(if $(SUNIT),$(STESTS)) \
      $(SOAK_BIN) fuzz-build
	@tests/run-all.sh $(BUILD) $(PYTHON) $(FUZZ_BUILD)

$(CHROMIUM_STAMP): | $(DEPS_STAMP)
	@test -x /usr/bin/chromium || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing: chromium"; \
	    $(call apt_install,chromium,$(BUILD)/apt-chromium.log) \
	      || { cat $(BUILD)/apt-chromium.log; exit 1; }; \
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
bench-deps:
	@mkdir -p $(BUILD)
	@missing=""; \
	$(PYTHON) -c 'import torch' 2>/dev/null || missing="$$missing python3-torch"; \
	dpkg-query -W -f='$${Status}' libopenblas0-pthread 2>/dev/null | \
	  grep -q 'ok installed' || missing="$$missing libopenblas0-pthread"; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	if [ -z "$$missing" ]; then echo "bench tools present (wrk, python3-torch, libopenblas0-pthread)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing:$$missing"; \
	  $(call apt_install,$$missing,$(BUILD)/apt-bench.log) || \
	    { cat $(BUILD)/apt-bench.log; exit 1; }; \
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
# One libFuzzer target per parser of client input, each a file of tests/fuzz/
# defining LLVMFuzzerTestOneInput (docs/internals/fuzzing.md):
#   codec            request decoding (Content-Type, Accept, JSON, safetensors),
#                    tensors by path, the answer in every format, problem+json
#   params-<route>   one route's parameters from JSON: decode, the model
#                    config step, prepare (tables, budgets), run, finish,
#                    encode -- encodings, rope, bias, attention,
#                    analysis (one fuzz-params.c, built once per route)
#   safetensors      safetensors bodies: header, __metadata__.params, a route's
#                    prepare (also on a partly arrived body), answer round trip
#   npy              the .npy writer, read back by the target's own reader
#   b64              base64: the strict decoder, the canonical round trip
#   number           float32/float64 formatters round-trip bit-exactly; the
#                    JSON number reader agrees with jansson
#   png              the PNG heatmap on any shape, panels and values, read by
#                    libpng
#   model            a model's config.json through the resolver
#                    (srv_model_resolve), for any layer
# Each is linked twice from the same objects, so a missing symbol fails both:
#   $(BUILD)/fuzz/<t>       with tests/fuzz/standalone.c, any compiler: replays
#                           inputs (make test replays every corpus with it)
#   $(FUZZ_BUILD)/fuzz/<t>  with clang's libFuzzer, ASan and UBSan; make test
#                           builds them when clang is present (installed as
#                           root from docker/packages-fuzz.txt) and replays
#                           the corpora with them too
# Corpora: tests/fuzz/corpus/<t>/ (minimised; files named crash-* reproduce
# fixed bugs and are always kept).
#   make fuzz [TARGET=t] [FUZZ_SECONDS=60] [FUZZ_TIMEOUT=10] [FUZZ_FLAGS=...]
#       fuzz every target (or t) for FUZZ_SECONDS each, from a scratch copy of
#       its corpus in $(FUZZ_BUILD)/corpus/<t>/; a crash is written to
#       $(FUZZ_BUILD)/artifacts/<t>/ and stops the run
#   make fuzz-merge [TARGET=t]   fold what the scratch corpus found into the
#       checked-in one, minimised (libFuzzer -merge=1)
#   make fuzz-replay             replay the corpora, as make test does
FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_FLAGS   ?=
FUZZ_ROUTES   = encodings rope bias attention analysis
FUZZ_TARGETS  = codec $(FUZZ_ROUTES:%=params-%) safetensors npy b64 number png \
                model v2
TARGET       ?= $(FUZZ_TARGETS)
# What links a target: its main (standalone.o for replay binaries, nothing
# for libFuzzer, which brings its own), its file, the codec and util/; the
# route targets also the handlers.  Lists, not an archive: a parser that
# starts to depend on the server around it fails to link here.
FUZZ_MAIN    ?= $(BUILD)/tests/fuzz/standalone.o
FUZZ_LDFLAGS ?=
FUZZ_CODEC_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(wildcard server/codec/*.c) \
                   server/util/arena.c server/util/buf.c server/util/err.c)
FUZZ_MODEL_OBJ = $(patsubst %.c,$(BUILD)/server/handlers/%.o,config.c \
                   config-keys.c presets.c) $(BUILD)/server/util/log.o
FUZZ_ROUTE_OBJ = $(patsubst %.c,$(BUILD)/%.o,server/util/config.c \
                   $(addprefix server/handlers/,params.c output.c picture.c \
                     config-apply.c encodings.c rope.c bias.c attention.c \
                     analysis.c)) \
                 $(FUZZ_MODEL_OBJ) $(BUILD)/tests/fuzz/fuzz-routes.o
# The Open Inference Protocol target (fuzz-v2.c) decodes into the /v1 call
# of a route and encodes its answer: it links the whole server but main.c.
fuzz_objs = $(BUILD)/tests/fuzz/fuzz-$(1).o \
            $(if $(filter v2,$(1)),$(SRV_LIB_OBJ), \
              $(BUILD)/tests/fuzz/fuzz-common.o $(FUZZ_CODEC_OBJ) \
              $(if $(filter params-% safetensors,$(1)),$(FUZZ_ROUTE_OBJ)) \
              $(if $(filter model,$(1)),$(FUZZ_MODEL_OBJ)))
FUZZ_REPLAYS = $(FUZZ_TARGETS:%=$(BUILD)/fuzz/%)
FUZZ_SAN     = -fsanitize=fuzzer-no-link,address,undefined \
               -fno-sanitize-recover=undefined
# libFuzzer's options for `make fuzz`: a slow input (a budget that does not
# hold) is a crash after FUZZ_TIMEOUT s of wall time, so is one allocation
# over 512 MiB.  On a loaded machine raise FUZZ_TIMEOUT (say 60): an input
# that is not slow can still wait 10 s for a core.
FUZZ_TIMEOUT ?= 10
FUZZ_RUN     = -timeout=$(FUZZ_TIMEOUT) -rss_limit_mb=2048 -malloc_limit_mb=512 \
               -print_final_stats=1

.PHONY: fuzz fuzz-build fuzz-bins fuzz-deps fuzz-merge fuzz-replay
$(BUILD)/tests/fuzz/%.o: tests/fuzz/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) -Iserver $(SRV_CFLAGS) -MMD -MP -c $< -o $@

# Static patterns, for these names only: a pattern open to any stem would
# let make build an object for any name (it tried fuzz-params-rope.d.o to
# remake a dependency file with its built-in link rule).
$(FUZZ_ROUTES:%=$(BUILD)/tests/fuzz/fuzz-params-%.o): \
$(BUILD)/tests/fuzz/fuzz-params-%.o: tests/fuzz/fuzz-params.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) -Iserver $(SRV_CFLAGS) -DFUZZ_ROUTE='"$*"' \
	  -MMD -MP -c $< -o $@

# Reached only through the pattern below, so make would take them for
# intermediate files and delete them after each link.
.SECONDARY: $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/fuzz-%.o) \
  $(addprefix $(BUILD)/tests/fuzz/,fuzz-common.o fuzz-routes.o standalone.o)

.SECONDEXPANSION:
$(FUZZ_REPLAYS): $(BUILD)/fuzz/%: $$(call fuzz_objs,$$*) $(FUZZ_MAIN) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) -pthread $(LDFLAGS) $(FUZZ_LDFLAGS) -o $@ $^ $(SRV_LIBS) -lm

fuzz-bins: $(FUZZ_REPLAYS)

# clang and its libFuzzer runtime: installed as root like every dependency;
# without them (not root, no network) the targets are only replay binaries.
fuzz-deps:
	@mkdir -p $(BUILD)
	@$(call missing_pkgs,docker/packages-fuzz.txt); \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing:$$missing"; \
	  $(call apt_install,$$missing,$(BUILD)/apt-fuzz.log) || \
	    echo "fuzz: could not install$$missing ($(BUILD)/apt-fuzz.log)"; \
	else echo "fuzz: missing Debian packages:$$missing (apt-get install" \
	  "them as root); the fuzz targets are built as replay binaries only"; fi

# The libFuzzer binaries: everything they link rebuilt by $(FUZZ_CC) with
# the sanitizers in $(FUZZ_BUILD)/.
FUZZ_MAKE = $(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) \
  OPT="-O1 -fno-omit-frame-pointer" CFLAGS="$(FUZZ_SAN)" LDFLAGS= \
  FUZZ_MAIN= FUZZ_LDFLAGS="-fsanitize=fuzzer,address,undefined"

fuzz-build: fuzz-deps $(FUZZ_REPLAYS)
	@if command -v $(FUZZ_CC) >/dev/null 2>&1; then \
	  $(FUZZ_MAKE) fuzz-bins; \
	else echo "fuzz: $(FUZZ_CC) not found: no libFuzzer binaries"; fi

fuzz-replay: fuzz-build
	tests/fuzz/replay.sh $(BUILD) $(FUZZ_BUILD)

fuzz: fuzz-deps
	$(FUZZ_MAKE) fuzz-bins
	@for t in $(TARGET); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/artifacts/$$t && \
	  cp tests/fuzz/corpus/$$t/* $(FUZZ_BUILD)/corpus/$$t/ && \
	  echo "## fuzz $$t: $(FUZZ_SECONDS) s" && \
	  $(FUZZ_BUILD)/fuzz/$$t $(FUZZ_RUN) -max_total_time=$(FUZZ_SECONDS) \
	    -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t/ $(FUZZ_FLAGS) \
	    $(FUZZ_BUILD)/corpus/$$t || exit 1; done

# Minimise checked-in corpus + scratch corpus into a fresh directory that
# starts with the crash-* reproducers, then make it the checked-in one.
# Inputs that crash are left out (libFuzzer goes on) and named.
fuzz-merge:
	$(FUZZ_MAKE) fuzz-bins
	@for t in $(TARGET); do \
	  m=$(FUZZ_BUILD)/merge/$$t; rm -rf $$m $$m-* && mkdir -p $$m \
	    $(FUZZ_BUILD)/corpus/$$t && \
	  { cp tests/fuzz/corpus/$$t/crash-* $$m/ 2>/dev/null; true; } && \
	  $(FUZZ_BUILD)/fuzz/$$t -set_cover_merge=1 \
	    -artifact_prefix=$(FUZZ_BUILD)/merge/$$t- $$m tests/fuzz/corpus/$$t \
	    $(FUZZ_BUILD)/corpus/$$t 2>$(FUZZ_BUILD)/merge/$$t.log && \
	  rm -f tests/fuzz/corpus/$$t/* && cp $$m/* tests/fuzz/corpus/$$t/ && \
	  echo "fuzz-merge $$t: $$(ls tests/fuzz/corpus/$$t | wc -l) inputs" \
	  || exit 1; \
	  ls $(FUZZ_BUILD)/merge/$$t-* >/dev/null 2>&1 && echo "fuzz-merge" \
	    "$$t: inputs that crash were left out: $(FUZZ_BUILD)/merge/$$t-*"; \
	  done; true


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
