"""What ``janitor ... --help`` shows: a word for each option's value, and prose that flows.

Left alone, typer labels a value by its Python type (``<bool>``, ``<list[str]>``, ``<int
range> [x>=1]``) and, in the rich help, keeps a docstring's line breaks, so a paragraph
wraps raggedly. :func:`finish_help` gives every parameter of the command tree a label a person
reads as in a man page (``--concurrency N``, ``--policy FILE``; a flag shows none) and joins
each paragraph of a command's help into one line for the terminal to wrap. Each parameter's
label comes from :data:`LABELS` by its name, so a new option without one fails
``tests/cli/test_cli_help.py`` rather than showing a type. Lower bounds are checked by the
commands themselves (:func:`janitor.cli.common.at_least`), so no range notation shows either.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ARGUMENTS", "LABELS", "finish_help", "flow", "label", "walk"]

#: The label of each option that takes a value, by its long name. An argument's label is its
#: name in capitals (``TREE``, ``SIZE``) unless :data:`ARGUMENTS` says otherwise; a flag has none.
LABELS: dict[str, str] = {
    "--config": "FILE",
    "--policy": "FILE",
    "--path": "PATH",
    "--media": "PATH",
    "--dir": "DIR",
    "--job": "LABEL",
    "--ttl": "DURATION",
    "--wait": "DURATION",
    "--poll": "DURATION",
    "--grace": "DURATION",
    "--since": "DURATION",
    "--interval": "SECONDS",
    "--owner-pid": "PID",
    "--reservation": "ID",
    "--event": "EVENT",
    "--limit": "N",
    "--lines": "N",
    "--concurrency": "N",
    "--channels": "N",
    "--rate": "HZ",
    "--margin": "PERCENT",
    "--format": "wav16|f32",
    "--platform": "launchd|systemd",
    "--front-end": "compiled|python",
}
ARGUMENTS: dict[str, str] = {"paths": "PATH", "reservation_id": "ID"}

_BREAK = re.compile(r"(?<!\n)\n(?!\n)")


def flow(text: str | None) -> str | None:
    """``text`` with each paragraph on one line (paragraphs stay apart, and one that starts
    with ``\\b``, click's mark for a preformatted block, keeps its lines)."""
    if not text:
        return text
    paragraphs = text.split("\n\n")
    return "\n\n".join(p if p.lstrip().startswith("\b") else _BREAK.sub(" ", p) for p in paragraphs)


def walk(command: Any, path: tuple[str, ...] = ("janitor",)) -> Any:
    """Every (command path, command) of the tree under ``command``, the root first."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from walk(sub, (*path, name))


def label(param: Any) -> str:
    """The label ``param`` shows in help: ``""`` for a flag; raises KeyError for an option
    that takes a value and has none in :data:`LABELS` (the help test names it)."""
    if getattr(param, "param_type_name", "") == "argument":
        return ARGUMENTS.get(param.name or "", (param.name or "").upper())
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    long = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
    return LABELS[long[0]]


def finish_help(root: Any) -> Any:
    """Label every parameter under ``root`` that has no label of its own, and flow each
    command's help; returns ``root``. Run on the command tree before it parses anything."""
    for _, command in walk(root):
        command.help = flow(command.help)
        for param in command.params:
            _finish(param)
        _finish_help_option(command)
    return root


def _finish(param: Any) -> None:
    if param.metavar is None:
        try:
            param.metavar = label(param)
        except KeyError:
            param.metavar = (param.name or "value").upper()  # tests/cli/test_cli_help.py fails
    if getattr(param, "param_type_name", "") == "argument":
        # An argument's label already stands in its name column; typer would print its
        # Python type beside it (``<str>``), which says nothing more.
        param.display_type_rich = lambda ctx: None


def _finish_help_option(command: Any) -> None:
    """``-h, --help`` is made on first use, per command: label it (none) when it is."""
    make = getattr(command, "get_help_option", None)
    if make is None:
        return

    def get_help_option(ctx: Any) -> Any:
        option = make(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option

    command.get_help_option = get_help_option
