"""Installing the guarded ffmpeg for a standing server: a ``ffmpeg`` of ours first on its PATH.

``janitor shim install`` puts the guard into a bin folder of ours
(``~/.local/share/space-janitor/bin`` on Linux, ``~/Library/Application Support/space-janitor/bin``
on macOS), with the socket, cache and log folders resolved once here: the compiled front end
where the machine has a C compiler (``BIN/ffmpeg``, with the Python guard beside it as
``BIN/ffmpeg.guard``), else the Python guard's script as ``BIN/ffmpeg``, run by this interpreter
with ``-I -S`` (no site import: a tenth of the guard's start-up); see
:mod:`janitor.commands.front_end`. Nothing of the user's is overwritten: a file of that name that is
not one of our guards is refused, and uninstall removes only a guard.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from janitor.commands.front_end import (
    PROGRAMS,
    FrontEnd,
    choose,
    installed,
    layout,
    matches,
    script,
    write_layout,
)
from janitor.commands.guard import GuardError, find_real, find_real_ffmpeg
from janitor.commands.guard import is_guard as _is_guard
from janitor.config.settings import APP_NAME, Settings
from janitor.errors import ConfigError

__all__ = [
    "ShimState",
    "default_bin_dir",
    "first_ffmpeg",
    "install",
    "is_guard",
    "path_snippets",
    "script",
    "state",
    "uninstall",
]


def default_bin_dir() -> Path:
    """``~/.local/share/space-janitor/bin`` on Linux; the platform's user data dir + ``bin``."""
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "bin"


def is_guard(path: str | os.PathLike[str]) -> bool:
    """True when the file at ``path`` is a guard of ours (either front end)."""
    return _is_guard(os.fspath(path))


@dataclass(frozen=True, slots=True)
class ShimState:
    """Where the guard is, whether it is current and first on PATH, and the ffmpeg it runs."""

    bin_dir: str
    installed: bool
    current: bool
    first_on_path: bool
    real_ffmpeg: str | None
    problem: str | None
    #: The front end installed (None: no guard), and the one an install would put there now.
    front_end: FrontEnd | None = None
    would_install: FrontEnd | None = None
    #: The ffprobe the guarded ffprobe runs (None: none found).
    real_ffprobe: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``janitor shim status --json``."""
        return {
            "bin_dir": self.bin_dir,
            "installed": self.installed,
            "current": self.current,
            "first_on_path": self.first_on_path,
            "real_ffmpeg": self.real_ffmpeg,
            "problem": self.problem,
            "front_end": None if self.front_end is None else self.front_end.as_dict(),
            "would_install": None if self.would_install is None else self.would_install.as_dict(),
            "real_ffprobe": self.real_ffprobe,
        }


def first_ffmpeg(path_var: str) -> str | None:
    """The ``ffmpeg`` a process with this ``PATH`` runs: the first executable file of that name."""
    for folder in path_var.split(os.pathsep):
        candidate = os.path.join(folder or ".", "ffmpeg")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _expected(settings: Settings) -> tuple[FrontEnd | None, bool | None]:
    """The front end an install would put in now (nothing built for the asking), and whether
    its files can be known without building (None when it cannot be chosen at all)."""
    try:
        front = choose(settings, build=False)
    except ConfigError as exc:
        return FrontEnd("none", str(exc)), None
    return front, front.kind == "python" or (front.build is not None and front.build.is_file())


def state(
    settings: Settings, bin_dir: Path | None = None, *, path_var: str | None = None
) -> ShimState:
    """What ``janitor shim status`` reports, for ``path_var`` (default: this process's PATH)."""
    folder = bin_dir or default_bin_dir()
    target = folder / "ffmpeg"
    front = installed(folder)
    would, knowable = _expected(settings)
    current = False
    if front is not None and would is not None and knowable:
        try:
            current = matches(folder, layout(settings, would))
        except ConfigError:
            current = False
    path_var = os.environ.get("PATH", os.defpath) if path_var is None else path_var
    first = first_ffmpeg(path_var)
    first_on_path = first is not None and os.path.realpath(first) == os.path.realpath(target)
    try:
        env = {**os.environ, "PATH": path_var}
        real: str | None = find_real_ffmpeg(env, me=str(target))
        problem = None
    except GuardError as exc:
        real, problem = None, str(exc)
    try:
        probe: str | None = find_real("ffprobe", env, me=str(folder / "ffprobe"))
    except GuardError:
        probe = None
    return ShimState(
        str(folder), front is not None, current, first_on_path, real, problem, front, would, probe
    )


def _refuse_foreign(folder: Path) -> None:
    for name in PROGRAMS:
        target = folder / name
        if (target.exists() or target.is_symlink()) and not is_guard(target):
            raise ConfigError(
                f"{target} exists and is not a space-janitor guard; choose another --dir"
            )
        side = folder / f"{name}.guard"
        if side.exists() and not is_guard(side):
            raise ConfigError(
                f"{side} exists and is not a space-janitor guard's; choose another --dir"
            )


def install(
    settings: Settings,
    bin_dir: Path | None = None,
    *,
    dry_run: bool = False,
    front_end: str | None = None,
) -> tuple[Path, FrontEnd]:
    """Put the guard in ``BIN`` (each file atomically): the front end ``front_end`` asks for
    (``compiled``, ``python``; default ``JANITOR_GUARD_FRONT_END``, else compiled where it
    builds). ConfigError if a file of that name is there and is not a guard of ours, or the
    front end asked for cannot be had. Returns ``BIN/ffmpeg`` and the front end."""
    folder = bin_dir or default_bin_dir()
    target = folder / "ffmpeg"
    _refuse_foreign(folder)
    front = choose(settings, want=front_end, build=not dry_run)
    if dry_run:
        return target, front
    lay = layout(settings, front)
    try:
        write_layout(folder, lay)
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror}; choose another --dir") from None
    return target, front


def uninstall(bin_dir: Path | None = None, *, dry_run: bool = False) -> Path | None:
    """Remove ``BIN/ffmpeg`` and ``BIN/ffprobe`` (and a compiled front end's ``NAME.guard``
    beside each) where they are guards of ours; ``BIN/ffmpeg``'s path, or None when it was not
    there."""
    folder = bin_dir or default_bin_dir()
    target = folder / "ffmpeg"
    if not (target.exists() or target.is_symlink()):
        return None
    if not is_guard(target):
        raise ConfigError(f"{target} is not a space-janitor guard; left alone")
    if not dry_run:
        for name in PROGRAMS:  # a file of the user's by that name is left alone
            each, side = folder / name, folder / f"{name}.guard"
            if is_guard(each):
                each.unlink()
            if is_guard(side):
                side.unlink()
    return target


def path_snippets(bin_dir: Path, platform: str = sys.platform) -> dict[str, str]:
    """How to put ``bin_dir`` first on PATH: for a shell, and for a server that launchd or
    systemd starts (their services do not read shell profiles)."""
    q = shlex.quote(str(bin_dir))
    out = {
        "shell": f'export PATH={q}:"$PATH"   # in ~/.zshrc or ~/.bashrc, then a new shell',
    }
    if platform == "darwin":
        out["launchd"] = (
            "In the server's LaunchAgent plist, under EnvironmentVariables:\n"
            f"    <key>PATH</key><string>{bin_dir}:/opt/homebrew/bin:/usr/local/bin:"
            "/usr/bin:/bin</string>\n"
            "then: launchctl bootout gui/$(id -u) PLIST; launchctl bootstrap gui/$(id -u) PLIST\n"
            "(or, for every app launchd starts from now on: launchctl setenv PATH "
            f"{q}:/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin)"
        )
    else:
        out["systemd"] = (
            "systemctl --user edit SERVICE, and add:\n"
            "    [Service]\n"
            f"    Environment=PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin\n"
            "then: systemctl --user restart SERVICE\n"
            "(or, for every user service started from now on: systemctl --user "
            f"set-environment PATH={q}:/usr/local/bin:/usr/bin:/bin)"
        )
    return out
