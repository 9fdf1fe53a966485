"""space-janitor: keep caches within quotas, temp trees clean, and reserve disk space up front.

>>> from janitor import Janitor, ReservationRefused
>>> jan = Janitor.from_settings()                                   # doctest: +SKIP
>>> with jan.reserve("media_cache", "2G", path=out, job="fa") as r:  # doctest: +SKIP
...     convert(out)
"""

from __future__ import annotations

from janitor.errors import (
    ConfigError,
    JanitorError,
    LedgerError,
    LedgerFull,
    PolicyError,
    ReservationRefused,
    SpaceRisk,
    UnknownPin,
    UnknownReservation,
    UnknownTree,
)

TYPE_CHECKING = False  # not typing's: the guarded ffmpeg imports this package on every call
if TYPE_CHECKING:
    from typing import Any

    from janitor.admission.reserve import Admission
    from janitor.admission.risk import RiskDecision
    from janitor.admission.volume import Volume
    from janitor.cleanup.sweep import SweepResult
    from janitor.config.settings import Settings
    from janitor.core import Janitor
    from janitor.handles import Pin, Reservation
    from janitor.ledger.log import LogEntry
    from janitor.ledger.pins import PinInfo
    from janitor.ledger.reservations import ReservationInfo
    from janitor.status import Status, TreeStatus

__version__ = "0.1.0"

__all__ = [
    "Admission",
    "ConfigError",
    "Janitor",
    "JanitorError",
    "LedgerError",
    "LedgerFull",
    "LogEntry",
    "Pin",
    "PinInfo",
    "PolicyError",
    "Reservation",
    "ReservationInfo",
    "ReservationRefused",
    "RiskDecision",
    "Settings",
    "SpaceRisk",
    "Status",
    "SweepResult",
    "TreeStatus",
    "UnknownPin",
    "UnknownReservation",
    "UnknownTree",
    "Volume",
    "__version__",
]

# Heavy modules (pydantic, sqlite, psutil) load on first use, so `janitor --help` starts fast.
_LAZY = {
    "Janitor": "janitor.core",
    "Admission": "janitor.admission.reserve",
    "RiskDecision": "janitor.admission.risk",
    "Volume": "janitor.admission.volume",
    "SweepResult": "janitor.cleanup.sweep",
    "Settings": "janitor.config.settings",
    "Pin": "janitor.handles",
    "Reservation": "janitor.handles",
    "LogEntry": "janitor.ledger.log",
    "PinInfo": "janitor.ledger.pins",
    "ReservationInfo": "janitor.ledger.reservations",
    "Status": "janitor.status",
    "TreeStatus": "janitor.status",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'janitor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
