#!/usr/bin/env bash
# run-all.sh: runs every test suite (library unit tests, server unit tests,
# fuzz corpora, HTTP tests, the TypeScript clients, the explorer page in a
# browser), keeps going after a failing suite, and ends with one line
# "total: N passed, N failed".  Exit status 1 if any suite failed.
# Usage: tests/run-all.sh BUILD_DIR PYTHON [FUZZ_BUILD_DIR]
set -u
build=${1:-build}
python=${2:-/usr/bin/python3}
fuzz_build=${3:-}
passed=0 failed=0 status=0

run_suite() {
  local name=$1; shift
  local log="$build/test-$name.log"
  echo "## $name: $*"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -E '^([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  if [ -z "$line" ]; then
    echo "## $name: no summary line (exit $rc)"
    failed=$((failed + 1)); status=1; return
  fi
  local p f
  p=$(sed -E 's/^([A-Za-z]+: )?([0-9]+) passed.*/\2/' <<<"$line")
  f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
    status=1
    [ "$f" -eq 0 ] && failed=$((failed + 1))
  fi
}

# The library suite runs with the best kernels this CPU has, then capped at
# AVX2 and at the scalar reference (AB_ISA caps the choice, so on a CPU
# without AVX2 the middle run is the reference again): every kernel variant
# passes the same tests.
run_suite unit "$build/tests/run"
run_suite unit-avx2 env AB_ISA=avx2 "$build/tests/run"
run_suite unit-ref env AB_ISA=ref "$build/tests/run"
# The server and HTTP suites run with the best kernels, then again on the
# scalar reference (the servers they start inherit AB_ISA): every answer the
# service gives is checked with both, the fastest and the slowest variant.
if [ -x "$build/tests/run-server" ]; then
  run_suite server "$build/tests/run-server"
  run_suite server-ref env AB_ISA=ref "$build/tests/run-server"
fi
# Every fuzz target's corpus, through its replay binary and, when clang
# built them, its libFuzzer binary under ASan and UBSan.
if [ -d "$build/fuzz" ]; then
  run_suite fuzz tests/fuzz/replay.sh "$build" "$fuzz_build"
fi
if [ -x "$build/attnbiasd" ] && [ -f tests/http/run.py ]; then
  run_suite http "$python" tests/http/run.py --server "$build/attnbiasd"
  run_suite http-ref env AB_ISA=ref "$python" tests/http/run.py \
    --server "$build/attnbiasd"
fi
# The OpenAPI document as linters and code generators see it: Redocly and
# Spectral, then TypeScript clients generated, type-checked and run against a
# server (once: they test the document, not the kernels).
if [ -x "$build/attnbiasd" ] && [ -f tests/clients/test_clients.py ]; then
  run_suite clients "$python" tests/http/run.py --server "$build/attnbiasd" \
    --test-timeout 600 tests/clients/test_clients.py
fi
# The explorer page in headless Chromium (once: it tests the page).
if [ -x "$build/attnbiasd" ] && [ -f tests/browser/test_explorer.py ]; then
  run_suite browser "$python" tests/http/run.py --server "$build/attnbiasd" \
    --test-timeout 900 tests/browser/test_explorer.py
fi
echo "total: $passed passed, $failed failed"
exit $status
