"""The handles a worker holds: a granted ``Reservation`` and a live ``Pin``.

Each is a context manager that gives its claim back on exit. They sit beside ``Janitor`` (they
call it back), above the ledger tables that only know their rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from janitor.errors import UnknownPin, UnknownReservation

if TYPE_CHECKING:
    from types import TracebackType

    from janitor.ledger.pins import PinInfo
    from janitor.ledger.reservations import ReservationInfo

__all__ = ["Pin", "Reservation"]


class _Reserver(Protocol):
    """What a reservation calls back: the part of ``janitor.reserving.Reserving`` it needs."""

    def release(self, reservation_id: str) -> ReservationInfo: ...
    def renew(self, reservation_id: str, ttl: float | str | None = None) -> ReservationInfo: ...
    def grow(self, reservation_id: str, nbytes: int | str) -> ReservationInfo: ...
    def check_risk(self, info: ReservationInfo) -> None: ...


class _Unpinner(Protocol):
    """What a pin calls back: ``janitor.core.Janitor.unpin``."""

    def unpin(self, key: str) -> list[PinInfo]: ...


class Reservation:
    """A granted reservation, held by this process; a context manager that releases on exit.

    >>> with jan.reserve("media_cache", "2G", path=out) as r:   # doctest: +SKIP
    ...     convert(out)
    ...     r.check()          # SpaceRisk once the volume is critical: stop early
    """

    def __init__(self, janitor: _Reserver, info: ReservationInfo) -> None:
        self._janitor = janitor
        self.info = info
        self._released = False

    @property
    def id(self) -> str:
        """The reservation's id, e.g. ``r-3f2a9c1b7d0e4a65``."""
        return self.info.id

    @property
    def nbytes(self) -> int:
        """Bytes granted."""
        return self.info.bytes

    @property
    def path(self) -> Path | None:
        """The file or folder the reservation writes to, if one was given."""
        return None if self.info.path is None else Path(self.info.path)

    @property
    def released(self) -> bool:
        """True once release() ran (or the context exited)."""
        return self._released

    def release(self) -> None:
        """End the reservation now. Releasing twice, or after it expired, is harmless."""
        if self._released:
            return
        self._released = True
        try:
            self._janitor.release(self.id)
        except UnknownReservation:
            pass  # expired or reaped already: the bytes no longer count either way

    def renew(self, ttl: float | str | None = None) -> None:
        """Extend the TTL to now + ``ttl`` (the janitor's default TTL if None)."""
        self.info = self._janitor.renew(self.id, ttl)

    def grow(self, nbytes: int | str) -> None:
        """Raise the reservation to ``nbytes`` in all (ReservationRefused if the rest does not
        fit); a smaller total gives the difference back."""
        self.info = self._janitor.grow(self.id, nbytes)

    def check(self) -> None:
        """Raise SpaceRisk if this job must stop: its volume is below the floor and it is
        among the fewest reservations whose stopping covers what the volume lacks."""
        self._janitor.check_risk(self.info)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "live"
        return f"<Reservation {self.id} {self.info.tree} {self.info.bytes} B {state}>"


class Pin:
    """A live pin held by this process; a context manager that unpins on exit.

    >>> with jan.pin(cache / f"{fp}.wav"):     # doctest: +SKIP
    ...     samples = read_wav(cache / f"{fp}.wav")
    """

    def __init__(self, janitor: _Unpinner, info: PinInfo) -> None:
        self._janitor = janitor
        self.info = info
        self._ended = False

    @property
    def id(self) -> str:
        """The pin's id, e.g. ``p-0c1d2e3f40516273``."""
        return self.info.id

    def unpin(self) -> None:
        """End the pin; harmless if it already ended."""
        if self._ended:
            return
        self._ended = True
        try:
            self._janitor.unpin(self.id)
        except UnknownPin:
            pass

    def __enter__(self) -> Pin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unpin()
