"""What the second generation of the pipeline, PyPI ``batchalign`` 0.10 and later, leaves on
disk and runs, read the way its own code resolves it (the 0.10.7 wheel, read 2026-12).

It decodes media in-process (no ffmpeg, no WAV cache); its disk is:

- its ASR backends' temp WAVs (``backends/asr/{openai_whisper,qwen,qwen3_asr,funaudio,google,
  rev,tencent}.py``: ``tempfile.NamedTemporaryFile(suffix=".wav", delete=False)``, unlinked in a
  ``finally``): ``tmp`` + 8 characters of ``[a-z0-9_]`` + ``.wav`` right in the temp dir, left
  there when the process is killed (:data:`TEMP_WAV_GLOB`);
- its API daemon's workdir (``api.py``, ``_default_workdir``): ``$BATCHALIGN_API_WORKDIR``,
  else ``~/.cache/batchalign-api`` (the home's ``.cache``, on macOS too, not
  ``XDG_CACHE_HOME``), else ``$TMPDIR/batchalign-api``: the first where ``uploads/`` can be
  made and written; else a fresh ``batchalign-api-XXXXXXXX`` temp dir. Each job gets
  ``jobs/<32 hex>/`` (URL downloads), removed when the job ends, so a killed daemon leaves it;
  ``uploads/<32 hex><suffix>`` stay until a client deletes them. Its job registry is a dict in
  the daemon's memory: nothing on disk says which job folder is live (:func:`running`);
- ``batchalign morphotag --clear-existing``'s ``batchalign-morphotag-XXXXXXXX`` temp folders
  (``cli/morphotag.py``: ``tempfile.mkdtemp``), removed in a ``finally``;
- its result cache, an LMDB environment ``cache.lmdb/`` (``data.mdb``, ``lock.mdb``) at
  ``default_cache_path()``: ``~/Library/Caches/batchalign`` on macOS, ``$XDG_CACHE_HOME``
  (else ``~/.cache``) ``/batchalign`` on Linux (``cli/cache.py``; ``batchalign cache clear``
  removes the folder whole) (:func:`cache_path`).

Nothing here writes into its folders or imports it (its import loads a Rust core).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "API_TEMP_GLOB",
    "MORPHOTAG_GLOB",
    "TEMP_WAV_GLOB",
    "TEMP_WAV_RE",
    "Installed",
    "Running",
    "api_workdir",
    "api_workdirs",
    "cache_path",
    "installed",
    "is_batchalign_command",
    "next_generation",
    "running",
]

#: Python's ``tempfile`` names: ``tmp`` + 8 of ``[a-z0-9_]`` (``_RandomNameSequence``) +
#: the suffix. As a glob (fnmatch has no counts) and as a regex, the same names.
TEMP_WAV_GLOB = "tmp" + "[a-z0-9_]" * 8 + ".wav"
TEMP_WAV_RE = re.compile(r"tmp[a-z0-9_]{8}\.wav")
#: ``tempfile.mkdtemp(prefix="batchalign-morphotag-")`` and ``(prefix="batchalign-api-")``.
MORPHOTAG_GLOB = "batchalign-morphotag-*"
API_TEMP_GLOB = "batchalign-api-*"


def api_workdirs(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The API daemon's workdir candidates, in its order: ``$BATCHALIGN_API_WORKDIR``,
    ``~/.cache/batchalign-api``, ``$TMPDIR/batchalign-api`` (its last resort, a fresh
    ``batchalign-api-*`` temp dir, has no fixed name)."""
    env = os.environ if env is None else env
    out = []
    given = env.get("BATCHALIGN_API_WORKDIR")
    if given:
        out.append(Path(os.path.abspath(given)))
    home = env.get("HOME") or str(Path.home())
    out.append(Path(home) / ".cache" / "batchalign-api")
    out.append(Path(_tempdir(env)) / "batchalign-api")
    return tuple(out)


def api_workdir(env: Mapping[str, str] | None = None) -> Path:
    """The workdir a daemon started with ``env`` would take: the first candidate whose
    ``uploads/`` is a folder we may write, or could be made (asked without writing)."""
    candidates = api_workdirs(env)
    for c in candidates:
        if _writable(c / "uploads"):
            return c
    return candidates[-1]


def _writable(folder: Path) -> bool:
    """Whether ``folder`` is, or could be made as, a folder this user writes in."""
    probe = folder
    while not os.path.lexists(probe):
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)


def _tempdir(env: Mapping[str, str]) -> str:
    """``tempfile.gettempdir()`` as a process with ``env`` would find it (TMPDIR, TEMP, TMP)."""
    if env is os.environ:
        return tempfile.gettempdir()
    for name in ("TMPDIR", "TEMP", "TMP"):
        if env.get(name):
            return os.path.abspath(env[name])
    return tempfile.gettempdir()


def cache_path(env: Mapping[str, str] | None = None, platform: str = sys.platform) -> Path:
    """Its ``default_cache_path()``: the LMDB folder ``cache.lmdb`` under
    ``~/Library/Caches/batchalign`` (macOS), else ``$XDG_CACHE_HOME`` or ``~/.cache``, then
    ``batchalign`` (the mirror its ``cli/cache.py`` keeps of the Rust function)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or str(Path.home()))
    if platform == "darwin":
        base = home / "Library" / "Caches"
    else:
        base = Path(env.get("XDG_CACHE_HOME") or home / ".cache")
    return base / "batchalign" / "cache.lmdb"


@dataclass(frozen=True, slots=True)
class Installed:
    """A ``batchalign`` distribution found: its version ("" when unknown) and where."""

    version: str
    where: str

    @property
    def next_generation(self) -> bool | None:
        """0.10 or later (None: the version is unknown)."""
        return next_generation(self.version)


def next_generation(version: str) -> bool | None:
    """Whether a batchalign version is 0.10 or later (batchalign 0.7 and the like are the
    older, ffmpeg-free-of-us Python package); None when it cannot be read."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        return None
    return (int(m.group(1)), int(m.group(2))) >= (0, 10)


def installed(path_var: str | None = None) -> Installed | None:
    """``batchalign``: its executable on ``PATH`` (what a user runs) with the version in the
    ``site-packages`` of the Python its first line names, else as installed for this Python
    (``importlib.metadata``); None when neither is there."""
    from importlib import metadata

    exe = shutil.which("batchalign", path=path_var)
    if exe is not None:
        return Installed(_script_version(Path(exe)), exe)
    try:
        return Installed(metadata.version("batchalign"), "this Python")
    except metadata.PackageNotFoundError:
        return None


def _script_version(script: Path) -> str:
    """The batchalign version beside a console script's interpreter (its venv), or ""."""
    try:
        with open(script, "rb") as fh:
            first = fh.readline(4096)
    except OSError:
        return ""
    if not first.startswith(b"#!"):
        return ""
    interpreter = Path(os.fsdecode(first[2:].strip().split(b" ")[0]))
    prefix = interpreter.parent.parent
    for meta in sorted(prefix.glob("lib/python3*/site-packages/batchalign-*.dist-info/METADATA")):
        try:
            for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip()
        except OSError:
            continue
    return ""


def is_batchalign_command(argv: Sequence[str]) -> str | None:
    """What a command line runs of batchalign (0.10 and later): ``"daemon"`` for its API
    daemon (``batchalign daemon``, ``python -m batchalign daemon``, ``uvicorn
    batchalign.api:app``, the desktop app's ``sidecar``), ``"cli"`` for any other of its
    commands; None for anything else (batchalign3's ``batchalign3`` among them)."""
    args = list(argv)
    if "batchalign.api:app" in args:
        return "daemon"
    if args and os.path.basename(args[0]) == "sidecar" and "batchalign" in args[0].lower():
        return "daemon"  # the desktop app's PyApp build of the daemon (``run_pyapp_entry``)
    if args and os.path.basename(args[0]) == "batchalign":
        rest = args[1:]  # its console script run as a program
    elif len(args) >= 2 and os.path.basename(args[1]) == "batchalign":
        rest = args[2:]  # the script as its interpreter's argument (what the kernel shows)
    elif len(args) >= 3 and args[1:3] == ["-m", "batchalign"]:
        rest = args[3:]
    else:
        return None
    sub = next((a for a in rest if not a.startswith("-")), "")
    return "daemon" if sub == "daemon" else "cli"


@dataclass(frozen=True, slots=True)
class Running:
    """A running batchalign process: its pid, start (epoch seconds), ``role`` (``daemon`` or
    ``cli``), command line, and for a daemon the workdir its environment leads to (None when
    that environment cannot be read)."""

    pid: int
    start: float
    role: str
    command: str
    workdir: Path | None = None


def running() -> tuple[Running, ...]:
    """Every batchalign (0.10 and later) process this user can see, oldest first."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
        try:
            info = proc.info
            argv = info.get("cmdline") or []
            role = is_batchalign_command(argv)
            if role is None or info.get("create_time") is None:
                continue
            workdir = None
            if role == "daemon":
                try:
                    workdir = api_workdir(proc.environ())
                except (psutil.Error, OSError):
                    workdir = None
            found.append(
                Running(info["pid"], float(info["create_time"]), role, " ".join(argv), workdir)
            )
        except psutil.Error:
            continue
    return tuple(sorted(found, key=lambda r: r.start))
