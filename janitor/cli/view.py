"""`janitor status` for people: colored levels, quota bars, a free-space sparkline per volume.

Pure rendering: a Status and the volumes' recent samples in, rich renderables out, so tests can
render into a recording console and read the numbers back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from janitor.sizes import format_duration, format_size
from janitor.status import Status

__all__ = ["bar", "render_status", "sparkline"]

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
        rt = Table(title="Reservations", title_justify="left")
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
        for r in st.reservations:
            rt.add_row(
                r.id,
                r.job or "-",
                r.tree,
                format_size(r.bytes),
                format_size(r.outstanding),
                str(r.owner_pid),
                format_duration(max(0.0, r.expires - now)),
                r.path or "-",
                style="red" if r.at_risk else None,
            )
        parts.append(rt)
    else:
        parts.append(Text("No live reservations.", style="dim"))
    return Group(*parts)
