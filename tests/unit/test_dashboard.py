"""The Grafana dashboard (deploy/grafana/o-dashboard.json) asks only for metrics O exports,
under the names Prometheus gives them, and the docs list every one of them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import Counter, Histogram
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from o_runtime.instruments import Instruments, Samples, SandboxUse

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "o-dashboard.json"
DOCS = ROOT / "docs" / "observability.md"

PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile",
    "by", "without", "on", "ignoring", "and", "or", "unless", "le",
}  # fmt: skip


def exported() -> tuple[set[str], set[str]]:
    """(every series name, the metric families) O's instruments export to Prometheus, each
    instrument having recorded a value."""
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    samples = Samples(
        queue_pending={"executor": 0},
        queue_ack_pending={"executor": 0},
        projection_lag={"runs": 0.0},
        dead_letters_stored={"memory": 1},
        sandbox=lambda: SandboxUse(ready=3, busy=1, target=4),
    )
    instruments = Instruments(provider.get_meter("o"), samples)
    for instrument in vars(instruments).values():
        if isinstance(instrument, Counter):
            instrument.add(1)
        elif isinstance(instrument, Histogram):
            instrument.record(0.1)
    text = generate_latest(registry).decode()
    series = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    provider.shutdown()
    return series, families - {"target_info"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)
    tokens = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr))
    return tokens - PROMQL_WORDS


def panels() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_the_dashboard_is_grafana_json_with_a_prometheus_datasource() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "o-agent-server"
    assert [v["type"] for v in dashboard["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_panel_reads_only_metrics_o_exports() -> None:
    series, _ = exported()
    for panel in panels():
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, target["expr"]
            assert names <= series, (panel["title"], names - series)


def test_the_dashboard_shows_every_metric_o_exports() -> None:
    _, families = exported()
    shown = {n for p in panels() for t in p["targets"] for n in metric_names(t["expr"])}
    shown_families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in shown}
    assert families - shown_families == set()


def test_the_docs_name_every_metric_family() -> None:
    _, families = exported()
    text = DOCS.read_text()
    assert {f for f in families if f"`{f}" not in text} == set()


def test_expressions_are_read_for_their_metric_names() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le, http_route) (rate(http_server_request_duration"
        '_seconds_bucket{http_response_status_code=~"5.."}[$__rate_interval])))'
    )
    assert metric_names(expr) == {"http_server_request_duration_seconds_bucket"}
