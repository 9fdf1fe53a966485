"""An adaptive pool: work that mostly waits on the disk is shared by a few threads.

The calling thread works alone first. Every ``probe`` items it compares the wall time of that
window with its CPU time; once the wall time passes the CPU time by ``wait_ratio`` (the work
waits on the disk more than it computes) and enough items are left, it starts helper threads,
so the syscalls of one overlap the disk waits of another. Each worker does all of an item's
work; results keep the items' order, only the order the work is done in mixes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["AdaptivePool", "Tuning"]

W = TypeVar("W")
I = TypeVar("I")  # noqa: E741
O = TypeVar("O")  # noqa: E741


@dataclass(frozen=True, slots=True)
class Tuning:
    """When and how a pool shares its work (``janitor.cleanup.apply`` holds the numbers)."""

    #: Workers in all, the calling thread's included (1: it works alone).
    threads: int
    #: Items the calling thread does alone before judging (again) how long they waited.
    probe: int
    #: Helpers start when a window's wall time passes its CPU time by this factor.
    wait_ratio: float
    #: Items left after a probe below which the calling thread does them all alone.
    threads_min: int
    #: Consecutive items a thread takes at a time.
    chunk: int


class AdaptivePool(Generic[W, I, O]):
    """Runs items through workers: ``main`` (the calling thread's), and, once the work shows it
    mostly waits, helpers made by ``spawn`` (None: no more can be made) each on its own thread.

    ``work(worker, item)`` does one item (an exception from it is a bug: the threads stop and
    it is raised); ``between`` runs on the calling thread between its chunks, to refresh what
    the helpers read. ``total``: the items all batches will bring, to judge what is left.
    ``name``: the helper threads' (with a number).
    """

    def __init__(
        self,
        main: W,
        spawn: Callable[[], W | None],
        work: Callable[[W, I], O],
        total: int,
        tuning: Tuning,
        *,
        between: Callable[[], None] | None = None,
        name: str = "janitor-pool",
    ) -> None:
        self.main = main
        self.name = name
        self.spawn = spawn
        self.work = work
        self.tuning = tuning
        self.between = between
        self.helpers: list[W] = []
        self.left = total  # items not yet handed to run()
        self.alone = 0  # items the calling thread did before threads were judged worth it
        self.mark = (time.perf_counter(), time.thread_time())

    @property
    def workers(self) -> list[W]:
        """Every worker made: the calling thread's, then the helpers'."""
        return [self.main, *self.helpers]

    def run(self, batch: Sequence[I]) -> list[O]:
        """Do a batch; its results in the batch's order."""
        t = self.tuning
        n = len(batch)
        self.left -= n
        results: list[O | None] = [None] * n
        i = 0
        while not self.helpers and i < n:
            results[i] = self.work(self.main, batch[i])
            i += 1
            self.alone += 1
            if self.alone % t.probe == 0 and t.threads > 1 and (n - i) + self.left >= t.threads_min:
                # Disk waits may begin only once the journal fills: judge each window anew.
                wall, cpu = time.perf_counter(), time.thread_time()
                if wall - self.mark[0] > t.wait_ratio * (cpu - self.mark[1]):
                    self._start_helpers()
                self.mark = (wall, cpu)
        if i < n:
            self._threaded(batch, results, i)
        return [o for o in results if o is not None]

    def _start_helpers(self) -> None:
        for _ in range(1, self.tuning.threads):
            helper = self.spawn()
            if helper is None:
                break  # the calling thread finds out why itself
            self.helpers.append(helper)

    def _threaded(self, batch: Sequence[I], results: list[O | None], i: int) -> None:
        n = len(batch)
        size = self.tuning.chunk
        chunks = iter(range(i, n, size))  # next() is atomic: a chunk goes to one thread
        stop = threading.Event()
        errors: list[BaseException] = []

        def share(worker: W) -> None:
            try:
                while not stop.is_set() and (start := next(chunks, None)) is not None:
                    for k in range(start, min(start + size, n)):
                        results[k] = self.work(worker, batch[k])
            except BaseException as exc:  # a bug, not a file: stop, and raise it below
                errors.append(exc)
                stop.set()

        threads = [
            threading.Thread(target=share, args=(w,), name=f"{self.name}-{k}", daemon=True)
            for k, w in enumerate(self.helpers, 1)
        ]
        for th in threads:
            th.start()
        try:
            # This thread takes chunks too, and between them refreshes what the helpers read.
            while not stop.is_set() and (start := next(chunks, None)) is not None:
                for k in range(start, min(start + size, n)):
                    results[k] = self.work(self.main, batch[k])
                if self.between is not None:
                    self.between()
        finally:
            stop.set()  # after an error here: the helpers finish their item and stop
            for th in threads:
                th.join()
        if errors:
            raise errors[0]
