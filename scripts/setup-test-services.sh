#!/usr/bin/env bash
# Installs the real services the tests start (Debian packages), only those that are missing:
# Alertmanager for the alert end-to-end test, Chromium for the incident-page test. Idempotent.
set -euo pipefail

PKGS=(prometheus-alertmanager chromium)

log() { printf '[setup-test-services] %s\n' "$*" >&2; }
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        log "need root to install: ${*: -1}"; return 1; fi
}

missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
log "installing ${missing[*]}"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    "${missing[@]}" >/dev/null
