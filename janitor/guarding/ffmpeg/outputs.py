"""The bytes each output of an ffmpeg command will hold once ffmpeg is done (:func:`estimate`,
:func:`estimate_command`), or why that cannot be known.

An output is estimated in steps, each a small function returning a named value or
:class:`NotEstimable`: what the output's own options ask for (:class:`_Asked`), the muxer and
codec that follow (:class:`_Encoding`), the input that feeds it and the window read from it,
the rate and channels written (:class:`_Shape`), then the samples (janitor.guarding.ffmpeg.samples)
and the WAV header (janitor.guarding.ffmpeg.wav). Only raw PCM and WAV outputs are estimated.
"""

from __future__ import annotations

import os

from janitor.guarding.ffmpeg.args import UNSAFE, parse, split_url
from janitor.guarding.ffmpeg.records import (
    FileArg,
    Invocation,
    MediaInfo,
    NotEstimable,
    OutputEstimate,
)
from janitor.guarding.ffmpeg.samples import Window, set_time, written_samples
from janitor.guarding.ffmpeg.wav import (
    EXT_FORMATS,
    PCM_CODECS,
    RAW_FORMATS,
    RIFF_TAGS,
    WAV_CODECS,
    encoder_sample_fmt,
    wav_header_bytes,
)

TYPE_CHECKING = False  # typing costs several ms to import; mypy treats this name as True
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from janitor.guarding.ffmpeg.probe import Probe

__all__ = ["estimate", "estimate_command"]


def estimate(
    inv: Invocation, duration_of: Callable[[str], MediaInfo | NotEstimable]
) -> list[OutputEstimate] | NotEstimable:
    """The bytes each output file of ``inv`` will hold once ffmpeg is done, or why not known.

    ``duration_of(path)`` describes an input (a :class:`Probe` does, with a cache); it is called
    at most once per input. All outputs are estimated or none: the guard needs every one.
    """
    if inv.problem:
        return NotEstimable(inv.problem)
    memo = _Memo(inv, duration_of)
    results: list[OutputEstimate] = []
    for out in inv.outputs:
        est = _estimate_output(inv, out, memo)
        if isinstance(est, NotEstimable):
            return NotEstimable(f"{out.url}: {est.reason}")
        results.append(est)
    return results


def estimate_command(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    probe: Probe | None = None,
) -> list[OutputEstimate] | NotEstimable:
    """The files an ffmpeg argument list (without ``ffmpeg`` itself) will write and their bytes,
    paths made absolute against ``cwd``; or why that cannot be known. What the guard, the API's
    ``POST /v1/estimate``, ``janitor estimate`` and ``janitor run``'s pre-flight share.

    >>> estimate_command(["-y", "-ss", "0", "-t", "30", "-i", "in.wav", "-f", "f32le",
    ...                   "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1", "o.pcm"],
    ...                  cwd="/tmp")[0].bytes                          # doctest: +SKIP
    1920000
    """
    base = cwd or os.getcwd()
    inv = parse(list(argv))
    if inv.problem:
        return NotEstimable(inv.problem)
    for inp in inv.inputs:  # relative inputs are read from cwd, as ffmpeg would
        local = split_url(inp.url)
        if not isinstance(local, NotEstimable) and not os.path.isabs(local):
            inp.url = os.path.join(base, local)
    if probe is None:
        from janitor.guarding.ffmpeg.probe import Probe

        probe = Probe(None)
    est = estimate(inv, probe.duration_of)
    if isinstance(est, NotEstimable):
        return est
    for o in est:
        o.path = os.path.normpath(os.path.join(base, o.path))
    return est


class _Memo:
    """Calls the caller's probe at most once per input of one invocation."""

    def __init__(
        self, inv: Invocation, duration_of: Callable[[str], MediaInfo | NotEstimable]
    ) -> None:
        self.inv = inv
        self.duration_of = duration_of
        self.seen: dict[int, MediaInfo | NotEstimable] = {}

    def __call__(self, index: int) -> MediaInfo | NotEstimable:
        if index not in self.seen:
            path = split_url(self.inv.inputs[index].url)
            if isinstance(path, NotEstimable):
                self.seen[index] = NotEstimable(f"input {path.reason}")
            else:
                self.seen[index] = self.duration_of(path)
        return self.seen[index]


# -- the steps of one output ---------------------------------------------------------------------


class _Asked:
    """What an output's own options ask for; None (or empty) where they say nothing."""

    __slots__ = (
        "bitexact",
        "channels",
        "codec",
        "format",
        "maps",
        "meta",
        "meta_source",
        "rate",
        "sample_fmt",
        "window",
    )

    def __init__(self) -> None:
        self.format: str | None = None
        self.codec: str | None = None
        self.sample_fmt: str | None = None
        self.rate: int | None = None
        self.channels: int | None = None
        self.window = Window()
        self.maps: list[str] = []
        self.meta: list[tuple[str, str]] = []  # -metadata key=value edits, in order
        self.meta_source: str | None = None  # -map_metadata
        self.bitexact = False


class _Encoding:
    """The muxer and PCM codec an output is written with, and the codec's bytes per sample."""

    __slots__ = ("codec", "format", "width")

    def __init__(self, format: str, codec: str) -> None:
        self.format = format
        self.codec = codec
        self.width = PCM_CODECS[codec]


class _Shape:
    """The sample rate and channels an output is written with."""

    __slots__ = ("channels", "rate")

    def __init__(self, rate: int, channels: int) -> None:
        self.rate = rate
        self.channels = channels


def _estimate_output(
    inv: Invocation, out: FileArg, info_of: _Memo
) -> OutputEstimate | NotEstimable:
    path = split_url(out.url)
    if isinstance(path, NotEstimable):
        return path
    asked = _output_options(out)
    if isinstance(asked, NotEstimable):
        return asked
    enc = _encoding(path, asked)
    if isinstance(enc, NotEstimable):
        return enc
    index = _mapped_input(inv, asked.maps)
    if isinstance(index, NotEstimable):
        return index
    window = _input_window(inv.inputs[index], asked)
    if isinstance(window, NotEstimable):
        return window
    info = info_of(index)
    if isinstance(info, NotEstimable):
        return info
    shape = _shape(asked, info)
    if isinstance(shape, NotEstimable):
        return shape
    frames = written_samples(window, asked.window, info, shape.rate)
    if isinstance(frames, NotEstimable):
        return frames
    data = frames * shape.channels * enc.width
    head = 0  # the WAV header's bytes, without the pad byte after odd data
    if enc.format == "wav":
        wav = _wav_header(inv, asked, enc, shape, info_of)
        if isinstance(wav, NotEstimable):
            return wav
        head = wav
    header = head + (data & 1) if head else 0
    cut = window.timed() or asked.window.timed()
    start_us = None
    if cut and window.sseof is None and asked.window.sseof is None:
        start_us = (window.ss or 0) + (asked.window.ss or 0)
    return OutputEstimate(
        path,
        data + header,
        format=enc.format,
        codec=enc.codec,
        sample_rate=shape.rate,
        channels=shape.channels,
        duration_s=frames / shape.rate,
        header_bytes=header,
        input_index=index,
        whole_bytes=_whole_bytes(info, enc, shape, head) if cut else None,
        start_us=start_us,
    )


def _output_options(out: FileArg) -> _Asked | NotEstimable:
    """Read the options written before an output file."""
    asked = _Asked()
    for opt in out.options:
        name, value = opt.name, opt.value or ""
        if name in UNSAFE:
            return NotEstimable(UNSAFE[name])
        if name in ("c", "codec", "ar", "ac", "sample_fmt"):
            applies = _applies(opt.spec)
            if applies is None:
                return NotEstimable(f"stream specifier in {opt.flag} not understood")
            if not applies:
                continue
        if name == "f":
            asked.format = value
        elif name in ("c", "codec", "acodec"):
            asked.codec = value
        elif name in ("ar", "ac"):
            number = _int_value(value)
            if number is None:
                return NotEstimable(f"cannot read {opt.flag} {value!r}")
            if name == "ar":
                asked.rate = number
            else:
                asked.channels = number
        elif name == "sample_fmt":
            asked.sample_fmt = value
        elif name in ("ss", "to", "t"):
            bad = set_time(asked.window, opt)
            if bad:
                return bad
        elif name == "map":
            asked.maps.append(value)
        elif name == "metadata" and (opt.spec is None or opt.spec.startswith("g")):
            key, _, text = value.partition("=")
            asked.meta.append((key, text))
        elif name == "map_metadata" and (opt.spec is None or opt.spec.startswith("g")):
            asked.meta_source = value
        elif name == "bitexact":
            asked.bitexact = value != "0"
        elif name == "fflags":
            asked.bitexact = _flag_set(value, "bitexact", asked.bitexact)
    return asked


def _encoding(path: str, asked: _Asked) -> _Encoding | NotEstimable:
    """The muxer (``-f``, else the extension, as ffmpeg's av_guess_format) and the PCM codec."""
    fmt = asked.format
    if fmt is None:
        ext = path.rpartition(".")[2].lower() if "." in os.path.basename(path) else ""
        fmt = EXT_FORMATS.get(ext)
        if fmt is None:
            if ext == "pcm":
                return NotEstimable(".pcm without -f: ffmpeg picks its ALP (ADPCM) muxer")
            return NotEstimable(f"output format of {os.path.basename(path)!r} is not PCM or WAV")
    if fmt == "null":
        return NotEstimable("-f null writes no file")
    if fmt != "wav" and fmt not in RAW_FORMATS:
        return NotEstimable(f"format {fmt} is not PCM or WAV")
    codec = asked.codec
    if codec is None:
        codec = "pcm_s16le" if fmt == "wav" else RAW_FORMATS[fmt]
    if codec == "copy":
        return NotEstimable("stream copy: the bytes depend on the input's codec")
    if codec not in PCM_CODECS:
        return NotEstimable(f"codec {codec} is not PCM")
    if fmt == "wav" and codec not in WAV_CODECS:
        return NotEstimable(f"ffmpeg's wav muxer refuses {codec}")
    if asked.sample_fmt is not None and asked.sample_fmt != encoder_sample_fmt(codec):
        return NotEstimable(f"-sample_fmt {asked.sample_fmt} does not suit {codec}: ffmpeg refuses")
    return _Encoding(fmt, codec)


def _mapped_input(inv: Invocation, maps: list[str]) -> int | NotEstimable:
    """The index of the input feeding the output's one audio stream."""
    if not inv.inputs:
        return NotEstimable("no input")
    if not maps:
        if len(inv.inputs) > 1:
            return NotEstimable("several inputs and no -map: ffmpeg picks the stream")
        return 0
    if len(maps) > 1:
        return NotEstimable("several -map options")
    spec = maps[0].rstrip("?")
    head, _, rest = spec.partition(":")
    if not head.isdigit() or rest not in ("", "a", "a:0", "0"):
        return NotEstimable(f"-map {maps[0]} not understood")
    index = int(head)
    if index >= len(inv.inputs):
        return NotEstimable(f"-map {maps[0]}: no such input (ffmpeg refuses)")
    return index


def _input_window(inp: FileArg, asked: _Asked) -> Window | NotEstimable:
    """The window read from the input (its -ss/-to/-t/-sseof/-itsoffset), or why its options
    make the samples unknowable."""
    window = Window()
    for opt in inp.options:
        name, value = opt.name, opt.value or ""
        if name in UNSAFE:
            return NotEstimable(UNSAFE[name])
        if name in ("ss", "to", "t", "sseof", "itsoffset"):
            bad = set_time(window, opt)
            if bad:
                return bad
        elif name == "f" and (value in RAW_FORMATS or value in ("lavfi", "concat", "image2")):
            return NotEstimable(f"input format {value}: ffprobe cannot tell its duration")
        elif name == "ar":
            return NotEstimable("-ar on an input: a raw input, or ffmpeg refuses it")
        elif name == "ac" and asked.channels is None:
            return NotEstimable("-ac on an input: some decoders downmix")
        elif name == "accurate_seek" and value == "0":
            return NotEstimable("-noaccurate_seek cuts at packet boundaries")
    if window.itsoffset is not None and (window.timed() or asked.window.timed()):
        return NotEstimable("-itsoffset with -ss/-to/-t")
    return window


def _shape(asked: _Asked, info: MediaInfo) -> _Shape | NotEstimable:
    """The rate and channels written: as asked, else the input's."""
    rate = asked.rate or info.sample_rate
    channels = asked.channels or info.channels
    if not rate or not channels:
        return NotEstimable("the input has no audio stream")
    maps = asked.maps
    if maps and maps[0].rstrip("?").partition(":")[2] in ("", "a") and info.audio_streams > 1:
        return NotEstimable(f"-map {maps[0]} takes several audio streams")
    return _Shape(rate, channels)


def _wav_header(
    inv: Invocation, asked: _Asked, enc: _Encoding, shape: _Shape, info_of: _Memo
) -> int | NotEstimable:
    """The bytes of the WAV header ffmpeg writes, its tags included (the pad byte not)."""
    tags = _output_tags(inv, asked.meta_source, asked.meta, info_of)
    if isinstance(tags, NotEstimable):
        return tags
    return wav_header_bytes(enc.codec, shape.rate, shape.channels, tags, bitexact=asked.bitexact)


def _whole_bytes(info: MediaInfo, enc: _Encoding, shape: _Shape, header: int) -> int | None:
    """For a cut: what the whole input would take in the same format (a job's working set when
    it cuts the input group by group and keeps every group); None when its length is unknown."""
    whole = written_samples(Window(), Window(), info, shape.rate)
    if isinstance(whole, NotEstimable):
        return None
    data = whole * shape.channels * enc.width
    return data + (header + (data & 1) if header else 0)


def _output_tags(
    inv: Invocation,
    source: str | None,
    edits: list[tuple[str, str]],
    info_of: _Memo,
) -> dict[str, str] | NotEstimable:
    """The output's global metadata: the first input's tags (or -map_metadata's), then edits."""
    tags: dict[str, str] = {}
    if source is None:
        index: int | None = 0
    elif source == "-1":
        index = None
    else:
        head, _, rest = source.partition(":")
        if not head.isdigit() or rest not in ("", "g"):
            return NotEstimable(f"-map_metadata {source} not understood")
        index = int(head)
        if index >= len(inv.inputs):
            return NotEstimable(f"-map_metadata {source}: no such input (ffmpeg refuses)")
    if index is not None:
        info = info_of(index)
        if isinstance(info, NotEstimable):
            return info
        tags = {k.lower(): v for k, v in info.tags.items()}
    for key, text in edits:
        if text:
            tags[key.lower()] = text
        else:
            tags.pop(key.lower(), None)  # -metadata key= deletes the key
    # riff_key needs the RIFF keys' own case back for native keys such as IKEY.
    return {(k.upper() if k.upper() in RIFF_TAGS else k): v for k, v in tags.items()}


# -- reading option values -----------------------------------------------------------------------


def _applies(spec: str | None) -> bool | None:
    """Whether a stream specifier selects an audio-only output's single stream (None: unsure)."""
    if spec is None or spec in ("a", "a:0", "0"):
        return True
    head, _, rest = spec.partition(":")
    if head in ("v", "V", "s", "d", "t"):
        return False
    if spec.isdigit() or (head == "a" and rest.isdigit()):
        return False  # another index than the one stream the output has
    return None


def _int_value(text: str) -> int | None:
    """An integer option value as av_strtod reads the common forms: ``16000``, ``16k``."""
    scale = 1
    if text[-1:] in ("k", "K"):
        text, scale = text[:-1], 1000
    elif text[-1:] == "M":
        text, scale = text[:-1], 1000000
    try:
        value = float(text) * scale
    except ValueError:
        return None
    return int(value) if value == int(value) and value > 0 else None


def _flag_set(value: str, flag: str, current: bool) -> bool:
    """Whether ``flag`` is on after an AVOption flags value such as ``+genpts+bitexact``."""
    tokens: list[tuple[str, str]] = []
    word, sign = "", ""
    for ch in value + "+":
        if ch in "+-":
            if word or sign:
                tokens.append((sign, word))
            word, sign = "", ch
        else:
            word += ch
    for pos, (sign, word) in enumerate(tokens):
        if sign == "" and pos == 0:
            current = word == flag  # an unsigned first value replaces the whole set
        elif word == flag:
            current = sign != "-"
    return current
