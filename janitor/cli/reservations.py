"""``reserve``, ``release``, ``renew``, ``grow``, ``check``: reservations from a shell script."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from janitor.cli.common import JsonOpt, fail, open_janitor, owner, print_json, say
from janitor.errors import EXIT_PROBLEM, EXIT_TEMPFAIL

if TYPE_CHECKING:
    from janitor.core import Janitor

__all__ = ["check", "grow", "release", "renew", "reserve"]


def reserve(
    tree: Annotated[str, typer.Argument(help="Tree whose volume the bytes are written to.")],
    size: Annotated[str, typer.Argument(help="Bytes to reserve: 500M, 2G, 1.5GiB, 2048.")],
    path: Annotated[
        Path | None, typer.Option(help="File or folder the bytes go to (inside the tree).")
    ] = None,
    job: Annotated[str | None, typer.Option(help="Job label shown in status and logs.")] = None,
    ttl: Annotated[
        str | None, typer.Option(help="Lifetime before it lapses: 30m, 2h (default 1h).")
    ] = None,
    wait: Annotated[str | None, typer.Option(help="Retry this long (2m) before refusing.")] = None,
    owner_pid: Annotated[
        int | None,
        typer.Option(help="Process whose exit ends it (default: the one that ran janitor)."),
    ] = None,
    no_evict: Annotated[
        bool, typer.Option("--no-evict", help="Refuse rather than evict caches to make room.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Reserve SIZE bytes on TREE's volume; prints the reservation id (exit 75 if refused).

    When it does not fit, least-recently-used cache entries on the same volume are evicted
    first to cover the shortfall (unless --no-evict).
    """
    from janitor.errors import ReservationRefused
    from janitor.sizes import format_duration, format_size

    jan = open_janitor()
    who = owner(owner_pid)
    try:
        r = jan.reserve(
            tree,
            size,
            path=path,
            job=job,
            ttl=ttl,
            wait=wait,
            owner_pid=who.pid,
            evict=not no_evict,
        )
    except ReservationRefused as exc:
        if as_json:
            print_json(exc.as_dict())
        fail(str(exc), EXIT_TEMPFAIL)
    info = r.info
    if as_json:
        print_json(info.as_dict())
    else:
        print(info.id)
    say(
        f"reserved {format_size(info.bytes)} on {tree!r} ({info.volume}) for pid "
        f"{info.owner_pid} ({who.description}), lapses in "
        f"{format_duration(info.expires - info.created)}; `janitor release {info.id}` when done"
    )
    if who.warning:
        say(f"warning: {who.warning}")


def release(
    reservation_id: Annotated[str, typer.Argument(metavar="ID", help="Reservation id.")],
    as_json: JsonOpt = False,
) -> None:
    """End a reservation now."""
    from janitor.sizes import format_size

    info = open_janitor().release(reservation_id)
    if as_json:
        print_json(info.as_dict())
    say(f"released {info.id} ({format_size(info.bytes)} on {info.tree!r})")


def renew(
    reservation_id: Annotated[str, typer.Argument(metavar="ID", help="Reservation id.")],
    ttl: Annotated[str | None, typer.Option(help="New lifetime from now (default 1h).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Push a live reservation's expiry to now + TTL."""
    from janitor.sizes import format_duration

    info = open_janitor().renew(reservation_id, ttl)
    if as_json:
        print_json(info.as_dict())
    say(f"renewed {info.id}; lapses in {format_duration(info.expires - time.time())}")


def grow(
    reservation_id: Annotated[str, typer.Argument(metavar="ID", help="Reservation id.")],
    size: Annotated[str, typer.Argument(help="New total size: 3G, 1.5GiB, bytes.")],
    as_json: JsonOpt = False,
) -> None:
    """Raise a live reservation to SIZE in all, if the rest fits (exit 75 if refused).

    For a writer that learns its size late: reserve what is known, grow when it is not enough.
    """
    from janitor.errors import ReservationRefused
    from janitor.sizes import format_size

    jan = open_janitor()
    try:
        info = jan.grow(reservation_id, size)
    except ReservationRefused as exc:
        if as_json:
            print_json(exc.as_dict())
        fail(f"cannot grow {reservation_id}: {exc}", EXIT_TEMPFAIL)
    if as_json:
        print_json(info.as_dict())
    say(f"grew {info.id} to {format_size(info.bytes)} on {info.tree!r} ({info.volume})")


def check(
    tree: Annotated[str | None, typer.Argument(help="Tree whose volume would be written.")] = None,
    size: Annotated[str | None, typer.Argument(help="Bytes: 500M, 2G, 1.5GiB, 2048.")] = None,
    path: Annotated[Path | None, typer.Option(help="File or folder inside the tree.")] = None,
    reservation: Annotated[
        str | None,
        typer.Option("--reservation", "-r", help="Instead: is this reservation at risk?"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Would SIZE be granted now? Exit 0 yes, 1 yes but the volume is low, 75 no.

    With --reservation ID: exit 75 when the reservation's volume is critical (stop the job),
    0 otherwise.
    """
    from janitor.sizes import format_size

    jan = open_janitor()
    if reservation is not None:
        _check_reservation(jan, reservation, as_json)
        return
    if tree is None or size is None:
        fail("give TREE and SIZE, or --reservation ID", 2)
    d = jan.would_fit(tree, size, path=path)
    level, reason = d.level, d.reason
    if as_json:
        print_json(d.as_dict())
    if not d.fits:
        say(str(d.refusal()).replace("refused", "would refuse", 1))
        raise typer.Exit(EXIT_TEMPFAIL)
    say(
        f"{format_size(d.requested)} fits on {tree!r} ({d.volume}): "
        f"{format_size(d.available)} available"
        + (f"; but the volume is at {level}: {reason}" if level != "ok" else "")
    )
    if level != "ok":
        raise typer.Exit(EXIT_PROBLEM)


def _check_reservation(jan: Janitor, rid: str, as_json: bool) -> None:
    from janitor.errors import SpaceRisk

    info = jan.get(rid)
    risk = None
    if info.state == "live":
        try:
            jan.check_risk(info)
        except SpaceRisk as exc:
            risk = str(exc)
    if as_json:
        print_json({**info.as_dict(), "at_risk": risk})
    if info.state != "live":
        fail(f"reservation {rid} is {info.state}, not live", 2)
    if risk is not None:
        say(risk)
        raise typer.Exit(EXIT_TEMPFAIL)
    say(f"reservation {rid} is live and not at risk")
