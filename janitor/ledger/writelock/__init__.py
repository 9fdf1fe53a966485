"""The ledger's writer lock: one writer at a time across processes and threads.

One interface and one backend per platform, as filelock has one lock class per OS:

* ``BaseWriterLock`` (``api``): the workflow: each thread's descriptor, acquire with a timeout
  and its error, release, close, the context manager;
* ``FlockWriterLock`` (``flock``): a plain ``flock``; what macOS gets, and Linux with
  ``JANITOR_PORTABLE=1``;
* ``FairQueueWriterLock`` (``fairqueue``): Linux: writers queue in arrival order (OFD
  byte-range locks, a ticket counter, doorbells) before that same ``flock``.

``WriterLock`` is the backend of this process: ``WriterLock(path, timeout=...)``.
"""

from __future__ import annotations

from janitor.host.fastpaths import LINUX
from janitor.ledger.writelock.api import BaseWriterLock
from janitor.ledger.writelock.fairqueue import OFD_LOCKS, FairQueueWriterLock
from janitor.ledger.writelock.flock import FlockWriterLock

__all__ = ["BaseWriterLock", "FairQueueWriterLock", "FlockWriterLock", "WriterLock"]

#: The writer lock this process uses: the fair queue on Linux, the plain ``flock`` elsewhere.
WriterLock: type[BaseWriterLock] = FairQueueWriterLock if LINUX and OFD_LOCKS else FlockWriterLock
