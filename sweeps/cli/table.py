"""``sweeps table export``: finished trials of grid studies, whole curves and all, in one compact
file (``sweeps.table``: gzip'd JSON lines), the input of ``sweeps run --engine replay --table``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sweeps.cli.options import StorageOption, refuse_existing
from sweeps.console import err_console

app = typer.Typer()
table_app = typer.Typer(
    help="Tabulated benchmarks: recorded trials a study can be replayed on.",
    no_args_is_help=True,
)
app.add_typer(table_app, name="table")


@table_app.command("export")
def export(
    studies: Annotated[
        list[str], typer.Argument(metavar="STUDY...", help="The studies whose trials to write.")
    ],
    out: Annotated[Path, typer.Option("--out", help="The table file to write (.jsonl.gz).")],
    storage: StorageOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """Write the studies' finished trials (points, seeds, every evaluation and cooldown read,
    memory, FLOPs, seconds, outcomes) to a table for the replay engine."""
    from sweeps import table
    from sweeps.storage import resolve_storage_url

    refuse_existing(out, force)
    written, missing = table.export(resolve_storage_url(storage, None), studies, out)
    note = f"; {missing} had no run dir to read their cooldown reads from" if missing else ""
    err_console.print(
        f"wrote {out}: {written} trials of {', '.join(studies)}{note}",
        highlight=False,
        markup=False,
        soft_wrap=True,  # a path is never broken across lines
    )
