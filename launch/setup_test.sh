#!/usr/bin/env bash
# launch/setup.sh --torch-wheel's argument handling, with --dry-run: nothing is downloaded.
set -uo pipefail
setup="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/setup.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
# expect NAME RC PATTERN ARGS...: the exit status is RC and stdout+stderr matches PATTERN.
expect() {
  local name="$1" rc="$2" pattern="$3" output got
  shift 3
  output="$("$setup" "$@" 2>&1)"
  got=$?
  if [ "$got" != "$rc" ] || ! grep -qE -- "$pattern" <<<"$output"; then
    echo "FAILED $name: exit $got (want $rc), output:"$'\n'"$output"$'\n'"(want /$pattern/)"
    failures=$((failures + 1))
  else
    echo "ok $name"
  fi
}
expect no-arguments 2 'torch-wheel DIR is required'
expect missing-dir 2 '--torch-wheel needs a value' --torch-wheel
expect option-as-dir 2 '--torch-wheel needs a value' --torch-wheel --dry-run
expect missing-version 2 '--torch-version needs a value' --torch-wheel "$tmp/v" --torch-version
expect unknown 2 "unknown argument '--cuda'" --torch-wheel "$tmp/v" --cuda
expect help 0 '^usage: launch/setup.sh --torch-wheel DIR' --help
touch "$tmp/file"
expect dir-is-file 1 "--torch-wheel $tmp/file: exists and is not a directory" --torch-wheel "$tmp/file" --dry-run
expect dry-run-venv 0 "^python3 -m venv $tmp/v$" --torch-wheel "$tmp/v" --dry-run
expect dry-run-pip 0 "^$tmp/v/bin/python -m pip install --upgrade torch$" --torch-wheel "$tmp/v" --dry-run
expect dry-run-pinned 0 "pip install --upgrade --index-url https://example.org/whl torch==2.15.0$" \
  --torch-wheel "$tmp/v" --torch-version 2.15.0 --index-url https://example.org/whl --dry-run
expect dry-run-cmake 0 "^cmake -S .* -DRLFORGE_CUDA=ON -DCMAKE_PREFIX_PATH=\\\$\\($tmp/v/bin/python -c" \
  --torch-wheel "$tmp/v" --dry-run
[ ! -e "$tmp/v" ] || { echo "FAILED: --dry-run created $tmp/v"; failures=$((failures + 1)); }
exit $((failures > 0))
