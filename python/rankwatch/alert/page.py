"""The incident pages as plain HTML: the same report `rankwatch analyze` prints (root cause
first, preceding lines, collateral as rank ranges, fix and verify with copy buttons), with no
external assets. Everything that came from a log or the catalog is escaped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from urllib.parse import quote

from rankwatch import diagnosis as rd
from rankwatch.alert import content
from rankwatch.alert.received import AnyDiagnosis, typed
from rankwatch.wording import alternative_text, counted, suspect_text, who

PRECEDING_SHOWN = 100

STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:70em;padding:0 1em;
color:#1b1b1b;background:#fff;overflow-wrap:anywhere}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.05em;margin:1.2em 0 .3em}
.meta,.dim{color:#666}.root{border-left:5px solid #c62828;padding:.4em .9em;background:#fff5f5}
.root .who{font-weight:600}pre{background:#f4f4f4;padding:.5em .7em;overflow-x:auto;
white-space:pre-wrap;word-break:break-all;margin:.3em 0}
pre.line{background:#fde8e8;font-weight:600}ul{margin:.2em 0}
table{border-collapse:collapse}td,th{padding:.15em .8em .15em 0;text-align:left;
vertical-align:top}button.copy{font-size:.85em;margin-left:.6em}
"""

SCRIPT = """
function copyText(id, button) {
  var text = document.getElementById(id).innerText;
  function done() { button.textContent = 'Copied'; }
  function fallback() {
    var area = document.createElement('textarea');
    area.value = text;
    document.body.appendChild(area);
    area.select();
    document.execCommand('copy');
    document.body.removeChild(area);
    done();
  }
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, fallback);
  } else {
    fallback();
  }
}
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _page(title: str, body: Iterable[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{STYLE}</style><script>{SCRIPT}</script></head>"
        "<body>" + "\n".join(body) + "</body></html>\n"
    )


def _root_cause(d: rd.Diagnosis) -> list[str]:
    rc, sig = d.root_cause, d.signature
    out = [
        "<section class=root id=root-cause><h2>Root cause</h2>",
        f"<p><span class=who>{_e(who(rc))}</span> {_e(sig.title)} "
        f"<span class=dim>[{_e(sig.id)}]</span></p>",
    ]
    cs = d.cause_signature
    if cs is not None and cs.id and cs.id != sig.id:
        out.append(f"<p>because: {_e(cs.title)} <span class=dim>[{_e(cs.id)}]</span></p>")
    when = rc.ts_corrected or rc.ts or "time unknown"
    out.append(f"<p class=dim>{_e(when)} {_e(rc.origin or '')}</p>")
    if rc.line is not None:
        out.append(f"<pre class=line id=root-line>{_e(rc.line)}</pre>")
        extra = [x for x in rc.record if x != rc.line][:8]
        if extra:
            out.append("<pre class=dim>" + "\n".join(_e(x) for x in extra) + "</pre>")
    reasons = d.suspects[0].reasons if d.suspects else []
    if reasons:
        out.append("<ul>" + "".join(f"<li>{_e(r)}</li>" for r in reasons[:6]) + "</ul>")
    out.append("</section>")
    return out


def _preceding(d: rd.Diagnosis) -> list[str]:
    pre = d.preceding_lines
    if not pre:
        return []
    shown = pre[-PRECEDING_SHOWN:]
    return [
        f"<h2>Preceding lines <span class=dim>(last {len(shown)} of {len(pre)} from the "
        "initiating process)</span></h2>",
        "<pre id=preceding>" + "\n".join(_e(x) for x in shown) + "</pre>",
    ]


def _evidence(d: rd.Diagnosis) -> list[str]:
    out: list[str] = []
    fw = d.first_warning
    if fw is not None:
        out.append(
            f"<h2>First warning</h2><p>{_e(who(fw))} <span class=dim>[{_e(fw.signature)}]"
            f" {_e(fw.ts_corrected or fw.ts or '')}</span></p>"
            f"<pre>{_e(fw.line)}</pre>"
        )
    bd = d.baseline_diff
    if bd is not None:
        where = "the root-cause line itself" if bd.is_root_cause else "before the root cause"
        out.append(
            f"<h2>First line a healthy run never printed <span class=dim>({where})</span></h2>"
            f"<pre>{_e(bd.line)}</pre>"
        )
    for odd in d.odd_context:
        out.append(
            f"<p><b>Odd one out</b>: {_e(odd.host)} has {_e(odd.field)} = "
            f"{_e(odd.value)} (the rest of the job differs)</p>"
        )
    return out


def _collateral(d: rd.Diagnosis) -> list[str]:
    coll = d.collateral
    if not coll:
        return []
    rows = []
    for c in coll:
        tag = "explained by the root cause" if c.explained_by_root_cause else ""
        rows.append(
            f"<tr><td>{_e(c.signature)}</td><td>ranks {_e(c.ranks)}</td>"
            f"<td>{_e(c.lines)} lines</td><td class=dim>{tag}</td></tr>"
        )
    return [
        f"<h2 id=collateral>Collateral: {_e(d.collateral_rank_count)} ranks "
        f"<span class=dim>{_e(d.collateral_ranks)}</span></h2>",
        "<table>" + "".join(rows) + "</table>",
    ]


def _suspects_and_alternatives(d: rd.Diagnosis) -> list[str]:
    out: list[str] = []
    if len(d.suspects) > 1:
        items = _items(counted([suspect_text(s) for s in d.suspects[1:5]]))
        out.append(f"<h2>Other suspects</h2><ul>{items}</ul>")
    if d.alternatives:
        items = _items(counted([alternative_text(a) for a in d.alternatives[:4]]))
        out.append(f"<h2>Alternatives considered</h2><ul>{items}</ul>")
    return out


def _items(lines: Iterable[str]) -> str:
    return "".join(f"<li>{_e(line)}</li>" for line in lines)


def _copyable(title: str, ident: str, text: object) -> list[str]:
    if not text:
        return []
    return [
        f"<h2>{title}<button class=copy type=button "
        f"onclick=\"copyText('{ident}', this)\">Copy</button></h2>",
        f"<pre id={ident}>{_e(text)}</pre>",
    ]


def render_incident(d: AnyDiagnosis) -> str:
    d = typed(d)
    tie = " (tie: see alternatives)" if d.tie else ""
    body = [
        '<p class=dim><a href="../incidents">All incidents</a> · '
        '<a href="?format=json">JSON</a></p>',
        f"<h1>Incident {_e(d.id)}</h1>",
        f"<p class=meta>job {_e(d.job)} · confidence {d.confidence:.2f}{tie} · "
        f"status {_e(d.status or 'open')}</p>",
        *_root_cause(d),
        *_advice(d),
        *_preceding(d),
        *_evidence(d),
        *_collateral(d),
        *_suspects_and_alternatives(d),
    ]
    return _page(f"rankwatch: {content.summary(d)}", body)


def _advice(d: rd.Diagnosis) -> list[str]:
    """Cause, fix and verify, right under the root cause: what to do comes before the long
    evidence (preceding lines, collateral)."""
    out = [f"<h2>Cause</h2><p id=cause>{_e(d.cause)}</p>"] if d.cause else []
    return out + _copyable("Fix", "fix", d.fix) + _copyable("Verify", "verify", d.verify)


def render_index(diagnoses: Sequence[AnyDiagnosis]) -> str:
    """Recent incidents, newest first."""
    rows = []
    for d in map(typed, diagnoses):
        sig = d.signature
        rows.append(
            f'<tr><td><a href="incidents/{_e(quote(d.id, safe=""))}">{_e(d.id)}</a>'
            f"</td><td>{_e(d.job)}</td><td>{_e(who(d.root_cause))}</td>"
            f"<td>{_e(sig.title or sig.id)}</td><td>{_e(d.incident.start or '')}</td></tr>"
        )
    table = (
        "<table><tr><th>Incident</th><th>Job</th><th>Root cause</th><th>Signature</th>"
        "<th>Started</th></tr>" + "".join(rows) + "</table>"
        if rows
        else "<p>No incidents yet.</p>"
    )
    return _page("rankwatch: incidents", ["<h1>Recent incidents</h1>", table])
