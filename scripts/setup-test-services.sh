#!/usr/bin/env bash
# Installs the real services the tests run against, from Debian, only when they are missing:
# Prometheus (and promtool), Alertmanager, systemd-analyze, and headless Chromium (with a font)
# for the incident-page test. Idempotent: a second run installs nothing.
set -euo pipefail

log() { printf '[setup-test-services] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        log "need root to run: $*"; exit 1; fi
}

PKGS=(prometheus prometheus-alertmanager systemd chromium fonts-dejavu-core)

missing=()
for p in "${PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    as_root apt-get update -qq
    # --no-install-recommends: the tests need the binaries, not the exporters and web assets.
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi
# The Debian package starts a system Prometheus on :9090 where systemd runs; the tests start
# their own on 127.0.0.1 ports of their choosing, so that one is not needed.
for tool in prometheus promtool prometheus-alertmanager systemd-analyze chromium; do
    command -v "$tool" >/dev/null || { log "missing $tool after install"; exit 1; }
done
