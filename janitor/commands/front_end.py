"""Which front end the guarded ffmpeg gets, and the files that make it up in a bin folder.

Two front ends stand for ``ffmpeg`` on a PATH (``janitor shim install``, ``janitor run``):

* **compiled** (where the machine has a C compiler): ``janitor/native/guard.c``, built once into
  our data folder (``~/.local/share/space-janitor/native/guard-HASH``, the hash covering the
  source, the flags and the compiler's version: an upgrade of either builds anew) and copied in
  as ``BIN/ffmpeg``, a few milliseconds a call. Beside it ``BIN/ffmpeg.guard``: the Python
  guard's script, whose ``#%`` lines are the program's settings (socket, log folder, policy,
  wait, probe cache, the interpreter) and which the program runs with that interpreter when the
  daemon does not take a call. The same program is ``BIN/ffprobe`` too (it knows itself by its
  name), beside ``BIN/ffprobe.guard``, the guarded ffprobe's Python front end.
* **python**: ``BIN/ffmpeg`` and ``BIN/ffprobe`` are the Python guards' scripts themselves
  (``#!python -IS``): what a machine without a compiler (or whose compiler cannot build it)
  gets, or one that asks for it (``JANITOR_GUARD_FRONT_END=python``).

Each file says which front end it is and why, in a comment line that ``janitor shim status``
and ``janitor doctor`` read back.
"""

from __future__ import annotations

import hashlib
import os
import site
import sys
from dataclasses import dataclass
from pathlib import Path

from janitor.commands.guard import GUARD_MARK
from janitor.config.paths import default_cache_dir, native_build_dir
from janitor.config.settings import Settings
from janitor.errors import ConfigError

__all__ = [
    "FRONT_END_ENV",
    "NATIVE_DIR_ENV",
    "PROGRAMS",
    "SIDECAR",
    "FrontEnd",
    "Layout",
    "choose",
    "installed",
    "layout",
    "matches",
    "native_dir",
    "script",
    "write_layout",
]

#: ``compiled``, ``python`` or ``auto`` (the default: compiled where it builds).
FRONT_END_ENV = "JANITOR_GUARD_FRONT_END"
#: Where the compiled front end is built (default: ``native`` in the user data dir).
NATIVE_DIR_ENV = "JANITOR_NATIVE_DIR"
#: The Python guard beside the compiled one, named after it: ``ffmpeg.guard``.
SIDECAR = "ffmpeg.guard"
#: What each guarded program is, and the module of its Python front end.
PROGRAMS = {
    "ffmpeg": ("ffmpeg, with every big write reserved first", "janitor.commands.guard"),
    "ffprobe": (
        "ffprobe, marking the cache entries it probes in use",
        "janitor.commands.probe_guard",
    ),
}
#: The line of each file saying which front end it is, and why.
_FRONT_LINE = "# Front end: "


@dataclass(frozen=True, slots=True)
class FrontEnd:
    """A front end: ``compiled`` or ``python``, why (one line), and the compiled program."""

    kind: str
    why: str
    build: Path | None = None

    def as_dict(self) -> dict[str, str | None]:
        """Its JSON shape, in ``janitor shim status --json``."""
        return {"kind": self.kind, "why": self.why, "build": str(self.build or "") or None}


@dataclass(frozen=True, slots=True)
class Layout:
    """The files of a guard in a bin folder, in the order they are written: (name, bytes,
    mode); the sidecar before the program, so the program never runs without its settings."""

    front: FrontEnd
    files: tuple[tuple[str, bytes, int], ...]

    def digest(self) -> str:
        """16 hex digits over every file: ``janitor run``'s guard folder is named by it."""
        h = hashlib.sha256()
        for name, data, mode in self.files:
            h.update(f"{name}\0{mode:o}\0{len(data)}\0".encode())
            h.update(data)
        return h.hexdigest()[:16]


def native_dir() -> Path:
    """Where the compiled front end is built: ``JANITOR_NATIVE_DIR``, else ``native`` in the
    user data dir (``~/.local/share/space-janitor/native``); the size walker's folder too."""
    return native_build_dir()


def _import_paths() -> list[str]:
    """Where the guard's interpreter finds janitor and what it imports, without ``site``."""
    import janitor

    paths = [str(Path(janitor.__file__).resolve().parent.parent)]
    for folder in [*site.getsitepackages(), site.getusersitepackages()]:
        if folder not in paths and os.path.isdir(folder):
            paths.append(folder)
    return paths


def _settings_of(settings: Settings) -> dict[str, object]:
    return {
        "socket_path": str(settings.socket_path),
        "cache_dir": str(default_cache_dir()),
        "log_dir": str(settings.log_dir),
        "policy": str(settings.policy_path),
        "wait_s": settings.guard_wait_s,
    }


def _body(settings: Settings, program: str = "ffmpeg") -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in _settings_of(settings).items())
    return (
        "import sys\n"
        f"sys.path[:0] = {_import_paths()!r}\n"
        f"from {PROGRAMS[program][1]} import main\n"
        f"sys.exit(main({args}))\n"
    )


def script(
    settings: Settings,
    *,
    python: str | None = None,
    why: str | None = None,
    program: str = "ffmpeg",
) -> str:
    """The Python front end's script of ``program`` (``ffmpeg`` or ``ffprobe``), for this
    interpreter and these settings."""
    interpreter = python or sys.executable
    return (
        f"#!{interpreter} -IS\n"
        f"{GUARD_MARK.decode()}: {PROGRAMS[program][0]}.\n"
        "# Written by `janitor shim install`; `janitor shim uninstall` removes it.\n"
        + (f"{_FRONT_LINE}python ({why}).\n" if why else "")
        + _body(settings, program)
    )


def _sidecar(settings: Settings, front: FrontEnd, python: str, program: str = "ffmpeg") -> str:
    """The compiled front end's ``NAME.guard``: its settings and the Python guard."""
    values = _settings_of(settings)
    lines = {
        "python": python,
        "socket": values["socket_path"],
        "cache_dir": values["cache_dir"],
        "log_dir": values["log_dir"],
        "policy": values["policy"],
        "wait_s": values["wait_s"],
        "build": front.build,
    }
    return (
        f"#!{python} -IS\n"
        f"{GUARD_MARK.decode()}: {PROGRAMS[program][0]}.\n"
        "# Written by `janitor shim install`; `janitor shim uninstall` removes it.\n"
        f"{_FRONT_LINE}compiled ({front.why}).\n"
        f"# The program `{program}` beside this file reads the lines that start with #% and\n"
        "# runs this file with Python when the daemon does not take a call.\n"
        + "".join(f"#% {k} {v}\n" for k, v in lines.items())
        + _body(settings, program)
    )


def _want(want: str | None) -> tuple[str, str]:
    """The front end asked for and who asked: ``--front-end``, else the variable, else auto."""
    if want:
        return want, f"--front-end {want}"
    chosen = os.environ.get(FRONT_END_ENV, "").strip()
    if chosen and chosen not in ("auto", "compiled", "python"):
        raise ConfigError(f"{FRONT_END_ENV}={chosen}: use compiled, python or auto")
    return chosen or "auto", f"{FRONT_END_ENV}={chosen}"


def _failed_marker(build: Path) -> Path:
    return build.with_name(build.name + ".failed")


def choose(settings: Settings, *, want: str | None = None, build: bool = True) -> FrontEnd:
    """The front end to install: compiled where it builds (building it now unless not
    ``build``), else python, with why. ConfigError when compiled is asked for and cannot be."""
    from janitor.host import cbuild

    kind, who = _want(want)
    if kind == "python":  # not who asked: the files stay the same whichever way it was asked
        return FrontEnd("python", "asked for")

    def without(reason: str) -> FrontEnd:
        if kind == "compiled":
            raise ConfigError(f"{who}, but {reason}")
        return FrontEnd("python", reason)

    values = [str(v) for v in _settings_of(settings).values()] + [sys.executable]
    if any("\n" in v or "\r" in v for v in values):
        return without("a path in the settings holds a line break")
    cc = cbuild.compiler()
    if cc is None:
        return without(cbuild.why_not() or "no C compiler")
    source = cbuild.NATIVE_DIR / "guard.c"
    target = cbuild.built_path(source, native_dir(), "guard", cc=cc)
    if target is None:
        return without(f"{source} cannot be read; reinstall space-janitor")
    why = f"built with {cc.version}"
    try:
        failed = _failed_marker(target).read_text().strip()
    except OSError:
        failed = ""
    if failed:
        return without(f"it does not build here: {failed}")
    if not build:
        return FrontEnd("compiled", why, target)
    try:
        built = cbuild.build(source, native_dir(), "guard", cc=cc)
    except cbuild.BuildFailed as exc:
        try:  # said once: every later install or run takes the Python guard at once
            native_dir().mkdir(parents=True, exist_ok=True)
            _failed_marker(target).write_text(exc.reason + "\n")
        except OSError:
            pass
        return without(f"it does not build here: {exc.reason}")
    return FrontEnd("compiled", why, built)


def layout(settings: Settings, front: FrontEnd, *, python: str | None = None) -> Layout:
    """The files ``front`` is made of, for these settings; ConfigError when its build is gone."""
    interpreter = python or sys.executable
    if front.kind == "python":
        return Layout(
            front,
            tuple(
                (name, script(settings, python=interpreter, why=front.why, program=name).encode(),
                 0o755)
                for name in PROGRAMS
            ),
        )  # fmt: skip
    assert front.build is not None
    try:
        program = front.build.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the compiled guard {front.build}: {exc.strerror}; run the command again"
        ) from None
    files: list[tuple[str, bytes, int]] = []
    for name in PROGRAMS:  # each program's sidecar before it, so it never runs without it
        sidecar = _sidecar(settings, front, interpreter, name).encode()
        files += [(f"{name}.guard", sidecar, 0o644), (name, program, 0o755)]
    return Layout(front, tuple(files))


def write_layout(folder: Path, lay: Layout) -> Path:
    """Write ``lay`` into ``folder`` (each file atomically) and return ``folder/ffmpeg``; a
    Python front end takes away a compiled one's sidecar. OSError when it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data, mode in lay.files:
        target = folder / name
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        try:
            tmp.write_bytes(data)
            tmp.chmod(mode)
            os.replace(tmp, target)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise
    if lay.front.kind == "python":
        for name in PROGRAMS:
            stale = folder / f"{name}.guard"
            if _marked(stale):
                stale.unlink()
    return folder / "ffmpeg"


def matches(folder: Path, lay: Layout) -> bool:
    """Whether ``folder`` holds exactly ``lay``'s files (a Python front end: no sidecar)."""
    for name, data, _mode in lay.files:
        try:
            if (folder / name).read_bytes() != data:
                return False
        except OSError:
            return False
    return lay.front.kind != "python" or not any(_marked(folder / f"{n}.guard") for n in PROGRAMS)


def _marked(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return GUARD_MARK in f.read(512)
    except OSError:
        return False


def installed(folder: Path) -> FrontEnd | None:
    """The front end of the guard in ``folder`` (what its files say), or None."""
    target = folder / "ffmpeg"
    if _marked(target):
        text, kind = _read(target), "python"
    elif _marked(folder / SIDECAR) and target.is_file():
        text, kind = _read(folder / SIDECAR), "compiled"
    else:
        return None
    why = "written by an older space-janitor"
    build = None
    for line in text.splitlines():
        if line.startswith(_FRONT_LINE + kind + " (") and line.endswith(")."):
            why = line[len(_FRONT_LINE + kind) + 2 : -2]
        elif line.startswith("#% build "):
            build = Path(line[len("#% build ") :])
    return FrontEnd(kind, why, build)


def _read(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16).decode(errors="replace")
    except OSError:
        return ""
