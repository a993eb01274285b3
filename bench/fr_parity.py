"""Parity of rankwatch's Flight Recorder analysis with torch's own analyzer (`fr_trace`,
torch.distributed.flight_recorder) and NVIDIA's `fr_attribution` (nvidia-resiliency-ext),
on the checked-in dumps of tests/data/flight_recorder.

The peers need torch, which rankwatch's environment does not have: give the Python of an
environment that has it (`--peer-python`), and for fr_attribution a folder from which
`nvidia_resiliency_ext` 0.5 or later imports (`--nvrx-path`; it is published as a cp312
wheel only, and its analyzer is pure Python, so the unpacked wheel works with 3.11 too).
A peer that is missing is reported as such.

Each peer runs twice: on the dumps as torch 2.15 wrote them, and on a copy whose
`pg_config` is keyed by the group name the entries use (Gloo writes its default group under
the key '' while the entries say '0', which both peers look up and fail on).

    .venv/bin/python bench/fr_parity.py --peer-python ~/frvenv/bin/python --nvrx-path DIR
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rankwatch.flight_recorder import analyze, find_dumps, rank_list, read_dumps

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "flight_recorder"
SCENARIOS = (
    "size_mismatch",
    "skipped",
    "hang",
    "p2p_unmatched",
    "p2p_unmatched_nccl",
    "healthy",
)
# What really happened in each run (from the script that made them and the console logs).
TRUTH = {
    "size_mismatch": "rank 2 at #5 (2,048 vs 1,024 elements); rank 1 aborted by Gloo, no dump",
    "skipped": "rank 1 skipped the loss all-reduce: #6 1,024 vs 1; rank 0 aborted, no dump",
    "hang": "rank 5 stopped before #7",
    "p2p_unmatched": "rank 3 never posted the recv of rank 0's send (Gloo records no p2p)",
    "p2p_unmatched_nccl": "rank 3 never posted the recv of rank 0's send",
    "healthy": "nothing",
}


@dataclass
class Verdict:
    culprits: str  # ranks, as a list like 2 or 0-3; "-" for none; "error: ..." when it failed
    seq: str  # the first collective the tool flags, "-" for none

    def cell(self) -> str:
        if self.culprits.startswith("error"):
            return self.culprits
        return f"{self.culprits} @ {self.seq}"


def rankwatch_verdict(folder: Path) -> Verdict:
    paths, _ = find_dumps([folder])
    dumps, problems, _ = read_dumps(paths)
    if problems:
        return Verdict("error: " + "; ".join(problems), "-")
    findings = analyze(dumps).findings
    if not findings:
        return Verdict("-", "-")
    first = findings[0]
    label = f"#{first.seq}" if not first.kind.startswith("unmatched") else f"p2p #{first.seq}"
    return Verdict(rank_list(first.culprits), f"{label} ({first.kind})")


def fixed_copy(folder: Path, into: Path) -> Path:
    """The dumps with pg_config keyed by the name the entries use (see the module doc).
    Our own checked-in files: trusted, so the plain unpickler reads them."""
    out = into / folder.name
    out.mkdir(parents=True)
    for f in sorted(folder.glob("nccl_trace_rank_*")):
        doc = pickle.loads(f.read_bytes())
        names = {e["process_group"][0] for e in doc["entries"]}
        if "" in doc["pg_config"] and len(names) == 1:
            name = names.pop()
            cfg = doc["pg_config"].pop("")
            cfg.update(name=name, desc="default_pg")
            doc["pg_config"][name] = cfg
        (out / f.name).write_bytes(pickle.dumps(doc, protocol=2))
    return out


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 1, str(e)
    return p.returncode, p.stdout + p.stderr


def torch_verdict(python: str, folder: Path) -> Verdict:
    code, out = _run(
        [
            python,
            "-m",
            "torch.distributed.flight_recorder.fr_trace",
            str(folder),
            "--prefix",
            "nccl_trace_rank_",
            "--allow-incomplete-ranks",
        ]
    )
    if code != 0:
        last = [ln for ln in out.splitlines() if ln.strip()][-1:] or ["?"]
        return Verdict(f"error: {last[0].strip()[:70]}", "-")
    culprit = re.search(r"Culprit rank (\d+)", out)
    seq = re.search(r"(?:Collective sequence number: |sequence number: )(\d+)", out)
    missing = re.search(r"missing ranks: \{([0-9, ]+)\}", out)
    if culprit:
        return Verdict(culprit.group(1), f"#{seq.group(1) if seq else '?'}")
    if missing:
        ranks = [int(x) for x in missing.group(1).split(",")]
        return Verdict(rank_list(ranks), f"#{seq.group(1) if seq else '?'} (not joining)")
    return Verdict("-", "-")


def nvrx_verdict(python: str, nvrx: str, folder: Path) -> Verdict:
    env = {**os.environ, "PYTHONPATH": nvrx}
    code, out = _run(
        [
            python,
            "-m",
            "nvidia_resiliency_ext.attribution.trace_analyzer.fr_attribution",
            "--fr-path",
            str(folder),
            "-p",
            "nccl_trace_rank_*",
            "--emit-stdout",
        ],
        env,
    )
    if code != 0:
        last = [ln for ln in out.splitlines() if ln.strip()][-1:] or ["?"]
        return Verdict(f"error: {last[0].strip()[:70]}", "-")
    rows = [ln for ln in out.splitlines() if re.match(r"^\d+\s+\|", ln)]
    missing: list[int] = []
    for row in rows:
        cell = row.rsplit("|", 1)[1].strip()
        missing += [int(x) for x in cell.split(",") if x.strip().isdigit()]
    return Verdict(rank_list(missing) if missing else "-", "- (no sequence ids)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer-python", help="python of an environment that has torch")
    ap.add_argument("--nvrx-path", help="folder from which nvidia_resiliency_ext >= 0.5 imports")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in SCENARIOS:
            folder = DATA / s
            fixed = fixed_copy(folder, Path(tmp))
            row = [s, TRUTH[s], rankwatch_verdict(folder).cell()]
            for peer in ("torch", "nvrx"):
                for where in (folder, fixed):
                    if args.peer_python is None or (peer == "nvrx" and args.nvrx_path is None):
                        row.append("not installed here")
                    elif peer == "torch":
                        row.append(torch_verdict(args.peer_python, where).cell())
                    else:
                        row.append(nvrx_verdict(args.peer_python, args.nvrx_path, where).cell())
            rows.append(row)
    head = [
        "scenario",
        "what happened",
        "rankwatch",
        "fr_trace (as written)",
        "fr_trace (pg_config keyed)",
        "fr_attribution (as written)",
        "fr_attribution (pg_config keyed)",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
