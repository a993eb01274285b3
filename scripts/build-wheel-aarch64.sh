#!/usr/bin/env bash
# Cross-builds the aarch64 (arm64) manylinux wheel on an x86-64 Debian 12 machine:
#   scripts/build-wheel-aarch64.sh            # -> dist/rankwatch-*-manylinux_2_34_aarch64.whl
#   scripts/build-wheel-aarch64.sh --check    # then installs it under qemu and runs it
# Installs what the build needs (as root, or with sudo): the arm64 architecture for apt, the
# aarch64 cross gcc/g++ (with their libstdc++.a), Debian's arm64 Vectorscan (libhs.a) and, for
# --check, qemu-user; and the Rust target aarch64-unknown-linux-gnu. Hyperscan and the C++
# runtime are linked statically, as in the x86-64 wheel (rust/core/build.rs finds the arm64
# archives when cross-compiling).
#
# --check makes a fresh venv with Debian's arm64 Python 3.11 run by qemu-aarch64 (its packages
# unpacked under the cargo target dir, nothing of it installed on the system), pip-installs the
# wheel there (its dependencies come from PyPI: network needed), and runs `rankwatch --version`,
# `simulate` and `analyze`, which must name the injected root cause. Emulated, it takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[wheel-aarch64] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        log "need root to run: $*"; exit 1; fi
}

check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    *) log "usage: $0 [--check]"; exit 2 ;;
esac

TARGET=aarch64-unknown-linux-gnu
TRIPLE=aarch64-linux-gnu

if [ "$(dpkg --print-architecture)" != amd64 ]; then
    log "this script cross-builds on x86-64 (amd64) Debian; on arm64 build as the README says"
    exit 1
fi

need_pkgs=()
for p in pkg-config "gcc-$TRIPLE" "g++-$TRIPLE" libvectorscan-dev:arm64; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
[ "$check" -eq 0 ] || dpkg -s qemu-user >/dev/null 2>&1 || need_pkgs+=(qemu-user)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        log "adding the arm64 architecture to dpkg"
        as_root dpkg --add-architecture arm64
    fi
    log "installing system packages: ${need_pkgs[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${need_pkgs[@]}" >/dev/null
fi

if ! rustup target list --installed | grep -qx "$TARGET"; then
    log "adding the Rust target $TARGET"
    rustup target add "$TARGET"
fi

if [ ! -x .venv/bin/maturin ]; then
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip install -q "maturin>=1.7,<2"
fi

# cargo links with the cross gcc; cc-rs (mimalloc) compiles with it; build.rs asks the cross
# g++ for its libstdc++.a. abi3 needs no aarch64 interpreter to build against.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER="$TRIPLE-gcc"
export CC_aarch64_unknown_linux_gnu="$TRIPLE-gcc"
export CXX_aarch64_unknown_linux_gnu="$TRIPLE-g++"
export RANKWATCH_HS_LINK=static
log "building the wheel for $TARGET"
.venv/bin/maturin build --release --target "$TARGET" --out dist
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
wheel=$(ls -t dist/rankwatch-"$version"-cp311-abi3-manylinux_*_aarch64.whl | head -1)
log "built $wheel"

[ "$check" -eq 1 ] || exit 0

# --- --check: the wheel installed and run under qemu-aarch64 ---------------------------------
target_dir=${CARGO_TARGET_DIR:-target}
work=$(realpath -m "$target_dir/aarch64-check")
sysroot=$work/sysroot
if [ ! -x "$sysroot/usr/bin/python3.11" ]; then
    log "unpacking Debian's arm64 Python 3.11 into $sysroot"
    rm -rf "$work/debs" "$sysroot"
    mkdir -p "$work/debs" "$sysroot"
    # Python and everything it depends on, for arm64 (arch-independent ones where needed); the
    # packages are only unpacked, never installed.
    mapfile -t pkgs < <(
        apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances --no-pre-depends python3.11:arm64 python3.11-venv:arm64 \
            | grep -E '^[a-z0-9].*:arm64$' \
            | grep -vE '^(dpkg|tar|install-info|openssl|python3|libpython3-stdlib):' | sort -u
    )
    (cd "$work/debs" && apt-get download -qq -o APT::Sandbox::User=root "${pkgs[@]}" \
        python3-pip-whl python3-setuptools-whl libtirpc-common media-types)
    for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
fi
qemu() { qemu-aarch64 -L "$sysroot" "$@"; }
venv=$work/venv
rm -rf "$venv" "$work/run"
mkdir -p "$work/run"
log "installing $wheel into a fresh arm64 venv (emulated: a few minutes)"
qemu "$sysroot/usr/bin/python3.11" -m venv --without-pip "$venv"
pip_whl=$(ls "$sysroot"/usr/share/python-wheels/pip-*.whl | head -1)
qemu "$venv/bin/python" "$pip_whl/pip" install -q "$(realpath "$wheel")"
ext=$(ls "$venv"/lib/python3.11/site-packages/rankwatch/_core*.so)
if readelf -d "$ext" | grep NEEDED | grep -E 'libhs|libstdc\+\+'; then
    log "the extension needs a system Hyperscan or C++ runtime"; exit 1
fi
rw() { (cd "$work/run" && qemu "$venv/bin/python" "$venv/bin/rankwatch" "$@"); }
rw --version
rw simulate ib_link_down --ranks 32 --seed 5 --out job >/dev/null
rw analyze job --json >"$work/run/diagnosis.json"
qemu "$venv/bin/python" - "$work/run" <<'EOF'
import json
import sys
from pathlib import Path

run = Path(sys.argv[1])
truth = json.loads((run / "job" / "truth.json").read_text())["root_cause"]
(d,) = json.loads((run / "diagnosis.json").read_text())["diagnoses"]
got = d["root_cause"]
want = (truth["rank"], truth["host"], truth["line"])
if (got["rank"], got["host"], got["line"]) != want:
    sys.exit(f"analyze named {got}, the generator injected {truth}")
print(f"root cause (as injected): rank {got['rank']} on {got['host']}: {got['line']}")
EOF
log "ok: the aarch64 wheel installs and runs under qemu"
