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
- ``-ss S -to E`` on an input (batchalign3's UTR segments and group cuts) keeps
  ``round((E - S) x in_rate)`` samples of the input, halves rounded up (and from sample
  ``round(S x in_rate)`` to the decoder's last when the span runs past the end); ffmpeg's
  resampler then writes ``n x out / in`` samples, its last partial one only past a remainder
  measured per pair of rates (:func:`resampled_samples`). Measured over hundreds of spans, to the
  millisecond and to the microsecond, from WAV, FLAC, MP3 and AAC at 16, 22.05, 44.1 and 48 kHz:
  exact, except from 22,050 Hz where one span in about sixty came out one sample short of the
  estimate. Spans under ~2 ms (the resampler's filter) come out shorter than estimated. On the
  output side the window is applied in microseconds, rounded up. ``-t`` wins over ``-to``;
  ``-to <= -ss`` makes ffmpeg refuse. Beyond the input's end the output is shorter (or empty).
- AAC-LC in MP4 decodes whole 1024-sample frames from its edit list's start to the last frame
  that begins before the edit's end: up to 1023 samples more than the duration ffprobe reports;
  MP3 with a LAME/Lavf tag decodes its frames less the encoder delay and padding the tag
  states, which ffprobe's duration still counts. Both are read from the header
  (:func:`container_samples`), so their whole-file conversions and cuts past the end are exact;
  without such a header one AAC frame is added to the duration (an upper bound). MP3 without
  the tag, Opus and WMA decode to at most the ffprobe duration; FLAC, Vorbis and WAV to
  exactly it.
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
    "container_samples",
    "estimate",
    "estimate_command",
    "input_files",
    "local_path",
    "parse",
    "parse_time",
    "parse_time_us",
    "resampled_samples",
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
    moov = _box(f, 0, end, b"moov")
    mvhd = moov and _box(f, *moov, b"mvhd")
    if not moov or not mvhd:
        return None
    pos = mvhd[0]
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


def container_samples(path: str, codec: str, profile: str, sample_rate: int) -> int | None:
    """Samples per channel ffmpeg's decoder emits for ``path``, from its header, where
    ffprobe's duration does not say it exactly; None for any other file, or when unsure.

    - AAC-LC in MP4/M4A/MOV: it decodes whole 1024-sample frames, from the edit list's start
      (the encoder's priming is skipped) to the end of the last frame that begins before the
      edit's end, so up to 1023 samples past the duration ffprobe reports.
    - MP3 with a LAME/Lavf/Lavc tag: its frames x 1152 (576 below 32 kHz), less the encoder's
      delay and padding the tag states; ffprobe's duration counts both.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(12)
            if codec == "aac" and profile == "LC" and head[4:8] == b"ftyp":
                return _mp4_aac_samples(f, os.fstat(f.fileno()).st_size, sample_rate)
            if codec == "mp3":
                return _mp3_samples(f, head)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _boxes(f: BinaryIO, start: int, end: int) -> Iterable[tuple[bytes, int, int]]:
    """The ISO BMFF boxes between ``start`` and ``end``: (type, body start, box end)."""
    pos = start
    while pos + 8 <= end:
        f.seek(pos)
        head = f.read(16)
        size, kind, skip = int.from_bytes(head[:4], "big"), head[4:8], 8
        if size == 1:
            size, skip = int.from_bytes(head[8:16], "big"), 16
        elif size == 0:
            size = end - pos
        if size < skip or pos + size > end:
            return
        yield kind, pos + skip, pos + size
        pos += size


def _box(f: BinaryIO, start: int, end: int, kind: bytes) -> tuple[int, int] | None:
    for k, body, stop in _boxes(f, start, end):
        if k == kind:
            return body, stop
    return None


def _mp4_aac_samples(f: BinaryIO, size: int, sample_rate: int) -> int | None:
    """The decoded length of an MP4's one AAC track (see :func:`container_samples`)."""
    moov = _box(f, 0, size, b"moov")
    mvhd = moov and _box(f, *moov, b"mvhd")
    if not moov or not mvhd:
        return None
    f.seek(mvhd[0])
    body = f.read(24)
    movie_scale = int.from_bytes(body[20:24] if body[0] == 1 else body[12:16], "big")
    tracks = []
    for kind, start, stop in _boxes(f, *moov):
        if kind != b"trak":
            continue
        mdia = _box(f, start, stop, b"mdia")
        hdlr = mdia and _box(f, *mdia, b"hdlr")
        if not mdia or not hdlr:
            return None
        f.seek(hdlr[0] + 8)
        if f.read(4) == b"soun":
            tracks.append((start, stop, mdia))
    if len(tracks) != 1 or not movie_scale:
        return None
    start, stop, mdia = tracks[0]
    mdhd = _box(f, *mdia, b"mdhd")
    minf = _box(f, *mdia, b"minf")
    stbl = minf and _box(f, *minf, b"stbl")
    stts = stbl and _box(f, *stbl, b"stts")
    if not mdhd or not stts:
        return None
    f.seek(mdhd[0])
    body = f.read(24)
    if int.from_bytes(body[20:24] if body[0] == 1 else body[12:16], "big") != sample_rate:
        return None  # durations in another clock than the decoder's samples
    # The edit list: one edit (the encoder's priming skipped, the padding after it dropped).
    media_time, limit = 0, None
    edts = _box(f, start, stop, b"edts")
    elst = edts and _box(f, *edts, b"elst")
    if elst:
        f.seek(elst[0])
        head = f.read(8)
        wide = head[0] == 1
        if int.from_bytes(head[4:8], "big") != 1:
            return None  # several edits, or an empty one before: not this simple
        entry = f.read(20 if wide else 12)
        width = 8 if wide else 4
        duration = int.from_bytes(entry[:width], "big")
        media_time = int.from_bytes(entry[width : 2 * width], "big", signed=True)
        if media_time < 0:
            return None
        if duration:  # in the movie's clock: ffmpeg rescales it to the track's, rounding
            limit = media_time + (duration * sample_rate + movie_scale // 2) // movie_scale
    # The frames: every one that begins before the edit's end is decoded whole, 1024 samples
    # (the last one too, whatever shorter duration the table gives it).
    f.seek(stts[0])
    count = int.from_bytes(f.read(8)[4:8], "big")
    table = f.read(8 * count)
    if len(table) != 8 * count:
        return None
    kept = at = 0
    for i in range(count):
        frames = int.from_bytes(table[8 * i : 8 * i + 4], "big")
        delta = int.from_bytes(table[8 * i + 4 : 8 * i + 8], "big")
        if limit is not None and delta and at + frames * delta > limit:
            kept += -(-(limit - at) // delta)
            break
        kept += frames
        at += frames * delta
    samples = kept * _AAC_FRAME - media_time
    return samples if samples > 0 else None


_AAC_FRAME = 1024  # samples an AAC-LC frame decodes to
# Side information bytes after an MP3 frame's header, where a Xing/Info tag begins:
# [MPEG-1][mono], as ffmpeg's xing_offtbl.
_XING_OFFSET = {(True, False): 32, (True, True): 17, (False, False): 17, (False, True): 9}


def _mp3_samples(f: BinaryIO, head: bytes) -> int | None:
    """The decoded length of an MP3 with a Xing/Info frame count and a LAME-style delay tag."""
    pos = 0
    if head[:3] == b"ID3":  # an ID3v2 tag first: its size is syncsafe, footer flagged
        size = 0
        for b in head[6:10]:
            size = (size << 7) | (b & 0x7F)
        pos = 10 + size + (10 if head[5] & 0x10 else 0)
    f.seek(pos)
    frame = f.read(4 + 32 + 8 + 4 + 4 + 100 + 4 + 9 + 12 + 3)
    if len(frame) < 4 or frame[0] != 0xFF or frame[1] & 0xE0 != 0xE0:
        return None  # not a frame right there: ffmpeg would search; we do not
    version, layer = (frame[1] >> 3) & 3, (frame[1] >> 1) & 3
    if layer != 1 or version == 1:
        return None  # layer III only (version 1 is reserved)
    mpeg1, mono = version == 3, (frame[3] >> 6) == 3
    at = 4 + _XING_OFFSET[(mpeg1, mono)]
    if frame[at : at + 4] not in (b"Xing", b"Info"):
        return None
    flags = int.from_bytes(frame[at + 4 : at + 8], "big")
    at += 8
    if not flags & 1:
        return None  # no frame count
    frames = int.from_bytes(frame[at : at + 4], "big")
    at += 4 + (4 if flags & 2 else 0) + (100 if flags & 4 else 0) + (4 if flags & 8 else 0)
    if frame[at : at + 4] not in (b"LAME", b"Lavf", b"Lavc"):
        return None
    delays = int.from_bytes(frame[at + 21 : at + 24], "big")
    samples = frames * (1152 if mpeg1 else 576) - (delays >> 12) - (delays & 0xFFF)
    return samples if frames and samples > 0 else None


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

    frames = _written_samples(in_window, window, info, rate)
    if isinstance(frames, NotEstimable):
        return frames
    data = frames * channels * PCM_CODECS[codec]
    header = 0
    if fmt == "wav":
        tags = _output_tags(inv, meta_source, meta, info_of)
        if isinstance(tags, NotEstimable):
            return tags
        header = wav_header_bytes(codec, rate, channels, tags, bitexact=bitexact) + (data & 1)
    whole_bytes = None
    if in_window.timed() or window.timed():
        whole = _written_samples(_Window(), _Window(), info, rate)
        if not isinstance(whole, NotEstimable):
            whole_data = whole * channels * PCM_CODECS[codec]
            whole_bytes = whole_data + (header - (data & 1) + (whole_data & 1) if header else 0)
    return OutputEstimate(
        path,
        data + header,
        format=fmt,
        codec=codec,
        sample_rate=rate,
        channels=channels,
        duration_s=frames / rate,
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


#: What ffmpeg's resampler (libswresample's defaults: filter_size 32, cutoff 0.97, exact
#: rational) writes for n input samples, measured with ffmpeg 5.1: n x out / in, and the last,
#: partial sample only if ``n x out mod in`` reaches the remainder below (its filter wants that
#: much input past the sample). Rates not listed write the partial sample whenever there is one
#: (measured so from 22,050, 11,025, 24,000 and 32,000 Hz to 16 kHz): rounding up, which never
#: counts low. Inputs shorter than the filter (about 2 ms) give fewer samples still.
_RESAMPLER_LAST: dict[tuple[int, int], int] = {
    (44100, 16000): 14500, (48000, 16000): 32000, (88200, 16000): 16200, (96000, 16000): 32000,
}  # fmt: skip
# Codecs that decode to exactly the duration ffprobe reports (to its microsecond).
_EXACT_CODECS = ("flac", "vorbis")


def resampled_samples(n: int, in_rate: int, out_rate: int) -> int:
    """Samples ffmpeg writes at ``out_rate`` for ``n`` samples decoded at ``in_rate``.

    >>> resampled_samples(441000, 44100, 16000)                         # 10 s
    160000
    >>> [resampled_samples(n, 44100, 16000) for n in (1000, 1001)]      # 362.81, 363.17
    [363, 363]
    """
    if in_rate == out_rate:
        return n
    whole, rest = divmod(n * out_rate, in_rate)
    if not rest:
        return whole
    return whole + (rest >= _RESAMPLER_LAST.get((in_rate, out_rate), 1))


def _rescale(us: int, rate: int) -> int:
    """Microseconds as samples at ``rate``, rounded as ffmpeg's av_rescale (halves away from 0)."""
    return (us * rate + 500000) // 1000000


def _decoded_samples(info: MediaInfo) -> tuple[int | None, bool]:
    """Samples per channel the decoder emits at ``info.sample_rate``, and whether exactly."""
    if info.samples is not None:
        return info.samples, True
    if info.duration_s is None:
        return None, False
    us = round(info.duration_s * 1e6)
    if info.codec.startswith("pcm_") or info.codec in _EXACT_CODECS:
        return _rescale(us, info.sample_rate), True
    # Decoders that emit whole frames write a little past the probed duration.
    pad = _END_PAD.get(info.codec, 0) * (2 if info.profile.startswith("HE") else 1)
    return -(-us * info.sample_rate // 1000000) + pad, False


def _written_samples(inp: _Window, out: _Window, info: MediaInfo, rate: int) -> int | NotEstimable:
    """Samples per channel written at ``rate``: the input's read window, then the output's.

    An input window (``-ss``/``-to``/``-t`` before ``-i``) is cut as ffmpeg cuts it: the span
    rounded to whole samples of the input (``round((E - S) x in_rate)``; its start too, against
    the end of what the decoder emits when the window runs past it), then resampled
    (:func:`resampled_samples`). Exact where the decoded length is known
    (:func:`_decoded_samples`); an output window, ``-sseof``, ``-itsoffset`` or several audio
    streams go through microseconds, rounded up.
    """
    if out.timed() or inp.sseof is not None or inp.itsoffset is not None or info.audio_streams > 1:
        us = _written_us(inp, out, info)
        return us if isinstance(us, NotEstimable) else -(-us * rate // 1000000)
    start = inp.ss or 0
    end = inp.end(start)
    if isinstance(end, NotEstimable):
        return end
    total, _ = _decoded_samples(info)
    if end is None and total is None:
        return NotEstimable("the input's duration is unknown")
    in_rate = info.sample_rate
    n = None if end is None else _rescale(end - start, in_rate)
    if total is not None:
        left = max(0, total - _rescale(start, in_rate))
        n = left if n is None else min(n, left)
    assert n is not None
    return resampled_samples(n, in_rate, rate)


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

_CACHE_MAGIC = "janitor-probe 2"  # 2: with the decoded samples (entries of 1 are probed again)
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
        codec = str(first.get("codec_name") or "")
        profile = str(first.get("profile") or "")
        samples = None
        if len(streams) == 1:
            samples = container_samples(path, codec, profile, max(rates))
        return MediaInfo(
            seconds,
            max(rates),
            max(chans),
            codec=codec,
            profile=profile,
            audio_streams=len(streams),
            tags=tags,
            samples=samples,
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
        f"samples {'none' if info.samples is None else info.samples}",
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
    samples = None if fields["samples"] == "none" else int(fields["samples"])
    return MediaInfo(
        duration,
        int(fields["sample_rate"]),
        int(fields["channels"]),
        codec=_unescape(fields["codec"]),
        profile=_unescape(fields["profile"]),
        audio_streams=int(fields["audio_streams"]),
        tags=tags,
        samples=samples,
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
