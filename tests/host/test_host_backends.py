"""The two ways of reading the host (Linux's ``/proc`` and leases; psutil, what macOS runs) give
the same answers about real processes and real open files, side by side in one process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from janitor.host.inuse.api import InUse
from janitor.host.inuse.portable import PortableInUse
from janitor.host.processes.api import Processes
from janitor.host.processes.portable import PortableProcesses

linux_only = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="no /proc here: only the portable backend runs"
)


def backends_processes() -> list[Processes]:
    found: list[Processes] = [PortableProcesses()]
    if os.path.isdir("/proc/self"):
        from janitor.host.processes.linux import LinuxProcesses

        found.append(LinuxProcesses())
    return found


def backends_inuse() -> list[InUse]:
    found: list[InUse] = [PortableInUse()]
    if os.path.isdir("/proc/self/fd"):
        from janitor.host.inuse.linux import LinuxInUse

        found.append(LinuxInUse())
    return found


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child holding ``held.bin`` open, until the test ends."""
    held = tmp_path / "held.bin"
    held.write_bytes(b"x" * 4096)
    code = f"f = open({str(held)!r}, 'rb'); print('ready', flush=True); import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    yield proc
    proc.kill()
    proc.wait()


@linux_only
def test_both_process_backends_agree_on_a_live_child_and_a_dead_one(
    sleeper: subprocess.Popen[bytes],
) -> None:
    portable, linux = backends_processes()
    start_l, start_p = linux.start(sleeper.pid), portable.start(sleeper.pid)
    assert start_l is not None and start_p is not None
    # Both read the kernel's ticks; the Linux backend's start carries the boot time it was
    # read with below the tick (janitor.host.processes.ticks), psutil's none.
    assert abs(start_l - start_p) < 0.01
    assert linux.same_start(start_l, start_p) and portable.same_start(start_l, start_p)
    for b in (linux, portable):
        assert b.alive(sleeper.pid, start_p)
        assert not b.alive(sleeper.pid, start_p - 10)  # a reused pid: another process
        info = b.info(sleeper.pid)
        assert info is not None
        assert (info.pid, info.ppid) == (sleeper.pid, os.getpid())
        assert info.cmdline[0] == sys.executable and info.cmdline[1] == "-c"
    sleeper.kill()
    sleeper.wait()
    for b in (linux, portable):
        assert b.start(sleeper.pid) is None
        assert not b.alive(sleeper.pid, start_p)
        assert b.info(sleeper.pid) is None


def test_a_zombie_is_dead_to_every_backend() -> None:
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        # Exited, not yet reaped (nobody waits for it yet): a zombie.
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        for b in backends_processes():
            assert not b.alive(proc.pid, None), type(b).__name__
            assert b.start(proc.pid) is None, type(b).__name__
    finally:
        proc.wait()


def test_still_alive_answers_as_alive_for_a_process_asked_about_again_and_again() -> None:
    """``still_alive`` (what admission asks of every live owner: a pidfd once seen alive, on
    Linux) says what ``alive`` says: alive while the child runs, dead as a zombie nobody has
    reaped yet and once reaped, and dead for a recorded start that is not the child's."""
    import psutil

    backends = backends_processes()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = psutil.Process(proc.pid).create_time()
        for b in backends:
            for _ in range(3):  # the first ask opens the watch, the later ones poll it
                assert b.still_alive(proc.pid, start), type(b).__name__
            assert not b.still_alive(proc.pid, start - 10), type(b).__name__  # a reused pid
            assert b.still_alive(proc.pid, None), type(b).__name__
        proc.kill()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie: its pid exists
        for b in backends:
            assert not b.still_alive(proc.pid, start), type(b).__name__
            assert not b.still_alive(proc.pid, start), type(b).__name__  # asked again
    finally:
        proc.kill()
        proc.wait()
    for b in backends:
        assert not b.still_alive(proc.pid, start), type(b).__name__


def test_every_backend_sees_a_file_another_process_holds_open(
    sleeper: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    held, idle = tmp_path / "held.bin", tmp_path / "idle.bin"
    idle.write_bytes(b"y")
    st, st_idle = held.stat(), idle.stat()
    for b in backends_inuse():
        found = b.open_inodes({st.st_dev})
        assert (st.st_dev, st.st_ino) in found, type(b).__name__
        assert (st_idle.st_dev, st_idle.st_ino) not in found, type(b).__name__


@linux_only
def test_a_lease_is_refused_on_a_file_another_process_has_open(
    sleeper: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    from janitor.host.inuse.linux import LinuxInUse

    linux = LinuxInUse()
    if not linux.prepare_leases():
        pytest.skip("write leases cannot be made safe here (SIGIO is handled)")
    idle = tmp_path / "idle.bin"
    idle.write_bytes(b"y")
    fd = os.open(tmp_path / "held.bin", os.O_RDONLY)
    try:
        assert linux.lease(fd) is False
    finally:
        os.close(fd)
    fd = os.open(idle, os.O_RDONLY)
    try:
        assert linux.lease(fd) in (True, None)  # None: this filesystem grants no leases
    finally:
        os.close(fd)
