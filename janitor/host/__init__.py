"""What the host machine tells us: volumes and free space, process owners, files in use, ballast.

One interface per question, one module per platform behind it, as platformdirs does:
:mod:`janitor.host.processes` and :mod:`janitor.host.inuse` each have an ``api``, a ``linux``
module (``/proc``, leases) and a ``portable`` one (psutil: what macOS runs);
:mod:`janitor.host.fastpaths` says which one this process takes.
"""
