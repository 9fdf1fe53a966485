"""``packaging/prometheus/grafana-dashboard.json``: a Grafana dashboard that loads, whose
variables resolve, and whose every query asks only for metrics the daemon exports.

The exported names come from the real collector (:mod:`janitor.daemon.metrics`) rendered for a
state in which every family has a sample (``test_prometheus_rules.daemon_state``); promtool
(where installed) parses every query, written as recording rules. That the queries return data
from a running daemon is checked by ``test_metrics_listener.py`` against a real Prometheus.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from janitor.daemon.metrics import registry_for, render

from .test_prometheus_rules import METRIC_RE, PROM, daemon_state, rule_exprs

DASHBOARD = PROM / "grafana-dashboard.json"

#: Grafana's own variables a query may use.
GRAFANA_BUILTINS = {
    "__rate_interval",
    "__interval",
    "__interval_ms",
    "__range",
    "__range_s",
    "__range_ms",
    "__from",
    "__to",
    "__dashboard",
}
#: What each builtin stands for when a query is handed to promtool or Prometheus.
SUBSTITUTES = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h", "instance": ".*"}
VAR_RE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
LEGEND_RE = re.compile(r"\{\{\s*(\w+)\s*\}\}")
#: What the issue asks the dashboard to show (by the metrics that show it).
REQUIRED = {
    "janitor_volume_free_bytes",  # free vs floor per volume per host
    "janitor_volume_floor_bytes",
    "janitor_volume_headroom_bytes",
    "janitor_volume_level",
    "janitor_volume_floor_eta_seconds",  # forecast ETA
    "janitor_reservations_granted_total",  # granted/refused rate per host
    "janitor_reservations_refused_total",
    "janitor_evicted_bytes_total",
    "janitor_tree_orphans",
    "janitor_tree_usage_bytes",  # tree usage vs quota
    "janitor_tree_quota_bytes",
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Every sample name the daemon exports, with the label names its samples carry."""
    names: dict[str, set[str]] = {}
    text = render(registry_for(daemon_state())).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


def targets(dashboard: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(p, t) for p in all_panels(dashboard["panels"]) for t in p.get("targets", [])]


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    """The PromQL of every panel query (annotations and variables have their own tests)."""
    return [t["expr"] for _, t in targets(dashboard)]


def substituted(expr: str) -> str:
    """``expr`` as Grafana sends it with every host selected."""
    return VAR_RE.sub(lambda m: SUBSTITUTES[m.group(1) or m.group(2)], expr)


def variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


# -- it loads, as Grafana would ------------------------------------------------------------------


def test_it_is_a_dashboard_grafana_loads(dashboard: dict[str, Any]) -> None:
    assert dashboard["title"] == "space-janitor"
    assert dashboard["uid"] == "space-janitor"
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["panels"], "no panels"
    assert "id" not in dashboard or dashboard["id"] is None  # importable on any Grafana


def test_panel_ids_are_unique(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in all_panels(dashboard["panels"])]
    assert all(isinstance(i, int) for i in ids), ids
    assert len(ids) == len(set(ids)), ids


def test_panels_fit_the_grid_without_overlapping(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, (p["title"], g)
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[x, y]!r}"
                cells[x, y] = p["title"]


def test_datasource_and_host_variables(dashboard: dict[str, Any]) -> None:
    v = variables(dashboard)
    ds = v["datasource"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
    host = v["instance"]
    assert host["type"] == "query"
    assert host["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert host["query"]["query"] == host["definition"] == "label_values(janitor_up, instance)"
    assert host["multi"] is True and host["includeAll"] is True and host["allValue"] == ".*"


def test_every_query_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    want = {"type": "prometheus", "uid": "${datasource}"}
    for p in all_panels(dashboard["panels"]):
        if p["type"] == "row":
            continue
        assert p["datasource"] == want, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == want, (p["title"], t["refId"])
    for a in dashboard["annotations"]["list"]:
        if not a.get("builtIn"):
            assert a["datasource"] == want, a["name"]


def test_every_variable_used_is_defined(dashboard: dict[str, Any]) -> None:
    defined = set(variables(dashboard)) | GRAFANA_BUILTINS
    used = {m.group(1) or m.group(2) for m in VAR_RE.finditer(DASHBOARD.read_text())}
    assert used - defined == set(), f"undefined variables: {sorted(used - defined)}"


def test_every_panel_query_follows_the_host_selection(dashboard: dict[str, Any]) -> None:
    """Each selector of a janitor metric filters on ``$instance``, so picking hosts narrows it."""
    for p, t in targets(dashboard):
        for m in re.finditer(r"\b(janitor_[a-z0-9_]+)(\{[^}]*\})?", t["expr"]):
            assert m.group(2) and 'instance=~"$instance"' in m.group(2), (p["title"], m.group(0))


def test_ref_ids_are_unique_within_each_panel(dashboard: dict[str, Any]) -> None:
    for p in all_panels(dashboard["panels"]):
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), (p["title"], refs)


# -- the queries against what the daemon exports ---------------------------------------------------


def test_every_query_asks_for_exported_metrics(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    queries = [
        *dashboard_exprs(dashboard),
        *(a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a),
        *(v["definition"] for v in variables(dashboard).values() if "definition" in v),
    ]
    used = {name for q in queries for name in METRIC_RE.findall(q)}
    assert used, "no janitor_* metric in the dashboard"
    missing = sorted(used - set(exported))
    assert not missing, f"the dashboard asks for metrics the daemon does not export: {missing}"
    assert used >= REQUIRED, f"not shown: {sorted(REQUIRED - used)}"


def test_alert_rules_ask_for_exported_metrics_too(exported: dict[str, set[str]]) -> None:
    used = {name for e in rule_exprs() for name in METRIC_RE.findall(e)}
    assert used and used <= set(exported), sorted(used - set(exported))


def test_legends_name_labels_the_series_have(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    for p, t in targets(dashboard):
        have = {"instance", "job"}
        for name in METRIC_RE.findall(t["expr"]):
            have |= exported[name]
        wanted = set(LEGEND_RE.findall(t.get("legendFormat", "")))
        assert wanted <= have, (p["title"], t["refId"], sorted(wanted - have))


def test_promtool_parses_every_query(dashboard: dict[str, Any], tmp_path: Path) -> None:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    rules = [
        f"      - record: dashboard:panel_{p['id']}_{t['refId']}\n"
        f"        expr: {json.dumps(substituted(t['expr']))}\n"
        for p, t in targets(dashboard)
    ]
    annotations = [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    rules += [
        f"      - record: dashboard:annotation_{i}\n        expr: {json.dumps(substituted(e))}\n"
        for i, e in enumerate(annotations)
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text("groups:\n  - name: dashboard\n    rules:\n" + "".join(rules))
    done = subprocess.run(
        [tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout + done.stderr
