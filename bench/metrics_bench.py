"""Cost of the daemon's Prometheus exposition (prometheus_client): one scrape of a daemon
holding a realistic metric set (every catalog signature hit, 32 lagging partitions, fleet
series for 150 hosts), and the per-call cost of the counter updates the loop makes.

    .venv/bin/python bench/metrics_bench.py
"""

from __future__ import annotations

import time

from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.engine import REJECT_REASONS

SIGNATURES, PARTITIONS, HOSTS, INCIDENTS = 207, 32, 150, 400


def loaded() -> DaemonMetrics:
    m = DaemonMetrics(REJECT_REASONS, "bench")
    hits = {f"sig_{i}": i * 1000 for i in range(SIGNATURES)}
    m.update_engine({"lines": 10**9, "bytes": 10**11, "hits_by_signature": hits})
    for p in range(PARTITIONS):
        m.lag.labels("logs", str(p)).set(p * 10)
    for i in range(INCIDENTS):
        d = {
            "id": f"rw-{i}",
            "job": f"job-{i % 90}",
            "root_cause": {"host": f"node-{i % HOSTS}"},
            "signature": {"id": f"sig_{i % 40}", "subsystem": "nccl"},
        }
        m.fleet.published(d)
    for _ in range(1000):
        m.batch_seconds.observe(0.01)
    return m


def per_call(fn: object, n: int) -> float:
    assert callable(fn)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main() -> None:
    m = loaded()
    body = m.render()
    scrape = min(per_call(m.render, 100) for _ in range(3))
    inc = per_call(lambda: m.records_in.inc(5), 100_000)
    lab = per_call(lambda: m.rejected.labels("bad_json").inc(), 100_000)
    obs = per_call(lambda: m.batch_seconds.observe(0.004), 100_000)
    print(f"scrape: {len(body):,} bytes, {body.count(10):,} lines, {scrape * 1e3:.1f} ms")
    print(f"counter inc {inc * 1e9:.0f} ns, labelled inc {lab * 1e9:.0f} ns, ", end="")
    print(f"histogram observe {obs * 1e9:.0f} ns")


if __name__ == "__main__":
    main()
