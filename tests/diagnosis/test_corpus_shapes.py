"""The pinned real cases in other shapes (`bench/corpus_shapes.py`): the same lines delivered
through container runtimes (CRI with split lines, Docker json-file), gzip, CRLF, kubectl and
launcher labels (pdsh, `srun -l`, Open MPI, torchrun's tee, Ray) must give the same root-cause
line as the plain files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import corpus_shapes
import real_corpus
from rankwatch import Catalog
from test_real_corpus import CORPUS, MANIFEST, PINNED

SHAPES = [s for s in corpus_shapes.SHAPES if s != "plain"]


@pytest.mark.skipif(not MANIFEST, reason=f"real corpus not found at {CORPUS}")
@pytest.mark.parametrize("shape", SHAPES)
def test_pinned_cases_pass_in_every_shape(shape: str, catalog: Catalog, tmp_path: Path) -> None:
    failed = []
    for case_id in PINNED:
        case_dir = tmp_path / "cases" / case_id
        if not corpus_shapes.write_case(CORPUS / "cases" / case_id, case_dir, shape):
            continue
        result = real_corpus.score_case(MANIFEST[case_id], tmp_path, catalog)
        if not result.passed:
            failed.append(f"{case_id}: got {result.got_line!r}")
    assert not failed, f"{shape}: " + "; ".join(failed)


def test_label_shapes_skip_cases_that_already_carry_that_label() -> None:
    assert not corpus_shapes.applies("srun-label", [" 1: [rank1]: x", "plain"])
    assert corpus_shapes.applies("srun-label", ["node-1:1:2 [0] NCCL INFO x"])
    assert not corpus_shapes.applies("pdsh", ["node-07: [rank1]: x"])
