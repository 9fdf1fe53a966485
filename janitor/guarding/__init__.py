"""A guarded command's call, decided: what it will write, where that lands, its admission as
part of its job, and the verdict both front ends of the guard carry out.

The guarded ffmpeg and ffprobe (:mod:`janitor.commands.guard`,
:mod:`janitor.commands.probe_guard` and ``native/guard.c``) hold none of this. Each sends its
call as it got it (its arguments, folder and parent, and the variables that shape it:
:mod:`.protocol`) to the daemon, or, with no daemon, hands the same call to this layer in its
own process, and carries out the verdict.
The modules, in the order a call flows through them:

- ``ffmpeg/``: what an ffmpeg command will write (the estimate; ``janitor estimate`` and
  ``janitor run``'s pre-flight use it too);
- ``request``: the call's writes and inputs (:class:`~.request.CallRequest`), from its
  arguments;
- ``prepare``: where each write lands, its job recorded and its cached inputs pinned;
- ``grant``, with ``draws`` (a cut drawn on its job's working set): reserved all or none;
- ``queue`` and ``wait``: room made, then a turn in the volume's queue, up to the deadline;
- ``close``: what the call alone held, ended;
- ``lines``: the words both front ends print and log; ``verdict``: the call decided whole;
  ``probe_call``: the guarded ffprobe's calls.

``protocol``, ``held`` and ``mark`` are stdlib only: the guards load them at every start, so
this package's own module imports nothing.
"""
