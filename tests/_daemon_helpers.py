"""Helpers for the daemon tests: the REAL `janitor daemon` as a subprocess on a real tmpfs.

Nothing is mocked. :func:`daemon_setup` mounts a fresh tmpfs (root only; the test is skipped
with the reason otherwise), makes a cache tree on it and writes a policy naming it; the state,
runtime and log dirs live in ``tmp_path`` (never on the tmpfs, so the ledger's writes never move
the tested volume's free space). :func:`running_daemon` starts ``janitor daemon`` with that
isolated environment and fast intervals, waits until its Unix socket answers ``GET /v1/status``,
and on exit sends SIGTERM (SIGKILL after a grace period), so no process is ever left behind.

    with daemon_setup(tmp_path) as setup, running_daemon(setup) as d:
        with d.client() as c:
            assert c.get("/v1/status").status_code == 200
        with d.events() as ev:
            ...
            ev.wait_for("level", lambda data: data["level"] == "critical")
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._fixtures import forkserver
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.mounts import mount_tmpfs, unmount

#: Daemon settings for the tests: fast sampling, short settle and debounce; periodic sweeps and
#: reaps are left at values long enough that they never explain what a test sees by accident.
FAST: dict[str, str] = {
    "JANITOR_SAMPLE_INTERVAL_S": "0.25",
    "JANITOR_SETTLE_S": "0.5",
    "JANITOR_DEBOUNCE_S": "0.2",
    "JANITOR_DEBOUNCE_MAX_S": "1.0",
    "JANITOR_SWEEP_INTERVAL_S": "300",
    "JANITOR_REAP_INTERVAL_S": "1",
}

#: Longest a socket path may be (sun_path is 108 bytes on Linux, 104 on macOS).
_SUN_PATH_MAX = 100


# -- waiting --------------------------------------------------------------------------------------


def eventually(
    predicate: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(
                f"timed out after {timeout:g}s waiting for {what or predicate!r}; last {last!r}"
            )
        time.sleep(interval)


# -- the setup: tmpfs, tree, policy, folders, environment -----------------------------------------


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(os.fspath(value))  # a JSON string is a valid TOML basic string


def policy_toml(volume: Mapping[str, Any], trees: Mapping[str, Mapping[str, Any]]) -> str:
    """TOML text of a policy with one ``[volume]`` table and ``[trees.NAME]`` tables."""
    lines = ["[volume]"] + [f"{k} = {_toml(v)}" for k, v in volume.items()]
    for name, body in trees.items():
        lines += ["", f"[trees.{name}]"] + [f"{k} = {_toml(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


@dataclass
class DaemonSetup:
    """Everything one daemon needs: a tmpfs with a cache tree, a policy, its folders, its env."""

    root: Path
    mount: Path
    tree: Path
    tree_name: str
    policy: Path
    state_dir: Path
    runtime_dir: Path
    log_dir: Path
    volume: dict[str, Any]
    trees: dict[str, dict[str, Any]]
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.runtime_dir / "janitor.sock"

    @property
    def status_path(self) -> Path:
        return self.runtime_dir / "status.json"

    @property
    def lock_path(self) -> Path:
        return self.runtime_dir / "daemon.lock"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "daemon.log"

    @property
    def ledger(self) -> Path:
        return self.state_dir / "ledger.sqlite3"

    @property
    def ballast(self) -> Path:
        """Where the daemon keeps this volume's ballast (beside the tree root: the state dir is
        on another filesystem)."""
        return self.tree.parent / ".space-janitor-ballast"

    def env(self, **extra: str | None) -> dict[str, str]:
        """The daemon's (and the CLI's) environment: the test's isolated one plus ours."""
        # The front end a test asks for (the ``front_end`` fixture) reaches ``shim install``.
        kept = ("JANITOR_GUARD_FRONT_END", "JANITOR_NATIVE_DIR")
        env = {k: v for k, v in os.environ.items() if not k.startswith("JANITOR_") or k in kept}
        # Isolated even when built outside the conftest's per-test environment (module-scoped
        # fixtures): no real config file, home or runtime dir can leak in.
        home = self.root / "home"
        env.update(
            HOME=str(home),
            TMPDIR=str(home / "tmp"),
            XDG_CONFIG_HOME=str(home / ".config"),
            XDG_DATA_HOME=str(home / ".local" / "share"),
            XDG_STATE_HOME=str(home / ".local" / "state"),
            XDG_CACHE_HOME=str(home / ".cache"),
            XDG_RUNTIME_DIR=str(self.runtime_dir),
        )
        env.update(
            JANITOR_POLICY=str(self.policy),
            JANITOR_STATE_DIR=str(self.state_dir),
            JANITOR_RUNTIME_DIR=str(self.runtime_dir),
            JANITOR_LOG_DIR=str(self.log_dir),
        )
        env.update(self.settings)
        for key, value in extra.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def apply_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Give this process the daemon's ``JANITOR_*`` variables (``Janitor.from_settings``)."""
        for key, value in self.env().items():
            if key.startswith("JANITOR_"):
                monkeypatch.setenv(key, value)

    def write_policy(
        self,
        volume: Mapping[str, Any] | None = None,
        trees: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        text: str | None = None,
    ) -> None:
        """Rewrite the policy file (atomically, with a new mtime) from tables or raw text."""
        if text is None:
            text = policy_toml(volume or self.volume, trees or self.trees)
        tmp = self.policy.with_name(self.policy.name + ".new")
        tmp.write_text(text)
        old = self.policy.stat().st_mtime if self.policy.exists() else 0.0
        os.replace(tmp, self.policy)
        if self.policy.stat().st_mtime == old:  # coarse timestamps: make the change visible
            os.utime(self.policy, (old + 1, old + 1))

    def run_cli(
        self, *args: str, timeout: float = 60, **extra: str | None
    ) -> subprocess.CompletedProcess[str]:
        """The real ``janitor`` console script with this setup's environment (started by the
        worker's forkserver: tests._fixtures.forkserver)."""
        return forkserver.run(
            [str(JANITOR_BIN), *args],
            capture_output=True,
            text=True,
            env=self.env(**extra),
            timeout=timeout,
            check=False,
        )


def _short_dir(tmp_path: Path, name: str) -> Path:
    """``tmp_path/name``, unless a socket path there would be too long for ``sun_path``."""
    where = tmp_path / name
    if len(str(where / "janitor.sock")) <= _SUN_PATH_MAX:
        return where
    import tempfile

    return Path(tempfile.mkdtemp(prefix="jd-", dir="/tmp"))


@contextmanager
def daemon_setup(
    tmp_path: Path,
    *,
    size: str = "32m",
    volume: Mapping[str, Any] | None = None,
    tree: Mapping[str, Any] | None = None,
    settings: Mapping[str, str | None] | None = None,
) -> Iterator[DaemonSetup]:
    """Mount a tmpfs at ``tmp_path/mnt`` with a cache tree ``cache`` on it; write the policy.

    ``volume``: the ``[volume]`` table (default floor 4MiB). ``tree``: keys of the cache tree
    (default quota 4MiB, min_age 0s so fresh files may go). ``settings``: JANITOR_* variables
    over :data:`FAST` (a ``None`` value removes one, leaving the product's default).
    """
    mount = mount_tmpfs(tmp_path / "mnt", size)
    try:
        cache = mount / "cache"
        cache.mkdir()
        vol = dict(volume) if volume is not None else {"floor": "4MiB"}
        body = {"role": "cache", "path": str(cache), "quota": "4MiB", "min_age": "0s"}
        body.update(tree or {})
        merged = dict(FAST)
        for key, value in (settings or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        setup = DaemonSetup(
            root=tmp_path,
            mount=mount,
            tree=cache,
            tree_name="cache",
            policy=tmp_path / "policy.toml",
            state_dir=tmp_path / "state",
            runtime_dir=_short_dir(tmp_path, "run"),
            log_dir=tmp_path / "log",
            volume=vol,
            trees={"cache": body},
            settings=merged,
        )
        (tmp_path / "home" / "tmp").mkdir(parents=True, exist_ok=True)
        setup.write_policy()
        yield setup
    finally:
        unmount(mount)
        if "setup" in locals() and not setup.runtime_dir.is_relative_to(tmp_path):
            import shutil

            shutil.rmtree(setup.runtime_dir, ignore_errors=True)


# -- the daemon process ---------------------------------------------------------------------------


def uds_client(sock: Path, timeout: float = 10.0) -> httpx.Client:
    """An httpx client that talks HTTP over the daemon's Unix socket.

    Plain HTTP over a local socket: no TLS, so ``verify=False`` (which only says no certificate
    bundle is loaded). httpx otherwise builds an SSL context with the whole bundle for every
    transport, 20 ms of CPU each: the suite makes one for each poll of a starting daemon and
    each request of the schemathesis run (364 in that test alone: 7 of its 14 CPU-seconds)."""
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(sock), verify=False),
        base_url="http://janitor",
        timeout=timeout,
    )


def socket_answers(sock: Path) -> bool:
    """True when ``GET /v1/status`` over ``sock`` returns 200."""
    if not sock.exists():
        return False
    try:
        with uds_client(sock, timeout=5) as c:
            return c.get("/v1/status").status_code == 200
    except (httpx.HTTPError, OSError):
        return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Daemon:
    """A running ``janitor daemon`` subprocess; its stderr goes to ``stderr_path``."""

    setup: DaemonSetup
    proc: subprocess.Popen[bytes]
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, timeout: float = 10.0) -> httpx.Client:
        return uds_client(self.setup.socket, timeout)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def status_json(self) -> dict[str, Any] | None:
        """The runtime dir's status.json, or None while it does not exist yet."""
        try:
            return json.loads(self.setup.status_path.read_text())
        except FileNotFoundError:
            return None

    def volume_status(self) -> dict[str, Any] | None:
        """The tmpfs's entry in status.json (None until the first sample)."""
        data = self.status_json()
        for v in (data or {}).get("volumes", []):
            if v["mount"] == str(self.setup.mount):
                return v
        return None

    def metrics(self) -> str:
        with self.client() as c:
            r = c.get("/metrics")
            r.raise_for_status()
            return r.text

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM and wait up to ``timeout``; SIGKILL (and fail) if it did not stop."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"daemon {self.pid} did not stop within {timeout:g}s of SIGTERM")
        return int(self.proc.returncode)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    @contextmanager
    def events(self) -> Iterator[EventStream]:
        """Subscribe to ``GET /v1/events`` in a thread; yields once the stream is connected."""
        stream = EventStream(self.setup.socket)
        stream.start()
        try:
            yield stream
        finally:
            stream.close()


def start_daemon(
    setup: DaemonSetup,
    *,
    wait: bool = True,
    timeout: float = 20.0,
    extra_env: Mapping[str, str | None] | None = None,
    args: tuple[str, ...] = (),
    nofile: tuple[int, int] | None = None,
) -> Daemon:
    """Start ``janitor daemon`` (not waiting for it when ``wait`` is False); ``nofile``: its
    open-file limit as it starts (soft, hard), as a service manager sets it."""
    n = len(list(setup.root.glob("daemon-*.stderr")))
    stderr_path = setup.root / f"daemon-{n}.stderr"
    with open(stderr_path, "wb") as err:
        proc = forkserver.JanitorPopen(  # exec'd when nofile asks for a preexec_fn
            [str(JANITOR_BIN), "daemon", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=setup.env(**(extra_env or {})),
            preexec_fn=None if nofile is None else partial(_set_nofile, nofile),
        )
    d = Daemon(setup, proc, stderr_path)
    if not wait:
        return d
    deadline = time.monotonic() + timeout
    while not socket_answers(setup.socket):
        if proc.poll() is not None:
            pytest.fail(f"janitor daemon exited with {proc.returncode}:\n{d.stderr()}")
        if time.monotonic() > deadline:
            d.kill()
            pytest.fail(
                f"janitor daemon did not answer on {setup.socket} in {timeout:g}s:\n{d.stderr()}"
            )
        time.sleep(0.05)
    return d


def _set_nofile(limits: tuple[int, int]) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


@contextmanager
def running_daemon(setup: DaemonSetup, **kwargs: Any) -> Iterator[Daemon]:
    """A started daemon, stopped (SIGTERM, then SIGKILL) when the block ends."""
    d = start_daemon(setup, **kwargs)
    try:
        yield d
    finally:
        if d.proc.poll() is None:
            d.proc.send_signal(signal.SIGTERM)
            try:
                d.proc.wait(8)
            except subprocess.TimeoutExpired:
                d.kill()


# -- Server-Sent Events ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    kind: str
    data: dict[str, Any]
    id: str | None = None
    received: float = 0.0


class EventStream:
    """``GET /v1/events`` read in a background thread; events are collected in ``events``."""

    def __init__(self, sock: Path) -> None:
        self.sock = sock
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self.ended = threading.Event()
        self._connected = threading.Event()
        self._cond = threading.Condition()
        self._client = uds_client(sock, timeout=None)  # type: ignore[arg-type]
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="sse", daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        if not self._connected.wait(timeout) or self.ended.is_set():
            raise AssertionError(
                f"no ': connected' from /v1/events in {timeout:g}s: {self.error!r}"
            )

    def _run(self) -> None:
        try:
            with self._client.stream("GET", "/v1/events") as r:
                assert r.status_code == 200, r.status_code
                assert r.headers["content-type"].startswith("text/event-stream")
                stream = r.extensions.get("network_stream")
                if stream is not None:
                    self._sock = stream.get_extra_info("socket")
                kind, data, eid = "message", "", None
                for line in r.iter_lines():
                    if line.startswith(":"):
                        if "connected" in line:
                            self._connected.set()
                        continue
                    if line == "":
                        if data:
                            ev = Event(kind, json.loads(data), eid, time.time())
                            with self._cond:
                                self.events.append(ev)
                                self._cond.notify_all()
                        kind, data, eid = "message", "", None
                        continue
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if name == "event":
                        kind = value
                    elif name == "data":
                        data = value if not data else data + "\n" + value
                    elif name == "id":
                        eid = value
        except BaseException as exc:  # the stream ends when the daemon stops
            self.error = exc
        finally:
            self.ended.set()
            self._connected.set()
            with self._cond:
                self._cond.notify_all()

    def kinds(self) -> list[str]:
        with self._cond:
            return [e.kind for e in self.events]

    def find(self, kind: str, pred: Callable[[dict[str, Any]], bool] | None = None) -> list[Event]:
        with self._cond:
            return [e for e in self.events if e.kind == kind and (pred is None or pred(e.data))]

    def wait_for(
        self,
        kind: str,
        pred: Callable[[dict[str, Any]], bool] | None = None,
        *,
        timeout: float = 10.0,
    ) -> Event:
        """The first event of ``kind`` (matching ``pred``), waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for e in self.events:
                    if e.kind == kind and (pred is None or pred(e.data)):
                        return e
                left = deadline - time.monotonic()
                if left <= 0 or self.ended.is_set():
                    got = [(e.kind, e.data) for e in self.events]
                    raise AssertionError(
                        f"no {kind!r} event within {timeout:g}s (stream ended: "
                        f"{self.ended.is_set()}, error {self.error!r}); got {got}"
                    )
                self._cond.wait(min(left, 0.2))

    def close(self) -> None:
        """Hang up (shutting the socket down wakes the blocked reader) and join the thread."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(5)
        self._client.close()
