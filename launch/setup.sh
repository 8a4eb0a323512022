# Shared by launch/rlforge and launch/test (sourced, not run).
# Installs missing Debian packages, then configures and builds in Release.
# Idempotent: the second time it only checks, and the build is incremental.

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
  python3 python3-zmq python3-protobuf python3-yaml
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
