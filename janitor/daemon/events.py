"""Daemon events: immutable values fanned out to Server-Sent-Events subscribers.

Scheduler threads publish; each subscriber is an asyncio queue on the server's loop, fed with
``call_soon_threadsafe``. A slow subscriber loses its oldest events rather than growing without
bound (the daemon must never block on a client).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "EventBus"]

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Event:
    """One thing the pipeline may want to know: a level change, a refusal, a risk, an eviction."""

    kind: str
    data: dict[str, Any]
    id: int = field(default_factory=lambda: next(_ids))
    time: float = field(default_factory=time.time)

    def sse(self) -> str:
        """The event as one Server-Sent-Events message."""
        body = json.dumps({"time": self.time, **self.data}, sort_keys=True)
        return f"id: {self.id}\nevent: {self.kind}\ndata: {body}\n\n"


class EventBus:
    """Publish from any thread; subscribe from the event loop."""

    def __init__(self, *, queue_size: int = 1000, history: int = 200) -> None:
        self._lock = threading.Lock()
        self._subs: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Event | None]]] = []
        self._size = queue_size
        self.recent: deque[Event] = deque(maxlen=history)

    def publish(self, kind: str, **data: Any) -> Event:
        """Send an event to every subscriber (never blocks)."""
        event = Event(kind, data)
        with self._lock:
            self.recent.append(event)
            subs = list(self._subs)
        for loop, queue in subs:
            try:
                loop.call_soon_threadsafe(_offer, queue, event)
            except RuntimeError:
                pass  # loop closed: the subscriber is gone
        return event

    def subscribe(self) -> asyncio.Queue[Event | None]:
        """A queue of future events, on the running loop."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue(self._size)
        with self._lock:
            self._subs.append((asyncio.get_running_loop(), queue))
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event | None]) -> None:
        """Stop feeding ``queue``."""
        with self._lock:
            self._subs = [(lp, q) for lp, q in self._subs if q is not queue]

    def close(self) -> None:
        """Tell every subscriber to finish (a ``None`` in its queue)."""
        with self._lock:
            subs = list(self._subs)
        for loop, queue in subs:
            try:
                loop.call_soon_threadsafe(_offer, queue, None)
            except RuntimeError:
                pass


def _offer(queue: asyncio.Queue[Event | None], event: Event | None) -> None:
    if queue.full():
        try:
            queue.get_nowait()
        except asyncio.QueueEmpty:
            pass
    queue.put_nowait(event)
