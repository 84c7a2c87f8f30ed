"""deploy/grafana/cairn-dashboard.json and deploy/prometheus/prometheus.yml against the code: every query
parses as PromQL and names only metrics, and labels, that the services register; every registered metric
is on the dashboard and in the Operations guide, with the labels it has there; Prometheus scrapes each
service on the port it listens on."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import REGISTRY

import services.analytics.metrics
import services.chat.metrics
import services.retrieval.metrics
import shared.outbox
import shared.replicas
import shared.web
from services.analytics.settings import Settings as AnalyticsSettings
from services.chat.settings import Settings as ChatSettings
from services.gateway.settings import Settings as GatewaySettings
from services.retrieval.settings import Settings as RetrievalSettings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "deploy/grafana/cairn-dashboard.json").read_text())
OPERATIONS_GUIDE = (ROOT / "docs/operations.md").read_text()
# Importing a module registers its metrics; these are all the modules that define Cairn's.
METRIC_MODULES = (
    shared.web, shared.outbox, shared.replicas, services.chat.metrics, services.retrieval.metrics, services.analytics.metrics,
)
SERVICES = {"gateway": GatewaySettings, "chat": ChatSettings, "retrieval": RetrievalSettings, "analytics": AnalyticsSettings}
SERIES_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
SCRAPE_LABELS = {"job", "instance"}  # added by Prometheus to every series it scrapes
# Grafana replaces these before the query reaches Prometheus; a plain duration stands in for the parser.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def cairn_metrics() -> dict[str, set[str]]:
    """Each series name the services expose -> its label names, from the metrics the modules above registered."""
    labels_of = {  # prometheus_client keeps no public map from a collector to its label names
        name: set(getattr(collector, "_labelnames", ()))
        for collector, names in REGISTRY._collector_to_names.items()
        for name in names
    }
    exposed: dict[str, set[str]] = {}
    for family in REGISTRY.collect():
        if family.name.startswith("cairn_"):
            for suffix in SERIES_SUFFIXES[family.type]:
                exposed[family.name + suffix] = labels_of[family.name] | ({"le"} if suffix == "_bucket" else set())
    return exposed


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, rows' nested panels included."""
    found = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            found += [(inner["title"], target["expr"]) for target in inner.get("targets", [])]
    return found


def parse(expr: str) -> promql_parser.Expr:
    for variable, stand_in in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, stand_in)
    return promql_parser.parse(expr)


def selectors(expr: promql_parser.Expr) -> list[promql_parser.VectorSelector]:
    found: list[promql_parser.VectorSelector] = []
    promql_parser.walk(expr, lambda node: found.append(node) if isinstance(node, promql_parser.VectorSelector) else None)
    return found


def aggregations(expr: promql_parser.Expr) -> list[promql_parser.AggregateExpr]:
    found: list[promql_parser.AggregateExpr] = []
    promql_parser.walk(expr, lambda node: found.append(node) if isinstance(node, promql_parser.AggregateExpr) else None)
    return found


def test_the_metric_modules_register_metrics_with_cairn_names() -> None:
    exposed = cairn_metrics()
    for family in ("cairn_http_requests_total", "cairn_chat_stage_seconds_bucket", "cairn_retrieval_stage_seconds_bucket",
                   "cairn_analytics_queue_messages", "cairn_circuit_breaker_state", "cairn_outbox_events"):
        assert family in exposed
    assert exposed["cairn_http_request_duration_seconds_bucket"] == {"service", "method", "route", "status", "le"}


@pytest.mark.parametrize(("title", "expr"), [pytest.param(title, expr, id=title) for title, expr in queries(DASHBOARD)])
def test_every_dashboard_query_uses_only_registered_metrics_and_their_labels(title: str, expr: str) -> None:
    exposed = cairn_metrics()
    tree = parse(expr)
    found = selectors(tree)
    assert found, f"{title}: no metric in {expr}"
    for selector in found:
        assert selector.name in exposed, f"{title}: {selector.name} is not a series any service exposes"
        used = {m.name for m in selector.matchers.matchers}
        assert used <= exposed[selector.name] | SCRAPE_LABELS, f"{title}: {selector.name} has no label {used - exposed[selector.name]}"
    for aggregation in aggregations(tree):
        if aggregation.modifier is None:
            continue
        available = set().union(*(exposed[s.name] for s in selectors(aggregation.expr))) | SCRAPE_LABELS
        grouped = set(aggregation.modifier.labels)
        assert grouped <= available, f"{title}: grouped by {grouped - available}, which no series in it carries"


def test_every_registered_metric_is_on_the_dashboard() -> None:
    on_dashboard = {family(s.name) for _, expr in queries(DASHBOARD) for s in selectors(parse(expr))}
    assert {family(name) for name in cairn_metrics()} - on_dashboard == set(), "metrics no panel shows"


def documented_metrics(guide: str) -> list[tuple[str, set[str] | None]]:
    """(metric, its labels) for every metric the guide names in code spans: `cairn_x{a,b}`, or `cairn_x` with
    None for labels not stated there. `cairn_*`, the naming rule, is no metric."""
    return [
        (name, set(filter(None, labels.split(","))) if braces else None)
        for name, braces, labels in re.findall(r"`(cairn_[a-z_]*[a-z])(\{([a-z_,]*)\})?`", guide)
    ]


def test_every_metric_the_operations_guide_names_is_registered_with_the_labels_it_lists() -> None:
    families = {family(name): labels - {"le"} for name, labels in cairn_metrics().items()}
    documented = documented_metrics(OPERATIONS_GUIDE)
    assert documented, "the Operations guide names no metric"
    for name, labels in documented:
        assert name in families, f"docs/operations.md names {name}, which no service registers"
        if labels is not None:
            assert labels == families[name], f"docs/operations.md gives {name} the labels {labels}, the code {families[name]}"
    assert set(families) - {name for name, _ in documented} == set(), "metrics the Operations guide does not describe"


def family(series: str) -> str:
    for suffix in ("_bucket", "_count", "_sum"):
        series = series.removesuffix(suffix)
    return series


def test_the_dashboard_is_well_formed_for_grafana() -> None:
    assert DASHBOARD["uid"] and DASHBOARD["title"] and isinstance(DASHBOARD["schemaVersion"], int)
    variables = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert {"datasource", "job"} <= variables
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in DASHBOARD["panels"]:
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys() and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert ref_ids and len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_prometheus_scrapes_each_service_on_its_port() -> None:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(SERVICES)
    for service, settings in SERVICES.items():
        job = jobs[service]
        assert job["metrics_path"] == "/metrics"
        (discovery,) = job["dns_sd_configs"]
        assert discovery["names"] == [service]  # docker-compose.yml's service name
        assert discovery["port"] == settings.model_fields["port"].default
