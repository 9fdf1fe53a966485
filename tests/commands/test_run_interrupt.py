"""Ctrl-C under `janitor run` in a real terminal, and what the run's summary says it wrote.

A real pseudo-terminal: `janitor run` is the foreground process group of a session of its own
(as a shell's job is), and Ctrl-C is the byte 0x03 typed into the terminal, so the kernel sends
SIGINT to the whole foreground group, as it does for a person at the keyboard. Real ffmpeg
through the real guard, on a real tmpfs; what the run wrote is compared with the files on disk.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import subprocess
import termios
import time
import wave
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor.humanize import format_size
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.pipeline import Pipeline

pytestmark = pytest.mark.usefixtures("front_end")  # both front ends of the guard

Cli = Callable[..., subprocess.CompletedProcess[str]]


def _in_terminal(argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """``argv`` as the foreground job of a new session whose controlling terminal is a pty;
    the pty's master end, to type into and read from."""
    master, slave = os.openpty()

    def take_terminal() -> None:  # in the child, after setsid: the pty becomes its terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=take_terminal,
    )
    os.close(slave)
    return proc, master


def _read_all(master: int, proc: subprocess.Popen[bytes], timeout: float) -> str:
    """Everything the terminal showed until the process ended (and its output drained)."""
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out.decode(errors="replace")


def test_ctrl_c_in_a_terminal_ends_ffmpeg_as_bare_ffmpeg_does(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path]
) -> None:
    """One SIGINT reaches ffmpeg (from the terminal; not again from the run and the guard):
    it finishes a valid partial WAV and exits 255; the run exits 255 too, says it was
    interrupted, and counts the partial file as written."""
    p = pipeline("64m")
    src = m4a(30)
    out = p.cache / "partial.wav"
    argv = [
        str(JANITOR_BIN), "run", "--", "ffmpeg", "-nostdin", "-re", "-y", "-i", str(src),
        "-acodec", "pcm_s16le", "-ar", "16000", "-ac", "1", str(out),
    ]  # fmt: skip
    proc, master = _in_terminal(argv)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size > 32_000):  # a second of audio
            assert proc.poll() is None, _read_all(master, proc, 5)
            assert time.monotonic() < deadline, "ffmpeg wrote nothing"
            time.sleep(0.05)
        os.write(master, b"\x03")  # Ctrl-C, as typed
        shown = _read_all(master, proc, 60)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert "Immediate exit requested" not in shown, shown
    assert code == 255, shown
    with wave.open(str(out)) as w:  # a WAV whose header ffmpeg finished: its length is right
        frames = w.getnframes()
        assert w.getframerate() == 16000 and frames > 16000, shown
    assert frames * 2 + 44 <= out.stat().st_size
    assert re.search(r"run \w+ was interrupted \(SIGINT\): \S+ exited 255", shown), shown
    assert re.search(r"\b1 reservations? of its guarded writes", shown), shown  # guarded
    assert f"wrote {format_size(out.stat().st_size)}" in shown, shown


def test_the_summary_counts_what_the_jobs_cuts_wrote_through_the_daemon(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli, tmp_path: Path
) -> None:
    """Cuts drawn on the job's working set (no reservation of their own), admitted by the run's
    own daemon: the summary's "wrote" is the bytes the files hold."""
    p = pipeline("64m")
    report = tmp_path / "report.jsonl"
    done = run_cli(
        "run", "--", *p.sim("--groups", "3", "--group-s", "2", "--report", report, m4a(8)),
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import json

    sizes = [json.loads(line)["bytes"] for line in report.read_text().splitlines()]
    assert len(sizes) == 4  # the cache WAV and three cuts
    assert f"wrote {format_size(sum(sizes))}" in done.stderr, (sizes, done.stderr)
    assert "interrupted" not in done.stderr
