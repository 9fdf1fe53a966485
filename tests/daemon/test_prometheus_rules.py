"""`packaging/prometheus/`: the alert rules, their promtool unit tests, the scrape config, and
whether the rules ask for metrics the daemon actually exports.

``promtool`` runs where it is installed (skipped otherwise). The exported names come from the
real collector in
:mod:`janitor.daemon.metrics`, rendered for a daemon state with one volume and one tree.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from janitor.daemon.metrics import DaemonState, TreeState, VolumeState, registry_for, render

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "packaging" / "prometheus"
ALERTS = PROM / "alerts.yml"
ALERTS_TEST = PROM / "alerts_test.yml"
SCRAPE = PROM / "scrape.yml"

METRIC_RE = re.compile(r"\bjanitor_[a-z0-9_]+\b")
EXPECTED_ALERTS = {
    "JanitorVolumeCritical",
    "JanitorFloorForecast",
    "JanitorReservationsRefused",
    "JanitorOrphansPilingUp",
    "JanitorDaemonDown",
    "JanitorTextfileStale",
}


def promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed")
    return tool


def run_promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args],
        cwd=PROM,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def daemon_state() -> DaemonState:
    """One volume, a cache tree and a scratch tree with orphans, and every counter non-zero, so
    every family has a sample."""
    state = DaemonState(pid=4242, started=1_700_000_000.0, version="0.0-test")
    state.volumes[2049] = VolumeState(
        device=2049,
        mount="/data",
        total=500 * 1024**3,
        free=120 * 1024**3,
        floor=10 * 1024**3,
        free_low=20 * 1024**3,
        free_target=30 * 1024**3,
        reserved=2 * 1024**3,
        live=3,
        level="warn",
        reason="forecast reaches the floor",
        fill_rate=1e6,
        eta_floor=900.0,
        eta_full=1800.0,
        confidence=0.8,
        horizon=1800.0,
        ballast=1024**3,
        updated=1_700_000_100.0,
    )
    state.trees["media_cache"] = TreeState(
        name="media_cache",
        role="cache",
        mount="/data",
        usage=5 * 1024**3,
        quota=20 * 1024**3,
        units=12,
        last_sweep=1_700_000_050.0,
        watch="watching",
    )
    state.trees["job_tmp"] = TreeState(
        name="job_tmp",
        role="scratch",
        mount="/data",
        usage=3 * 1024**3,
        units=4,
        last_sweep=1_700_000_050.0,
        watch="watching",
        orphans_left=frozenset({"/data/tmp/.tmpa", "/data/tmp/.tmpb"}),
    )
    state.orphan_jobs["job_tmp"] = frozenset({"/data/tmp/.tmpb", "/data/tmp/.tmpc"})
    state.granted["media_cache"] = 7
    state.refused["media_cache"] = 2
    state.evicted_bytes[("media_cache", "quota")] = 123456
    state.evicted_units[("media_cache", "quota")] = 3
    return state


@pytest.fixture(scope="module")
def exposition() -> str:
    return render(registry_for(daemon_state())).decode()


@pytest.fixture(scope="module")
def exported(exposition: str) -> dict[str, dict[str, str]]:
    """Every sample name in the exposition, with the labels of one of its samples."""
    names: dict[str, dict[str, str]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            names.setdefault(sample.name, dict(sample.labels))
    return names


def rule_exprs() -> list[str]:
    """The ``expr`` of every rule in alerts.yml (PyYAML when present, else a line scan)."""
    try:
        import yaml
    except ImportError:
        text = ALERTS.read_text()
        return re.findall(r"expr:\s*(?:>-\s*)?(.+?)(?=\n\s*for:)", text, re.S)
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in doc["groups"] for rule in group["rules"]]


# -- promtool ----------------------------------------------------------------------------------


def test_promtool_check_rules() -> None:
    done = run_promtool("check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in done.stdout + done.stderr


def test_promtool_test_rules() -> None:
    done = run_promtool("test", "rules", str(ALERTS_TEST))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_promtool_check_metrics_on_the_exposition(exposition: str) -> None:
    done = run_promtool("check", "metrics", stdin=exposition)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "" and done.stderr.strip() == "", done.stdout + done.stderr


def test_promtool_check_scrape_config() -> None:
    done = run_promtool("check", "config", str(SCRAPE))
    assert done.returncode == 0, done.stdout + done.stderr


# -- the rules against the exported metrics ------------------------------------------------------


def test_rules_use_only_exported_metrics(exported: dict[str, dict[str, str]]) -> None:
    used: set[str] = set()
    for expr in rule_exprs():
        used |= set(METRIC_RE.findall(expr))
    assert used, "no janitor_* metric found in alerts.yml"
    missing = sorted(used - set(exported))
    assert not missing, f"alerts.yml uses metrics the daemon does not export: {missing}"


def test_rule_tests_feed_exported_metrics(exported: dict[str, dict[str, str]]) -> None:
    """The promtool unit tests must exercise series the daemon really produces."""
    used = set(METRIC_RE.findall(ALERTS_TEST.read_text()))
    assert used
    missing = sorted(used - set(exported))
    assert not missing, f"alerts_test.yml feeds metrics the daemon does not export: {missing}"


def test_every_alert_has_a_rule_test() -> None:
    text = ALERTS.read_text()
    defined = set(re.findall(r"^\s*- alert:\s*(\w+)", text, re.M))
    assert defined == EXPECTED_ALERTS
    tested = set(re.findall(r"alertname:\s*(\w+)", ALERTS_TEST.read_text()))
    assert tested == defined


def test_metrics_carry_volume_and_tree_labels(exported: dict[str, dict[str, str]]) -> None:
    for name, labels in exported.items():
        if name.startswith("janitor_volume_") or name in (
            "janitor_reservations_live",
            "janitor_ballast_bytes",
        ):
            assert labels.get("volume") == "/data", (name, labels)
        if name.startswith("janitor_tree_"):
            assert labels.get("tree") in ("media_cache", "job_tmp"), (name, labels)
            assert labels.get("volume") == "/data", (name, labels)
        if name.startswith(("janitor_reservations_refused", "janitor_reservations_granted")):
            assert labels.get("tree") == "media_cache", (name, labels)


def test_exported_values_follow_the_state(exposition: str) -> None:
    values = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            values[sample.name] = sample.value
    assert values["janitor_volume_level"] == 1  # warn
    assert values["janitor_volume_headroom_bytes"] == (120 - 10 - 2) * 1024**3
    assert values["janitor_volume_floor_eta_seconds"] == 900.0
    assert values["janitor_volume_horizon_seconds"] == 1800.0
    assert values["janitor_reservations_refused_total"] == 2
    assert values["janitor_tree_watch_polling"] == 0
    assert values["janitor_up"] == 1


def test_orphans_count_each_folder_once_and_only_for_scratch_trees(exposition: str) -> None:
    """The reaper's orphaned jobs and the sweep's leftovers are one set of folders: a folder
    both saw counts once; a cache tree has no orphans series."""
    samples = [
        s
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
        if s.name == "janitor_tree_orphans"
    ]
    assert [(s.labels, s.value) for s in samples] == [({"tree": "job_tmp", "volume": "/data"}, 3)]


def test_a_stopped_daemons_textfile_says_janitor_up_0() -> None:
    from janitor.daemon.metrics import render_down

    text = render_down().decode()
    (family,) = text_string_to_metric_families(text)
    assert [(s.name, s.value) for s in family.samples] == [("janitor_up", 0)]
    assert run_promtool("check", "metrics", stdin=text).returncode == 0


def test_no_forecast_exports_infinity() -> None:
    state = daemon_state()
    state.volumes[2049].eta_floor = None
    text = render(registry_for(state)).decode()
    line = next(ln for ln in text.splitlines() if ln.startswith("janitor_volume_floor_eta_seconds"))
    assert line.endswith("+Inf")


# -- the scrape config -----------------------------------------------------------------------------


def test_scrape_config_parses() -> None:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(SCRAPE.read_text())
    (job,) = doc["scrape_configs"]
    assert job["job_name"] == "space-janitor"  # what JanitorDaemonDown selects on
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    # Other machines' metrics_listen (host:port), the way a central Prometheus reaches them.
    assert targets and all(re.fullmatch(r"[a-z0-9.-]+:9464", t) for t in targets), targets
    for rule_file in doc.get("rule_files", []):
        assert (PROM / rule_file).is_file(), rule_file


def test_daemon_down_alert_selects_the_scrape_job() -> None:
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load(SCRAPE.read_text())["scrape_configs"][0]["job_name"]
    exprs = rule_exprs()
    assert any(f'up{{job="{job}"}}' in e for e in exprs), exprs
