"""Settings: JANITOR_* variables, the TOML config file, and their precedence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from janitor.config.settings import Settings, default_config_path, shipped_policy_path
from janitor.errors import ConfigError
from tests._fixtures.console import one_line_error
from tests._fixtures.env import JanitorEnv


def _config(path: Path, **values: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        f"{k} = {json.dumps(str(v)) if isinstance(v, Path | str) else v}" for k, v in values.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_defaults_follow_the_platform_dirs(
    janitor_env: JanitorEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JANITOR_STATE_DIR")
    s = Settings.load()
    assert s.config is None
    assert s.state_dir == janitor_env.state_home / "space-janitor"
    assert s.ledger_path == janitor_env.state_home / "space-janitor" / "ledger.sqlite3"
    assert s.log_dir == janitor_env.state_home / "space-janitor" / "log"
    assert s.runtime_dir == janitor_env.runtime_dir / "space-janitor"
    assert s.socket_path == janitor_env.runtime_dir / "space-janitor" / "janitor.sock"
    assert s.policy_path == shipped_policy_path()
    assert s.default_ttl_s == 3600.0
    assert default_config_path() == janitor_env.config_file


def test_env_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JANITOR_STATE_DIR", str(tmp_path / "s"))
    monkeypatch.setenv("JANITOR_POLICY", str(tmp_path / "p.toml"))
    monkeypatch.setenv("JANITOR_DEFAULT_TTL_S", "120")
    monkeypatch.setenv("JANITOR_LOCK_TIMEOUT_S", "2.5")
    monkeypatch.setenv("JANITOR_LOG_DIR", str(tmp_path / "logs"))
    s = Settings.load()
    assert s.state_dir == tmp_path / "s"
    assert s.policy_path == tmp_path / "p.toml"
    assert s.default_ttl_s == 120.0
    assert s.lock_timeout_s == 2.5
    assert s.log_dir == tmp_path / "logs"


def test_unprefixed_variables_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEFAULT_TTL_S", "5")
    monkeypatch.setenv("STATE_DIR", str(tmp_path / "wrong"))
    s = Settings.load()
    assert s.default_ttl_s == 3600.0
    assert s.state_dir != tmp_path / "wrong"


def test_config_file_at_the_default_location(janitor_env: JanitorEnv, tmp_path: Path) -> None:
    _config(janitor_env.config_file, default_ttl_s=60)
    s = Settings.load()
    assert s.config == janitor_env.config_file
    assert s.default_ttl_s == 60.0


def test_config_file_by_argument_and_by_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JANITOR_STATE_DIR")
    a = _config(tmp_path / "a.toml", state_dir=tmp_path / "A")
    b = _config(tmp_path / "b.toml", state_dir=tmp_path / "B")
    s = Settings.load(a)
    assert (s.config, s.state_dir) == (a, tmp_path / "A")
    monkeypatch.setenv("JANITOR_CONFIG", str(b))
    s = Settings.load()
    assert (s.config, s.state_dir) == (b, tmp_path / "B")


def test_explicit_config_beats_janitor_config_also_in_what_it_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--config A`` with ``JANITOR_CONFIG=B`` set reads A, so ``settings.config`` must be A.

    BUG (janitor/settings.py Settings.load): the ``config`` field is filled from the
    environment (JANITOR_CONFIG), which beats the file's own ``values["config"]``, so the
    settings name B while holding A's values (``janitor paths`` prints the wrong file).
    """
    monkeypatch.delenv("JANITOR_STATE_DIR")
    a = _config(tmp_path / "a.toml", state_dir=tmp_path / "A")
    b = _config(tmp_path / "b.toml", state_dir=tmp_path / "B")
    monkeypatch.setenv("JANITOR_CONFIG", str(b))
    s = Settings.load(a)
    assert s.state_dir == tmp_path / "A"
    assert s.config == a


def test_empty_janitor_config_means_no_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """``JANITOR_CONFIG=`` is treated as unset when reading, so no config file is in force.

    BUG (same cause as above): the field is parsed from the empty variable as ``Path(".")``.
    """
    monkeypatch.setenv("JANITOR_CONFIG", "")
    s = Settings.load()
    assert s.config is None


def test_precedence_override_env_file_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JANITOR_STATE_DIR")
    cfg = _config(tmp_path / "c.toml", default_ttl_s=10, state_dir=tmp_path / "file")
    assert Settings.load().default_ttl_s == 3600.0  # default
    assert Settings.load(cfg).default_ttl_s == 10.0  # file > default
    assert Settings.load(cfg).state_dir == tmp_path / "file"
    monkeypatch.setenv("JANITOR_DEFAULT_TTL_S", "20")
    monkeypatch.setenv("JANITOR_STATE_DIR", str(tmp_path / "env"))
    s = Settings.load(cfg)
    assert (s.default_ttl_s, s.state_dir) == (20.0, tmp_path / "env")  # env > file
    s = Settings.load(cfg, default_ttl_s=30, state_dir=tmp_path / "flag")
    assert (s.default_ttl_s, s.state_dir) == (30.0, tmp_path / "flag")  # override > env
    s = Settings.load(cfg, default_ttl_s=None)  # None means "not given"
    assert s.default_ttl_s == 20.0


def test_paths_expand_user_and_variables(
    janitor_env: JanitorEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JANITOR_STATE_DIR", "~/state")
    assert Settings.load().state_dir == janitor_env.home / "state"
    monkeypatch.setenv("JT_BASE", "/srv/jt")
    monkeypatch.setenv("JANITOR_STATE_DIR", "$JT_BASE/state")
    assert Settings.load().state_dir == Path("/srv/jt/state")


# -- bad configuration ----------------------------------------------------------------------


def _config_error(*args: object, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as info:
        Settings.load(*args, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message, message
    assert info.value.exit_code == 2
    return message


def test_missing_named_config_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    message = _config_error(missing)
    assert str(missing) in message
    assert "does not exist" in message


def test_missing_default_config_file_is_fine(janitor_env: JanitorEnv) -> None:
    assert not janitor_env.config_file.exists()
    assert Settings.load().config is None


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("default_ttl_s = -1\n", "default_ttl_s"),
        ('default_ttl_s = "soon"\n', "default_ttl_s"),
        ("lock_timeout_s = 0\n", "lock_timeout_s"),
        ("state_dirr = '/x'\n", "state_dirr"),
        ("log_dir = 5\n", "log_dir"),
    ],
)
def test_bad_config_file_names_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    message = _config_error(cfg)
    assert str(cfg) in message
    assert f"'{key}'" in message


def test_config_file_that_is_not_toml(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("state_dir = \n")
    message = _config_error(cfg)
    assert str(cfg) in message
    assert "TOML" in message


def test_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JANITOR_DEFAULT_TTL_S", "abc")
    assert "JANITOR_DEFAULT_TTL_S" in _config_error()


def test_bad_config_file_at_the_default_location(janitor_env: JanitorEnv) -> None:
    _config(janitor_env.config_file, default_ttl_s=-5)
    assert str(janitor_env.config_file) in _config_error()


# -- through the console script ------------------------------------------------------------------


def test_cli_config_flag_and_variable(tmp_path: Path, run_cli_many: Any) -> None:
    a = _config(tmp_path / "a.toml", state_dir=tmp_path / "A")
    b = _config(tmp_path / "b.toml", state_dir=tmp_path / "B")
    drop: dict[str, str | None] = {"JANITOR_STATE_DIR": None}
    by_flag, by_env, env_wins = run_cli_many(
        [
            (("--config", a, "paths", "--json"), drop),
            (("paths", "--json"), {**drop, "JANITOR_CONFIG": str(b)}),
            (("--config", a, "paths", "--json"), {"JANITOR_STATE_DIR": str(tmp_path / "E")}),
        ]
    )
    for done in (by_flag, by_env, env_wins):
        assert done.returncode == 0, done.stderr
    data = json.loads(by_flag.stdout)
    assert (data["config"], data["state_dir"]) == (str(a), str(tmp_path / "A"))
    assert data["config_exists"] is True
    data = json.loads(by_env.stdout)
    assert (data["config"], data["state_dir"]) == (str(b), str(tmp_path / "B"))
    assert json.loads(env_wins.stdout)["state_dir"] == str(tmp_path / "E")  # env beats file


def test_cli_bad_config_file_exits_2_with_one_line(tmp_path: Path, run_cli_many: Any) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("default_ttl_s = -1\n")
    paths, status, missing = run_cli_many(
        [
            ("--config", cfg, "paths"),
            ("--config", cfg, "status"),
            ("--config", tmp_path / "missing.toml", "paths"),
        ]
    )
    for done in (paths, status):
        assert done.returncode == 2, done
        line = one_line_error(done.stderr)
        assert str(cfg) in line and "default_ttl_s" in line
        assert done.stdout == ""
    assert missing.returncode == 2
    assert "does not exist" in one_line_error(missing.stderr)


# -- the metrics for another machine: metrics_listen, metrics_textfile ---------------------------


@pytest.mark.parametrize(
    ("written", "host", "port", "shown"),
    [
        (":9464", "", 9464, ":9464"),
        ("0.0.0.0:9464", "0.0.0.0", 9464, "0.0.0.0:9464"),
        ("127.0.0.1:1", "127.0.0.1", 1, "127.0.0.1:1"),
        ("[::]:9464", "::", 9464, "[::]:9464"),
        ("[::1]:65535", "::1", 65535, "[::1]:65535"),
        ("[0:0::1]:9464", "::1", 9464, "[::1]:9464"),
        ("studio-1.local:9464", "studio-1.local", 9464, "studio-1.local:9464"),
        (" localhost:9464 ", "localhost", 9464, "localhost:9464"),
    ],
)
def test_metrics_listen_takes_what_exporters_take(
    monkeypatch: pytest.MonkeyPatch, written: str, host: str, port: int, shown: str
) -> None:
    monkeypatch.setenv("JANITOR_METRICS_LISTEN", written)
    s = Settings.load()
    assert s.metrics_address is not None
    assert (s.metrics_address.host, s.metrics_address.port) == (host, port)
    assert s.metrics_listen == shown
    assert s.metrics_address.every_interface is (host == "")


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("9464", "has no port; use e.g. ':9464'"),
        ("::1:9464", "put an IPv6 address in brackets, as '[::1]:9464'"),
        ("[::1:9464", "needs its closing ']'"),
        ("[fe80::zz]:9464", "is not an IPv6 address"),
        ("300.1.1.1:9464", "is neither an IP address nor a host name"),
        ("bad_host:9464", "is neither an IP address nor a host name"),
        ("host:0", "the port must be 1 to 65535, not 0"),
        ("host:65536", "the port must be 1 to 65535, not 65536"),
        ("host:http", "the port 'http' is not a number"),
        ("host:", "the port '' is not a number"),
    ],
)
def test_a_bad_metrics_listen_is_one_line_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, written: str, says: str
) -> None:
    monkeypatch.setenv("JANITOR_METRICS_LISTEN", written)
    message = _config_error()
    assert "'metrics_listen' (or JANITOR_METRICS_LISTEN)" in message
    assert says in message
    assert "Value error" not in message


def test_an_empty_metrics_setting_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JANITOR_METRICS_LISTEN", "")
    monkeypatch.setenv("JANITOR_METRICS_TEXTFILE", " ")
    s = Settings.load()
    assert (s.metrics_listen, s.metrics_address, s.metrics_textfile) == (None, None, None)


def test_metrics_listen_may_not_take_http_ports_loopback_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JANITOR_HTTP_PORT", "9464")
    for clash in (":9464", "0.0.0.0:9464", "127.0.0.1:9464", "[::]:9464", "localhost:9464"):
        monkeypatch.setenv("JANITOR_METRICS_LISTEN", clash)
        message = _config_error()
        assert "http_port 9464 would share 127.0.0.1's port" in message, message
    monkeypatch.setenv("JANITOR_METRICS_LISTEN", "10.1.2.3:9464")  # another address: fine
    assert Settings.load().metrics_listen == "10.1.2.3:9464"


def test_metrics_settings_from_the_config_file(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path / "c.toml",
        metrics_listen=":9464",
        metrics_textfile="$HOME/textfile_collector/janitor.prom",
    )
    s = Settings.load(cfg)
    assert s.metrics_listen == ":9464"
    assert s.metrics_textfile == Path.home() / "textfile_collector" / "janitor.prom"


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("janitor.prom", "is not an absolute path"),
        ("/var/lib/node_exporter/janitor.txt", "does not end in .prom"),
    ],
)
def test_a_bad_metrics_textfile_names_the_key(tmp_path: Path, written: str, says: str) -> None:
    cfg = _config(tmp_path / "c.toml", metrics_textfile=written)
    message = _config_error(cfg)
    assert str(cfg) in message and "'metrics_textfile'" in message and says in message


def test_cli_bad_metrics_listen_exits_2_with_one_line(run_cli: Any) -> None:
    paths = run_cli("paths", env={"JANITOR_METRICS_LISTEN": "studio-1"})
    assert paths.returncode == 2
    line = one_line_error(paths.stderr)
    assert "JANITOR_METRICS_LISTEN" in line and "has no port" in line
