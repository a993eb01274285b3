#!/usr/bin/env bash
# Sets everything up, then runs the main job: `rankwatch demo` (dev Kafka broker, the daemon,
# a failing 512-rank job replayed among healthy ones, the diagnosis printed as it arrives).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/rankwatch demo "$@"
