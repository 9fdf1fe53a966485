"""The guarded ffmpeg: to its caller it is ffmpeg, and every big write it makes is reserved first.

batchalign3 runs a bare ``ffmpeg`` from ``PATH`` for every big write it makes, so a guard first
on ``PATH`` protects it unchanged (``janitor shim install``, ``janitor run``). For each call the
guard works out the files ffmpeg will write and their bytes (janitor.jobs.ffmpeg), reserves them on
the trees that hold them (janitor.jobs.writes; through the daemon's socket when it runs, with
janitor.jobs.daemon_client, else through the ledger directly), then runs the real ffmpeg under
the same supervision as ``janitor exec`` (janitor.jobs.supervise): stopped when its reservation
is put at risk or its output outgrows the reservation, and never outliving the guard.
Arguments, stdin, stdout, stderr and the exit status are ffmpeg's own; signals sent to the guard
reach ffmpeg.

A call it cannot estimate (video, compressed outputs, ``-f null``, pipes, unknown options) or
whose outputs lie on no managed volume is handed to the real ffmpeg with ``exec``: the guard never
breaks an ffmpeg call. A request for information (``ffmpeg -version``, which batchalign3 runs
before every conversion, ``-h``, ``-buildconf`` ...; see :data:`INFO_OPTIONS`) writes no file: it
is exec'd at once, before the estimator is imported and without a line in ``guard.log``.
Refused or stopped, it exits 75 (EX_TEMPFAIL) with one stderr line that begins
``space-janitor:`` (batchalign3 shows ffmpeg's stderr to its users as it is), and the output is
not left behind.

This module runs on the path of every alignment group, so it imports next to nothing at start:
no typer, rich, pydantic or numpy; the library is loaded only when no daemon answers.
"""

from __future__ import annotations

import os
import sys
import time

from janitor.errors import ReservationRefused

# Loaded with janitor.errors already (it prints sizes with it): costs nothing more.
from janitor.humanize import format_size
from janitor.jobs.call import (
    call_options,
    plan,
    refusal_line,
    reserved_line,
    stopped_before_line,
    unguarded_line,
)
from janitor.jobs.mark import GUARD_MARK, is_guard

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from janitor.jobs.daemon_client import DaemonClient
    from janitor.jobs.held import WriteSession, Written
    from janitor.jobs.supervise import Supervised

__all__ = [
    "DEFAULT_WAIT_S",
    "ELAPSED_ENV",
    "EXIT_NO_FFMPEG",
    "EXIT_REFUSED",
    "FALLBACK_ENV",
    "GUARD_MARK",
    "INFO_OPTIONS",
    "asks_only_for_information",
    "find_real",
    "find_real_ffmpeg",
    "is_guard",
    "main",
    "refusal_line",
]

#: Refused or stopped for lack of space (EX_TEMPFAIL), as every janitor command.
EXIT_REFUSED = 75
#: No real ffmpeg to run (what a shell says for a command it cannot find).
EXIT_NO_FFMPEG = 127
#: Set by the compiled front end when it hands a call to this guard: why (the daemon did not
#: answer, or answered what it did not understand).
FALLBACK_ENV = "JANITOR_GUARD_FALLBACK"
#: Set with it: the seconds the call had taken when it was handed over. A call's wait for room
#: has one deadline, from the guarded ffmpeg's start, however it is handed on.
ELAPSED_ENV = "JANITOR_GUARD_ELAPSED_S"
#: How long the daemon may take to answer a call (it may probe a new recording or evict caches
#: first); then the ledger decides. ``JANITOR_GUARD_TIMEOUT_S`` changes it.
ANSWER_TIMEOUT_S = 60.0
#: How often the running ffmpeg's output and volume are looked at.
POLL_S = 0.2
#: How long a job's first write waits for room by default (batchalign3's memory gate waits
#: 120 s too); ``guard_wait_s`` and ``JANITOR_GUARD_WAIT_S`` change it.
DEFAULT_WAIT_S = 120.0
#: How long past a call's deadline a front end still waits for the daemon's verdict on it (its
#: last try at admission) before the ledger decides: past that, the daemon is not answering.
WAIT_GRACE_S = 2.0
#: How far an output may pass its reservation before ffmpeg is stopped: estimates are within
#: 1 %, and allocation rounds up to blocks.
MARGIN = 0.05
SLACK = 256 * 1024
#: ffmpeg's options that print something and exit (OPT_EXIT in its option table, 5.1 to 7.1):
#: the estimator's parser stops at one of them (janitor.jobs.ffmpeg.args, kind ``EXIT``).
INFO_OPTIONS = frozenset(
    ("-L", "-h", "-?", "-help", "--help", "-version", "-buildconf", "-formats", "-muxers",
     "-demuxers", "-devices", "-codecs", "-decoders", "-encoders", "-bsfs", "-protocols",
     "-filters", "-pix_fmts", "-layouts", "-sample_fmts", "-dispositions", "-colors",
     "-hwaccels", "-sources", "-sinks")
)  # fmt: skip


class GuardError(Exception):
    """The guard cannot do its part; the call then runs unguarded (never a broken ffmpeg)."""


def asks_only_for_information(args: Sequence[str]) -> bool:
    """Whether this call writes no file for certain: no arguments (ffmpeg prints its usage) or
    an information option first (``-version``, ``-h`` ...).

    Checked before anything else is imported: batchalign3 runs ``ffmpeg -version`` before every
    conversion, so it must cost no more than Python's start-up and an ``exec``. The estimator
    would say the same (its parser stops at such an option, whatever follows), only later.
    """
    return not args or args[0] in INFO_OPTIONS


# -- finding the real ffmpeg -----------------------------------------------------------------------


def find_real(
    name: str = "ffmpeg", env: dict[str, str] | None = None, me: str | None = None
) -> str:
    """The program ``name`` (``ffmpeg`` or ``ffprobe``) to run: ``JANITOR_FFMPEG`` (or
    ``JANITOR_FFPROBE``), else the first of that name on ``PATH`` that is not a guard (never
    this program). GuardError with a one-line reason when there is none."""
    env = os.environ if env is None else env  # type: ignore[assignment]
    assert env is not None
    variable = f"JANITOR_{name.upper()}"
    mine = os.path.realpath(me or sys.argv[0])
    chosen = env.get(variable)
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise GuardError(f"{variable}={chosen} is not an executable file")
        if os.path.realpath(chosen) == mine or is_guard(chosen):
            raise GuardError(f"{variable}={chosen} is the guard itself; point it at {name}")
        return chosen
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        if os.path.realpath(candidate) == mine or is_guard(candidate):
            continue
        return candidate
    raise GuardError(f"no {name} found on PATH after the guard; install ffmpeg or set {variable}")


def find_real_ffmpeg(env: dict[str, str] | None = None, me: str | None = None) -> str:
    """The ffmpeg to run (:func:`find_real`)."""
    return find_real("ffmpeg", env, me)


# -- the two ways to hold a call's writes ----------------------------------------------------------


class Stopped(Exception):
    """The call's job must stop (its working set was put at risk): ffmpeg is not run."""


class _Hold:
    """What one call holds (its :class:`~janitor.jobs.held.WriteSession`: reservations and
    pins), through the daemon or the library, and the call's job label and ``janitor run`` id,
    for the log's ``wrote`` lines."""

    #: "daemon" or "ledger": who decided
    via: str
    session: WriteSession
    job: str | None
    run: str | None

    def cover(self, pid: int) -> None:
        raise NotImplementedError

    def at_risk(self, rid: str) -> str | None:
        raise NotImplementedError

    def release(self, written: Sequence[Written] = ()) -> None:
        """End what the call alone held; ``written`` (what ffmpeg left at each output) goes in
        the ledger's log for ``janitor run``'s summary."""
        raise NotImplementedError


class _DaemonHold(_Hold):
    via = "daemon"

    def __init__(
        self, daemon: DaemonClient, request: dict[str, Any], log_dir: str | None, deadline: float
    ) -> None:
        from janitor.jobs.held import WriteSession

        self.daemon = daemon
        self.job, self.run = request.get("job"), request.get("run")
        # What is left of the call's wait: the daemon's wait ends at the same deadline.
        asked = {**request, "wait_s": _left(deadline)}
        status, body = daemon.call("POST", "/v1/guard", asked)
        if status == 202 and isinstance(body, dict) and body.get("ticket"):
            # Queued: say so once, then wait in turn (the daemon answers when admitted).
            _say(body.get("message", "waiting for room"))
            _log(log_dir, f"waiting: {body.get('message', '')}")
            # The daemon answers when the call is admitted or its wait runs out; one that does
            # not by then (dead, stopped) leaves the rest of the wait to the ledger.
            status, body = daemon.call(
                "POST", "/v1/guard/wait", {"ticket": body["ticket"], "owner_pid": os.getpid()},
                timeout=_left(deadline) + WAIT_GRACE_S,
            )  # fmt: skip
        if status == 507 and isinstance(body, dict) and body.get("error") == "at_risk":
            raise Stopped(body.get("message", "its job is at risk"))
        if status == 507 and isinstance(body, dict) and body.get("error") in _REFUSALS:
            raise ReservationRefused.from_dict(body)
        if status != 200:
            said = body.get("message") if isinstance(body, dict) else None
            raise GuardError(f"the daemon answered {status}: {said or body}")
        self.session = WriteSession.from_wire(body)

    def cover(self, pid: int) -> None:
        # not waited for: the guard owns the reservation too, and ffmpeg dies with the guard
        for rid in self.session.own:
            self.daemon.send("POST", f"/v1/reservations/{rid}/cover", {"pid": pid})

    def at_risk(self, rid: str) -> str | None:
        status, body = self.daemon.call("GET", f"/v1/reservations/{rid}")
        return body.get("at_risk") if status == 200 and isinstance(body, dict) else None

    def release(self, written: Sequence[Written] = ()) -> None:
        own, pins, draws = self.session.own, self.session.pins, self.session.draws
        if own or pins or written or draws:
            body = {
                "reservations": list(own),
                "pins": list(pins),
                "draws": list(draws),
                "written": [w.as_dict() for w in written],
                "job": self.job,
                "run": self.run,
            }
            self.daemon.call("POST", "/v1/guard/release", body)


#: The ``error`` of a 507 answer that refuses a call (the numbers say why).
_REFUSALS = ("refused", "never_fits", "wait_wont_help")


class _LibraryHold(_Hold):
    """No daemon: the ledger directly, as ``janitor reserve`` does (slower to start); the
    session :func:`~janitor.jobs.writes.open_writes` gives is held as it is."""

    via = "ledger"

    def __init__(self, request: dict[str, Any], log_dir: str | None, deadline: float) -> None:
        from janitor.core import Janitor
        from janitor.errors import JanitorError, SpaceRisk
        from janitor.jobs.writes import CallRequest, open_writes

        def waiting(message: str) -> None:
            _say(message)
            _log(log_dir, f"waiting: {message}")

        try:
            self.jan = Janitor.from_settings()
            # What is left of the call's wait, however long the daemon held it first.
            asked = CallRequest.from_wire({**request, "wait_s": _left(deadline)})
            self.session = open_writes(self.jan, asked, on_wait=waiting)
        except ReservationRefused:
            raise
        except SpaceRisk as exc:
            raise Stopped(exc.reason) from None
        except (JanitorError, OSError) as exc:
            raise GuardError(str(exc)) from None
        self.job, self.run = request.get("job"), request.get("run")

    def cover(self, pid: int) -> None:
        for rid in self.session.own:
            self.jan.cover(rid, pid)

    def at_risk(self, rid: str) -> str | None:
        from janitor.errors import SpaceRisk

        try:
            self.jan.check_risk(self.jan.get(rid))
        except SpaceRisk as exc:
            return exc.reason
        return None

    def release(self, written: Sequence[Written] = ()) -> None:
        from janitor.jobs.writes import close_writes

        session = self.session
        close_writes(
            self.jan, session.own, session.pins, written, job=self.job, run=self.run,
            draws=session.draws,
        )  # fmt: skip
        self.jan.ledger.close()


# -- the guard -------------------------------------------------------------------------------------


def _log(log_dir: str | None, message: str, *, debug: bool = False) -> None:
    """One line in ``guard.log`` beside the daemon's log (rotated at 1 MiB, one old copy)."""
    folder = os.environ.get("JANITOR_LOG_DIR") or log_dir
    if not folder:
        return
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, "guard.log")
        try:
            if os.stat(path).st_size > 1 << 20:
                os.replace(path, path + ".1")
        except FileNotFoundError:
            pass
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with open(path, "a", encoding="utf-8", errors="replace") as f:
            f.write(f"{stamp} {'DEBUG' if debug else 'INFO'} pid {os.getpid()}: {message}\n")
    except OSError:
        pass


def _exec(real: str, args: Sequence[str]) -> int:
    """Become the real ffmpeg: same pid, stdio, signals and exit status as a bare call."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(real, [real, *args])
    return 0  # pragma: no cover - execv does not return


def _say(line: str) -> None:
    sys.stderr.write(f"space-janitor: {line}\n")
    sys.stderr.flush()


def _remove_output(path: str, before: tuple[int, int] | None) -> bool:
    """Remove what ffmpeg began at ``path`` (not a file that was there untouched before)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if before is not None and (st.st_ino, st.st_mtime_ns) == before:
        return False
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def _written(before: dict[str, tuple[int, int] | None]) -> list[Written]:
    """What ffmpeg left at each output (a partial file too), leaving out a file it did not
    touch: ``janitor run`` sums these up as what the run wrote."""
    from janitor.jobs.held import Written

    out = []
    for path, was in before.items():
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if (st.st_ino, st.st_mtime_ns) != was:
            out.append(Written(path, st.st_size))
    return out


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _watch(child: Supervised, hold: _Hold) -> str | None:
    """Until ffmpeg exits: why it must stop (its reservation at risk, an output past its
    reservation), else None."""
    checked = 0.0
    while child.wait(POLL_S) is None:
        for held in hold.session.writes:
            rid, output, nbytes, floor = held.reservation, held.output, held.allowed, held.floor
            try:
                written = os.stat(output).st_blocks * 512
            except OSError:
                written = 0
            if written > nbytes * (1 + MARGIN) + SLACK:
                what = "its job has left of its working set" if held.pooled else "reserved for it"
                return (
                    f"stopped ffmpeg: {output} reached {format_size(written)}, past the "
                    f"{format_size(nbytes)} {what}"
                )
            try:
                st = os.statvfs(os.path.dirname(output) or ".")
            except OSError:
                continue
            if st.f_bavail * st.f_frsize >= floor:
                continue  # above the floor nobody is at risk: one statvfs, no question asked
            now = time.monotonic()
            if now - checked < POLL_S:
                continue
            checked = now
            try:
                reason = hold.at_risk(rid)
            except OSError:
                reason = None
            if reason:
                return f"stopped ffmpeg writing {output}: {reason}"
    return None


def _failed_below_floor(hold: _Hold, returncode: int) -> str | None:
    """Why a failed ffmpeg counts as stopped: it exited with an error while an output's volume
    was below its floor, so writers outside every reservation took the space it was promised
    (a disk filled to the last byte beats any watch). None otherwise."""
    if returncode <= 0:
        return None
    for held in hold.session.writes:
        try:
            st = os.statvfs(os.path.dirname(held.output) or ".")
        except OSError:
            continue
        if st.f_bavail * st.f_frsize < held.floor:
            return (
                f"stopped ffmpeg writing {held.output}: its volume fell below its floor while "
                "it wrote (writers outside every reservation took the space)"
            )
    return None


def _finish(returncode: int) -> int:
    """Exit as ffmpeg did: by the same signal if it was killed by one."""
    if returncode >= 0:
        return returncode
    import signal

    sig = -returncode
    try:
        signal.signal(sig, signal.SIG_DFL)  # SIGKILL has no handler to reset: OSError
    except (OSError, ValueError):
        pass
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
    return 128 + sig


def main(
    argv: Sequence[str] | None = None,
    *,
    socket_path: str | None = None,
    cache_dir: str | None = None,
    log_dir: str | None = None,
    policy: str | None = None,
    me: str | None = None,
    wait_s: float = DEFAULT_WAIT_S,
) -> int:
    """Run one guarded ffmpeg call; returns the exit code (75 refused or stopped, 127 no ffmpeg).

    ``socket_path``, ``cache_dir``, ``log_dir``, ``policy`` and ``wait_s`` (how long a job's
    first write may wait for room) are what ``janitor shim install`` resolved;
    ``JANITOR_RUNTIME_DIR``, ``JANITOR_LOG_DIR``, ``JANITOR_POLICY`` and
    ``JANITOR_GUARD_WAIT_S`` override them.
    """
    # First of all: the process that ran ffmpeg, the job's writer chain's start. Should it exit
    # before the call is recorded, we are adopted and the record says it is gone (never a new
    # process given its pid). And when the call started: its wait for room counts from then.
    parent = os.getppid()
    started = time.monotonic()
    args = list(sys.argv[1:] if argv is None else argv)
    # The compiled front end hands a call over when the daemon did not take it: asked again
    # here it would only wait as long again, so the ledger decides, in what is left of the
    # call's wait. ffmpeg never sees the words.
    handed_over = os.environ.pop(FALLBACK_ENV, None)
    elapsed = os.environ.pop(ELAPSED_ENV, None)
    if handed_over is not None:
        started -= _seconds(elapsed)
    try:
        real = find_real_ffmpeg(me=me)
    except GuardError as exc:
        _say(str(exc))
        return EXIT_NO_FFMPEG
    if asks_only_for_information(args):
        # Not logged: hundreds a recording would push the lines that matter out of guard.log.
        return _exec(real, args)
    opts = call_options(os.environ, cache_dir=cache_dir, policy=policy, wait_s=wait_s)
    try:
        request = plan(
            args, cwd=os.getcwd(), real=real, owner_pid=os.getpid(), writer_pid=parent,
            job=opts["job"], run=opts["run"], cache_dir=opts["cache_dir"],
        )  # fmt: skip
    except Exception as exc:  # never break ffmpeg: an estimate we cannot make runs unguarded
        _log(log_dir, unguarded_line(f"estimate failed: {exc!r}", args), debug=True)
        return _exec(real, args)
    if isinstance(request, str):
        _log(log_dir, unguarded_line(request, args), debug=True)
        return _exec(real, args)
    if opts["policy"]:
        request["policy"] = opts["policy"]
    deadline = started + opts["wait_s"]
    try:
        hold = _hold(request, socket_path, log_dir, deadline, handed_over=handed_over)
    except ReservationRefused as exc:
        _say(refusal_line(exc))
        _log(log_dir, f"refused: {refusal_line(exc)}")
        return EXIT_REFUSED
    except Stopped as exc:
        line = stopped_before_line(str(exc))
        _say(line)
        _log(log_dir, line)
        return EXIT_REFUSED
    except Exception as exc:  # a broken ledger, a confused daemon: run unguarded, say so
        _log(log_dir, f"unguarded (cannot reserve: {exc}): ffmpeg {' '.join(args)}")
        return _exec(real, args)
    if not hold.session.writes:
        hold.release()
        _log(log_dir, unguarded_line("no managed volume", args), debug=True)
        return _exec(real, args)
    _log(log_dir, reserved_line(hold.via, hold.session))
    return _run(real, args, hold, log_dir)


def answer_timeout() -> float:
    """How long the daemon may take to answer a call: ``JANITOR_GUARD_TIMEOUT_S``, else
    :data:`ANSWER_TIMEOUT_S` (the compiled front end reads the same variable)."""
    text = os.environ.get("JANITOR_GUARD_TIMEOUT_S")
    if text:
        try:
            value = float(text)
        except ValueError:
            return ANSWER_TIMEOUT_S
        if 0 < value <= 86400:
            return value
    return ANSWER_TIMEOUT_S


def _seconds(text: str | None) -> float:
    """The seconds a call had taken when it was handed over (:data:`ELAPSED_ENV`): 0 when
    not a number of seconds from 0 to a day."""
    try:
        value = float(text or 0)
    except ValueError:
        return 0.0
    return value if 0 <= value <= 86400 else 0.0


def _left(deadline: float) -> float:
    """Seconds left of a call's wait for room (``deadline``: ``time.monotonic()``), 0 once
    it passed."""
    return max(0.0, deadline - time.monotonic())


def _hold(
    request: dict[str, Any],
    socket_path: str | None,
    log_dir: str | None,
    deadline: float,
    *,
    handed_over: str | None = None,
) -> _Hold:
    """Through the daemon when it answers (and runs the same policy), else the library; the
    library at once for a call the compiled front end ``handed_over`` (saying why). Each waits
    for room only until the call's ``deadline`` (``time.monotonic()``), fixed once as the
    guarded ffmpeg started: a wait handed on goes on, never starts again."""
    if handed_over is not None:
        quiet = handed_over.startswith("no daemon answers")  # as the Python guard says nothing
        _log(log_dir, f"the compiled front end handed this call over: {handed_over}; "
             "reserving through the ledger", debug=quiet)  # fmt: skip
        return _LibraryHold(request, log_dir, deadline)
    runtime = os.environ.get("JANITOR_RUNTIME_DIR")
    path = os.path.join(runtime, "janitor.sock") if runtime else socket_path
    if path:
        from janitor.jobs.daemon_client import DaemonClient

        try:
            daemon = DaemonClient(path, timeout=answer_timeout())
        except OSError:
            daemon = None
        if daemon is not None:
            try:
                return _DaemonHold(daemon, request, log_dir, deadline)
            except (ReservationRefused, Stopped):
                daemon.close()
                raise
            except (GuardError, OSError, ValueError) as exc:
                daemon.close()  # another policy, an old daemon: the library decides, said so
                _log(log_dir, f"the daemon at {path} did not take this call ({exc}); "
                     "reserving through the ledger")  # fmt: skip
    return _LibraryHold(request, log_dir, deadline)


def _run(real: str, args: list[str], hold: _Hold, log_dir: str | None) -> int:
    from janitor.jobs.supervise import Supervised, forward_signals, restore_signals

    before = {h.output: _identity(h.output) for h in hold.session.writes if h.output}
    try:
        child, previous = forward_signals(lambda: Supervised([real, *args]))
    except OSError as exc:
        hold.release()
        _say(f"cannot run {real}: {exc.strerror}")
        return EXIT_NO_FFMPEG
    stopped = None
    try:
        try:
            hold.cover(child.pid)
        except Exception:
            pass  # it ended already, or the ledger is busy: the guard's own life still covers it
        stopped = _watch(child, hold)
        if stopped is not None:
            child.stop(5.0)
    finally:
        restore_signals(previous)
        if child.returncode is None:
            child.stop(5.0)
        code = child.wait()
        assert code is not None
        if stopped is None:
            stopped = _failed_below_floor(hold, code)
        removed = []
        if stopped is not None:
            removed = [o for o, b in before.items() if _remove_output(o, b)]
        try:
            hold.release(_written(before))
        except Exception:
            pass  # ended with us: the owner is gone once we exit
    if stopped is not None:
        tail = "; the partial output was removed" if removed else ""
        line = f"{stopped}{tail}. Free space there (`janitor status` shows the volume) and retry"
        _say(line)
        _log(log_dir, line)
        return EXIT_REFUSED
    return _finish(code)
