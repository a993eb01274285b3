"""The incident pages: HTML and JSON from the aiohttp app, everything from logs escaped, and the
page as a person sees it in headless Chromium (root cause visible above the fold and first, copy
buttons working); the screenshot is kept in tests/artifacts/."""

from __future__ import annotations

import asyncio
import copy
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

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
