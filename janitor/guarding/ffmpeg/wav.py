"""What ffmpeg writes for PCM: bytes per sample of each PCM codec, the raw PCM muxers, the
codecs its wav muxer takes, and the bytes of the header that muxer writes.

ffmpeg 5.1, measured with the real binary: a WAV is a 44-byte canonical header plus a
``LIST``/``INFO`` chunk holding ``ISFT=Lavf59.27.100`` (34 bytes): 78 bytes in all for 16-bit
mono or stereo at <= 48 kHz. ``-bitexact`` or ``-fflags +bitexact`` drop the encoder tag (44
bytes with no other tag); ``-flags +bitexact`` (codec flags) and ``-map_metadata -1`` do not drop
it. Input tags that map to RIFF INFO keys (title, artist, comment, date ...) are copied from the
first input and add ``8 + len + 1`` bytes each, padded to even. More than 2 channels, more than
48 kHz or more than 16 bits switch to WAVE_FORMAT_EXTENSIBLE (+24 bytes); codecs other than
integer PCM (float, mu-law, A-law) add a ``fact`` chunk (+12) and, when not extensible, a 2-byte
cbSize. An odd data size gets one pad byte.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs several ms to import; mypy treats this name as True
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "EXT_FORMATS",
    "LAVF_ENCODER_CHUNK",
    "PCM_CODECS",
    "RAW_FORMATS",
    "RIFF_TAGS",
    "WAV_CODECS",
    "encoder_sample_fmt",
    "generic_tag",
    "riff_key",
    "wav_header_bytes",
]

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


def encoder_sample_fmt(codec: str) -> str:
    """The one sample format ffmpeg's PCM encoder takes (another -sample_fmt: ffmpeg refuses)."""
    if codec in ("pcm_mulaw", "pcm_alaw"):
        return "s16"
    if codec.startswith("pcm_f"):
        return "flt" if codec[5:7] == "32" else "dbl"
    bits = 8 * PCM_CODECS[codec]
    return {8: "u8", 16: "s16", 24: "s32", 32: "s32", 64: "s64"}[bits]


#: Output extensions ffmpeg maps to a PCM muxer when -f is absent (av_guess_format, 5.1).
EXT_FORMATS = {
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
#: The RIFF INFO keys ffmpeg's wav muxer writes.
RIFF_TAGS = frozenset(_RIFF_KEYS.split())
# What ffmpeg's wav demuxer reports for an INFO key it reads (ff_riff_info_conv, read way).
_GENERIC = {v: k for k, v in _RIFF_CONV.items()} | {"ITRK": "track"}


def riff_key(tag: str) -> str | None:
    """The RIFF INFO key a container tag becomes in a WAV, or None if the muxer drops it."""
    key = _RIFF_CONV.get(tag.lower(), tag)
    return key if key in RIFF_TAGS else None


def generic_tag(key: str) -> str:
    """The name ffmpeg gives an INFO key it reads from a WAV (``INAM`` is ``title``), as ffprobe
    reports it; keys without a generic name keep their own (``IKEY``)."""
    return _GENERIC.get(key, key)


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
