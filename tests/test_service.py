"""`janitor service`: the launchd plist and systemd unit it renders, and how it drives the managers.

Neither launchd nor a systemd user manager runs here, so ``launchctl``/``systemctl``/``journalctl``
are the only things replaced: a recording ``runner`` is injected into the UserService objects and
answers with real ``subprocess.CompletedProcess`` values. Everything else is real: the templates
from ``packaging/``, the files written under a temporary home / ``XDG_CONFIG_HOME``, ``plistlib``,
``systemd-analyze verify`` and ``plutil -lint`` where installed, and the ``janitor`` console script
in a subprocess for the command-line paths.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from janitor.config.settings import Settings
from janitor.errors import ConfigError
from janitor.service import (
    LABEL,
    UNIT_NAME,
    LaunchdService,
    SystemdService,
    service_for,
)
from tests._fixtures.console import one_line_error

Cli = Callable[..., subprocess.CompletedProcess[str]]
Reply = tuple[int, str, str]

UID = os.getuid()
DOMAIN = f"gui/{UID}"


# -- helpers ---------------------------------------------------------------------------------------


class Recorder:
    """A ``runner`` that records every command and answers from a table of canned replies.

    ``replies`` maps a command prefix (a tuple) to ``(returncode, stdout, stderr)``; the longest
    matching prefix wins; anything else succeeds with no output.
    """

    def __init__(self, replies: Mapping[tuple[str, ...], Reply] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.replies = dict(replies or {})

    def __call__(self, cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
        cmd = list(cmd)
        self.calls.append(cmd)
        best: Reply = (0, "", "")
        best_len = -1
        for prefix, reply in self.replies.items():
            if tuple(cmd[: len(prefix)]) == prefix and len(prefix) > best_len:
                best, best_len = reply, len(prefix)
        code, out, err = best
        return subprocess.CompletedProcess(cmd, code, out, err)


class Lines:
    """A ``say``/``show`` callback that keeps what it was given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        self.lines.append(text)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def env_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """JANITOR_STATE_DIR/RUNTIME_DIR/LOG_DIR, XDG_CONFIG_HOME and a home, all in tmp_path."""
    dirs = {
        "state": tmp_path / "state",
        "runtime": tmp_path / "run",
        "log": tmp_path / "logs",
        "xdg_config": tmp_path / "xdg-config",
        "home": tmp_path / "home",
    }
    dirs["xdg_config"].mkdir()
    dirs["home"].mkdir()
    monkeypatch.setenv("JANITOR_STATE_DIR", str(dirs["state"]))
    monkeypatch.setenv("JANITOR_RUNTIME_DIR", str(dirs["runtime"]))
    monkeypatch.setenv("JANITOR_LOG_DIR", str(dirs["log"]))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(dirs["xdg_config"]))
    monkeypatch.setenv("HOME", str(dirs["home"]))
    return dirs


@pytest.fixture
def policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small valid policy whose only tree lives in tmp_path; JANITOR_POLICY points at it."""
    cache = tmp_path / "trees" / "cache"
    cache.mkdir(parents=True)
    path = tmp_path / "policy.toml"
    path.write_text(
        f'[volume]\nfloor = "4MiB"\n\n[trees.c]\nrole = "cache"\npath = "{cache}"\n'
        'quota = "10MiB"\n'
    )
    monkeypatch.setenv("JANITOR_POLICY", str(path))
    return path


def settings_for(config: Path | None = None) -> Settings:
    return Settings.load(config)


def launchd(
    home: Path,
    runner: Recorder | None = None,
    *,
    python: str = "/opt/py/bin/python3",
    config: Path | None = None,
) -> tuple[LaunchdService, Recorder, Lines, Lines]:
    rec = runner or Recorder()
    say, show = Lines(), Lines()
    svc = LaunchdService(
        settings_for(config), runner=rec, say=say, show=show, python=python, home=home
    )
    return svc, rec, say, show


def systemd(
    home: Path,
    runner: Recorder | None = None,
    *,
    python: str | None = None,
    config: Path | None = None,
) -> tuple[SystemdService, Recorder, Lines, Lines]:
    rec = runner or Recorder()
    say, show = Lines(), Lines()
    svc = SystemdService(
        settings_for(config),
        runner=rec,
        say=say,
        show=show,
        python=python or sys.executable,
        home=home,
    )
    return svc, rec, say, show


def exec_start(unit: str) -> list[str]:
    """The ExecStart= command line of a unit, split the way systemd splits quoted words."""
    lines = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    assert len(lines) == 1, unit
    return shlex.split(lines[0].removeprefix("ExecStart="))


def environment(unit: str) -> dict[str, str]:
    """The Environment= assignments of a unit (each line one quoted KEY=VALUE word)."""
    out: dict[str, str] = {}
    for ln in unit.splitlines():
        if ln.startswith("Environment="):
            for word in shlex.split(ln.removeprefix("Environment=")):
                key, _, value = word.partition("=")
                out[key] = value
    return out


def verify_unit(text: str, where: Path) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify`` on ``text`` written as ``where/space-janitor.service``."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    where.mkdir(parents=True, exist_ok=True)
    unit = where / UNIT_NAME
    unit.write_text(text)
    return subprocess.run(
        [tool, "verify", str(unit)], capture_output=True, text=True, check=False, timeout=60
    )


def assert_verified(done: subprocess.CompletedProcess[str]) -> None:
    complaints = [ln for ln in (done.stdout + done.stderr).splitlines() if UNIT_NAME in ln]
    assert done.returncode == 0 and not complaints, done.stdout + done.stderr


# -- the launchd plist -----------------------------------------------------------------------------


def test_plist_parses_and_has_the_launch_agent_keys(
    env_dirs: dict[str, Path], policy: Path
) -> None:
    svc, *_ = launchd(env_dirs["home"], python="/opt/py/bin/python3")
    data = plistlib.loads(svc.render().encode())

    assert data["Label"] == LABEL == "org.space-janitor.daemon"
    args = data["ProgramArguments"]
    assert args[0] == "/opt/py/bin/python3"
    assert os.path.isabs(args[0])
    assert args[1:3] == ["-m", "janitor"]
    assert "daemon" in args[3:]
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] == {"SuccessfulExit": False}
    assert data["ProcessType"] == "Background"
    assert data["LowPriorityIO"] is True
    log_dir = env_dirs["log"]
    for key in ("StandardOutPath", "StandardErrorPath"):
        assert Path(data[key]).parent == log_dir, (key, data[key])
    assert data["StandardOutPath"] != data["StandardErrorPath"]
    env = data["EnvironmentVariables"]
    assert env["JANITOR_POLICY"] == str(policy)
    assert env["JANITOR_STATE_DIR"] == str(env_dirs["state"])
    assert env["JANITOR_LOG_DIR"] == str(log_dir)


def test_plist_defaults_to_the_running_interpreter(env_dirs: dict[str, Path], policy: Path) -> None:
    svc = LaunchdService(settings_for(), runner=Recorder(), home=env_dirs["home"])
    data = plistlib.loads(svc.render().encode())
    assert data["ProgramArguments"][0] == sys.executable
    assert os.path.isabs(sys.executable)


def test_plist_without_janitor_policy_has_no_policy_variable(
    env_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JANITOR_POLICY", raising=False)
    svc, *_ = launchd(env_dirs["home"])
    data = plistlib.loads(svc.render().encode())
    assert "JANITOR_POLICY" not in data["EnvironmentVariables"]


def test_plist_escapes_xml_special_characters_and_round_trips(
    env_dirs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = tmp_path / 'my cfg & <odd> "dir"'
    odd.mkdir()
    config = odd / "config.toml"
    config.write_text("")
    pol_dir = tmp_path / "R&D <policies>"
    pol_dir.mkdir()
    pol = pol_dir / "policy.toml"
    pol.write_text(f'[trees.c]\nrole = "cache"\npath = "{tmp_path}"\nquota = "1MiB"\n')
    monkeypatch.setenv("JANITOR_POLICY", str(pol))
    python = str(tmp_path / "py & <env>" / "bin" / "python3")

    svc, *_ = launchd(env_dirs["home"], python=python, config=config)
    text = svc.render()
    assert "& " not in text.replace("&amp;", "")  # every & is an entity
    data = plistlib.loads(text.encode())

    args = data["ProgramArguments"]
    assert args[0] == python
    i = args.index("--config")
    assert args[i + 1] == str(config)
    assert args.index("daemon") > i
    assert data["EnvironmentVariables"]["JANITOR_POLICY"] == str(pol)


def test_plist_passes_plutil_lint(env_dirs: dict[str, Path], policy: Path, tmp_path: Path) -> None:
    plutil = shutil.which("plutil")
    if plutil is None:
        pytest.skip("plutil is not installed (macOS only)")
    config = tmp_path / "a & b" / "config.toml"
    config.parent.mkdir()
    config.write_text("")
    svc, *_ = launchd(env_dirs["home"], config=config)
    path = tmp_path / f"{LABEL}.plist"
    path.write_text(svc.render())
    done = subprocess.run([plutil, "-lint", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the systemd unit ------------------------------------------------------------------------------


def test_unit_has_restart_wantedby_and_the_daemon_command(
    env_dirs: dict[str, Path], policy: Path
) -> None:
    svc, *_ = systemd(env_dirs["home"])
    unit = svc.render()
    lines = unit.splitlines()
    assert "Restart=on-failure" in lines
    assert "WantedBy=default.target" in lines
    argv = exec_start(unit)
    assert argv[0] == sys.executable
    assert argv[1:3] == ["-m", "janitor"]
    assert "daemon" in argv[3:]
    env = environment(unit)
    assert env["JANITOR_POLICY"] == str(policy)
    assert env["JANITOR_LOG_DIR"] == str(env_dirs["log"])


def test_unit_passes_systemd_analyze_verify(
    env_dirs: dict[str, Path], policy: Path, tmp_path: Path
) -> None:
    svc, *_ = systemd(env_dirs["home"], python=sys.executable)
    assert_verified(verify_unit(svc.render(), tmp_path / "units"))


def test_unit_quotes_an_interpreter_path_with_a_space(
    env_dirs: dict[str, Path], policy: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "my env" / "bin"
    folder.mkdir(parents=True)
    python = folder / "python3"
    python.symlink_to(sys.executable)
    config = tmp_path / "conf dir" / 'say "hi".toml'
    config.parent.mkdir()
    config.write_text("")

    svc, *_ = systemd(env_dirs["home"], python=str(python), config=config)
    unit = svc.render()
    argv = exec_start(unit)
    assert argv[0] == str(python)
    assert argv[argv.index("--config") + 1] == str(config)
    assert_verified(verify_unit(unit, tmp_path / "units"))


def test_unit_escapes_percent_signs_for_systemd_specifiers(
    env_dirs: dict[str, Path], policy: Path, tmp_path: Path
) -> None:
    """systemd expands ``%t``, ``%h``... in ExecStart= and Environment=; a literal ``%`` in a
    path must be written ``%%`` or the service runs something else."""
    folder = tmp_path / "100%total" / "bin"
    folder.mkdir(parents=True)
    python = folder / "python3"
    python.symlink_to(sys.executable)

    svc, *_ = systemd(env_dirs["home"], python=str(python))
    unit = svc.render()
    assert_verified(verify_unit(unit, tmp_path / "units"))
    line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    assert "100%%total" in line, line


# -- install / uninstall with the manager's calls recorded -----------------------------------------


def test_launchd_install_writes_the_agent_and_bootstraps_it(
    env_dirs: dict[str, Path], policy: Path
) -> None:
    home = env_dirs["home"]
    svc, rec, say, _ = launchd(home)
    expected = home / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    assert svc.file == expected

    text = svc.install()

    assert expected.read_text() == text
    assert plistlib.loads(expected.read_bytes())["Label"] == LABEL
    assert rec.calls == [["launchctl", "bootstrap", DOMAIN, str(expected)]]
    assert env_dirs["log"].is_dir()  # launchd opens the log files there; it must exist
    assert f"wrote {expected}" in say.lines
    assert f"running: launchctl bootstrap {DOMAIN} {expected}" in say.lines


def test_launchd_reinstall_boots_out_first(env_dirs: dict[str, Path], policy: Path) -> None:
    svc, rec, _, _ = launchd(env_dirs["home"])
    svc.install()
    rec.calls.clear()
    svc.install()
    assert rec.calls == [
        ["launchctl", "bootout", f"{DOMAIN}/{LABEL}"],
        ["launchctl", "bootstrap", DOMAIN, str(svc.file)],
    ]


def test_launchd_uninstall_boots_out_and_removes_the_file(
    env_dirs: dict[str, Path], policy: Path
) -> None:
    svc, rec, say, _ = launchd(env_dirs["home"])
    svc.install()
    rec.calls.clear()
    svc.uninstall()
    assert rec.calls == [["launchctl", "bootout", f"{DOMAIN}/{LABEL}"]]
    assert not svc.file.exists()
    assert f"removed {svc.file}" in say.lines


def test_launchd_failure_raises_config_error_with_the_managers_message(
    env_dirs: dict[str, Path], policy: Path
) -> None:
    rec = Recorder(
        {("launchctl", "bootstrap"): (5, "", "Bootstrap failed: 5: Input/output error\n")}
    )
    svc, _, _, _ = launchd(env_dirs["home"], rec)
    with pytest.raises(ConfigError) as info:
        svc.install()
    message = str(info.value)
    assert "Bootstrap failed: 5: Input/output error" in message
    assert "launchctl bootstrap" in message
    assert "(5)" in message
    assert info.value.exit_code == 2


def test_launchd_dry_run_writes_and_runs_nothing(env_dirs: dict[str, Path], policy: Path) -> None:
    home = env_dirs["home"]
    svc, rec, say, show = launchd(home)
    text = svc.install(dry_run=True)

    assert rec.calls == []
    assert not (home / "Library").exists()
    assert not env_dirs["log"].exists()
    assert show.lines == [text]
    assert plistlib.loads(show.lines[0].encode())["Label"] == LABEL
    assert f"would write {svc.file}:" in say.lines
    assert f"would run: launchctl bootstrap {DOMAIN} {svc.file}" in say.lines

    svc.uninstall(dry_run=True)
    assert rec.calls == []
    assert f"would run: launchctl bootout {DOMAIN}/{LABEL}" in say.lines
    assert f"would remove {svc.file}" in say.lines


def test_systemd_install_writes_the_unit_and_enables_it(
    env_dirs: dict[str, Path], policy: Path
) -> None:
    svc, rec, say, _ = systemd(env_dirs["home"])
    expected = env_dirs["xdg_config"] / "systemd" / "user" / UNIT_NAME
    assert svc.file == expected

    text = svc.install()

    assert expected.read_text() == text
    assert rec.calls == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", UNIT_NAME],
    ]
    assert not (env_dirs["home"] / ".config").exists()
    assert "running: systemctl --user enable --now space-janitor.service" in say.lines


def test_systemd_without_xdg_config_home_uses_home_config(
    env_dirs: dict[str, Path], policy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    svc, *_ = systemd(env_dirs["home"])
    assert svc.file == env_dirs["home"] / ".config" / "systemd" / "user" / UNIT_NAME


def test_systemd_reinstall_disables_first(env_dirs: dict[str, Path], policy: Path) -> None:
    svc, rec, _, _ = systemd(env_dirs["home"])
    svc.install()
    rec.calls.clear()
    svc.install()
    assert rec.calls == [
        ["systemctl", "--user", "disable", "--now", UNIT_NAME],
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", UNIT_NAME],
    ]


def test_systemd_uninstall_disables_and_removes_the_unit(
    env_dirs: dict[str, Path], policy: Path
) -> None:
    svc, rec, say, _ = systemd(env_dirs["home"])
    svc.install()
    rec.calls.clear()
    svc.uninstall()
    assert rec.calls[0] == ["systemctl", "--user", "disable", "--now", UNIT_NAME]
    assert ["systemctl", "--user", "daemon-reload"] in rec.calls[1:]
    assert not svc.file.exists()
    assert f"removed {svc.file}" in say.lines


def test_systemd_failure_raises_config_error(env_dirs: dict[str, Path], policy: Path) -> None:
    rec = Recorder(
        {
            ("systemctl", "--user", "enable"): (
                1,
                "",
                "Failed to connect to bus: No medium found\n",
            )
        }
    )
    svc, _, _, _ = systemd(env_dirs["home"], rec)
    with pytest.raises(ConfigError, match="Failed to connect to bus: No medium found"):
        svc.install()


def test_systemd_dry_run_writes_and_runs_nothing(env_dirs: dict[str, Path], policy: Path) -> None:
    svc, rec, say, show = systemd(env_dirs["home"])
    text = svc.install(dry_run=True)
    assert rec.calls == []
    assert not (env_dirs["xdg_config"] / "systemd").exists()
    assert show.lines == [text]
    assert "[Service]" in text
    assert "would run: systemctl --user daemon-reload" in say.lines
    assert f"would run: systemctl --user enable --now {UNIT_NAME}" in say.lines


def test_service_for_picks_the_manager(env_dirs: dict[str, Path], policy: Path) -> None:
    s = settings_for()
    assert isinstance(service_for("darwin", s, runner=Recorder()), LaunchdService)
    assert isinstance(service_for("linux", s, runner=Recorder()), SystemdService)
    with pytest.raises(ConfigError, match="win32"):
        service_for("win32", s)


# -- state and logs --------------------------------------------------------------------------------

LAUNCHCTL_PRINT = f"""{DOMAIN}/{LABEL} = {{
\tactive count = 1
\tpath = /Users/me/Library/LaunchAgents/{LABEL}.plist
\ttype = LaunchAgent
\tstate = running

\tprogram = /opt/py/bin/python3
\tpid = 4242
}}
"""


def test_launchd_state_running(env_dirs: dict[str, Path], policy: Path) -> None:
    rec = Recorder({("launchctl", "print"): (0, LAUNCHCTL_PRINT, "")})
    svc, _, _, _ = launchd(env_dirs["home"], rec)
    svc.install()
    st = svc.state()
    assert rec.calls[-1] == ["launchctl", "print", f"{DOMAIN}/{LABEL}"]
    assert (st.installed, st.active, st.detail) == (True, True, "running")
    assert st.file == str(svc.file)


def test_launchd_state_loaded_but_not_running(env_dirs: dict[str, Path], policy: Path) -> None:
    waiting = LAUNCHCTL_PRINT.replace("state = running", "state = not running")
    svc, _, _, _ = launchd(env_dirs["home"], Recorder({("launchctl", "print"): (0, waiting, "")}))
    st = svc.state()
    assert (st.installed, st.active, st.detail) == (False, False, "loaded")


def test_launchd_state_not_loaded(env_dirs: dict[str, Path], policy: Path) -> None:
    rec = Recorder(
        {("launchctl", "print"): (113, "", f'Could not find service "{LABEL}" in domain\n')}
    )
    svc, _, _, _ = launchd(env_dirs["home"], rec)
    st = svc.state()
    assert (st.installed, st.active, st.detail) == (False, False, "not loaded")


@pytest.mark.parametrize(
    ("reply", "active", "detail"),
    [((0, "active\n", ""), True, "active"), ((3, "inactive\n", ""), False, "inactive")],
)
def test_systemd_state(
    env_dirs: dict[str, Path], policy: Path, reply: Reply, active: bool, detail: str
) -> None:
    rec = Recorder({("systemctl", "--user", "is-active"): reply})
    svc, _, _, _ = systemd(env_dirs["home"], rec)
    st = svc.state()
    assert rec.calls == [["systemctl", "--user", "is-active", UNIT_NAME]]
    assert (st.active, st.detail, st.installed) == (active, detail, False)


def _write_log(log_dir: Path, n: int) -> list[str]:
    log_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"2025-01-01 00:00:{i:02d} janitor: line {i}" for i in range(n)]
    (log_dir / "daemon.log").write_text("\n".join(lines) + "\n")
    return lines


def test_launchd_log_lines_read_the_log_file(env_dirs: dict[str, Path], policy: Path) -> None:
    svc, rec, _, _ = launchd(env_dirs["home"])
    assert "no log" in svc.log_lines(5)[0]
    lines = _write_log(env_dirs["log"], 40)
    assert svc.log_lines(7) == lines[-7:]
    assert rec.calls == []


def test_systemd_log_lines_prefer_the_journal(env_dirs: dict[str, Path], policy: Path) -> None:
    journal = "".join(f"Jan 01 00:00:0{i} host janitor[1]: j{i}\n" for i in range(5))
    rec = Recorder({("journalctl",): (0, journal, "")})
    svc, _, _, _ = systemd(env_dirs["home"], rec)
    _write_log(env_dirs["log"], 10)
    assert svc.log_lines(3) == journal.splitlines()[-3:]
    assert rec.calls == [
        ["journalctl", "--user", "-u", UNIT_NAME, "-n", "3", "--no-pager", "-o", "short"]
    ]


@pytest.mark.parametrize(
    "reply",
    [(1, "", "No journal files were found.\n"), (0, "-- No entries --\n", "")],
    ids=["journal-fails", "journal-empty"],
)
def test_systemd_log_lines_fall_back_to_the_log_file(
    env_dirs: dict[str, Path], policy: Path, reply: Reply
) -> None:
    rec = Recorder({("journalctl",): reply})
    svc, _, _, _ = systemd(env_dirs["home"], rec)
    lines = _write_log(env_dirs["log"], 30)
    assert svc.log_lines(4) == lines[-4:]


# -- through the command line (real subprocess) ----------------------------------------------------


@pytest.fixture
def cli_env(env_dirs: dict[str, Path], policy: Path) -> dict[str, str | None]:
    """Extra child environment for run_cli: our folders (already in os.environ) and a PATH."""
    return {"XDG_CONFIG_HOME": str(env_dirs["xdg_config"]), "HOME": str(env_dirs["home"])}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux default is systemd")
def test_cli_install_dry_run_prints_the_unit_and_changes_nothing(
    run_cli: Cli, cli_env: dict[str, str | None], env_dirs: dict[str, Path], policy: Path
) -> None:
    done = run_cli("service", "install", "--dry-run", env=cli_env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    unit = done.stdout
    assert "[Service]" in unit and "[Install]" in unit
    argv = exec_start(unit)
    assert os.path.isabs(argv[0]) and Path(argv[0]).exists()
    assert argv[1:3] == ["-m", "janitor"]
    assert environment(unit)["JANITOR_POLICY"] == str(policy)
    err = done.stderr.splitlines()
    assert any("would write" in ln and UNIT_NAME in ln for ln in err), done.stderr
    assert any(ln.endswith("would run: systemctl --user daemon-reload") for ln in err)
    assert any(ln.endswith(f"would run: systemctl --user enable --now {UNIT_NAME}") for ln in err)
    assert "[Service]" not in done.stderr
    assert list(env_dirs["xdg_config"].rglob("*")) == []
    assert not env_dirs["log"].exists()


def test_cli_install_dry_run_darwin_prints_a_plist(
    run_cli: Cli, cli_env: dict[str, str | None], env_dirs: dict[str, Path], policy: Path
) -> None:
    done = run_cli("service", "install", "--dry-run", "--platform", "darwin", env=cli_env)
    assert done.returncode == 0, done.stderr
    data = plistlib.loads(done.stdout.encode())
    assert data["Label"] == LABEL
    assert data["ProgramArguments"][1:3] == ["-m", "janitor"]
    assert os.path.isabs(data["ProgramArguments"][0])
    assert data["EnvironmentVariables"]["JANITOR_POLICY"] == str(policy)
    assert f"would run: launchctl bootstrap {DOMAIN} " in done.stderr
    assert list(env_dirs["home"].rglob("*")) == []


def test_cli_uninstall_dry_run_prints_the_commands(
    run_cli: Cli, cli_env: dict[str, str | None], env_dirs: dict[str, Path], policy: Path
) -> None:
    done = run_cli("service", "uninstall", "--dry-run", "--platform", "linux", env=cli_env)
    assert done.returncode == 0, done.stderr
    assert f"would run: systemctl --user disable --now {UNIT_NAME}" in done.stderr
    assert "would remove" in done.stderr


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_cli_policy_flag_reaches_the_service_file(
    run_cli: Cli,
    cli_env: dict[str, str | None],
    tmp_path: Path,
    policy: Path,
    platform: str,
) -> None:
    """``janitor --policy FILE service install`` must install a daemon that uses FILE."""
    other = tmp_path / "other-policy.toml"
    other.write_text(policy.read_text())
    done = run_cli(
        "--policy",
        other,
        "service",
        "install",
        "--dry-run",
        "--platform",
        platform,
        env={**cli_env, "JANITOR_POLICY": None},
    )
    assert done.returncode == 0, done.stderr
    assert str(other) in done.stdout, done.stdout


def _empty_path(tmp_path: Path) -> str:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return str(empty)


def test_cli_service_logs_without_journalctl_fall_back_to_the_log_file(
    run_cli: Cli, cli_env: dict[str, str | None], env_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """Linux without journalctl on PATH (containers, minimal installs): the log file is used."""
    lines = _write_log(env_dirs["log"], 12)
    done = run_cli(
        "service",
        "logs",
        "-n",
        "5",
        "--platform",
        "linux",
        env={**cli_env, "PATH": _empty_path(tmp_path)},
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == lines[-5:]


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_cli_service_status_without_the_manager_is_not_a_traceback(
    run_cli: Cli, cli_env: dict[str, str | None], tmp_path: Path, platform: str
) -> None:
    """No systemctl/launchctl on PATH: a one-line answer and a non-zero exit, no traceback."""
    done = run_cli(
        "service",
        "status",
        "--platform",
        platform,
        env={**cli_env, "PATH": _empty_path(tmp_path)},
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (1, 2), done.stderr
    if done.returncode == 2:
        one_line_error(done.stderr)


def test_cli_service_install_without_systemctl_is_an_error_not_a_traceback(
    run_cli: Cli, cli_env: dict[str, str | None], tmp_path: Path
) -> None:
    done = run_cli(
        "service",
        "install",
        "--platform",
        "linux",
        env={**cli_env, "PATH": _empty_path(tmp_path)},
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert "systemctl" in done.stderr.strip().splitlines()[-1]
