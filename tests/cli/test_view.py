"""`janitor status` for people: :func:`janitor.cli.view.render_status`, read back as text.

A real policy over real files in tmp_path, a live reservation made through the Python API, and
free-space samples written into the ledger's ``samples`` table; the status is rendered into rich's
recording console and the numbers read from the text are compared with the status and the ledger.
The command-line checks run the real ``janitor`` console script with its stdout a pipe.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from janitor import Janitor
from janitor.cli.view import bar, render_status, sparkline
from janitor.sizes import format_duration, format_size, parse_duration
from janitor.status import Status
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.ledger import raw_sql
from tests._fixtures.space import KiB, MiB

Cli = Callable[..., subprocess.CompletedProcess[str]]

BLOCKS = "▁▂▃▄▅▆▇█"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


# -- set-up ------------------------------------------------------------------------------------


def write_file(path: Path, nbytes: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(os.urandom(nbytes))
        fh.flush()
        os.fsync(fh.fileno())


def allocated(root: Path) -> int:
    """Allocated bytes of a folder and everything in it (``st_blocks * 512``)."""
    total = root.lstat().st_blocks * 512
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


@dataclass
class Scene:
    jan: Janitor
    cache: Path
    scratch: Path
    policy: Path
    reservation_id: str
    out: Path

    @property
    def device(self) -> int:
        return os.stat(self.cache).st_dev


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    d = {"state": tmp_path / "state", "runtime": tmp_path / "run", "log": tmp_path / "log"}
    monkeypatch.setenv("JANITOR_STATE_DIR", str(d["state"]))
    monkeypatch.setenv("JANITOR_RUNTIME_DIR", str(d["runtime"]))
    monkeypatch.setenv("JANITOR_LOG_DIR", str(d["log"]))
    return d


@pytest.fixture
def make_scene(
    tmp_path: Path, dirs: dict[str, Path], write_policy: Callable[..., Path]
) -> Iterator[Callable[..., Scene]]:
    """``make_scene(quota="4MiB", floor="4MiB", reserve=True) -> Scene``.

    A cache tree ``media`` holding 300 KiB + 200 KiB of real files and a scratch tree ``jobs``;
    with ``reserve``, a live 3 MiB reservation for job ``fa-job-42`` whose path already holds
    1 MiB (so 2 MiB are outstanding).
    """
    made: list[Janitor] = []

    def make(quota: str = "4MiB", floor: str = "4MiB", reserve: bool = True) -> Scene:
        cache = tmp_path / "trees" / "media"
        scratch = tmp_path / "trees" / "jobs"
        write_file(cache / "a.wav", 300 * KiB)
        write_file(cache / "b.wav", 200 * KiB)
        scratch.mkdir(parents=True, exist_ok=True)
        policy = write_policy(
            {
                "media": {"role": "cache", "path": str(cache), "quota": quota},
                "jobs": {"role": "scratch", "path": str(scratch)},
            },
            floor=floor,
        )
        jan = Janitor.from_settings()
        made.append(jan)
        out = cache / "out.wav"
        rid = ""
        if reserve:
            r = jan.reserve("media", "3M", path=out, job="fa-job-42", ttl="1h")
            rid = r.id
            write_file(out, 1 * MiB)
        return Scene(jan, cache, scratch, policy, rid, out)

    yield make
    for jan in made:
        jan.ledger.close()


def add_samples(jan: Janitor, device: int, points: list[tuple[float, int]]) -> None:
    with raw_sql(jan.ledger) as conn:
        conn.executemany(
            "INSERT INTO samples (device, ts, free, total) VALUES (?, ?, ?, ?)",
            [(device, ts, free, 1 << 40) for ts, free in points],
        )


def set_forecast(
    jan: Janitor,
    device: int,
    mount: str,
    *,
    level: str,
    fill_rate: float | None,
    eta_floor: float | None,
    age: float = 0.0,
) -> None:
    with raw_sql(jan.ledger) as conn:
        conn.execute(
            "INSERT OR REPLACE INTO volumes (device, mount, level, reason, fill_rate, eta_floor,"
            " eta_full, confidence, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                device,
                mount,
                level,
                "forecast reaches the floor" if level == "warn" else "",
                fill_rate,
                eta_floor,
                None,
                0.9,
                time.time() - age,
            ),
        )


def render_text(st: Status, samples: dict[int, list[tuple[float, int]]] | None = None) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(render_status(st, samples))
    return console.export_text()


def render_ansi(st: Status, samples: dict[int, list[tuple[float, int]]] | None = None) -> str:
    console = Console(
        record=True, width=200, force_terminal=True, color_system="standard", file=io.StringIO()
    )
    console.print(render_status(st, samples))
    return console.export_text(styles=True)


def table_rows(text: str) -> list[list[str]]:
    """The body rows of every table in ``text``, as lists of stripped cells."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows


def row_for(text: str, first: str) -> list[str]:
    found = [r for r in table_rows(text) if r[0] == first]
    assert len(found) == 1, f"expected one row starting {first!r}:\n{text}"
    return found[0]


def non_decreasing(s: str) -> bool:
    idx = [BLOCKS.index(c) for c in s]
    return all(a <= b for a, b in itertools.pairwise(idx))


# -- the rendered screen against the status and the ledger ---------------------------------------


def test_rendered_numbers_match_status_and_ledger(make_scene: Callable[..., Scene]) -> None:
    sc = make_scene()
    now = time.time()
    points = [(now - 1800 + i * 60, 50 * 1024 * MiB + i * 64 * MiB) for i in range(30)]
    add_samples(sc.jan, sc.device, points)
    add_samples(sc.jan, sc.device, [(now - 7200, 1)])  # older than an hour: not shown
    add_samples(sc.jan, sc.device + 1, [(now - 60, 7)])  # another volume's sample

    samples = sc.jan.samples()
    assert samples[sc.device] == [(float(ts), free) for ts, free in points]
    st = sc.jan.status()
    text = render_text(st, samples)
    assert "…" not in text, text  # nothing truncated at width 200

    # the volume: free, floor, reserved, headroom, level
    (vol,) = st.volumes
    cells = row_for(text, vol.mount)
    assert cells[1].split()[0] == vol.level == "ok"
    assert cells[2] == format_size(vol.free)
    assert cells[3] == format_size(vol.floor) == "4 MiB"
    assert vol.reserved == 2 * MiB  # 3 MiB reserved, 1 MiB of it already written
    assert cells[4] == format_size(vol.reserved) == "2 MiB"
    assert cells[5] == format_size(vol.headroom)
    with raw_sql(sc.jan.ledger) as conn:
        (ledger_bytes,) = conn.execute(
            "SELECT bytes FROM reservations WHERE id = ? AND state = 'live'",
            (sc.reservation_id,),
        ).fetchone()
    assert ledger_bytes == 3 * MiB

    # the sparkline: one character per sample (under 20), rising with free space
    spark = cells[6]
    assert set(spark) <= set(BLOCKS), spark
    assert len(spark) == 20  # 30 samples squeezed into 20 characters
    assert spark == sparkline([f for _, f in points])
    assert non_decreasing(spark), spark
    assert spark[0] == BLOCKS[0] and spark[-1] == BLOCKS[-1]
    assert cells[7] == "-"  # no daemon forecast

    # the trees: usage, quota, the bar's percentage
    media = next(t for t in st.trees if t.name == "media")
    assert media.usage == allocated(sc.cache)
    assert media.quota == 4 * MiB
    assert 0 < media.usage < media.quota
    tcells = row_for(text, "media")
    assert tcells[1] == "cache"
    assert tcells[2] == format_size(media.usage)
    assert tcells[3] == format_size(media.quota) == "4 MiB"
    m = re.fullmatch(r"([█]*)([░]*) (\d+)%", tcells[4])
    assert m, tcells[4]
    pct = round(media.usage / media.quota * 100)
    assert int(m.group(3)) == pct
    assert len(m.group(1)) == min(20, round(media.usage / media.quota * 20))
    assert len(m.group(1)) + len(m.group(2)) == 20
    assert tcells[5] == str(sc.cache)
    jobs = row_for(text, "jobs")
    assert jobs[1] == "scratch"
    assert jobs[3] == "-" and jobs[4] == "-"

    # the reservation: id, job, tree, bytes, outstanding, owner, time left, path
    rcells = row_for(text, sc.reservation_id)
    (info,) = st.reservations
    assert rcells[1] == "fa-job-42"
    assert rcells[2] == "media"
    assert rcells[3] == format_size(info.bytes) == "3 MiB"
    assert rcells[4] == format_size(info.outstanding) == "2 MiB"
    assert rcells[5] == str(os.getpid())
    left = parse_duration(rcells[6])
    assert 3600 - 120 <= left <= 3600
    assert rcells[7] == sc.out.name  # relative to its tree, whose folder the Trees table shows


def test_sparkline_length_follows_the_samples(make_scene: Callable[..., Scene]) -> None:
    sc = make_scene(reserve=False)
    now = time.time()
    points = [(now - 600 + i * 60, 10 * 1024 * MiB + i * MiB) for i in range(7)]
    add_samples(sc.jan, sc.device, points)
    st = sc.jan.status()
    text = render_text(st, sc.jan.samples())
    spark = row_for(text, st.volumes[0].mount)[6]
    assert len(spark) == 7
    assert non_decreasing(spark), spark
    assert spark[0] == BLOCKS[0] and spark[-1] == BLOCKS[-1]
    assert "No live reservations." in text


def test_no_samples_shows_a_dash(make_scene: Callable[..., Scene]) -> None:
    sc = make_scene(reserve=False)
    st = sc.jan.status()
    text = render_text(st, sc.jan.samples())
    assert row_for(text, st.volumes[0].mount)[6] == "-"


def test_fresh_forecast_is_shown_and_raises_the_level(make_scene: Callable[..., Scene]) -> None:
    sc = make_scene(reserve=False)
    mount = sc.jan.status().volumes[0].mount
    set_forecast(sc.jan, sc.device, mount, level="warn", fill_rate=5e6, eta_floor=600.0)
    st = sc.jan.status()
    (vol,) = st.volumes
    assert vol.level == "warn" and vol.eta_floor == 600.0
    text = render_text(st)
    cells = row_for(text, mount)
    assert cells[1].split()[0] == "warn"
    assert "forecast reaches the floor" in cells[1]
    assert cells[7] == f"floor in {format_duration(600.0)}"
    assert "\x1b[1;33mwarn" in render_ansi(st)


def test_freeing_and_stale_forecasts(make_scene: Callable[..., Scene]) -> None:
    sc = make_scene(reserve=False)
    mount = sc.jan.status().volumes[0].mount
    set_forecast(sc.jan, sc.device, mount, level="ok", fill_rate=-1e6, eta_floor=None)
    assert row_for(render_text(sc.jan.status()), mount)[7] == "freeing"
    set_forecast(sc.jan, sc.device, mount, level="ok", fill_rate=1e3, eta_floor=None)
    assert row_for(render_text(sc.jan.status()), mount)[7] == "steady"
    # a forecast the daemon stopped refreshing is not trusted
    set_forecast(sc.jan, sc.device, mount, level="warn", fill_rate=5e6, eta_floor=60.0, age=300)
    st = sc.jan.status()
    cells = row_for(render_text(st), mount)
    assert cells[7] == "-"
    assert cells[1] == st.volumes[0].level == "ok"


def test_levels_are_colored(make_scene: Callable[..., Scene]) -> None:
    sc = make_scene(reserve=False)
    st = sc.jan.status()
    assert st.volumes[0].level == "ok"
    assert "\x1b[1;32mok" in render_ansi(st)


def test_critical_level_and_over_quota_bar(make_scene: Callable[..., Scene]) -> None:
    sc = make_scene(quota="256KiB", floor="100%", reserve=False)
    st = sc.jan.status()
    (vol,) = st.volumes
    assert vol.level == "critical"
    text = render_text(st)
    assert row_for(text, vol.mount)[1].split()[0] == "critical"
    media = next(t for t in st.trees if t.name == "media")
    assert media.quota is not None and media.usage > media.quota
    bar_cell = row_for(text, "media")[4]
    assert bar_cell == "█" * 20 + f" {round(media.usage / media.quota * 100)}%"
    ansi = render_ansi(st)
    assert "\x1b[1;37;41mcritical" in ansi
    assert "\x1b[31m" + "█" * 20 in ansi  # red: past the quota


# -- sparkline() and bar() -------------------------------------------------------------------------


def test_sparkline_empty() -> None:
    assert sparkline([]) == ""


def test_sparkline_constant_series() -> None:
    s = sparkline([5.0] * 7)
    assert len(s) == 7
    assert len(set(s)) == 1 and s[0] in BLOCKS


def test_sparkline_full_range_without_downsampling() -> None:
    assert sparkline(list(range(8))) == BLOCKS
    assert sparkline([0, 7]) == BLOCKS[0] + BLOCKS[-1]


def test_sparkline_downsamples_to_width() -> None:
    s = sparkline([float(i) for i in range(100)], width=20)
    assert len(s) == 20
    assert non_decreasing(s)
    assert s[0] == BLOCKS[0] and s[-1] == BLOCKS[-1]
    assert len(sparkline([1.0, 2.0, 3.0] * 50, width=12)) == 12
    assert len(sparkline([1.0] * 21, width=20)) == 20


def test_sparkline_falling_series_falls() -> None:
    s = sparkline([float(100 - i) for i in range(40)], width=20)
    assert non_decreasing(s[::-1])
    assert s[0] == BLOCKS[-1] and s[-1] == BLOCKS[0]


def test_sparkline_downsampling_keeps_the_newest_sample() -> None:
    """The rightmost character is "now": a drop in the last samples must show after squeezing
    an hour of 2-second samples into 20 characters."""
    series = [100.0] * 1799 + [0.0]  # free space collapsed in the last sample
    s = sparkline(series, width=20)
    assert len(s) == 20
    assert s[-1] == BLOCKS[0], s


def test_bar_percentages_and_fill() -> None:
    assert bar(0, None).plain == "-"
    assert bar(5, 0).plain == "-"
    assert bar(0, 100).plain == "░" * 20 + " 0%"
    assert bar(50, 100).plain == "█" * 10 + "░" * 10 + " 50%"
    assert bar(100, 100).plain == "█" * 20 + " 100%"
    assert bar(250, 100).plain == "█" * 20 + " 250%"
    assert bar(333, 1000, width=10).plain == "███" + "░" * 7 + " 33%"


# -- the command line, stdout a pipe --------------------------------------------------------------


def plain_env() -> dict[str, str | None]:
    """A color-capable TERM but no variable that forces or forbids color or sets the width."""
    return {
        "TERM": "xterm-256color",
        "NO_COLOR": None,
        "FORCE_COLOR": None,
        "TTY_COMPATIBLE": None,
        "TTY_INTERACTIVE": None,
        "COLUMNS": None,
        "LINES": None,
    }


def test_cli_status_plain_when_not_a_tty(run_cli: Cli, make_scene: Callable[..., Scene]) -> None:
    make_scene()
    done = run_cli("status", env=plain_env())
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert not ANSI.search(done.stdout), repr(done.stdout[:300])
    assert "\x1b" not in done.stdout
    assert "Volumes" in done.stdout and "Trees" in done.stdout


def test_cli_status_piped_shows_whole_reservation_ids(
    run_cli: Cli, make_scene: Callable[..., Scene]
) -> None:
    """Piped into grep or a log, the id a person must copy into `janitor release` is whole."""
    sc = make_scene()
    done = run_cli("status", env=plain_env())
    assert done.returncode == 0, done.stderr
    assert sc.reservation_id in done.stdout, done.stdout
    assert "fa-job-42" in done.stdout
    assert str(sc.cache) in done.stdout


def test_cli_status_json_shape(run_cli: Cli, make_scene: Callable[..., Scene]) -> None:
    sc = make_scene()
    done = run_cli("status", "--json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    assert set(data) == {
        "time", "policy", "level", "volumes", "trees", "reservations", "jobs", "waiting",
        "awaiting",
    }  # fmt: skip
    assert data["policy"] == str(sc.policy)
    assert data["level"] == "ok"
    (vol,) = data["volumes"]
    assert set(vol) == {
        "device",
        "mount",
        "total",
        "free",
        "floor",
        "free_low",
        "free_target",
        "reserved",
        "headroom",
        "level",
        "reason",
        "trees",
        "fill_rate",
        "eta_floor",
        "forecast_updated",
    }
    assert vol["reserved"] == 2 * MiB
    assert vol["floor"] == 4 * MiB
    assert vol["headroom"] == vol["free"] - vol["floor"] - vol["reserved"]
    trees = {t["name"]: t for t in data["trees"]}
    assert set(trees) == {"media", "jobs"}
    assert set(trees["media"]) == {
        "name",
        "role",
        "path",
        "exists",
        "device",
        "usage",
        "quota",
        "low_watermark",
    }
    assert trees["media"]["usage"] == allocated(sc.cache)
    (res,) = data["reservations"]
    assert res["id"] == sc.reservation_id
    assert res["job"] == "fa-job-42"
    assert res["bytes"] == 3 * MiB
    assert res["outstanding"] == 2 * MiB


def _stuck(proc: subprocess.Popen[Any]) -> str:
    """What a process that did not end on Ctrl-C was doing: its signal masks (a blocked or
    ignored SIGINT is inherited across exec) and, by SIGABRT to its faulthandler, its
    Python stacks."""
    try:
        masks = [ln for ln in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                 if ln.startswith(("State", "Sig"))]  # fmt: skip
    except OSError:
        masks = []
    proc.send_signal(signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return "\n".join([*masks, err if isinstance(err, str) else err.decode(errors="replace")])


@contextlib.contextmanager
def _watching(proc: subprocess.Popen[Any]) -> Iterator[None]:
    """A watch started for a test: killed if its first screen has not come in 60 s (the test
    then fails rather than hangs) and at the test's end."""
    deadline = threading.Timer(60, proc.kill)
    deadline.start()
    try:
        yield
    finally:
        deadline.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _ctrl_c(proc: subprocess.Popen[Any]) -> tuple[Any, Any]:
    """Ctrl-C to a watch: its remaining stdout and its stderr once it ends (fails with what it
    was doing if it has not ended 30 s later)."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 30 s after Ctrl-C:\n{_stuck(proc)}")


def _ctrl_c_reaches_it() -> None:
    """In the watch's child, before exec: SIGINT as a terminal's foreground job has it. A
    test runner started in the background by a non-interactive shell (``pytest &``, as a CI
    harness may start it) ignores SIGINT, and an ignored signal stays ignored across fork and
    exec: Python then installs no handler, and Ctrl-C would never reach the watch."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _watch_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    return {**env, "PYTHONFAULTHANDLER": "1"}


@pytest.mark.parametrize("force_color", [False, True], ids=["plain", "FORCE_COLOR"])
def test_cli_status_watch_into_a_pipe_writes_each_screen_and_stops_cleanly_on_ctrl_c(
    make_scene: Callable[..., Scene], force_color: bool
) -> None:
    """Into a pipe each screen is written whole as it is measured (a reader sees it then, not
    when the watch ends), under its time, with no escape codes; Ctrl-C ends it with exit 0.
    FORCE_COLOR (common in CI) colours it, and it is still a log, not a screen redrawn."""
    make_scene()
    proc = subprocess.Popen(
        [str(JANITOR_BIN), "status", "--watch", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**_watch_env(), **({"FORCE_COLOR": "1"} if force_color else {})},
        preexec_fn=_ctrl_c_reaches_it,
    )
    with _watching(proc):
        assert proc.stdout is not None
        first = [proc.stdout.readline() for _ in range(2)]
        while "Volumes" not in first[-1]:  # the first screen is being written now
            line = proc.stdout.readline()
            assert line, (first, proc.communicate())
            first.append(line)
        rest, err = _ctrl_c(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+\n", first[0]), first
    out = "".join(first) + rest
    assert "\x1b[2K" not in out and "\x1b[1A" not in out  # no line erased, no cursor moved up
    assert ("\x1b" in out) == force_color


def test_cli_status_watch_on_a_terminal_redraws_in_place_and_stops_cleanly_on_ctrl_c(
    make_scene: Callable[..., Scene],
) -> None:
    """On a terminal (a real pseudo-terminal) the screen is redrawn in place, and Ctrl-C
    after it is drawn ends the watch with exit 0, the last screen left on the terminal."""
    import pty

    make_scene()
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen(
        [str(JANITOR_BIN), "status", "--watch", "--interval", "0.2"],
        stdin=child_fd,
        stdout=child_fd,
        stderr=subprocess.PIPE,
        env={**_watch_env(), "COLUMNS": "200", "LINES": "60", "TERM": "xterm"},
        preexec_fn=_ctrl_c_reaches_it,
    )
    os.close(child_fd)
    seen = b""
    with _watching(proc), contextlib.closing(os.fdopen(main_fd, "rb", buffering=0)) as term:
        while seen.count(b"Volumes") < 2:  # drawn, then redrawn
            try:
                chunk = term.read(65536)
            except OSError:  # EIO: the terminal's last writer is gone
                chunk = b""
            assert chunk, seen
            seen += chunk
        _, err = _ctrl_c(proc)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err
    assert b"\x1b[" in seen  # the cursor moved back over the last screen to redraw it
