"""The daemon API's wire models: the JSON bodies it takes and the answers it documents.

Requests are validated against them (unknown keys refused: ``extra="forbid"``); the answers'
models document the schema at ``/openapi.json`` (``response_model``), while the routes write
the answers themselves from the same keys (:mod:`janitor.daemon.routes.answers`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CoverRequest",
    "ErrorOut",
    "EstimateRequest",
    "GrowRequest",
    "GuardCall",
    "GuardRelease",
    "GuardWait",
    "ProbeCall",
    "RefusalOut",
    "RenewRequest",
    "ReservationOut",
    "ReserveRequest",
    "SweepRequest",
    "WrittenOutput",
]


class ReserveRequest(BaseModel):
    """A reservation request. ``bytes`` takes an integer or a size such as ``"2G"``."""

    model_config = ConfigDict(extra="forbid")

    tree: str = Field(min_length=1, max_length=200)
    bytes: int | str = Field(description="Bytes (integer) or a size: 500M, 2G, 1.5GiB.")
    path: str | None = Field(default=None, max_length=4096)
    job: str | None = Field(default=None, max_length=200)
    ttl: float | str | None = Field(default=None, description="Seconds, or 30m, 2h.")
    owner_pid: int | None = Field(
        default=None,
        ge=1,
        description="Process whose exit ends the reservation (default: the daemon; then only "
        "the TTL or a release ends it).",
    )
    evict: bool = Field(default=True, description="Evict caches to make room before refusing.")


class RenewRequest(BaseModel):
    """New lifetime from now; the default TTL when absent."""

    model_config = ConfigDict(extra="forbid")

    ttl: float | str | None = None


class GrowRequest(BaseModel):
    """The reservation's new total size: an integer or a size such as ``"3G"``."""

    model_config = ConfigDict(extra="forbid")

    bytes: int | str = Field(description="New total (not an increment): bytes or 500M, 2G.")


class CoverRequest(BaseModel):
    """A process the reservation must stay live for (the command run under it)."""

    model_config = ConfigDict(extra="forbid")

    pid: int = Field(ge=1)


class GuardWait(BaseModel):
    """A queued call's place (the ticket of ``POST /v1/guard/call``'s 202 answer), waited on
    until admitted."""

    model_config = ConfigDict(extra="forbid")

    ticket: str = Field(min_length=1, max_length=64)
    owner_pid: int = Field(ge=1, description="The guard: the wait ends if it does.")


class GuardCall(BaseModel):
    """One ffmpeg call as a guard (either front end) got it, for the daemon to estimate, admit,
    pin and record (``POST /v1/guard/call``): its arguments and folder, the guard and its
    parent, the real ffmpeg (its ffprobe measures the inputs), the ``JANITOR_*`` variables that
    shape a call (``JANITOR_JOB``, ``JANITOR_RUN``, ``JANITOR_POLICY``, ``JANITOR_CACHE_DIR``,
    ``JANITOR_GUARD_WAIT_S``) and what ``janitor shim install`` resolved (``policy``,
    ``cache_dir``, ``wait_s``), the variables winning."""

    model_config = ConfigDict(extra="forbid")

    args: list[Annotated[str, Field(max_length=65536)]] = Field(max_length=4096)
    cwd: str = Field(min_length=1, max_length=4096)
    owner_pid: int = Field(ge=1, description="The guard's pid: its exit ends the call's own.")
    writer_pid: int | None = Field(default=None, ge=1, description="The guard's parent.")
    ffmpeg: str = Field(min_length=1, max_length=4096, description="The real ffmpeg it runs.")
    elapsed_s: float = Field(
        default=0.0,
        ge=0,
        le=86400,
        description="Seconds the call had taken when it was sent (the front end's own start): "
        "its wait for room counts from the guarded ffmpeg's start, one deadline.",
    )
    env: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=16
    )
    config: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=16
    )


class ProbeCall(BaseModel):
    """One ffprobe call as a guarded ffprobe got it (``POST /v1/guard/probe``): its arguments
    and folder, the guard and its parent (the prober), the real ffprobe, the variables that
    shape it (``TMPDIR``: where the prober's jobs go; ``JANITOR_POLICY``,
    ``JANITOR_CACHE_DIR``) and what ``janitor shim install`` resolved (``policy``)."""

    model_config = ConfigDict(extra="forbid")

    args: list[Annotated[str, Field(max_length=65536)]] = Field(max_length=4096)
    cwd: str = Field(min_length=1, max_length=4096)
    owner_pid: int = Field(ge=1, description="The guard's pid.")
    writer_pid: int | None = Field(default=None, ge=1, description="The guard's parent.")
    ffprobe: str = Field(min_length=1, max_length=4096, description="The real ffprobe it runs.")
    env: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=16
    )
    config: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=16
    )


class EstimateRequest(BaseModel):
    """An ffmpeg argument list (without ``ffmpeg``) whose output bytes are wanted."""

    model_config = ConfigDict(extra="forbid")

    args: list[str] = Field(min_length=1, max_length=1024)
    cwd: str | None = Field(
        default=None,
        max_length=4096,
        description="The folder relative paths are taken against (absolute); required when "
        "an input or output path is relative.",
    )


class WrittenOutput(BaseModel):
    """One output of a guarded call and the bytes it held when ffmpeg ended."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(max_length=4096)
    bytes: int = Field(ge=0, le=1 << 50)


class GuardRelease(BaseModel):
    """What a guarded call held: its reservations and pins, ended together."""

    model_config = ConfigDict(extra="forbid")

    reservations: list[str] = Field(default_factory=list, max_length=256)
    pins: list[str] = Field(default_factory=list, max_length=256)
    #: Its cuts on its jobs' working sets, no longer in flight.
    draws: list[str] = Field(default_factory=list, max_length=256)
    #: What the call left at its outputs (``janitor run`` sums it up), its job and run.
    written: list[WrittenOutput] = Field(default_factory=list, max_length=256)
    job: str | None = Field(None, max_length=256)
    run: str | None = Field(None, max_length=64)


class SweepRequest(BaseModel):
    """Which tree to sweep (all when absent), and whether only to plan."""

    model_config = ConfigDict(extra="forbid")

    tree: str | None = None
    dry_run: bool = False
    pressure: bool = True


class ReservationOut(BaseModel):
    """A reservation, as `janitor reserve --json` prints it."""

    id: str
    tree: str
    device: int
    volume: str
    bytes: int
    path: str | None
    job: str | None
    owner_pid: int
    created: float
    expires: float | None = Field(description="null for a job's working set: it ends with the job")
    state: str
    ended: float | None
    at_risk: str | None
    outstanding: int
    command_pid: int | None = None
    job_id: str | None = None


class RefusalOut(BaseModel):
    """507: the request does not fit; the numbers say by how much."""

    error: str
    tree: str
    volume: str
    requested: int
    free: int
    floor: int
    reserved: int
    available: int
    shortfall: int
    evicted: int
    queued: int = Field(0, description="Bytes wanted by calls waiting ahead of this one.")
    waited_s: float = Field(0.0, description="Seconds this call waited for room.")
    output: str | None = Field(None, description="The output file refused (a guarded call).")
    message: str


class ErrorOut(BaseModel):
    """Any other error: a kind and a one-line message."""

    error: str
    message: str
