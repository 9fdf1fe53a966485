"""The janitor's exceptions: one base class, and built-in bases users already catch.

Every error carries the exit code the CLI uses for it, so the CLI never has to guess:
``2`` for bad input or configuration, ``75`` (EX_TEMPFAIL) when the disk is the reason.
All of them pickle, so they cross process boundaries (multiprocessing workers) intact.
"""

from __future__ import annotations

import errno

from janitor.humanize import format_duration, format_size

TYPE_CHECKING = False  # typing costs the guarded ffmpeg 20 ms at every start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any, Protocol

    class Decision(Protocol):
        """The numbers of the admission decision a refusal is made from (what
        ``janitor.admission.reserve.Admission`` has; this layer cannot import it)."""

        @property
        def tree(self) -> str: ...
        @property
        def volume(self) -> str: ...
        @property
        def requested(self) -> int: ...
        @property
        def free(self) -> int: ...
        @property
        def floor(self) -> int: ...
        @property
        def reserved(self) -> int: ...
        @property
        def evicted(self) -> int: ...
        @property
        def queued(self) -> int: ...
        @property
        def available(self) -> int: ...
        @property
        def shortfall(self) -> int: ...


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_OK",
    "EXIT_PROBLEM",
    "EXIT_TEMPFAIL",
    "ConfigError",
    "JanitorError",
    "LedgerBusy",
    "LedgerError",
    "LedgerFull",
    "NeverFits",
    "PolicyError",
    "ReservationRefused",
    "SpaceRisk",
    "UnknownPin",
    "UnknownReservation",
    "UnknownTree",
    "WaitWontHelp",
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
    file itself could not be read or parsed as TOML. ``fix``: how to put it right, when one
    thing does (a missing file); the message ends with it, and ``what`` is the message
    without it, for a report that shows the fix apart (``janitor doctor``).
    """

    def __init__(self, message: str, problems: Iterable[str] = (), fix: str = "") -> None:
        super().__init__(f"{message}; {fix}" if fix else message)
        self.what = message
        self.problems: tuple[str, ...] = tuple(problems)
        self.fix = fix

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what, self.problems, self.fix))


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


class LedgerBusy(LedgerError):
    """Another process held the ledger's lock for longer than this one may wait for it."""


class LedgerFull(LedgerError):
    """SQLite reported the disk full: nothing was changed, retry once space is back."""

    exit_code = EXIT_TEMPFAIL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC


class ReservationRefused(JanitorError, OSError):
    """Admission said no: granting would take the volume below its floor.

    It is an ``OSError`` with ``errno == ENOSPC``, so code that already handles a full disk
    handles a refusal too, but it happens *before* anything was written.

    It takes its numbers from the decision that refused (``Admission.refusal()`` makes it), so
    what is available and how short the request falls are worked out in one place, admission;
    a refusal read back from its JSON (:meth:`from_dict`: a 507 answer, a pickle) carries them
    as they were decided. ``output`` is the file that does not fit, when the request was a
    command's output (a guarded ffmpeg call's).
    """

    exit_code = EXIT_TEMPFAIL

    def __init__(
        self, decision: Decision, *, output: str | None = None, waited_s: float = 0.0
    ) -> None:
        self.tree = decision.tree
        self.volume = decision.volume
        self.requested = decision.requested
        self.free = decision.free
        self.floor = decision.floor
        self.reserved = decision.reserved
        self.evicted = decision.evicted
        #: Bytes left free for the call first in line on the volume (what it needs beyond what
        #: the work that ran when it began to wait will give back).
        self.queued = decision.queued
        #: Bytes that could still be granted: free - floor - reserved by others - what is
        #: held for the call first in line (never < 0).
        self.available = decision.available
        #: Bytes missing for this request to fit (including any deficit below the floor).
        self.shortfall = decision.shortfall
        #: Seconds this request waited for room before it was refused.
        self.waited_s = waited_s
        #: The file that does not fit, when the request was a command's output.
        self.output = output
        super().__init__(errno.ENOSPC, self._message())
        self.filename = output

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> ReservationRefused:
        """The refusal :meth:`as_dict` describes (the HTTP API's 507 answer): a
        :class:`NeverFits` when its ``error`` says so."""
        kinds: dict[str, type[ReservationRefused]] = {
            "never_fits": NeverFits,
            "wait_wont_help": WaitWontHelp,
        }
        return kinds.get(data.get("error") or "", ReservationRefused)._rebuilt(data)

    @classmethod
    def _rebuilt(cls, data: Mapping[str, Any]) -> ReservationRefused:
        return cls(_Numbers(data), output=data.get("output"), waited_s=data.get("waited_s", 0.0))

    def _message(self) -> str:
        queued = ""
        if self.queued:
            queued = f" - held for the job first in line {format_size(self.queued)}"
        msg = (
            f"refused {format_size(self.requested)} on tree {self.tree!r} ({self.volume}): "
            f"free {format_size(self.free)} - floor {format_size(self.floor)} - reserved by others "
            f"{format_size(self.reserved)}{queued} leaves {format_size(self.available)}, "
            f"short by {format_size(self.shortfall)}"
        )
        if self.evicted:
            msg += f" (after evicting {format_size(self.evicted)} of cache)"
        if self.waited_s:
            msg += f" (after waiting {format_duration(self.waited_s)} for room)"
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
            "queued": self.queued,
            "waited_s": self.waited_s,
            "output": self.output,
            "message": self._message(),
        }

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.as_dict()))


class _Numbers:
    """A refusal's numbers read back from :meth:`ReservationRefused.as_dict`'s shape, so a
    refusal rebuilt from it keeps them as admission decided them (a missing number reads 0, a
    missing name ``?``)."""

    __slots__ = (
        "available", "evicted", "floor", "free", "queued", "requested", "reserved", "shortfall",
        "tree", "volume",
    )  # fmt: skip

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.tree: str = data.get("tree", "?")
        self.volume: str = data.get("volume", "?")
        self.requested: int = data.get("requested", 0)
        self.free: int = data.get("free", 0)
        self.floor: int = data.get("floor", 0)
        self.reserved: int = data.get("reserved", 0)
        self.evicted: int = data.get("evicted", 0)
        self.queued: int = data.get("queued", 0)
        self.available: int = data.get("available", 0)
        self.shortfall: int = data.get("shortfall", 0)


def _rebuild(cls: type[ReservationRefused], data: dict[str, Any]) -> ReservationRefused:
    """Unpickle a refusal of any subclass from its JSON shape."""
    return cls._rebuilt(data)


class NeverFits(ReservationRefused):
    """A request larger than the volume could ever give it: its capacity less the floor and
    what lies there outside every reservation and cannot be evicted. Waiting cannot help, so it
    is refused at once."""

    def __init__(
        self,
        decision: Decision,
        *,
        output: str | None = None,
        waited_s: float = 0.0,
        capacity: int = 0,
        held: int = 0,
    ) -> None:
        #: The volume's size, and the bytes on it that no reservation holds and no eviction frees.
        self.capacity = capacity
        self.held = held
        super().__init__(decision, output=output, waited_s=waited_s)

    @classmethod
    def _rebuilt(cls, data: Mapping[str, Any]) -> ReservationRefused:
        return cls(
            _Numbers(data),
            output=data.get("output"),
            waited_s=data.get("waited_s", 0.0),
            capacity=data.get("capacity", 0),
            held=data.get("held", 0),
        )

    @property
    def most(self) -> int:
        """The most this volume could ever grant: capacity - floor - held (never < 0)."""
        return max(0, self.capacity - self.floor - self.held)

    def _message(self) -> str:
        return (
            f"refused {format_size(self.requested)} on tree {self.tree!r} ({self.volume}): it can "
            f"never fit there: capacity {format_size(self.capacity)} - floor "
            f"{format_size(self.floor)} - {format_size(self.held)} held outside every "
            f"reservation and cache leaves at most {format_size(self.most)}, "
            f"short by {format_size(max(0, self.requested - self.most))} even once every job ends"
        )

    def as_dict(self) -> dict[str, Any]:
        data = super().as_dict()
        data.update(error="never_fits", capacity=self.capacity, held=self.held, most=self.most)
        return data


class WaitWontHelp(ReservationRefused):
    """A write that does not fit now, and would not once the work on its volume ended: it
    lacks more than the live reservations, pins and awaiting-use entries there will give back
    (``coming``), so it is refused at once rather than made to wait for nothing."""

    def __init__(
        self,
        decision: Decision,
        *,
        output: str | None = None,
        waited_s: float = 0.0,
        coming: int = 0,
    ) -> None:
        #: What the running work and the caches on the volume will give back.
        self.coming = coming
        super().__init__(decision, output=output, waited_s=waited_s)

    @classmethod
    def _rebuilt(cls, data: Mapping[str, Any]) -> ReservationRefused:
        return cls(
            _Numbers(data),
            output=data.get("output"),
            waited_s=data.get("waited_s", 0.0),
            coming=data.get("coming", 0),
        )

    @property
    def lacks(self) -> int:
        """What it lacks beyond the free space above the floor and others' reservations."""
        return max(0, self.requested - max(0, self.free - self.floor - self.reserved))

    def _message(self) -> str:
        return super()._message() + (
            f"; what the work on {self.volume} will give back when it ends "
            f"({format_size(self.coming)}) cannot cover the {format_size(self.lacks)} it lacks, "
            "so it was refused at once rather than made to wait"
        )

    def as_dict(self) -> dict[str, Any]:
        data = super().as_dict()
        data.update(error="wait_wont_help", coming=self.coming, lacks=self.lacks)
        return data


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
