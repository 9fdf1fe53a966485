"""What the host machine tells us: volumes and free space, process owners, files in use, ballast.

One interface per question; the Linux fast paths and the portable paths (what macOS runs) sit
behind it (see :mod:`janitor.host.fastpaths`).
"""
