"""The root options (``--config``, ``--policy``, ``--version``) after the command's name too.

People write ``janitor status --policy p.toml`` as often as ``janitor --policy p.toml status``.
Before click parses the command line, :func:`hoist` moves each root option found after the
command's name, with its value, to just before that name, so both read the same (and a later
one still wins over an earlier one, as click takes the last). It never moves a token from
``--`` on, nor one from the command that ``janitor run`` runs (run's options end where its
command starts), nor the value of the command's own option, nor an option the command has
a meaning for itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["hoist", "options"]


def options(command: Any) -> dict[str, bool]:
    """Each option string of ``command`` (``--ttl``, ``-n``) -> whether it takes a value."""
    found: dict[str, bool] = {}
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") != "option":
            continue
        takes = not (getattr(param, "is_flag", False) or getattr(param, "count", False))
        for opt in (*param.opts, *param.secondary_opts):
            found[opt] = takes
    return found


def _interspersed(command: Any) -> bool:
    """False for a command whose options end at its first argument (``run``)."""
    default = getattr(command, "allow_interspersed_args", True)
    return bool(
        (getattr(command, "context_settings", None) or {}).get("allow_interspersed_args", default)
    )


def _name(token: str) -> str:
    return token.split("=", 1)[0] if token.startswith("--") else token


def hoist(root: Any, argv: Sequence[str]) -> list[str]:
    """``argv`` with the root options that follow the command's name moved before it."""
    args = list(argv)
    globals_ = options(root)
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        takes = globals_.get(_name(args[i]), False) and "=" not in args[i]
        i += 2 if takes else 1
    start = i
    command = root
    while i < len(args) and args[i] in getattr(command, "commands", {}):
        command = command.commands[args[i]]
        i += 1
    if i == start or getattr(command, "commands", None):
        return args  # no command, or a group without its command: click says what is wrong
    end = i
    own = options(command)
    interspersed = _interspersed(command)
    moved: list[str] = []
    rest: list[str] = []
    while i < len(args):
        token = args[i]
        if token == "--":
            rest.extend(args[i:])
            break
        if token.startswith("-") and len(token) > 1:
            name = _name(token)
            inline = "=" in token and token.startswith("--")
            if name in globals_ and name not in own:
                take = 2 if globals_[name] and not inline else 1
                moved.extend(args[i : i + take])
                i += take
                continue
            take = 2 if own.get(name, False) and not inline else 1
            rest.extend(args[i : i + take])
            i += take
            continue
        if not interspersed:  # the command `run` runs, and everything after it, is its own
            rest.extend(args[i:])
            break
        rest.append(token)
        i += 1
    return args[:start] + moved + args[start:end] + rest
