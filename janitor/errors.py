"""The janitor's exceptions: one base class, and built-in bases users already catch.

Every error carries the exit code the CLI uses for it, so the CLI never has to guess:
``2`` for bad input or configuration, ``75`` (EX_TEMPFAIL) when the disk is the reason.
All of them pickle, so they cross process boundaries (multiprocessing workers) intact.
"""

from __future__ import annotations

import errno

from janitor.humanize import format_size

TYPE_CHECKING = False  # typing costs the guarded ffmpeg 20 ms at every start
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_OK",
    "EXIT_PROBLEM",
    "EXIT_TEMPFAIL",
    "ConfigError",
    "JanitorError",
    "LedgerError",
    "LedgerFull",
    "PolicyError",
    "ReservationRefused",
    "SpaceRisk",
    "UnknownPin",
    "UnknownReservation",
    "UnknownTree",
]

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_BAD_INPUT = 2
EXIT_TEMPFAIL = 75


class JanitorError(Exception):
    """Base class of every error the janitor raises on purpose."""

    exit_code: int = EXIT_BAD_INPUT


class ConfigError(JanitorError, ValueError):
    """Bad input: a size, a duration, a setting or a path that cannot be used."""


class PolicyError(ConfigError):
    """A policy file that cannot be loaded; the message names the file and every problem.

    ``problems``: one line per problem (key, value written, what is wanted); empty when the
    file itself could not be read or parsed as TOML.
    """

    def __init__(self, message: str, problems: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.problems))


class UnknownTree(ConfigError):
    """A tree name that the policy does not define."""


class UnknownReservation(JanitorError, LookupError):
    """A reservation id that is not in the ledger, or is no longer live."""


class UnknownPin(JanitorError, LookupError):
    """A pin id or path that has no live pin."""


class LedgerError(JanitorError, OSError):
    """The ledger cannot be opened or written (corrupt, unwritable, wrong path)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,))


class LedgerFull(LedgerError):
    """SQLite reported the disk full: nothing was granted, retry once space is back."""

    exit_code = EXIT_TEMPFAIL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC


class ReservationRefused(JanitorError, OSError):
    """Admission said no: granting would take the volume below its floor.

    It is an ``OSError`` with ``errno == ENOSPC``, so code that already handles a full disk
    handles a refusal too, but it happens *before* anything was written.
    """

    exit_code = EXIT_TEMPFAIL

    def __init__(
        self,
        tree: str,
        requested: int,
        free: int,
        floor: int,
        reserved: int,
        volume: str,
        evicted: int = 0,
    ) -> None:
        self.tree = tree
        self.requested = requested
        self.free = free
        self.floor = floor
        self.reserved = reserved
        self.volume = volume
        self.evicted = evicted
        super().__init__(errno.ENOSPC, self._message())

    @property
    def available(self) -> int:
        """Bytes that could still be granted: free - floor - reserved by others (never < 0)."""
        return max(0, self.free - self.floor - self.reserved)

    @property
    def shortfall(self) -> int:
        """Bytes missing for this request to fit (including any deficit below the floor)."""
        return max(0, self.requested - (self.free - self.floor - self.reserved))

    def _message(self) -> str:
        msg = (
            f"refused {format_size(self.requested)} on tree {self.tree!r} ({self.volume}): "
            f"free {format_size(self.free)} - floor {format_size(self.floor)} - reserved by others "
            f"{format_size(self.reserved)} leaves {format_size(self.available)}, "
            f"short by {format_size(self.shortfall)}"
        )
        if self.evicted:
            msg += f" (after evicting {format_size(self.evicted)} of cache)"
        return msg

    def __str__(self) -> str:
        return self._message()

    def as_dict(self) -> dict[str, Any]:
        """The refusal's numbers, as the CLI's and the HTTP API's JSON body show them."""
        return {
            "error": "refused",
            "tree": self.tree,
            "volume": self.volume,
            "requested": self.requested,
            "free": self.free,
            "floor": self.floor,
            "reserved": self.reserved,
            "available": self.available,
            "shortfall": self.shortfall,
            "evicted": self.evicted,
            "message": self._message(),
        }

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (
                self.tree,
                self.requested,
                self.free,
                self.floor,
                self.reserved,
                self.volume,
                self.evicted,
            ),
        )


class SpaceRisk(JanitorError, OSError):
    """The volume under a live reservation is critical: stop at the next safe point."""

    exit_code = EXIT_TEMPFAIL

    def __init__(self, reservation_id: str, volume: str, reason: str) -> None:
        self.reservation_id = reservation_id
        self.volume = volume
        self.reason = reason
        super().__init__(errno.ENOSPC, self.__str__())

    def __str__(self) -> str:
        return f"reservation {self.reservation_id} at risk on {self.volume}: {self.reason}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reservation_id, self.volume, self.reason))
