"""Where the janitor keeps its things, from flags, ``JANITOR_*`` variables and a TOML file.

Precedence, highest first: values passed in (CLI flags), environment variables
(``JANITOR_STATE_DIR``, ...), the config file, built-in defaults. The config file is the one named
by ``--config`` / ``JANITOR_CONFIG``, else ``config.toml`` in the user config dir if it exists
(``~/.config/space-janitor/config.toml`` on Linux,
``~/Library/Application Support/space-janitor/config.toml`` on macOS).
"""

from __future__ import annotations

import os
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from janitor.config.listen import ListenAddress, parse_listen
from janitor.config.paths import (
    APP_NAME,
    default_config_path,
    default_runtime_dir,
    default_state_dir,
    shipped_policy_path,
)
from janitor.errors import ConfigError
from janitor.sizes import MAX_DURATION_S

__all__ = ["APP_NAME", "Settings", "default_config_path", "shipped_policy_path"]


_config_values: ContextVar[dict[str, Any] | None] = ContextVar("_config_values", default=None)


def _default_log_dir() -> Path:
    return Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))


class _ConfigFileSource(PydanticBaseSettingsSource):
    """The TOML config file's values, read once by :meth:`Settings.load`."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return (_config_values.get() or {}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_config_values.get() or {})


class Settings(BaseSettings):
    """Resolved settings. Build with :meth:`Settings.load` so the config file is honoured."""

    model_config = SettingsConfigDict(
        env_prefix="JANITOR_", extra="forbid", validate_default=True, frozen=True
    )

    config: Path | None = Field(default=None, description="The config file that was read.")
    policy: Path | None = Field(
        default=None,
        description="Policy file; default: policy.toml in the config dir, else the shipped one.",
    )
    state_dir: Path = Field(
        default_factory=default_state_dir,
        description="The ledger (ledger.sqlite3), locks and ballast records; default: the user "
        "state dir, ~/.local/state/space-janitor on Linux, ~/Library/Application "
        "Support/space-janitor on macOS.",
    )
    runtime_dir: Path = Field(
        default_factory=default_runtime_dir,
        description="The daemon's socket (janitor.sock) and status.json; default: the user "
        "runtime dir, $XDG_RUNTIME_DIR/space-janitor on Linux, "
        "~/Library/Caches/TemporaryItems/space-janitor on macOS.",
    )
    log_dir: Path = Field(
        default_factory=_default_log_dir,
        description="daemon.log and guard.log; default: the user log dir, "
        "~/.local/state/space-janitor/log on Linux, ~/Library/Logs/space-janitor on macOS.",
    )
    default_ttl_s: float = Field(
        default=3600.0,
        gt=0,
        le=MAX_DURATION_S,
        description="TTL of a reservation made without one.",
    )
    lock_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=MAX_DURATION_S,
        description="How long a ledger write may wait for another writer.",
    )
    sample_interval_s: float = Field(
        default=2.0,
        gt=0,
        le=MAX_DURATION_S,
        description="Daemon: how often each volume's free space is sampled.",
    )
    sample_interval_low_s: float = Field(
        default=0.25,
        gt=0,
        le=MAX_DURATION_S,
        description="Daemon: how often free space is sampled while a volume is below free_low, "
        "or close enough to it that the fastest fill seen in the forecast window could take it "
        "there within two normal intervals (an outside writer can cross the floor and reach "
        "zero within one).",
    )
    sweep_interval_s: float = Field(
        default=300.0, gt=0, le=MAX_DURATION_S, description="Daemon: full sweeps."
    )
    reap_interval_s: float = Field(
        default=10.0,
        gt=0,
        le=MAX_DURATION_S,
        description="Daemon: ending reservations and pins of dead owners.",
    )
    debounce_s: float = Field(
        default=0.5,
        ge=0,
        le=MAX_DURATION_S,
        description="Daemon: quiet time after file events before a sweep.",
    )
    debounce_max_s: float = Field(
        default=2.0,
        gt=0,
        le=MAX_DURATION_S,
        description="Daemon: longest wait after the first file event.",
    )
    settle_s: float = Field(
        default=10.0,
        ge=0,
        le=MAX_DURATION_S,
        description="Daemon: a better level must hold this long to show.",
    )
    forecast_window_s: float = Field(
        default=600.0,
        gt=0,
        le=MAX_DURATION_S,
        description="Daemon: samples older than this are not fitted.",
    )
    guard_wait_s: float = Field(
        default=120.0,
        ge=0,
        le=86400,
        description="The guard: how long a job's first write waits for room that running jobs "
        "will free (0 refuses at once; the guard reads JANITOR_GUARD_WAIT_S at every call).",
    )
    http_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Daemon: also serve the API on 127.0.0.1:PORT (loopback only).",
    )
    metrics_listen: str | None = Field(
        default=None,
        description="Daemon: serve GET /metrics (nothing else) on this address, for a central "
        "Prometheus: HOST:PORT, [IPv6]:PORT, or :PORT for every interface.",
    )
    metrics_textfile: Path | None = Field(
        default=None,
        description="Daemon: keep the metrics in this .prom file too (an absolute path ending "
        "in .prom), for node_exporter's textfile collector (rewritten atomically every "
        "sample_interval_s).",
    )

    @field_validator("metrics_listen", mode="before")
    @classmethod
    def _listen(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None  # JANITOR_METRICS_LISTEN= turns it off
        if isinstance(value, str):
            return str(parse_listen(value))  # ValueError: one line naming the key
        return value

    @field_validator("metrics_textfile", mode="before")
    @classmethod
    def _textfile(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        if isinstance(value, str | os.PathLike):
            path = Path(os.path.expandvars(os.path.expanduser(os.fspath(value))))
            if not path.is_absolute():
                raise ValueError(f"{os.fspath(value)!r} is not an absolute path")
            if path.suffix != ".prom":
                raise ValueError(
                    f"{str(path)!r} does not end in .prom (node_exporter's textfile collector "
                    "reads only *.prom files)"
                )
            return path
        return value

    @model_validator(mode="after")
    def _ports_differ(self) -> Settings:
        addr = self.metrics_address
        if addr is not None and addr.port == self.http_port and _covers_loopback(addr.host):
            raise ValueError(
                f"metrics_listen {addr} and http_port {self.http_port} would share "
                "127.0.0.1's port; choose another port for one of them"
            )
        return self

    @field_validator("state_dir", "runtime_dir", "log_dir", "policy", "config", mode="after")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        return Path(os.path.expandvars(os.path.expanduser(str(value))))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _ConfigFileSource(settings_cls))

    #: What named ``policy`` when nothing named it directly (see :attr:`policy_origin`).
    _policy_origin: str | None = PrivateAttr(default=None)

    @property
    def policy_origin(self) -> str | None:
        """What named :attr:`policy` when no caller did: ``"JANITOR_POLICY"``, or ``"config
        file PATH"``; None when it was given by name (``--policy``, ``policy=``) or is the
        default. A policy file that is not there is reported with what to change, there."""
        return self._policy_origin

    def with_policy(self, policy: Path | str) -> Settings:
        """These settings with ``policy`` named directly."""
        named = self.model_copy(update={"policy": Path(policy)})
        named._policy_origin = None
        return named

    @property
    def ledger_path(self) -> Path:
        """``~/.local/state/space-janitor/ledger.sqlite3`` on Linux."""
        return self.state_dir / "ledger.sqlite3"

    @property
    def policy_path(self) -> Path:
        """The policy file in force: the chosen one, else the user's, else the shipped default."""
        if self.policy is not None:
            return self.policy
        user = default_config_path().parent / "policy.toml"
        return user if user.is_file() else shipped_policy_path()

    @property
    def status_path(self) -> Path:
        """The daemon's atomically replaced ``status.json`` in the runtime dir."""
        return self.runtime_dir / "status.json"

    @property
    def metrics_address(self) -> ListenAddress | None:
        """``metrics_listen`` parsed, or None when the metrics listener is off."""
        return None if self.metrics_listen is None else parse_listen(self.metrics_listen)

    @property
    def socket_path(self) -> Path:
        """The daemon's Unix socket, ``/run/user/1000/space-janitor/janitor.sock`` on Linux."""
        return self.runtime_dir / "janitor.sock"

    def for_a_run(self) -> Settings:
        """These settings for a run's own daemon (``janitor daemon --admission-only``): its
        socket alone; the loopback port, the metrics listener and the metrics file stay the
        user's daemon's."""
        return self.model_copy(
            update={"http_port": None, "metrics_listen": None, "metrics_textfile": None}
        )

    @classmethod
    def load(cls, config: Path | str | None = None, **overrides: Any) -> Settings:
        """Settings from ``overrides`` > ``JANITOR_*`` > the config file > defaults.

        Raises ConfigError naming the file and key when the config file is missing (if it was
        asked for by name), unreadable, not TOML, or holds a bad value.
        """
        overrides = {k: v for k, v in overrides.items() if v is not None}
        explicit = config if config is not None else os.environ.get("JANITOR_CONFIG") or None
        path = Path(os.path.expanduser(str(explicit))) if explicit else default_config_path()
        values: dict[str, Any] = {}
        if path.is_file() or explicit:
            try:
                with open(path, "rb") as fh:
                    values = tomllib.load(fh)
            except FileNotFoundError:
                raise ConfigError(
                    f"config file {path} does not exist; create it or drop --config/JANITOR_CONFIG"
                ) from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
            except OSError as exc:
                raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
            values["config"] = path
        token = _config_values.set(values)
        try:
            # The config's path must not come from JANITOR_CONFIG's env parsing twice.
            made = cls(**overrides, config=path if values else None)
        except ValidationError as exc:
            raise ConfigError(_describe(exc, path if values else None)) from None
        finally:
            _config_values.reset(token)
        if made.policy is not None and "policy" not in overrides:
            made._policy_origin = (
                "JANITOR_POLICY" if os.environ.get("JANITOR_POLICY") else f"config file {path}"
            )
        return made


def _covers_loopback(host: str) -> bool:
    """True when listening on ``host`` takes 127.0.0.1's port too."""
    return host in ("", "0.0.0.0", "::", "localhost") or host.startswith("127.")


def _describe(exc: ValidationError, path: Path | None) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    where = f"config file {path}" if path else "settings"
    if err["type"] == "extra_forbidden":
        return (
            f"{where}: unknown key {key!r}; see `janitor paths` and the docs' settings "
            "reference (docs/reference/settings.md) for valid keys"
        )
    msg = str(err["msg"]).removeprefix("Value error, ")  # our validators' own words
    if not err["loc"]:  # a rule across keys
        return f"{where}: {msg}"
    env = f" (or JANITOR_{key.upper()})"
    return f"{where}: key {key!r}{env}: {msg}"
