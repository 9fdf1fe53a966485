"""The one table of the errors a client of the daemon is answered with, and their HTTP statuses.

Every answer that is an error reads its status here: the daemon's error handlers (an error a
``Janitor`` call raised, a request that does not validate, a route or method the app does not
have), its routes' own checks (a relative ``cwd``, a queued call it does not hold), and the
guard's verdicts (a call refused for room, or sent under another policy). So a refusal is
``507`` wherever it is answered, and a new kind of error is one row.

Each row is a kind (the ``error`` of the JSON body, ``{"error": kind, "message": ...}``), its
status, and the exceptions answered with it; an exception takes the row of the nearest class
of its MRO the table names, as Starlette looks up an exception handler. A refusal's body is its
numbers (``ReservationRefused.as_dict()``: its ``error`` is ``refused``, ``never_fits`` or
``wait_wont_help``), and a guarded call's refusal is a verdict (``action: refuse``) with the
same status.
"""

from __future__ import annotations

from dataclasses import dataclass

from janitor import errors

__all__ = ["ERROR_STATUSES", "ErrorStatus", "for_error", "status_of"]


@dataclass(frozen=True, slots=True)
class ErrorStatus:
    """One kind of error as a client sees it: the body's ``error``, the HTTP status, the
    exceptions answered with it, and the seconds after which a client may retry (the
    ``Retry-After`` header of an answer made from one of those exceptions), if any."""

    kind: str
    status: int
    raised: tuple[type[errors.JanitorError], ...] = ()
    retry_after_s: int | None = None


#: Every kind of error the daemon answers, with its status: the one place they are mapped.
ERROR_STATUSES: tuple[ErrorStatus, ...] = (
    # No room: a reservation or a guarded call refused (the body: the refusal's numbers).
    ErrorStatus("refused", 507, (errors.ReservationRefused,), retry_after_s=5),
    # SQLite found the disk full: nothing was changed.
    ErrorStatus("ledger_full", 507, (errors.LedgerFull,)),
    # The ledger cannot be opened or written.
    ErrorStatus("ledger_unavailable", 503, (errors.LedgerError,)),
    # No such reservation, pin or queued call; no such route.
    ErrorStatus("not_found", 404, (errors.UnknownReservation, errors.UnknownPin)),
    # A body, a size, a setting or a path that cannot be used.
    ErrorStatus("bad_request", 422, (errors.ConfigError,)),
    # A guarded call that expects a policy other than the daemon's.
    ErrorStatus("policy_mismatch", 409),
    # A route the app has, asked with a method it does not answer.
    ErrorStatus("method_not_allowed", 405),
    # Any other error the janitor raises on purpose.
    ErrorStatus("error", 400, (errors.JanitorError,)),
)

_BY_KIND = {row.kind: row for row in ERROR_STATUSES}
_BY_CLASS = {cls: row for row in ERROR_STATUSES for cls in row.raised}


def status_of(kind: str) -> int:
    """The HTTP status of the error ``kind`` (a row's ``kind``; KeyError for another)."""
    return _BY_KIND[kind].status


def for_error(exc: errors.JanitorError) -> ErrorStatus:
    """The row ``exc`` is answered with: that of the nearest class of its MRO the table names
    (``JanitorError``'s, ``error``, when no nearer one is)."""
    for cls in type(exc).__mro__:
        row = _BY_CLASS.get(cls)
        if row is not None:
            return row
    return _BY_KIND["error"]
