"""deploy/: the Grafana dashboard queries only metrics and labels that codegym defines, and
the Prometheus scrape config is valid YAML with the jobs the docs describe."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from codegym.service._metrics import SERVICE_METRICS
from codegym.telemetry import metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "codegym.json"
SCRAPE = DEPLOY / "prometheus" / "prometheus.yml"
K8S_SCRAPE = DEPLOY / "prometheus" / "kubernetes.yml"


def exposed() -> dict[str, tuple[str, ...]]:
    """Sample names PromQL can use, codegym's and the sandbox service's."""
    out = dict(metrics.exposed_names())
    for m in SERVICE_METRICS:
        for family in m.describe():
            suffixes = {
                "histogram": ("_bucket", "_count", "_sum"),
                "counter": ("_total",),
            }.get(family.type, ("",))
            for suffix in suffixes:
                out[family.name + suffix] = tuple(m._labelnames)
    return out


# Labels Prometheus adds to every series, and the histogram bucket bound.
TARGET_LABELS = {"job", "instance", "le", "component", "namespace", "pod"}
NAME = re.compile(r"\bcodegym_[a-z0-9_]+\b")


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every templating query."""
    out = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            out.append((f"variable {var['name']}", var["query"]["query"]))
    return out


def label_names(expr: str) -> set[str]:
    """Labels an expression groups by or matches on."""
    found: set[str] = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        found |= {g.strip() for g in group.split(",") if g.strip()}
    for matchers in re.findall(r"codegym_[a-z0-9_]+\{([^}]*)\}", expr):
        found |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    for _metric, label in re.findall(r"label_values\((codegym_[a-z0-9_]+),\s*(\w+)\)", expr):
        found.add(label)
    return found


def test_dashboard_is_well_formed() -> None:
    data = dashboard()
    assert data["uid"] and data["title"] and data["schemaVersion"] >= 30
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    for p in data["panels"]:
        if p["type"] != "row":
            assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), p["title"]


@pytest.mark.parametrize(("where", "expr"), queries())
def test_every_query_uses_defined_metrics_and_labels(where: str, expr: str) -> None:
    known = exposed()
    names = NAME.findall(expr)
    assert names, f"{where}: {expr!r} queries no codegym metric"
    unknown = [n for n in names if n not in known]
    assert not unknown, f"{where}: {unknown} not defined in codegym.telemetry.metrics"
    allowed = TARGET_LABELS.union(*(known[n] for n in names))
    assert label_names(expr) <= allowed, f"{where}: labels {label_names(expr) - allowed}"
    assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")


def test_dashboard_covers_every_metric() -> None:
    used = {n for _, expr in queries() for n in NAME.findall(expr)}
    families = {re.sub(r"_(bucket|count|sum|total)$", "", n) for n in used}
    every = set(metrics.METRIC_LABELS) | {m._name for m in SERVICE_METRICS}
    missing = {name for name in every if name not in families and name not in used}
    assert not missing, f"metrics with no panel: {sorted(missing)}"


def test_panels_the_issue_asks_for_are_there() -> None:
    titles = " | ".join(p["title"] for p in dashboard()["panels"])
    for want in (
        "latency p50 by verdict",
        "latency p99 by verdict",
        "infra errors/s by reason",
        "Episodes/s",
        "in flight",
        "staleness",
        "Stage latency",
        "Eval progress",
        "reward",
        "KL",
    ):
        assert want.lower() in titles.lower(), want


def test_scrape_config_parses_with_the_documented_jobs() -> None:
    jobs = {}
    for path in (SCRAPE, K8S_SCRAPE):
        config = yaml.safe_load(path.read_text())
        assert set(config["global"]) >= {"scrape_interval", "evaluation_interval"}
        jobs |= {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"codegym-sandbox-service", "codegym-cli", "codegym-kubernetes-pods"}
    local = yaml.safe_load(SCRAPE.read_text())["scrape_configs"]
    assert not any("kubernetes_sd_configs" in job for job in local)  # Debian's build refuses it
    for job in jobs.values():
        assert job.get("metrics_path", "/metrics") == "/metrics"
        assert "static_configs" in job or "kubernetes_sd_configs" in job
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host, port = target.rsplit(":", 1)
                assert host and 0 < int(port) < 65536
    # The service's default port (`codegym sandbox serve`).
    assert jobs["codegym-sandbox-service"]["static_configs"][0]["targets"] == ["127.0.0.1:8080"]
    for rule in jobs["codegym-kubernetes-pods"]["relabel_configs"]:
        if "regex" in rule:
            re.compile(rule["regex"])
