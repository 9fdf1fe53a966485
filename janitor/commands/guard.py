"""The guarded ffmpeg: to its caller it is ffmpeg, and every big write it makes is reserved first.

batchalign3 runs a bare ``ffmpeg`` from ``PATH`` for every big write it makes, so a guard first
on ``PATH`` protects it unchanged (``janitor shim install``, ``janitor run``). This is the Python
front end; ``native/guard.c`` is the compiled one, and both speak one protocol
(:mod:`janitor.guarding.protocol`). It sends the call as it got it (its arguments, folder and
parent, and the variables that shape it) to the daemon's ``POST /v1/guard/call`` (through
janitor.commands.daemon_client), or, with no daemon answering, decides it in its own process with
the same code (:mod:`janitor.guarding.verdict`, through the ledger). Either way it carries out
the verdict: run the real ffmpeg as it is, refuse, wait in turn, or run it under the call's
reservations with the one watch of a running writer (janitor.commands.watch): stopped when its
reservation is put at risk or its output outgrows the reservation, and never outliving the
guard. Arguments, stdin, stdout, stderr and the exit status are ffmpeg's own; signals sent to
the guard reach ffmpeg.

A call that cannot be estimated (video, compressed outputs, ``-f null``, pipes, unknown options)
or whose outputs lie on no managed volume is handed to the real ffmpeg with ``exec``: the guard
never breaks an ffmpeg call. A request for information (``ffmpeg -version``, which batchalign3
runs before every conversion, ``-h``, ``-buildconf`` ...; see :data:`INFO_OPTIONS`) writes no
file: it is exec'd at once, before anything is asked or loaded, and without a line in
``guard.log``. Refused or stopped, it exits 75 (EX_TEMPFAIL) with one stderr line that begins
``space-janitor:`` (batchalign3 shows ffmpeg's stderr to its users as it is), and the output is
not left behind.

This module runs on the path of every alignment group, so it imports next to nothing at start:
no typer, rich, pydantic or numpy, nor the estimator; the library is loaded only when no daemon
answers.
"""

from __future__ import annotations

import os
import sys
import time

from janitor.commands.watch import Watch, Watched
from janitor.guarding.mark import GUARD_MARK, is_guard
from janitor.guarding.protocol import CALL_ENV, CONFIG_KEYS, call_body, verdict_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from janitor.commands.daemon_client import DaemonClient
    from janitor.core import Janitor
    from janitor.guarding.held import HeldWrite, WriteSession, Written
    from janitor.guarding.request import CallRequest

__all__ = [
    "DEFAULT_WAIT_S",
    "ELAPSED_ENV",
    "EXIT_NO_FFMPEG",
    "EXIT_REFUSED",
    "FALLBACK_ENV",
    "GUARD_MARK",
    "INFO_OPTIONS",
    "LOG_ROTATE_BYTES",
    "WAIT_GRACE_S",
    "asks_only_for_information",
    "find_real",
    "find_real_ffmpeg",
    "is_guard",
    "main",
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
#: How long a job's first write waits for room by default (batchalign3's memory gate waits
#: 120 s too); ``guard_wait_s`` and ``JANITOR_GUARD_WAIT_S`` change it.
DEFAULT_WAIT_S = 120.0
#: How long past a call's deadline a front end still waits for the daemon's verdict on it (its
#: last try at admission) before the ledger decides: past that, the daemon is not answering.
WAIT_GRACE_S = 2.0
#: ``guard.log`` is rotated past this size (one old copy, ``guard.log.1``).
LOG_ROTATE_BYTES = 1 << 20
#: ffmpeg's options that print something and exit (OPT_EXIT in its option table, 5.1 to 7.1):
#: the estimator's parser stops at one of them (janitor.guarding.ffmpeg.args, kind ``EXIT``).
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
            if os.stat(path).st_size > LOG_ROTATE_BYTES:
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
    from janitor.guarding.held import Written

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


# -- who holds a call that runs: the daemon, or this process through the ledger --------------------


class _Hold:
    """What a ``run`` verdict granted, held for the call while ffmpeg runs: its reservations
    kept live for ffmpeg (``cover``), asked whether they are at risk, and ended with what
    ffmpeg wrote (``release``: the verdict's ``release`` body, ``written`` added)."""

    def __init__(self, verdict: dict[str, Any], session: WriteSession) -> None:
        self.release_body: dict[str, Any] = verdict["release"]
        self.holds = bool(verdict.get("holds"))
        self.session = session

    @property
    def own(self) -> list[str]:
        """The reservations that end with the call (a job's working set does not)."""
        return list(self.release_body.get("reservations", ()))

    def cover(self, pid: int) -> None:
        raise NotImplementedError

    def at_risk(self, rid: str) -> str | None:
        raise NotImplementedError

    def release(self, written: Sequence[Written] = ()) -> None:
        """End what the call alone held; ``written`` (what ffmpeg left at each output) goes in
        the ledger's log for ``janitor run``'s summary."""
        raise NotImplementedError


class _DaemonHold(_Hold):
    def __init__(self, daemon: DaemonClient, verdict: dict[str, Any]) -> None:
        from janitor.guarding.held import WriteSession

        release = verdict.get("release")
        if not isinstance(release, dict):
            raise GuardError("the daemon's answer has no release")
        try:
            session = WriteSession.from_wire(verdict["session"])
        except (KeyError, TypeError, ValueError, AttributeError):
            # What the daemon granted ends first: the ledger will hold the call anew.
            daemon.call("POST", "/v1/guard/release", {**release, "written": []})
            raise GuardError(
                "the daemon's session is not one the Python guard understands"
            ) from None
        super().__init__(verdict, session)
        self.daemon = daemon

    def cover(self, pid: int) -> None:
        # not waited for: the guard owns the reservation too, and ffmpeg dies with the guard
        for rid in self.own:
            self.daemon.send("POST", f"/v1/reservations/{rid}/cover", {"pid": pid})

    def at_risk(self, rid: str) -> str | None:
        status, body = self.daemon.call("GET", f"/v1/reservations/{rid}")
        return body.get("at_risk") if status == 200 and isinstance(body, dict) else None

    def release(self, written: Sequence[Written] = ()) -> None:
        if self.holds or written:
            body = {**self.release_body, "written": [w.as_dict() for w in written]}
            self.daemon.call("POST", "/v1/guard/release", body)


class _LedgerHold(_Hold):
    """No daemon: the ledger directly, as ``janitor reserve`` does."""

    def __init__(self, jan: Janitor, verdict: dict[str, Any]) -> None:
        from janitor.guarding.held import WriteSession

        super().__init__(verdict, WriteSession.from_wire(verdict["session"]))
        self.jan = jan

    def cover(self, pid: int) -> None:
        for rid in self.own:
            self.jan.cover(rid, pid)

    def at_risk(self, rid: str) -> str | None:
        from janitor.errors import SpaceRisk

        try:
            self.jan.check_risk(self.jan.get(rid))
        except SpaceRisk as exc:
            return exc.reason
        return None

    def release(self, written: Sequence[Written] = ()) -> None:
        from janitor.guarding.close import close_released

        close_released(self.jan, self.release_body, written)
        self.jan.ledger.close()


# -- the call's verdict: the daemon's, else this process's ---------------------------------------


def _socket(socket_path: str | None) -> str | None:
    runtime = os.environ.get("JANITOR_RUNTIME_DIR")
    return os.path.join(runtime, "janitor.sock") if runtime else socket_path


def _tell(verdict: dict[str, Any], log_dir: str | None) -> None:
    """Print and log what a verdict says to."""
    line = verdict.get("say")
    if line:
        _say(str(line))
    line = verdict.get("log")
    if line:
        _log(log_dir, str(line), debug=bool(verdict.get("debug")))


def _decide(
    call: dict[str, Any],
    socket_path: str | None,
    log_dir: str | None,
    started: float,
    *,
    handed_over: str | None = None,
) -> tuple[dict[str, Any], _Hold | None]:
    """The call's verdict (what to do) and, for one that runs, who holds it: the daemon when
    it answers with a verdict, else this process through the ledger; the ledger at once for a
    call the compiled front end ``handed_over`` (saying why). A queued call's wait ends at the
    call's deadline, fixed as the guarded ffmpeg ``started`` (``time.monotonic()``): a wait
    handed on goes on, never starts again."""
    if handed_over is not None:
        quiet = handed_over.startswith("no daemon answers")  # as the Python guard says nothing
        _log(log_dir, f"the compiled front end handed this call over: {handed_over}; "
             "reserving through the ledger", debug=quiet)  # fmt: skip
        return _here(call, log_dir, started)
    path = _socket(socket_path)
    if path:
        from janitor.commands.daemon_client import DaemonClient

        try:
            daemon = DaemonClient(path, timeout=answer_timeout())
        except OSError:
            daemon = None
        if daemon is not None:
            try:
                return _through_daemon(daemon, call, log_dir)
            except (GuardError, OSError, ValueError) as exc:
                daemon.close()  # another policy, an old daemon: the ledger decides, said so
                _log(log_dir, f"the daemon at {path} did not take this call ({exc}); "
                     "reserving through the ledger")  # fmt: skip
    return _here(call, log_dir, started)


def _through_daemon(
    daemon: DaemonClient, call: dict[str, Any], log_dir: str | None
) -> tuple[dict[str, Any], _Hold | None]:
    """The daemon's verdict (``POST /v1/guard/call``, then its wait in turn); GuardError when
    it answers what is not one, OSError when it dies or stops answering (by the call's deadline
    and :data:`WAIT_GRACE_S`, once the call waits)."""
    status, body = daemon.call("POST", "/v1/guard/call", call)
    action = verdict_of(status, body)
    if action == "wait":
        ticket = body.get("ticket")
        if not isinstance(ticket, str) or not ticket:
            raise GuardError("the daemon queued the call without a ticket")
        _tell(body, log_dir)
        # The daemon answers when the call is admitted or its wait runs out; one that does
        # not by then (dead, stopped) leaves the rest of the wait to the ledger.
        status, body = daemon.call(
            "POST", "/v1/guard/call/wait", {"ticket": ticket, "owner_pid": os.getpid()},
            timeout=_seconds(body.get("wait_s")) + WAIT_GRACE_S,
        )  # fmt: skip
        action = verdict_of(status, body)
        if action in ("wait", "exec"):
            action = None  # not what a wait ends in
    if action is None:
        said = body.get("message") if isinstance(body, dict) else None
        raise GuardError(f"the daemon answered {status}: {said or body}")
    if action == "run":
        return body, _DaemonHold(daemon, body)
    daemon.close()
    return body, None


def _here(
    call: dict[str, Any], log_dir: str | None, started: float
) -> tuple[dict[str, Any], _Hold | None]:
    """The verdict decided in this process, as the daemon decides it, through the ledger
    (opened only for a call that writes what can be reserved)."""
    from janitor.guarding.verdict import Verdict, admitted, decide_wait, local_probe, planned

    request = planned(call, probe_for=local_probe)
    if isinstance(request, Verdict):
        return request.body, None
    from janitor.core import Janitor
    from janitor.errors import LedgerBusy

    jan = Janitor.from_settings()
    deadline = started + request.wait_s  # the call's one deadline (a wait handed on included)
    try:
        # The ledger's lock is waited for no longer than the call waits for room, and the
        # grace a front end gives a verdict: a writer that hangs holding it (a stopped daemon)
        # must not hold the call past its deadline, then let it run unguarded.
        with jan.ledger.waiting_at_most(deadline - time.monotonic() + WAIT_GRACE_S):
            verdict = admitted(jan, request, call["args"], received=started, via="ledger")
            if verdict.prepared is not None:  # queued: say so once, then wait in turn
                _tell(verdict.body, log_dir)
                ticket = verdict.body["ticket"]
                verdict = decide_wait(jan, verdict.prepared, ticket, via="ledger")
    except LedgerBusy as exc:
        jan.ledger.close()
        if time.monotonic() < deadline:
            raise  # the lock's own timeout came first: as any broken ledger
        return _ledger_held(request, exc), None
    except BaseException:
        jan.ledger.close()
        raise
    if verdict.body["action"] == "run":
        return verdict.body, _LedgerHold(jan, verdict.body)
    jan.ledger.close()
    return verdict.body, None


def _ledger_held(request: CallRequest, exc: Exception) -> dict[str, Any]:
    """A refusal for a call whose wait ran out while another process held the ledger's lock:
    nothing could be reserved, so nothing is written (the call fails up front, as any call
    refused for room)."""
    paths = ", ".join(w.path for w in request.writes) or "its outputs"
    line = (f"refused to write {paths}: its wait ran out while another process held the "
            f"ledger's lock ({exc}); nothing was reserved")  # fmt: skip
    return {"action": "refuse", "say": line, "log": f"refused: {line}"}


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
    resolved = dict(zip(CONFIG_KEYS, (policy, cache_dir, repr(wait_s)), strict=True))
    try:
        call = call_body(
            "ffmpeg", real, args, cwd=os.getcwd(), owner_pid=os.getpid(), writer_pid=parent,
            env={k: os.environ[k] for k in CALL_ENV if os.environ.get(k)},
            config={k: v for k, v in resolved.items() if v},
            elapsed_s=round(time.monotonic() - started, 3),
        )  # fmt: skip
        verdict, hold = _decide(call, socket_path, log_dir, started, handed_over=handed_over)
    except Exception as exc:  # a broken ledger, a confused daemon: run unguarded, say so
        _log(log_dir, f"unguarded (cannot reserve: {exc}): ffmpeg {' '.join(args)}")
        return _exec(real, args)
    _tell(verdict, log_dir)
    if verdict["action"] == "refuse":
        return EXIT_REFUSED
    if hold is None:  # exec: nothing to reserve
        return _exec(real, args)
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


def _seconds(text: object) -> float:
    """Seconds from a word of the protocol (:data:`ELAPSED_ENV`, a queued call's ``wait_s``):
    0 when not a number of seconds from 0 to a day."""
    try:
        value = float(text or 0)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return value if 0 <= value <= 86400 else 0.0


# -- running ffmpeg under the call's reservations ---------------------------------------------


class _GuardWatch(Watch):
    """The guard's watch of ffmpeg: its outputs held to what the verdict granted, their risk
    asked of whoever holds them, in the guard's words."""

    def __init__(self, hold: _Hold, writes: Sequence[HeldWrite]) -> None:
        super().__init__([Watched(w.output, w.allowed, w.reservation, w.floor) for w in writes])
        self.hold = hold
        self.writes = list(writes)

    def cover(self, pid: int) -> None:
        try:
            self.hold.cover(pid)
        except Exception:
            pass  # it ended already, or the ledger is busy: the guard's own life still covers it

    def outgrown(self, index: int, written: int) -> str | None:
        from janitor.humanize import format_size

        held = self.writes[index]
        what = "its job has left of its working set" if held.pooled else "reserved for it"
        return (
            f"stopped ffmpeg: {held.output} reached {format_size(written)}, past the "
            f"{format_size(held.allowed)} {what}"
        )

    def at_risk(self, output: Watched) -> str | None:
        try:
            reason = self.hold.at_risk(output.reservation)
        except OSError:
            reason = None
        return f"stopped ffmpeg writing {output.path}: {reason}" if reason else None

    def fell_below(self, output: Watched) -> str:
        return (
            f"stopped ffmpeg writing {output.path}: its volume fell below its floor while it "
            "wrote (writers outside every reservation took the space)"
        )


def _run(real: str, args: list[str], hold: _Hold, log_dir: str | None) -> int:
    session = hold.session
    before = {h.output: _identity(h.output) for h in session.writes if h.output}
    watch = _GuardWatch(hold, session.writes)
    try:
        watch.start([real, *args])
    except OSError as exc:
        hold.release()
        _say(f"cannot run {real}: {exc.strerror}")
        return EXIT_NO_FFMPEG
    stopped = None
    removed: list[str] = []
    try:
        ended = watch.wait()
        stopped = ended.stopped
    finally:
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
    return ended.end_as_writer()
