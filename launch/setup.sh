#!/usr/bin/env bash
# Shared by launch/rlforge and launch/test (sourced): installs missing Debian packages, then
# configures and builds in Release. Idempotent: the second time it only checks, and the build is
# incremental.
# Run, `launch/setup.sh --torch-wheel DIR` installs the torch wheel (CUDA libtorch) into a virtual
# environment of its own and prints the cmake line of the CUDA build (docs/gpu.md).

RLFORGE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RLFORGE_BUILD="${RLFORGE_BUILD:-$RLFORGE_ROOT/build}"

# shared/DESIGN.md's list, with the toolchain and the fast BLAS libtorch needs
# (without libopenblas0-pthread it falls back to reference BLAS, ~20x slower).
RLFORGE_PACKAGES=(
  build-essential cmake pkg-config ccache git
  libtorch-dev libopenblas0-pthread
  libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libabsl-dev libgtest-dev googletest libgloo-dev
  nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libcli11-dev libmujoco-dev
  libicu-dev
  python3 python3-pip python3-zmq python3-protobuf python3-yaml
  chromium chromium-driver python3-selenium
  slurmctld slurmd slurm-client
)

rlforge_missing_packages() {
  local p missing=()
  for p in "${RLFORGE_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  echo "${missing[@]}"
}

rlforge_ensure_packages() {
  local missing
  missing="$(rlforge_missing_packages)"
  [ -z "$missing" ] && return 0
  echo "rlforge: installing Debian packages: $missing" >&2
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then
      sudo="sudo"
    else
      echo "rlforge: error: these packages are missing and this is not root: $missing" >&2
      return 1
    fi
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || return 1
  # shellcheck disable=SC2086
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2 || return 1
}

rlforge_ensure_build() {
  local jobs
  jobs="$(nproc 2>/dev/null || echo 2)"
  # Paths relative to the checkout in ccache's hash: a fresh clone elsewhere (CI) reuses
  # what an earlier build compiled.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$RLFORGE_ROOT}"
  export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  if [ ! -f "$RLFORGE_BUILD/CMakeCache.txt" ]; then
    cmake -S "$RLFORGE_ROOT" -B "$RLFORGE_BUILD" -DCMAKE_BUILD_TYPE=Release -DRLFORGE_WERROR=ON >&2 || return 1
  fi
  cmake --build "$RLFORGE_BUILD" -j"$jobs" >&2 || return 1
}

# The CUDA libtorch of the torch wheel, for -DRLFORGE_CUDA=ON (docs/gpu.md): a virtual environment
# of its own under DIR, torch installed there by pip, then the cmake line that builds against it.
rlforge_torch_wheel_usage() {
  echo "usage: launch/setup.sh --torch-wheel DIR [--torch-version VERSION] [--index-url URL] [--dry-run]"
}

# rlforge_install_torch_wheel DIR VERSION INDEX_URL DRY_RUN: DRY_RUN=true prints the commands only.
rlforge_install_torch_wheel() {
  local dir="$1" version="$2" index="$3" dry="$4" python spec="torch" run=()
  [ -n "$version" ] && spec="torch==$version"
  if [ -e "$dir" ] && [ ! -d "$dir" ]; then
    echo "rlforge: error: --torch-wheel $dir: exists and is not a directory" >&2
    return 1
  fi
  python="$dir/bin/python"
  $dry && run=(echo)
  if [ ! -x "$python" ]; then
    "${run[@]}" python3 -m venv "$dir" || {
      echo "rlforge: error: python3 -m venv $dir failed (Debian's python3-venv installed?)" >&2
      return 1
    }
  fi
  "${run[@]}" "$python" -m pip install --upgrade ${index:+--index-url "$index"} "$spec" || {
    echo "rlforge: error: pip could not install $spec into $dir" >&2
    return 1
  }
  if $dry; then
    echo "cmake -S $RLFORGE_ROOT -B $RLFORGE_ROOT/build-cuda -DCMAKE_BUILD_TYPE=Release" \
      "-DRLFORGE_CUDA=ON -DCMAKE_PREFIX_PATH=\$($python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
    return 0
  fi
  local info
  info="$("$python" -c 'import torch; print(torch.__version__, torch.version.cuda or "none", torch.utils.cmake_prefix_path)')" || return 1
  read -r version cuda prefix <<<"$info"
  if [ "$cuda" = none ]; then
    echo "rlforge: error: torch $version in $dir is built without CUDA (a CPU-only index?)" >&2
    return 1
  fi
  echo "rlforge: torch $version (CUDA $cuda) in $dir; build against it with:" >&2
  echo "cmake -S $RLFORGE_ROOT -B $RLFORGE_ROOT/build-cuda -DCMAKE_BUILD_TYPE=Release" \
    "-DRLFORGE_CUDA=ON -DCMAKE_PREFIX_PATH=$prefix && cmake --build $RLFORGE_ROOT/build-cuda -j$(nproc)"
}

# Run (not sourced): launch/setup.sh --torch-wheel DIR ...
rlforge_setup_main() {
  local dir="" version="" index="" dry=false
  while [ $# -gt 0 ]; do
    case "$1" in
      --torch-wheel | --torch-version | --index-url)
        if [ $# -lt 2 ] || [ -z "$2" ] || [ "${2#--}" != "$2" ]; then
          echo "rlforge: error: $1 needs a value" >&2
          return 2
        fi
        case "$1" in
          --torch-wheel) dir="$2" ;;
          --torch-version) version="$2" ;;
          --index-url) index="$2" ;;
        esac
        shift 2 ;;
      --dry-run) dry=true; shift ;;
      -h | --help) rlforge_torch_wheel_usage; return 0 ;;
      *) echo "rlforge: error: unknown argument '$1'" >&2; rlforge_torch_wheel_usage >&2; return 2 ;;
    esac
  done
  if [ -z "$dir" ]; then
    echo "rlforge: error: --torch-wheel DIR is required (run launch/test or launch/rlforge for the CPU build)" >&2
    return 2
  fi
  rlforge_install_torch_wheel "$(realpath -m "$dir")" "$version" "$index" "$dry"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  rlforge_setup_main "$@"
  exit $?
fi
