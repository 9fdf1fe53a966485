"""The guarded ffmpeg: to its caller it is ffmpeg, and every big write it makes is reserved first.

batchalign3 runs a bare ``ffmpeg`` from ``PATH`` for every big write it makes, so a guard first
on ``PATH`` protects it unchanged (``janitor shim install``, ``janitor run``). For each call the
guard works out the files ffmpeg will write and their bytes (janitor.jobs.ffmpeg), reserves them on
the trees that hold them (janitor.jobs.writes; through the daemon's socket when it runs, else
through the ledger directly), then runs the real ffmpeg under the same supervision as
``janitor exec`` (janitor.jobs.supervise): stopped when its reservation is put at risk or its
output outgrows the reservation, and never outliving the guard. Arguments, stdin, stdout, stderr
and the exit status are ffmpeg's own; signals sent to the guard reach ffmpeg.

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

# Loaded with the package already (janitor.errors prints sizes with it): costs nothing more.
from janitor.humanize import format_duration, format_size

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from janitor.jobs.supervise import Supervised

__all__ = [
    "DEFAULT_WAIT_S",
    "EXIT_NO_FFMPEG",
    "EXIT_REFUSED",
    "GUARD_MARK",
    "INFO_OPTIONS",
    "asks_only_for_information",
    "find_real_ffmpeg",
    "main",
]

#: Refused or stopped for lack of space (EX_TEMPFAIL), as every janitor command.
EXIT_REFUSED = 75
#: No real ffmpeg to run (what a shell says for a command it cannot find).
EXIT_NO_FFMPEG = 127
#: Every guard script carries this line; the search for the real ffmpeg skips such files.
GUARD_MARK = b"# space-janitor guard"
#: How often the running ffmpeg's output and volume are looked at.
POLL_S = 0.2
#: How long a job's first write waits for room by default (batchalign3's memory gate waits
#: 120 s too); ``guard_wait_s`` and ``JANITOR_GUARD_WAIT_S`` change it.
DEFAULT_WAIT_S = 120.0
#: How far an output may pass its reservation before ffmpeg is stopped: estimates are within
#: 1 %, and allocation rounds up to blocks.
MARGIN = 0.05
SLACK = 256 * 1024
#: ffmpeg's options that print something and exit (OPT_EXIT in its option table, 5.1 to 7.1):
#: the estimator's parser stops at one of them (janitor.jobs.ffmpeg, kind ``_EXIT``).
INFO_OPTIONS = frozenset(
    ("-L", "-h", "-?", "-help", "--help", "-version", "-buildconf", "-formats", "-muxers",
     "-demuxers", "-devices", "-codecs", "-decoders", "-encoders", "-bsfs", "-protocols",
     "-filters", "-pix_fmts", "-layouts", "-sample_fmts", "-dispositions", "-colors",
     "-hwaccels", "-sources", "-sinks")
)  # fmt: skip


class GuardError(Exception):
    """The guard cannot do its part; the call then runs unguarded (never a broken ffmpeg)."""


class Refused(Exception):
    """A write does not fit: the refusal's numbers, as the daemon or the library gave them."""

    def __init__(self, output: str, numbers: dict[str, Any]) -> None:
        super().__init__(output)
        self.output = output
        self.numbers = numbers


def asks_only_for_information(args: Sequence[str]) -> bool:
    """Whether this call writes no file for certain: no arguments (ffmpeg prints its usage) or
    an information option first (``-version``, ``-h`` ...).

    Checked before anything else is imported: batchalign3 runs ``ffmpeg -version`` before every
    conversion, so it must cost no more than Python's start-up and an ``exec``. The estimator
    would say the same (its parser stops at such an option, whatever follows), only later.
    """
    return not args or args[0] in INFO_OPTIONS


# -- finding the real ffmpeg -----------------------------------------------------------------------


def _is_guard(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return GUARD_MARK in head


def find_real_ffmpeg(env: dict[str, str] | None = None, me: str | None = None) -> str:
    """The ffmpeg to run: ``JANITOR_FFMPEG``, else the first ``ffmpeg`` on ``PATH`` that is not a
    guard (never this program). GuardError with a one-line reason when there is none."""
    env = os.environ if env is None else env  # type: ignore[assignment]
    assert env is not None
    mine = os.path.realpath(me or sys.argv[0])
    chosen = env.get("JANITOR_FFMPEG")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise GuardError(f"JANITOR_FFMPEG={chosen} is not an executable file")
        if os.path.realpath(chosen) == mine or _is_guard(chosen):
            raise GuardError(f"JANITOR_FFMPEG={chosen} is the guard itself; point it at ffmpeg")
        return chosen
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", "ffmpeg")
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        if os.path.realpath(candidate) == mine or _is_guard(candidate):
            continue
        return candidate
    raise GuardError(
        "no ffmpeg found on PATH after the guard; install ffmpeg or set JANITOR_FFMPEG"
    )


# -- the daemon, over its socket -------------------------------------------------------------------


class _Daemon:
    """A minimal HTTP/1.1 client on the daemon's Unix socket: one connection, JSON bodies.

    Hand-written on purpose, on ``_socket`` with a small JSON reader: socket (enum, selectors),
    json (re) and http.client would cost the guard more start-up than the whole request takes.
    """

    def __init__(self, path: str, timeout: float = 120.0) -> None:
        self.path = path
        self.timeout = timeout
        self._connect()

    def _connect(self) -> None:
        import _socket

        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        try:
            self.sock.connect(self.path)
        except OSError:
            self.sock.close()
            raise
        self._buf = b""
        self._unread = 0

    def send(self, method: str, url: str, body: Any = None) -> None:
        """Send a request without waiting for its answer (read, and dropped, by the next call)."""
        data = b"" if body is None else _dumps(body).encode()
        head = (
            f"{method} {url} HTTP/1.1\r\nhost: janitor\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n\r\n"
        ).encode()
        self.sock.sendall(head + data)
        self._unread += 1

    def call(self, method: str, url: str, body: Any = None) -> tuple[int, Any]:
        try:
            self.send(method, url, body)
            while self._unread > 1:
                self._response()
            status, payload = self._response()
        except OSError:
            # The daemon closes an idle connection (keep-alive ends) while a long ffmpeg runs:
            # ask again on a new one. Only reads and idempotent ends come this late.
            self.close()
            self._connect()
            self.send(method, url, body)
            status, payload = self._response()
        return status, _loads(payload) if payload else None

    def _response(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self._buf:
            self._recv()
        header, _, self._buf = self._buf.partition(b"\r\n\r\n")
        lines = header.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(self._buf) < length:
            self._recv()
        payload, self._buf = self._buf[:length], self._buf[length:]
        self._unread -= 1
        return status, payload

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise OSError("the daemon closed the connection")
        self._buf += chunk

    def close(self) -> None:
        self.sock.close()


def _dumps(obj: Any) -> str:
    """JSON text of dicts, lists, strings, numbers, booleans and None."""
    if obj is None:
        return "null"
    if obj is True or obj is False:
        return "true" if obj else "false"
    if isinstance(obj, int):
        return int.__repr__(obj)
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            raise ValueError(f"{obj!r} is not a JSON number")
        return float.__repr__(obj)
    if isinstance(obj, str):
        out = []
        for ch in obj:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ch < " ":
                out.append(f"\\u{ord(ch):04x}")
            elif "\ud800" <= ch <= "\udfff":  # a surrogate-escaped byte: not valid UTF-8
                raise ValueError(f"{obj!r} is not valid text")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    if isinstance(obj, dict):
        return "{" + ",".join(f"{_dumps(str(k))}:{_dumps(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(_dumps(v) for v in obj) + "]"
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _loads(data: bytes) -> Any:
    """The value of a JSON document (what the daemon answers), read without ``json``/``re``."""
    text = data.decode()
    try:
        value, end = _value(text, _skip(text, 0))
    except (IndexError, KeyError):
        raise ValueError("truncated or broken JSON") from None
    if _skip(text, end) != len(text):
        raise ValueError("trailing data after JSON")
    return value


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _value(text: str, i: int) -> tuple[Any, int]:
    ch = text[i]
    if ch == "{":
        obj: dict[str, Any] = {}
        i = _skip(text, i + 1)
        if text[i] == "}":
            return obj, i + 1
        while True:
            key, i = _value(text, i)
            i = _skip(text, i)
            if text[i] != ":":
                raise ValueError(f"expected ':' at {i}")
            obj[key], i = _value(text, _skip(text, i + 1))
            i = _skip(text, i)
            if text[i] == "}":
                return obj, i + 1
            if text[i] != ",":
                raise ValueError(f"expected ',' at {i}")
            i = _skip(text, i + 1)
    if ch == "[":
        arr: list[Any] = []
        i = _skip(text, i + 1)
        if text[i] == "]":
            return arr, i + 1
        while True:
            item, i = _value(text, i)
            arr.append(item)
            i = _skip(text, i)
            if text[i] == "]":
                return arr, i + 1
            if text[i] != ",":
                raise ValueError(f"expected ',' at {i}")
            i = _skip(text, i + 1)
    if ch == '"':
        out = []
        i += 1
        while True:
            j = i
            while text[j] not in '"\\':
                j += 1
            out.append(text[i:j])
            if text[j] == '"':
                return "".join(out), j + 1
            esc = text[j + 1]
            if esc == "u":
                code = int(text[j + 2 : j + 6], 16)
                i = j + 6
                if 0xD800 <= code < 0xDC00 and text[i : i + 2] == "\\u":
                    low = int(text[i + 2 : i + 6], 16)
                    if 0xDC00 <= low < 0xE000:
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        i += 6
                out.append(chr(code))
            else:
                out.append(_ESCAPES[esc])
                i = j + 2
    for word, val in (("true", True), ("false", False), ("null", None)):
        if text.startswith(word, i):
            return val, i + len(word)
    j = i
    while j < len(text) and text[j] in "+-0123456789.eE":
        j += 1
    number = text[i:j]
    if not number:
        raise ValueError(f"unexpected {ch!r} at {i}")
    return (float(number) if any(c in number for c in ".eE") else int(number)), j


# -- the two ways to hold a call's writes ----------------------------------------------------------


class Held:
    """One write held for the call: its reservation, the output, the bytes the output may
    reach, the floor of its volume, and whether it is its job's working set (``pooled``: it
    stays when the call ends)."""

    __slots__ = ("allowed", "floor", "output", "pooled", "reservation")

    def __init__(
        self, reservation: str, output: str, allowed: int, floor: int, pooled: bool
    ) -> None:
        self.reservation = reservation
        self.output = output
        self.allowed = allowed
        self.floor = floor
        self.pooled = pooled


class Stopped(Exception):
    """The call's job must stop (its working set was put at risk): ffmpeg is not run."""


class _Hold:
    """Reservations (and pins) held for one call, through the daemon or the library."""

    #: "daemon" or "ledger": who decided
    via: str
    writes: list[Held]
    pins: list[str]
    unguarded: list[str]
    waited_s: float
    #: The call's job label and ``janitor run`` id, for the log's ``wrote`` lines.
    labels: dict[str, Any]

    @property
    def own(self) -> list[str]:
        """The reservations that end with the call (not a job's working set)."""
        return [h.reservation for h in self.writes if not h.pooled]

    def cover(self, pid: int) -> None:
        raise NotImplementedError

    def at_risk(self, rid: str) -> str | None:
        raise NotImplementedError

    def release(self, written: list[dict[str, Any]] | None = None) -> None:
        """End what the call alone held; ``written`` (``{"path", "bytes"}`` per output) goes
        in the ledger's log for ``janitor run``'s summary."""
        raise NotImplementedError


def _unpack(hold: _Hold, session: dict[str, Any]) -> None:
    hold.writes = [
        Held(r["id"], r["output"], r["bytes"], r["floor"], bool(r.get("pooled")))
        for r in session["reservations"]
    ]
    hold.pins = [p if isinstance(p, str) else p["id"] for p in session.get("pins", ())]
    hold.unguarded = list(session.get("unguarded", ()))
    hold.waited_s = float(session.get("waited_s") or 0.0)


class _DaemonHold(_Hold):
    via = "daemon"

    def __init__(self, daemon: _Daemon, request: dict[str, Any], log_dir: str | None) -> None:
        self.daemon = daemon
        self.labels = {"job": request.get("job"), "run": request.get("run")}
        status, body = daemon.call("POST", "/v1/guard", request)
        if status == 202 and isinstance(body, dict) and body.get("ticket"):
            # Queued: say so once, then wait in turn (the daemon answers when admitted).
            _say(body.get("message", "waiting for room"))
            _log(log_dir, f"waiting: {body.get('message', '')}")
            # The daemon answers when the call is admitted or its wait runs out.
            daemon.sock.settimeout(float(request.get("wait_s") or 0) + 60.0)
            status, body = daemon.call(
                "POST", "/v1/guard/wait", {"ticket": body["ticket"], "owner_pid": os.getpid()}
            )
            daemon.sock.settimeout(daemon.timeout)
        if status == 507 and isinstance(body, dict) and body.get("error") == "at_risk":
            raise Stopped(body.get("message", "its job is at risk"))
        if status == 507 and isinstance(body, dict) and body.get("error") in _REFUSALS:
            raise Refused(body.get("output") or "", body)
        if status != 200:
            said = body.get("message") if isinstance(body, dict) else None
            raise GuardError(f"the daemon answered {status}: {said or body}")
        _unpack(self, body)

    def cover(self, pid: int) -> None:
        # not waited for: the guard owns the reservation too, and ffmpeg dies with the guard
        for rid in self.own:
            self.daemon.send("POST", f"/v1/reservations/{rid}/cover", {"pid": pid})

    def at_risk(self, rid: str) -> str | None:
        status, body = self.daemon.call("GET", f"/v1/reservations/{rid}")
        return body.get("at_risk") if status == 200 and isinstance(body, dict) else None

    def release(self, written: list[dict[str, Any]] | None = None) -> None:
        if self.own or self.pins or written:
            body = {"reservations": self.own, "pins": self.pins, "written": written or []}
            self.daemon.call("POST", "/v1/guard/release", {**body, **self.labels})


#: The ``error`` of a 507 answer that refuses a call (the numbers say why).
_REFUSALS = ("refused", "never_fits")


class _LibraryHold(_Hold):
    """No daemon: the ledger directly, as ``janitor reserve`` does (slower to start)."""

    via = "ledger"

    def __init__(self, request: dict[str, Any], log_dir: str | None) -> None:
        from janitor.core import Janitor
        from janitor.errors import JanitorError, ReservationRefused, SpaceRisk
        from janitor.jobs.writes import CallRequest, open_writes

        def waiting(message: str) -> None:
            _say(message)
            _log(log_dir, f"waiting: {message}")

        try:
            self.jan = Janitor.from_settings()
            session = open_writes(self.jan, CallRequest.from_wire(request), on_wait=waiting)
        except ReservationRefused as exc:
            raise Refused(exc.output or "", exc.as_dict()) from None
        except SpaceRisk as exc:
            raise Stopped(exc.reason) from None
        except (JanitorError, OSError) as exc:
            raise GuardError(str(exc)) from None
        self.session = session
        self.labels = {"job": request.get("job"), "run": request.get("run")}
        _unpack(self, session.as_dict())

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

    def release(self, written: list[dict[str, Any]] | None = None) -> None:
        from janitor.jobs.writes import Written, close

        outputs = [Written.from_wire(w) for w in written or ()]
        close(self.jan, self.own, self.pins, outputs, **self.labels)
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


def refusal_line(output: str, n: dict[str, Any]) -> str:
    """The line a refused call prints: the output, the bytes, the volume and its numbers, and
    what to do."""
    free, floor, reserved = n.get("free", 0), n.get("floor", 0), n.get("reserved", 0)
    short = n.get("shortfall", 0)
    evicted = n.get("evicted", 0)
    volume = n.get("volume", "?")
    head = f"refused to write {output} ({format_size(n.get('requested', 0))}) on volume {volume}: "
    if n.get("error") == "never_fits":
        return (
            head + f"it can never fit there: capacity {format_size(n.get('capacity', 0))}, "
            f"floor {format_size(floor)}, {format_size(n.get('held', 0))} held by files outside "
            f"every reservation and cache leave at most {format_size(n.get('most', 0))} even "
            f"once every job ends. Free space on {volume} or use a bigger disk; ffmpeg did not run"
        )
    queued = n.get("queued", 0)
    ahead = f", {format_size(queued)} wanted by jobs waiting ahead" if queued else ""
    after = f" (after evicting {format_size(evicted)} of cache)" if evicted else ""
    waited = n.get("waited_s", 0)
    after += f" (after waiting {format_duration(waited)} for room)" if waited else ""
    return (
        head + f"{format_size(free)} free, floor {format_size(floor)}, {format_size(reserved)} "
        f"reserved by others{ahead}, short by {format_size(short)}{after}. Free space on "
        f"{volume} (`janitor status` shows who holds it) and retry; ffmpeg did not run"
    )


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


def _written(before: dict[str, tuple[int, int] | None]) -> list[dict[str, Any]]:
    """What ffmpeg left at each output (a partial file too), leaving out a file it did not
    touch: ``janitor run`` sums these up as what the run wrote."""
    out = []
    for path, was in before.items():
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if (st.st_ino, st.st_mtime_ns) != was:
            out.append({"path": path, "bytes": st.st_size})
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
        for held in hold.writes:
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


def _finish(returncode: int) -> int:
    """Exit as ffmpeg did: by the same signal if it was killed by one."""
    if returncode >= 0:
        return returncode
    import signal

    sig = -returncode
    try:
        signal.signal(sig, signal.SIG_DFL)
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
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        real = find_real_ffmpeg(me=me)
    except GuardError as exc:
        _say(str(exc))
        return EXIT_NO_FFMPEG
    if asks_only_for_information(args):
        # Not logged: hundreds a recording would push the lines that matter out of guard.log.
        return _exec(real, args)
    try:
        request = _plan(args, cache_dir, real)
    except Exception as exc:  # never break ffmpeg: an estimate we cannot make runs unguarded
        _log(log_dir, f"unguarded (estimate failed: {exc!r}): ffmpeg {' '.join(args)}", debug=True)
        return _exec(real, args)
    if isinstance(request, str):
        _log(log_dir, f"unguarded ({request}): ffmpeg {' '.join(args)}", debug=True)
        return _exec(real, args)
    if os.environ.get("JANITOR_POLICY"):
        policy = os.environ["JANITOR_POLICY"]
    if policy:
        request["policy"] = policy
    request["wait_s"] = _wait_s(wait_s)
    try:
        hold = _hold(request, socket_path, log_dir)
    except Refused as exc:
        _say(refusal_line(exc.output, exc.numbers))
        _log(log_dir, f"refused: {refusal_line(exc.output, exc.numbers)}")
        return EXIT_REFUSED
    except Stopped as exc:
        line = f"stopped before ffmpeg ran: {exc}. Free space there and retry"
        _say(line)
        _log(log_dir, line)
        return EXIT_REFUSED
    except Exception as exc:  # a broken ledger, a confused daemon: run unguarded, say so
        _log(log_dir, f"unguarded (cannot reserve: {exc}): ffmpeg {' '.join(args)}")
        return _exec(real, args)
    if not hold.writes:
        hold.release()
        _log(log_dir, "unguarded (no managed volume): ffmpeg " + " ".join(args), debug=True)
        return _exec(real, args)
    _log(
        log_dir,
        f"reserved through the {hold.via}"
        + (f" after waiting {hold.waited_s:.1f} s" if hold.waited_s else "")
        + ": "
        + ", ".join(
            f"{format_size(h.allowed)} for {h.output} ({h.reservation}"
            + (", the job's working set)" if h.pooled else ")")
            for h in hold.writes
        ),
    )
    return _run(real, args, hold, log_dir)


def _wait_s(default: float) -> float:
    """How long a job's first write may wait for room: ``JANITOR_GUARD_WAIT_S``, else what
    ``shim install`` resolved (``guard_wait_s``); 0 refuses at once."""
    text = os.environ.get("JANITOR_GUARD_WAIT_S")
    if text:
        try:
            value = float(text)
        except ValueError:
            return default
        if value == value and 0 <= value < 86400:  # not NaN, at most a day
            return value
    return default


def _plan(args: list[str], cache_dir: str | None, real: str) -> dict[str, Any] | str:
    """The request for this call's writes, or why it cannot be estimated."""
    from janitor.jobs import ffmpeg

    folder = os.environ.get("JANITOR_CACHE_DIR") or cache_dir
    probe = ffmpeg.Probe(os.path.join(folder, "probes") if folder else None, ffmpeg=real)
    cwd = os.getcwd()
    est = ffmpeg.estimate_command(args, cwd=cwd, probe=probe)
    if isinstance(est, ffmpeg.NotEstimable):
        return est.reason
    inv = ffmpeg.parse(args)
    sources = [ffmpeg.local_path(i.url) for i in inv.inputs]
    outputs = []
    for o in est:
        out: dict[str, Any] = {"path": o.path, "bytes": int(o.bytes)}
        source = sources[o.input_index] if o.input_index < len(sources) else None
        if source is not None:
            out["source"] = os.path.normpath(os.path.join(cwd, source))
            if o.whole_bytes:
                out["whole_bytes"] = int(o.whole_bytes)
        outputs.append(out)
    inputs = [os.path.normpath(os.path.join(cwd, i)) for i in ffmpeg.input_files(inv)]
    return {
        "outputs": outputs,
        "inputs": inputs,
        "owner_pid": os.getpid(),
        "writer_pid": os.getppid(),
        "job": os.environ.get("JANITOR_JOB") or "ffmpeg",
        "run": os.environ.get("JANITOR_RUN") or None,
    }


def _hold(request: dict[str, Any], socket_path: str | None, log_dir: str | None) -> _Hold:
    """Through the daemon when it answers (and runs the same policy), else the library."""
    runtime = os.environ.get("JANITOR_RUNTIME_DIR")
    path = os.path.join(runtime, "janitor.sock") if runtime else socket_path
    if path:
        try:
            daemon = _Daemon(path)
        except OSError:
            daemon = None
        if daemon is not None:
            try:
                return _DaemonHold(daemon, request, log_dir)
            except (Refused, Stopped):
                daemon.close()
                raise
            except (GuardError, OSError, ValueError) as exc:
                daemon.close()  # another policy, an old daemon: the library decides, said so
                _log(log_dir, f"the daemon at {path} did not take this call ({exc}); "
                     "reserving through the ledger")  # fmt: skip
    return _LibraryHold(request, log_dir)


def _run(real: str, args: list[str], hold: _Hold, log_dir: str | None) -> int:
    from janitor.jobs.supervise import Supervised, forward_signals, restore_signals

    before = {h.output: _identity(h.output) for h in hold.writes if h.output}
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
