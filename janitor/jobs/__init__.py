"""Old addresses of :mod:`janitor.commands`, kept so that code written against them keeps working.

The commands that stand in for ffmpeg and ffprobe, and run a writer, lived here until they
were named for what they are (``janitor.commands``); "job" now means only the pipeline's job
(a recording's ``.tmpXXXXXX`` folder: :mod:`janitor.admission.jobs`, :mod:`janitor.ledger.jobs`).
A guard written by an earlier ``janitor shim install`` runs ``from janitor.jobs.guard import
main`` (or ``janitor.jobs.probe_guard``), and a worker may import ``janitor.jobs.estimate``: each
module here hands on the same names, and nothing else lives here.
"""
