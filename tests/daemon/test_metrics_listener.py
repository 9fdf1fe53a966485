"""The metrics for a central Prometheus (issue 23 item 6), against the REAL daemon: the
``metrics_listen`` listener, the node_exporter textfile, ``janitor_tree_orphans``, and a real
Prometheus (Debian package ``prometheus``) scraping the listener, evaluating the alert rules and
answering every query of the Grafana dashboard.

Each daemon runs on a tmpfs (root only; skipped otherwise, see ``_daemon_helpers``); every
request goes over TCP to the port the daemon bound, or over its Unix socket for comparison.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests._daemon_helpers import (
    Daemon,
    DaemonSetup,
    daemon_setup,
    eventually,
    free_port,
    running_daemon,
    uds_client,
)
from tests._fixtures.console import one_line_error
from tests._fixtures.space import MiB, fill_file

from .test_grafana_dashboard import DASHBOARD, dashboard_exprs, substituted
from .test_prometheus_rules import ALERTS, EXPECTED_ALERTS

#: The scratch tree: batchalign3's job folders (``.tmp*`` holding a pipeline scope).
JOBS = {
    "role": "scratch",
    "units": "dir",
    "unit_glob": ".tmp*",
    "unit_requires": ["fa_v2"],
    "orphan_age": "1s",
    "min_age": "0s",
}


def families(text: str) -> dict[str, list[Any]]:
    """The exposition's families by name, with their samples."""
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` with ``labels`` (None when there is none)."""
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


@contextmanager
def fleet_host(root: Path, **settings: str) -> Iterator[tuple[DaemonSetup, Daemon, str]]:
    """A daemon with a cache tree ``cache`` (quota 8 MiB) and a scratch tree ``jobs`` on a
    32 MiB tmpfs, serving metrics on 127.0.0.1:PORT; yields it and the listener's base URL once
    its first sweep has run."""
    port = free_port()
    env = {"JANITOR_METRICS_LISTEN": f"127.0.0.1:{port}", **settings}
    with daemon_setup(root, tree={"quota": "8MiB"}, settings=env) as setup:
        jobs = setup.mount / "tmp"
        jobs.mkdir()
        setup.trees["jobs"] = {**JOBS, "path": str(jobs)}
        setup.write_policy()
        with running_daemon(setup) as d:
            eventually(
                lambda: (
                    {t["name"] for t in (d.status_json() or {}).get("trees", [])}
                    == {"cache", "jobs"}
                ),
                what="the first periodic sweep",
            )
            yield setup, d, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonSetup, Daemon, str]]:
    """One daemon for the module, with the listener and the textfile."""
    root = tmp_path_factory.mktemp("metrics")
    textdir = root / "textfile_collector"
    textdir.mkdir()
    with fleet_host(root, JANITOR_METRICS_TEXTFILE=str(textdir / "janitor.prom")) as h:
        yield h


def textfile_of(setup: DaemonSetup) -> Path:
    return Path(setup.settings["JANITOR_METRICS_TEXTFILE"])


def orphan(setup: DaemonSetup, name: str) -> tuple[Path, subprocess.Popen[bytes]]:
    """A job folder the guard recorded (``POST /v1/guard/call``, as the guarded ffmpeg sends
    it: a 4 KiB cut of a 16.384 s WAV, a 1 MiB working set) for a writer that is still alive;
    kill the writer to make it an orphan."""
    src = setup.mount / "talk.wav"
    if not src.exists():
        with wave.open(str(src), "wb") as w:  # 16 kHz mono s16: its header tells its length
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(b"\0\0" * 262144)
    out = setup.mount / "tmp" / name / "fa_v2" / "audio" / "fa-v2-audio-1-0.pcm"
    out.parent.mkdir(parents=True)
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    body = {
        "args": ["-y", "-ss", "0", "-to", "0.064", "-i", str(src), "-f", "f32le", "-acodec",
                 "pcm_f32le", "-ar", "16000", "-ac", "1", str(out)],
        "cwd": str(setup.mount),
        "owner_pid": writer.pid,
        "writer_pid": writer.pid,
        "ffmpeg": shutil.which("ffmpeg") or "/usr/bin/ffmpeg",  # a WAV's header is read, not probed
    }  # fmt: skip
    with uds_client(setup.socket) as c:
        r = c.post("/v1/guard/call", json=body)
    assert r.status_code == 200 and r.json()["action"] == "run", r.text
    (held,) = r.json()["session"]["reservations"]
    assert held["pooled"] and held["bytes"] == MiB, held  # the job's working set
    fill_file(out, 4096)
    return out.parents[2], writer


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


# -- the listener ---------------------------------------------------------------------------------


def test_the_listener_serves_the_sockets_metrics(host: tuple[DaemonSetup, Daemon, str]) -> None:
    setup, d, url = host
    r = httpx.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    assert value(r.text, "janitor_up") == 1
    assert value(r.text, "janitor_volume_floor_bytes", volume=str(setup.mount)) == 4 * MiB
    # The same families as /metrics on the socket (the values are measured at each read).
    assert set(families(r.text)) == set(families(d.metrics()))
    assert "server" not in r.headers  # nothing about us beyond what is asked
    promtool = shutil.which("promtool")
    if promtool is not None:
        done = subprocess.run(
            [promtool, "check", "metrics"], input=r.text, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_listener_answers_nothing_else(host: tuple[DaemonSetup, Daemon, str]) -> None:
    """Every route of the API (from its own OpenAPI schema), with every method it takes, is 404
    on the listener (but ``GET /metrics``, the one they share); and nothing was reserved by
    trying."""
    _, d, url = host
    with d.client() as c:
        schema = c.get("/openapi.json").json()
        before = len(c.get("/v1/status").json()["reservations"])
    assert "/v1/reservations" in schema["paths"]
    tried = 0
    with httpx.Client(base_url=url, timeout=10) as c:
        for path, methods in schema["paths"].items():
            concrete = path.replace("{rid}", "r-0123456789abcdef")
            for method in methods:
                if (method, path) == ("get", "/metrics"):
                    continue
                body = {"tree": "cache", "bytes": 1, "owner_pid": os.getpid()}
                r = c.request(method.upper(), concrete, json=body)
                assert r.status_code == 404, (method, path, r.status_code, r.text)
                tried += 1
        for path in ("/openapi.json", "/docs", "/redoc", "/v1/events", "/metrics/", "/x"):
            assert c.get(path).status_code == 404, path
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            r = c.request(method, "/metrics")
            assert r.status_code == 405, (method, r.status_code)
            assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
    assert tried >= 10
    with d.client() as c:
        assert len(c.get("/v1/status").json()["reservations"]) == before


def test_head_the_landing_page_and_gzip(host: tuple[DaemonSetup, Daemon, str]) -> None:
    _, _, url = host
    head = httpx.head(f"{url}/metrics", timeout=10)
    assert head.status_code == 200 and head.content == b""
    page = httpx.get(f"{url}/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'href="/metrics"' in page.text
    # Prometheus asks for gzip; httpx asks by default and decodes.
    zipped = httpx.get(f"{url}/metrics", headers={"accept-encoding": "gzip"}, timeout=10)
    assert zipped.headers["content-encoding"] == "gzip"
    assert value(zipped.text, "janitor_up") == 1


def test_it_listens_only_where_it_is_told(host: tuple[DaemonSetup, Daemon, str]) -> None:
    import psutil

    setup, d, _ = host
    port = int(setup.settings["JANITOR_METRICS_LISTEN"].rpartition(":")[2])
    listening = {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(d.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {("127.0.0.1", port)}


# -- the textfile ----------------------------------------------------------------------------------


def test_the_textfile_is_replaced_atomically_with_the_same_families(
    host: tuple[DaemonSetup, Daemon, str],
) -> None:
    """A reader that reads the file over and over while the daemon rewrites it always reads a
    whole exposition; each write is a new file renamed over the old (a new inode); it is
    0644 (node_exporter runs as another user); nothing else is left in the folder."""
    setup, d, url = host
    path = textfile_of(setup)
    eventually(path.exists, what="the first textfile")
    inodes: set[int] = set()
    reads = 0
    deadline = time.monotonic() + 2.0  # eight samples here (0.25 s apart)
    while time.monotonic() < deadline:
        with open(path, "rb") as fh:
            inodes.add(os.fstat(fh.fileno()).st_ino)
            text = fh.read().decode()
        assert text.endswith("\n") and value(text, "janitor_up") == 1, text[-200:]
        reads += 1
    assert reads > 100 and len(inodes) >= 2, (reads, inodes)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    text = path.read_text()
    assert set(families(text)) == set(families(httpx.get(f"{url}/metrics", timeout=10).text))
    assert {p.name for p in path.parent.iterdir()} <= {path.name, f".{path.name}.{d.pid}.tmp"}


def test_a_clean_stop_leaves_janitor_up_0_and_every_interface_serves(tmp_path: Path) -> None:
    """``:PORT`` serves on every interface (IPv6 too where the machine has it); when the daemon
    stops, its textfile holds ``janitor_up 0`` alone, so the stop shows at once."""
    port = free_port()
    textfile = tmp_path / "prom" / "janitor.prom"
    textfile.parent.mkdir()
    env = {"JANITOR_METRICS_LISTEN": f":{port}", "JANITOR_METRICS_TEXTFILE": str(textfile)}
    with fleet_host(tmp_path, **env) as (_, d, _url):
        assert value(httpx.get(f"http://127.0.0.1:{port}/metrics").text, "janitor_up") == 1
        if socket.has_ipv6 and _has_ipv6_loopback():
            assert httpx.get(f"http://[::1]:{port}/metrics").status_code == 200
        eventually(textfile.exists, what="the textfile")
        assert d.stop() == 0
    fams = families(textfile.read_text())
    assert list(fams) == ["janitor_up"] and fams["janitor_up"][0].value == 0


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def samples_recorded(setup: DaemonSetup) -> int:
    """How many free-space samples the daemon has recorded in its ledger."""
    con = sqlite3.connect(f"file:{setup.ledger}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT count(*) FROM samples").fetchone()[0])
    finally:
        con.close()


def test_a_port_in_use_is_one_error_line_and_the_daemon_runs_on(tmp_path: Path) -> None:
    """As node_exporter would not, the daemon keeps serving its socket (the jobs on the machine
    need it more than Prometheus does) and says why in one line; an unwritable textfile is
    one warning line, however many samples fail."""
    busy = socket.create_server(("127.0.0.1", 0))
    port = busy.getsockname()[1]
    missing = tmp_path / "no-such-dir" / "janitor.prom"
    try:
        with daemon_setup(
            tmp_path,
            settings={
                "JANITOR_METRICS_LISTEN": f"127.0.0.1:{port}",
                "JANITOR_METRICS_TEXTFILE": str(missing),
            },
        ) as setup, running_daemon(setup) as d:  # fmt: skip
            with d.client() as c:
                assert c.get("/v1/status").status_code == 200
                assert (
                    c.post("/v1/reservations", json={"tree": "cache", "bytes": 1}).status_code
                    == 201
                )
            # Several samples (0.25 s apart), each trying the textfile: a sample records its
            # row before it writes the textfile, so four more rows, three more tries at least.
            first = samples_recorded(setup)
            eventually(lambda: samples_recorded(setup) >= first + 4, what="four more samples")
            assert d.proc.poll() is None
            assert d.stop() == 0
            log = setup.log_file.read_text()
            stderr = d.stderr()
    finally:
        busy.close()
    assert "Traceback" not in log and "Traceback" not in stderr
    errors = [ln for ln in log.splitlines() if " ERROR " in ln]
    assert len(errors) == 1, log
    assert f"metrics_listen 127.0.0.1:{port}: cannot listen: " in errors[0]
    assert "in use" in errors[0] and "runs on without it" in errors[0]
    warnings = [ln for ln in log.splitlines() if "metrics_textfile" in ln]
    assert len(warnings) == 1 and " WARNING " in warnings[0] and str(missing) in warnings[0]
    assert not missing.parent.exists()  # never made: a typo is not a folder


def test_a_bad_address_is_one_line_and_exit_2_before_anything_starts(tmp_path: Path) -> None:
    """Checked when the settings load, like every setting: the daemon never starts."""
    with daemon_setup(tmp_path, settings={"JANITOR_METRICS_LISTEN": "::1:9464"}) as setup:
        done = setup.run_cli("daemon", timeout=30)
        assert done.returncode == 2, done
        line = one_line_error(done.stderr)
        assert "JANITOR_METRICS_LISTEN" in line and "[::1]:9464" in line
        assert not setup.socket.exists()


# -- orphans ---------------------------------------------------------------------------------------


def test_an_orphan_that_cannot_go_is_counted_until_it_goes(
    host: tuple[DaemonSetup, Daemon, str],
) -> None:
    """A job whose writer died while a file in its folder is still open (the writer's last
    ffmpeg, say) cannot be removed: ``janitor_tree_orphans`` counts it, as long as it stays;
    once the file is closed a sweep removes it and the count is back to 0."""
    setup, d, url = host

    def orphans() -> float | None:
        return value(httpx.get(f"{url}/metrics").text, "janitor_tree_orphans", tree="jobs")

    assert orphans() == 0
    assert value(d.metrics(), "janitor_tree_orphans", tree="cache") is None  # scratch only
    folder, writer = orphan(setup, ".tmpstuck")
    held = open(folder / "fa_v2" / "audio" / "fa-v2-audio-1-0.pcm", "rb")  # noqa: SIM115
    try:
        kill(writer)
        eventually(lambda: orphans() == 1, what="the orphan counted")
        time.sleep(2.5)  # reaps every second: still there, still counted
        assert folder.exists() and orphans() == 1
    finally:
        held.close()
    with d.client() as c:  # its orphan_age (1 s) passed: a sweep takes it now
        assert c.post("/v1/sweep", json={"tree": "jobs", "dry_run": False}).status_code == 200
    eventually(lambda: not folder.exists() and orphans() == 0, what="the orphan gone, uncounted")


# -- a real Prometheus -----------------------------------------------------------------------------


@contextmanager
def prometheus(tmp_path: Path, target: str) -> Iterator[str]:
    """Prometheus scraping ``target`` every second with the shipped alert rules; its URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{json.dumps(str(ALERTS))}]\n"
        "scrape_configs:\n"
        "  - job_name: space-janitor\n"
        f"    static_configs: [{{targets: [{json.dumps(target)}]}}]\n"
    )
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        eventually(ready, timeout=30, what="prometheus ready")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def query(url: str, expr: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", (expr, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@contextmanager
def falling(path: Path, *, step: int = 64 * 1024, every: float = 0.25,
            most: int = 12 * MiB) -> Iterator[None]:  # fmt: skip
    """An outside writer appending ``step`` bytes to ``path`` every ``every`` seconds (up to
    ``most``) until the block ends; the file is removed then."""
    stop = threading.Event()

    def write() -> None:
        with open(path, "ab") as f:
            while not stop.wait(every) and f.tell() < most:
                f.write(os.urandom(step))
                f.flush()
                os.fsync(f.fileno())

    writer = threading.Thread(target=write, name="falling", daemon=True)
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join(10)
        path.unlink(missing_ok=True)


def forecast_ready(text: str) -> bool:
    """Whether the metrics show a volume's floor coming (a finite ETA) with confidence."""
    eta = value(text, "janitor_volume_floor_eta_seconds")
    confidence = value(text, "janitor_volume_forecast_confidence")
    return eta is not None and eta != float("inf") and (confidence or 0) >= 0.5


def test_a_real_prometheus_scrapes_it_and_every_dashboard_query_has_data(
    host: tuple[DaemonSetup, Daemon, str], tmp_path: Path
) -> None:
    """What the fleet's operator gets: Prometheus on another address scrapes the listener; the
    shipped rules load and evaluate without error; every panel of the dashboard has data,
    after a grant, a refusal, a quota eviction and an orphan's removal happened."""
    setup, d, url = host
    with d.client() as c:  # 20 MiB held on the 32 MiB volume: 10 more do not fit now
        held = c.post("/v1/reservations", json={"tree": "cache", "bytes": "20MiB"})
        assert held.status_code == 201, held.text
        refused = c.post("/v1/reservations", json={"tree": "cache", "bytes": "10MiB"})
        assert refused.status_code == 507 and refused.json()["error"] == "refused", refused.text
        assert c.delete(f"/v1/reservations/{held.json()['id']}").status_code == 200
    for i in range(3):  # 12 MiB in an 8 MiB cache: the watcher has it swept
        fill_file(setup.tree / f"entry-{i}.bin", 4 * MiB)
    folder, writer = orphan(setup, ".tmpgone")
    kill(writer)
    eventually(lambda: not folder.exists(), what="the orphan's removal")

    def evicted() -> str | None:
        # The orphan's removal is counted once its deletion ends, a moment after its folder
        # is gone: waited for itself, not for the quota eviction's count.
        text = d.metrics()
        orphans = value(text, "janitor_evicted_units_total", tree="jobs", reason="orphan")
        return text if orphans and "janitor_evicted_bytes_total" in text else None

    metrics = eventually(evicted, what="the orphan's removal and an eviction counted")
    assert value(metrics, "janitor_evicted_units_total", tree="jobs", reason="orphan")

    # The forecast's panel needs the volume falling steadily for 10 s and more (nine samples,
    # a good fit): an outside writer keeps it falling from now to the last query, whatever
    # the module's daemon saw before.
    with (
        falling(setup.mount / "outside.bin"),
        prometheus(tmp_path, url.removeprefix("http://")) as prom,
    ):
        eventually(lambda: forecast_ready(d.metrics()), timeout=40, what="a confident forecast")
        eventually(
            lambda: [r["value"][1] for r in query(prom, 'up{job="space-janitor"}')] == ["1"],
            timeout=30,
            what="the first scrape",
        )
        eventually(
            lambda: query(prom, "count_over_time(janitor_up[1m]) >= 4"),
            timeout=30,
            what="four scrapes (rates need two)",
        )
        (up,) = query(prom, "janitor_up")
        assert up["metric"]["instance"] == url.removeprefix("http://")
        exprs = dashboard_exprs(json.loads(DASHBOARD.read_text()))
        deadline = time.monotonic() + 30  # a panel fed by the forecast waits for its scrape
        while (empty := [e for e in exprs if not query(prom, substituted(e))]) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.5)
        assert empty == [], "dashboard queries without data"
        rules = httpx.get(f"{prom}/api/v1/rules", timeout=10).json()["data"]["groups"]
        loaded = {r["name"]: r for g in rules for r in g["rules"]}
        assert set(loaded) == EXPECTED_ALERTS
        bad = {name: r.get("lastError") for name, r in loaded.items() if r["health"] != "ok"}
        assert bad == {}, bad


# -- a port that other machines reach cannot starve the daemon (#33 item 4) ------------------------

#: The open-file limits (soft, hard) a daemon starts with: systemd's user services since v240
#: (``DefaultLimitNOFILE=1024:524288``), launchd's (``launchctl limit maxfiles``: 256 soft,
#: unlimited hard; Linux's most for this limit is ``fs.nr_open``), and both soft limits with no
#: room to raise them (a hard limit set as low). A hard limit above this process's own, where it
#: may not raise its own (no CAP_SYS_RESOURCE, as in some containers), is lowered to it: above
#: 10,240 either way, the daemon's soft limit comes out the same.
LIMITS: dict[str, tuple[int, int | None]] = {
    "systemd": (1024, 524288),
    "launchd": (256, None),
    "hard-1024": (1024, 1024),
    "hard-256": (256, 256),
}
#: What the daemon raises its soft limit to, at most (README "Metrics for a fleet").
RAISED = 10240
#: The listener's documented bounds (README "Metrics for a fleet").
MAX_CONNECTIONS = 64
IDLE_TIMEOUT_S = 10.0
FLOOD = 1100


def _hard_limit(wanted: int | None) -> int:
    """``wanted`` (None: unlimited, ``fs.nr_open`` on Linux), or this process's own hard limit
    when it may not give more."""
    import resource

    hard = int(Path("/proc/sys/fs/nr_open").read_text()) if wanted is None else wanted
    own = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if own == resource.RLIM_INFINITY or hard <= own:
        return hard
    try:  # in a child, to see whether this process may raise its hard limit
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import resource as r; r.setrlimit(r.RLIMIT_NOFILE, ({own}, {hard}))",
            ],
            capture_output=True,
        )
    except OSError:
        return own
    return hard if done.returncode == 0 else own


@pytest.fixture
def fds_for_a_flood() -> Iterator[None]:
    """This process holds the flood's sockets: its own soft limit raised to hold them."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FLOOD + 512
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"this process may open {hard} files; the test holds {need}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Flood:
    """``n`` TCP connections to ``address`` that send nothing, opened at once (non-blocking),
    held until ``close()``; what each one reads, and when the other end closed it."""

    def __init__(self, address: tuple[str, int], n: int, *, within: float = 60.0) -> None:
        import selectors

        self.socks: list[socket.socket] = []
        self.got: dict[int, bytes] = {}
        self.closed: dict[int, float] = {}
        self.failed: dict[int, int] = {}
        self.connected: set[int] = set()
        sel = selectors.DefaultSelector()
        try:
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                self.socks.append(s)
                s.connect_ex(address)
                sel.register(s, selectors.EVENT_WRITE, i)
            deadline = time.monotonic() + within
            while sel.get_map() and time.monotonic() < deadline:
                for key, _ in sel.select(0.5):
                    sel.unregister(key.fileobj)
                    err = self.socks[key.data].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        self.failed[key.data] = err
                    else:
                        self.connected.add(key.data)
            self.opened = time.monotonic()
        finally:
            sel.close()

    def wait_closed(self, timeout: float) -> set[int]:
        """Read every connected socket until the other end closes it or ``timeout`` passes;
        the ones it closed."""
        import selectors

        sel = selectors.DefaultSelector()
        for i in self.connected - set(self.closed):
            sel.register(self.socks[i], selectors.EVENT_READ, i)
        deadline = time.monotonic() + timeout
        try:
            while sel.get_map() and time.monotonic() < deadline:
                for key, _ in sel.select(0.5):
                    i = key.data
                    try:
                        data = self.socks[i].recv(65536)
                    except ConnectionError:
                        data = b""
                    if data:
                        self.got[i] = self.got.get(i, b"") + data
                        continue
                    self.closed[i] = time.monotonic()
                    sel.unregister(key.fileobj)
        finally:
            sel.close()
        return set(self.closed)

    def close(self) -> None:
        for s in self.socks:
            s.close()


def _soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc/PID/limits")


def _held(pid: int, port: int) -> int:
    """The connections to ``port`` that the daemon holds open (accepted, not yet closed)."""
    import psutil

    return sum(
        1
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status != psutil.CONN_LISTEN
    )


@pytest.mark.parametrize("manager", list(LIMITS))
def test_1100_idle_connections_to_the_metrics_port_never_starve_the_socket_api(
    manager: str, tmp_path: Path, fds_for_a_flood: None
) -> None:
    """The daemon started as a service manager starts it, 1,100 connections to its metrics
    port that send nothing: every call on its Unix socket (status, a reservation made and
    released, each on a new connection) is answered while they stay open; the listener holds
    at most its share of descriptors (the ones past its limit are answered 503 and closed at
    once); the idle ones are closed after the idle timeout; then a scrape is served again."""
    soft, wanted = LIMITS[manager]
    hard = _hard_limit(wanted)
    port = free_port()
    settings = {"JANITOR_METRICS_LISTEN": f"127.0.0.1:{port}"}
    with daemon_setup(tmp_path, settings=settings) as setup, running_daemon(
        setup, nofile=(soft, hard)
    ) as d:  # fmt: skip
        limit = _soft_nofile(d.pid)
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 200
        flood = Flood(("127.0.0.1", port), FLOOD)
        try:
            assert len(flood.connected) == FLOOD, (len(flood.connected), flood.failed)
            for _ in range(20):
                with d.client(timeout=10) as c:
                    assert c.get("/v1/status").status_code == 200
                with d.client(timeout=10) as c:
                    r = c.post("/v1/reservations", json={"tree": "cache", "bytes": "1MiB"})
                    assert r.status_code == 201, r.text
                with d.client(timeout=10) as c:
                    assert c.delete(f"/v1/reservations/{r.json()['id']}").status_code == 200
            held = _held(d.pid, port)
            assert held <= min(MAX_CONNECTIONS, limit // 8), (held, limit)
            closed = flood.wait_closed(IDLE_TIMEOUT_S + 20)
            assert closed == flood.connected, f"{FLOOD - len(closed)} connections still open"
            busy = [i for i, got in flood.got.items() if got.startswith(b"HTTP/1.1 503 ")]
            assert len(busy) >= FLOOD - MAX_CONNECTIONS, len(busy)
            r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
            assert r.status_code == 200 and value(r.text, "janitor_up") == 1
            with d.client() as c:
                assert c.get("/v1/status").json()["reservations"] == []
        finally:
            flood.close()
        assert d.stop() == 0
    assert limit == max(soft, min(hard, RAISED)), (manager, limit)  # raised where it may be
    log = setup.log_file.read_text()
    assert "Traceback" not in log and "Traceback" not in d.stderr()
    refused = [ln for ln in log.splitlines() if "at its limit of" in ln]
    assert len(refused) == 1 and " WARNING " in refused[0], refused
    if limit > soft:
        assert f"open files: soft limit raised from {soft} to {limit}" in log


def test_a_trickled_or_oversized_request_head_is_cut_off(tmp_path: Path) -> None:
    """A request head sent a byte at a time is closed at the idle timeout, one that passes
    16 KiB is answered 400 and closed as it passes, and a scraper's keep-alive connection is
    served throughout."""
    port = free_port()
    settings = {"JANITOR_METRICS_LISTEN": f"127.0.0.1:{port}"}
    with daemon_setup(tmp_path, settings=settings) as setup, running_daemon(setup):
        trickle = socket.create_connection(("127.0.0.1", port), timeout=5)
        big = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            trickle.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            opened = time.monotonic()
            big.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            try:
                for _ in range(1024):  # 1 MiB of head, or less when the other end closes first
                    big.sendall(b"X-Big: " + b"a" * 1015 + b"\r\n")
            except OSError:
                pass
            big.settimeout(IDLE_TIMEOUT_S + 10)
            answer = b""
            try:
                while chunk := big.recv(65536):
                    answer += chunk
            except ConnectionResetError:  # closed with the rest of the head unread: a reset
                pass
            # Cut off by its size, before the idle timeout could: answered 400 (when the reset
            # did not overtake the answer) and closed.
            assert time.monotonic() - opened < IDLE_TIMEOUT_S
            assert answer == b"" or answer.startswith(b"HTTP/1.1 400 "), answer[:100]
            start = time.monotonic()
            with httpx.Client(timeout=10) as scraper:
                cut = False
                while time.monotonic() - start < IDLE_TIMEOUT_S + 20:
                    assert scraper.get(f"http://127.0.0.1:{port}/metrics").status_code == 200
                    try:
                        trickle.send(b"a")
                    except OSError:
                        cut = True
                        break
                    trickle.settimeout(0.5)
                    try:
                        if trickle.recv(1) == b"":
                            cut = True
                            break
                    except TimeoutError:
                        pass
            assert cut, "a request head trickled a byte at a time was never cut off"
        finally:
            trickle.close()
            big.close()
