"""``status``, ``log``, ``paths``: what the janitor sees, did, and where it keeps things."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from janitor.cli.common import (
    G,
    JsonOpt,
    at_least,
    lasting,
    open_janitor,
    open_ledger,
    print_json,
    say,
    settings,
)

if TYPE_CHECKING:
    from rich.console import Console

    from janitor.core import Janitor
    from janitor.ledger.db import Ledger

__all__ = ["log_", "paths", "space", "status"]


def status(
    as_json: JsonOpt = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            "-w",
            help="Refresh until Ctrl-C: in place on a terminal; into a pipe or a file, each "
            "screen after the last, under its time.",
        ),
    ] = False,
    interval: Annotated[
        float, typer.Option(help="Seconds between refreshes.", callback=at_least(0.2))
    ] = 2.0,
) -> None:
    """Volumes (free, floor, reserved, headroom, level), trees and live reservations."""
    jan = open_janitor()
    if as_json:
        print_json(jan.status().as_dict())
        _read_as_recorded(jan.ledger)
        return
    from janitor.cli.layout import layout_width, screen
    from janitor.cli.view import render_status

    out = screen()
    if not watch:
        out.print(render_status(jan.status(), jan.samples(), layout_width(out)))
        _read_as_recorded(jan.ledger)
        return
    lasting()
    try:
        # By what screen() found (a real terminal's width), not rich's is_terminal, which
        # FORCE_COLOR or TTY_COMPATIBLE turn on for a pipe: redrawn in place there, a pipe
        # would show nothing until the watch ended.
        if layout_width(out) is not None:
            _watch_in_place(jan, out, interval)
        else:
            _watch_as_log(jan, out, interval)
    except KeyboardInterrupt:  # Ctrl-C is how a watch ends: exit 0, no traceback
        pass


def _watch_in_place(jan: Janitor, out: Console, interval: float) -> None:
    """A terminal: one screen, redrawn in place every ``interval`` seconds."""
    from rich.live import Live

    from janitor.cli.layout import layout_width
    from janitor.cli.view import render_status

    with Live(console=out, auto_refresh=False, screen=False) as live:
        while True:
            live.update(render_status(jan.status(), jan.samples(), layout_width(out)), refresh=True)
            time.sleep(interval)


def _watch_as_log(jan: Janitor, out: Console, interval: float) -> None:
    """A pipe or a file: each screen whole, after a line with its time, as ``top -b`` and
    ``vmstat 1`` write; redrawn in place it would show nothing until the watch ended (and
    Ctrl-C ends the reader of a pipe too)."""
    from janitor.cli.view import render_status

    while True:
        out.print(time.strftime("%Y-%m-%d %H:%M:%S %Z"), highlight=False)
        out.print(render_status(jan.status(), jan.samples(), None))
        out.print()
        out.file.flush()
        time.sleep(interval)


def space(
    as_json: JsonOpt = False,
    fresh: Annotated[
        bool,
        typer.Option("--fresh", help="Measure now, even when the daemon has a recent report."),
    ] = False,
) -> None:
    """Why is my disk full: what takes each volume's space, largest first.

    Each tree (and what a sweep would free there now), the pipeline's folders that no tree
    manages (models, a media cache elsewhere), TMPDIR's other files, and the rest of the
    volume as one row. Measured now, or the daemon's report of the last minutes (its age
    shown); never crossing into other mounts; changes nothing.
    """
    from janitor.cli.quick import SpaceArgs
    from janitor.cli.quick import space as run

    config, policy = (str(p) if p is not None else None for p in (G.config, G.policy))
    code = run(SpaceArgs(config, policy, as_json, fresh))
    if code:
        raise typer.Exit(code)


def log_(
    since: Annotated[
        str | None, typer.Option(help="Only entries newer than this (1h, 2d).")
    ] = None,
    event: Annotated[
        list[str] | None,
        typer.Option(help="Only these events: grant, refuse, release, delete, ..."),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the last N entries.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """What the janitor granted, refused, released and deleted, oldest first."""
    from janitor.sizes import format_size, parse_duration

    # The log needs no policy: it reads the ledger alone.
    ledger = open_ledger(settings())
    cutoff = None if since is None else time.time() - parse_duration(since, what="--since")
    entries = ledger.entries(since=cutoff, events=tuple(event or ()), limit=limit)
    if as_json:
        print_json(
            [
                {
                    "id": e.id,
                    "time": e.ts,
                    "event": e.event,
                    "tree": e.tree,
                    "reservation": e.reservation,
                    "bytes": e.bytes,
                    "path": e.path,
                    "detail": e.detail,
                }
                for e in entries
            ]
        )
        return
    for e in entries:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.ts))
        size = format_size(e.bytes) if e.bytes is not None else ""
        what = " ".join(x for x in (e.tree or "", e.reservation or "", size, e.path or "") if x)
        extra = e.detail.get("reason") or e.detail.get("why") or ""
        if e.event == "await":  # a cache entry now awaiting use: by whom, for how long
            extra = f"by pid {e.detail.get('owner_pid')}, at most {_ttl(e.detail.get('ttl'))}"
        if e.event == "deleting":  # its batch never confirmed: cut short by a crash or a kill
            extra = f"{extra}; being deleted when the janitor stopped" if extra else extra
        print(f"{stamp}  {e.event:<8} {what}" + (f"  ({extra})" if extra else ""))
    _read_as_recorded(ledger)


def _read_as_recorded(ledger: Ledger) -> None:
    """One note when the ledger's disk is full: what was shown is what it holds, and nothing
    new can be recorded there (a read-only state dir is read so always, without a note)."""
    from janitor.errors import LedgerFull

    if isinstance(ledger.read_only, LedgerFull):
        say(
            f"note: the ledger's disk is full ({ledger.path.parent}): this is what it holds; "
            "nothing new can be recorded there (no grant, no deletion) until space is freed"
        )


def _ttl(seconds: object) -> str:
    from janitor.humanize import format_duration

    return format_duration(float(seconds)) if isinstance(seconds, int | float) else "?"


def paths(as_json: JsonOpt = False) -> None:
    """Every path the janitor resolved: config, policy, state, ledger, runtime, socket, log."""
    from janitor.config.settings import default_config_path

    s = settings()
    data = {
        "config": str(s.config or default_config_path()),
        "config_exists": s.config is not None,
        "policy": str(s.policy_path),
        "state_dir": str(s.state_dir),
        "ledger": str(s.ledger_path),
        "runtime_dir": str(s.runtime_dir),
        "socket": str(s.socket_path),
        "log_dir": str(s.log_dir),
    }
    if as_json:
        print_json(data)
        return
    width = max(len(k) for k in data)
    for key, value in data.items():
        if key != "config_exists":
            note = " (not present)" if key == "config" and not data["config_exists"] else ""
            print(f"{key:<{width}}  {value}{note}")
