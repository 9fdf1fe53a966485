"""Describing an input for the estimator (:class:`MediaInfo`): from its header where that says
everything (janitor.guarding.ffmpeg.container), else from ffprobe, remembered in a small file cache
that every process shares (:class:`Probe`, in :func:`probe_cache_dir`).

One probe serves every estimate: the guarded ffmpeg, the daemon's ``POST /v1/estimate``,
``janitor estimate`` and ``janitor run``'s pre-flight, so a recording is probed once for all
of them and they agree. ``json`` and ``subprocess`` load on a cache miss only.
"""

from __future__ import annotations

import os

from janitor.guarding.ffmpeg.container import container_samples, header_info
from janitor.guarding.ffmpeg.records import MediaInfo, NotEstimable
from janitor.guarding.ffmpeg.wav import riff_key

__all__ = ["Probe", "probe_cache_dir"]

_CACHE_MAGIC = "janitor-probe 2"  # 2: with the decoded samples (entries of 1 are probed again)
_PROBE_ENTRIES = "format=duration:format_tags:stream=codec_name,profile,sample_rate,channels"


def probe_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> str:
    """The probe cache's folder: ``probes`` in ``$JANITOR_CACHE_DIR``, else in ``cache_dir``
    (the user cache folder ``janitor shim install`` wrote into the guard, so the guard needs no
    platformdirs), else in the user cache folder (``~/.cache/space-janitor`` on Linux).

    >>> probe_cache_dir("/home/me/.cache/space-janitor")  # doctest: +SKIP
    '/home/me/.cache/space-janitor/probes'
    """
    folder = os.environ.get("JANITOR_CACHE_DIR") or (os.fspath(cache_dir) if cache_dir else "")
    if not folder:
        from janitor.config.paths import default_cache_dir

        folder = str(default_cache_dir())
    return os.path.join(folder, "probes")


def _escape(text: str) -> str:
    return text.encode("unicode_escape").decode("ascii")


def _unescape(text: str) -> str:
    return text.encode("ascii").decode("unicode_escape")


class Probe:
    """``duration_of(path)`` for :func:`~janitor.guarding.ffmpeg.estimate`: the file's header where
    it says everything (:func:`~janitor.guarding.ffmpeg.container.header_info`: plain WAVs, AAC-LC
    M4As; nothing written for those), else ffprobe, remembered in a small file cache.

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
        hit = self._memo.get(key) or header_info(path) or self._read(key)
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
        """The answer for ``path`` as it is now without running ffprobe: remembered, from its
        header or from the file cache; None when only ffprobe could say."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        hit = self._memo.get(key) or header_info(path) or self._read(key)
        if hit is not None:
            self._memo[key] = hit  # asked again by the estimate that follows: read once
        return hit

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
    """ffprobe next to the real ffmpeg (as named, then with links resolved), else on PATH;
    never a guarded ffprobe of ours (it would mark what the estimator only measures)."""
    from janitor.guarding.mark import is_guard

    places: list[str] = []
    if ffmpeg:
        places.append(os.path.dirname(ffmpeg))
        places.append(os.path.dirname(os.path.realpath(ffmpeg)))
    places += os.environ.get("PATH", os.defpath).split(os.pathsep)
    for folder in places:
        candidate = os.path.join(folder or ".", "ffprobe")
        usable = os.path.isfile(candidate) and os.access(candidate, os.X_OK)
        if usable and not is_guard(candidate):
            return candidate
    return None
