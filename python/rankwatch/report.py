"""Rendering diagnoses for a human at a terminal, root cause first."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

Diagnosis = dict[str, Any]


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


def _who(d: dict[str, Any]) -> str:
    parts = []
    if d.get("rank") is not None:
        parts.append(f"rank {d['rank']}")
    if d.get("host"):
        parts.append(f"on {d['host']}")
    extra = []
    if d.get("device") is not None:
        extra.append(f"GPU {d['device']}")
    if d.get("pid") is not None:
        extra.append(f"pid {d['pid']}")
    if extra:
        parts.append("(" + ", ".join(extra) + ")")
    return " ".join(parts) or "unknown process"


def _para(label: str, text: str, st: Style, indent: int = 2) -> list[str]:
    pad = " " * indent
    body = textwrap.fill(text, width=96, initial_indent=pad, subsequent_indent=pad)
    return [st.bold(label), body]


def _header(d: Diagnosis, st: Style) -> list[str]:
    rc = d.get("root_cause") or {}
    sig = d.get("signature") or {}
    conf = float(d.get("confidence", 0.0))
    tie = "  (tie: see alternatives)" if d.get("tie") else ""
    out = [
        st.bold(f"Incident {d.get('id')}")
        + st.dim(f"  job {d.get('job')}  confidence {conf:.2f}{tie}"),
        st.red("ROOT CAUSE  ")
        + st.bold(_who(rc))
        + f"  {sig.get('title', '')} "
        + st.dim(f"[{sig.get('id')}]"),
    ]
    cs = d.get("cause_signature") or {}
    if cs.get("id") and cs.get("id") != sig.get("id"):
        out.append(f"  because: {cs.get('title')} " + st.dim(f"[{cs.get('id')}]"))
    return out


def _root_line(d: Diagnosis, st: Style) -> list[str]:
    rc = d.get("root_cause") or {}
    when = rc.get("ts_corrected") or rc.get("ts") or "time unknown"
    out = [st.dim(f"  {when}  {rc.get('origin') or ''}")]
    by = rc.get("reported_by")
    if by:
        out.append(st.dim(f"  reported by {_who(by)}"))
    if rc.get("line") is not None:
        out.append("  > " + st.cyan(str(rc["line"])))
        record = [x for x in (rc.get("record") or []) if x != rc["line"]]
        out.extend("    " + st.dim(str(extra)) for extra in record[:8])
    top = (d.get("suspects") or [{}])[0]
    out.extend(st.dim(f"  - {reason}") for reason in top.get("reasons", [])[:6])
    return out


def _first_warning(d: Diagnosis, st: Style, context_lines: int) -> list[str]:
    fw = d.get("first_warning")
    if not fw:
        return []
    when = fw.get("ts_corrected") or fw.get("ts") or ""
    out = [st.yellow("First warning  ") + _who(fw) + st.dim(f"  [{fw.get('signature')}]  {when}")]
    pre = fw.get("preceding_lines") or []
    shown = pre[-min(context_lines, 5) :] if context_lines > 0 else []
    if shown:
        out.append(st.dim(f"  (last {len(shown)} of the {len(pre)} lines kept before it)"))
        out.extend("  | " + line for line in shown)
    out.append("  > " + str(fw.get("line")))
    return out


def _context(d: Diagnosis, st: Style) -> list[str]:
    out = []
    bd = d.get("baseline_diff")
    if bd:
        where = "the root-cause line itself" if bd.get("is_root_cause") else "before the root cause"
        out.append(st.yellow("First line a healthy run never printed  ") + st.dim(f"({where})"))
        out.append("  > " + str(bd.get("line")))
    for odd in d.get("odd_context") or []:
        what = odd.get("problem") or "the rest of the job differs"
        out.append(
            st.yellow("Odd one out  ")
            + f"{odd['host']} has {odd['field']} = {odd['value']} ({what})"
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


def _collectives(d: Diagnosis, st: Style) -> list[str]:
    """What the ranks stated at a collective where they disagree, one row per group of
    ranks, side by side (only the columns some row states)."""
    out: list[str] = []
    for table in d.get("collectives") or []:
        rows = table.get("rows") or []
        cols = [(k, h) for k, h in _COLLECTIVE_COLUMNS if any(r.get(k) is not None for r in rows)]
        cells = [[h for _, h in cols]]
        cells += [["" if r.get(k) is None else str(r[k]) for k, _ in cols] for r in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
        out.append(
            st.yellow("Collectives differ  ")
            + f"{table.get('group')} #{table.get('seq')} ({table.get('kind')})"
        )
        for n, row in enumerate(cells):
            line = "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
            out.append(st.dim(line) if n == 0 else line.rstrip())
    return out


def _collateral(d: Diagnosis, st: Style) -> list[str]:
    coll = d.get("collateral") or []
    if not coll:
        return []
    out = [
        st.bold("Collateral  ")
        + f"{d.get('collateral_rank_count', 0)} ranks: {d.get('collateral_ranks', '')}"
    ]
    for c in coll[:6]:
        tag = " (explained by the root cause)" if c.get("explained_by_root_cause") else ""
        name = f'{c["signature"]} "{c["template"]}"' if c.get("template") else c["signature"]
        out.append(f"  {name}: ranks {c['ranks']}  ({c['lines']} lines){tag}")
    if len(coll) > 6:
        out.append(st.dim(f"  ... {len(coll) - 6} more signatures"))
    return out


def _sources_over_cap(d: Diagnosis, st: Style) -> list[str]:
    over = d.get("sources_over_cap")
    if not over:
        return []
    return [
        st.yellow("Untracked   ")
        + f"{over['lines']} lines came from processes beyond the {over['sources_tracked']} "
        "this job tracks (memory cap); they share one source and no rank"
    ]


def counted(lines: Sequence[str]) -> list[str]:
    """Each distinct line once, in first-seen order, with how often it came when more than once
    (processes told apart by nothing the line shows)."""
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    return [line if n == 1 else f"{line}  (x{n})" for line, n in counts.items()]


def _suspects(d: Diagnosis, st: Style) -> list[str]:
    suspects = d.get("suspects") or []
    if len(suspects) <= 1:
        return []
    lines = counted([suspect_text(s) for s in suspects[1:5]])
    return [st.bold("Other suspects"), *("  " + line for line in lines)]


def suspect_text(s: dict[str, Any]) -> str:
    reasons = "; ".join(s.get("reasons", [])[:2]) or "-"
    return f"{_who(s)}  score {s.get('score')}: {reasons}"


def alternative_text(a: dict[str, Any]) -> str:
    sig = f" [{a['signature']}]" if a.get("signature") else ""
    return f"{_who(a)}{sig}: {a.get('why_not')}"


def _preceding(d: Diagnosis, st: Style, context_lines: int) -> list[str]:
    pre = d.get("preceding_lines") or []
    if not pre or context_lines <= 0:
        return []
    shown = pre[-context_lines:]
    return [
        st.bold("Preceding lines")
        + st.dim(f"  (last {len(shown)} of {len(pre)} from the initiating process)"),
        *("  | " + line for line in shown),
    ]


def _advice(d: Diagnosis, st: Style) -> list[str]:
    out = []
    for key, label in (("cause", "Cause"), ("fix", "Fix"), ("verify", "Verify")):
        if d.get(key):
            out.extend(_para(label, str(d[key]), st))
    hyps = d.get("hypotheses") or []
    if hyps:
        out.append(st.bold("Competing explanations"))
        for h in hyps:
            out.extend(_para(f"  - {h['cause']}", f"tell apart: {h['separate_by']}", st, 6))
    alts = d.get("alternatives") or []
    if alts:
        out.append(st.bold("Alternatives considered"))
        out.extend("  " + line for line in counted([alternative_text(a) for a in alts[:4]]))
    return out


def render_diagnosis(d: Diagnosis, st: Style, context_lines: int = 20) -> str:
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
    diagnoses: Sequence[Diagnosis],
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
