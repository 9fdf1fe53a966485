"""``sweep``, ``touch``, ``pin``, ``unpin``, ``emergency``: what goes, what stays, and when."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from janitor.cli.common import JsonOpt, lasting, open_janitor, owner, print_json, say
from janitor.errors import EXIT_BAD_INPUT, EXIT_PROBLEM, EXIT_TEMPFAIL

__all__ = ["emergency", "pin", "sweep", "touch", "unpin"]


def sweep(
    tree: Annotated[str | None, typer.Argument(help="Only this tree (default: all).")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Print the plan; delete nothing.")
    ] = False,
    no_pressure: Annotated[
        bool, typer.Option("--no-pressure", help="Skip volume-pressure eviction.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Evict what the policy says (quota, age, orphan, pressure) and report what was done.

    Exit 1 when a cache stays above its low watermark because too little could be evicted, or
    a tree could not be swept (its root is a symlink or a file); 75 when the ledger's disk is
    full, so what was to go could not be recorded and was not deleted.
    """
    from janitor.cli.progress import scan_progress

    lasting()  # a sweep of a big tree holds millions of objects
    jan = open_janitor()
    progress, stop = scan_progress()
    try:
        result = jan.sweep(tree, dry_run=dry_run, pressure=not no_pressure, progress=progress)
    finally:
        stop()
    data = result.as_dict()
    if as_json:
        print_json(data)
    else:
        from janitor.cli.layout import layout_width, screen
        from janitor.cli.view import render_sweep

        out = screen()
        for part in render_sweep(data, time.time(), layout_width(out)):
            out.print(part)
    for warning in result.warnings:
        say(f"warning: {warning}")
    if result.report.stopped is not None:  # the ledger could not record what was to go
        raise typer.Exit(EXIT_TEMPFAIL if result.report.stopped else EXIT_BAD_INPUT)
    if result.unswept or not all(t["reaches_target"] for t in data["trees"]):
        raise typer.Exit(EXIT_PROBLEM)


def touch(
    paths: Annotated[list[Path], typer.Argument(help="Cache files that were just used.")],
) -> None:
    """Record a use of each PATH, so LRU eviction keeps it longer."""
    open_janitor().touch(*paths)
    from janitor.humanize import plural

    say(f"touched {plural(len(paths), 'path')}")


def pin(
    path: Annotated[Path, typer.Argument(help="Cache file or folder to protect.")],
    owner_pid: Annotated[
        int | None,
        typer.Option(help="Process whose exit ends the pin (default: the one that ran janitor)."),
    ] = None,
    ttl: Annotated[str | None, typer.Option(help="End the pin after this long anyway.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Keep PATH from being evicted while the owner process lives; prints the pin id."""
    who = owner(owner_pid)
    p = open_janitor().pin(path, owner_pid=who.pid, ttl=ttl)
    if as_json:
        print_json(p.info.as_dict())
    else:
        print(p.id)
    say(
        f"pinned {p.info.path} for pid {p.info.owner_pid} ({who.description}); "
        f"`janitor unpin {p.id}` to end it"
    )
    if who.warning:
        say(f"warning: {who.warning}")


def unpin(
    key: Annotated[str, typer.Argument(metavar="ID|PATH", help="Pin id, or a pinned path.")],
) -> None:
    """End a pin (by id), or every pin on a path."""
    ended = open_janitor().unpin(key)
    say(f"unpinned {', '.join(p.id for p in ended)}")


def emergency(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Say what would be freed; delete nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """The disk is full: free ballast, then evict caches, writing nothing to the ledger."""
    lasting()  # a sweep, like `janitor sweep`
    from janitor.humanize import format_size, plural

    result = open_janitor().emergency(dry_run=dry_run)
    if as_json:
        print_json(
            {
                "dry_run": dry_run,
                "ballast": [{"path": p, "bytes": n} for p, n in result.ballast],
                "evicted_bytes": result.report.deleted_bytes,
                "evicted_units": result.report.deleted_units,
                "planned": [o.item.unit.path for o in result.report.outcomes],
                "freed_bytes": result.freed,
            }
        )
    verb = "would free" if dry_run else "freed"
    ballast = sum(n for _, n in result.ballast)
    if dry_run:
        units = len(result.report.outcomes)
        evicted = sum(o.item.size for o in result.report.outcomes)
    else:
        units, evicted = result.report.deleted_units, result.report.deleted_bytes
    say(
        f"{verb} {format_size(ballast)} of ballast and {format_size(evicted)} "
        f"in {plural(units, 'cache unit')}"
    )
