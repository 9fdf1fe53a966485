"""The end of a supervised command, seen before its pid is reaped, with signals handled meanwhile.

Real children throughout (``sh``, ``sleep``). Each way of watching is tried on Linux whatever
the platform would choose: the pidfd, the helper thread with ``waitid(WNOWAIT)`` and the one
with a plain ``waitpid`` (macOS's Python before 3.13, and the portable mode).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import pytest

from janitor.host import child_exit
from janitor.host.child_exit import ChildExit, PidfdExit, ThreadExit, exit_watch

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the children's state in /proc"
)

Make = Callable[[int, Callable[[], None]], ChildExit]

WAYS: dict[str, Make] = {
    "pidfd": PidfdExit,
    "thread-waitid": lambda pid, before: ThreadExit(pid, before, wnowait=True),
    "thread-waitpid": lambda pid, before: ThreadExit(pid, before, wnowait=False),
}


def state(pid: int) -> str:
    """The one-letter state of ``pid`` (``Z``: exited, not yet reaped), or ``-`` once reaped."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return "-"
    return data[data.rfind(b")") + 2 :][:1].decode()


def spawn(*argv: str) -> int:
    return os.posix_spawnp(argv[0], list(argv), dict(os.environ))


@pytest.mark.parametrize("way", WAYS)
def test_the_exit_code_comes_once_the_child_ended_and_was_reaped(way: str) -> None:
    seen: list[str] = []
    pid = spawn("sh", "-c", "sleep 0.3; exit 3")
    watched = WAYS[way](pid, lambda: seen.append(state(pid)))
    assert watched.wait(0.05) is None and watched.returncode is None
    assert not watched.ended and seen == []
    assert watched.wait(30) == 3
    assert watched.ended and watched.returncode == 3 and watched.wait() == 3
    assert state(pid) == "-"  # reaped: no zombie left behind
    # Called once; before the reap where the platform lets us see the exit first.
    assert seen == (["-"] if way == "thread-waitpid" else ["Z"])


@pytest.mark.parametrize("way", WAYS)
def test_a_child_killed_by_a_signal_reads_as_that_signal_negated(way: str) -> None:
    pid = spawn("sleep", "30")
    watched = WAYS[way](pid, lambda: None)
    os.kill(pid, signal.SIGTERM)
    assert watched.wait(30) == -signal.SIGTERM


@pytest.mark.parametrize("way", WAYS)
def test_a_signal_handler_runs_while_the_main_thread_waits_without_a_limit(way: str) -> None:
    """What ``janitor run`` does: wait for its command with no timeout, and pass on the signals
    it gets. The handler must run while the wait goes on, or the command is never told."""
    pid = spawn("sleep", "30")
    watched = WAYS[way](pid, lambda: None)
    got: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        got.append(signum)
        os.kill(pid, signal.SIGTERM)

    previous = signal.signal(signal.SIGUSR1, forward)
    try:
        sender = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -USR1 {os.getpid()}"])
        code = watched.wait()  # a handler that never ran would leave this for 30 s
        sender.wait(30)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        if state(pid) not in ("-", "Z"):
            os.kill(pid, signal.SIGKILL)
    assert got == [signal.SIGUSR1]
    assert code == -signal.SIGTERM


def _blocked(tid: int) -> int:
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigBlk line")


def test_the_helper_thread_blocks_every_signal_so_none_is_delivered_to_it() -> None:
    """macOS gives a process's signal to any thread that does not block it, and Python runs
    handlers in the main thread alone: a signal the helper took would wait for the main thread
    to wake on its own."""
    pid = spawn("sleep", "30")
    watched = ThreadExit(pid, lambda: None)
    try:
        (helper,) = [t.native_id for t in threading.enumerate() if t.name == "janitor-supervised"]
        assert helper is not None
        eventually_blocked = time.monotonic() + 30
        while _blocked(int(helper)) == 0:  # set as its first step
            assert time.monotonic() < eventually_blocked, "the helper never blocked signals"
            time.sleep(0.01)
        blocked = _blocked(int(helper))
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD):
            assert blocked & (1 << (sig - 1)), signal.Signals(sig).name
        assert _blocked(threading.get_native_id()) & (1 << (signal.SIGINT - 1)) == 0
    finally:
        os.kill(pid, signal.SIGKILL)
        assert watched.wait(30) == -signal.SIGKILL


def test_the_pidfd_way_starts_no_thread() -> None:
    """No thread appears (one left by an earlier test of this worker may end meanwhile: the
    check is for new ones, not for an unchanged set)."""
    before = set(os.listdir("/proc/self/task"))
    pid = spawn("sleep", "0.2")
    watched = PidfdExit(pid, lambda: None)
    assert set(os.listdir("/proc/self/task")) - before == set()
    assert watched.wait(30) == 0
    assert set(os.listdir("/proc/self/task")) - before == set()


def test_without_pidfds_the_child_is_watched_by_a_thread_and_none_is_asked_for_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kernel before 5.3 says ENOSYS, a seccomp filter EPERM (mocked: neither can be made
    here); the child runs all the same, so it is watched the other way."""
    asked: list[int] = []

    def refuse(pid: int, flags: int = 0) -> int:
        asked.append(pid)
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", refuse)
    monkeypatch.setattr(child_exit, "EXIT_WATCH", PidfdExit)
    first = exit_watch(spawn("true"), lambda: None)
    second = exit_watch(spawn("true"), lambda: None)
    assert isinstance(first, ThreadExit) and isinstance(second, ThreadExit)
    assert len(asked) == 1 and child_exit.EXIT_WATCH is ThreadExit
    assert first.wait(30) == 0 and second.wait(30) == 0


@pytest.mark.parametrize("way", ["pidfd", "thread-waitid"])
def test_a_failing_before_reap_still_reaps_the_child(
    way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooked: list[object] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: hooked.append(args.exc_value))
    pid = spawn("true")

    def fail() -> None:
        raise RuntimeError("the sentinel's pipe is gone")

    watched = WAYS[way](pid, fail)
    if way == "pidfd":  # the waiting thread is told
        with pytest.raises(RuntimeError):
            watched.wait(30)
    assert watched.wait(30) == 0
    assert state(pid) == "-"
    if way != "pidfd":  # the helper's exception is reported as any thread's is
        for thread in threading.enumerate():
            if thread.name == "janitor-supervised":
                thread.join(30)
        assert [str(e) for e in hooked] == ["the sentinel's pipe is gone"]
