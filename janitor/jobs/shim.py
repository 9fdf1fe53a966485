"""Installing the guarded ffmpeg for a standing server: a ``ffmpeg`` of ours first on its PATH.

``janitor shim install`` writes a small Python script named ``ffmpeg`` into a bin folder of ours
(``~/.local/share/space-janitor/bin`` on Linux, ``~/Library/Application Support/space-janitor/bin``
on macOS). It runs this interpreter with ``-I -S`` (no site import: a tenth of the guard's
start-up) and hands its arguments to :func:`janitor.jobs.guard.main`, with the socket, cache and log
folders resolved once here. Nothing of the user's is overwritten: a file of that name that is
not one of our guards is refused, and uninstall removes only a guard.
"""

from __future__ import annotations

import os
import shlex
import site
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from janitor.config.paths import default_cache_dir
from janitor.config.settings import APP_NAME, Settings
from janitor.errors import ConfigError
from janitor.jobs.guard import GUARD_MARK, GuardError, find_real_ffmpeg

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


def _import_paths() -> list[str]:
    """Where the guard's interpreter finds janitor and what it imports, without ``site``."""
    import janitor

    paths = [str(Path(janitor.__file__).resolve().parent.parent)]
    for folder in [*site.getsitepackages(), site.getusersitepackages()]:
        if folder not in paths and os.path.isdir(folder):
            paths.append(folder)
    return paths


def script(settings: Settings, *, python: str | None = None) -> str:
    """The guard script's text, for this interpreter and these settings."""
    interpreter = python or sys.executable
    kwargs: dict[str, object] = {
        "socket_path": str(settings.socket_path),
        "cache_dir": str(default_cache_dir()),
        "log_dir": str(settings.log_dir),
        "policy": str(settings.policy_path),
        "wait_s": settings.guard_wait_s,
    }
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return (
        f"#!{interpreter} -IS\n"
        f"{GUARD_MARK.decode()}: ffmpeg, with every big write reserved first.\n"
        "# Written by `janitor shim install`; `janitor shim uninstall` removes it.\n"
        "import sys\n"
        f"sys.path[:0] = {_import_paths()!r}\n"
        "from janitor.jobs.guard import main\n"
        f"sys.exit(main({args}))\n"
    )


def is_guard(path: str | os.PathLike[str]) -> bool:
    """True when the file at ``path`` is a guard of ours (its mark in its first 512 bytes)."""
    try:
        with open(path, "rb") as f:
            return GUARD_MARK in f.read(512)
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class ShimState:
    """Where the guard is, whether it is current and first on PATH, and the ffmpeg it runs."""

    bin_dir: str
    installed: bool
    current: bool
    first_on_path: bool
    real_ffmpeg: str | None
    problem: str | None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``janitor shim status --json``."""
        return {
            "bin_dir": self.bin_dir,
            "installed": self.installed,
            "current": self.current,
            "first_on_path": self.first_on_path,
            "real_ffmpeg": self.real_ffmpeg,
            "problem": self.problem,
        }


def first_ffmpeg(path_var: str) -> str | None:
    """The ``ffmpeg`` a process with this ``PATH`` runs: the first executable file of that name."""
    for folder in path_var.split(os.pathsep):
        candidate = os.path.join(folder or ".", "ffmpeg")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def state(
    settings: Settings, bin_dir: Path | None = None, *, path_var: str | None = None
) -> ShimState:
    """What ``janitor shim status`` reports, for ``path_var`` (default: this process's PATH)."""
    folder = bin_dir or default_bin_dir()
    target = folder / "ffmpeg"
    installed = is_guard(target)
    current = installed and target.read_text(errors="replace") == script(settings)
    path_var = os.environ.get("PATH", os.defpath) if path_var is None else path_var
    first = first_ffmpeg(path_var)
    first_on_path = first is not None and os.path.realpath(first) == os.path.realpath(target)
    try:
        env = {**os.environ, "PATH": path_var}
        real: str | None = find_real_ffmpeg(env, me=str(target))
        problem = None
    except GuardError as exc:
        real, problem = None, str(exc)
    return ShimState(str(folder), installed, current, first_on_path, real, problem)


def install(settings: Settings, bin_dir: Path | None = None, *, dry_run: bool = False) -> Path:
    """Write the guard as ``BIN/ffmpeg`` (atomically, mode 0755); ConfigError if a file of that
    name is there and is not a guard of ours."""
    folder = bin_dir or default_bin_dir()
    target = folder / "ffmpeg"
    if target.exists() and not is_guard(target):
        raise ConfigError(f"{target} exists and is not a space-janitor guard; choose another --dir")
    if dry_run:
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".ffmpeg.{os.getpid()}.tmp"
        tmp.write_text(script(settings))
        tmp.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        os.replace(tmp, target)
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror}; choose another --dir") from None
    return target


def uninstall(bin_dir: Path | None = None, *, dry_run: bool = False) -> Path | None:
    """Remove ``BIN/ffmpeg`` if it is a guard of ours; the path removed, or None."""
    target = (bin_dir or default_bin_dir()) / "ffmpeg"
    if not target.exists():
        return None
    if not is_guard(target):
        raise ConfigError(f"{target} is not a space-janitor guard; left alone")
    if not dry_run:
        target.unlink()
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
