"""Where a policy's paths point and which policy file is in force, without pydantic.

These are the parts of ``janitor.config.policy`` and ``janitor.config.settings`` that a command
needs before it has loaded either (``janitor space`` starts measuring folders while the rest of
the janitor is still being imported: ``janitor.cli.early``): path expansion, the default config
file, the shipped policy. Both modules re-export them; the rules live here only.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "APP_NAME",
    "default_cache_dir",
    "default_config_path",
    "default_runtime_dir",
    "default_state_dir",
    "expand_path",
    "native_build_dir",
    "native_dir",
    "shipped_policy_path",
]

APP_NAME = "space-janitor"

_PLACEHOLDER_RE = re.compile(r"(?<!\$)\{([a-z_]+)\}")
#: ``${VAR}`` or ``${VAR:-fallback}`` with no ``${`` inside: expanded innermost first, so a
#: fallback may hold another (``${HF_HUB_CACHE:-${HF_HOME:-~/.cache/huggingface}/hub}``).
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-((?:(?!\$\{)[^}])*))?\}")


def default_config_path() -> Path:
    """``~/.config/space-janitor/config.toml`` on Linux; the platform's user config dir."""
    import platformdirs

    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)) / "config.toml"


def default_state_dir() -> Path:
    """``~/.local/state/space-janitor`` on Linux: the ledger, locks and ballast records."""
    import platformdirs

    return Path(platformdirs.user_state_dir(APP_NAME, appauthor=False))


def default_cache_dir() -> Path:
    """``~/.cache/space-janitor`` on Linux: what can be worked out again (the probe cache)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def default_runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/space-janitor`` on Linux: the daemon's socket and status file."""
    import warnings

    import platformdirs

    # Without XDG_RUNTIME_DIR (root shells, containers) platformdirs warns and falls back to
    # /tmp/runtime-$UID; that fallback is fine for a socket, so the warning is noise here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_runtime_dir(APP_NAME, appauthor=False))


def native_build_dir() -> Path:
    """Where the janitor builds its C helpers (``janitor/native``: the guard's front end, the
    size walk of ``janitor space``), once per version: ``JANITOR_NATIVE_DIR``, else ``native`` in
    the user data dir (``~/.local/share/space-janitor/native`` on Linux, ``~/Library/Application
    Support/space-janitor/native`` on macOS)."""
    given = os.environ.get("JANITOR_NATIVE_DIR", "")
    if given:
        return Path(os.path.abspath(os.path.expanduser(given)))
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "native"


def native_dir() -> Path | None:
    """:func:`native_build_dir` for ``janitor space``'s walker; None when ``JANITOR_NATIVE=0``:
    the Python walk only."""
    if os.environ.get("JANITOR_NATIVE", "") == "0":
        return None
    return native_build_dir()


def shipped_policy_path() -> Path:
    """The default policy, ``batchalign3.toml``, as installed inside the package (or the repo)."""
    here = Path(__file__).resolve().parent.parent  # the janitor package
    for candidate in (
        here / "policies" / "batchalign3.toml",
        here.parent / "policies" / "batchalign3.toml",
    ):
        if candidate.is_file():
            return candidate
    return here / "policies" / "batchalign3.toml"


def expand_path(raw: str) -> Path:
    """Expand ``${VAR:-fallback}``, ``{user_data_dir}``-style placeholders and ``~``; absolute.

    ``"${BATCHALIGN_MEDIA_CACHE_DIR:-{user_data_dir}/batchalign3/media_cache}"`` is
    ``~/.local/share/batchalign3/media_cache`` on Linux when the variable is unset, and
    ``~/Library/Application Support/batchalign3/media_cache`` on macOS.
    """

    def env(m: re.Match[str]) -> str:
        name, fallback = m.group(1), m.group(2)
        value = os.environ.get(name)
        if value:
            return value
        if fallback is None:
            raise ValueError(f"environment variable {name} is not set (write ${{{name}:-...}})")
        return fallback

    # Placeholders first, so a fallback may use them; a variable's value is taken verbatim.
    text = _PLACEHOLDER_RE.sub(_placeholder, raw)
    while True:
        expanded = _ENV_RE.sub(env, text)
        if expanded == text:
            break
        text = expanded
    path = Path(os.path.expanduser(text))
    if not path.is_absolute():
        raise ValueError("not an absolute path; start it with /, ~ or a placeholder such as {home}")
    return Path(os.path.normpath(path))


def _placeholder(m: re.Match[str]) -> str:
    import platformdirs

    name = m.group(1)
    table: dict[str, Callable[[], str]] = {
        "user_data_dir": platformdirs.user_data_dir,
        "user_cache_dir": platformdirs.user_cache_dir,
        "user_config_dir": platformdirs.user_config_dir,
        "tmp": tempfile.gettempdir,
        "home": lambda: str(Path.home()),
    }
    if name not in table:
        raise ValueError(f"unknown placeholder {{{name}}}; use one of {', '.join(sorted(table))}")
    return str(table[name]())
