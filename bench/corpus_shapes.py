"""Score the real-log corpus again with every file re-wrapped the way other pipelines deliver
the same lines: CRLF ends, gzip, container runtimes' envelopes (CRI with split lines, Docker
json-file), `kubectl logs --timestamps` / `--prefix`, and the labels of pdsh, `srun -l`,
Open MPI, torchrun's tee and Ray. The lines, their order and the evidence line stay the same;
only their shape changes.

A case that passes on the plain files should pass in every shape: the hidden cases that judge
rankwatch were collected from the same kinds of pipelines. Cases that already carry a
launcher's labels are not wrapped in a second label of the same kind.

    .venv/bin/python bench/corpus_shapes.py [--corpus DIR] [--shape NAME ...] [-v]

Prints the score per shape and the cases that fail in a shape but pass plain.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import real_corpus
from rankwatch.catalog_loader import Catalog

Wrap = Callable[[list[str]], str]

# The NCCL prefix `host:pid:tid [dev]` (after an optional label) tells which process printed a
# line; lines without one belong to the process seen last.
_NCCL_OWNER = re.compile(r"^(?:\[\d+,\d+\]<\w+>:|\S+: )?([A-Za-z0-9][\w.-]*):(\d+):(\d+) \[")
_SRUN_LABEL = re.compile(r"^ *\d+: ")
_PDSH_LABEL = re.compile(r"^[A-Za-z0-9][\w.-]*\d[\w.-]*: ")
# Docker splits lines longer than this into several objects (16 KiB in Docker; shorter here
# so that the joining is exercised on the corpus's lines).
_DOCKER_PIECE = 120


def _time(i: int) -> str:
    """Increasing RFC 3339 times, one millisecond apart."""
    s = 5 + i // 1000
    return f"2026-03-14T09:{s // 60 % 60:02d}:{s % 60:02d}.{(i % 1000) * 1_000_000 + 123:09d}Z"


def _owners(lines: list[str]) -> Iterator[tuple[str, int, str]]:
    """(host, task, line): the printing process's host and a task number per process."""
    host, task = "node-0", 0
    tasks: dict[tuple[str, str], int] = {}
    for line in lines:
        m = _NCCL_OWNER.match(line)
        if m:
            host = m.group(1)
            task = tasks.setdefault((m.group(1), m.group(2)), len(tasks))
        yield host, task, line


def plain(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def crlf(lines: list[str]) -> str:
    return "".join(f"{line}\r\n" for line in lines)


def cri(lines: list[str]) -> str:
    out = []
    for i, line in enumerate(lines):
        pieces = [line[k : k + _DOCKER_PIECE] for k in range(0, len(line), _DOCKER_PIECE)] or [""]
        for j, piece in enumerate(pieces):
            tag = "F" if j == len(pieces) - 1 else "P"
            out.append(f"{_time(i)} stdout {tag} {piece}\n")
    return "".join(out)


def docker(lines: list[str]) -> str:
    out = []
    for i, line in enumerate(lines):
        text = f"{line}\n"
        for k in range(0, len(text), _DOCKER_PIECE):
            piece = {"log": text[k : k + _DOCKER_PIECE], "stream": "stdout", "time": _time(i)}
            out.append(json.dumps(piece, separators=(",", ":")) + "\n")
    return "".join(out)


def kubectl_timestamps(lines: list[str]) -> str:
    return "".join(f"{_time(i)} {line}\n" for i, line in enumerate(lines))


def kubectl_prefix(lines: list[str]) -> str:
    return "".join(f"[pod/train-worker-0/pytorch] {line}\n" for line in lines)


def pdsh(lines: list[str]) -> str:
    return "".join(f"{host}: {line}\n" for host, _, line in _owners(lines))


def srun(lines: list[str]) -> str:
    return "".join(f"{task:2d}: {line}\n" for _, task, line in _owners(lines))


def openmpi(lines: list[str]) -> str:
    return "".join(f"[1,{task}]<stdout>:{line}\n" for _, task, line in _owners(lines))


def torchrun_tee(lines: list[str]) -> str:
    return "".join(f"[default{task % 8}]:{line}\n" for _, task, line in _owners(lines))


def ray(lines: list[str]) -> str:
    return "".join(
        f"\x1b[36m(RayTrainWorker pid={40000 + task}, ip=10.0.0.{task % 250})\x1b[0m {line}\n"
        for _, task, line in _owners(lines)
    )


SHAPES: dict[str, tuple[Wrap, bool]] = {
    # name: (wrap, gzip the result)
    "plain": (plain, False),
    "crlf": (crlf, False),
    "gzip": (plain, True),
    "cri": (cri, False),
    "docker-json": (docker, False),
    "kubectl-timestamps": (kubectl_timestamps, False),
    "kubectl-prefix": (kubectl_prefix, False),
    "pdsh": (pdsh, False),
    "srun-label": (srun, False),
    "ray": (ray, False),
    "openmpi": (openmpi, False),
    "torchrun-tee": (torchrun_tee, False),
}
# A shape is not stacked on the same kind of label the case's lines already carry.
_ALREADY = {
    "srun-label": _SRUN_LABEL,
    "pdsh": _PDSH_LABEL,
    "openmpi": re.compile(r"^\[\d+,\d+\]<"),
    "torchrun-tee": re.compile(r"^\[[a-z]*\d+\]:"),
}


def applies(shape: str, lines: list[str]) -> bool:
    label = _ALREADY.get(shape)
    return label is None or not any(label.match(line) for line in lines)


def write_case(src: Path, dst: Path, shape: str) -> bool:
    """The case's files in `shape` under `dst`; False when the shape does not apply."""
    wrap, zipped = SHAPES[shape]
    files = [f for f in sorted(src.rglob("*")) if f.is_file()]
    texts = {f: f.read_bytes().decode("utf-8", "surrogateescape").splitlines() for f in files}
    if not all(applies(shape, lines) for lines in texts.values()):
        return False
    for f, lines in texts.items():
        out = dst / f.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        data = wrap(lines).encode("utf-8", "surrogateescape")
        if zipped:
            out.with_name(out.name + ".gz").write_bytes(gzip.compress(data, mtime=0))
        else:
            out.write_bytes(data)
    return True


def score_shape(
    shape: str, manifest: list[dict[str, object]], corpus: Path, catalog: Catalog
) -> dict[str, bool]:
    """case id -> passed, for the cases the shape applies to."""
    results: dict[str, bool] = {}
    tmp = Path(tempfile.mkdtemp(prefix=f"rankwatch-shape-{shape}-"))
    try:
        for entry in manifest:
            case_id = str(entry["id"])
            if write_case(corpus / "cases" / case_id, tmp / "cases" / case_id, shape):
                results[case_id] = real_corpus.score_case(entry, tmp, catalog).passed
    finally:
        shutil.rmtree(tmp)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=real_corpus.DEFAULT_CORPUS)
    ap.add_argument("--shape", action="append", choices=list(SHAPES), help="repeatable")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every failing case")
    args = ap.parse_args(argv)
    manifest = json.loads((args.corpus / "manifest.json").read_text())
    catalog = Catalog([])
    baseline = score_shape("plain", manifest, args.corpus, catalog)
    print(f"{'shape':<20} {'cases':>5} {'pass':>5}  lost against plain")
    for shape in args.shape or list(SHAPES):
        if shape == "plain":
            results = baseline
        else:
            results = score_shape(shape, manifest, args.corpus, catalog)
        lost = [c for c, ok in results.items() if baseline[c] and not ok]
        print(f"{shape:<20} {len(results):>5} {sum(results.values()):>5}  {len(lost)}")
        for case_id in lost if not args.verbose else [c for c, ok in results.items() if not ok]:
            print(f"    {case_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
