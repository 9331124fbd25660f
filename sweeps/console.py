"""Terminal output shared by the CLI commands: progress bars and key/value summaries, and the
one rule for text from outside the program on a terminal.

Study names, trial reasons, parameter values and samples come from a database that others write
to. Printed raw, ``\x1b]0;TITLE\x07`` retitles the terminal and other escape sequences move the
cursor, erase lines or fake output; read as rich markup, ``[/x]`` crashes the command. So every
control character (C0, DEL, C1) is shown escaped, as visible text (``\x1b``; the rule is
``sweeps.text.escape_controls``, which the report uses too): ``console`` and
``err_console`` do it to every string they render (``render_str``: print arguments, table cells
and titles), keeping newlines and tabs, which rich lays out itself; ``plain`` makes a value one
line and markup-free for a table cell; ``write_line`` is the same rule for plain stream writes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console
from rich.markup import escape as escape_markup
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from sweeps.text import escape_controls as escape_controls  # the display rule; for the CLI


def plain(value: object) -> str:
    """A value from outside the program as one line of a rich table or print, shown as is:
    control characters escaped, ``[...]`` never read as markup."""
    return escape_markup(escape_controls(str(value)))


def write_line(text: str, stream: IO[str] | None = None) -> None:
    """One line to ``stream`` (stderr) without rich, control characters escaped."""
    (stream or sys.stderr).write(escape_controls(text) + "\n")


class _SafeConsole(Console):
    """A rich console that escapes control characters in every string it renders."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(escape_controls(text, keep_newlines=True), **kwargs)


console = _SafeConsole()
err_console = _SafeConsole(stderr=True)


def wide_console() -> Console:
    """``console``, but not wrapped to 80 columns when stdout is a pipe or a file (tables)."""
    return console if console.is_terminal else _SafeConsole(width=250)


@contextmanager
def progress_bar(description: str, *, unit: str = "bytes") -> Iterator[Callable[[int, int], None]]:
    """A progress bar driven by a ``(done, total)`` callback; silent when stderr is not a TTY."""
    columns = [TextColumn("{task.description}"), BarColumn()]
    columns.append(DownloadColumn() if unit == "bytes" else MofNCompleteColumn())
    columns.append(TimeRemainingColumn())
    with Progress(
        *columns, console=err_console, transient=True, disable=not sys.stderr.isatty()
    ) as bar:
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
    table = Table(
        title=plain(title), show_header=False, title_justify="left", box=None, padding=(0, 2)
    )
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(plain(key), plain(_format(value)))
    console.print(table)


def _format(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e3 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def human_count(value: float) -> str:
    """450,123 -> 450k; 1,234,567 -> 1.23M (for bytes of text in one line)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"
