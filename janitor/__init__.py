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
    UnknownReservation,
    UnknownTree,
)

TYPE_CHECKING = False  # not typing's: the guarded ffmpeg imports this package on every call
if TYPE_CHECKING:
    from typing import Any

    from janitor.admission.reserve import Admission, Reservation, ReservationInfo
    from janitor.config.settings import Settings
    from janitor.core import Janitor
    from janitor.status import Status

__version__ = "0.1.0"

__all__ = [
    "Admission",
    "ConfigError",
    "Janitor",
    "JanitorError",
    "LedgerError",
    "LedgerFull",
    "PolicyError",
    "Reservation",
    "ReservationInfo",
    "ReservationRefused",
    "Settings",
    "SpaceRisk",
    "Status",
    "UnknownReservation",
    "UnknownTree",
    "__version__",
]

# Heavy modules (pydantic, sqlite, psutil) load on first use, so `janitor --help` starts fast.
_LAZY = {
    "Janitor": "janitor.core",
    "Admission": "janitor.admission.reserve",
    "Reservation": "janitor.admission.reserve",
    "ReservationInfo": "janitor.admission.reserve",
    "Settings": "janitor.config.settings",
    "Status": "janitor.status",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'janitor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
