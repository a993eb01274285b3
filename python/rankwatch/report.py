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


def render_diagnosis(d: Diagnosis, st: Style, context_lines: int = 20) -> str:
    rc = d.get("root_cause") or {}
    sig = d.get("signature") or {}
    out: list[str] = []
    conf = float(d.get("confidence", 0.0))
    tie = "  (tie: see alternatives)" if d.get("tie") else ""
    out.append(
        st.bold(f"Incident {d.get('id')}")
        + st.dim(f"  job {d.get('job')}  confidence {conf:.2f}{tie}")
    )
    out.append(
        st.red("ROOT CAUSE  ")
        + st.bold(_who(rc))
        + f"  {sig.get('title', '')} "
        + st.dim(f"[{sig.get('id')}]")
    )
    cs = d.get("cause_signature") or {}
    if cs.get("id") and cs.get("id") != sig.get("id"):
        out.append(f"  because: {cs.get('title')} " + st.dim(f"[{cs.get('id')}]"))
    when = rc.get("ts_corrected") or rc.get("ts") or "time unknown"
    out.append(st.dim(f"  {when}  {rc.get('origin') or ''}"))
    if rc.get("line") is not None:
        out.append("  > " + st.cyan(str(rc["line"])))
        record = [x for x in (rc.get("record") or []) if x != rc["line"]]
        for extra in record[:8]:
            out.append("    " + st.dim(str(extra)))
    top = (d.get("suspects") or [{}])[0]
    for reason in top.get("reasons", [])[:6]:
        out.append(st.dim(f"  - {reason}"))
    fw = d.get("first_warning")
    if fw:
        out.append(
            st.yellow("First warning  ")
            + _who(fw)
            + st.dim(f"  [{fw.get('signature')}]  {fw.get('ts_corrected') or fw.get('ts') or ''}")
        )
        out.append("  > " + str(fw.get("line")))
    bd = d.get("baseline_diff")
    if bd:
        where = "the root-cause line itself" if bd.get("is_root_cause") else "before the root cause"
        out.append(st.yellow("First line a healthy run never printed  ") + st.dim(f"({where})"))
        out.append("  > " + str(bd.get("line")))
    for odd in d.get("odd_context") or []:
        out.append(
            st.yellow("Odd one out  ")
            + f"{odd['host']} has {odd['field']} = {odd['value']} (the rest of the job differs)"
        )
    coll = d.get("collateral") or []
    if coll:
        out.append(
            st.bold("Collateral  ")
            + f"{d.get('collateral_rank_count', 0)} ranks: {d.get('collateral_ranks', '')}"
        )
        for c in coll[:6]:
            tag = " (explained by the root cause)" if c.get("explained_by_root_cause") else ""
            out.append(f"  {c['signature']}: ranks {c['ranks']}  ({c['lines']} lines){tag}")
        if len(coll) > 6:
            out.append(st.dim(f"  ... {len(coll) - 6} more signatures"))
    suspects = d.get("suspects") or []
    if len(suspects) > 1:
        out.append(st.bold("Other suspects"))
        for s in suspects[1:5]:
            reasons = "; ".join(s.get("reasons", [])[:2]) or "-"
            out.append(f"  {_who(s)}  score {s.get('score')}: {reasons}")
    pre = d.get("preceding_lines") or []
    if pre and context_lines > 0:
        shown = pre[-context_lines:]
        out.append(
            st.bold("Preceding lines")
            + st.dim(f"  (last {len(shown)} of {len(pre)} from the initiating process)")
        )
        out.extend("  | " + line for line in shown)
    if d.get("cause"):
        out.extend(_para("Cause", str(d["cause"]), st))
    if d.get("fix"):
        out.extend(_para("Fix", str(d["fix"]), st))
    if d.get("verify"):
        out.extend(_para("Verify", str(d["verify"]), st))
    alts = d.get("alternatives") or []
    if alts:
        out.append(st.bold("Alternatives considered"))
        for a in alts[:4]:
            out.append(f"  {_who(a)} [{a.get('signature')}]: {a.get('why_not')}")
    return "\n".join(out)


def render_report(
    diagnoses: Sequence[Diagnosis],
    st: Style,
    header: str,
    context_lines: int = 20,
) -> str:
    lines = [st.dim(header)]
    if not diagnoses:
        lines.append("No failure found: no cause, symptom or error lines in these logs.")
        return "\n".join(lines)
    for i, d in enumerate(diagnoses):
        if i:
            lines.append("")
            lines.append(st.dim("-" * 96))
        lines.append(render_diagnosis(d, st, context_lines))
    return "\n".join(lines)
