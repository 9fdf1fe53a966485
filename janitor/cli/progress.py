"""Progress lines on a terminal's stderr while a long step runs; nothing when it is not a terminal.

Each returns ``(update, stop)``: ``update`` goes to the library call as its progress callback
(None when there is no terminal), ``stop`` is called when the step ends. rich loads only for a
terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["probe_progress", "scan_progress"]


def _none() -> None:
    pass


def scan_progress() -> tuple[Callable[[str, int], None] | None, Callable[[], None]]:
    """A spinner with the count of entries scanned, per tree (for a sweep)."""
    if not sys.stderr.isatty():
        return None, _none
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn

    bar = Progress(
        SpinnerColumn(),
        # Not markup: a tree's name is printed as it is, brackets and all.
        TextColumn("scanning {task.fields[tree]}: {task.completed:,} entries", markup=False),
        console=Console(stderr=True),
        transient=True,
    )
    tasks: dict[str, Any] = {}
    bar.start()

    def update(tree: str, n: int) -> None:
        if tree not in tasks:
            tasks[tree] = bar.add_task("scan", tree=tree, total=None)
        bar.update(tasks[tree], completed=n)

    return update, bar.stop


def probe_progress() -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A bar of the media files probed so far (for a pre-flight)."""
    if not sys.stderr.isatty():
        return None, _none
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(
        TextColumn("probing media"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("probe", total=None)
    bar.start()

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return update, bar.stop
