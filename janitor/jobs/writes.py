"""Reserving the writes of one command at once: the guarded ffmpeg's outputs, its cached inputs.

Each output is reserved on the policy tree that holds it (making room by evicting caches, as
``reserve`` does); an output on a volume that has trees but outside all of them is reserved on
that volume, under the name of a tree on it, so it still counts against the volume's floor; an
output on a volume the policy does not cover is not guarded. Either every output is granted or
none is: a refusal releases what was granted before it. Inputs inside a cache tree are touched
(a use, for LRU) and pinned for the owner's life, since the pipeline re-reads a cached WAV once
per alignment group with no file open in between.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from janitor.errors import ConfigError, ReservationRefused, UnknownReservation

if TYPE_CHECKING:
    from janitor.core import Janitor
    from janitor.ledger.pins import PinInfo
    from janitor.ledger.reservations import ReservationInfo
    from janitor.ledger.tx import Tx

__all__ = ["PlannedWrite", "WriteSession", "locate", "open_writes"]


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """One file a command will write, and how many bytes."""

    path: str
    bytes: int


@dataclass(frozen=True, slots=True)
class WriteSession:
    """What :func:`open_writes` holds for one command: its reservations, each with the output
    it is for and the floor of its volume (for the watch), the pins on its inputs, and the
    outputs left unguarded."""

    reservations: tuple[ReservationInfo, ...]
    outputs: tuple[str, ...]
    floors: tuple[int, ...]
    pins: tuple[PinInfo, ...]
    unguarded: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``POST /v1/guard``."""
        return {
            "reservations": [
                {**r.as_dict(), "output": out, "floor": floor}
                for r, out, floor in zip(self.reservations, self.outputs, self.floors, strict=True)
            ],
            "pins": [p.as_dict() for p in self.pins],
            "unguarded": list(self.unguarded),
        }


def locate(jan: Janitor, path: str) -> tuple[str, str | None] | None:
    """(tree, path to record) for a write to ``path``: the tree holding it and the path; a tree
    on its volume and None when it lies outside every tree there; None when no tree is on its
    volume (the policy does not cover it)."""
    from janitor.admission.reserve import resolve_path, tree_on
    from janitor.host.space import device_of

    for name, tree in jan.policy.trees.items():
        try:
            return name, resolve_path(tree, path)
        except ConfigError:
            continue
    try:
        device = device_of(os.path.dirname(path) or ".")
    except OSError:
        return None
    on_volume = tree_on(jan.policy, device)
    return None if on_volume is None else (on_volume.name, None)


def open_writes(
    jan: Janitor,
    writes: Sequence[PlannedWrite],
    *,
    inputs: Sequence[str] = (),
    owner_pid: int,
    job: str | None = None,
    ttl: float | str | None = None,
) -> WriteSession:
    """Reserve every write (all or none) and pin the inputs that lie in cache trees.

    Raises ReservationRefused for the first write that does not fit (its ``filename``
    names the output), after releasing what was granted for the others.
    """
    from janitor.admission.reserve import measure

    granted: list[ReservationInfo] = []
    outputs: list[str] = []
    floors: list[int] = []
    unguarded: list[str] = []
    try:
        for w in writes:
            where = locate(jan, w.path)
            if where is None:
                unguarded.append(w.path)
                continue
            tree, recorded = where
            try:
                r = jan.reserve(tree, w.bytes, path=recorded, job=job, ttl=ttl, owner_pid=owner_pid)
            except ReservationRefused as exc:
                exc.filename = w.path
                raise
            granted.append(r.info)
            outputs.append(w.path)
            floors.append(measure(jan.policy, jan.policy.tree(tree)).floor)
    except BaseException:
        for info in granted:
            try:
                jan.release(info.id)
            except UnknownReservation:
                pass
        raise
    pins = _pin_inputs(jan, inputs, owner_pid) if inputs else ()
    return WriteSession(tuple(granted), tuple(outputs), tuple(floors), pins, tuple(unguarded))


def _pin_inputs(jan: Janitor, inputs: Sequence[str], owner_pid: int) -> tuple[PinInfo, ...]:
    """Touch and pin, in one ledger transaction, the inputs that lie inside cache trees."""
    from janitor.admission.reserve import resolve_path
    from janitor.host.owner import process_start

    found: list[tuple[str, str]] = []
    for path in inputs:
        absolute = os.path.normpath(os.path.abspath(path))
        for name, tree in jan.policy.trees.items():
            if tree.role != "cache":
                continue
            try:
                found.append((name, resolve_path(tree, absolute)))
                break
            except ConfigError:
                continue
    if not found:
        return ()
    start = process_start(owner_pid)
    now = time.time()

    def write(tx: Tx) -> tuple[PinInfo, ...]:
        tx.touches.record([p for _, p in found])
        return tuple(
            tx.pins.add(tree, p, owner_pid=owner_pid, owner_start=start, ttl=None, now=now)
            for tree, p in found
        )

    pins: tuple[PinInfo, ...] = jan.ledger.call(write)
    return pins
