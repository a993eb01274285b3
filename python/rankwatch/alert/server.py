"""The HTTP side of `rankwatch alert` (aiohttp, served by `daemon.http.AppServer`):
`/incidents` and `/incidents/<id>` as HTML or, with `?format=json`, JSON; `/metrics` for
Prometheus; `/healthz` (liveness) and `/readyz` (owns partitions)."""

from __future__ import annotations

from typing import Any, Protocol

import orjson
from aiohttp import web

from rankwatch.alert.metrics import CONTENT_TYPE, AlertMetrics
from rankwatch.alert.page import render_incident, render_index
from rankwatch.alert.store import IncidentStore

HTML = "text/html"
STORE_KEY = web.AppKey("store", IncidentStore)
METRICS_KEY = web.AppKey("metrics", AlertMetrics)


class Probes(Protocol):
    def live(self) -> tuple[bool, dict[str, Any]]: ...
    def owns_partitions(self) -> tuple[bool, dict[str, Any]]: ...


HEALTH_KEY: web.AppKey[Probes] = web.AppKey("health")


def _wants_json(request: web.Request) -> bool:
    return request.query.get("format") == "json"


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(value, option=orjson.OPT_INDENT_2),
        status=status,
        content_type="application/json",
    )


async def incidents(request: web.Request) -> web.Response:
    recent = request.app[STORE_KEY].recent()
    if _wants_json(request):
        return _json({"schema": "rankwatch.incidents/1", "incidents": [r.doc for r in recent]})
    return web.Response(text=render_index(recent), content_type=HTML, charset="utf-8")


async def incident(request: web.Request) -> web.Response:
    did = request.match_info["id"]
    r = request.app[STORE_KEY].entry(did)
    if r is None:
        if _wants_json(request):
            return _json({"error": "no such incident", "id": did}, status=404)
        raise web.HTTPNotFound(text=f"no incident {did!r} among the recent ones\n")
    if _wants_json(request):
        return _json(r.doc)
    return web.Response(text=render_incident(r), content_type=HTML, charset="utf-8")


async def metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS_KEY].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def health(request: web.Request) -> web.Response:
    """Liveness: the consumer loop is turning. A member that owns no partition (more replicas
    than partitions) is alive: restarting it would only rebalance the group."""
    ok, body = request.app[HEALTH_KEY].live()
    return _json(body, status=200 if ok else 503)


async def ready(request: web.Request) -> web.Response:
    """This member owns partitions of the topic (its pages are served either way)."""
    ok, body = request.app[HEALTH_KEY].owns_partitions()
    return _json(body, status=200 if ok else 503)


async def root(request: web.Request) -> web.Response:
    raise web.HTTPFound("/incidents")


def make_app(store: IncidentStore, alert_metrics: AlertMetrics, probes: Probes) -> web.Application:
    app = web.Application()
    app[STORE_KEY] = store
    app[METRICS_KEY] = alert_metrics
    app[HEALTH_KEY] = probes
    app.router.add_get("/", root)
    app.router.add_get("/incidents", incidents)
    app.router.add_get("/incidents/", incidents)
    app.router.add_get("/incidents/{id}", incident)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", health)
    app.router.add_get("/readyz", ready)
    return app
