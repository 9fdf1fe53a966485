"""Reading an ffmpeg argument list as ffmpeg does: its time syntax, its options (which take a
value, which apply to inputs, outputs or the whole command), and the split into global options,
inputs and outputs (:func:`parse`); which URLs name local files.

- ``x.pcm`` without ``-f`` is *not* raw PCM: ffmpeg picks its ALP (IMA ADPCM) muxer for it.
- Options after the last output file are ignored by ffmpeg 5.1 (with a warning); a failing
  ffmpeg often leaves an empty output file behind (it opens outputs before encoding).
"""

from __future__ import annotations

from janitor.guarding.ffmpeg.records import FileArg, Invocation, NotEstimable, Option

TYPE_CHECKING = False  # typing costs several ms to import; mypy treats this name as True
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "EXIT",
    "OPTIONS",
    "UNSAFE",
    "input_files",
    "local_path",
    "parse",
    "parse_time",
    "parse_time_us",
    "split_url",
]

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
_ARG, _IN, _OUT, _GLOBAL, _BOOL = 1, 2, 4, 8, 32
#: The kind of option that prints information and ends ffmpeg (``-version``, ``-h`` ...).
EXIT = 16
_IO = _IN | _OUT


def _table() -> dict[str, int]:
    t: dict[str, int] = {}

    def add(kind: int, names: str) -> None:
        for n in names.split():
            t[n] = kind

    add(EXIT, "L h ? help -help version buildconf formats muxers demuxers devices codecs")
    add(EXIT, "decoders encoders bsfs protocols filters pix_fmts layouts sample_fmts")
    add(EXIT, "dispositions colors hwaccels")
    add(EXIT | _ARG, "sources sinks")
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


#: Every option the estimator knows, with its kind (bits: takes a value, input, output, global,
#: EXIT, boolean).
OPTIONS = _table()

#: Options after which we cannot know the bytes, with the reason the guard reports.
UNSAFE = {
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
        kind = OPTIONS.get(name)
        value: str | None = None
        if kind is None and name.startswith("no") and (OPTIONS.get(name[2:], 0) & _BOOL):
            name, kind, value = name[2:], OPTIONS[name[2:]], "0"
        if kind is None:
            inv.problem = inv.problem or f"option {arg} is not known to the estimator"
            break
        if kind & EXIT:
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
            if name in UNSAFE:
                inv.problem = inv.problem or UNSAFE[name]
        else:
            pending.append(opt)
    inv.trailing = pending
    _finish(inv)
    return inv


def _check_side(inv: Invocation, options: Iterable[Option], side: int, url: str) -> None:
    """ffmpeg refuses an output-only option before ``-i`` and an input-only one on an output."""
    for opt in options:
        if not OPTIONS[opt.name] & side:
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


def split_url(url: str) -> str | NotEstimable:
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
    path = split_url(url)
    return None if isinstance(path, NotEstimable) else path


def input_files(inv: Invocation) -> list[str]:
    """The local files ``inv`` reads (``-i`` arguments that are not pipes or protocols)."""
    paths = []
    for arg in inv.inputs:
        path = split_url(arg.url)
        if not isinstance(path, NotEstimable):
            paths.append(path)
    return paths
