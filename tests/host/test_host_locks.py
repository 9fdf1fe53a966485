"""The lock calls of ``janitor.host``: ``flock`` (the daemon's lock, the sweeps' tree locks, the
ledger's writer lock) and Linux's byte-range OFD locks (the ledger's fair queue), on real files
held by a real second process or a second open file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from janitor.host import flock, ofdlock

#: Holds an exclusive flock on argv[1], says so, and lets go when its stdin closes.
HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def lock_file(tmp_path: Path) -> Iterator[int]:
    path = tmp_path / "a.lock"
    path.touch()
    fd = os.open(path, os.O_RDWR)
    try:
        yield fd
    finally:
        os.close(fd)


def _hold(path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "held\n"
    return holder


def _let_go(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(30) == 0


def test_try_lock_is_refused_while_another_process_holds_the_file(
    tmp_path: Path, lock_file: int
) -> None:
    holder = _hold(tmp_path / "a.lock")
    try:
        assert flock.try_lock(lock_file) is False
    finally:
        _let_go(holder)
    assert flock.try_lock(lock_file) is True  # the kernel dropped the dead holder's lock
    # Ours now: a second open file of it is refused until we let go.
    other = os.open(tmp_path / "a.lock", os.O_RDWR)
    try:
        assert flock.try_lock(other) is False
        flock.unlock(lock_file)
        assert flock.try_lock(other) is True
    finally:
        os.close(other)


def test_try_lock_raises_what_is_not_a_held_lock() -> None:
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError) as caught:
        flock.try_lock(w)  # closed: EBADF, not "someone holds it"
    assert not isinstance(caught.value, BlockingIOError)


def test_lock_until_gives_up_at_its_deadline_and_takes_a_lock_let_go_before_it(
    tmp_path: Path, lock_file: int
) -> None:
    holder = _hold(tmp_path / "a.lock")
    try:
        deadline = time.monotonic() + 0.3
        assert flock.lock_until(lock_file, deadline) is False
        assert time.monotonic() > deadline  # it tried until then, not once
        assert holder.stdin is not None
        threading.Timer(0.2, holder.stdin.close).start()  # let go while we wait
        assert flock.lock_until(lock_file, time.monotonic() + 60) is True
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(30)


def test_lock_waits_for_the_holder(tmp_path: Path, lock_file: int) -> None:
    holder = _hold(tmp_path / "a.lock")
    taken = threading.Event()

    def take() -> None:
        flock.lock(lock_file)
        taken.set()

    waiter = threading.Thread(target=take, daemon=True)
    waiter.start()
    try:
        assert not taken.wait(0.3)  # still held: it waits
    finally:
        _let_go(holder)
    assert taken.wait(30)
    waiter.join(30)


needs_ofd = pytest.mark.skipif(not ofdlock.AVAILABLE, reason="no OFD locks here (Linux only)")


@needs_ofd
def test_byte_locks_belong_to_the_open_file_and_to_one_byte(tmp_path: Path) -> None:
    path = tmp_path / "queue.lock"
    path.touch()
    one, two = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
    try:
        far = 1 << 30  # past the end of the (empty) file
        assert ofdlock.try_lock_byte(one, far) is True
        assert ofdlock.try_lock_byte(two, far) is False  # same process, another open file
        assert ofdlock.try_lock_byte(two, far + 1) is True  # a byte is a lock of its own
        ofdlock.unlock_byte(one, far)
        assert ofdlock.try_lock_byte(two, far) is True
    finally:
        os.close(one)
        os.close(two)


@needs_ofd
def test_lock_byte_waits_for_the_byte_to_be_let_go(tmp_path: Path) -> None:
    path = tmp_path / "queue.lock"
    path.touch()
    one, two = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
    taken = threading.Event()

    def take() -> None:
        ofdlock.lock_byte(two, 7)
        taken.set()

    try:
        ofdlock.lock_byte(one, 7)
        waiter = threading.Thread(target=take, daemon=True)
        waiter.start()
        assert not taken.wait(0.3)
        ofdlock.unlock_byte(one, 7)
        assert taken.wait(30)
        waiter.join(30)
    finally:
        os.close(one)
        os.close(two)
