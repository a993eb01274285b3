"""Coverage of the shipped catalog against Gloo's own message templates (issue 28).

Every row of ../shared/reference/messages/gloo.tsv is instantiated in the line shape users meet
it in (message_formats.gloo_line: a torch RuntimeError carrying Gloo's `[<file>:<line>] `, the
`what():` line of an uncaught one, Gloo's stderr log lines) and classified by the real engine.
A format counts as matched when a signature of the `gloo` subsystem (or `store`, for Gloo's
rendezvous stores) recognises it; the generic exception wrappers do not count. Run with
`pytest -s` to see the numbers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

import message_formats as mf
from rankwatch import Catalog

pytestmark = pytest.mark.skipif(
    not (mf.MESSAGES_DIR / "gloo.tsv").exists(),
    reason=f"reference message tables not found in {mf.MESSAGES_DIR}",
)

# The target of issue 28: Gloo's I/O errors (IoException and the tcp transport's error texts
# that reach users inside them) and its std::runtime_error texts.
IO_AND_RUNTIME = ("EXCEPTION:gloo::IoException", "TCP_ERROR", "EXCEPTION:std::runtime_error")
IO_AND_RUNTIME_MIN = 0.90
# Everything else Gloo raises or logs at ERROR/fatal level: enforce failures, invalid
# operations, the libuv transport's fatal prints, ERROR logs.
OTHER_FAILURES = (
    "EXCEPTION:gloo::EnforceNotMet",
    "EXCEPTION:gloo::InvalidOperationException",
    "EXCEPTION:gloo::Exception",
    "EXCEPTION:std::invalid_argument",
    "FATAL(stderr)",
    "ERROR",
)
OTHER_FAILURES_MIN = 0.90
SPECIFIC_MAX_FORMATS = 8


def allowed_subsystems(files: tuple[str, ...]) -> set[str]:
    allowed = {"gloo"}
    if any(f.startswith("gloo/rendezvous/") for f in files):
        allowed.add("store")
    return allowed


@dataclass
class Outcome:
    instance: mf.Instance
    hits: list[str]


@dataclass
class Figures:
    total: int
    matched: list[Outcome]
    specific: list[Outcome]
    misplaced: list[tuple[str, list[str]]]
    unmatched: list[str]

    def line(self, what: str) -> str:
        return (
            f"{what}: {self.total}; matched {len(self.matched)} "
            f"({len(self.matched) / self.total:.1%}); by signatures of <= {SPECIFIC_MAX_FORMATS} "
            f"formats {len(self.specific)} ({len(self.specific) / self.total:.1%}); subsystem "
            f"mismatches {len(self.misplaced)}"
        )


def measure(catalog: Catalog, instances: list[mf.Instance]) -> Figures:
    subsystem = {s["id"]: s["subsystem"] for s in catalog.signatures()}
    outcomes = []
    for i in instances:
        hits = [h["id"] for h in catalog.test(i.line)["hits"]]
        allowed = allowed_subsystems(i.template.files)
        outcomes.append(Outcome(i, [h for h in hits if subsystem[h] in allowed]))
    formats_per_signature = Counter(s for o in outcomes for s in set(o.hits))
    matched = [o for o in outcomes if o.hits]
    specific = [
        o for o in matched if any(formats_per_signature[s] <= SPECIFIC_MAX_FORMATS for s in o.hits)
    ]
    misplaced = [  # claimed by another layer's signature (python's wrappers name no layer)
        (i.line, ids)
        for i, ids in ((i, [h["id"] for h in catalog.test(i.line)["hits"]]) for i in instances)
        if {subsystem[h] for h in ids} - allowed_subsystems(i.template.files) - {"python"}
    ]
    unmatched = [o.instance.line for o in outcomes if not o.hits]
    return Figures(len(outcomes), matched, specific, misplaced, unmatched)


def test_gloo_io_and_runtime_formats_are_covered(catalog: Catalog) -> None:
    rows = mf.gloo_rows(*IO_AND_RUNTIME)
    raised = measure(catalog, [mf.gloo_line(t) for t in rows])
    uncaught = measure(catalog, [mf.gloo_line(t, shape="terminate") for t in rows])
    print("\n" + raised.line("Gloo I/O-error and runtime formats, raised through torch"))
    print(uncaught.line("the same, as the what() line of an uncaught exception"))
    assert len(raised.matched) >= IO_AND_RUNTIME_MIN * raised.total, raised.unmatched
    assert len(uncaught.matched) >= IO_AND_RUNTIME_MIN * uncaught.total, uncaught.unmatched
    assert raised.misplaced == []


def test_gloo_other_failure_formats_are_covered(catalog: Catalog) -> None:
    figures = measure(catalog, [mf.gloo_line(t) for t in mf.gloo_rows(*OTHER_FAILURES)])
    print("\n" + figures.line("Gloo enforce, invalid-operation, fatal and ERROR formats"))
    assert len(figures.matched) >= OTHER_FAILURES_MIN * figures.total, figures.unmatched[:20]
    assert figures.misplaced == []
