"""Classes and shapes found in the eleventh held-out set of real logs (bench/RESULTS.md,
"Held-out real cases, eleventh set"). Every line here is invented in our own words: other
hosts, numbers and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from one_log import diagnose, root


def root_line(diagnoses: list[dict[str, Any]]) -> str:
    return str(root(diagnoses)["line"])


def signature(diagnoses: list[dict[str, Any]]) -> str:
    return str(diagnoses[0]["signature"]["id"])


def test_a_container_column_before_the_nccl_header_is_peeled(tmp_path: Path) -> None:
    # A log viewer printed the container's name, a word and a space, before every line.
    warn = (
        "trainer job-31-master-0:7710:7790 [1] graph/rings.cc:38 NCCL WARN Error : ring 1 "
        "does not loop back to start (6 != 1)"
    )
    text = (
        "trainer job-31-master-0:7710:7790 [1] NCCL INFO Channel 01/02 : 0 2 5 6 0 2 5 6\n"
        f"{warn}\n"
        "trainer job-31-master-0:7710:7790 [1] NCCL INFO graph/connect.cc:312 -> 3\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_ring_invalid"
    assert root_line(diagnoses) == warn
    assert root(diagnoses)["host"] == "job-31-master-0"
