"""The incident page's layout in headless Chromium at 1280 px and 400 px wide (issue 26, item
4): a job's long rank lists wrap instead of running off the side, and Fix and Verify come right
under the root cause, before the long evidence. Screenshots are kept in tests/artifacts/."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest

from alert_services import ARTIFACTS, Chromium, chromium_binary, serving
from rankwatch.alert.metrics import AlertMetrics
from rankwatch.alert.server import make_app
from rankwatch.alert.store import IncidentStore
from test_alert_page import AlwaysReady, diagnosis  # noqa: F401 (the fixture)

# Every other rank of 6,000: the longest range list a job of that size gives.
LONG_RANKS = ",".join(str(r) for r in range(0, 6000, 2))

LAYOUT = """(() => {
  const box = id => document.getElementById(id).getBoundingClientRect();
  const all = [...document.querySelectorAll('body *')];
  const widest = Math.max(...all.map(e => e.getBoundingClientRect().right));
  const culprit = all.filter(e => e.getBoundingClientRect().right > innerWidth)
    .map(e => e.tagName + '.' + e.className + '#' + e.id).slice(0, 5);
  return {culprit, width: innerWidth, scrollWidth: document.documentElement.scrollWidth, widest,
          rootBottom: box('root-cause').bottom, fixTop: box('fix').top,
          verifyTop: box('verify').top, collateralTop: box('collateral').top,
          precedingTop: box('preceding').top};
})()"""


async def layout_at(binary: str, url: str, width: int, profile: Path) -> dict[str, Any]:
    browser = Chromium(binary, profile)
    try:
        await browser.connect()
        await browser.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )
        await browser.load(url)
        facts: dict[str, Any] = await browser.evaluate(LAYOUT)
        # The first screen only: the whole page at 400 px is taller than a capture may be.
        shot = await browser.call("Page.captureScreenshot", format="png")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"incident-page-{width}px.png").write_bytes(base64.b64decode(shot["data"]))
        return facts
    finally:
        await browser.close()


@pytest.mark.parametrize("width", [1280, 400])
def test_rank_lists_wrap_and_fix_comes_under_the_root_cause(
    diagnosis: dict[str, Any],  # noqa: F811 (the fixture)
    width: int,
    tmp_path: Path,
) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium not found: run scripts/setup-test-services.sh (apt chromium)")
    d = {**diagnosis, "collateral_ranks": LONG_RANKS}
    d["collateral"] = [{**c, "ranks": LONG_RANKS} for c in d["collateral"]]
    store = IncidentStore(10)
    store.put(d)
    with serving(make_app(store, AlertMetrics(), AlwaysReady())) as server:
        url = f"{server.url}/incidents/{d['id']}"
        facts = asyncio.run(layout_at(binary, url, width, tmp_path / "profile"))
    assert facts["width"] == width, facts
    assert facts["scrollWidth"] <= width and facts["widest"] <= width, facts
    assert facts["rootBottom"] <= facts["fixTop"] < facts["verifyTop"], facts
    assert facts["verifyTop"] < min(facts["precedingTop"], facts["collateralTop"]), facts
