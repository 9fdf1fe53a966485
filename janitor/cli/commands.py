"""``exec``, ``run``, ``estimate`` and the ``shim`` group: the CLI of :mod:`janitor.commands`."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from janitor.cli.common import (
    DryRunOpt,
    JsonOpt,
    at_least,
    fail,
    lasting,
    open_janitor,
    print_json,
    say,
    settings,
)
from janitor.errors import EXIT_BAD_INPUT, EXIT_PROBLEM, EXIT_TEMPFAIL, ConfigError

if TYPE_CHECKING:
    from janitor.commands.run import Preflight
    from janitor.commands.run_daemon import RunDaemon
    from janitor.core import Janitor

__all__ = ["estimate", "exec_", "run_", "shim_install", "shim_status", "shim_uninstall"]


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
    lasting()
    from janitor.commands.execute import run_guarded
    from janitor.errors import ReservationRefused
    from janitor.sizes import parse_duration

    try:
        pct = float(margin.rstrip("%")) / (100 if margin.endswith("%") else 1)
    except ValueError:
        fail(f"--margin {margin!r} is not a percentage like 10%", 2)
    jan = open_janitor()
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
            say=say,
        )
    except ReservationRefused as exc:
        fail(f"{exc}; {command[0]} was not started", EXIT_TEMPFAIL)
    if result.stopped is not None:
        say(result.stopped + (" (partial output removed)" if result.cleaned else ""))
    raise typer.Exit(result.exit_code)


def run_(
    command: Annotated[list[str], typer.Argument(help="The command, after `--`.")],
    media: Annotated[
        list[Path] | None,
        typer.Option("--media", help="Media files or folders the job reads (pre-flight)."),
    ] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            help="Files the job processes at once, 1 or more (pre-flight).", callback=at_least(1)
        ),
    ] = 1,
    require_fit: Annotated[
        bool,
        typer.Option("--require-fit", help="Exit 75 before COMMAND starts if it cannot fit."),
    ] = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the job folders COMMAND left behind.")
    ] = False,
    own_daemon: Annotated[
        bool,
        typer.Option(
            "--daemon/--no-daemon",
            help="With no daemon running, start one for the run, so each guarded call takes "
            "the socket (faster); --no-daemon: each guarded call opens the ledger itself.",
        ),
    ] = True,
) -> None:
    """Run COMMAND with the guarded ffmpeg first on its PATH; exit with COMMAND's code.

    With --media, first prints the bytes the job will write (cache WAVs, PCM working set)
    beside each volume's headroom. At the end: what the run reserved and wrote, and the job
    temp folders it left behind, removed with every deleter check.
    """
    if command[0].startswith("-") and len(command[0]) > 1:  # an option run does not have
        why = " (its report is for people, on stderr)" if command[0] == "--json" else ""
        fail(
            f"{command[0]} is not an option of janitor run{why}; put run's options before the "
            "command and `--`, and the command after them",
            EXIT_BAD_INPUT,
        )
    lasting()
    from janitor.commands.run_daemon import run_daemon

    jan = open_janitor()
    _check_route(command, require_fit=require_fit)
    daemon = run_daemon(jan.settings, secrets.token_hex(4), start=own_daemon)
    try:
        _run(jan, command, media, concurrency, require_fit=require_fit, keep=keep, daemon=daemon)
    finally:
        daemon.stop()


def _run(
    jan: Janitor,
    command: list[str],
    media: list[Path] | None,
    concurrency: int,
    *,
    require_fit: bool,
    keep: bool,
    daemon: RunDaemon,
) -> None:
    from janitor.commands.run import preflight, run_command
    from janitor.humanize import plural
    from janitor.sizes import format_size

    if daemon.notable:
        say(daemon.note)
    if media:
        from janitor.cli.progress import probe_progress

        progress, stop = probe_progress()
        try:
            pre = preflight(jan, media, concurrency=concurrency, progress=progress)
        finally:
            stop()
        _print_preflight(pre)
        if require_fit and not pre.fits:
            short = [v for v in pre.volumes if not v.fits]
            fail(
                "the job does not fit: "
                + "; ".join(
                    f"{v.mount} needs {format_size(v.needs)}, has {format_size(max(0, v.headroom))}"
                    for v in short
                )
                + f"; {command[0]} was not started (free space, or run fewer files at once)",
                EXIT_TEMPFAIL,
            )
    problem = daemon.wait_ready()
    if problem:
        say(problem)
    result = run_command(jan, command, clean=not keep, daemon=daemon)
    line = (
        f"run {result.run_id}: {plural(result.grants, 'reservation')} of its guarded writes held "
        f"{format_size(result.reserved)}, wrote {format_size(result.written)}"
    )
    if result.refusals:
        line += f"; {result.refusals} refused"
    if result.stopped:
        line += f"; {result.stopped} stopped early"
    say(line)
    if result.interrupted:
        say(
            f"run {result.run_id} was interrupted ({', '.join(result.interrupted)}): "
            f"{command[0]} exited {result.exit_code}"
        )
    if result.removed:
        say(
            f"removed {plural(len(result.removed), 'job folder')} left behind "
            f"({format_size(result.removed_bytes)}): {', '.join(result.removed)}"
        )
    for where, why in result.kept:
        say(f"kept {where}: {why}")
    raise typer.Exit(result.exit_code)


def _check_route(command: list[str], *, require_fit: bool) -> None:
    """Say where a batchalign3 command's ffmpeg will run and whether the guard sees it; with
    --require-fit, refuse (75) a command whose writes no guard would reserve."""
    from janitor.commands.ffmpeg_route import route

    found = route(command)
    if found is None or (found.protected and not found.sure):
        return  # not batchalign3's CLI, and nothing a call inside it could miss
    if require_fit and found.sure and not found.protected:
        fail(
            f"{found.message}; {command[0]} was not started (--require-fit). Fix: {found.fix}",
            EXIT_TEMPFAIL,
        )
    if found.sure:
        say(found.message)
    else:
        say(f"if {command[0]} runs batchalign3 without --no-server: {found.message}")
    if not found.protected:
        say(f"fix: {found.fix}")


def _print_preflight(pre: Preflight) -> None:
    """The pre-flight goes to stderr: stdout stays the command's. Then one line for each
    folder the job writes that no tree manages."""
    from janitor.cli.layout import screen
    from janitor.cli.view import render_preflight

    out = screen(stderr=True)  # a log or a pipe: whole lines, nothing cut
    for part in render_preflight(pre):
        out.print(part)
    for note in pre.notes:  # a message line each, whole, as a log keeps it
        say(f"note: {note}")


def estimate(
    media: Annotated[Path, typer.Argument(help="Audio or video file (read with ffprobe).")],
    fmt: Annotated[
        str, typer.Option("--format", help="wav16 (media cache WAV) or f32 (PCM windows).")
    ] = "wav16",
    rate: Annotated[
        int, typer.Option(help="Sample rate of the output.", callback=at_least(1))
    ] = 16000,
    channels: Annotated[
        int, typer.Option(help="Channels of the output.", callback=at_least(1))
    ] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Bytes the pipeline will write for MEDIA (WAV header included for wav16)."""
    from janitor.commands.estimate import estimate_media
    from janitor.sizes import format_duration, format_size

    if fmt not in ("wav16", "f32"):
        fail(f"--format {fmt!r} is not one of: wav16, f32", 2)
    est = estimate_media(media, fmt=fmt, rate=rate, channels=channels)  # type: ignore[arg-type]
    if as_json:
        print_json(est.as_dict())
        return
    print(est.bytes)
    say(
        f"{media}: {format_duration(est.duration_s)} -> {format_size(est.bytes)} as {fmt} "
        f"({rate} Hz, {channels} ch)"
    )


# -- the shim group --------------------------------------------------------------------------

_ShimDirOpt = Annotated[
    Path | None,
    typer.Option("--dir", help="Bin folder for the guard (default: under the user data dir)."),
]


_FrontEndOpt = Annotated[
    str | None,
    typer.Option(
        "--front-end",
        help="compiled (a few ms a call; needs a C compiler) or python (default: compiled "
        "where it builds; JANITOR_GUARD_FRONT_END).",
    ),
]


def shim_install(
    bin_dir: _ShimDirOpt = None, dry_run: DryRunOpt = False, front_end: _FrontEndOpt = None
) -> None:
    """Put a guarded `ffmpeg` (and `ffprobe`) into a bin folder of ours; say how to put it
    first on PATH."""
    from janitor.commands.shim import default_bin_dir, install, path_snippets, state

    if front_end not in (None, "auto", "compiled", "python"):
        raise ConfigError(f"--front-end {front_end}: use compiled, python or auto")
    s = settings()
    folder = bin_dir or default_bin_dir()
    target, front = install(s, folder, dry_run=dry_run, front_end=front_end)
    now = state(s, folder)
    verb = "would write" if dry_run else "installed"
    say(
        f"{verb} the guarded ffmpeg at {target}, and ffprobe beside it: the {front.kind} front "
        f"end ({front.why})"
    )
    if now.real_ffmpeg is None:
        say(f"warning: {now.problem}")
    else:
        probe = f" and the real ffprobe at {now.real_ffprobe}" if now.real_ffprobe else ""
        say(f"it runs the real ffmpeg at {now.real_ffmpeg}{probe}")
    if not now.first_on_path:
        print(f"Put {folder} first on PATH:")
        for where, how in path_snippets(folder).items():
            print(f"  {where}: {how}")
    else:
        print(f"{folder} is already first on this shell's PATH")


def shim_status(bin_dir: _ShimDirOpt = None, as_json: JsonOpt = False) -> None:
    """Is the guard installed, current, first on PATH, which front end is it, and which
    ffmpeg does it run? (exit 1 if it would not guard a call from this shell)."""
    from janitor.commands.shim import state

    st = state(settings(), bin_dir)
    if as_json:
        print_json(st.as_dict())
    else:
        print(
            f"guard {'installed' if st.installed else 'not installed'} in {st.bin_dir}"
            + (
                ""
                if st.current or not st.installed
                else " (out of date: run `janitor shim install`)"
            )
        )
        if st.front_end is not None:
            print(f"front end: {st.front_end.kind} ({st.front_end.why})")
        if st.would_install is not None and (
            st.front_end is None or st.front_end.kind != st.would_install.kind
        ):
            print(f"shim install would put in: {st.would_install.kind} ({st.would_install.why})")
        print(f"first on PATH: {'yes' if st.first_on_path else 'no'}")
        print(f"real ffmpeg: {st.real_ffmpeg or st.problem}")
        print(f"real ffprobe: {st.real_ffprobe or 'none found on PATH after the guard'}")
    if not (st.installed and st.first_on_path and st.real_ffmpeg):
        raise typer.Exit(EXIT_PROBLEM)


def shim_uninstall(bin_dir: _ShimDirOpt = None, dry_run: DryRunOpt = False) -> None:
    """Remove the guarded ffmpeg (only a guard of ours is removed)."""
    from janitor.commands.shim import default_bin_dir, uninstall

    folder = bin_dir or default_bin_dir()
    removed = uninstall(folder, dry_run=dry_run)
    if removed is None:
        say(f"no guard in {folder}; nothing to do")
    else:
        say(f"{'would remove' if dry_run else 'removed'} {removed}; take {folder} off PATH too")
