"""Which Linux fast paths this process takes, and the switch that turns them all off.

On Linux the janitor asks the kernel directly: ``/proc`` for owners, open files and held locks,
pidfds for owners seen before, write leases right before a delete, OFD byte-range locks and
abstract-socket doorbells for the ledger's fair writer queue, and ``PR_SET_PDEATHSIG`` so a
supervised command dies with its supervisor. macOS has none of these and takes the portable
paths: psutil, a plain ``flock``, the open-file lists, a sentinel process.

``JANITOR_PORTABLE=1`` in the environment makes Linux take the portable paths too, so the test
suite proves on Linux CI the code our Mac users run (``.ci/run`` runs it twice).
"""

from __future__ import annotations

import os
import sys

__all__ = ["LINUX", "PORTABLE"]

#: True when ``JANITOR_PORTABLE`` is set (to anything but ``0``): take the portable paths.
PORTABLE = os.environ.get("JANITOR_PORTABLE", "") not in ("", "0")

#: True when the Linux fast paths may be used: on Linux, and not forced portable.
LINUX = sys.platform.startswith("linux") and not PORTABLE
