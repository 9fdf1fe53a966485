"""The `janitor` command: parses, calls the library, prints. No logic of its own lives here.

Exit codes: 0 ok; 1 ran and found a problem; 2 bad input or configuration; 75 refused or stopped
for lack of space (EX_TEMPFAIL). Messages go to stderr; data (ids, tables, JSON) to stdout.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from janitor.errors import EXIT_PROBLEM, EXIT_TEMPFAIL, JanitorError

if TYPE_CHECKING:
    from janitor.config.settings import Settings
    from janitor.core import Janitor
    from janitor.ledger.db import Ledger

__all__ = ["app", "main"]

app = typer.Typer(
    name="janitor",
    help="Keep caches within quotas, temp trees clean, and reserve disk space before writing.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
policy_app = typer.Typer(help="Show or validate policy files.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


class _Global:
    config: Path | None = None
    policy: Path | None = None

    def __init__(self) -> None:
        #: Ledgers this command opened, closed when it ends: the process exits without a last
        #: garbage collection (main), so nothing else would close them, and closing the last
        #: connection folds SQLite's WAL back into the ledger file.
        self.ledgers: list[Ledger] = []


_G = _Global()

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (shape in the README).")]


def _say(message: str) -> None:
    print(f"janitor: {message}", file=sys.stderr)


def _fail(message: str, code: int) -> NoReturn:
    _say(f"error: {message}")
    raise typer.Exit(code)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def _console() -> Any:
    """A rich console for stdout; piped, it never truncates ids and paths to 80 columns."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=1000)
    return console


def _janitor() -> Janitor:
    from janitor.core import Janitor

    jan = Janitor.from_settings(config=_G.config, policy=_G.policy)
    _G.ledgers.append(jan.ledger)
    return jan


def _ledger(settings: Settings) -> Ledger:
    from janitor.ledger.db import Ledger

    ledger = Ledger(settings.ledger_path, lock_timeout=settings.lock_timeout_s)
    _G.ledgers.append(ledger)
    return ledger


def _version(value: bool) -> None:
    if value:
        from janitor import __version__

        print(f"space-janitor {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Config file (default: config.toml in the config dir).",
            envvar="JANITOR_CONFIG",
            show_envvar=True,
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="Policy file (default: the shipped batchalign3 policy).",
            envvar="JANITOR_POLICY",
            show_envvar=True,
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    _G.config = config
    _G.policy = policy


# -- reservations ----------------------------------------------------------------------------


@app.command(context_settings={"ignore_unknown_options": True})
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

    jan = _janitor()
    owner = _owner(owner_pid)
    try:
        r = jan.reserve(
            tree,
            size,
            path=path,
            job=job,
            ttl=ttl,
            wait=wait,
            owner_pid=owner.pid,
            evict=not no_evict,
        )
    except ReservationRefused as exc:
        if as_json:
            _print_json(exc.as_dict())
        _fail(str(exc), EXIT_TEMPFAIL)
    info = r.info
    if as_json:
        _print_json(info.as_dict())
    else:
        print(info.id)
    _say(
        f"reserved {format_size(info.bytes)} on {tree!r} ({info.volume}) for pid "
        f"{info.owner_pid} ({owner.description}), lapses in "
        f"{format_duration(info.expires - info.created)}; `janitor release {info.id}` when done"
    )
    if owner.warning:
        _say(f"warning: {owner.warning}")


def _owner(owner_pid: int | None) -> Any:
    """The owner of a reservation or pin made here: ``--owner-pid``, else the process that ran
    janitor, past the shells and launchers that exit with it (janitor.host.owner.choose_owner)."""
    from janitor.host.owner import Owner, choose_owner, process_info, process_start

    if owner_pid is None:
        return choose_owner()
    proc = process_info(owner_pid)
    return Owner(owner_pid, process_start(owner_pid), proc.describe() if proc else "?")


@app.command()
def release(
    reservation_id: Annotated[str, typer.Argument(metavar="ID", help="Reservation id.")],
    as_json: JsonOpt = False,
) -> None:
    """End a reservation now."""
    from janitor.sizes import format_size

    info = _janitor().release(reservation_id)
    if as_json:
        _print_json(info.as_dict())
    _say(f"released {info.id} ({format_size(info.bytes)} on {info.tree!r})")


@app.command()
def renew(
    reservation_id: Annotated[str, typer.Argument(metavar="ID", help="Reservation id.")],
    ttl: Annotated[str | None, typer.Option(help="New lifetime from now (default 1h).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Push a live reservation's expiry to now + TTL."""
    from janitor.sizes import format_duration

    jan = _janitor()
    info = jan.renew(reservation_id, ttl)
    if as_json:
        _print_json(info.as_dict())
    import time

    _say(f"renewed {info.id}; lapses in {format_duration(info.expires - time.time())}")


@app.command()
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

    jan = _janitor()
    try:
        info = jan.grow(reservation_id, size)
    except ReservationRefused as exc:
        if as_json:
            _print_json(exc.as_dict())
        _fail(f"cannot grow {reservation_id}: {exc}", EXIT_TEMPFAIL)
    if as_json:
        _print_json(info.as_dict())
    _say(f"grew {info.id} to {format_size(info.bytes)} on {info.tree!r} ({info.volume})")


@app.command(context_settings={"ignore_unknown_options": True})
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
    from janitor.status import level_of

    jan = _janitor()
    if reservation is not None:
        _check_reservation(jan, reservation, as_json)
        return
    if tree is None or size is None:
        _fail("give TREE and SIZE, or --reservation ID", 2)
    d = jan.check(tree, size, path=path)
    vol = jan.policy.volume_policy(d.device)
    from janitor.host.space import volume_stats

    _, free_low, _ = vol.numbers(volume_stats(jan.policy.tree(tree).path).total)
    level, reason = level_of(d.free, d.floor, free_low)
    if as_json:
        _print_json({**d.as_dict(), "level": level})
    if not d.fits:
        _say(str(d.refusal()).replace("refused", "would refuse", 1))
        raise typer.Exit(EXIT_TEMPFAIL)
    _say(
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
        _print_json({**info.as_dict(), "at_risk": risk})
    if info.state != "live":
        _fail(f"reservation {rid} is {info.state}, not live", 2)
    if risk is not None:
        _say(risk)
        raise typer.Exit(EXIT_TEMPFAIL)
    _say(f"reservation {rid} is live and not at risk")


# -- status ----------------------------------------------------------------------------------


@app.command()
def status(
    as_json: JsonOpt = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Refresh in place until Ctrl-C.")
    ] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.", min=0.2)] = 2.0,
) -> None:
    """Volumes (free, floor, reserved, headroom, level), trees and live reservations."""
    jan = _janitor()
    if as_json:
        _print_json(jan.status().as_dict())
        return
    from janitor.cli.view import render_status

    console = _console()
    if not watch:
        console.print(render_status(jan.status(), jan.samples()))
        return
    _lasting()
    import time

    from rich.live import Live

    try:
        with Live(console=console, auto_refresh=False, screen=False) as live:
            while True:
                live.update(render_status(jan.status(), jan.samples()), refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        pass


@app.command()
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

    Exit 1 when a cache stays above its low watermark because too little could be evicted.
    """
    _lasting()  # a sweep of a big tree holds millions of objects
    jan = _janitor()
    progress, stop = _progress()
    try:
        result = jan.sweep(tree, dry_run=dry_run, pressure=not no_pressure, progress=progress)
    finally:
        stop()
    data = result.as_dict()
    if as_json:
        _print_json(data)
    else:
        _render_sweep(data)
    for warning in result.report.warnings:
        _say(f"warning: {warning}")
    if not all(t["reaches_target"] for t in data["trees"]):
        raise typer.Exit(EXIT_PROBLEM)


def _progress() -> tuple[Any, Any]:
    """A rich progress line on a terminal's stderr while scanning; nothing otherwise."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn

    bar = Progress(
        SpinnerColumn(),
        TextColumn("scanning {task.fields[tree]}: {task.completed:,} entries"),
        console=Console(stderr=True),
        transient=True,
    )
    tasks: dict[str, Any] = {}
    bar.start()

    def update(tree: str, n: int) -> None:
        if tree not in tasks:
            tasks[tree] = bar.add_task("scan", tree=tree, total=None)
        bar.update(tasks[tree], completed=n)

    return update, bar.stop


def _render_sweep(data: dict[str, Any]) -> None:
    import time

    from rich.console import Console
    from rich.table import Table

    from janitor.sizes import format_duration, format_size

    console = Console()
    now = time.time()
    if data["items"]:
        title = "Plan (dry run: nothing deleted)" if data["dry_run"] else "Swept"
        table = Table(title=title, title_justify="left")
        for col in ("tree", "why", "size", "last use", "result", "path"):
            table.add_column(col, justify="right" if col in ("size", "last use") else "left")
        for it in data["items"]:
            if data["dry_run"]:
                result = "would delete"
            elif it["deleted"]:
                result = "[green]deleted[/]"
            else:
                result = f"[yellow]kept: {it['skipped']}[/]"
            table.add_row(
                it["tree"],
                it["reason"],
                format_size(it["bytes"]),
                format_duration(now - it["last_use"]) + " ago",
                result,
                it["path"],
            )
        console.print(table)
    for t in data["trees"]:
        kept = ", ".join(f"{v} {k}" for k, v in t["kept"].items())
        quota = f" of {format_size(t['quota'])}" if t["quota"] is not None else ""
        line = (
            f"{t['tree']}: {format_size(t['usage'])}{quota} in {t['units']} units; "
            f"{'would free' if data['dry_run'] else 'planned'} {format_size(t['planned'])}"
        )
        if kept:
            line += f"; kept {kept}"
        if not t["reaches_target"]:
            line += " [bold red](cannot reach the low watermark)[/]"
        console.print(line)
    if not data["dry_run"]:
        console.print(
            f"deleted {format_size(data['deleted_bytes'])}, free space grew by "
            f"{format_size(data['reclaimed_bytes'])}"
        )


@app.command("log")
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
    import time

    from janitor.config.settings import Settings
    from janitor.sizes import format_size, parse_duration

    # The log needs no policy: it reads the ledger alone.
    settings = Settings.load(_G.config, policy=_G.policy)
    ledger = _ledger(settings)
    cutoff = None if since is None else time.time() - parse_duration(since, what="--since")
    entries = ledger.entries(since=cutoff, events=tuple(event or ()), limit=limit)
    if as_json:
        _print_json(
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
        extra = e.detail.get("reason") or ""
        print(f"{stamp}  {e.event:<8} {what}" + (f"  ({extra})" if extra else ""))


@app.command()
def touch(
    paths: Annotated[list[Path], typer.Argument(help="Cache files that were just used.")],
) -> None:
    """Record a use of each PATH, so LRU eviction keeps it longer."""
    _janitor().touch(*paths)
    _say(f"touched {len(paths)} path{'s' if len(paths) != 1 else ''}")


@app.command()
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
    owner = _owner(owner_pid)
    p = _janitor().pin(path, owner_pid=owner.pid, ttl=ttl)
    if as_json:
        _print_json(p.info.as_dict())
    else:
        print(p.id)
    _say(
        f"pinned {p.info.path} for pid {p.info.owner_pid} ({owner.description}); "
        f"`janitor unpin {p.id}` to end it"
    )
    if owner.warning:
        _say(f"warning: {owner.warning}")


@app.command()
def unpin(
    key: Annotated[str, typer.Argument(metavar="ID|PATH", help="Pin id, or a pinned path.")],
) -> None:
    """End a pin (by id), or every pin on a path."""
    ended = _janitor().unpin(key)
    _say(f"unpinned {', '.join(p.id for p in ended)}")


@app.command("exec")
def exec_(
    tree: Annotated[str, typer.Argument(help="Tree the command writes into.")],
    size: Annotated[
        str, typer.Argument(help="Bytes to reserve: 500M, 2G, or `janitor estimate`'s.")
    ],
    command: Annotated[list[str], typer.Argument(help="The command, after `--`.")],
    path: Annotated[
        Path | None, typer.Option(help="The file or folder the command writes (inside the tree).")
    ] = None,
    job: Annotated[str | None, typer.Option(help="Job label.")] = None,
    poll: Annotated[str, typer.Option(help="How often to check the volume and output.")] = "200ms",
    grow: Annotated[
        bool, typer.Option("--grow", help="Extend the reservation when the output outgrows it.")
    ] = False,
    margin: Annotated[
        str, typer.Option(help="How far output may exceed its reservation before stopping.")
    ] = "10%",
    grace: Annotated[str, typer.Option(help="Time between SIGTERM and SIGKILL.")] = "5s",
    cleanup_on_fail: Annotated[
        bool,
        typer.Option("--cleanup-on-fail", help="Remove partial output if the command fails."),
    ] = False,
    ttl: Annotated[
        str | None, typer.Option(help="Reservation TTL (renewed while running).")
    ] = None,
    no_evict: Annotated[
        bool, typer.Option("--no-evict", help="Refuse rather than evict caches to make room.")
    ] = False,
) -> None:
    """Reserve SIZE, run COMMAND, stop it before the disk fills; exit 75 if refused or stopped.

    Otherwise exits with the command's own code. The command gets JANITOR_RESERVATION; signals
    sent to janitor exec reach it.
    """
    _lasting()
    from janitor.errors import ReservationRefused
    from janitor.jobs.execute import run_guarded
    from janitor.sizes import parse_duration

    try:
        pct = float(margin.rstrip("%")) / (100 if margin.endswith("%") else 1)
    except ValueError:
        _fail(f"--margin {margin!r} is not a percentage like 10%", 2)
    jan = _janitor()
    try:
        result = run_guarded(
            jan,
            tree,
            size,
            command,
            path=path,
            job=job,
            poll=parse_duration(poll, what="--poll"),
            grow=grow,
            margin=pct,
            grace=parse_duration(grace, what="--grace"),
            cleanup_on_fail=cleanup_on_fail,
            ttl=ttl,
            evict=not no_evict,
            say=_say,
        )
    except ReservationRefused as exc:
        _fail(f"{exc}; {command[0]} was not started", EXIT_TEMPFAIL)
    if result.stopped is not None:
        _say(result.stopped + (" (partial output removed)" if result.cleaned else ""))
    raise typer.Exit(result.exit_code)


@app.command("run", context_settings={"ignore_unknown_options": True})
def run_(
    command: Annotated[list[str], typer.Argument(help="The command, after `--`.")],
    media: Annotated[
        list[Path] | None,
        typer.Option("--media", help="Media files or folders the job reads (pre-flight)."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(help="Files the job processes at once (pre-flight).", min=1)
    ] = 1,
    require_fit: Annotated[
        bool,
        typer.Option("--require-fit", help="Exit 75 before COMMAND starts if it cannot fit."),
    ] = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the job folders COMMAND left behind.")
    ] = False,
) -> None:
    """Run COMMAND with the guarded ffmpeg first on its PATH; exit with COMMAND's code.

    With --media, first prints the bytes the job will write (cache WAVs, PCM working set)
    beside each volume's headroom. At the end: what the run reserved and wrote, and the job
    temp folders it left behind, removed with every deleter check.
    """
    _lasting()
    from janitor.jobs.run import preflight, run_command
    from janitor.sizes import format_size

    jan = _janitor()
    if media:
        progress, stop = _probe_progress()
        try:
            pre = preflight(jan, media, concurrency=concurrency, progress=progress)
        finally:
            stop()
        _render_preflight(pre)
        if require_fit and not pre.fits:
            short = [v for v in pre.volumes if not v.fits]
            _fail(
                "the job does not fit: "
                + "; ".join(
                    f"{v.mount} needs {format_size(v.needs)}, has {format_size(max(0, v.headroom))}"
                    for v in short
                )
                + f"; {command[0]} was not started (free space, or run fewer files at once)",
                EXIT_TEMPFAIL,
            )
    result = run_command(jan, command, clean=not keep)
    line = (
        f"run {result.run_id}: {result.grants} guarded writes reserved "
        f"{format_size(result.reserved)}, wrote {format_size(result.written)}"
    )
    if result.refusals:
        line += f"; {result.refusals} refused"
    if result.stopped:
        line += f"; {result.stopped} stopped early"
    _say(line)
    if result.removed:
        _say(
            f"removed {len(result.removed)} job folders left behind "
            f"({format_size(result.removed_bytes)}): {', '.join(result.removed)}"
        )
    for path, why in result.kept:
        _say(f"kept {path}: {why}")
    raise typer.Exit(result.exit_code)


def _probe_progress() -> tuple[Any, Any]:
    """A rich progress bar on a terminal's stderr while media files are probed."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(
        TextColumn("probing media"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("probe", total=None)
    bar.start()

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return update, bar.stop


def _render_preflight(pre: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    from janitor.sizes import format_duration, format_size

    console = Console(stderr=True)
    if not console.is_terminal:  # a log or a pipe: whole paths, no wrapping at 80 columns
        console = Console(stderr=True, width=160)
    files = pre.files
    seconds = sum(f.duration_s or 0 for f in files)
    todo = sum(1 for f in files if f.converts and not f.cached and f.duration_s is not None)
    console.print(
        f"pre-flight: {len(files)} media files, {format_duration(seconds)} of audio; "
        f"{todo} to convert into the media cache; {pre.concurrency} at once"
    )
    table = Table(title_justify="left")
    for col in ("volume", "job writes", "headroom", "fits", "for"):
        table.add_column(
            col,
            justify="right" if col in ("job writes", "headroom") else "left",
            overflow="fold",  # a path is shown whole, over two lines if need be
        )
    for v in pre.volumes:
        table.add_row(
            v.mount,
            format_size(v.needs),
            format_size(v.headroom),
            "[green]yes[/]" if v.fits else "[bold red]no[/]",
            "; ".join(v.what),
        )
    console.print(table)
    if todo and not pre.knows_cache:
        console.print(
            "[yellow]blake3 is not installed: inputs already in the media cache are counted as "
            "still to convert (pip install 'space-janitor[batchalign]')[/]"
        )
    for f in files:
        if f.error:
            console.print(f"[yellow]skipped {f.media}: {f.error}[/]")


@app.command()
def estimate(
    media: Annotated[Path, typer.Argument(help="Audio or video file (read with ffprobe).")],
    fmt: Annotated[
        str, typer.Option("--format", help="wav16 (media cache WAV) or f32 (PCM windows).")
    ] = "wav16",
    rate: Annotated[int, typer.Option(help="Sample rate of the output.", min=1)] = 16000,
    channels: Annotated[int, typer.Option(help="Channels of the output.", min=1)] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Bytes the pipeline will write for MEDIA (WAV header included for wav16)."""
    from janitor.jobs.estimate import estimate_media
    from janitor.sizes import format_duration, format_size

    if fmt not in ("wav16", "f32"):
        _fail(f"--format {fmt!r} is not one of: wav16, f32", 2)
    est = estimate_media(media, fmt=fmt, rate=rate, channels=channels)  # type: ignore[arg-type]
    if as_json:
        _print_json(est.as_dict())
        return
    print(est.bytes)
    _say(
        f"{media}: {format_duration(est.duration_s)} -> {format_size(est.bytes)} as {fmt} "
        f"({rate} Hz, {channels} ch)"
    )


@app.command()
def daemon(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Log to the log file only.")] = False,
) -> None:
    """Run the janitor service in the foreground (launchd/systemd start it this way).

    Watches the trees, samples volumes, forecasts ENOSPC risk, evicts under pressure, and serves
    the HTTP API on a Unix socket. Stops cleanly on SIGTERM or Ctrl-C.
    """
    from janitor.config.settings import Settings
    from janitor.daemon.supervisor import Daemon

    _lasting()
    settings = Settings.load(_G.config, policy=_G.policy)
    code = Daemon(settings, log_to_stderr=not quiet).run()
    raise typer.Exit(code)


@app.command()
def emergency(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Say what would be freed; delete nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """The disk is full: free ballast, then evict caches, writing nothing to the ledger."""
    _lasting()  # a sweep, like `janitor sweep`
    from janitor.cleanup.sweep import emergency as run_emergency
    from janitor.config.policy import load_policy
    from janitor.config.settings import Settings
    from janitor.sizes import format_size

    settings = Settings.load(_G.config, policy=_G.policy)
    pol = load_policy(settings.policy_path, state_dir=settings.state_dir)
    ledger = _ledger(settings)
    result = run_emergency(pol, ledger, settings.state_dir, dry_run=dry_run)
    if as_json:
        _print_json(
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
    _say(
        f"{verb} {format_size(ballast)} of ballast and {format_size(evicted)} "
        f"in {units} cache units"
    )


_DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", "-n", help="Print the file and commands; change nothing.")
]


shim_app = typer.Typer(
    help="The guarded ffmpeg, first on a server's PATH (protects batchalign3 unchanged).",
    no_args_is_help=True,
)
app.add_typer(shim_app, name="shim")

_ShimDirOpt = Annotated[
    Path | None,
    typer.Option("--dir", help="Bin folder for the guard (default: under the user data dir)."),
]


@shim_app.command("install")
def shim_install(bin_dir: _ShimDirOpt = None, dry_run: _DryRunOpt = False) -> None:
    """Put a guarded `ffmpeg` into a bin folder of ours; say how to put it first on PATH."""
    from janitor.config.settings import Settings
    from janitor.jobs.shim import default_bin_dir, install, path_snippets, state

    settings = Settings.load(_G.config, policy=_G.policy)
    folder = bin_dir or default_bin_dir()
    target = install(settings, folder, dry_run=dry_run)
    now = state(settings, folder)
    verb = "would write" if dry_run else "installed"
    _say(f"{verb} the guarded ffmpeg at {target}")
    if now.real_ffmpeg is None:
        _say(f"warning: {now.problem}")
    else:
        _say(f"it runs the real ffmpeg at {now.real_ffmpeg}")
    if not now.first_on_path:
        print(f"Put {folder} first on PATH:")
        for where, how in path_snippets(folder).items():
            print(f"  {where}: {how}")
    else:
        print(f"{folder} is already first on this shell's PATH")


@shim_app.command("status")
def shim_status(bin_dir: _ShimDirOpt = None, as_json: JsonOpt = False) -> None:
    """Is the guard installed, current, first on PATH, and which ffmpeg does it run? (exit 1
    if it would not guard a call from this shell)."""
    from janitor.config.settings import Settings
    from janitor.jobs.shim import state

    st = state(Settings.load(_G.config, policy=_G.policy), bin_dir)
    if as_json:
        _print_json(st.as_dict())
    else:
        print(
            f"guard {'installed' if st.installed else 'not installed'} in {st.bin_dir}"
            + (
                ""
                if st.current or not st.installed
                else " (out of date: run `janitor shim install`)"
            )
        )
        print(f"first on PATH: {'yes' if st.first_on_path else 'no'}")
        print(f"real ffmpeg: {st.real_ffmpeg or st.problem}")
    if not (st.installed and st.first_on_path and st.real_ffmpeg):
        raise typer.Exit(EXIT_PROBLEM)


@shim_app.command("uninstall")
def shim_uninstall(bin_dir: _ShimDirOpt = None, dry_run: _DryRunOpt = False) -> None:
    """Remove the guarded ffmpeg (only a guard of ours is removed)."""
    from janitor.jobs.shim import default_bin_dir, uninstall

    folder = bin_dir or default_bin_dir()
    removed = uninstall(folder, dry_run=dry_run)
    if removed is None:
        _say(f"no guard in {folder}; nothing to do")
    else:
        _say(f"{'would remove' if dry_run else 'removed'} {removed}; take {folder} off PATH too")


service_app = typer.Typer(
    help="Run the daemon as a service (launchd / systemd).", no_args_is_help=True
)
app.add_typer(service_app, name="service")

_PlatformOpt = Annotated[
    str, typer.Option("--platform", hidden=True, help="darwin or linux (default: this one).")
]


def _service(platform: str | None) -> Any:
    from janitor.config.settings import Settings
    from janitor.service import service_for

    settings = Settings.load(_G.config, policy=_G.policy)
    return service_for(platform or sys.platform, settings, say=_say)


@service_app.command("install")
def service_install(dry_run: _DryRunOpt = False, platform: _PlatformOpt = "") -> None:
    """Install and start the daemon as a user service that starts at login."""
    svc = _service(platform or None)
    svc.install(dry_run=dry_run)
    if not dry_run:
        _say(
            f"installed; logs: {svc.settings.log_dir / 'daemon.log'}; "
            "`janitor service status` to check"
        )


@service_app.command("uninstall")
def service_uninstall(dry_run: _DryRunOpt = False, platform: _PlatformOpt = "") -> None:
    """Stop the service and remove it."""
    _service(platform or None).uninstall(dry_run=dry_run)


@service_app.command("status")
def service_status(as_json: JsonOpt = False, platform: _PlatformOpt = "") -> None:
    """Is the service installed and running? (exit 1 if not running)"""
    st = _service(platform or None).state()
    if as_json:
        _print_json(
            {"installed": st.installed, "active": st.active, "detail": st.detail, "file": st.file}
        )
    else:
        print(f"{'installed' if st.installed else 'not installed'} ({st.file}); {st.detail}")
    if not st.active:
        raise typer.Exit(EXIT_PROBLEM)


@service_app.command("logs")
def service_logs(
    lines: Annotated[int, typer.Option("-n", "--lines", help="How many lines.", min=1)] = 50,
    platform: _PlatformOpt = "",
) -> None:
    """The daemon's last log lines."""
    for line in _service(platform or None).log_lines(lines):
        print(line)


@app.command()
def doctor(as_json: JsonOpt = False) -> None:
    """Check config, policy, trees, volumes, ledger, daemon and OS limits; exit 1 on a failure."""
    from janitor.config.settings import Settings
    from janitor.doctor import run_checks

    settings = Settings.load(_G.config, policy=_G.policy)
    checks = run_checks(settings)
    if as_json:
        _print_json([c.as_dict() for c in checks])
    else:
        from rich.console import Console
        from rich.text import Text

        console = Console()
        style = {"ok": "green", "warn": "yellow", "fail": "bold red"}
        for c in checks:
            # A message of several lines (a policy's problems) goes on under the first's text.
            message = c.message.replace("\n", "\n      ")
            line = Text(f"{c.verdict:>4}  ", style=style[c.verdict]) + Text(f"{c.name}: {message}")
            console.print(line)
            if c.fix and c.verdict != "ok":
                console.print(Text(f"      fix: {c.fix}", style="dim"))
    if any(c.verdict == "fail" for c in checks):
        raise typer.Exit(EXIT_PROBLEM)


@app.command()
def paths(as_json: JsonOpt = False) -> None:
    """Every path the janitor resolved: config, policy, state, ledger, runtime, socket, log."""
    from janitor.config.settings import Settings, default_config_path

    s = Settings.load(_G.config, policy=_G.policy)
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
        _print_json(data)
        return
    width = max(len(k) for k in data)
    for key, value in data.items():
        if key != "config_exists":
            note = " (not present)" if key == "config" and not data["config_exists"] else ""
            print(f"{key:<{width}}  {value}{note}")


# -- policy ----------------------------------------------------------------------------------


def _policy_dict(jan_policy: Any) -> dict[str, Any]:
    from janitor.host.space import device_of, volume_stats

    trees: dict[str, Any] = {}
    volumes: dict[int, dict[str, Any]] = {}
    for name, t in jan_policy.trees.items():
        vol = volume_stats(t.path)
        floor, free_low, free_target = jan_policy.volume_policy(vol.device).numbers(vol.total)
        volumes[vol.device] = {
            "mount": vol.mount,
            "total": vol.total,
            "floor": floor,
            "free_low": free_low,
            "free_target": free_target,
        }
        trees[name] = {
            **t.model_dump(mode="json", exclude={"name"}),
            "quota_bytes": t.quota_bytes(vol.total),
            "low_watermark_bytes": t.low_bytes(vol.total),
            "device": device_of(t.path),
        }
    return {"source": str(jan_policy.source), "volumes": list(volumes.values()), "trees": trees}


@policy_app.command("show")
def policy_show(as_json: JsonOpt = False) -> None:
    """The policy in force, with paths expanded and sizes resolved for each volume."""
    from janitor.sizes import format_duration, format_size

    jan = _janitor()
    data = _policy_dict(jan.policy)
    if as_json:
        _print_json(data)
        return
    print(f"policy {data['source']}")
    for v in data["volumes"]:
        print(
            f"volume {v['mount']}: floor {format_size(v['floor'])}, free_low "
            f"{format_size(v['free_low'])}, free_target {format_size(v['free_target'])}"
        )
    for name, t in data["trees"].items():
        quota = format_size(t["quota_bytes"]) if t["quota_bytes"] is not None else "none"
        print(
            f"tree {name}: {t['role']} at {t['path']}, quota {quota}, "
            f"min_age {format_duration(t['min_age'])}"
            + (f", orphan_age {format_duration(t['orphan_age'])}" if t["role"] == "scratch" else "")
        )


@policy_app.command("validate")
def policy_validate(
    file: Annotated[Path, typer.Argument(help="Policy file to check.")],
) -> None:
    """Check a policy file; exit 0 if it loads, 2 with every problem (key, value, wanted) if not."""
    from janitor.config.policy import load_policy
    from janitor.config.settings import Settings

    settings = Settings.load(_G.config)
    pol = load_policy(file, state_dir=settings.state_dir)
    _say(f"{file}: ok ({len(pol.trees)} trees: {', '.join(pol.trees) or 'none'})")


def _lasting() -> None:
    """Called by the commands that may run for hours: the cyclic GC runs again for them.

    What start-up made (modules, classes, the command tree) stays in the permanent generation,
    where no collection walks it (``gc.freeze``, as a pre-fork server does).
    """
    gc.freeze()
    gc.enable()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `janitor` console script: errors become one line and an exit code.

    Usage errors are click's (exit 2 with the usage line); the library's errors carry their own
    exit code (2 bad input, 75 no space) and print as one line, never a traceback. A policy
    with several problems is the exception: a line naming the file, then one per problem.
    """
    # Most commands live a few hundred milliseconds and leave no cyclic garbage that matters,
    # yet the cyclic GC walked the objects their imports made again and again while starting,
    # and all of them once more at exit: about a fourth of `janitor reserve`. It stays off
    # (the daemon, `status --watch`, `exec`, `sweep` and `emergency` turn it back on, _lasting)
    # and what is alive is frozen before exit, so the interpreter's last collection skips it.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        app(args=argv, prog_name="janitor")
    except JanitorError as exc:
        _say(f"error: {exc}")
        sys.exit(exc.exit_code)
    finally:
        while _G.ledgers:
            _G.ledgers.pop().close()
        if argv is None:  # the console script: the process ends now
            gc.freeze()
        else:  # called in-process (tests): leave the caller's GC as it was
            gc.unfreeze()  # what a lasting command froze
            if was_enabled:
                gc.enable()
            else:
                gc.disable()


if __name__ == "__main__":
    main()
