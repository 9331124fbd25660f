"""Terminal output shared by the CLI commands: progress bars and key/value summaries."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


@contextmanager
def progress_bar(description: str, *, unit: str = "bytes") -> Iterator[Callable[[int, int], None]]:
    """A progress bar driven by a ``(done, total)`` callback; silent when stderr is not a TTY."""
    columns = [TextColumn("{task.description}"), BarColumn()]
    columns.append(DownloadColumn() if unit == "bytes" else MofNCompleteColumn())
    columns.append(TimeRemainingColumn())
    with Progress(*columns, console=err_console, transient=True,
                  disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def print_summary(title: str, rows: list[tuple[str, object]]) -> None:
    """A two-column table: what, value."""
    table = Table(title=title, show_header=False, title_justify="left", box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, _format(value))
    console.print(table)


def _format(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e3 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
