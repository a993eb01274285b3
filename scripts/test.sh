#!/usr/bin/env bash
# Sets up, then runs every check CI runs: Rust fmt/clippy/tests, ruff, mypy, pytest (which
# starts its own Kafka broker from deploy/kafka, and a real Prometheus).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
step() { printf '\n== %s\n' "$*" >&2; }
step "cargo fmt --check"; cargo fmt --all -- --check
step "cargo clippy"; cargo clippy --workspace --all-targets -q -- -D warnings
step "cargo test"; cargo test --workspace -q 2>&1 | grep -E "^test result|FAILED|panicked" || true
cargo test --workspace -q >/dev/null 2>&1 || { cargo test --workspace; exit 1; }
step "ruff"; .venv/bin/ruff check python tests bench && .venv/bin/ruff format --check python tests bench
step "mypy"; .venv/bin/mypy
step "test services"; scripts/setup-test-services.sh
step "pytest"; .venv/bin/pytest -q "$@"
