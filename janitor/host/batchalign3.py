"""What batchalign3's installation says, read the way batchalign3 itself reads it.

batchalign3 keeps its state in one folder: ``$BATCHALIGN_STATE_DIR``, else ``~/.batchalign3``
(``/Users/ana/.batchalign3``). There live ``server.yaml`` (the server's port, 8000 unless set,
and ``job_ttl_days``, 7), ``jobs.db`` (its job store), ``jobs/`` (uploads staged per job, in
``jobs/<job_id>``) and its logs. A staging folder found on disk belongs to the ``jobs.db`` and
``server.yaml`` beside it (:func:`staging_state`), whatever our own environment says: the
server that made it may run with another ``HOME`` or ``BATCHALIGN_STATE_DIR``.

Its CLI hands a job to any local server that answers ``GET /health`` on ``127.0.0.1:{port}``
within 500 ms with a JSON object; :func:`local_server` asks the same way.

Nothing here writes into batchalign3's folders, and ``jobs.db`` is opened read-only.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_JOB_TTL_DAYS",
    "DEFAULT_PORT",
    "HEALTH_TIMEOUT_S",
    "Health",
    "KnownPath",
    "ServerConfig",
    "installed",
    "jobs_db",
    "known_paths",
    "local_server",
    "media_cache_dir",
    "server_config",
    "staging_state",
    "state_dir",
]

#: batchalign3's defaults (``crates/batchalign-app/src/types/config.rs``).
DEFAULT_PORT = 8000
DEFAULT_JOB_TTL_DAYS = 7
#: How long batchalign3's CLI waits for a local server's ``/health`` before running in direct mode.
HEALTH_TIMEOUT_S = 0.5


def installed(path_var: str | None = None) -> str | None:
    """Where batchalign3 is installed: its executable on ``PATH``, else its package for this
    Python (``importlib.metadata``); None when neither is there."""
    import shutil

    exe = shutil.which("batchalign3", path=path_var)
    if exe is not None:
        return exe
    from importlib import metadata

    try:
        return f"batchalign3 {metadata.version('batchalign3')} (this Python)"
    except metadata.PackageNotFoundError:
        return None


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """batchalign3's state folder: ``$BATCHALIGN_STATE_DIR`` (trimmed, if not empty), else
    ``$HOME/.batchalign3``, else the temp dir's ``.batchalign3``, as batchalign3 resolves it."""
    env = os.environ if env is None else env
    override = env.get("BATCHALIGN_STATE_DIR", "").strip()
    if override:
        return Path(override)
    home = env.get("HOME")
    return Path(home if home else tempfile.gettempdir()) / ".batchalign3"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The parts of ``server.yaml`` the janitor needs, with batchalign3's defaults; ``problem``
    says why the file could not be used (then the defaults hold, as batchalign3 would fail)."""

    path: Path
    port: int = DEFAULT_PORT
    job_ttl_days: int = DEFAULT_JOB_TTL_DAYS
    problem: str | None = None


def staging_state(staging: Path) -> Path:
    """The state folder a staging tree (``<state>/jobs``) belongs to: the folder holding it.

    batchalign3 stages a job in ``<state>/jobs/<job_id>`` and keeps ``jobs.db`` and
    ``server.yaml`` in ``<state>`` itself (its ``RuntimeLayout``: ``jobs_dir`` is
    ``state_dir.join("jobs")``), so the tree's parent is where its job store and TTL are.
    """
    return staging.parent


def server_config(
    env: Mapping[str, str] | None = None, *, state: Path | None = None
) -> ServerConfig:
    """Read ``server.yaml`` from batchalign3's state folder (``state``, else the one ``env``
    names); a missing file gives the defaults."""
    path = (state_dir(env) if state is None else state) / "server.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ServerConfig(path)
    except (OSError, UnicodeDecodeError) as exc:
        return ServerConfig(path, problem=f"cannot read {path}: {exc}")
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return ServerConfig(path, problem=f"{path} is not valid YAML: {exc}".splitlines()[0])
    if data is None:
        return ServerConfig(path)
    if not isinstance(data, dict):
        return ServerConfig(path, problem=f"{path} is not a mapping of keys")
    port = data.get("port", DEFAULT_PORT)
    ttl = data.get("job_ttl_days", DEFAULT_JOB_TTL_DAYS)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        return ServerConfig(path, problem=f"{path}: port {port!r} is not a TCP port")
    if isinstance(ttl, bool) or not isinstance(ttl, int):
        return ServerConfig(path, port or DEFAULT_PORT, problem=f"{path}: job_ttl_days {ttl!r}")
    # batchalign3's validate(): port 0 becomes 8000, a TTL under one day becomes one day.
    return ServerConfig(path, port or DEFAULT_PORT, max(1, ttl))


@dataclass(frozen=True, slots=True)
class Health:
    """A local batchalign3 server that answered ``/health``: its port and what it said."""

    port: int
    version: str
    active_jobs: int


def local_server(port: int, *, timeout: float = HEALTH_TIMEOUT_S) -> Health | None:
    """The batchalign3 server answering on ``127.0.0.1:port``, or None.

    Answers as batchalign3's CLI decides: a JSON object from ``GET /health`` whose ``status``
    is ``ok`` or absent (every field of its ``HealthResponse`` has a default), within
    ``timeout`` seconds. Anything else (refused, slow, not JSON) is no server: the CLI then
    runs the job itself.
    """
    import http.client  # here: known_paths() is asked at start-up (janitor.cli.early)

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/health", headers={"Accept": "application/json"})
        resp = conn.getresponse()
        body = resp.read(1 << 20)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("status", "ok") != "ok":
        return None
    active = data.get("active_jobs", 0)
    return Health(
        port,
        str(data.get("version", "")),
        active if isinstance(active, int) and not isinstance(active, bool) else 0,
    )


def jobs_db(env: Mapping[str, str] | None = None, *, state: Path | None = None) -> Path:
    """batchalign3's job store (``~/.batchalign3/jobs.db``) in ``state``, else in the state
    folder ``env`` names: read with :func:`janitor.ledger.foreign.unfinished_jobs`."""
    return (state_dir(env) if state is None else state) / "jobs.db"


def media_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """batchalign3's media cache: ``$BATCHALIGN_MEDIA_CACHE_DIR``, else the platform data dir +
    ``batchalign3/media_cache`` (``~/Library/Application Support/batchalign3/media_cache``)."""
    env = os.environ if env is None else env
    override = env.get("BATCHALIGN_MEDIA_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("batchalign3", appauthor=False)) / "media_cache"


@dataclass(frozen=True, slots=True)
class KnownPath:
    """A folder batchalign3 (or a library it runs) fills: a name, where, and what it holds."""

    name: str
    path: Path
    what: str


def known_paths(env: Mapping[str, str] | None = None) -> tuple[KnownPath, ...]:
    """Every folder of the pipeline's disk, both generations' (batchalign3's and batchalign
    0.10+'s; each below, with what fills it), resolved as the programs that fill it resolve
    it, whether a policy manages it or not."""
    import platformdirs

    from janitor.host import batchalign

    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    hf_home = Path(env.get("HF_HOME") or home / ".cache" / "huggingface")
    state = state_dir(env)
    return (
        KnownPath("media cache", media_cache_dir(env), "16 kHz WAV conversions"),
        KnownPath("job temp", Path(tempfile.gettempdir()), "per-job PCM folders (TMPDIR)"),
        KnownPath("batchalign3 state", state, "logs, bug reports, jobs.db, server.yaml"),
        KnownPath("job staging", state / "jobs", "uploads staged per server job"),
        KnownPath(
            "Hugging Face hub",
            Path(env.get("HF_HUB_CACHE") or hf_home / "hub"),
            "Whisper, Wave2Vec and other models",
        ),
        KnownPath(
            "Stanza",
            Path(env.get("STANZA_RESOURCES_DIR") or home / "stanza_resources"),
            "Stanza models",
        ),
        KnownPath(
            "analysis cache",
            Path(platformdirs.user_cache_dir("batchalign3", appauthor=False)),
            "cache.db (SQLite)",
        ),
        KnownPath(
            "batchalign API workdir",
            batchalign.api_workdir(env),
            "batchalign 0.10+'s API daemon: uploads/, jobs/",
        ),
        KnownPath(
            "batchalign result cache",
            batchalign.cache_path(env).parent,
            "batchalign 0.10+'s cache.lmdb (LMDB)",
        ),
    )
