"""Rendering diagnoses for a human at a terminal, root cause first."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from rankwatch import diagnosis as rd
from rankwatch.wording import alternative_text, counted, suspect_text, who

# The signature id of a root line no catalog signature matched.
UNCLASSIFIED = "unclassified"

# What the renderers take: a typed diagnosis, or its JSON as parsed (decoded here).
AnyDiagnosis = rd.Diagnosis | Mapping[str, Any]


# Hand-written, not rich: rich.style writes the same codes in as many lines, plus its import.
class Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def _wrap(self, code: str, s: str) -> str:
        return f"\x1b[{code}m{s}\x1b[0m" if self.color else s

    def bold(self, s: str) -> str:
        return self._wrap("1", s)

    def red(self, s: str) -> str:
        return self._wrap("1;31", s)

    def yellow(self, s: str) -> str:
        return self._wrap("33", s)

    def dim(self, s: str) -> str:
        return self._wrap("2", s)

    def cyan(self, s: str) -> str:
        return self._wrap("36", s)


def _para(label: str, text: str, st: Style, indent: int = 2) -> list[str]:
    pad = " " * indent
    body = textwrap.fill(text, width=96, initial_indent=pad, subsequent_indent=pad)
    return [st.bold(label), body]


def _header(d: rd.Diagnosis, st: Style) -> list[str]:
    sig = d.signature
    cs = d.cause_signature
    # A finding rooted at a line no signature knows (what a busy rank printed last): the
    # finding is the headline, not "unclassified".
    shown = cs if cs is not None and cs.id and sig.id == UNCLASSIFIED else sig
    tie = "  (tie: see alternatives)" if d.tie else ""
    out = [
        st.bold(f"Incident {d.id}") + st.dim(f"  job {d.job}  confidence {d.confidence:.2f}{tie}"),
        st.red("ROOT CAUSE  ")
        + st.bold(who(d.root_cause))
        + f"  {shown.title} "
        + st.dim(f"[{shown.id}]"),
    ]
    if cs is not None and cs.id and cs.id != shown.id:
        out.append(f"  because: {cs.title} " + st.dim(f"[{cs.id}]"))
    return out


def _root_line(d: rd.Diagnosis, st: Style) -> list[str]:
    rc = d.root_cause
    when = rc.ts_corrected or rc.ts or "time unknown"
    out = [st.dim(f"  {when}  {rc.origin or ''}")]
    if rc.reported_by is not None:
        out.append(st.dim(f"  reported by {who(rc.reported_by)}"))
    if rc.line is not None:
        out.append("  > " + st.cyan(rc.line))
        record = [x for x in rc.record if x != rc.line]
        out.extend("    " + st.dim(extra) for extra in record[:8])
    reasons = d.suspects[0].reasons if d.suspects else []
    out.extend(st.dim(f"  - {reason}") for reason in reasons[:6])
    return out


def _first_warning(d: rd.Diagnosis, st: Style, context_lines: int) -> list[str]:
    fw = d.first_warning
    if fw is None:
        return []
    when = fw.ts_corrected or fw.ts or ""
    out = [st.yellow("First warning  ") + who(fw) + st.dim(f"  [{fw.signature}]  {when}")]
    pre = fw.preceding_lines
    shown = pre[-min(context_lines, 5) :] if context_lines > 0 else []
    if shown:
        out.append(st.dim(f"  (last {len(shown)} of the {len(pre)} lines kept before it)"))
        out.extend("  | " + line for line in shown)
    out.append("  > " + str(fw.line))
    return out


def _context(d: rd.Diagnosis, st: Style) -> list[str]:
    out = []
    bd = d.baseline_diff
    if bd is not None:
        where = "the root-cause line itself" if bd.is_root_cause else "before the root cause"
        out.append(st.yellow("First line a healthy run never printed  ") + st.dim(f"({where})"))
        out.append("  > " + bd.line)
    for odd in d.odd_context:
        what = odd.problem or "the rest of the job differs"
        out.append(
            st.yellow("Odd one out  ") + f"{odd.host} has {odd.field} = {odd.value} ({what})"
        )
    return out


_COLLECTIVE_COLUMNS = (
    ("ranks", "ranks"),
    ("op", "op"),
    ("numel_in", "in"),
    ("numel_out", "out"),
    ("dtype", "dtype"),
    ("root", "root"),
)


def _collectives(d: rd.Diagnosis, st: Style) -> list[str]:
    """What the ranks stated at a collective where they disagree, one row per group of
    ranks, side by side (only the columns some row states)."""
    out: list[str] = []
    for table in d.collectives:
        rows = [{k: getattr(r, k) for k, _ in _COLLECTIVE_COLUMNS} for r in table.rows]
        cols = [(k, h) for k, h in _COLLECTIVE_COLUMNS if any(r[k] is not None for r in rows)]
        cells = [[h for _, h in cols]]
        cells += [["" if r[k] is None else str(r[k]) for k, _ in cols] for r in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
        out.append(st.yellow("Collectives differ  ") + f"{table.group} #{table.seq} ({table.kind})")
        for n, row in enumerate(cells):
            line = "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
            out.append(st.dim(line) if n == 0 else line.rstrip())
    return out


def _collateral(d: rd.Diagnosis, st: Style) -> list[str]:
    coll = d.collateral
    if not coll:
        return []
    out = [st.bold("Collateral  ") + f"{d.collateral_rank_count} ranks: {d.collateral_ranks}"]
    for c in coll[:6]:
        tag = " (explained by the root cause)" if c.explained_by_root_cause else ""
        name = f'{c.signature} "{c.template}"' if c.template else c.signature
        out.append(f"  {name}: ranks {c.ranks}  ({c.lines} lines){tag}")
    if len(coll) > 6:
        out.append(st.dim(f"  ... {len(coll) - 6} more signatures"))
    return out


def _sources_over_cap(d: rd.Diagnosis, st: Style) -> list[str]:
    over = d.sources_over_cap
    if over is None:
        return []
    return [
        st.yellow("Untracked   ")
        + f"{over.lines} lines came from processes beyond the {over.sources_tracked} "
        "this job tracks (memory cap); they share one source and no rank"
    ]


def _suspects(d: rd.Diagnosis, st: Style) -> list[str]:
    suspects = d.suspects
    if len(suspects) <= 1:
        return []
    lines = counted([suspect_text(s) for s in suspects[1:5]])
    return [st.bold("Other suspects"), *("  " + line for line in lines)]


def _preceding(d: rd.Diagnosis, st: Style, context_lines: int) -> list[str]:
    pre = d.preceding_lines
    if not pre or context_lines <= 0:
        return []
    shown = pre[-context_lines:]
    return [
        st.bold("Preceding lines")
        + st.dim(f"  (last {len(shown)} of {len(pre)} from the initiating process)"),
        *("  | " + line for line in shown),
    ]


def _advice(d: rd.Diagnosis, st: Style) -> list[str]:
    out = []
    for text, label in ((d.cause, "Cause"), (d.fix, "Fix"), (d.verify, "Verify")):
        if text:
            out.extend(_para(label, text, st))
    if d.hypotheses:
        out.append(st.bold("Competing explanations"))
        for h in d.hypotheses:
            out.extend(_para(f"  - {h.cause}", f"tell apart: {h.separate_by}", st, 6))
    alts = d.alternatives
    if alts:
        out.append(st.bold("Alternatives considered"))
        out.extend("  " + line for line in counted([alternative_text(a) for a in alts[:4]]))
    return out


def render_diagnosis(d: AnyDiagnosis, st: Style, context_lines: int = 20) -> str:
    """One diagnosis as text. A dict (parsed JSON) is decoded first (BadDiagnosis if it is
    not a diagnosis)."""
    d = rd.from_dict(d)
    parts = [
        _header(d, st),
        _root_line(d, st),
        _first_warning(d, st, context_lines),
        _context(d, st),
        _collectives(d, st),
        _collateral(d, st),
        _sources_over_cap(d, st),
        _suspects(d, st),
        _preceding(d, st, context_lines),
        _advice(d, st),
    ]
    return "\n".join(line for part in parts for line in part)


def render_report(
    diagnoses: Sequence[AnyDiagnosis],
    st: Style,
    header: str,
    context_lines: int = 20,
) -> str:
    lines = [st.dim(header)]
    if not diagnoses:
        lines.append(
            "No failure found: nothing at warning level or above shows a failure in these logs."
        )
        return "\n".join(lines)
    for i, d in enumerate(diagnoses):
        if i:
            lines.append("")
            lines.append(st.dim("-" * 96))
        lines.append(render_diagnosis(d, st, context_lines))
    return "\n".join(lines)
