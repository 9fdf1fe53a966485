"""The CLI's screens for people: status (colored levels, quota bars, a free-space sparkline per
volume), a sweep's plan, a job's pre-flight, doctor's findings.

Pure rendering: library values in, rich renderables out (a string is rich markup), so tests can
render into a recording console and read the numbers back. Loaded only by the commands that
print for people: rich is slow to import.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from janitor.sizes import format_duration, format_size
from janitor.status import Status

if TYPE_CHECKING:
    from janitor.doctor import Check
    from janitor.jobs.run import Preflight
    from janitor.ledger.reservations import ReservationInfo
    from janitor.usage import VolumeSpace

__all__ = [
    "SHOWN_RESERVATIONS",
    "bar",
    "notable",
    "render_checks",
    "render_preflight",
    "render_space",
    "render_status",
    "render_sweep",
    "sparkline",
]

_LEVEL_STYLE = {"ok": "bold green", "warn": "bold yellow", "critical": "bold white on red"}
_BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 20) -> str:
    """``values`` (oldest first) squeezed into ``width`` block characters, low to high."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        # The last sample of each bucket, so the newest reading is always shown.
        values = [values[min(len(values) - 1, int((i + 1) * step) - 1)] for i in range(width)]
    lo, hi = min(values), max(values)
    if hi == lo:
        return _BLOCKS[len(_BLOCKS) // 2] * len(values)
    scale = (len(_BLOCKS) - 1) / (hi - lo)
    return "".join(_BLOCKS[round((v - lo) * scale)] for v in values)


def bar(used: int, limit: int | None, width: int = 20) -> Text:
    """A text bar of ``used`` against ``limit``: green, yellow past 90 %, red past 100 %."""
    if not limit:
        return Text("-")
    frac = used / limit
    filled = min(width, round(frac * width))
    style = "red" if frac > 1 else "yellow" if frac > 0.9 else "green"
    return (
        Text("█" * filled, style=style)
        + Text("░" * (width - filled), style="dim")
        + Text(f" {frac:.0%}")
    )


def render_status(
    st: Status, samples: dict[int, list[tuple[float, int]]] | None = None
) -> RenderableType:
    """The status screen: volumes, trees, live reservations."""
    samples = samples or {}
    vt = Table(title="Volumes", title_justify="left", expand=False)
    for col, just in (
        ("volume", "left"),
        ("level", "left"),
        ("free", "right"),
        ("floor", "right"),
        ("reserved", "right"),
        ("headroom", "right"),
        ("free, last hour", "left"),
        ("forecast", "left"),
    ):
        vt.add_column(col, justify=just)  # type: ignore[arg-type]
    for v in st.volumes:
        level = Text(v.level, style=_LEVEL_STYLE[v.level])
        if v.reason:
            level += Text(f" {v.reason}", style="dim")
        series = [f for _, f in samples.get(v.device, [])]
        if v.eta_floor is not None:
            forecast = f"floor in {format_duration(v.eta_floor)}"
        elif v.fill_rate is not None and v.fill_rate < 0:
            forecast = "freeing"
        elif v.fill_rate is not None:
            forecast = "steady"
        else:
            forecast = "-"
        vt.add_row(
            v.mount,
            level,
            format_size(v.free),
            format_size(v.floor),
            format_size(v.reserved),
            format_size(v.headroom),
            sparkline(series) or "-",
            forecast,
        )
    tt = Table(title="Trees", title_justify="left")
    for col, just in (
        ("tree", "left"),
        ("role", "left"),
        ("usage", "right"),
        ("quota", "right"),
        ("", "left"),
        ("path", "left"),
    ):
        tt.add_column(col, justify=just)  # type: ignore[arg-type]
    for t in st.trees:
        tt.add_row(
            t.name,
            t.role,
            format_size(t.usage),
            format_size(t.quota) if t.quota is not None else "-",
            bar(t.usage, t.quota),
            t.path + ("" if t.exists else " (missing)"),
        )
    parts: list[RenderableType] = [vt, tt]
    if st.reservations:
        shown = notable(st.reservations)
        rest = len(st.reservations) - len(shown)
        title = "Reservations"
        if rest:
            title += f" ({len(shown)} of {len(st.reservations)}: at risk, largest, newest)"
        rt = Table(title=title, title_justify="left")
        for col, just in (
            ("id", "left"),
            ("job", "left"),
            ("tree", "left"),
            ("bytes", "right"),
            ("outstanding", "right"),
            ("pid", "right"),
            ("lapses in", "right"),
            ("path", "left"),
        ):
            # Ids are copied into `janitor release`: never cut them.
            rt.add_column(
                col,
                justify=just,  # type: ignore[arg-type]
                no_wrap=col == "id",
                min_width=18 if col == "id" else None,
            )
        now = time.time()
        for r in shown:
            rt.add_row(
                r.id,
                r.job or "-",
                r.tree,
                format_size(r.bytes),
                format_size(r.outstanding),
                str(r.owner_pid),
                "with its job" if r.job_id else format_duration(max(0.0, r.expires - now)),
                r.path or "-",
                style="red" if r.at_risk else None,
            )
        parts.append(rt)
        if rest:
            ids = {r.id for r in shown}
            hidden = [r for r in st.reservations if r.id not in ids]
            parts.append(
                Text(
                    f"... and {rest} more, {format_size(sum(r.outstanding for r in hidden))} "
                    "outstanding; `janitor status --json` lists every one",
                    style="dim",
                )
            )
    else:
        parts.append(Text("No live reservations.", style="dim"))
    return Group(*parts)


#: Reservations a person is shown in the status table; the rest are counted.
SHOWN_RESERVATIONS = 12


def notable(
    reservations: Sequence[ReservationInfo], limit: int = SHOWN_RESERVATIONS
) -> list[ReservationInfo]:
    """The few reservations that matter most, in ledger order: every one at risk (up to the
    limit), then the largest outstanding, then the newest."""
    if len(reservations) <= limit:
        return list(reservations)
    picked: dict[str, ReservationInfo] = {}
    at_risk = [r for r in reservations if r.at_risk]
    largest = sorted(reservations, key=lambda r: r.outstanding, reverse=True)
    newest = sorted(reservations, key=lambda r: r.created, reverse=True)
    for group, share in ((at_risk, limit), (largest, limit // 2), (newest, limit)):
        for r in group[:share]:
            if len(picked) >= limit:
                break
            picked.setdefault(r.id, r)
    order = {r.id: i for i, r in enumerate(reservations)}
    return sorted(picked.values(), key=lambda r: order[r.id])


def render_sweep(data: dict[str, Any], now: float) -> list[RenderableType]:
    """A sweep's plan or outcome (``SweepResult.as_dict()``): the units, then a line per tree."""
    parts: list[RenderableType] = []
    if data["items"]:
        title = "Plan (dry run: nothing deleted)" if data["dry_run"] else "Swept"
        table = Table(title=title, title_justify="left")
        for col in ("tree", "why", "size", "last use", "result", "path"):
            table.add_column(col, justify="right" if col in ("size", "last use") else "left")
        for it in data["items"]:
            if data["dry_run"]:
                result = "would delete"
            elif it["deleted"]:
                result = "[green]deleted[/]"
            else:
                result = f"[yellow]kept: {it['skipped']}[/]"
            table.add_row(
                it["tree"],
                it["reason"],
                format_size(it["bytes"]),
                format_duration(now - it["last_use"]) + " ago",
                result,
                it["path"],
            )
        parts.append(table)
    for t in data["trees"]:
        kept = ", ".join(f"{v} {k}" for k, v in t["kept"].items())
        quota = f" of {format_size(t['quota'])}" if t["quota"] is not None else ""
        line = (
            f"{t['tree']}: {format_size(t['usage'])}{quota} in {t['units']} units; "
            f"{'would free' if data['dry_run'] else 'planned'} {format_size(t['planned'])}"
        )
        if kept:
            line += f"; kept {kept}"
        if not t["reaches_target"]:
            line += " [bold red](cannot reach the low watermark)[/]"
        parts.append(line)
    if not data["dry_run"]:
        parts.append(
            f"deleted {format_size(data['deleted_bytes'])}, free space grew by "
            f"{format_size(data['reclaimed_bytes'])}"
        )
    return parts


def render_space(volumes: Sequence[VolumeSpace]) -> list[RenderableType]:
    """``janitor space``: one table per volume, largest first, what a sweep would free."""
    parts: list[RenderableType] = []
    for v in volumes:
        title = (
            f"{v.mount}: {format_size(v.used)} used of {format_size(v.total)}, "
            f"{format_size(v.free)} free"
            + (f"; a sweep would free {format_size(v.frees)}" if v.frees else "")
        )
        table = Table(title=title, title_justify="left")
        table.add_column("what")
        table.add_column("size", justify="right")
        table.add_column("share", justify="right")
        table.add_column("managed")
        table.add_column("sweep frees", justify="right")
        table.add_column("path", overflow="fold")
        for r in v.rows:
            share = f"{100 * r.bytes / v.used:.0f}%" if v.used else "-"
            managed = f"{r.role} ({r.tree})" if r.tree else "no"
            table.add_row(
                r.name,
                format_size(r.bytes),
                share,
                managed if r.path else "-",
                format_size(r.frees) if r.frees else "-",
                r.path or "",
            )
        parts.append(table)
    return parts


def render_preflight(pre: Preflight) -> list[RenderableType]:
    """A job's pre-flight: its media, then what it writes on each volume against the headroom."""
    files = pre.files
    seconds = sum(f.duration_s or 0 for f in files)
    todo = sum(1 for f in files if f.converts and not f.cached and f.duration_s is not None)
    parts: list[RenderableType] = [
        f"pre-flight: {len(files)} media files, {format_duration(seconds)} of audio; "
        f"{todo} to convert into the media cache; {pre.concurrency} at once"
    ]
    table = Table(title_justify="left")
    for col in ("volume", "job writes", "headroom", "fits", "for"):
        table.add_column(
            col,
            justify="right" if col in ("job writes", "headroom") else "left",
            overflow="fold",  # a path is shown whole, over two lines if need be
        )
    for v in pre.volumes:
        table.add_row(
            v.mount,
            format_size(v.needs),
            format_size(v.headroom),
            "[green]yes[/]" if v.fits else "[bold red]no[/]",
            "; ".join(v.what),
        )
    parts.append(table)
    if todo and not pre.knows_cache:
        parts.append(
            "[yellow]blake3 is not installed: inputs already in the media cache are counted as "
            "still to convert (pip install 'space-janitor\\[batchalign]')[/]"
        )
    parts.extend(f"[yellow]skipped {f.media}: {f.error}[/]" for f in files if f.error)
    return parts


_VERDICT_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def render_checks(checks: Iterable[Check]) -> list[RenderableType]:
    """doctor's findings: a line per check, and its fix under it unless it passed."""
    parts: list[RenderableType] = []
    for c in checks:
        # A message of several lines (a policy's problems) goes on under the first's text.
        message = c.message.replace("\n", "\n      ")
        parts.append(
            Text(f"{c.verdict:>4}  ", style=_VERDICT_STYLE[c.verdict])
            + Text(f"{c.name}: {message}")
        )
        if c.fix and c.verdict != "ok":
            parts.append(Text(f"      fix: {c.fix}", style="dim"))
    return parts
