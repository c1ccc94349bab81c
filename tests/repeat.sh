#!/usr/bin/env bash
# repeat.sh: runs the HTTP suite N times in a row on a loaded machine, to
# show that no test depends on timing.  Every core is kept busy by a busy
# loop at the same priority as the suite and its servers (one `bash -c
# 'while :; do :; done'` per core, nice 0 unless LOAD_NICE says otherwise),
# so the servers, the tests and the load share the CPUs as equals.  Stops at
# the first failing run and keeps its log; the load (and a suite still
# running) is stopped on any exit.
# Usage: tests/repeat.sh BUILD_DIR PYTHON N [run.py options...]
# Logs: BUILD_DIR/repeat/run-<i>.log.
set -u
build=${1:-build}
python=${2:-/usr/bin/python3}
n=${3:-10}
shift $(($# < 3 ? $# : 3))
cores=$(nproc)
load_nice=${LOAD_NICE:-0}
logdir="$build/repeat"
mkdir -p "$logdir"
rm -f "$logdir"/run-*.log

pids=()
suite=
stop_load() {
  local p
  if [ -n "$suite" ]; then kill "$suite" 2>/dev/null; wait "$suite" 2>/dev/null; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
}
trap stop_load EXIT
trap 'exit 130' INT TERM

for ((c = 0; c < cores; c++)); do
  nice -n "$load_nice" bash -c 'while :; do :; done' &
  pids+=($!)
done
echo "## load: $cores busy loops at nice $load_nice (pids ${pids[*]})"

for ((i = 1; i <= n; i++)); do
  log="$logdir/run-$i.log"
  start=$(date +%s)
  # In the background, waited for: a TERM to this script then reaches the
  # trap at once, and the trap stops the suite (which stops its servers).
  "$python" tests/http/run.py --server "$build/attnbiasd" "$@" >"$log" 2>&1 &
  suite=$!
  wait "$suite"
  rc=$?
  suite=
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  echo "## run $i/$n: ${summary:-no summary} (exit $rc, $(($(date +%s) - start)) s)"
  if [ "$rc" -ne 0 ]; then
    grep -E '^FAIL' "$log"
    echo "## stopped at run $i; its log: $log"
    exit 1
  fi
done
echo "## $n runs in a row passed under load"
