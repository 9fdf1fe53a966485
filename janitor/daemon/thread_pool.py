"""The daemon's HTTP apps' worker threads: blocking calls run off the event loop, awaited on it.

Nothing that can wait runs on an event loop: a ledger write may wait for another process's
writer lock, a reservation may first evict caches, a sweep takes seconds. The API app and the
metrics listener hand such calls to a :class:`ThreadPool` and await their answers.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ThreadPool"]

_T = TypeVar("_T")


class ThreadPool:
    """Runs blocking calls in worker threads and awaits them on the event loop.

    A leaner ``run_in_executor``: one queue, daemon threads started as needed (up to
    ``max_workers``) and kept, so each keeps its ledger connection; a stopping daemon never
    waits for a sweep in progress.
    """

    def __init__(self, max_workers: int = 32, name: str = "janitor-api-worker") -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._max = max_workers
        self._name = name
        self._threads = 0
        self._idle = 0

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` in a worker; its exception is raised here."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_T] = loop.create_future()
        with self._lock:
            spawn = self._idle == 0 and self._threads < self._max
            if spawn:
                self._threads += 1
                name = f"{self._name}-{self._threads}"
            else:
                self._idle -= 1  # taken: the next call must not count on the same worker
        if spawn:
            threading.Thread(target=self._work, name=name, daemon=True).start()
        self._queue.put((loop, fut, fn, args))
        return await fut

    def _work(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            loop, fut, fn, args = item
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # handed to the awaiting request
                result, error = None, exc
            try:
                loop.call_soon_threadsafe(_settle, fut, result, error)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass
            with self._lock:
                self._idle += 1

    def close(self) -> None:
        """Let idle workers end (busy ones end after their call)."""
        with self._lock:
            n = self._threads
        for _ in range(n):
            self._queue.put(None)


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
