"""A process's start names it across a step of the wall clock (``janitor.host.processes.ticks``).

Linux's ``btime`` is the wall clock minus the time since boot, worked out at each read, so a
step of the clock moves every start another process reads. Before, an owner still running was
then taken for dead (a CI run once refused a cut because a live reservation's owner read as
gone). A real step of this machine's clock would disturb every other test, so the processes
here are real and the boot time each backend reads is the one given to it."""

from __future__ import annotations

import functools
import operator
import os
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from janitor.host.processes.ticks import (
    CLOCK_TICKS,
    coded,
    encode_start,
    read_btime,
    same_ticks,
    started_before,
)

linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc here")

#: One boot's ``btime`` around now, and the ticks since boot of a process started in it.
BTIMES = st.integers(min_value=1_500_000_000, max_value=2_500_000_000)
TICKS = st.integers(min_value=0, max_value=400 * 86_400 * 100)  # up to 400 days up
#: How far the wall clock was stepped between two reads (this machine's once: 12.7 hours).
MOVES = st.integers(min_value=-30 * 86_400, max_value=30 * 86_400)
#: Ticks between the starts of two processes that shared one pid; never 0.
APART = st.integers(min_value=-10_000_000, max_value=10_000_000).filter(lambda n: n != 0)
#: How far two processes' starts may lie apart for :func:`same_ticks` to take them for one: a
#: multiple of 10,000 s, to the tick.
ALIAS_TICKS = 10_000 * CLOCK_TICKS


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


@given(BTIMES, MOVES, TICKS)
def test_one_process_read_across_any_step_of_the_clock_is_one_process(
    btime: int, move: int, ticks: int
) -> None:
    before, after = encode_start(btime, ticks), encode_start(btime + move, ticks)
    assert same_ticks(before, after) and same_ticks(after, before)


@given(BTIMES, MOVES, TICKS, APART)
def test_two_processes_are_two_unless_a_multiple_of_10000_s_apart(
    btime: int, move: int, ticks: int, apart: int
) -> None:
    """Two processes given one pid, read with one ``btime`` or across a step: told apart,
    except at exactly 10,000 s apart (or when a step makes their epoch starts equal to the
    tick, as the exact rule before)."""
    first, second = encode_start(btime, ticks), encode_start(btime + move, ticks + apart)
    aliased = apart % ALIAS_TICKS == 0 or apart == -move * CLOCK_TICKS
    assert same_ticks(first, second) == aliased


@given(BTIMES, TICKS)
def test_a_start_recorded_without_a_code_still_names_its_process(btime: int, ticks: int) -> None:
    """What psutil reads, and what an earlier version recorded: btime + ticks, no code."""
    plain = btime + ticks / CLOCK_TICKS
    assert same_ticks(plain, encode_start(btime, ticks))
    assert not same_ticks(plain, encode_start(btime, ticks + 3))


@given(BTIMES, TICKS, APART)
def test_earlier_is_told_between_two_starts_read_with_one_boot_time(
    btime: int, ticks: int, apart: int
) -> None:
    """A process read now against the start of a job's first process, no step between:
    earlier exactly when it started earlier."""
    recorded = encode_start(btime, ticks)
    assert started_before(encode_start(btime, ticks + apart), recorded) == (apart < 0)
    assert not started_before(recorded, recorded)


@given(BTIMES, MOVES.filter(lambda m: m % 10_000 != 0), TICKS, APART)
def test_after_a_step_of_the_clock_nothing_is_earlier(
    btime: int, move: int, ticks: int, apart: int
) -> None:
    """Across a step (its size known only modulo 10,000 s), no process is called older than a
    job's first: one that is would keep the job a little longer; one called older that is not
    would let a live job's folder go. (A guess of the nearest step took a process started an
    hour after the job for an elder after a 12.7 h step.)"""
    recorded = encode_start(btime + move, ticks)
    assert not started_before(encode_start(btime, ticks + apart), recorded)


@given(st.integers(min_value=1, max_value=9_999), TICKS, APART)
def test_a_start_without_a_code_is_set_only_against_one_with_the_same(
    code: int, ticks: int, apart: int
) -> None:
    """psutil's start or an earlier version's (no code) against a start read with a code:
    not earlier, whatever the ticks say (before, a younger child read by psutil was called an
    elder for about half of all boot times)."""
    btime = 1_796_520_000 + code
    plain = btime + (ticks + apart) / CLOCK_TICKS
    assert not started_before(plain, encode_start(btime, ticks))
    assert started_before(plain, btime + ticks / CLOCK_TICKS) == (apart < 0)  # both plain


@given(BTIMES, TICKS)
def test_a_start_without_a_code_gets_the_one_its_boot_time_gives(btime: int, ticks: int) -> None:
    """What the portable backend does on Linux with psutil's ``create_time``."""
    assert coded(btime + ticks / CLOCK_TICKS, btime) == encode_start(btime, ticks)


def test_a_start_is_earlier_than_a_later_bound_and_never_than_no_bound() -> None:
    """A job's process gone before it was read is as old as any: its group's bound is -inf."""
    start = encode_start(1_796_525_134, 5)
    assert started_before(start, encode_start(1_796_525_134, 6))
    assert not started_before(start, float("-inf"))


@linux_only
def test_a_live_owner_is_alive_to_a_process_that_reads_the_clock_after_a_step(
    sleeper: subprocess.Popen[bytes],
) -> None:
    """A reservation's owner recorded by one process and asked about by another after the
    clock moved (a second, an hour, 12.7 hours, either way): alive, asked once or again and
    again (the pidfd watch), and dead once killed; a start 10 s off is another process."""
    from janitor.host.processes.linux import LinuxProcesses

    btime = read_btime()
    recorded = LinuxProcesses(btime=lambda: btime).start(sleeper.pid)
    assert recorded is not None
    for move in (1, -1, 3600, -3600, 45_879, -45_879):
        later = LinuxProcesses(btime=functools.partial(operator.add, btime, move))
        assert later.alive(sleeper.pid, recorded), move
        assert later.still_alive(sleeper.pid, recorded) and later.still_alive(
            sleeper.pid, recorded
        ), move
        seen = later.start(sleeper.pid)
        assert seen is not None and later.same_start(recorded, seen), move
        assert not later.alive(sleeper.pid, recorded - 10), move  # another process's start
    sleeper.kill()
    sleeper.wait()
    assert not LinuxProcesses(btime=lambda: btime + 1).alive(sleeper.pid, recorded)


@linux_only
def test_before_this_change_a_step_of_one_second_read_a_live_owner_as_dead(
    sleeper: subprocess.Popen[bytes],
) -> None:
    """What the CI run met: the exact rule, applied to a start read a second apart, says
    dead. The rule that carries btime says alive."""
    from janitor.host.processes.api import same_start
    from janitor.host.processes.linux import LinuxProcesses

    btime = read_btime()
    recorded = LinuxProcesses(btime=lambda: btime).start(sleeper.pid)
    seen = LinuxProcesses(btime=lambda: btime + 1).start(sleeper.pid)
    assert recorded is not None and seen is not None
    assert not same_start(recorded, seen)  # the exact rule
    assert same_ticks(recorded, seen)


@linux_only
def test_the_portable_backend_on_linux_reads_a_start_as_the_linux_one(
    sleeper: subprocess.Popen[bytes],
) -> None:
    """psutil's start, given its code: the same float the Linux backend reads, and one process
    to both across a step (the CI's portable pass runs on Linux)."""
    from janitor.host.processes.linux import LinuxProcesses
    from janitor.host.processes.portable import PortableProcesses

    btime = read_btime()
    portable, linux = PortableProcesses(), LinuxProcesses(btime=lambda: btime)
    seen = portable.start(sleeper.pid)
    assert seen is not None and seen == linux.start(sleeper.pid)
    stepped = LinuxProcesses(btime=lambda: btime - 3600).start(sleeper.pid)
    assert stepped is not None and portable.alive(sleeper.pid, stepped)
    assert not portable.alive(sleeper.pid, stepped - 10)
