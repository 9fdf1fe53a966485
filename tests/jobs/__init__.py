"""Tests of ``janitor.jobs``: the guarded ffmpeg, ``janitor exec``, ``run`` and ``estimate``."""
