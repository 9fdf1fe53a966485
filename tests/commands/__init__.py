"""Tests of ``janitor.commands``: the guarded ffmpeg, ``janitor exec``, ``run`` and ``estimate``."""
