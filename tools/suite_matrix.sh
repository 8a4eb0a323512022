#!/usr/bin/env bash
# Runs the whole test suite (launch/test) once per OpenBLAS kernel family that OpenBLAS may pick
# on an x86 processor, then once with every core kept busy by a CPU hog, and prints one line per
# run. The suite must pass in every row: its numeric tolerances come from error bounds, not from
# one machine's BLAS, and no end-to-end outcome may depend on timing (issue 35).
#
#   tools/suite_matrix.sh [--log-dir DIR] [--only NAME...] [-- CTEST_ARGS...]
#
# NAME is one of Haswell Zen SkylakeX Cooperlake load. A kernel family this processor cannot run
# (SkylakeX and Cooperlake need AVX-512; Cooperlake also AVX512-BF16) is skipped, saying why.
# Exit status: 0 when every run that could run passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log_dir="${TMPDIR:-/tmp}/rlforge_suite_matrix"
only=()
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --log-dir) log_dir="$2"; shift 2 ;;
    --only) shift; while [ $# -gt 0 ] && [ "$1" != "--" ] && [ "${1#--}" = "$1" ]; do only+=("$1"); shift; done ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "suite_matrix: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#only[@]} -gt 0 ] || only=(Haswell Zen SkylakeX Cooperlake load)
mkdir -p "$log_dir"

flags="$(grep -m1 '^flags' /proc/cpuinfo)"
has() { [[ " $flags " == *" $1 "* ]]; }
cannot_run() {  # why this processor cannot run kernel family $1; empty when it can
  case "$1" in
    Haswell|Zen) has avx2 || echo "needs AVX2" ;;
    SkylakeX) has avx512f || echo "needs AVX-512F" ;;
    Cooperlake) { has avx512f && has avx512_bf16; } || echo "needs AVX-512F and AVX512-BF16" ;;
  esac
}

# The build once, outside the timed runs (launch/test would do it on the first run anyway).
launch/test -N >"$log_dir/build.log" 2>&1 || { echo "suite_matrix: build failed: $log_dir/build.log" >&2; exit 1; }

hog_pids=()
stop_hog() { [ ${#hog_pids[@]} -eq 0 ] || kill "${hog_pids[@]}" 2>/dev/null; hog_pids=(); }
trap stop_hog EXIT INT TERM

status=0
printf '%-11s %-8s %-9s %s\n' run result time "summary (log)"
for name in "${only[@]}"; do
  env_args=()
  case "$name" in
    Haswell|Zen|SkylakeX|Cooperlake)
      why="$(cannot_run "$name")"
      if [ -n "$why" ]; then
        printf '%-11s %-8s %-9s %s\n' "$name" skipped - "this processor $why"
        continue
      fi
      env_args=(OPENBLAS_CORETYPE="$name") ;;
    load)
      for _ in $(seq "$(nproc)"); do (while :; do :; done) & hog_pids+=($!); done ;;
    *) echo "suite_matrix: unknown run $name" >&2; exit 2 ;;
  esac
  log="$log_dir/$name.log"
  start=$(date +%s)
  env "${env_args[@]}" launch/test "${ctest_args[@]}" >"$log" 2>&1
  code=$?
  stop_hog
  summary="$(grep -E '^[0-9]+% tests passed' "$log" | tail -n1)"
  result=passed
  [ $code -eq 0 ] || { result=FAILED; status=1; }
  printf '%-11s %-8s %-9s %s\n' "$name" "$result" "$(( $(date +%s) - start ))s" \
    "${summary:-no ctest summary} ($log)"
  [ $code -eq 0 ] || grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted)\)' "$log" | sed 's/^/    /'
done
exit $status
