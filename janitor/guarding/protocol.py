"""What each front end of the guard sends with a call, and the verdicts it carries out.

Both front ends of the guarded ffmpeg send one call as they got it to the daemon's ``POST
/v1/guard/call``, or, with no daemon, hand the same body to
:func:`janitor.guarding.verdict.decide` in their own process: ``args``, ``cwd``, ``owner_pid``
(the guard), ``writer_pid`` (its parent, read at its start), ``ffmpeg`` (the real one), ``env``
(those of :data:`CALL_ENV` that are set), ``config`` (what ``janitor shim install`` resolved:
``policy``, ``cache_dir``, ``wait_s``, as text) and ``elapsed_s``, the seconds the call had
taken when it was sent (its wait for room has one deadline, from the guarded ffmpeg's start;
the compiled front end, a millisecond in, leaves it out). The guarded ffprobe sends the same
shape to ``POST /v1/guard/probe``, with ``ffprobe`` and :data:`PROBE_ENV`. ``native/guard.c``
holds the same lists (``tests/native/test_guard_native.py`` reads them against these).

The answer is a verdict: an HTTP status and a body whose ``action`` says what to do
(:data:`VERDICTS`), with the line to print (``say``) and the ``guard.log`` line (``log``,
``debug``). Stdlib only, and no imports: the Python guard loads it at every start.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the guarded ffmpeg several ms at every start
if TYPE_CHECKING:
    from typing import Any

__all__ = ["CALL_ENV", "CONFIG_KEYS", "PROBE_ENV", "VERDICTS", "call_body", "verdict_of"]

#: The variables that shape an ffmpeg call, sent when they are set: the job label and ``janitor
#: run`` id, the policy expected, the probe cache, the wait for room.
CALL_ENV = ("JANITOR_JOB", "JANITOR_RUN", "JANITOR_POLICY", "JANITOR_CACHE_DIR",
            "JANITOR_GUARD_WAIT_S")  # fmt: skip
#: The variables an ffprobe call sends when they are set: where the prober's jobs go
#: (``TMPDIR``), and the policy and probe cache it expects.
PROBE_ENV = ("TMPDIR", "JANITOR_POLICY", "JANITOR_CACHE_DIR")
#: What ``janitor shim install`` resolved that a call sends in its ``config`` (as text), each
#: when it is set: the variables of :data:`CALL_ENV` win over them.
CONFIG_KEYS = ("policy", "cache_dir", "wait_s")
#: The verdicts a front end carries out, as (status, action): ``exec`` (run the real program as
#: it is), ``run`` (under the reservations of ``session``), ``wait`` (queued: its ``ticket``,
#: and ``wait_s``, what is left of the call's wait) and ``refuse``.
VERDICTS = frozenset({(200, "exec"), (200, "run"), (202, "wait"), (507, "refuse")})


def call_body(
    program: str,
    real: str,
    args: list[str],
    *,
    cwd: str,
    owner_pid: int,
    writer_pid: int,
    env: dict[str, str],
    config: dict[str, str],
    elapsed_s: float | None = None,
) -> dict[str, Any]:
    """The body of a call: ``program`` (``ffmpeg`` or ``ffprobe``) names the real one's key;
    ``env`` is the variables of its list that are set."""
    body: dict[str, Any] = {"args": args, "cwd": cwd, "owner_pid": owner_pid}
    if writer_pid > 0:
        body["writer_pid"] = writer_pid
    body[program] = real
    body["env"] = env
    body["config"] = config
    if elapsed_s is not None:
        body["elapsed_s"] = elapsed_s
    return body


def verdict_of(status: int, body: Any) -> str | None:
    """The action of an answer that is a verdict (:data:`VERDICTS`), else None: an answer a
    front end does not carry out (another policy, an old daemon, garbage)."""
    action = body.get("action") if isinstance(body, dict) else None
    return action if (status, action) in VERDICTS else None
