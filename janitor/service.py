"""`janitor service`: install the daemon once and forget it (launchd on macOS, systemd on Linux).

A base class owns the workflow (render, write, load, unload, report); each platform fills in its
file location and its service-manager commands. Commands run through an injectable runner, so
tests capture the ``launchctl``/``systemctl`` calls on machines where neither manager runs.
"""

from __future__ import annotations

import os
import string
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from janitor.config.settings import Settings
from janitor.errors import ConfigError

__all__ = [
    "LABEL",
    "UNIT_NAME",
    "LaunchdService",
    "ServiceState",
    "SystemdService",
    "UserService",
    "service_for",
    "template_path",
]

LABEL = "org.space-janitor.daemon"
UNIT_NAME = "space-janitor.service"

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]
Say = Callable[[str], None]


def _run(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    except OSError as exc:  # the manager is not installed (containers, minimal systems)
        return subprocess.CompletedProcess(list(cmd), 127, "", f"{cmd[0]}: {exc.strerror}")


def template_path(name: str) -> Path:
    """A packaging template, from the installed package or the source tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "packaging" / name, here.parent / "packaging" / name):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"packaging template {name} is missing from this installation")


@dataclass(frozen=True, slots=True)
class ServiceState:
    """What the service manager says about the janitor service."""

    installed: bool
    active: bool
    detail: str
    file: str


class UserService:
    """The daemon as a user service of the OS's service manager (launchd, systemd): the
    workflow; subclasses give the file, the template and the manager's commands."""

    template: str = ""

    def __init__(
        self,
        settings: Settings,
        *,
        runner: Runner = _run,
        say: Say = print,
        show: Say = print,
        python: str | None = None,
        home: Path | None = None,
    ) -> None:
        self.settings = settings
        self.runner = runner
        self.say = say
        self.show = show
        self.python = python or sys.executable
        self.home = home or Path.home()

    # -- what subclasses fill in ---------------------------------------------------------------

    @property
    def file(self) -> Path:
        """Where the rendered service file goes."""
        raise NotImplementedError

    def load_commands(self) -> list[list[str]]:
        """Commands that start the installed service."""
        raise NotImplementedError

    def unload_commands(self) -> list[list[str]]:
        """Commands that stop the service (before its file is removed)."""
        raise NotImplementedError

    def state(self) -> ServiceState:
        """Installed? Running? What does the manager say?"""
        raise NotImplementedError

    def _fields(self) -> dict[str, str]:
        raise NotImplementedError

    # -- the workflow --------------------------------------------------------------------------

    def _extra_args(self) -> list[str]:
        args: list[str] = []
        if self.settings.config is not None:
            args += ["--config", str(self.settings.config)]
        return args

    def _environment(self) -> dict[str, str]:
        env = {}
        for key in (
            "JANITOR_POLICY",
            "JANITOR_STATE_DIR",
            "JANITOR_RUNTIME_DIR",
            "JANITOR_LOG_DIR",
            "BATCHALIGN_MEDIA_CACHE_DIR",
            "TMPDIR",
        ):
            value = os.environ.get(key)
            if value:
                env[key] = value
        if self.settings.policy is not None:  # `janitor --policy FILE service install`
            env["JANITOR_POLICY"] = str(self.settings.policy)
        return env

    def render(self) -> str:
        """The service file for this interpreter, settings and environment."""
        text = template_path(self.template).read_text()
        return string.Template(text).substitute(self._fields())

    def _execute(self, commands: list[list[str]], dry_run: bool, *, check: bool = True) -> None:
        for cmd in commands:
            self.say(("would run: " if dry_run else "running: ") + " ".join(cmd))
            if dry_run:
                continue
            proc = self.runner(cmd)
            if proc.returncode != 0 and check:
                why = (proc.stderr or proc.stdout or "").strip().splitlines()
                raise ConfigError(
                    f"`{' '.join(cmd)}` failed ({proc.returncode}): "
                    f"{why[-1] if why else 'no output'}"
                )

    def install(self, *, dry_run: bool = False) -> str:
        """Write the service file and start the service; returns the rendered file."""
        text = self.render()
        if dry_run:
            self.say(f"would write {self.file}:")
            self.show(text)
        else:
            self.settings.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.file.parent.mkdir(parents=True, exist_ok=True)
            if self.file.exists():
                self._execute(self.unload_commands(), dry_run, check=False)
            tmp = self.file.with_name(self.file.name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, self.file)
            self.say(f"wrote {self.file}")
        self._execute(self.load_commands(), dry_run)
        return text

    def uninstall(self, *, dry_run: bool = False) -> None:
        """Stop the service and remove its file."""
        self._execute(self.unload_commands(), dry_run, check=False)
        if dry_run:
            self.say(f"would remove {self.file}")
            return
        try:
            self.file.unlink()
            self.say(f"removed {self.file}")
        except FileNotFoundError:
            self.say(f"{self.file} was not installed")
        self._after_uninstall()

    def _after_uninstall(self) -> None:
        pass

    def log_lines(self, n: int = 50) -> list[str]:
        """The last ``n`` lines of the daemon's log file."""
        path = self.settings.log_dir / "daemon.log"
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 256 * 1024))
                lines = fh.read().decode(errors="replace").splitlines()
        except OSError:
            return [f"(no log at {path} yet)"]
        return lines[-n:]


class LaunchdService(UserService):
    """A LaunchAgent in ~/Library/LaunchAgents, loaded with ``launchctl bootstrap gui/$UID``."""

    template = "macos/org.space-janitor.daemon.plist.in"

    @property
    def file(self) -> Path:
        """``~/Library/LaunchAgents/org.space-janitor.daemon.plist``."""
        return self.home / "Library" / "LaunchAgents" / f"{LABEL}.plist"

    @property
    def domain(self) -> str:
        """``gui/501`` for the logged-in user 501."""
        return f"gui/{os.getuid()}"

    def _fields(self) -> dict[str, str]:
        extra = "".join(f"        <string>{escape(a)}</string>\n" for a in self._extra_args())
        env = "".join(
            f"        <key>{escape(k)}</key>\n        <string>{escape(v)}</string>\n"
            for k, v in self._environment().items()
        )
        return {
            "label": LABEL,
            "python": escape(self.python),
            "extra_args": extra,
            "log_dir": escape(str(self.settings.log_dir)),
            "environment": env,
        }

    def load_commands(self) -> list[list[str]]:
        return [["launchctl", "bootstrap", self.domain, str(self.file)]]

    def unload_commands(self) -> list[list[str]]:
        return [["launchctl", "bootout", f"{self.domain}/{LABEL}"]]

    def state(self) -> ServiceState:
        proc = self.runner(["launchctl", "print", f"{self.domain}/{LABEL}"])
        installed = self.file.exists()
        running = proc.returncode == 0 and "state = running" in proc.stdout
        detail = "running" if running else ("loaded" if proc.returncode == 0 else "not loaded")
        return ServiceState(installed, running, detail, str(self.file))


class SystemdService(UserService):
    """A systemd user unit in ~/.config/systemd/user, managed with ``systemctl --user``."""

    template = "linux/space-janitor.service.in"

    @property
    def file(self) -> Path:
        """``~/.config/systemd/user/space-janitor.service``."""
        config = os.environ.get("XDG_CONFIG_HOME") or str(self.home / ".config")
        return Path(config) / "systemd" / "user" / UNIT_NAME

    def _fields(self) -> dict[str, str]:
        def quote(arg: str) -> str:
            # systemd expands %-specifiers and $VARS in ExecStart and Environment lines.
            arg = arg.replace("%", "%%").replace("$", "$$")
            if all(c.isalnum() or c in "/._-=:@" for c in arg):
                return arg
            return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'

        extra = "".join(quote(a) + " " for a in self._extra_args())
        env = "".join(f"Environment={quote(f'{k}={v}')}\n" for k, v in self._environment().items())
        return {"python": quote(self.python), "extra_args": extra, "environment": env}

    def load_commands(self) -> list[list[str]]:
        return [
            ["systemctl", "--user", "daemon-reload"],
            ["systemctl", "--user", "enable", "--now", UNIT_NAME],
        ]

    def unload_commands(self) -> list[list[str]]:
        return [["systemctl", "--user", "disable", "--now", UNIT_NAME]]

    def _after_uninstall(self) -> None:
        self._execute([["systemctl", "--user", "daemon-reload"]], False, check=False)

    def state(self) -> ServiceState:
        proc = self.runner(["systemctl", "--user", "is-active", UNIT_NAME])
        detail = (proc.stdout or proc.stderr).strip() or "unknown"
        return ServiceState(self.file.exists(), detail == "active", detail, str(self.file))

    def log_lines(self, n: int = 50) -> list[str]:
        proc = self.runner(
            ["journalctl", "--user", "-u", UNIT_NAME, "-n", str(n), "--no-pager", "-o", "short"]
        )
        if proc.returncode == 0 and proc.stdout.strip() and "No entries" not in proc.stdout:
            return proc.stdout.splitlines()[-n:]
        return super().log_lines(n)


def service_for(platform: str, settings: Settings, **kwargs: object) -> UserService:
    """The UserService of ``sys.platform``: launchd on ``darwin``, systemd on ``linux``."""
    if platform == "darwin":
        return LaunchdService(settings, **kwargs)  # type: ignore[arg-type]
    if platform.startswith("linux"):
        return SystemdService(settings, **kwargs)  # type: ignore[arg-type]
    raise ConfigError(f"no service manager support for {platform}; run `janitor daemon` yourself")
