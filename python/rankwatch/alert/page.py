"""The incident pages as plain HTML: the same report `rankwatch analyze` prints (root cause
first, preceding lines, collateral as rank ranges, fix and verify with copy buttons), with no
external assets. Rendered from the jinja2 templates in `templates/` with autoescape on:
everything that came from a log or the catalog is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from urllib.parse import quote

from jinja2 import Environment, PackageLoader
from markupsafe import Markup

from rankwatch.alert import content
from rankwatch.alert.received import AnyDiagnosis, typed
from rankwatch.wording import alternative_text, counted, suspect_text, who

PRECEDING_SHOWN = 100


def _escaped(value: object) -> object:
    """Every value the templates print, escaped as the page always was (html.escape's `&quot;`
    and `&#x27;`, where markupsafe would write `&#34;` and `&#39;`); autoescape then leaves
    it be."""
    return value if isinstance(value, Markup) else Markup(escape(str(value), quote=True))


_env = Environment(
    loader=PackageLoader("rankwatch.alert"),
    autoescape=True,
    finalize=_escaped,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
_env.filters["quote"] = lambda s: quote(s, safe="")
_env.globals.update(who=who, preceding_shown=PRECEDING_SHOWN)


def render_incident(d: AnyDiagnosis) -> str:
    d = typed(d)
    return _env.get_template("incident.html").render(
        title=f"rankwatch: {content.summary(d)}",
        d=d,
        other_suspects=counted([suspect_text(s) for s in d.suspects[1:5]]),
        alternatives=counted([alternative_text(a) for a in d.alternatives[:4]]),
    )


def render_index(diagnoses: Sequence[AnyDiagnosis]) -> str:
    """Recent incidents, newest first."""
    return _env.get_template("index.html").render(
        title="rankwatch: incidents", diagnoses=[typed(d) for d in diagnoses]
    )
