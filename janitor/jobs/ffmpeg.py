"""What an ffmpeg command line will write, before it runs (issue 13).

A guarded ffmpeg placed first on ``PATH`` calls :func:`parse` on its arguments, then
:func:`estimate` with a :class:`Probe`, reserves the bytes of each output, and only then runs the
real ffmpeg. This module runs on the path of every alignment group, so it is stdlib only and
imports nothing heavy at load time (``json`` and ``subprocess`` load on a probe cache miss)::

    >>> inv = parse(["-y", "-ss", "1.5", "-to", "31.5", "-i", "talk.wav", "-f", "f32le",
    ...              "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1", "g0.pcm"])
    >>> [o.url for o in inv.outputs], inv.overwrite
    (['g0.pcm'], True)
    >>> est = estimate(inv, lambda path: MediaInfo(3600.0, 16000, 1))
    >>> est[0].path, est[0].bytes                  # 30 s x 16,000 x 4 bytes
    ('g0.pcm', 1920000)

Only raw PCM and WAV outputs are estimated. Anything this module cannot be sure about (a filter,
an unknown option, a pipe, a compressed codec, several inputs without ``-map``) gives
:class:`NotEstimable` with a short reason, and the guard runs ffmpeg unguarded.

ffmpeg 5.1 behaviours measured with the real binary and relied on here:

- A WAV written by ffmpeg is a 44-byte canonical header plus a ``LIST``/``INFO`` chunk holding
  ``ISFT=Lavf59.27.100`` (34 bytes): 78 bytes in all for 16-bit mono or stereo at <= 48 kHz.
  ``-bitexact`` or ``-fflags +bitexact`` drop the encoder tag (44 bytes with no other tag);
  ``-flags +bitexact`` (codec flags) and ``-map_metadata -1`` do not drop it. Input tags that
  map to RIFF INFO keys (title, artist, comment, date ...) are copied from the first input and
  add ``8 + len + 1`` bytes each, padded to even. More than 2 channels, more than 48 kHz or more
  than 16 bits switch to WAVE_FORMAT_EXTENSIBLE (+24 bytes); codecs other than integer PCM
  (float, mu-law, A-law) add a ``fact`` chunk (+12) and, when not extensible, a 2-byte cbSize.
  An odd data size gets one pad byte.
- ``-ss S -to E`` cuts are sample exact: ``round((E - S) x rate)`` samples, whether the
  options are on the input or the output side; ``-t`` wins over ``-to``; ``-to <= -ss`` makes
  ffmpeg refuse. Beyond the input's end the output is simply shorter (or empty).
- AAC inputs (m4a/mp4) decode to whole 1024-sample frames: up to 1023 samples more than the
  duration ffprobe reports (which already has the priming removed), so one frame is added.
  MP3, Opus and WMA decode to at most the ffprobe duration; FLAC, Vorbis and WAV to exactly it.
- ``x.pcm`` without ``-f`` is *not* raw PCM: ffmpeg picks its ALP (IMA ADPCM) muxer for it.
- Options after the last output file are ignored by ffmpeg 5.1 (with a warning); a failing
  ffmpeg often leaves an empty output file behind (it opens outputs before encoding).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs several ms to import; mypy treats this name as True
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import BinaryIO

__all__ = [
    "LAVF_ENCODER_CHUNK",
    "PCM_CODECS",
    "RAW_FORMATS",
    "WAV_CODECS",
    "FileArg",
    "Invocation",
    "MediaInfo",
    "NotEstimable",
    "Option",
    "OutputEstimate",
    "Probe",
    "container_duration",
    "estimate",
    "estimate_command",
    "input_files",
    "local_path",
    "parse",
    "parse_time",
    "parse_time_us",
    "wav_header_bytes",
]


# -- records ------------------------------------------------------------------------------------
# Plain slotted classes, not dataclasses: `dataclasses` imports `inspect` (~10 ms).


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
    """

    __slots__ = (
        "audio_streams",
        "channels",
        "codec",
        "duration_s",
        "profile",
        "sample_rate",
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
    ) -> None:
        self.duration_s = duration_s
        self.sample_rate = sample_rate
        self.channels = channels
        self.codec = codec
        self.profile = profile
        self.audio_streams = audio_streams
        self.tags: dict[str, str] = dict(tags) if tags else {}


class OutputEstimate(_Record):
    """One output file and the bytes ffmpeg will write to it (header included).

    ``whole_bytes``: for a cut (a window of its input: ``-ss``/``-to``/``-t``), what the whole
    input would take in the same format, header included: a job's working set when it cuts
    the input group by group and keeps every group; None for an output of the whole input, or
    an input whose duration is unknown.
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


class NotEstimable(_Record):
    """We cannot be sure what this command writes; ``reason`` says why in a few words."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


# -- what ffmpeg writes -------------------------------------------------------------------------

#: Bytes per sample of the PCM codecs whose output size follows from samples alone.
PCM_CODECS: dict[str, int] = {
    "pcm_s8": 1, "pcm_u8": 1, "pcm_mulaw": 1, "pcm_alaw": 1,
    "pcm_s16le": 2, "pcm_s16be": 2, "pcm_u16le": 2, "pcm_u16be": 2,
    "pcm_s24le": 3, "pcm_s24be": 3, "pcm_u24le": 3, "pcm_u24be": 3,
    "pcm_s32le": 4, "pcm_s32be": 4, "pcm_u32le": 4, "pcm_u32be": 4,
    "pcm_f32le": 4, "pcm_f32be": 4,
    "pcm_s64le": 8, "pcm_s64be": 8, "pcm_f64le": 8, "pcm_f64be": 8,
}  # fmt: skip

#: Raw PCM muxers (``-f NAME``) and the codec each uses when no ``-acodec`` is given.
RAW_FORMATS: dict[str, str] = {
    name: f"pcm_{name}"
    for name in (
        "s8", "u8", "s16le", "s16be", "u16le", "u16be", "s24le", "s24be", "u24le", "u24be",
        "s32le", "s32be", "u32le", "u32be", "f32le", "f32be", "f64le", "f64be",
    )
}  # fmt: skip
RAW_FORMATS.update(mulaw="pcm_mulaw", alaw="pcm_alaw")

#: PCM codecs ffmpeg's wav muxer accepts, with their WAVE format tag (1 = integer PCM).
WAV_CODECS: dict[str, int] = {
    "pcm_u8": 1, "pcm_s16le": 1, "pcm_s24le": 1, "pcm_s32le": 1, "pcm_s64le": 1,
    "pcm_f32le": 3, "pcm_f64le": 3, "pcm_alaw": 6, "pcm_mulaw": 7,
}  # fmt: skip

#: The ``ISFT`` chunk ffmpeg writes unless bitexact: "LavfNN.NN.NNN" + NUL, padded to even.
LAVF_ENCODER_CHUNK = 8 + 14


def _encoder_sample_fmt(codec: str) -> str:
    """The one sample format ffmpeg's PCM encoder takes (another -sample_fmt: ffmpeg refuses)."""
    if codec in ("pcm_mulaw", "pcm_alaw"):
        return "s16"
    if codec.startswith("pcm_f"):
        return "flt" if codec[5:7] == "32" else "dbl"
    bits = 8 * PCM_CODECS[codec]
    return {8: "u8", 16: "s16", 24: "s32", 32: "s32", 64: "s64"}[bits]


# Output extensions ffmpeg maps to a PCM muxer when -f is absent (av_guess_format, 5.1).
_EXT_FORMATS = {
    "wav": "wav", "sw": "s16le", "sb": "s8", "ub": "u8", "uw": "u16le", "ul": "mulaw", "al": "alaw",
}  # fmt: skip
# Generic tag names the RIFF muxer renames (ff_riff_info_conv), and the INFO keys it writes
# (riff_tags): the union over ffmpeg 4.4 to 7.1, so a header is never under-counted.
_RIFF_CONV = {
    "artist": "IART", "comment": "ICMT", "copyright": "ICOP", "date": "ICRD", "genre": "IGNR",
    "language": "ILNG", "title": "INAM", "album": "IPRD", "track": "IPRT", "encoder": "ISFT",
    "timecode": "ISMP", "encoded_by": "ITCH",
}  # fmt: skip
_RIFF_KEYS = (
    "IARL IART IAS1 IAS2 IAS3 IAS4 IAS5 IAS6 IAS7 IAS8 IAS9 ICMS ICMT ICOP ICRD ICRP IDIM IDPI "
    "IENG IGNR IKEY ILGT ILNG IMED INAM IPLT IPRD IPRT ITRK ISBJ ISFT ISHP ISMP ISRC ISRF ITCH"
)
_RIFF_TAGS = frozenset(_RIFF_KEYS.split())
# Per decoded-frame padding at the end of the stream, in samples: AAC decodes whole frames.
_END_PAD = {"aac": 1024}


def riff_key(tag: str) -> str | None:
    """The RIFF INFO key a container tag becomes in a WAV, or None if the muxer drops it."""
    key = _RIFF_CONV.get(tag.lower(), tag)
    return key if key in _RIFF_TAGS else None


def wav_header_bytes(
    codec: str,
    sample_rate: int,
    channels: int,
    tags: Mapping[str, str] | None = None,
    *,
    bitexact: bool = False,
) -> int:
    """Bytes ffmpeg's wav muxer writes besides the samples (the data pad byte not included).

    ``tags`` are the output's global metadata (generic names such as ``title`` or RIFF keys);
    the encoder tag is added unless ``bitexact``.

    >>> wav_header_bytes("pcm_s16le", 16000, 1)       # the media cache's WAV
    78
    >>> wav_header_bytes("pcm_s16le", 16000, 1, bitexact=True)
    44
    >>> wav_header_bytes("pcm_f32le", 16000, 1)       # extensible + fact chunk
    114
    """
    tag = WAV_CODECS[codec]
    bits = 8 * PCM_CODECS[codec]
    # ff_put_wav_header: WAVE_FORMAT_EXTENSIBLE beyond 2 channels, 48 kHz or 16 bits.
    extensible = channels > 2 or sample_rate > 48000 or bits > 16
    fmt = 40 if extensible else (18 if tag != 1 else 16)
    fact = 12 if tag != 1 else 0  # wavenc writes a fact chunk for every non-PCM format tag
    info = _info_chunk_bytes(tags or {}, bitexact=bitexact)
    return 12 + 8 + fmt + fact + info + 8


def _info_chunk_bytes(tags: Mapping[str, str], *, bitexact: bool) -> int:
    """Bytes of the LIST/INFO chunk: 12 plus ``8 + len + 1`` per written tag, each even."""
    sizes: dict[str, int] = {}
    for k, v in tags.items():
        key = riff_key(k)
        if key is None or key == "ISFT":  # the muxer replaces the encoder tag with its own
            continue
        n = len(v.encode("utf-8", "surrogateescape"))
        if n:
            # Two source tags can land on one key (title and INAM): keep the larger.
            sizes[key] = max(sizes.get(key, 0), 8 + n + 1 + ((n + 1) & 1))
    total = sum(sizes.values()) + (0 if bitexact else LAVF_ENCODER_CHUNK)
    return 12 + total if total else 0


# -- time syntax ---------------------------------------------------------------------------------

_SPACE = " \t\n\v\f\r"
_DIGITS = "0123456789"


def _num(s: str, i: int, hi: int, width: int) -> tuple[int, int] | None:
    """ffmpeg's date_get_num: up to ``width`` digits at ``i``, value <= hi; (value, end)."""
    j = i
    while j < len(s) and j - i < width and s[j] in _DIGITS:
        j += 1
    if j == i:
        return None
    value = int(s[i:j])
    return (value, j) if value <= hi else None


def _hms(s: str) -> tuple[int, int] | None:
    """``%J:%M:%S`` then ``%M:%S`` as av_small_strptime reads them: (seconds, end) or None."""
    h = _num(s, 0, 2**31 - 1, 4)
    if h and h[1] < len(s) and s[h[1]] == ":":
        m = _num(s, h[1] + 1, 59, 2)
        if m and m[1] < len(s) and s[m[1]] == ":":
            sec = _num(s, m[1] + 1, 59, 2)
            if sec:
                return h[0] * 3600 + m[0] * 60 + sec[0], sec[1]
    m = _num(s, 0, 59, 2)
    if m and m[1] < len(s) and s[m[1]] == ":":
        sec = _num(s, m[1] + 1, 59, 2)
        if sec:
            return m[0] * 60 + sec[0], sec[1]
    return None


def parse_time_us(text: str) -> int:
    """Microseconds from an ffmpeg duration, exactly as av_parse_time(duration=1) reads it.

    Accepts ``[-][HH:]MM:SS[.m...]`` and ``[-]S+[.m...][s|ms|us]``; raises ValueError for what
    ffmpeg would refuse (``.5``, ``90:00``, ``1:60``, ``5 s``).

    >>> parse_time_us("01:02:03.5"), parse_time_us("1:30"), parse_time_us("1500ms")
    (3723500000, 90000000, 1500000)
    """
    s = text
    negative = s.startswith("-")
    if negative:
        s = s[1:]
    hms = _hms(s)
    if hms is not None:
        t, q = hms
    else:
        # strtoll: leading white space, an optional sign, decimal digits.
        j = 0
        while j < len(s) and s[j] in _SPACE:
            j += 1
        k = j + 1 if j < len(s) and s[j] in "+-" else j
        q = k
        while q < len(s) and s[q] in _DIGITS:
            q += 1
        if q == k:
            raise ValueError(f"{text!r} is not an ffmpeg time")
        t = int(s[j:q])
    micro = 0
    if q < len(s) and s[q] == ".":
        q += 1
        scale = 100000
        while scale >= 1 and q < len(s) and s[q] in _DIGITS:
            micro += scale * int(s[q])
            scale //= 10
            q += 1
        while q < len(s) and s[q] in _DIGITS:  # digits past microseconds are ignored
            q += 1
    unit = 1000000
    if s.startswith("ms", q):
        unit, micro, q = 1000, micro // 1000, q + 2
    elif s.startswith("us", q):
        unit, micro, q = 1, 0, q + 2
    elif s.startswith("s", q):
        q += 1
    if q != len(s):
        raise ValueError(f"{text!r} is not an ffmpeg time")
    if t < 0 or t > (2**63 - 1 - micro) // unit:
        raise ValueError(f"{text!r} is out of ffmpeg's time range")
    total = t * unit + micro
    return -total if negative else total


def parse_time(text: str) -> float:
    """Seconds from an ffmpeg duration (see :func:`parse_time_us`): ``"00:01:30.5"`` -> 90.5."""
    return parse_time_us(text) / 1e6


# -- parsing the command line -------------------------------------------------------------------

# Option kinds, as in ffmpeg_opt.c: takes a value, where it may appear, a boolean (-noX form).
_ARG, _IN, _OUT, _GLOBAL, _EXIT, _BOOL = 1, 2, 4, 8, 16, 32
_IO = _IN | _OUT


def _table() -> dict[str, int]:
    t: dict[str, int] = {}

    def add(kind: int, names: str) -> None:
        for n in names.split():
            t[n] = kind

    add(_EXIT, "L h ? help -help version buildconf formats muxers demuxers devices codecs")
    add(_EXIT, "decoders encoders bsfs protocols filters pix_fmts layouts sample_fmts")
    add(_EXIT, "dispositions colors hwaccels")
    add(_EXIT | _ARG, "sources sinks")
    add(_GLOBAL | _BOOL, "y n stdin hide_banner stats report benchmark benchmark_all xerror")
    add(_GLOBAL | _BOOL, "ignore_unknown copy_unknown recast_media dump hex debug_ts psnr qphist")
    add(_GLOBAL | _BOOL, "copyts start_at_zero auto_conversion_filters")
    add(_GLOBAL | _ARG, "loglevel v progress stats_period filter_threads max_error_rate")
    add(_GLOBAL | _ARG, "abort_on sdp_file init_hw_device filter_hw_device cpuflags cpucount")
    add(_GLOBAL | _ARG, "max_alloc timelimit vsync async copytb vol frame_drop_threshold")
    add(_GLOBAL | _ARG, "adrift_threshold dts_delta_threshold dts_error_threshold vstats_file")
    add(_GLOBAL | _ARG, "filter_complex lavfi filter_complex_script filter_complex_threads")
    add(_IO | _ARG, "f c codec acodec vcodec scodec dcodec ss to t ar ac sample_fmt")
    add(_IO | _ARG, "channel_layout ch_layout tag r s pix_fmt top vtag")
    add(_IO | _BOOL, "vn an sn dn bitexact")
    add(_IN | _ARG, "sseof itsoffset itsscale readrate stream_loop thread_queue_size discard")
    add(_IN | _ARG, "guess_layout_max seek_timestamp reinit_filter dump_attachment hwaccel")
    add(_IN | _ARG, "hwaccel_device hwaccel_output_format canvas_size")
    add(_IN | _BOOL, "re accurate_seek find_stream_info fix_sub_duration")
    add(_OUT | _ARG, "map map_metadata map_chapters metadata fs frames aframes vframes dframes")
    add(_OUT | _ARG, "af filter filter_script apad map_channel attach target program")
    add(_OUT | _ARG, "b ab aq q qscale profile disposition timestamp muxdelay muxpreload")
    add(_OUT | _ARG, "max_muxing_queue_size muxing_queue_data_threshold atag stag vf")
    add(_OUT | _ARG, "time_base enc_time_base bits_per_raw_sample copypriorss")
    add(_OUT | _BOOL, "shortest copyinkf")
    # AVOptions (codec/format private options) that cannot change the audio samples or the
    # WAV header; ffmpeg accepts them on either side. Any other AVOption is unknown to us.
    add(_IO | _ARG, "threads fflags flags probesize analyzeduration strict err_detect")
    return t


_OPTIONS = _table()

# Options after which we cannot know the bytes, with the reason the guard reports.
_UNSAFE = {
    "filter_complex": "a complex filtergraph can change what is written",
    "lavfi": "a complex filtergraph can change what is written",
    "filter_complex_script": "a complex filtergraph can change what is written",
    "copyts": "-copyts changes how -ss/-to are read",
    "start_at_zero": "-start_at_zero changes how -ss/-to are read",
    "async": "-async can stretch or pad the audio",
    "af": "audio filters can change the duration",
    "filter": "filters can change the duration",
    "filter_script": "filters can change the duration",
    "apad": "-apad pads the audio",
    "map_channel": "-map_channel changes the channels",
    "channel_layout": "-channel_layout sets the channels",
    "ch_layout": "-ch_layout sets the channels",
    "frames": "-frames counts codec frames",
    "aframes": "-aframes counts codec frames",
    "fs": "-fs cuts the file at a size",
    "stream_loop": "-stream_loop repeats the input",
    "itsscale": "-itsscale rescales the input's time",
    "seek_timestamp": "-seek_timestamp changes how -ss is read",
    "tag": "-tag changes the stored codec tag",
    "atag": "-atag changes the stored codec tag",
    "attach": "-attach adds a stream",
    "target": "-target sets codecs and rates",
    "program": "-program adds programs",
    "discard": "-discard can drop the audio",
    "an": "-an: the output has no audio",
}


def parse(argv: Sequence[str]) -> Invocation:
    """Split an ffmpeg argument list (without argv[0]) into globals, inputs and outputs.

    Mirrors ffmpeg's split_commandline: per-file options apply to the next ``-i`` input or
    output file named after them; global options apply wherever they are; an option taking a
    value consumes the next argument whatever it looks like; ``--`` makes the next argument a
    file name. The first thing that makes the whole command unestimable is kept in ``problem``;
    parsing stops at an unknown option (we cannot tell whether it takes a value).
    """
    inv = Invocation(argv)
    pending: list[Option] = []
    dashdash = -2
    i, n = 0, len(argv)
    while i < n:
        arg = argv[i]
        i += 1
        if arg == "--":
            dashdash = i
            continue
        if not arg.startswith("-") or arg == "-" or dashdash == i - 1:
            _check_side(inv, pending, _OUT, arg)
            inv.outputs.append(FileArg(arg, pending))
            pending = []
            continue
        body = arg[1:]
        if body == "i":
            if i >= n:
                inv.problem = inv.problem or "-i needs an input file"
                break
            _check_side(inv, pending, _IN, argv[i])
            inv.inputs.append(FileArg(argv[i], pending))
            pending = []
            i += 1
            continue
        name, colon, spec = body.partition(":")
        kind = _OPTIONS.get(name)
        value: str | None = None
        if kind is None and name.startswith("no") and (_OPTIONS.get(name[2:], 0) & _BOOL):
            name, kind, value = name[2:], _OPTIONS[name[2:]], "0"
        if kind is None:
            inv.problem = inv.problem or f"option {arg} is not known to the estimator"
            break
        if kind & _EXIT:
            inv.problem = inv.problem or f"{arg} prints information and writes no file"
            break
        if kind & _ARG:
            if i >= n:
                inv.problem = inv.problem or f"{arg} needs a value"
                break
            value = argv[i]
            i += 1
        elif value is None:
            value = "1"
        opt = Option(name, spec if colon else None, value)
        if kind & _GLOBAL:
            inv.globals.append(opt)
            if name in _UNSAFE:
                inv.problem = inv.problem or _UNSAFE[name]
        else:
            pending.append(opt)
    inv.trailing = pending
    _finish(inv)
    return inv


def _check_side(inv: Invocation, options: Iterable[Option], side: int, url: str) -> None:
    """ffmpeg refuses an output-only option before ``-i`` and an input-only one on an output."""
    for opt in options:
        if not _OPTIONS[opt.name] & side:
            where = "an input" if side == _IN else "an output"
            inv.problem = inv.problem or f"-{opt.name} cannot apply to {where} ({url})"


def _finish(inv: Invocation) -> None:
    yes = _last_bool(inv.globals, "y")
    no = _last_bool(inv.globals, "n")
    if yes and no:
        inv.problem = inv.problem or "both -y and -n: ffmpeg refuses"
    inv.overwrite = True if yes else (False if no else None)
    if inv.problem:
        return
    if inv.trailing:
        inv.problem = f"options after the last output ({inv.trailing[0].flag}) are ignored"
    elif not inv.outputs:
        inv.problem = "no output file" if inv.inputs else "no arguments"


def _last_bool(options: Iterable[Option], name: str) -> bool:
    value = False
    for opt in options:
        if opt.name == name:
            value = opt.value != "0"
    return value


# -- estimating ------------------------------------------------------------------------------------


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


class _Window:
    """The -ss/-to/-t/-sseof/-itsoffset options of one file, as microseconds."""

    __slots__ = ("itsoffset", "ss", "sseof", "t", "to")

    def __init__(self) -> None:
        self.ss: int | None = None
        self.to: int | None = None
        self.t: int | None = None
        self.sseof: int | None = None
        self.itsoffset: int | None = None

    def timed(self) -> bool:
        return any(v is not None for v in (self.ss, self.to, self.t, self.sseof))

    def end(self, start: int) -> int | NotEstimable | None:
        """Where reading stops (ffmpeg: -t wins over -to; -to must be after -ss)."""
        if self.t is not None:
            return start + self.t
        if self.to is not None:
            if self.to <= start:
                return NotEstimable("-to is not after -ss: ffmpeg refuses")
            return self.to
        return None


def _set_time(window: _Window, opt: Option) -> NotEstimable | None:
    assert opt.value is not None
    try:
        us = parse_time_us(opt.value)
    except ValueError:
        return NotEstimable(f"ffmpeg refuses {opt.flag} {opt.value!r}")
    if us < 0 and opt.name not in ("sseof", "itsoffset"):
        return NotEstimable(f"negative {opt.flag}")
    if opt.name == "sseof" and us > 0:
        return NotEstimable("-sseof must not be positive")
    setattr(window, opt.name, us)
    return None


def _split_url(url: str) -> str | NotEstimable:
    """The local path ffmpeg opens for a URL, or why it is not a local file."""
    if url == "-" or url.startswith("pipe:"):
        return NotEstimable("a pipe, not a file")
    # url_find_protocol: a scheme of [A-Za-z0-9+.-] before ':' names a protocol.
    head, colon, rest = url.partition(":")
    if colon and head and all(c.isalnum() or c in "+-." for c in head) and head.isascii():
        if head == "file":
            return rest
        return NotEstimable(f"protocol {head}: is not a local file")
    return url


def local_path(url: str) -> str | None:
    """The file an input or output URL names (``file:`` stripped), None for pipes and other
    protocols."""
    path = _split_url(url)
    return None if isinstance(path, NotEstimable) else path


def input_files(inv: Invocation) -> list[str]:
    """The local files ``inv`` reads (``-i`` arguments that are not pipes or protocols)."""
    paths = []
    for arg in inv.inputs:
        path = _split_url(arg.url)
        if not isinstance(path, NotEstimable):
            paths.append(path)
    return paths


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
            path = _split_url(self.inv.inputs[index].url)
            if isinstance(path, NotEstimable):
                self.seen[index] = NotEstimable(f"input {path.reason}")
            else:
                self.seen[index] = self.duration_of(path)
        return self.seen[index]


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


_MP4_EXTS = (".mp4", ".m4a", ".mov", ".m4v", ".3gp")


def container_duration(path: str) -> float | None:
    """The duration a WAV or MP4-family file's header states, read in microseconds without
    ffprobe (which costs ~50 ms of CPU per file); None when the header does not say plainly
    (streamed WAV, fragmented MP4, another container): ask ffprobe then."""
    ext = os.path.splitext(path)[1].lower()
    try:
        with open(path, "rb") as f:
            if ext == ".wav":
                return _wav_duration(f)
            if ext in _MP4_EXTS:
                return _mp4_duration(f, os.fstat(f.fileno()).st_size)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _wav_duration(f: BinaryIO) -> float | None:
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    byte_rate = 0
    while True:
        chunk = f.read(8)
        if len(chunk) < 8:
            return None
        size = int.from_bytes(chunk[4:8], "little")
        if chunk[:4] == b"fmt ":
            fmt = f.read(min(size, 64))  # a corrupt size must not make us read the file
            f.seek(size + (size & 1) - len(fmt), 1)
            byte_rate = int.from_bytes(fmt[8:12], "little")
        elif chunk[:4] == b"data":
            if not byte_rate or size in (0, 0xFFFFFFFF):
                return None
            return size / byte_rate
        else:
            f.seek(size + (size & 1), 1)


def _mp4_duration(f: BinaryIO, end: int) -> float | None:
    """mvhd's duration / timescale, found by walking the boxes down to moov/mvhd."""
    pos, limit = 0, end
    for wanted in (b"moov", b"mvhd"):
        while True:
            if pos + 8 > limit:
                return None
            f.seek(pos)
            head = f.read(16)
            size, kind, skip = int.from_bytes(head[:4], "big"), head[4:8], 8
            if size == 1:
                size, skip = int.from_bytes(head[8:16], "big"), 16
            elif size == 0:
                size = limit - pos
            if size < skip:
                return None
            if kind == wanted:
                limit, pos = pos + size, pos + skip
                break
            pos += size
    f.seek(pos)
    body = f.read(32)
    version = body[0]
    if version == 1:
        scale, duration = int.from_bytes(body[20:24], "big"), int.from_bytes(body[24:32], "big")
    else:
        scale, duration = int.from_bytes(body[12:16], "big"), int.from_bytes(body[16:20], "big")
    if not scale or not duration or duration in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    return duration / scale


def estimate_command(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    probe: Probe | None = None,
) -> list[OutputEstimate] | NotEstimable:
    """The files an ffmpeg argument list (without ``ffmpeg`` itself) will write and their bytes,
    paths made absolute against ``cwd``; or why that cannot be known. What the guard, the API's
    ``POST /v1/estimate`` and ``janitor estimate`` share.

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
        local = _split_url(inp.url)
        if not isinstance(local, NotEstimable) and not os.path.isabs(local):
            inp.url = os.path.join(base, local)
    est = estimate(inv, (probe or Probe(None)).duration_of)
    if isinstance(est, NotEstimable):
        return est
    for o in est:
        o.path = os.path.normpath(os.path.join(base, o.path))
    return est


def _estimate_output(
    inv: Invocation, out: FileArg, info_of: _Memo
) -> OutputEstimate | NotEstimable:
    path = _split_url(out.url)
    if isinstance(path, NotEstimable):
        return path
    fmt: str | None = None
    codec: str | None = None
    sample_fmt: str | None = None
    rate: int | None = None
    channels: int | None = None
    window = _Window()
    maps: list[str] = []
    meta: list[tuple[str, str]] = []
    meta_source: str | None = None
    bitexact = False
    for opt in out.options:
        name, value = opt.name, opt.value or ""
        if name in _UNSAFE:
            return NotEstimable(_UNSAFE[name])
        if name in ("c", "codec", "ar", "ac", "sample_fmt"):
            applies = _applies(opt.spec)
            if applies is None:
                return NotEstimable(f"stream specifier in {opt.flag} not understood")
            if not applies:
                continue
        if name == "f":
            fmt = value
        elif name in ("c", "codec", "acodec"):
            codec = value
        elif name in ("ar", "ac"):
            number = _int_value(value)
            if number is None:
                return NotEstimable(f"cannot read {opt.flag} {value!r}")
            if name == "ar":
                rate = number
            else:
                channels = number
        elif name == "sample_fmt":
            sample_fmt = value
        elif name in ("ss", "to", "t"):
            bad = _set_time(window, opt)
            if bad:
                return bad
        elif name == "map":
            maps.append(value)
        elif name == "metadata" and (opt.spec is None or opt.spec.startswith("g")):
            key, _, text = value.partition("=")
            meta.append((key, text))
        elif name == "map_metadata" and (opt.spec is None or opt.spec.startswith("g")):
            meta_source = value
        elif name == "bitexact":
            bitexact = value != "0"
        elif name == "fflags":
            bitexact = _flag_set(value, "bitexact", bitexact)

    # The muxer: -f, else the extension (ffmpeg's av_guess_format).
    if fmt is None:
        ext = path.rpartition(".")[2].lower() if "." in os.path.basename(path) else ""
        fmt = _EXT_FORMATS.get(ext)
        if fmt is None:
            if ext == "pcm":
                return NotEstimable(".pcm without -f: ffmpeg picks its ALP (ADPCM) muxer")
            return NotEstimable(f"output format of {os.path.basename(path)!r} is not PCM or WAV")
    if fmt == "null":
        return NotEstimable("-f null writes no file")
    if fmt != "wav" and fmt not in RAW_FORMATS:
        return NotEstimable(f"format {fmt} is not PCM or WAV")
    if codec is None:
        codec = "pcm_s16le" if fmt == "wav" else RAW_FORMATS[fmt]
    if codec == "copy":
        return NotEstimable("stream copy: the bytes depend on the input's codec")
    if codec not in PCM_CODECS:
        return NotEstimable(f"codec {codec} is not PCM")
    if fmt == "wav" and codec not in WAV_CODECS:
        return NotEstimable(f"ffmpeg's wav muxer refuses {codec}")
    if sample_fmt is not None and sample_fmt != _encoder_sample_fmt(codec):
        return NotEstimable(f"-sample_fmt {sample_fmt} does not suit {codec}: ffmpeg refuses")

    # The input feeding the output's one audio stream.
    index = _mapped_input(inv, maps)
    if isinstance(index, NotEstimable):
        return index
    inp = inv.inputs[index]
    in_window = _Window()
    for opt in inp.options:
        name, value = opt.name, opt.value or ""
        if name in _UNSAFE:
            return NotEstimable(_UNSAFE[name])
        if name in ("ss", "to", "t", "sseof", "itsoffset"):
            bad = _set_time(in_window, opt)
            if bad:
                return bad
        elif name == "f" and (value in RAW_FORMATS or value in ("lavfi", "concat", "image2")):
            return NotEstimable(f"input format {value}: ffprobe cannot tell its duration")
        elif name == "ar":
            return NotEstimable("-ar on an input: a raw input, or ffmpeg refuses it")
        elif name == "ac" and channels is None:
            return NotEstimable("-ac on an input: some decoders downmix")
        elif name == "accurate_seek" and value == "0":
            return NotEstimable("-noaccurate_seek cuts at packet boundaries")
    if in_window.itsoffset is not None and (in_window.timed() or window.timed()):
        return NotEstimable("-itsoffset with -ss/-to/-t")

    info = info_of(index)
    if isinstance(info, NotEstimable):
        return info
    rate = rate or info.sample_rate
    channels = channels or info.channels
    if not rate or not channels:
        return NotEstimable("the input has no audio stream")
    if maps and maps[0].rstrip("?").partition(":")[2] in ("", "a") and info.audio_streams > 1:
        return NotEstimable(f"-map {maps[0]} takes several audio streams")

    duration = _written_us(in_window, window, info)
    if isinstance(duration, NotEstimable):
        return duration
    # Sample counts round to nearest in ffmpeg; rounding up errs on the side of reserving.
    frames = -(-duration * rate // 1000000)
    data = frames * channels * PCM_CODECS[codec]
    header = 0
    if fmt == "wav":
        tags = _output_tags(inv, meta_source, meta, info_of)
        if isinstance(tags, NotEstimable):
            return tags
        header = wav_header_bytes(codec, rate, channels, tags, bitexact=bitexact) + (data & 1)
    whole_bytes = None
    if in_window.timed() or window.timed():
        whole = _written_us(_Window(), _Window(), info)
        if not isinstance(whole, NotEstimable):
            whole_data = -(-whole * rate // 1000000) * channels * PCM_CODECS[codec]
            whole_bytes = whole_data + (header - (data & 1) + (whole_data & 1) if header else 0)
    return OutputEstimate(
        path,
        data + header,
        format=fmt,
        codec=codec,
        sample_rate=rate,
        channels=channels,
        duration_s=duration / 1e6,
        header_bytes=header,
        input_index=index,
        whole_bytes=whole_bytes,
    )


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


def _mapped_input(inv: Invocation, maps: list[str]) -> int | NotEstimable:
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


def _written_us(inp: _Window, out: _Window, info: MediaInfo) -> int | NotEstimable:
    """Microseconds of audio written: the input's read window, then the output's window."""
    raw = None if info.duration_s is None else round(info.duration_s * 1e6)
    # Decoders that emit whole frames write a little past the probed duration.
    pad = _END_PAD.get(info.codec, 0) * (2 if info.profile.startswith("HE") else 1)
    known = None if raw is None else raw + (-(-pad * 1000000 // info.sample_rate) if pad else 0)
    start = inp.ss
    if start is None and inp.sseof is not None:
        if raw is None:
            return NotEstimable("-sseof on an input of unknown duration")
        start = max(0, raw + inp.sseof)
    start = start or 0
    end = inp.end(start)
    if isinstance(end, NotEstimable):
        return end
    if known is not None:
        end = known if end is None else min(end, known)
    if end is None:
        return NotEstimable("the input's duration is unknown")
    length = max(0, end - start)
    # Without -copyts the output's clock starts at 0 where the input's reading starts.
    out_start = out.ss or 0
    out_end = out.end(out_start)
    if isinstance(out_end, NotEstimable):
        return out_end
    stop = length if out_end is None else min(out_end, length)
    return max(0, stop - out_start)


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
    return {(k.upper() if k.upper() in _RIFF_TAGS else k): v for k, v in tags.items()}


# -- probing inputs, with a cache shared across processes -----------------------------------------

_CACHE_MAGIC = "janitor-probe 1"
_PROBE_ENTRIES = "format=duration:format_tags:stream=codec_name,profile,sample_rate,channels"


_SPACE_ESC = "\\x20"


def _escape(text: str) -> str:
    return text.encode("unicode_escape").decode("ascii")


def _unescape(text: str) -> str:
    return text.encode("ascii").decode("unicode_escape")


class Probe:
    """``duration_of(path)`` for :func:`estimate`: ffprobe, remembered in a small file cache.

    One tiny file per input version, named by ``(st_dev, st_ino, st_size, st_mtime_ns)`` and
    written atomically (tmp + rename), so the hundreds of group cuts of one recording probe it
    once, across processes. A changed file has a new key, so a stale entry is never read; a
    corrupt one is ignored and rewritten. Beyond ``max_entries`` files the oldest are removed
    (on a miss only). ``cache_dir=None`` keeps results in this process only.

    ffprobe is looked for next to ``ffmpeg`` (the real one the guard will run), then on PATH.
    """

    def __init__(
        self,
        cache_dir: str | os.PathLike[str] | None,
        *,
        ffmpeg: str | None = None,
        ffprobe: str | None = None,
        timeout_s: float = 60.0,
        max_entries: int = 4096,
    ) -> None:
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        self.timeout_s = timeout_s
        self.max_entries = max_entries
        self._ffmpeg = ffmpeg
        self._ffprobe = ffprobe
        self._resolved = False
        self._memo: dict[tuple[int, int, int, int], MediaInfo] = {}
        #: How many times this object ran ffprobe (a cache miss each).
        self.probes_run = 0

    @property
    def ffprobe(self) -> str | None:
        """The ffprobe binary used: given, next to ffmpeg, or on PATH (None if none)."""
        if not self._resolved:
            self._ffprobe = self._ffprobe or _find_ffprobe(self._ffmpeg)
            self._resolved = True
        return self._ffprobe

    def __call__(self, path: str) -> MediaInfo | NotEstimable:
        return self.duration_of(path)

    def duration_of(self, path: str) -> MediaInfo | NotEstimable:
        """Duration, sample rate, channels and tags of ``path``; NotEstimable if unreadable."""
        try:
            st = os.stat(path)
        except OSError as exc:
            return NotEstimable(f"cannot read input {path}: {exc.strerror}")
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        hit = self._memo.get(key) or self._read(key)
        if hit is not None:
            self._memo[key] = hit
            return hit
        info = self._run_ffprobe(path)
        if isinstance(info, NotEstimable):
            return info
        self._memo[key] = info
        try:
            after = os.stat(path)
        except OSError:
            return info
        if (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns) == key:
            self._write(key, info)  # not if the file changed while ffprobe read it
        return info

    def cached(self, path: str) -> MediaInfo | None:
        """The cached answer for ``path`` as it is now, without running ffprobe."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return self._read((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))

    def entry_path(self, key: tuple[int, int, int, int]) -> str | None:
        """The cache file for a stat key (None without a cache folder)."""
        if self.cache_dir is None:
            return None
        return os.path.join(self.cache_dir, "-".join(f"{k:x}" for k in key) + ".probe")

    def _read(self, key: tuple[int, int, int, int]) -> MediaInfo | None:
        name = self.entry_path(key)
        if name is None:
            return None
        try:
            with open(name, encoding="ascii") as f:
                text = f.read(65536)
        except (OSError, ValueError):
            return None
        try:
            return _decode_entry(text, key)
        except (ValueError, IndexError, KeyError, UnicodeError):
            return None  # corrupt: ignored here, rewritten after the next probe

    def _write(self, key: tuple[int, int, int, int], info: MediaInfo) -> None:
        name = self.entry_path(key)
        if name is None or self.cache_dir is None:
            return
        tmp = os.path.join(self.cache_dir, f".{os.getpid()}-{os.urandom(4).hex()}.tmp")
        try:
            os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, _encode_entry(key, info).encode("ascii"))
            finally:
                os.close(fd)
            os.replace(tmp, name)  # readers see the old file or the whole new one
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
        self._prune()

    def _prune(self) -> None:
        """Keep the folder under ``max_entries`` files: remove the least recently written."""
        assert self.cache_dir is not None
        try:
            with os.scandir(self.cache_dir) as it:
                entries = [e for e in it if e.name.endswith(".probe")]
            if len(entries) <= self.max_entries:
                return
            entries.sort(key=lambda e: e.stat().st_mtime_ns)
            for entry in entries[: len(entries) - self.max_entries * 3 // 4]:
                os.unlink(entry.path)
        except OSError:
            pass

    def _run_ffprobe(self, path: str) -> MediaInfo | NotEstimable:
        ffprobe = self.ffprobe
        if ffprobe is None:
            return NotEstimable("ffprobe not found (next to ffmpeg or on PATH)")
        import json
        import subprocess

        argv = [ffprobe, "-v", "error", "-show_entries", _PROBE_ENTRIES, "-select_streams", "a"]
        # file: keeps a name with a colon or a leading dash from being read as a protocol/option.
        argv += ["-of", "json", "file:" + path]
        self.probes_run += 1
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                timeout=self.timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return NotEstimable(f"ffprobe failed: {exc}")
        stderr = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        if proc.returncode != 0:
            return NotEstimable(f"ffprobe failed: {stderr[-1] if stderr else proc.returncode}")
        try:
            doc = json.loads(proc.stdout or b"{}")
            streams = doc.get("streams") or []
            fmt = doc.get("format") or {}
            duration = fmt.get("duration")
            seconds = float(duration) if duration not in (None, "N/A") else None
            rates = [int(s.get("sample_rate") or 0) for s in streams]
            chans = [int(s.get("channels") or 0) for s in streams]
            tags = {
                str(k): str(v)
                for k, v in (fmt.get("tags") or {}).items()
                if riff_key(str(k)) is not None
            }
        except (ValueError, TypeError, AttributeError):
            return NotEstimable("ffprobe's answer could not be read")
        if not streams:
            return NotEstimable("the input has no audio stream")
        if seconds is not None and not (0 <= seconds < 1e9):
            seconds = None
        first = streams[0]
        return MediaInfo(
            seconds,
            max(rates),
            max(chans),
            codec=str(first.get("codec_name") or ""),
            profile=str(first.get("profile") or ""),
            audio_streams=len(streams),
            tags=tags,
        )


def _encode_entry(key: tuple[int, int, int, int], info: MediaInfo) -> str:
    duration = "none" if info.duration_s is None else repr(info.duration_s)
    lines = [
        _CACHE_MAGIC,
        "key " + " ".join(str(k) for k in key),
        f"duration {duration}",
        f"sample_rate {info.sample_rate}",
        f"channels {info.channels}",
        f"audio_streams {info.audio_streams}",
        f"codec {_escape(info.codec)}",
        f"profile {_escape(info.profile)}",
    ]
    # Keys must hold no space (the value is the rest of the line); \x20 decodes back to one.
    lines += [
        f"tag {_escape(k).replace(' ', chr(92) + 'x20')} {_escape(v)}" for k, v in info.tags.items()
    ]
    return "\n".join(lines) + "\nend\n"


def _decode_entry(text: str, key: tuple[int, int, int, int]) -> MediaInfo | None:
    lines = text.split("\n")
    # The last line proves the file is whole; the key line that it is this file's entry.
    if lines[0] != _CACHE_MAGIC or lines[-2:] != ["end", ""]:
        return None
    if lines[1] != "key " + " ".join(str(k) for k in key):
        return None
    fields: dict[str, str] = {}
    tags: dict[str, str] = {}
    for line in lines[2:-2]:
        name, _, rest = line.partition(" ")
        if name == "tag":
            k, _, v = rest.partition(" ")
            tags[_unescape(k)] = _unescape(v)
        else:
            fields[name] = rest
    duration = None if fields["duration"] == "none" else float(fields["duration"])
    return MediaInfo(
        duration,
        int(fields["sample_rate"]),
        int(fields["channels"]),
        codec=_unescape(fields["codec"]),
        profile=_unescape(fields["profile"]),
        audio_streams=int(fields["audio_streams"]),
        tags=tags,
    )


def _find_ffprobe(ffmpeg: str | None) -> str | None:
    """ffprobe next to the real ffmpeg (as named, then with links resolved), else on PATH."""
    places: list[str] = []
    if ffmpeg:
        places.append(os.path.dirname(ffmpeg))
        places.append(os.path.dirname(os.path.realpath(ffmpeg)))
    places += os.environ.get("PATH", os.defpath).split(os.pathsep)
    for folder in places:
        candidate = os.path.join(folder or ".", "ffprobe")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None
