#!/usr/bin/env bash
# Sets up everything rankwatch needs on a fresh Debian machine: system packages (Hyperscan),
# the .venv at the repository root, and rankwatch built from source into it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        log "need root to run: $*"; exit 1; fi
}

need_pkgs=()
# g++ brings libstdc++.a: the extension links Hyperscan and the C++ runtime statically.
for p in pkg-config g++; do dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p"); done
if ! dpkg -s libvectorscan-dev >/dev/null 2>&1 && ! dpkg -s libhyperscan-dev >/dev/null 2>&1; then
    need_pkgs+=("libvectorscan-dev")
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
    log "installing system packages: ${need_pkgs[*]}"
    as_root apt-get update -qq
    if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null; then
        # Older/other Debian releases ship Intel's original package name instead.
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            "${need_pkgs[@]/libvectorscan-dev/libhyperscan-dev}" >/dev/null
    fi
fi

for tool in cargo python3 java mvn; do
    command -v "$tool" >/dev/null || { log "missing $tool: install it first (see README)"; exit 1; }
done

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "maturin>=1.7,<2"
log "building rankwatch (Rust core, release) into .venv"
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" \
    .venv/bin/maturin develop --release --extras dev -q 2>&1 | grep -v '^\s*$' | tail -3 >&2
# Byte-compile the package as pip does when it installs a wheel: an editable install under
# PYTHONDONTWRITEBYTECODE would otherwise compile every module again on each start.
.venv/bin/python -m compileall -q python/rankwatch >/dev/null
.venv/bin/rankwatch validate >&2
