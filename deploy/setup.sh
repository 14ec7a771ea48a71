#!/usr/bin/env bash
# Idempotent setup: Debian packages, the Python environment, the kiln client
# package and the native build. Each step is skipped when already done, so a
# second run takes seconds.
#
# Environment:
#   KILN_VENV        virtual environment to use (default: <repo>/.venv)
#   KILN_BUILD_DIR   CMake build directory (default: <repo>/build)
#   KILN_BUILD_TYPE  CMake build type (default: Release)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KILN_VENV:-$repo/.venv}"
build="${KILN_BUILD_DIR:-$repo/build}"
build_type="${KILN_BUILD_TYPE:-Release}"

log() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------
mapfile -t pkgs < <(grep -vE '^\s*(#|$)' "$repo/deploy/apt-packages.txt")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

# --- Python environment ----------------------------------------------------
if [[ ! -x "$venv/bin/python" ]]; then
  log "creating virtual environment $venv"
  python3 -m venv "$venv"
fi
req_stamp="$venv/.kiln-requirements"
req_hash="$(sha256sum "$repo/deploy/requirements.txt" | cut -d' ' -f1)"
if [[ "$(cat "$req_stamp" 2>/dev/null)" != "$req_hash" ]]; then
  log "installing Python requirements (first time: a few minutes)"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$repo/deploy/requirements.txt"
  echo "$req_hash" > "$req_stamp"
fi
# The client package, editable, so the torch_dynamo_backends entry point is
# registered and points at this checkout.
client_stamp="$venv/.kiln-client"
if [[ "$(cat "$client_stamp" 2>/dev/null)" != "$repo" ]] ||
   ! "$venv/bin/python" -c "import kiln" 2>/dev/null; then
  log "installing the kiln client package"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$repo/client"
  echo "$repo" > "$client_stamp"
fi

# --- Native build ----------------------------------------------------------
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  log "configuring CMake in $build"
  cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE="$build_type" \
    -DKILN_PYTHON_PREFIX="$venv" -G Ninja >/dev/null
fi
log "building (incremental)"
if ! cmake --build "$build" -j"$(nproc)" > "$build/build.log" 2>&1; then
  grep -E "error|Error" "$build/build.log" | head -40 >&2 || true
  log "build failed; full log: $build/build.log"
  exit 1
fi
ln -sf "$build/server/kilnd" "$venv/bin/kilnd"
# The client's C++ helper (client/CMakeLists.txt), importable from the venv.
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
for module in "$build"/client/_kiln_native*.so; do
  [[ -f "$module" ]] && ln -sf "$module" "$site/"
done
log "ready: $venv/bin/kilnd, python $venv/bin/python"
