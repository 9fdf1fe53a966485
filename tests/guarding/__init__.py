"""Tests of ``janitor.guarding``: a guarded call decided (what ffmpeg will write)."""
