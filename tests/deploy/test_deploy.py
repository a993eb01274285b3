"""deploy/ checked with the real tools where they run here: promtool (config, rules, rule unit
tests, and a broken rule must fail them), systemd-analyze verify for the units, the Grafana
dashboard's structure, the Kubernetes manifests against rankwatch's own argument parser and
config loader, and the shipper sample records decoded by the engine."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from deploy_checks import ROOT, dashboard_queries, load_dashboard, need, panels
from rankwatch import Catalog, Engine
from rankwatch.alert.config import OPTIONS as ALERT_OPTIONS
from rankwatch.alert.config import load_alert_config
from rankwatch.cli import build_parser
from rankwatch.settings.run import load_config

DEPLOY = ROOT / "deploy"
PROM = DEPLOY / "prometheus"
K8S = DEPLOY / "k8s"
SHIPPERS = DEPLOY / "shippers"


def run(*cmd: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


# --- Prometheus ------------------------------------------------------------------------------


def test_promtool_accepts_the_config_and_rules_and_their_unit_tests_pass() -> None:
    promtool = need("promtool")
    for cmd in (
        [promtool, "check", "config", "prometheus.yml"],
        [promtool, "check", "rules", "rules/rankwatch.rules.yml"],
        [promtool, "test", "rules", "tests/rankwatch.rules.test.yml"],
    ):
        r = run(*cmd, cwd=PROM)
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "max by (host) (rankwatch_suspect_host_jobs) >= 2",
            "min by (host) (rankwatch_suspect_host_jobs) >= 2",
        ),
        ("> 0.9", "> 0.99"),
        ("for: 2m", "for: 10m"),
    ],
)
def test_the_rule_unit_tests_catch_a_changed_rule(tmp_path: Path, old: str, new: str) -> None:
    promtool = need("promtool")
    shutil.copytree(PROM, tmp_path / "prometheus")
    rules = tmp_path / "prometheus" / "rules" / "rankwatch.rules.yml"
    text = rules.read_text()
    assert old in text
    rules.write_text(text.replace(old, new, 1))
    r = run(
        promtool, "test", "rules", "tests/rankwatch.rules.test.yml", cwd=tmp_path / "prometheus"
    )
    assert r.returncode != 0 and "FAILED" in r.stdout + r.stderr


# --- Grafana ---------------------------------------------------------------------------------

PANEL_TYPES = {"row", "timeseries", "stat", "bargauge", "table", "gauge", "piechart", "text"}


def test_dashboard_is_well_formed_for_grafana() -> None:
    d = load_dashboard()
    for key, kind in (
        ("uid", str),
        ("title", str),
        ("schemaVersion", int),
        ("panels", list),
        ("templating", dict),
        ("time", dict),
        ("tags", list),
    ):
        assert isinstance(d.get(key), kind), key
    assert len(d["uid"]) <= 40 and d["schemaVersion"] >= 36
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids: set[int] = set()
    cells: set[tuple[int, int]] = set()
    for p in panels(d):
        assert p["type"] in PANEL_TYPES, p["type"]
        assert isinstance(p["id"], int) and p["id"] not in ids
        ids.add(p["id"])
        g = p["gridPos"]
        assert g["w"] >= 1 and g["h"] >= 1 and g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']!r} overlaps another"
                cells.add((x, y))
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(set(refs)) == len(refs), p["title"]
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            for var in ("$__rate_interval", "$__range", "$instance"):
                if var == "$instance" and var in t["expr"]:
                    assert 'instance=~"$instance"' in t["expr"]
    titles = " ".join(title.lower() for title, _ in dashboard_queries())
    for needed in ("signature", "root-cause hosts", "suspect", "records", "lag", "reject"):
        assert needed in titles, needed
    assert "memory" in titles and "latency" in titles


def test_grafana_provisioning_points_at_the_dashboards() -> None:
    prov = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/rankwatch.yml").read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].endswith("rankwatch")
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    assert ds["datasources"][0]["type"] == "prometheus"


# --- systemd ---------------------------------------------------------------------------------


def test_systemd_units_verify(tmp_path: Path) -> None:
    analyze = need("systemd-analyze")
    # verify checks that ExecStart's binary exists: point the units at this checkout's.
    rankwatch = Path(shutil.which("rankwatch") or ROOT / ".venv" / "bin" / "rankwatch")
    assert rankwatch.exists()
    units = []
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        text = unit.read_text()
        assert "/opt/rankwatch/bin/rankwatch" in text
        out = tmp_path / unit.name
        out.write_text(text.replace("/opt/rankwatch/bin/rankwatch", str(rankwatch)))
        units.append(str(out))
    assert len(units) == 2
    r = run(analyze, "verify", "--man=no", *units)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.strip() == "", r.stderr
    # verify reports a mistake on stderr (its exit status stays 0 for ignored lines)
    bad = tmp_path / "bad.service"
    daemon_unit = next(u for u in units if u.endswith("/rankwatch.service"))
    bad.write_text(Path(daemon_unit).read_text().replace("Type=notify", "Type=notfy"))
    r = run(analyze, "verify", "--man=no", str(bad))
    assert "Failed to parse service type" in r.stderr


def test_the_daemon_unit_uses_sd_notify_and_is_hardened() -> None:
    text = (DEPLOY / "systemd" / "rankwatch.service").read_text()
    settings = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#"
    )
    assert settings["Type"] == "notify" and settings["NotifyAccess"] == "main"
    assert int(settings["WatchdogSec"].rstrip("s")) >= 10
    for key in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "DynamicUser"):
        assert key in settings, key


# --- Kubernetes ------------------------------------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for f in sorted(K8S.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(f.read_text()) if d)
    return docs


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in manifests() if d["kind"] == kind}


def test_k8s_manifests_are_complete_objects() -> None:
    for d in manifests():
        assert {"apiVersion", "kind", "metadata"} <= d.keys(), d
        assert d["metadata"].get("name"), d
    deployments = by_kind("Deployment")
    assert set(deployments) == {"rankwatch", "rankwatch-alert"}
    for dep in deployments.values():
        spec = dep["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items()


def test_k8s_daemon_probes_config_and_secrets(tmp_path: Path) -> None:
    dep = by_kind("Deployment")["rankwatch"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # the arguments are ones `rankwatch` accepts, and the ConfigMap's file is a valid config
    args = build_parser().parse_args(c["args"])
    assert args.command == "run"
    cm = by_kind("ConfigMap")["rankwatch"]
    toml = tmp_path / "rankwatch.toml"
    toml.write_text(cm["data"]["rankwatch.toml"])
    secrets = {
        e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in c["env"] if "valueFrom" in e
    }
    assert secrets == {
        "RANKWATCH_SASL_USERNAME": "rankwatch-kafka",
        "RANKWATCH_SASL_PASSWORD": "rankwatch-kafka",
    }
    cfg = load_config(
        toml, overrides={}, environ={"RANKWATCH_SASL_USERNAME": "u", "RANKWATCH_SASL_PASSWORD": "p"}
    )
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    assert cfg.metrics_listen() == ("0.0.0.0", port)
    assert cfg.sasl_password == "p" and "sasl_password" not in cm["data"]["rankwatch.toml"]


def test_k8s_alert_deliverer_takes_the_pagerduty_key_from_a_secret() -> None:
    dep = by_kind("Deployment")["rankwatch-alert"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    # the arguments are ones `rankwatch alert` accepts, and its pages listen where the probes
    # and Prometheus look
    env = by_kind("ConfigMap")["rankwatch"]["data"]
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in c["args"]]
    args = build_parser().parse_args(expanded)
    assert args.command == "alert"
    overrides = {k: getattr(args, k) for k in ALERT_OPTIONS if getattr(args, k, None) is not None}
    cfg = load_alert_config(None, overrides=overrides, environ={})
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    assert cfg.http_listen() == ("0.0.0.0", port)
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e for e in c["env"]}
    key = env["RANKWATCH_PAGERDUTY_ROUTING_KEY"]["valueFrom"]["secretKeyRef"]
    assert key["name"] == "rankwatch-pagerduty"
    assert not any("routing" in a for a in c["args"])  # never on a command line


def test_k8s_service_monitor_selects_both_services() -> None:
    (sm,) = by_kind("ServiceMonitor").values()
    services = by_kind("Service")
    selector = sm["spec"]["selector"]["matchLabels"]
    ports = {e["port"] for e in sm["spec"]["endpoints"]}
    assert set(services) == {"rankwatch", "rankwatch-alert"}
    deployments = by_kind("Deployment")
    for name, svc in services.items():
        assert selector.items() <= svc["metadata"]["labels"].items(), name
        assert ports <= {p["name"] for p in svc["spec"]["ports"]}, name
        pod_labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= pod_labels.items(), name


def test_k8s_native_sidecar_pod() -> None:
    (pod,) = by_kind("Pod").values()
    spec = pod["spec"]
    sidecars = {c["name"]: c for c in spec["initContainers"]}
    assert {"log-shipper", "rankwatch"} <= set(sidecars)
    for c in sidecars.values():
        assert c["restartPolicy"] == "Always"  # native sidecar (Kubernetes 1.29+)
    rw = sidecars["rankwatch"]
    assert rw["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert build_parser().parse_args(rw["args"]).command == "run"
    assert spec["containers"] and all("restartPolicy" not in c for c in spec["containers"])


# --- log shippers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "job", "rank"),
    [
        ("fluent-bit-kubernetes.jsonl", "llm7b", None),
        ("fluent-bit-bare-metal.jsonl", "48213", 13),
        ("vector-kubernetes.jsonl", "vit-ft", None),
        ("vector-files.jsonl", "48214", 13),
    ],
)
def test_shipper_sample_records_decode_to_the_failing_host(
    catalog: Catalog, sample: str, job: str, rank: int | None
) -> None:
    cfg = load_config(SHIPPERS / "rankwatch-topics.toml", overrides={}, environ={})
    records = [
        orjson.loads(line) for line in (SHIPPERS / "samples" / sample).read_text().splitlines()
    ]
    (topic,) = {r["topic"] for r in records}
    assert topic in cfg.input_topics()
    shipped = (SHIPPERS / ("fluent-bit" if sample.startswith("fluent") else "vector")).glob("*")
    assert any(topic in f.read_text() for f in shipped), f"no shipper config writes {topic}"
    engine = Engine(catalog)
    values = [orjson.dumps(r["value"]) for r in records]
    keys = [r["key"].encode() for r in records]
    n = len(values)
    decoder = cfg.topic_config(topic).decoder()
    rejected = engine.feed_records(decoder, f"{topic}/0", values, keys, [None] * n, [None] * n)
    assert rejected == []
    (d,) = engine.finish()
    rc = d["root_cause"]
    assert (d["job"], rc["host"]) == (job, "node-07")
    assert "No route to host" in rc["line"]
    if rank is not None:
        assert rc["rank"] == rank
