"""The commands that stand in for ffmpeg and ffprobe (the guards), and those that run a writer
(``janitor exec``, ``janitor run``): supervision, the one watch of a running writer, the guards'
front ends and their install, and ``janitor estimate``.

Named for what it holds: a "job" is the pipeline's job alone (:mod:`janitor.admission.jobs`).
"""
