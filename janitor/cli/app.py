"""The `janitor` command: the root options, the command tree, and the entry point.

Each command group lives in its own module (``reservations``, ``status``, ``cleanup``, ``commands``,
``service``, ``policy``) and only parses, calls the library and renders; this module wires them
in the order ``janitor --help`` lists them. Exit codes are in ``janitor.cli.common``.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from janitor.cli import cleanup, commands, policy, reservations, service, status
from janitor.cli.argv import hoist
from janitor.cli.common import G, say
from janitor.cli.labels import finish_help
from janitor.errors import EXIT_BAD_INPUT, JanitorError

__all__ = ["app", "main"]

app = typer.Typer(
    name="janitor",
    help="Keep caches within quotas, temp trees clean, and reserve disk space before writing.\n\n"
    "The options below (--config, --policy, --version) go before or after the command's name.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
policy_app = typer.Typer(help="Show or validate policy files.", no_args_is_help=True)
shim_app = typer.Typer(
    help="The guarded ffmpeg, first on a server's PATH (protects batchalign3 unchanged).",
    no_args_is_help=True,
)
service_app = typer.Typer(
    help="Run the daemon as a service (launchd / systemd).", no_args_is_help=True
)


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
            help="Config file, or JANITOR_CONFIG (default: config.toml in the config dir).",
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            # JANITOR_POLICY (and JANITOR_CONFIG) are read with the other settings, not here,
            # so an error about the file can tell the variable from the option
            # (Settings.policy_origin).
            help="Policy file, or JANITOR_POLICY (default: the shipped batchalign3 policy).",
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    G.config = config
    G.policy = policy


# What looks like an option reaches the command: a negative size (`-1G`) gets the command's own
# error naming it.
_PASS_THROUGH = {"ignore_unknown_options": True}
# `run`'s options end where the command it runs starts: `janitor run batchalign3 align --media
# x` hands `--media x` to batchalign3, and an option run does not know (`--json`) reaches run_,
# which names it.
_COMMAND_AFTER = {"ignore_unknown_options": True, "allow_interspersed_args": False}

app.add_typer(policy_app, name="policy")
app.command(context_settings=_PASS_THROUGH)(reservations.reserve)
app.command()(reservations.release)
app.command()(reservations.renew)
app.command()(reservations.grow)
app.command(context_settings=_PASS_THROUGH)(reservations.check)
app.command()(status.status)
app.command()(status.space)
app.command()(cleanup.sweep)
app.command("log")(status.log_)
app.command()(cleanup.touch)
app.command()(cleanup.pin)
app.command()(cleanup.unpin)
app.command("exec")(commands.exec_)
app.command("run", context_settings=_COMMAND_AFTER, options_metavar="[OPTIONS] --")(commands.run_)
app.command()(commands.estimate)
app.command()(service.daemon)
app.command()(cleanup.emergency)
app.add_typer(shim_app, name="shim")
shim_app.command("install")(commands.shim_install)
shim_app.command("status")(commands.shim_status)
shim_app.command("uninstall")(commands.shim_uninstall)
app.add_typer(service_app, name="service")
service_app.command("install")(service.service_install)
service_app.command("uninstall")(service.service_uninstall)
service_app.command("status")(service.service_status)
service_app.command("logs")(service.service_logs)
app.command()(service.doctor)
app.command()(status.paths)
policy_app.command("show")(policy.policy_show)
policy_app.command("validate")(policy.policy_validate)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `janitor` console script: errors become one line and an exit code.

    The root options may follow the command's name (janitor.cli.argv.hoist), and every help
    text reads as a person's (janitor.cli.labels.finish_help).

    Usage errors are click's (exit 2 with the usage line); the library's errors carry their own
    exit code (2 bad input, 75 no space) and print as one line, never a traceback. A policy
    with several problems is the exception: a line naming the file, then one per problem.
    """
    # Most commands live a few hundred milliseconds and leave no cyclic garbage that matters,
    # yet the cyclic GC walked the objects their imports made again and again while starting,
    # and all of them once more at exit: about a fourth of `janitor reserve`. It stays off
    # (the daemon, `status --watch`, `exec`, `sweep` and `emergency` turn it back on, lasting)
    # and what is alive is frozen before exit, so the interpreter's last collection skips it.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        command = finish_help(typer.main.get_command(app))
        args = sys.argv[1:] if argv is None else [os.fspath(a) for a in argv]
        command(args=hoist(command, args), prog_name="janitor")
    except JanitorError as exc:
        say(f"error: {exc}")
        sys.exit(exc.exit_code)
    except PermissionError as exc:  # a file of the janitor's that it may not use: in our words
        from janitor.config.state_dir import access_error

        say(f"error: {access_error(exc.filename or '?', exc, 'use')}")
        sys.exit(EXIT_BAD_INPUT)
    finally:
        while G.ledgers:
            G.ledgers.pop().close()
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
