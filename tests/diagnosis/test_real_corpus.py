"""Real-log corpus (`shared/corpus/real/`): every case that rankwatch gets right is pinned here,
so a change that breaks one fails CI. Scored exactly as `bench/real_corpus.py` scores (the root
line of the first diagnosis equals the case's evidence line; healthy cases give no diagnosis).
Add a case here when it starts to pass; never remove one to make a change green.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import real_corpus
from rankwatch import Catalog

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "real"

PINNED = [
    "accelerate-2960-ib-flush-status11-ckpt-save",
    "aws-ofi-nccl-1020-efa-devices-not-in-container",
    "aws-ofi-nccl-24-couldnt-open-av-mpirun",
    "aws-ofi-nccl-889-cloudwatch-efa-empty-list",
    "cosmos-rl-681-rdzv-connect-container-hostname",
    "deepseek-moe-47-rank1-unspecified-launch-failure",
    "deepspeed-3232-launcher-return-code-minus9",
    "diffusers-12422-blocking-wait-allreduce-timeout",
    "healthy-distilling-sbs-3-8gpu-single-process-init",
    "healthy-nccl-226-64-hosts-socket-init",
    "healthy-nccl-tests-29-32ranks-4nodes-init",
    "horovod-3611-worker23-recv-timeout",
    "horovod-584-lo-interface-connect-refused",
    "horovod-636-vlan-ipv6-linklocal-hang",
    "ibm-cloud-vf-modify-qp-enodev-doc",
    "kohya-sdscripts-1434-ecc-uncorrectable-rank1",
    "lightning-14986-bootstrap-rank-already-checked-in",
    "lit-llama-380-ib-port-error-node48",
    "llamafactory-7396-sigabrt-after-watchdog-teardown",
    "llamafactory-8045-worker-no-route-to-master",
    "longchat-9-sigkill-local-rank4",
    "model-optimizer-1681-sigkill-memory-leak",
    "ms-swift-8371-rank11-device-side-assert-masked-scatter",
    "nccl-1099-socketpollconnect-silent-failure",
    "nccl-1405-roce-status12-intra-node-nics",
    "nccl-1698-status12-intermittent-mycl-g2",
    "nccl-1730-ras-healthy-rank118-timeout",
    "nccl-1814-roce-status12-then-status5-hostname-test",
    "nccl-224-mpirun-ib-oob-address-family",
    "nccl-229-efa-16rank-init-healthy",
    "nccl-230-ib-local-catastrophic-error-mpirun",
    "nccl-259-single-node-healthy-benign-warn",
    "nccl-529-ip6tnl0-ipv6-linklocal-bootstrap",
    "nccl-622-intel-e810-modify-qp-einval",
    "nccl-799-modify-qp-no-such-device-roce",
    "nccl-952-proxy-connect-failed-rank11",
    "nccl-tests-188-ib-vs-socket-wrong-type",
    "nccl-tests-252-ib-error4-kolyoz2",
    "nccl-tests-29-4host-32rank-init-healthy",
    "nvidia-semseg-33-ecc-uncorrectable-8gpu",
    "ofa-271-8xv100-allreduce-timeout-after-hours",
    "open-r1-620-grpo-broadcast-seq4-rank0-absent",
    "parlai-3084-srun-world-size-mismatch",
    "prime-rl-3186-rank0-dump-signal-from-rank13",
    "pytorch-105782-client-socket-timeout-900s-master",
    "pytorch-79388-c10d-rdzv-client-timeout-both-nodes",
    "rocm-5788-torchrun-sigsegv-both-ranks-gfx1201",
    "sglang-3820-node5-no-route-to-host",
    "sql-r1-18-ray-first-allreduce-never-completes",
    "verl-1309-ray-mesh-tp-broadcast-timeout",
    "vllm-4108-ray-worker-abort-illegal-memory-access",
    "weathergen-433-srun-allreduce-seq52-timeout",
    "wekws-93-port-29400-second-job",
    "xdit-147-heartbeat-stuck-after-timesteps",
]


def _manifest() -> dict[str, dict[str, Any]]:
    if not (CORPUS / "manifest.json").is_file():
        return {}
    return {c["id"]: c for c in json.loads((CORPUS / "manifest.json").read_text())}


MANIFEST = _manifest()


@pytest.mark.skipif(not MANIFEST, reason=f"real corpus not found at {CORPUS}")
@pytest.mark.parametrize("case_id", PINNED)
def test_pinned_real_case_still_passes(case_id: str, catalog: Catalog) -> None:
    result = real_corpus.score_case(MANIFEST[case_id], CORPUS, catalog)
    assert result.passed, (
        f"{case_id} ({result.category}): got {result.got_line!r} [{result.got_signature}], "
        f"want {result.expected_line!r}"
    )
