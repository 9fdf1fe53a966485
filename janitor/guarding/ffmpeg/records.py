"""The values the estimator passes around: an ffmpeg command split into its files, what a probe
says about an input, and what an output will cost (or why that cannot be known).

Plain slotted classes, not dataclasses: ``dataclasses`` imports ``inspect`` (~10 ms), and the
guarded ffmpeg loads this module on every call.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs several ms to import; mypy treats this name as True
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "FileArg",
    "Invocation",
    "MediaInfo",
    "NotEstimable",
    "Option",
    "OutputEstimate",
]


class _Record:
    __slots__: tuple[str, ...] = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in type(self).__slots__)
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, k) == getattr(other, k) for k in type(self).__slots__
        )

    def __hash__(self) -> int:
        return hash(tuple(repr(getattr(self, k)) for k in type(self).__slots__))


class Option(_Record):
    """One option as written: ``-c:a pcm_s16le`` is ``Option("c", "a", "pcm_s16le")``."""

    __slots__ = ("name", "spec", "value")

    def __init__(self, name: str, spec: str | None = None, value: str | None = None) -> None:
        self.name = name
        self.spec = spec
        self.value = value

    @property
    def flag(self) -> str:
        """The option as typed on the command line, e.g. ``-c:a``."""
        return f"-{self.name}:{self.spec}" if self.spec is not None else f"-{self.name}"


class FileArg(_Record):
    """An input (``-i URL``) or output file with the per-file options written before it."""

    __slots__ = ("options", "url")

    def __init__(self, url: str, options: list[Option] | None = None) -> None:
        self.url = url
        self.options: list[Option] = options if options is not None else []


class Invocation(_Record):
    """An ffmpeg argument list split the way ffmpeg splits it.

    ``problem`` is set when the command as a whole cannot be estimated (unknown option, an
    information request such as ``-version``, no output, options ffmpeg would refuse ...).
    ``overwrite`` is True for ``-y``, False for ``-n``, None when ffmpeg would ask.
    """

    __slots__ = ("argv", "globals", "inputs", "outputs", "overwrite", "problem", "trailing")

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv: tuple[str, ...] = tuple(argv)
        self.globals: list[Option] = []
        self.inputs: list[FileArg] = []
        self.outputs: list[FileArg] = []
        self.trailing: list[Option] = []
        self.problem: str | None = None
        self.overwrite: bool | None = None


class MediaInfo(_Record):
    """What ffprobe says about an input: duration, and the audio the decoder will produce.

    ``sample_rate`` and ``channels`` are the largest over the file's audio streams (ffmpeg picks
    one by its own rules; the largest is an upper bound). ``codec``/``profile`` are those of the
    first audio stream. ``tags`` holds only the container tags that can reach a WAV header.
    ``samples``: how many samples per channel the decoder emits, when the container says it
    exactly and ffprobe's duration does not (AAC in MP4, MP3 with an encoder-delay tag; see
    :func:`container_samples`); None when the duration is all we know.
    """

    __slots__ = (
        "audio_streams",
        "channels",
        "codec",
        "duration_s",
        "profile",
        "sample_rate",
        "samples",
        "tags",
    )

    def __init__(
        self,
        duration_s: float | None,
        sample_rate: int,
        channels: int,
        *,
        codec: str = "",
        profile: str = "",
        audio_streams: int = 1,
        tags: Mapping[str, str] | None = None,
        samples: int | None = None,
    ) -> None:
        self.duration_s = duration_s
        self.sample_rate = sample_rate
        self.channels = channels
        self.codec = codec
        self.profile = profile
        self.audio_streams = audio_streams
        self.tags: dict[str, str] = dict(tags) if tags else {}
        self.samples = samples


class OutputEstimate(_Record):
    """One output file and the bytes ffmpeg will write to it (header included).

    ``whole_bytes``: for a cut (a window of its input: ``-ss``/``-to``/``-t``), what the whole
    input would take in the same format, header included: a job's working set when it cuts
    the input group by group and keeps every group; None for an output of the whole input, or
    an input whose duration is unknown. ``start_us``: for a cut, where its window starts in
    the input (microseconds; None when it cannot be told, e.g. ``-sseof``): with
    ``duration_s``, which part of the input it holds.
    """

    __slots__ = (
        "bytes",
        "channels",
        "codec",
        "duration_s",
        "format",
        "header_bytes",
        "input_index",
        "path",
        "sample_rate",
        "start_us",
        "whole_bytes",
    )

    def __init__(
        self,
        path: str,
        bytes: int,
        *,
        format: str,
        codec: str,
        sample_rate: int,
        channels: int,
        duration_s: float,
        header_bytes: int,
        input_index: int,
        whole_bytes: int | None = None,
        start_us: int | None = None,
    ) -> None:
        self.path = path
        self.bytes = bytes
        self.format = format
        self.codec = codec
        self.sample_rate = sample_rate
        self.channels = channels
        self.duration_s = duration_s
        self.header_bytes = header_bytes
        self.input_index = input_index
        self.whole_bytes = whole_bytes
        self.start_us = start_us


class NotEstimable(_Record):
    """We cannot be sure what this command writes; ``reason`` says why in a few words."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason
