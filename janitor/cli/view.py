"""The CLI's screens for people: status (colored levels, quota bars, a free-space sparkline per
volume), a sweep's plan, ``space``, a job's pre-flight, doctor's findings.

Pure rendering: library values in, rich renderables out, so tests can render into a recording
console and read the numbers back. Each screen takes the ``width`` it must fit (None: not a
terminal, nothing cut) and lays itself out as janitor.cli.layout says: tables that fit, else a
list. No string is taken as rich markup: names and messages with square brackets print whole.
Loaded only by the commands that print for people: rich is slow to import.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from janitor.cli.layout import Column, Cut, Indent, Line, Phrases, fit_table
from janitor.humanize import format_ago, format_duration, format_size, plural
from janitor.status import Status

if TYPE_CHECKING:
    from janitor.admission.volume import Volume
    from janitor.commands.run import Preflight
    from janitor.doctor import Check
    from janitor.ledger.reservations import ReservationInfo
    from janitor.usage import SpaceRow, VolumeSpace

__all__ = [
    "BATCHALIGN_EXTRA",
    "SHOWN_RESERVATIONS",
    "bar",
    "notable",
    "render_checks",
    "render_preflight",
    "render_space",
    "render_status",
    "render_sweep",
    "sparkline",
    "within",
]

#: How to install the media fingerprint (blake3) that lets the pre-flight see cached inputs.
BATCHALIGN_EXTRA = "pip install 'space-janitor[batchalign]'"

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


def within(path: str, root: str) -> str:
    """``path`` relative to the tree ``root`` it lies in (``.`` for the root), else whole.

    A plain prefix test, no normalising: a name is shown as it is on disk.
    """
    if path == root or path == root.rstrip("/"):
        return "."
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) and len(path) > len(prefix) else path


def _section(title: str) -> Text:
    return Text(title, style="bold")


def _record(head: RenderableType, *details: RenderableType) -> RenderableType:
    """A record of a list layout: its heading line, then its details indented under it."""
    return Group(head, *(Indent(d) for d in details))


def _forecast(v: Volume) -> str:
    if v.eta_floor is not None:
        return f"floor in {format_duration(v.eta_floor)}"
    if v.fill_rate is not None and v.fill_rate < 0:
        return "freeing"
    if v.fill_rate is not None:
        return "steady"
    return "-"


def _level(v: Volume) -> Text:
    level = Text(v.level, style=_LEVEL_STYLE[v.level])
    if v.reason:
        level += Text(f" {v.reason}", style="dim")
    return level


#: A screen's section: its table (None when it does not fit), and the same as records.
_Section = tuple[Table | None, list[RenderableType]]

_VOLUME_COLUMNS = (
    Column("volume", cut=True, rank=1),
    Column("level"),
    Column("free", "right"),
    Column("floor", "right"),
    Column("reserved", "right"),
    Column("headroom", "right"),
    Column("free, last hour"),
    Column("forecast"),
)
_TREE_COLUMNS = (
    Column("tree", cut=True, rank=1),
    Column("role"),
    Column("usage", "right"),
    Column("quota", "right"),
    Column(""),
    Column("path", cut=True),
)
_RESERVATION_COLUMNS = (
    Column("id"),  # copied into `janitor release`: never cut
    Column("job", cut=True, rank=1),
    Column("tree", cut=True, rank=1),
    Column("bytes", "right"),
    Column("outstanding", "right"),
    Column("pid", "right"),
    Column("lapses in", "right"),
    Column("path", cut=True),
)


def _volumes(
    st: Status, samples: dict[int, list[tuple[float, int]]], width: int | None
) -> _Section:
    spark = {
        v.device: sparkline([f for _, f in samples.get(v.device, [])]) or "-" for v in st.volumes
    }
    rows = [
        (
            v.mount,
            _level(v),
            format_size(v.free),
            format_size(v.floor),
            format_size(v.reserved),
            format_size(v.headroom),
            spark[v.device],
            _forecast(v),
        )
        for v in st.volumes
    ]
    records = [
        _record(
            Line(Cut(v.mount, style="bold"), "  ", _level(v)),
            Phrases(
                f"free {format_size(v.free)}",
                f"floor {format_size(v.floor)}",
                f"reserved {format_size(v.reserved)}",
                f"headroom {format_size(v.headroom)}",
            ),
            Phrases(f"free, last hour {spark[v.device]}", f"forecast {_forecast(v)}", sep="; "),
        )
        for v in st.volumes
    ]
    return fit_table(_VOLUME_COLUMNS, rows, width), records


def _trees(st: Status, width: int | None) -> _Section:
    rows = [
        (
            t.name,
            t.role,
            format_size(t.usage),
            format_size(t.quota) if t.quota is not None else "-",
            bar(t.usage, t.quota),
            t.path + ("" if t.exists else " (missing)"),
        )
        for t in st.trees
    ]
    records: list[RenderableType] = []
    for t in st.trees:
        usage = Text(format_size(t.usage))
        if t.quota:
            usage += Text(f" of {format_size(t.quota)} ") + bar(t.usage, t.quota)
        records.append(
            _record(
                Line(Cut(t.name, style="bold"), f" ({t.role})"),
                usage,
                Line(Cut(t.path), "" if t.exists else " (missing)"),
            )
        )
    return fit_table(_TREE_COLUMNS, rows, width), records


def _reservations(st: Status, shown: Sequence[ReservationInfo], width: int | None) -> _Section:
    now = time.time()
    roots = {t.name: t.path for t in st.trees}

    def lapses(r: ReservationInfo) -> str:
        return "with its job" if r.job_id else format_duration(max(0.0, r.expires - now))

    def path(r: ReservationInfo) -> str:  # relative to its tree, whose folder Trees shows
        return within(r.path, roots[r.tree]) if r.path and r.tree in roots else r.path or "-"

    rows = [
        (
            r.id,
            r.job or "-",
            r.tree,
            format_size(r.bytes),
            format_size(r.outstanding),
            str(r.owner_pid),
            lapses(r),
            path(r),
        )
        for r in shown
    ]
    records = [
        _record(
            Text(r.id, style="bold red" if r.at_risk else "bold"),
            Phrases(
                f"on {r.tree}",
                f"job {r.job or '-'}",
                Text(f"at risk: {r.at_risk}", style="red") if r.at_risk else "",
            ),
            Phrases(
                format_size(r.bytes),
                f"{format_size(r.outstanding)} outstanding",
                f"pid {r.owner_pid}",
                "lapses " + ("with its job" if r.job_id else f"in {lapses(r)}"),
            ),
            Line(Cut(path(r))),
        )
        for r in shown
    ]
    styles = ["red" if r.at_risk else None for r in shown]
    return fit_table(_RESERVATION_COLUMNS, rows, width, styles), records


def _awaiting(st: Status) -> list[RenderableType]:
    """One line per tree holding entries awaiting use: how many, and what they hold."""
    by_tree: dict[str, list[int]] = {}
    for a in st.awaiting:
        by_tree.setdefault(a.mark.tree, []).append(a.bytes)
    return [
        Text(
            f"{len(sizes)} cache {'entry' if len(sizes) == 1 else 'entries'} awaiting use in "
            f"{tree} ({format_size(sum(sizes))}): probed or converted, not yet cut from; never "
            "evicted until a job cuts from them, their prober ends, or await_ttl passes",
            style="dim",
        )
        for tree, sizes in sorted(by_tree.items())
    ]


def render_status(
    st: Status,
    samples: dict[int, list[tuple[float, int]]] | None = None,
    width: int | None = None,
) -> RenderableType:
    """The status screen: volumes, trees, live reservations.

    Tables when they all fit ``width`` (None: not a terminal, so they fit, nothing cut);
    else a list, one record per volume, tree and reservation. A reservation's path is shown
    relative to its tree.
    """
    shown = notable(st.reservations)
    rest = len(st.reservations) - len(shown)
    title = "Reservations"
    if rest:
        title += f" ({len(shown)} of {len(st.reservations)}: at risk, largest, newest)"
    sections = [
        ("Volumes", _volumes(st, samples or {}, width)),
        ("Trees", _trees(st, width)),
    ]
    if shown:
        sections.append((title, _reservations(st, shown, width)))
    listed = any(table is None for _, (table, _) in sections)
    parts: list[RenderableType] = []
    for name, (table, records) in sections:
        parts.append(_section(name))
        parts.extend(records if listed or table is None else [table])
    if not shown:
        parts.append(Text("No live reservations.", style="dim"))
    parts.extend(_awaiting(st))
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


def render_sweep(
    data: dict[str, Any], now: float, width: int | None = None
) -> list[RenderableType]:
    """A sweep's plan or outcome (``SweepResult.as_dict()``), tree by tree.

    Each tree's line (usage, what would go or went), its folder, then its units with their
    paths relative to it: a table when it fits ``width`` (None: not a terminal, nothing cut),
    else one record per unit.
    """
    dry = data["dry_run"]
    by_tree: dict[str, list[dict[str, Any]]] = {}
    for it in data["items"]:
        by_tree.setdefault(it["tree"], []).append(it)
    cols = (
        Column("path", cut=True),
        Column("why"),
        Column("size", "right"),
        Column("last use", "right"),
        Column("result"),
    )

    def result(it: dict[str, Any]) -> Text:
        if dry:
            return Text("would delete")
        if it["deleted"]:
            return Text("deleted", style="green")
        return Text(f"kept: {it['skipped']}", style="yellow")

    tables: dict[str, Table | None] = {}
    for t in data["trees"]:
        items = by_tree.get(t["tree"], [])
        rows = [
            (
                within(it["path"], t["path"]),
                it["reason"],
                format_size(it["bytes"]),
                format_ago(now - it["last_use"]),
                result(it),
            )
            for it in items
        ]
        tables[t["tree"]] = fit_table(cols, rows, width) if rows else None
    listed = any(by_tree.get(name) and table is None for name, table in tables.items())
    parts: list[RenderableType] = []
    if data["items"]:
        parts.append(_section("Plan (dry run: nothing deleted)" if dry else "Swept"))
    for t in data["trees"]:
        kept = ", ".join(f"{v} {k}" for k, v in t["kept"].items())
        quota = f" of {format_size(t['quota'])}" if t["quota"] is not None else ""
        line = Phrases(
            f"{format_size(t['usage'])}{quota} in {plural(t['units'], 'unit')}",
            f"{'would free' if dry else 'planned'} {format_size(t['planned'])}",
            f"kept {kept}" if kept else "",
            "" if t["reaches_target"] else Text("cannot reach the low watermark", style="bold red"),
            sep="; ",
            head=Text(f"{t['tree']}:", style="bold"),
        )
        items = by_tree.get(t["tree"], [])
        if not items:
            parts.append(line)
            continue
        parts.append(_record(line, Line("in ", Cut(t["path"]))))
        table = tables[t["tree"]]
        if not listed and table is not None:
            parts.append(table)
            continue
        for it in items:
            parts.append(
                Indent(
                    _record(
                        Line(Cut(within(it["path"], t["path"]), style="bold")),
                        Phrases(
                            result(it),
                            it["reason"],
                            format_size(it["bytes"]),
                            f"last used {format_ago(now - it['last_use'])}",
                        ),
                    )
                )
            )
    if not dry:
        parts.append(
            Text(
                f"deleted {format_size(data['deleted_bytes'])}, free space grew by "
                f"{format_size(data['reclaimed_bytes'])}"
            )
        )
    return parts


def render_space(volumes: Sequence[VolumeSpace], width: int | None = None) -> list[RenderableType]:
    """``janitor space``: per volume, what takes its space, largest first, and what a sweep
    would free; a table when it fits ``width``, else one record per row."""
    cols = (
        Column("what", cut=True, rank=1),
        Column("size", "right"),
        Column("share", "right"),
        Column("managed", cut=True, rank=1),
        Column("sweep frees", "right"),
        Column("path", cut=True),
    )

    def managed(r: SpaceRow) -> str | Line:
        if not r.path:
            return "-"
        if not r.tree:
            return "no"
        return str(r.role) if r.tree == r.name else Line(f"{r.role} (", Cut(r.tree), ")")

    def share(v: VolumeSpace, r: SpaceRow) -> str:
        return f"{100 * r.bytes / v.used:.0f}%" if v.used else "-"

    tables = [
        fit_table(
            cols,
            [
                (
                    r.name,
                    format_size(r.bytes),
                    share(v, r),
                    managed(r),
                    format_size(r.frees) if r.frees else "-",
                    r.path or "",
                )
                for r in v.rows
            ],
            width,
        )
        for v in volumes
    ]
    listed = any(t is None for t in tables)
    parts: list[RenderableType] = []
    for v, table in zip(volumes, tables, strict=True):
        parts.append(
            Line(
                Cut(v.mount, style="bold"),
                f": {format_size(v.used)} used of {format_size(v.total)}, "
                f"{format_size(v.free)} free"
                + (f"; a sweep would free {format_size(v.frees)}" if v.frees else ""),
            )
        )
        if not listed and table is not None:
            parts.append(table)
            continue
        for r in v.rows:
            what = f"{format_size(r.bytes)} ({share(v, r)})"
            if r.tree:
                frees = format_size(r.frees) if r.frees else "nothing"
                what += f", {r.role} tree; a sweep frees {frees}"
            details: list[RenderableType] = [Text(what)]
            if r.path:
                details.append(Line(Cut(r.path)))
            name = Line(Cut(r.name, style="bold"))
            parts.append(Indent(_record(name, *details)))
    return parts


def render_preflight(pre: Preflight) -> list[RenderableType]:
    """A job's pre-flight: its media, then per volume what the job writes there against the
    volume's headroom, and what for (a record per volume, at any width)."""
    files = pre.files
    seconds = sum(f.duration_s or 0 for f in files)
    todo = sum(1 for f in files if f.converts and not f.cached and f.duration_s is not None)
    parts: list[RenderableType] = [
        Phrases(
            f"pre-flight: {plural(len(files), 'media file')}",
            f"{format_duration(seconds)} of audio",
            f"{todo} to convert into the media cache",
            f"{pre.concurrency} at once",
            sep="; ",
        )
    ]
    for v in pre.volumes:
        verdict = (
            Text("fits", style="green")
            if v.fits
            else Text(f"short by {format_size(v.needs - v.headroom)}", style="bold red")
        )
        parts.append(
            _record(
                Line(
                    Cut(v.mount, style="bold"),
                    f": the job writes {format_size(v.needs)}, headroom "
                    f"{format_size(v.headroom)}: ",
                    verdict,
                ),
                *(Text(w) for w in v.what),
            )
        )
    if todo and not pre.knows_cache:
        # The command on a line of its own, whole, to be copied (never taken as markup).
        parts.append(
            _record(
                Text(
                    "blake3 is not installed: inputs already in the media cache are counted as "
                    "still to convert. To recognise them, install the fingerprint extra:",
                    style="yellow",
                ),
                Line(BATCHALIGN_EXTRA),
            )
        )
    parts.extend(Text(f"skipped {f.media}: {f.error}", style="yellow") for f in files if f.error)
    return parts


_VERDICT_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def render_checks(checks: Iterable[Check]) -> list[RenderableType]:
    """doctor's findings: a line per check, and its fix under it unless it passed.

    The verdicts make a column of their own: what runs past the line goes on under the
    message, not under the verdict, and breaks between words (a path moves whole).
    """
    parts: list[RenderableType] = []
    for c in checks:
        verdict = Text(f"{c.verdict:>4}  ", style=_VERDICT_STYLE[c.verdict])
        parts.append(Indent(Text(f"{c.name}: {c.message}", overflow="fold"), 6, verdict))
        if c.fix and c.verdict != "ok":
            parts.append(Indent(Text(f"fix: {c.fix}", style="dim", overflow="fold"), 6))
    return parts
