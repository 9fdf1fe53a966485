"""The guard's two front ends under hostile input, and what the compiled one must do alone
(issue 26): a daemon that answers garbage or hangs, long argument lists, odd bytes in names,
an output that outgrows its reservation, a guard killed under a running ffmpeg.

Everything is real: the guard ``janitor shim install`` writes (compiled, then Python, through
the ``front_end`` fixture), the real ffmpeg, a tmpfs holding the media cache and the job temp
tree. The "daemons" that misbehave are small Unix-socket servers in a thread of the test.
"""

from __future__ import annotations

import ast
import json
import operator
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import janitor
from janitor.commands import guard, probe_guard, supervise, watch
from janitor.guarding import mark, protocol
from janitor.host.fastpaths import PORTABLE
from tests._daemon_helpers import eventually, socket_answers
from tests._fixtures.console import JANITOR_BIN, janitor_json
from tests._fixtures.guard import install_guard
from tests._fixtures.pipeline import PCM_RATE, REAL_FFMPEG, Pipeline

Cli = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = [
    pytest.mark.skipif(
        shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
        reason="ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)",
    ),
]

NATIVE = Path(janitor.__file__).parent / "native"
GUARD_C = NATIVE / "guard.c"


def _c_sources() -> str:
    """guard.c and the headers of ours it includes, as one text."""
    text = GUARD_C.read_text()
    for name in re.findall(r'^#include "([^"]+)"', text, re.M):
        text += "\n" + (NATIVE / name).read_text()
    return text


#: The operators a constant of guard.c is written with.
_C_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.Div: operator.truediv, ast.LShift: operator.lshift}  # fmt: skip


def _c_value(text: str) -> object:
    """The value of a ``#define``'s body as C reads it: a string literal, or a number written
    with + - * / << and parentheses; None for anything else (a cast, another macro)."""
    if re.fullmatch(r'"(?:[^"\\]|\\.)*"', text):
        return ast.literal_eval(text)

    def value(node: ast.expr) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _C_OPS:
            return float(_C_OPS[type(node.op)](value(node.left), value(node.right)))
        raise ValueError(text)

    try:
        return value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError):
        return None


def _c_defines() -> dict[str, object]:
    """Every object-like ``#define`` of the compiled front end, by name, with its value."""
    found = re.findall(r"^#define (\w+)[ \t]+(.+?)[ \t]*$", _c_sources(), re.M)
    return {name: _c_value(body) for name, body in found}


def _c_strings(name: str) -> list[str]:
    """The strings of the C array ``name`` in guard.c."""
    body = re.search(rf"\b{name}\[\] = \{{(.*?)\}};", _c_sources(), re.S)
    assert body, name
    return re.findall(r'"([^"]*)"', body.group(1))


#: guard.c's constants that Python holds too, with Python's value (C's milliseconds are
#: Python's seconds x 1000).
SHARED: dict[str, object] = {
    "GUARD_MARK": mark.GUARD_MARK.decode(),
    "EXIT_REFUSED": guard.EXIT_REFUSED,
    "EXIT_NO_FFMPEG": guard.EXIT_NO_FFMPEG,
    "FALLBACK_ENV": guard.FALLBACK_ENV,
    "ELAPSED_ENV": guard.ELAPSED_ENV,
    "WAIT_GRACE_MS": guard.WAIT_GRACE_S * 1000,
    "CALL_MS_DEFAULT": guard.ANSWER_TIMEOUT_S * 1000,
    "PROBE_MS": probe_guard.ANSWER_TIMEOUT_S * 1000,
    "LOG_ROTATE": guard.LOG_ROTATE_BYTES,
    "POLL_MS": watch.POLL_S * 1000,
    "MARGIN": watch.MARGIN,
    "SLACK": watch.SLACK,
    "STOP_GRACE_MS": watch.STOP_GRACE_S * 1000,
}
#: guard.c's own bounds, with nothing in Python to agree with (the Python guard's client has
#: one timeout for every answer; the answer and request sizes bound what C reads and writes).
C_ONLY = {"CONNECT_MS", "RISK_MS", "RELEASE_MS", "MAX_ANSWER", "MAX_REQUEST", "MAX_SIDECAR",
          "SEND_FLAGS", "NFORWARDED"}  # fmt: skip


def test_the_c_front_end_holds_the_python_guards_constants() -> None:
    """The compiled front end's constants, read as C reads them, are Python's: what it
    watches with (the margin, the slack, the poll, the grace before SIGKILL), its exit codes,
    timeouts and log rotation, what it tells the Python guard it hands a call to, and every
    variable and setting it sends with a call. A constant of guard.c that is neither shared
    nor its own fails here, so a new one is placed on one side or the other."""
    # the reader reads C as C does: numbers as written, strings unescaped, the rest not at all
    assert _c_value("(256.0 * 1024.0)") == 262144 and _c_value("(1 << 20)") == 1 << 20
    assert _c_value('"a \\"b\\""') == 'a "b"' and _c_value("0.05") == 0.05
    assert _c_value("MSG_NOSIGNAL") is None and _c_value("((int)(sizeof X))") is None
    defines = _c_defines()
    assert set(defines) <= set(SHARED) | C_ONLY, set(defines) - set(SHARED) - C_ONLY
    for name, python in SHARED.items():
        assert name in defines, name
        if isinstance(python, str):
            assert defines[name] == python, name
        else:
            assert defines[name] == pytest.approx(python), (name, defines[name], python)
    assert sorted(_c_strings("INFO_OPTIONS")) == sorted(guard.INFO_OPTIONS)
    assert tuple(_c_strings("CALL_ENV")) == protocol.CALL_ENV
    assert tuple(_c_strings("PROBE_ENV")) == protocol.PROBE_ENV
    assert tuple(_c_strings("keys")) == protocol.CONFIG_KEYS
    forwarded = re.search(r"FORWARDED\[\] = \{(.*?)\};", _c_sources(), re.S)
    assert forwarded
    names = [n.strip() for n in forwarded.group(1).split(",") if n.strip()]
    assert names == [signal.Signals(s).name for s in supervise.FORWARDED_SIGNALS]


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def vol(pipeline: Callable[..., Pipeline]) -> Pipeline:
    return pipeline("32m")


@pytest.fixture
def wav(vol: Pipeline) -> Path:
    out = vol.cache / "in.wav"
    subprocess.run(
        [REAL_FFMPEG, "-loglevel", "error", "-f", "lavfi", "-i", "sine=duration=2", "-ac", "1",
         "-ar", "16000", str(out)],
        check=True,
    )  # fmt: skip
    return out


@pytest.fixture
def own_daemon(vol: Pipeline, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real daemon (admission only, the policy of ``vol``) on a socket of its own."""
    runtime = Path(tempfile.mkdtemp(prefix="jd-", dir="/tmp"))  # short: a socket path
    monkeypatch.setenv("JANITOR_RUNTIME_DIR", str(runtime))
    proc = subprocess.Popen(
        [str(JANITOR_BIN), "daemon", "--quiet", "--admission-only"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually(lambda: socket_answers(runtime / "janitor.sock"), timeout=60,
                   what="the daemon's socket")  # fmt: skip
        yield runtime
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture
def guard_bin(tmp_path: Path, front_end: str) -> Path:
    """The guard `janitor shim install --dir` writes (tests._fixtures.guard), of the front end
    the test asks for."""
    folder = tmp_path / "bin"
    assert install_guard(folder).kind == front_end
    return folder / "ffmpeg"


def _env(guard_bin: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{guard_bin.parent}{os.pathsep}{os.environ['PATH']}", **extra}


def _log_lines() -> list[str]:
    found = list(Path(os.environ["XDG_STATE_HOME"]).rglob("guard.log"))
    found += list(Path(os.environ["HOME"]).rglob("guard.log"))
    return [ln for f in set(found) for ln in f.read_text().splitlines()]


def _cut(out: str | bytes, src: Path, *extra: str) -> list[str | bytes]:
    return ["-hide_banner", "-loglevel", "error", *extra, "-y", "-ss", "0.5", "-to", "1.5",
            "-i", str(src), "-f", "f32le", "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1",
            out]  # fmt: skip


def _grants() -> list[dict[str, Any]]:
    """The grants in ``janitor log --json`` (run in this process: tests._fixtures.console)."""
    return [e for e in janitor_json("log", "--json") if e["event"] == "grant"]


# -- a daemon that misbehaves ----------------------------------------------------------------------


class FakeDaemon:
    """A Unix socket where a daemon would be, answering every connection with ``answer`` once
    its request's head is read (``reply``: what a subclass that reads the request overrides)."""

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fd-", dir="/tmp"))  # short: a socket path
        self.path = self.dir / "janitor.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        self.sock.listen(16)
        self.answer = answer
        self.conns: list[socket.socket] = []
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.requests += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            self.reply(conn, data)
        except OSError:
            pass

    def reply(self, conn: socket.socket, data: bytes) -> None:
        """Answer one request, ``data`` its head and what came with it."""
        self.answer(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def _http(status: int, body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status} X\r\n{head}content-length: {len(body)}\r\n\r\n".encode() + body


def _sends(data: bytes) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        conn.sendall(data)
        conn.close()

    return answer


def _hangs(conn: socket.socket) -> None:
    time.sleep(30)


BAD_ANSWERS: dict[str, Callable[[socket.socket], None]] = {
    "garbage": _sends(b"\x00\xff\xfe not http at all\r\n\r\n\x01\x02"),
    "closes-at-once": _sends(b""),
    "not-json": _sends(_http(200, b"hello")),
    "no-verdict": _sends(_http(200, b'{"what": 1}')),
    "unknown-action": _sends(_http(200, b'{"action": "dance"}')),
    "truncated": _sends(b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"action"'),
    "chunked": _sends(
        b'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{"a":\r\n0\r\n\r\n'
    ),
    "deep": _sends(_http(200, b"[" * 100_000 + b"]" * 100_000)),
    "huge": _sends(_http(200, b" " * (3 << 20) + b"{}")),
    "bad-session": _sends(
        _http(200, b'{"action": "run", "session": {"reservations": [{"id": 1}]}, "release": {}}')
    ),
    "a-500": _sends(_http(500, b"Internal Server Error")),
    "hangs": _hangs,
}


@pytest.fixture
def fake_daemon() -> Iterator[Callable[[Callable[[socket.socket], None]], FakeDaemon]]:
    made: list[FakeDaemon] = []

    def make(answer: Callable[[socket.socket], None]) -> FakeDaemon:
        made.append(FakeDaemon(answer))
        return made[-1]

    yield make
    for d in made:
        d.close()


@pytest.mark.usefixtures("front_end")
@pytest.mark.parametrize("answer", sorted(BAD_ANSWERS))
def test_a_daemon_that_answers_nonsense_or_hangs_never_breaks_the_call(
    answer: str,
    guard_bin: Path,
    wav: Path,
    vol: Pipeline,
    front_end: str,
    fake_daemon: Callable[[Callable[[socket.socket], None]], FakeDaemon],
) -> None:
    daemon = fake_daemon(BAD_ANSWERS[answer])
    env = _env(guard_bin, JANITOR_RUNTIME_DIR=str(daemon.dir), JANITOR_GUARD_TIMEOUT_S="1")
    out = vol.tmp / "g.pcm"
    started = time.monotonic()
    done = subprocess.run([str(guard_bin), *_cut(str(out), wav)], capture_output=True, env=env,
                          timeout=120)  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""  # the caller sees ffmpeg's own stderr, nothing of ours
    assert out.stat().st_size == PCM_RATE
    assert daemon.requests >= 1
    assert took < 15, took  # every wait bounded (1 s for an answer, here)
    lines = _log_lines()
    if front_end == "compiled":
        # handed to the Python guard, which held the write through the ledger
        handed = [ln for ln in lines if "the compiled front end handed this call over" in ln]
        assert len(handed) == 1, lines
        assert "reserved through the ledger" in "\n".join(lines), lines
        assert [g["path"] for g in _grants()] == [str(out)]


REAL_FFPROBE = shutil.which("ffprobe") or "ffprobe"


@pytest.mark.usefixtures("front_end")
@pytest.mark.parametrize("answer", ["a-500", "hangs"])
def test_a_probe_of_stdin_handed_over_reads_all_of_it(
    answer: str,
    guard_bin: Path,
    wav: Path,
    fake_daemon: Callable[[Callable[[socket.socket], None]], FakeDaemon],
) -> None:
    """A guarded ffprobe of ``pipe:0`` whose daemon fails it (the call goes to the Python
    guard): the ffprobe that finally runs reads the whole of stdin, so the output is bare
    ffprobe's. (The compiled front end once started ffprobe before the answer, and the one it
    killed on the hand-over had read stdin already.)"""
    daemon = fake_daemon(BAD_ANSWERS[answer])
    env = _env(guard_bin, JANITOR_RUNTIME_DIR=str(daemon.dir), JANITOR_GUARD_TIMEOUT_S="1")
    args = ["-v", "error", "-show_entries", "stream=sample_rate,channels,duration_ts",
            "-of", "csv=p=0", "-i", "pipe:0"]  # fmt: skip
    audio = wav.read_bytes()
    bare = subprocess.run([REAL_FFPROBE, *args], input=audio, capture_output=True, timeout=60)
    guarded = subprocess.run([str(guard_bin.parent / "ffprobe"), *args], input=audio,
                             capture_output=True, env=env, timeout=120)  # fmt: skip
    assert bare.stdout.strip() and bare.returncode == 0, bare.stderr
    assert (guarded.returncode, guarded.stdout) == (bare.returncode, bare.stdout), guarded.stderr
    assert daemon.requests >= 1


def _sigint_as_a_terminal_gives_it() -> None:
    """SIGINT's default disposition, whether or not the test runner ignores it (``pytest &``):
    an ignored signal stays ignored across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("front_end", ["compiled"], indirect=True)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_held_probe_signalled_before_the_answer_ends_by_that_signal_and_runs_once(
    sig: int,
    guard_bin: Path,
    wav: Path,
    tmp_path: Path,
    fake_daemon: Callable[[Callable[[socket.socket], None]], FakeDaemon],
) -> None:
    """The compiled guarded ffprobe starts the real one before the daemon answers; a daemon
    that never answers (it would hand the call over after 10 s) and a signal from the caller
    meanwhile: the call ends at once by that signal, as ffprobe did, and ffprobe ran once (it
    waited the 10 s, then handed the call to the Python guard, which ran it a second time).
    A stand-in ffprobe that says when it runs, then sleeps, stands for a long probe."""
    runs = tmp_path / "runs"
    stand_in = tmp_path / "real" / "ffprobe"
    stand_in.parent.mkdir()
    stand_in.write_text(f'#!/bin/sh\necho ran >> "{runs}"\nexec sleep 30\n')
    stand_in.chmod(0o755)
    daemon = fake_daemon(_hangs)
    env = _env(guard_bin, JANITOR_RUNTIME_DIR=str(daemon.dir), JANITOR_FFPROBE=str(stand_in))
    proc = subprocess.Popen(
        [str(guard_bin.parent / "ffprobe"), "-v", "quiet", str(wav)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=_sigint_as_a_terminal_gives_it,
    )
    try:
        eventually(lambda: runs.exists(), timeout=30, what="the held ffprobe to start")
        eventually(lambda: daemon.requests >= 1, timeout=30, what="the call to the daemon")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=8)  # the daemon's answer would take 10 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -sig
    assert out == b""
    assert runs.read_text() == "ran\n"


@pytest.mark.parametrize("bits", ["plain", "portable"])
def test_a_queued_call_whose_daemon_dies_while_it_waits_still_runs(
    bits: str,
    wav: Path,
    vol: Pipeline,
    run_cli: Cli,
    tmp_path: Path,
    fake_daemon: Callable[[Callable[[socket.socket], None]], FakeDaemon],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 202 (queued) then nothing: the wait is bounded by the ``wait_s`` it was given."""
    monkeypatch.setenv("JANITOR_GUARD_FRONT_END", "compiled")
    if bits == "portable":
        monkeypatch.setenv("JANITOR_PORTABLE", "1")
    from janitor.host import cbuild

    if cbuild.compiler() is None:
        pytest.skip(f"the compiled front end needs a C compiler: {cbuild.why_not()}")
    folder = tmp_path / "bin"
    assert run_cli("shim", "install", "--dir", folder).returncode == 0
    queued = json.dumps(
        {"action": "wait", "ticket": "t-1", "say": "waiting for room", "log": "waiting: x",
         "wait_s": 0}
    ).encode()  # fmt: skip
    replies = iter([_http(202, queued)])

    def answer(conn: socket.socket) -> None:
        reply = next(replies, None)
        if reply is None:
            conn.close()  # the daemon went away
            return
        conn.sendall(reply)
        conn.close()

    daemon = fake_daemon(answer)
    out = vol.tmp / "q.pcm"
    env = _env(folder / "ffmpeg", JANITOR_RUNTIME_DIR=str(daemon.dir))
    done = subprocess.run([str(folder / "ffmpeg"), *_cut(str(out), wav)], capture_output=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"space-janitor: waiting for room\n"
    assert out.stat().st_size == PCM_RATE


# -- what it is given ------------------------------------------------------------------------------


@pytest.mark.usefixtures("front_end")
def test_a_long_argument_list_behaves_as_bare_ffmpeg(
    guard_bin: Path, wav: Path, vol: Pipeline
) -> None:
    """5000 arguments: more than the daemon takes in one call (4096): handed to the Python
    guard by the compiled one, guarded all the same."""
    many = ["-hide_banner"] * 5000
    out_g, out_b = vol.tmp / "g.pcm", vol.tmp / "b.pcm"
    guarded = subprocess.run([str(guard_bin), *many, *_cut(str(out_g), wav)],
                             capture_output=True, env=_env(guard_bin), timeout=120)  # fmt: skip
    bare = subprocess.run([REAL_FFMPEG, *many, *_cut(str(out_b), wav)], capture_output=True,
                          timeout=120)  # fmt: skip
    assert (guarded.returncode, guarded.stderr) == (bare.returncode, bare.stderr) == (0, b"")
    assert out_g.read_bytes() == out_b.read_bytes()
    assert [g["path"] for g in _grants()] == [str(out_g)]
    # one argument of 100 KiB (no such file): ffmpeg's own failure, word for word
    long_name = "x" * 100_000 + ".wav"
    guarded = subprocess.run([str(guard_bin), "-hide_banner", "-i", long_name, "o.wav"],
                             capture_output=True, env=_env(guard_bin), cwd=vol.tmp)  # fmt: skip
    bare = subprocess.run([REAL_FFMPEG, "-hide_banner", "-i", long_name, "o.wav"],
                          capture_output=True, cwd=vol.tmp)  # fmt: skip
    assert (guarded.returncode, guarded.stderr) == (bare.returncode, bare.stderr)
    assert guarded.returncode != 0


ODD_NAMES = {
    "quotes-and-escapes": 'a "quoted" \\back\\ \t tab {json}.pcm',
    "unicode": "ünïcødé ✓ 音声.pcm",
    "newline": "line\nbreak.pcm",
    "not-utf8": b"bytes-\xff\xfe-not-utf8.pcm",
}


@pytest.mark.usefixtures("front_end")
@pytest.mark.parametrize("name", sorted(ODD_NAMES))
def test_odd_bytes_in_names_give_the_same_file_as_bare_ffmpeg(
    name: str, guard_bin: Path, wav: Path, vol: Pipeline
) -> None:
    odd = ODD_NAMES[name]
    raw = odd if isinstance(odd, bytes) else odd.encode()
    folder = vol.tmp / ".tmp_odd" / "fa_v2" / "audio"
    folder.mkdir(parents=True)
    g = os.path.join(bytes(folder), b"g-" + raw)
    b = os.path.join(bytes(folder), b"b-" + raw)
    guarded = subprocess.run([str(guard_bin), *_cut(g, wav)], capture_output=True,
                             env=_env(guard_bin), timeout=120)  # fmt: skip
    bare = subprocess.run([REAL_FFMPEG, *_cut(b, wav)], capture_output=True, timeout=120)
    assert (guarded.returncode, guarded.stderr) == (bare.returncode, bare.stderr) == (0, b"")
    with open(g, "rb") as fg, open(b, "rb") as fb:
        assert fg.read() == fb.read()
    if isinstance(odd, str):  # text: reserved as the job's working set, under its name
        grants = _grants()
        assert [e["path"] for e in grants] == [str(folder)], grants


def test_a_guard_without_its_settings_runs_ffmpeg_as_it_is(
    run_cli: Cli, tmp_path: Path, wav: Path, vol: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JANITOR_GUARD_FRONT_END", "compiled")
    from janitor.host import cbuild

    if cbuild.compiler() is None:
        pytest.skip(f"the compiled front end needs a C compiler: {cbuild.why_not()}")
    folder = tmp_path / "bin"
    assert run_cli("shim", "install", "--dir", folder).returncode == 0
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy2(folder / "ffmpeg", alone / "ffmpeg")  # no ffmpeg.guard beside it
    out = vol.tmp / "g.pcm"
    done = subprocess.run([str(alone / "ffmpeg"), *_cut(str(out), wav)], capture_output=True,
                          env=_env(alone / "ffmpeg"), timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    assert out.stat().st_size == PCM_RATE
    assert _grants() == []
    # a sidecar whose Python cannot run: the real ffmpeg, said in guard.log
    side = (folder / "ffmpeg.guard").read_text()
    (folder / "ffmpeg.guard").write_text(
        re.sub(r"^#% python .*$", "#% python /no/such/python", side, flags=re.M)
    )
    no_daemon = tmp_path / "nd"
    no_daemon.mkdir()
    done = subprocess.run([str(folder / "ffmpeg"), *_cut(str(out), wav)], capture_output=True,
                          env=_env(folder / "ffmpeg", JANITOR_RUNTIME_DIR=str(no_daemon)),
                          timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    assert any("/no/such/python cannot run" in ln for ln in _log_lines()), _log_lines()


# -- an output past its reservation ---------------------------------------------------------------


@pytest.mark.usefixtures("front_end", "own_daemon")
def test_an_output_that_outgrows_its_reservation_is_stopped_and_removed(
    guard_bin: Path, vol: Pipeline, tmp_path: Path
) -> None:
    """A WAV still being written (a streamed header: its length is whatever the file holds when
    it is probed) grows while ffmpeg reads it: the output passes its reservation, and the
    guard stops ffmpeg, removes the partial output and says so in one line, exit 75."""
    src = vol.mount / "growing.wav"
    with open(src, "wb") as f:
        subprocess.run([REAL_FFMPEG, "-loglevel", "error", "-f", "lavfi", "-i",
                        "sine=duration=2", "-ac", "1", "-ar", "16000", "-f", "wav", "pipe:1"],
                       stdout=f, check=True)  # fmt: skip
    out = vol.mount / "out.pcm"
    args = ["-hide_banner", "-loglevel", "quiet", "-y", "-readrate", "4", "-i", str(src), "-f",
            "f32le", "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1", str(out)]  # fmt: skip
    stop = threading.Event()

    def grow() -> None:
        with open(src, "ab") as f:
            for _ in range(60):  # 30 s more of audio, far faster than ffmpeg reads it
                if stop.is_set():
                    return
                f.write(b"\x01\x00" * 8000)
                f.flush()
                time.sleep(0.05)

    proc = subprocess.Popen([str(guard_bin), *args], stderr=subprocess.PIPE,
                            env=_env(guard_bin))  # fmt: skip
    eventually(out.exists, timeout=30, what="ffmpeg to begin its output")
    grower = threading.Thread(target=grow)
    grower.start()
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        stop.set()
        grower.join()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75, err
    line = err.decode()
    assert line.count("\n") == 1, line
    reserved = 2 * PCM_RATE
    assert re.fullmatch(
        rf"space-janitor: stopped ffmpeg: {re.escape(str(out))} reached [0-9.]+ KiB, past the "
        r"125 KiB reserved for it; the partial output was removed\. Free space there "
        r"\(`janitor status` shows the volume\) and retry\n",
        line,
    ), line
    reached = float(re.search(r"reached ([0-9.]+) KiB", line).group(1))  # type: ignore[union-attr]
    assert reached * 1024 > reserved * 1.05 + 256 * 1024
    assert not out.exists()
    grants = _grants()
    assert [g["bytes"] for g in grants] == [reserved]
    reserved_lines = [ln for ln in _log_lines() if "reserved through the daemon" in ln]
    assert len(reserved_lines) == 1, _log_lines()


# -- ffmpeg never outlives the compiled guard ------------------------------------------------------


def _children(pid: int) -> tuple[psutil.Process, psutil.Process | None]:
    """ffmpeg (the real one) and the sentinel, children of the guard ``pid``, once the sentinel
    has named itself (a fork of the guard, it is named as the guard until it does)."""

    def named(proc: psutil.Process) -> bool:
        try:
            return proc.name().startswith("janitor-sentin")
        except psutil.NoSuchProcess:
            return False

    def find() -> tuple[psutil.Process, psutil.Process | None] | None:
        kids = psutil.Process(pid).children()
        ff = [k for k in kids if k.exe() == os.path.realpath(REAL_FFMPEG)]
        sentinel = [k for k in kids if k not in ff and named(k)]
        return (ff[0], sentinel[0] if sentinel else None) if ff and sentinel else None

    found: tuple[psutil.Process, psutil.Process | None] = eventually(
        find, timeout=30, what="ffmpeg and the sentinel"
    )
    return found


@pytest.mark.usefixtures("own_daemon")
@pytest.mark.parametrize(
    "how", ["guard-killed", "guard-killed-portable", "guard-and-sentinel-killed"]
)
def test_ffmpeg_dies_with_the_compiled_guard(
    how: str,
    run_cli: Cli,
    tmp_path: Path,
    wav: Path,
    vol: Pipeline,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from janitor.host import cbuild

    if cbuild.compiler() is None:
        pytest.skip(f"the compiled front end needs a C compiler: {cbuild.why_not()}")
    monkeypatch.setenv("JANITOR_GUARD_FRONT_END", "compiled")
    folder = tmp_path / "bin"
    assert run_cli("shim", "install", "--dir", folder).returncode == 0
    portable = how.endswith("portable")
    if how == "guard-and-sentinel-killed" and PORTABLE:
        pytest.skip("the portable mode has no pdeathsig: the sentinel alone stops ffmpeg")
    env = _env(folder / "ffmpeg", **({"JANITOR_PORTABLE": "1"} if portable else {}))
    out = vol.tmp / "slow.pcm"
    args = ["-hide_banner", "-loglevel", "error", "-y", "-readrate", "0.05", "-i", str(wav),
            "-f", "f32le", "-acodec", "pcm_f32le", str(out)]  # fmt: skip
    g = subprocess.Popen([str(folder / "ffmpeg"), *args], env=env)
    try:
        ff, sentinel = _children(g.pid)
        assert sentinel is not None and sentinel.name().startswith("janitor-sentin")
        assert sentinel.pid != ff.pid and os.getsid(sentinel.pid) == sentinel.pid  # own session
        if how == "guard-and-sentinel-killed":
            sentinel.kill()  # pdeathsig alone is left
        g.kill()
        g.wait(30)
        psutil.wait_procs([ff], timeout=10)
        assert not ff.is_running() or ff.status() == psutil.STATUS_ZOMBIE
    finally:
        if g.poll() is None:
            g.kill()
            g.wait()


@pytest.mark.usefixtures("front_end", "own_daemon")
def test_ffmpeg_killed_by_a_signal_makes_the_guard_die_of_it_too(
    guard_bin: Path, wav: Path, vol: Pipeline
) -> None:
    out = vol.tmp / "slow.pcm"
    args = ["-hide_banner", "-loglevel", "error", "-y", "-readrate", "0.05", "-i", str(wav),
            "-f", "f32le", "-acodec", "pcm_f32le", str(out)]  # fmt: skip
    g = subprocess.Popen([str(guard_bin), *args], env=_env(guard_bin))
    try:

        def real() -> psutil.Process | None:
            kids = psutil.Process(g.pid).children(recursive=True)
            found = [k for k in kids if k.exe() == os.path.realpath(REAL_FFMPEG)]
            return found[0] if found else None

        ff: psutil.Process = eventually(real, timeout=30, what="ffmpeg to start")
        ff.send_signal(signal.SIGKILL)
        assert g.wait(30) == -signal.SIGKILL
    finally:
        if g.poll() is None:
            g.kill()
            g.wait()


# -- which front end, and why ---------------------------------------------------------------------


def _status(run_cli: Cli, folder: Path, **env: str | None) -> dict[str, Any]:
    done = run_cli("shim", "status", "--dir", folder, "--json", env=env)
    state: dict[str, Any] = json.loads(done.stdout)
    return state


def _doctor_front_end(run_cli: Cli, **env: str | None) -> dict[str, Any]:
    done = run_cli("doctor", "--json", env=env)
    checks = [c for c in json.loads(done.stdout) if c["name"] == "guard front end"]
    assert len(checks) == 1, done.stdout
    found: dict[str, Any] = checks[0]
    return found


def test_shim_status_and_doctor_say_which_front_end_and_why(
    run_cli: Cli, tmp_path: Path, janitor_env: Any
) -> None:
    from janitor.host import cbuild

    if cbuild.compiler() is None:
        pytest.skip(f"needs a C compiler: {cbuild.why_not()}")
    default_bin = janitor_env.data_home / "space-janitor" / "bin"
    none = _doctor_front_end(run_cli)
    assert none["verdict"] == "ok" and "would put in the compiled front end" in none["message"]
    assert run_cli("shim", "install").returncode == 0
    state = _status(run_cli, default_bin)
    assert state["front_end"]["kind"] == "compiled" and state["current"], state
    assert "built with" in state["front_end"]["why"] and Path(state["front_end"]["build"]).is_file()
    check = _doctor_front_end(run_cli)
    assert check["verdict"] == "ok" and "the compiled front end" in check["message"], check
    human = run_cli("shim", "status").stdout
    assert "front end: compiled (built with" in human, human
    # asked for the Python one: ok, and said so
    done = run_cli("shim", "install", "--front-end", "python")
    assert done.returncode == 0 and "the python front end (asked for)" in (done.stderr), done.stderr
    assert sorted(p.name for p in default_bin.iterdir()) == ["ffmpeg", "ffprobe"]  # no sidecar
    state = _status(run_cli, default_bin, JANITOR_GUARD_FRONT_END="python")
    assert state["front_end"]["kind"] == "python" and state["current"], state
    # ... but the default would put the compiled one in: out of date, doctor says how
    state = _status(run_cli, default_bin)
    assert not state["current"] and state["would_install"]["kind"] == "compiled", state
    check = _doctor_front_end(run_cli)
    assert check["verdict"] == "warn" and "shim install" in check["fix"], check
    bad = run_cli("shim", "install", "--front-end", "fast")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr


def test_no_compiler_or_one_that_fails_means_the_python_guard_said_why(
    run_cli: Cli, tmp_path: Path, janitor_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A build folder of its own: the failure it remembers there is this test's alone (the
    # session's folder is shared by every worker of the run).
    monkeypatch.setenv("JANITOR_NATIVE_DIR", str(tmp_path / "native"))
    folder = tmp_path / "bin"
    empty = tmp_path / "empty-path"
    empty.mkdir()
    # no compiler on PATH: the Python front end, and why
    env: dict[str, str | None] = {"PATH": str(empty), "CC": None}
    done = run_cli("shim", "install", "--dir", folder, env=env)
    assert done.returncode == 0, done.stderr
    assert "the python front end (no C compiler" in done.stderr, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["ffmpeg", "ffprobe"]
    assert "# Front end: python (no C compiler" in (folder / "ffmpeg").read_text()
    state = _status(run_cli, folder, **env)
    assert state["front_end"]["kind"] == "python" and state["current"], state
    check = _doctor_front_end(run_cli, **env)
    assert check["verdict"] == "ok"  # none in the default folder
    forced = run_cli("shim", "install", "--dir", folder, "--front-end", "compiled", env=env)
    assert forced.returncode == 2 and forced.stderr.count("\n") == 1, forced.stderr
    assert "no C compiler" in forced.stderr and "Traceback" not in forced.stderr
    # a compiler that answers but cannot build it: said once, remembered
    cc = tmp_path / "badcc"
    cc.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "badcc 1.0"; exit 0; }\n'
        'echo "guard.c:1:1: error: this compiler builds nothing" >&2; exit 1\n'
    )
    cc.chmod(0o755)
    env = {"CC": str(cc)}
    done = run_cli("shim", "install", "--dir", folder, env=env)
    assert done.returncode == 0, done.stderr
    assert "the python front end (it does not build here: guard: guard.c:1:1: error: this " in (
        done.stderr
    ), done.stderr
    failed = list(Path(os.environ["JANITOR_NATIVE_DIR"]).glob("guard-*.failed"))
    assert len(failed) == 1, failed
    state = _status(run_cli, folder, **env)
    assert state["front_end"]["kind"] == "python" and state["current"], state
    assert state["would_install"]["kind"] == "python", state
    failed[0].unlink()


# -- one protocol: both front ends send the same call ---------------------------------------------


class RecordingDaemon(FakeDaemon):
    """A daemon that keeps each request (its request line and JSON body) and answers ``exec``,
    with a line to log, as the daemon does for a call with nothing to reserve."""

    LOG = "unguarded (the recording daemon says so): ffmpeg"

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        super().__init__(lambda conn: None)

    def reply(self, conn: socket.socket, data: bytes) -> None:
        """Keep the request line and the JSON body, read whole; answer ``exec``."""
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"content-length: *(\d+)", head, re.I)
        assert length is not None
        while len(body) < int(length.group(1)):
            body += conn.recv(65536)
        self.seen.append((head.split(b"\r\n")[0].decode(), json.loads(body)))
        verdict = {"action": "exec", "log": self.LOG, "debug": True}
        conn.sendall(_http(200, json.dumps(verdict).encode()))


def test_both_front_ends_send_the_call_as_they_got_it_to_one_endpoint(
    run_cli: Cli, wav: Path, vol: Pipeline, tmp_path: Path
) -> None:
    """The Python guard speaks the compiled front end's protocol: one ``POST /v1/guard/call``
    with the call as it got it (arguments, folder, parent, the real ffmpeg, the variables that
    shape it and the settings ``shim install`` resolved), the same body but for the guard's own
    pid and the seconds it took to start, and no estimate of its own (the daemon makes it: the
    estimator is never loaded); each then carries out the daemon's verdict."""
    from janitor.host import cbuild

    if cbuild.compiler() is None:
        pytest.skip(f"the compiled front end needs a C compiler: {cbuild.why_not()}")
    daemon = RecordingDaemon()
    try:
        env = {**os.environ, "JANITOR_RUNTIME_DIR": str(daemon.dir), "JANITOR_JOB": "j1",
               "JANITOR_GUARD_WAIT_S": "7"}  # fmt: skip
        sent = {}
        out = vol.tmp / "g.pcm"
        for front in ("compiled", "python"):
            folder = tmp_path / front
            done = run_cli("shim", "install", "--dir", folder, "--front-end", front)
            assert done.returncode == 0, done.stderr
            out.unlink(missing_ok=True)
            script = folder / ("ffmpeg.guard" if front == "compiled" else "ffmpeg")
            argv = [str(folder / "ffmpeg"), *_cut(str(out), wav)]
            if front == "python":  # its imports too: the library stays unloaded
                argv = [sys.executable, "-I", "-S", "-X", "importtime", str(script), *argv[1:]]
            call = subprocess.run(argv, capture_output=True, cwd=vol.tmp, env=env, timeout=60)
            assert call.returncode == 0, call.stderr
            assert out.stat().st_size == PCM_RATE  # the verdict said exec: ffmpeg ran as it is
            (sent[front],) = daemon.seen[len(sent) :]
            imported = {ln.rpartition(b"|")[2].strip().decode() for ln in call.stderr.splitlines()
                        if ln.startswith(b"import time:")}  # fmt: skip
            assert {m for m in imported if m.startswith(("janitor.guarding.ffmpeg",
                    "janitor.guarding.verdict", "janitor.core"))} == set(), imported  # fmt: skip
    finally:
        daemon.close()
    (line_c, body_c), (line_p, body_p) = sent["compiled"], sent["python"]
    assert line_c == line_p == "POST /v1/guard/call HTTP/1.1"
    assert body_p.pop("elapsed_s") >= 0  # the compiled front end, a millisecond in, says none
    assert body_c.pop("owner_pid") != body_p.pop("owner_pid")  # each guard is its own process
    assert body_c == body_p
    assert body_c["args"] == [str(a) for a in _cut(str(out), wav)]
    assert body_c["writer_pid"] == os.getpid() and body_c["cwd"] == str(vol.tmp)
    assert body_c["env"] == {k: env[k] for k in protocol.CALL_ENV if env.get(k)}
    assert {"JANITOR_JOB": "j1", "JANITOR_GUARD_WAIT_S": "7"}.items() <= body_c["env"].items()
    assert set(body_c["config"]) == set(protocol.CONFIG_KEYS)
    logged = [ln for ln in _log_lines() if RecordingDaemon.LOG in ln]
    assert len(logged) == 2 and all(" DEBUG " in ln for ln in logged), logged


@pytest.mark.usefixtures("own_daemon")
def test_a_cut_the_daemon_holds_loads_no_thread_machinery_and_no_ctypes(
    vol: Pipeline, wav: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python guard's later cut (what hundreds of groups a recording make): held by the
    daemon, ffmpeg run and watched to its end. On Linux its end is seen through a pidfd and
    ``prctl`` is called through ``_ctypes``: ``threading`` and ``ctypes`` would cost it 7 ms
    of every cut. The portable mode (macOS's way) watches with a thread and has no prctl."""
    monkeypatch.setenv("JANITOR_GUARD_FRONT_END", "python")
    folder = tmp_path / "bin"
    assert install_guard(folder).kind == "python"
    job = vol.tmp / ".tmpJOB" / "fa_v2" / "audio"
    job.mkdir(parents=True)
    imported: list[set[str]] = []
    for n in range(2):  # the job's first cut, then a later one drawing on its working set
        out = job / f"fa-v2-audio-{n}.pcm"
        argv = [sys.executable, "-I", "-S", "-X", "importtime", str(folder / "ffmpeg"),
                *_cut(str(out), wav)]  # fmt: skip
        call = subprocess.run(argv, capture_output=True, env=_env(folder / "ffmpeg"), timeout=60)
        assert call.returncode == 0, call.stderr
        assert out.stat().st_size == PCM_RATE
        lines = [ln for ln in call.stderr.splitlines() if ln.startswith(b"import time:")]
        imported.append({ln.rpartition(b"|")[2].strip().decode() for ln in lines})
    assert sum("reserved through the daemon" in ln for ln in _log_lines()) == 2, _log_lines()
    for names in imported:
        assert "janitor.commands.supervise" in names  # ffmpeg ran under the watch
        assert "ctypes" not in names
        assert ("threading" in names) is PORTABLE
        assert names & {"janitor.core", "janitor.guarding.verdict", "typing"} == set()


# -- the daemon's side: POST /v1/guard/call -------------------------------------------------------


def test_the_daemon_decides_a_call_whole_and_words_its_lines(
    own_daemon: Path, vol: Pipeline, wav: Path, tmp_path: Path
) -> None:
    from tests._daemon_helpers import uds_client

    base = {"cwd": str(vol.tmp), "owner_pid": os.getpid(), "writer_pid": os.getpid(),
            "ffmpeg": os.path.realpath(REAL_FFMPEG)}  # fmt: skip
    with uds_client(own_daemon / "janitor.sock") as c:
        # nothing to reserve: exec, with the DEBUG line the Python guard would write
        r = c.post("/v1/guard/call", json={**base, "args": ["-i", str(wav), "-f", "null", "-"]})
        assert r.status_code == 200, r.text
        assert r.json()["action"] == "exec" and r.json()["debug"] is True
        assert r.json()["log"].startswith("unguarded (") and r.json()["log"].endswith("-f null -")
        # a write that fits: run, under its reservation, and what to send at its end
        r = c.post("/v1/guard/call", json={**base, "args": [str(a) for a in _cut("o.pcm", wav)]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["action"] == "run" and body["holds"] is True, body
        (held,) = body["session"]["reservations"]
        assert (held["output"], held["bytes"], held["pooled"]) == (
            str(vol.tmp / "o.pcm"), PCM_RATE, False
        )  # fmt: skip
        assert body["log"] == (
            f"reserved through the daemon: 62.5 KiB for {vol.tmp / 'o.pcm'} ({held['id']})"
        )
        # its input lies in the media cache: pinned for the call, ended with it
        assert body["release"] == {"reservations": [held["id"]], "pins": body["session"]["pins"],
                                   "draws": [], "job": "ffmpeg", "run": None}  # fmt: skip
        assert len(body["session"]["pins"]) == 1
        r = c.post("/v1/guard/release", json={**body["release"], "written": []})
        assert r.status_code == 200, r.text
        # one that cannot fit: refused, with the line to print and the one to log
        long_wav = tmp_path / "long.wav"  # off the volume: 10 minutes, 36.6 MiB as f32 PCM
        silence = ["-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono", "-t", "600"]
        subprocess.run([REAL_FFMPEG, "-loglevel", "error", *silence, str(long_wav)], check=True)
        big = ["-y", "-i", str(long_wav), "-f", "f32le", "-acodec", "pcm_f32le", "big.pcm"]
        r = c.post("/v1/guard/call", json={**base, "args": big, "env": {"JANITOR_JOB": "j1"}})
        assert r.status_code == 507, r.text
        said = r.json()
        assert said["action"] == "refuse" and said["say"].startswith(
            f"refused to write {vol.tmp / 'big.pcm'} (36.6 MiB) on volume"
        ), said
        assert said["log"] == "refused: " + said["say"]
        # another policy expected: 409, for the guard to hand the call over
        other = {"JANITOR_POLICY": str(tmp_path / "x.toml")}
        r = c.post("/v1/guard/call", json={**base, "args": ["-version"], "env": other})
        assert r.status_code == 409 and r.json()["error"] == "policy_mismatch", r.text
        r = c.post("/v1/guard/call", json={**base, "cwd": "rel", "args": ["-version"]})
        assert r.status_code == 422, r.text
    assert [e["path"] for e in _grants()] == [str(vol.tmp / "o.pcm")]
