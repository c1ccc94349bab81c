#!/usr/bin/env bash
# replay.sh: runs every input of every fuzz target's corpus
# (tests/fuzz/corpus/<target>/) once through the target's replay binary
# (BUILD/fuzz/<target>, any compiler) and, where it was built, through its
# libFuzzer binary (FUZZ_BUILD/fuzz/<target>, ASan + UBSan).  One test per
# input and binary; a target whose binary fails is replayed input by input
# to name the inputs that fail.  Ends with "fuzz: N passed, N failed";
# exit status 1 if any failed.
# Usage: tests/fuzz/replay.sh BUILD [FUZZ_BUILD]
set -u
build=${1:-build}
fbuild=${2:-}
corpora=$(dirname "$0")/corpus
passed=0 failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# replay BINARY DIR: the inputs of DIR through BINARY (both kinds take a
# list of files and run each once).
replay() {
  local bin=$1 dir=$2 inputs f bad=0
  inputs=("$dir"/*)
  if [ ! -e "${inputs[0]}" ]; then
    echo "FAIL $bin: no inputs in $dir"
    failed=$((failed + 1))
    return
  fi
  if "$bin" "${inputs[@]}" >"$log" 2>&1; then
    echo "ok   $bin: ${#inputs[@]} inputs"
    passed=$((passed + ${#inputs[@]}))
    return
  fi
  for f in "${inputs[@]}"; do
    if ! "$bin" "$f" >"$log" 2>&1; then
      echo "FAIL $bin $f"
      tail -n 25 "$log" | sed 's/^/    /'
      bad=$((bad + 1))
    fi
  done
  # A binary that fails on the whole list but on no single input (say a
  # leak only seen at exit) still fails once.
  [ "$bad" -eq 0 ] && { echo "FAIL $bin: fails on the whole corpus"; bad=1; }
  failed=$((failed + bad))
  passed=$((passed + ${#inputs[@]} - bad))
}

for bin in "$build"/fuzz/*; do
  [ -x "$bin" ] || continue
  t=$(basename "$bin")
  replay "$bin" "$corpora/$t"
  if [ -n "$fbuild" ] && [ -x "$fbuild/fuzz/$t" ]; then
    replay "$fbuild/fuzz/$t" "$corpora/$t"
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
