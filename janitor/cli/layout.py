"""How the CLI's screens fit the place they are read: a terminal's width, or a pipe's none.

In a terminal, a table is used when it fits the width with its long names (paths, tree names)
cut in the middle, keeping their start and their distinctive end; when it cannot, the screen
lists one record per block instead. Into a pipe or a file (``| less``, a log) nothing is cut
and nothing is wrapped: every line is as long as what it says.

Every string reaches rich as :class:`~rich.text.Text`, never as markup, so a name or a hint
that holds square brackets (``pip install 'space-janitor[batchalign]'``) prints as it is.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.style import StyleType

__all__ = [
    "ELLIPSIS",
    "MIN_CUT",
    "UNBOUNDED",
    "Column",
    "Cut",
    "Indent",
    "Line",
    "Phrases",
    "fit_table",
    "layout_width",
    "middle_cut",
    "screen",
]

#: What stands for the cut-out middle of a name.
ELLIPSIS = "…"
#: The fewest cells a cut name keeps (its start, the ellipsis, its end).
MIN_CUT = 20
#: The width of a console that is not a terminal: wider than any line, so none is cut or wrapped.
UNBOUNDED = 1 << 20


def screen(*, stderr: bool = False) -> Console:
    """A console for what a person reads on stdout (or stderr).

    A terminal gets its own width (``COLUMNS`` if set). Anything else, a pipe or a file, gets
    an unbounded width whatever ``COLUMNS`` says: a log or ``less`` shows every line whole.
    Colors follow rich's rules (none into a pipe unless ``FORCE_COLOR``).
    """
    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a real stream
        tty = False
    if tty:
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=UNBOUNDED)


def layout_width(console: Console) -> int | None:
    """The width a screen must fit, or None when it has none (not a terminal)."""
    return None if console.width >= UNBOUNDED else console.width


def middle_cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, its middle replaced by ``…`` if it must be cut.

    The start and the end are kept, the end getting the odd cell: names that share a long
    prefix (``/tmp/newuser/trees/job…``) still differ where they differ, at their ends.
    """
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    room = width - cell_len(ELLIPSIS)
    head_room = room // 2
    head, used = [], 0
    for ch in text:
        w = cell_len(ch)
        if used + w > head_room:
            break
        head.append(ch)
        used += w
    tail_room, tail = room - used, []
    used = 0
    for ch in reversed(text):
        w = cell_len(ch)
        if used + w > tail_room:
            break
        tail.append(ch)
        used += w
    return "".join(head) + ELLIPSIS + "".join(reversed(tail))


@dataclass(frozen=True, slots=True)
class Cut:
    """A part of a :class:`Line` that may be cut in its middle, down to ``least`` cells."""

    text: str
    style: StyleType = ""
    least: int = MIN_CUT

    @property
    def width(self) -> int:
        return cell_len(self.text)

    @property
    def floor(self) -> int:
        """The narrowest it gets: ``least`` cells, or all of it when it is shorter."""
        return min(self.width, self.least)


class Line:
    """One line of parts: strings and :class:`~rich.text.Text` kept whole, :class:`Cut` parts
    shortened in their middle (the longest first) when the line is wider than its room.

    In a table cell its room is the column's width; rich gives a line the room it measures
    (:meth:`__rich_measure__`: the whole parts plus each cut part's floor, up to all of it).
    What is still too wide once every cut part is at its floor folds onto the next line.
    """

    def __init__(self, *parts: str | Text | Cut, style: StyleType = "") -> None:
        self.parts = parts
        self.style = style

    def _whole(self) -> int:
        return sum(p.width if isinstance(p, Cut) else cell_len(str(p)) for p in self.parts)

    def text(self, width: int | None = None) -> Text:
        """The line as one Text, cut to ``width`` cells where it can be (None: whole)."""
        cuts = [p for p in self.parts if isinstance(p, Cut)]
        widths = {id(c): c.width for c in cuts}
        excess = 0 if width is None else self._whole() - width
        while excess > 0:  # take a cell from the widest part that can still give one
            shrinkable = [c for c in cuts if widths[id(c)] > c.floor]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda c: widths[id(c)])
            widths[id(widest)] -= 1
            excess -= 1
        out = Text(style=self.style, overflow="fold")
        for p in self.parts:
            if isinstance(p, Cut):
                out.append(middle_cut(p.text, widths[id(p)]), style=p.style)
            else:
                out.append(p)
        return out

    def __str__(self) -> str:
        return self.text().plain

    def span(self) -> tuple[int, int]:
        """(narrowest, whole) cells: every cut part at its floor, and nothing cut."""
        whole = self._whole()
        return whole - sum(p.width - p.floor for p in self.parts if isinstance(p, Cut)), whole

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(*self.span())

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.text(options.max_width)


class Phrases:
    """Phrases joined by ``sep`` that wrap only between phrases: ``2 d 3 h ago`` or
    ``40 KiB`` never ends one line and goes on on the next. ``head`` comes first, followed
    by a space (``media:`` then ``48 KiB in 3 units; would free ...``). A phrase wider than
    the whole line folds. Empty phrases are left out."""

    def __init__(self, *phrases: str | Text, sep: str = ", ", head: str | Text = "") -> None:
        texts = [Text(p) if isinstance(p, str) else p for p in phrases if p]
        #: Each piece with what goes before it when it stays on the same line.
        self.pieces: list[tuple[str, Text]] = (
            [("", Text(head) if isinstance(head, str) else head)] if head else []
        )
        self.pieces += [
            (" " if head and not i else sep if i else "", t) for i, t in enumerate(texts)
        ]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((t.cell_len for _, t in self.pieces), default=0)
        whole = sum(cell_len(before) + t.cell_len for before, t in self.pieces)
        return Measurement(widest, whole)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        out = Text(overflow="fold")
        used = 0
        for i, (before, piece) in enumerate(self.pieces):
            if i and used + cell_len(before) + piece.cell_len > width:
                out.append(before.rstrip() + "\n")
                used = 0
            else:
                out.append(before)
                used += cell_len(before)
            out.append_text(piece)
            used += piece.cell_len
        yield out


class Indent:
    """``body`` indented: its first line after ``first``, the lines it wraps onto (or has)
    after ``rest`` spaces. Unlike rich's Padding it adds no spaces at the ends of lines,
    which a log or ``grep`` would carry."""

    def __init__(
        self, body: RenderableType, rest: int = 2, first: str | Text | None = None
    ) -> None:
        self.body = body
        self.rest = rest
        self.first = (
            Text(" " * rest) if first is None else Text(first) if isinstance(first, str) else first
        )

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        inner = Measurement.get(
            console, options.update_width(max(1, options.max_width - self.rest)), self.body
        )
        return Measurement(inner.minimum + self.rest, inner.maximum + self.rest)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width - self.rest)
        lines = console.render_lines(self.body, options.update_width(width), pad=False)
        pad = Segment(" " * self.rest)
        for i, line in enumerate(lines):
            if i == 0:
                yield from self.first.render(console)
            else:
                yield pad
            yield from line
            yield Segment.line()


Cell = str | Text | Line


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: its header, how it is justified, whether its cells may be cut."""

    header: str
    justify: Literal["left", "right"] = "left"
    #: Its cells are names or paths (strings): cut in the middle when the table needs room.
    cut: bool = False
    #: Of the columns that may be cut, those with the lower rank give up their cells first:
    #: a path (0) before a name that says what the row is (1).
    rank: int = 0


def _cell(value: Cell, column: Column) -> Text | Line:
    if isinstance(value, Line):
        return value
    if column.cut and isinstance(value, str):
        return Line(Cut(value))
    return Text(value) if isinstance(value, str) else value


def _span(value: Text | Line) -> tuple[int, int]:
    """(narrowest, whole) cells of a cell's content: a Line cut to its floor; a Text whole."""
    if isinstance(value, Line):
        return value.span()
    widest = max((cell_len(line) for line in value.plain.split("\n")), default=0)
    return widest, widest


def _allocate(
    columns: Sequence[Column], body: Sequence[Sequence[Text | Line]], room: int
) -> list[int] | None:
    """Each column's width within ``room`` cells, or None when they cannot fit.

    Every column starts whole (its header included); then, lowest rank first, the widest
    column that may be cut gives up a cell at a time, down to its floor.
    """
    widths, floors = [], []
    for i, col in enumerate(columns):
        spans = [_span(r[i]) for r in body]
        header = cell_len(col.header)
        widths.append(max([header, *(whole for _, whole in spans)]))
        floors.append(max([header, *(least for least, _ in spans)]))
    excess = sum(widths) - room
    for rank in sorted({c.rank for c in columns if c.cut}):
        same = [i for i, c in enumerate(columns) if c.cut and c.rank == rank]
        while excess > 0:
            can = [i for i in same if widths[i] > floors[i]]
            if not can:
                break
            widest = max(can, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
    return None if excess > 0 else widths


def fit_table(
    columns: Sequence[Column],
    rows: Iterable[Sequence[Cell]],
    width: int | None,
    styles: Sequence[StyleType | None] = (),
) -> Table | None:
    """A table of ``rows`` that fits ``width`` with every header on one line, or None.

    Columns that may not be cut keep their whole text; the others (names, paths) are cut in
    the middle, paths before names, never below :data:`MIN_CUT` cells. None when even that
    is too wide: the caller lists the records instead. ``width`` None (not a terminal):
    always a table, nothing cut. ``styles`` style the rows, in order.
    """
    body = [[_cell(v, c) for v, c in zip(row, columns, strict=True)] for row in rows]
    widths: list[int | None] = [None] * len(columns)
    if width is not None:
        # the box's edges and separators, and a cell of padding each side of every cell
        fitted = _allocate(columns, body, width - (3 * len(columns) + 1))
        if fitted is None:
            return None
        widths = list(fitted)
    table = Table()
    for col, w in zip(columns, widths, strict=True):
        table.add_column(
            Text(col.header, overflow="ellipsis"),
            justify=col.justify,
            no_wrap=not col.cut,
            overflow="fold" if col.cut else "ellipsis",
            width=w,
        )
    for i, r in enumerate(body):
        table.add_row(*r, style=styles[i] if i < len(styles) else None)
    return table
