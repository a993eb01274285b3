"""The incident pages: HTML and JSON from the aiohttp app, everything from logs escaped, and the
page as a person sees it in headless Chromium (root cause visible above the fold and first, copy
buttons working); the screenshot is kept in tests/artifacts/."""

from __future__ import annotations

import asyncio
import copy
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from alert_services import ARTIFACTS, Chromium, chromium_binary, serving
from conftest import GenerateAndAnalyze
from rankwatch.alert.metrics import AlertMetrics
from rankwatch.alert.page import render_incident
from rankwatch.alert.server import make_app
from rankwatch.alert.store import IncidentStore


class AlwaysReady:
    """Probes of a member that is alive and owns partitions."""

    def live(self) -> tuple[bool, dict[str, Any]]:
        return True, {"status": "ok"}

    def owns_partitions(self) -> tuple[bool, dict[str, Any]]:
        return True, {"status": "ready"}


@pytest.fixture
def diagnosis(generate_and_analyze: GenerateAndAnalyze) -> dict[str, Any]:
    truth, diagnoses = generate_and_analyze("ib_link_down", ranks=16, seed=7)
    assert len(diagnoses) == 1
    d = diagnoses[0]
    assert d["root_cause"]["line"] == truth.root_cause["line"]
    return d


def fetch(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status), r.headers.get("Content-Type", ""), bytes(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), e.headers.get("Content-Type", ""), bytes(e.read())


def test_pages_serve_html_and_json_and_404(diagnosis: dict[str, Any]) -> None:
    store = IncidentStore(10)
    store.put(diagnosis)
    with serving(make_app(store, AlertMetrics(), AlwaysReady())) as server:
        did = diagnosis["id"]
        status, ctype, body = fetch(f"{server.url}/incidents/{did}")
        assert status == 200 and ctype.startswith("text/html")
        html = body.decode()
        assert html.index("Root cause") < html.index("Fix") < html.index("Preceding lines")
        assert diagnosis["collateral_ranks"] in html

        status, ctype, body = fetch(f"{server.url}/incidents/{did}?format=json")
        assert status == 200 and ctype.startswith("application/json")
        assert orjson.loads(body) == diagnosis

        status, _, body = fetch(f"{server.url}/incidents")
        assert status == 200 and f'href="incidents/{did}"' in body.decode()
        status, _, body = fetch(f"{server.url}/incidents?format=json")
        assert [d["id"] for d in orjson.loads(body)["incidents"]] == [did]

        assert fetch(f"{server.url}/incidents/nope")[0] == 404
        assert fetch(f"{server.url}/incidents/nope?format=json")[0] == 404


def test_everything_from_logs_is_escaped(diagnosis: dict[str, Any]) -> None:
    d = copy.deepcopy(diagnosis)
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    d["root_cause"]["line"] = evil
    d["preceding_lines"] = [evil, "a & b"]
    d["job"] = "<b>job</b>"
    d["fix"] = "</pre><script>x()</script>"
    html = render_incident(d)
    assert "<script>alert" not in html and "<img" not in html and "<b>job" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "a &amp; b" in html
    assert html.count("<script>") == 1  # the page's own copy-button script


class PageText(HTMLParser):
    """What a browser shows: the text of each element with an id, and every tag opened."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: dict[str, str] = {}
        self._ids: list[str | None] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        ident = dict(attrs).get("id")
        self._ids.append(ident)
        if ident:
            self.text[ident] = ""

    def handle_endtag(self, tag: str) -> None:
        if self._ids:
            self._ids.pop()

    def handle_data(self, data: str) -> None:
        for ident in self._ids:
            if ident:
                self.text[ident] += data


def test_a_log_line_with_script_and_quotes_is_shown_escaped(diagnosis: dict[str, Any]) -> None:
    """The templates escape what came from logs: a root-cause line and a job name carrying
    `<script>` and both kinds of quotes reach the pages as text, not markup."""
    d = copy.deepcopy(diagnosis)
    line = """NCCL WARN <script>fetch("/x?c='"+document.cookie)</script> it's "done\""""
    job = """"><script>alert('job')</script>"""
    d["root_cause"]["line"] = line
    d["root_cause"]["record"] = [line]
    d["job"] = job
    store = IncidentStore(10)
    store.put(d)
    with serving(make_app(store, AlertMetrics(), AlwaysReady())) as server:
        _, _, page = fetch(f"{server.url}/incidents/{quote(d['id'], safe='')}")
        _, _, index = fetch(f"{server.url}/incidents")
    html = page.decode()
    assert (
        "<pre class=line id=root-line>NCCL WARN &lt;script&gt;fetch(&quot;/x?c=&#x27;&quot;"
        "+document.cookie)&lt;/script&gt; it&#x27;s &quot;done&quot;</pre>"
    ) in html
    assert "&quot;&gt;&lt;script&gt;alert(&#x27;job&#x27;)&lt;/script&gt;" in html
    shown = PageText(html)
    assert shown.text["root-line"] == line
    assert shown.tags.count("script") == 1  # the page's own copy-button script
    listed = PageText(index.decode())
    assert listed.tags.count("script") == 1
    assert f"<td>{job}</td>" not in index.decode()
    assert (
        "<td>&quot;&gt;&lt;script&gt;alert(&#x27;job&#x27;)&lt;/script&gt;</td>" in index.decode()
    )


def test_incident_page_in_headless_chromium(diagnosis: dict[str, Any], tmp_path: Path) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium not found: run scripts/setup-test-services.sh (apt chromium)")
    store = IncidentStore(10)
    store.put(diagnosis)
    shot = ARTIFACTS / "incident-page.png"

    async def check(url: str) -> dict[str, Any]:
        browser = Chromium(binary, tmp_path / "profile")
        try:
            await browser.connect()
            await browser.load(url)
            facts: dict[str, Any] = await browser.evaluate(
                """(() => {
                  const root = document.getElementById('root-cause');
                  const box = root.getBoundingClientRect();
                  const style = getComputedStyle(root);
                  return {text: root.innerText, top: box.top, height: box.height,
                          viewport: innerHeight, display: style.display,
                          visibility: style.visibility,
                          firstPre: document.querySelector('pre').id,
                          title: document.title};
                })()"""
            )
            await browser.evaluate("document.querySelector('h2 button.copy').click()")
            facts["copied"] = await browser.until(
                "document.querySelector('h2 button.copy').textContent === 'Copied'"
            )
            facts["png"] = await browser.screenshot(shot)
            return facts
        finally:
            await browser.close()

    with serving(make_app(store, AlertMetrics(), AlwaysReady())) as server:
        facts = asyncio.run(check(f"{server.url}/incidents/{diagnosis['id']}"))
    rc = diagnosis["root_cause"]
    assert rc["line"] in facts["text"]
    assert f"rank {rc['rank']}" in facts["text"] and rc["host"] in facts["text"]
    assert facts["display"] != "none" and facts["visibility"] == "visible"
    assert facts["height"] > 0 and 0 <= facts["top"] < facts["viewport"]
    assert facts["firstPre"] == "root-line"
    assert diagnosis["job"] in facts["title"]
    assert facts["png"].startswith(b"\x89PNG") and shot.stat().st_size > 10_000
