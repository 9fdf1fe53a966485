"""What a guarded ffmpeg call holds and what it leaves: the values both ends of the guard share.

A grant (:mod:`janitor.guarding.grant`) gives a :class:`WriteSession`, its :class:`HeldWrite`
per output; a ``run`` verdict carries it as the JSON of ``as_dict``, which the Python guard
reads back with ``from_wire`` (whether the daemon or its own process decided) to watch
ffmpeg's outputs. When ffmpeg ends, the guard reports a :class:`Written` per output, ended
with :func:`janitor.guarding.close.close_writes`.

The guard imports this module on the path of every alignment group, so it is written without
``dataclasses`` or ``typing`` (tens of ms at every start) and imports no other module.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the guarded ffmpeg several ms at every start
if TYPE_CHECKING:
    from typing import Any

__all__ = ["HeldWrite", "WriteSession", "Written"]


class _Value:
    """Equality, hash and repr over the ``__slots__`` of a value class, in the order they are
    listed (the order of its ``__init__``): what a dataclass would give."""

    __slots__: tuple[str, ...] = ()

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Value)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({inner})"


class HeldWrite(_Value):
    """A write held for the call: the reservation behind it, the output, the bytes the output
    may reach before the guard stops ffmpeg, the floor of its volume, and whether it is a
    job's working set (``pooled``: it stays when the call ends)."""

    __slots__ = ("reservation", "output", "allowed", "floor", "pooled")  # noqa: RUF023 (in order)

    def __init__(
        self, reservation: str, output: str, allowed: int, floor: int, pooled: bool = False
    ) -> None:
        self.reservation = reservation
        self.output = output
        self.allowed = allowed
        self.floor = floor
        self.pooled = pooled

    def as_dict(self) -> dict[str, Any]:
        """One entry of ``reservations`` in a ``run`` verdict's ``session``."""
        return {
            "id": self.reservation,
            "output": self.output,
            "bytes": self.allowed,
            "floor": self.floor,
            "pooled": self.pooled,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> HeldWrite:
        """From :meth:`as_dict`'s shape, as the guard reads a verdict."""
        pooled = bool(data.get("pooled"))
        return cls(data["id"], data["output"], data["bytes"], data["floor"], pooled)


class WriteSession(_Value):
    """What a call holds: its writes, the pins that end with it, the outputs left unguarded,
    the jobs it wrote into, how long it waited for room, and its draws on its jobs' working sets
    (in flight until the call ends: other cuts racing it count them)."""

    __slots__ = ("writes", "pins", "unguarded", "jobs", "waited_s", "draws")  # noqa: RUF023

    def __init__(
        self,
        writes: tuple[HeldWrite, ...],
        pins: tuple[str, ...] = (),
        unguarded: tuple[str, ...] = (),
        jobs: tuple[str, ...] = (),
        waited_s: float = 0.0,
        draws: tuple[str, ...] = (),
    ) -> None:
        self.writes = writes
        self.pins = pins
        self.unguarded = unguarded
        self.jobs = jobs
        self.waited_s = waited_s
        self.draws = draws

    @property
    def own(self) -> tuple[str, ...]:
        """The reservations that end with the call (a job's working set does not)."""
        return tuple(w.reservation for w in self.writes if not w.pooled)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of a ``run`` verdict's ``session``."""
        return {
            "reservations": [w.as_dict() for w in self.writes],
            "pins": list(self.pins),
            "unguarded": list(self.unguarded),
            "jobs": list(self.jobs),
            "waited_s": self.waited_s,
            "draws": list(self.draws),
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> WriteSession:
        """From :meth:`as_dict`'s shape, as the guard reads a verdict (a pin may also come as
        an object with its ``id``)."""
        return cls(
            tuple(HeldWrite.from_wire(r) for r in data["reservations"]),
            tuple(p if isinstance(p, str) else p["id"] for p in data.get("pins", ())),
            tuple(data.get("unguarded", ())),
            tuple(data.get("jobs", ())),
            float(data.get("waited_s") or 0.0),
            tuple(data.get("draws", ())),
        )


class Written(_Value):
    """What a guarded call left at one output when ffmpeg ended: its path and its size in bytes
    (as ``ls -l`` says it; a file cut short by Ctrl-C counts what it holds)."""

    __slots__ = ("path", "bytes")  # noqa: RUF023 (in order)

    def __init__(self, path: str, nbytes: int) -> None:
        self.path = path
        self.bytes = nbytes

    def as_dict(self) -> dict[str, Any]:
        """One entry of ``written`` in ``POST /v1/guard/release``."""
        return {"path": self.path, "bytes": self.bytes}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Written:
        """From :meth:`as_dict`'s shape."""
        return cls(str(data["path"]), int(data["bytes"]))
