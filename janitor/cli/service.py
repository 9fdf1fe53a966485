"""``daemon``, the ``service`` group and ``doctor``: the janitor as a service, and its health."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from janitor.cli.common import (
    DryRunOpt,
    G,
    JsonOpt,
    at_least,
    print_json,
    say,
    settings,
)
from janitor.errors import EXIT_PROBLEM

if TYPE_CHECKING:
    from janitor.service import UserService

__all__ = [
    "daemon",
    "doctor",
    "service_install",
    "service_logs",
    "service_status",
    "service_uninstall",
]


def daemon(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Log to the log file only.")] = False,
    admission_only: Annotated[
        bool,
        typer.Option(
            "--admission-only",
            help="Admit, queue and watch reservations only: no sweeps, watches, ballast or "
            "folder removal (what `janitor run` starts for itself).",
        ),
    ] = False,
) -> None:
    """Run the janitor service in the foreground (launchd/systemd start it this way).

    Watches the trees, samples volumes, forecasts ENOSPC risk, evicts under pressure, and serves
    the HTTP API on a Unix socket. Stops cleanly on SIGTERM or Ctrl-C.
    """
    from janitor.cli import quick

    # What a plain `janitor daemon` runs before typer loads (janitor.cli.quick): one start.
    config, policy = (str(p) if p else None for p in (G.config, G.policy))
    code = quick.daemon(quick.DaemonArgs(config, policy, quiet, admission_only))
    raise typer.Exit(code)


# -- the service group -----------------------------------------------------------------------

_PlatformOpt = Annotated[
    str, typer.Option("--platform", hidden=True, help="darwin or linux (default: this one).")
]


def _service(platform: str | None) -> UserService:
    from janitor.service import service_for

    return service_for(platform or sys.platform, settings(), say=say)


def service_install(dry_run: DryRunOpt = False, platform: _PlatformOpt = "") -> None:
    """Install and start the daemon as a user service that starts at login."""
    svc = _service(platform or None)
    svc.install(dry_run=dry_run)
    if not dry_run:
        say(
            f"installed; logs: {svc.settings.log_dir / 'daemon.log'}; "
            "`janitor service status` to check"
        )


def service_uninstall(dry_run: DryRunOpt = False, platform: _PlatformOpt = "") -> None:
    """Stop the service and remove it."""
    _service(platform or None).uninstall(dry_run=dry_run)


def service_status(as_json: JsonOpt = False, platform: _PlatformOpt = "") -> None:
    """Is the service installed and running? (exit 1 if not running)"""
    st = _service(platform or None).state()
    if as_json:
        print_json(
            {"installed": st.installed, "active": st.active, "detail": st.detail, "file": st.file}
        )
    else:
        print(f"{'installed' if st.installed else 'not installed'} ({st.file}); {st.detail}")
    if not st.active:
        raise typer.Exit(EXIT_PROBLEM)


def service_logs(
    lines: Annotated[
        int, typer.Option("-n", "--lines", help="How many lines.", callback=at_least(1))
    ] = 50,
    platform: _PlatformOpt = "",
) -> None:
    """The daemon's last log lines."""
    for line in _service(platform or None).log_lines(lines):
        print(line)


# -- doctor ----------------------------------------------------------------------------------


def doctor(as_json: JsonOpt = False) -> None:
    """Check config, policy, trees, volumes, ledger, daemon and OS limits; exit 1 on a failure."""
    from janitor.doctor import run_checks

    checks = run_checks(settings())
    if as_json:
        print_json([c.as_dict() for c in checks])
    else:
        from janitor.cli.layout import screen
        from janitor.cli.view import render_checks

        out = screen()
        for part in render_checks(checks):
            out.print(part)
    if any(c.verdict == "fail" for c in checks):
        raise typer.Exit(EXIT_PROBLEM)
