"""``sweeps effects``: the answer an ablation exists for, computed by the tool
(``sweeps.effects``): per factor and level, mean ± sd, the difference to the baseline paired by
seed with its interval, a Holm-corrected p-value and a plain verdict."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from lm.errors import SweepsError
from sweeps.cli.options import StorageOption
from sweeps.console import plain, wide_console

app = typer.Typer()

LevelOption = Annotated[float, typer.Option(
    "--level", help="Significance level of the verdicts (after Holm's correction).")]
MetricOption = Annotated[str | None, typer.Option(
    "--metric", help="The trial metric to compare [default: the study's first objective].")]


@app.command()
def effects(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="The study's name.")],
    baseline: Annotated[str | None, typer.Option(
        "--baseline", metavar="FIELD=VALUE[,...]",
        help="The configuration to compare against [default: an [ablation] study's baseline]."
    )] = None,
    metric: MetricOption = None,
    level: LevelOption = 0.05,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    storage: StorageOption = None,
) -> None:
    """Per factor and level: n, mean ± sd, the difference to the baseline paired by seed (95 %
    interval), a Holm-corrected paired-test p-value and a verdict."""
    from sweeps import effects as fx
    from sweeps.storage import resolve_storage_url

    if markdown and as_json:
        raise SweepsError("--markdown and --json are exclusive; give one")
    result = fx.study_effects(resolve_storage_url(storage, None), study, baseline=baseline,
                              metric=metric, level=level)
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2))
    elif markdown:
        typer.echo(fx.markdown(result), nl=False)
    else:
        print_table(f"effects on {result.metric} in study {study} ({result.direction})",
                    fx.table_rows(result))


def print_table(title: str, rows: list[dict[str, str]]) -> None:
    from rich.table import Table

    table = Table(box=None, padding=(0, 2), title=plain(title), title_justify="left")
    for col in rows[0]:
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(plain(v) for v in r.values()))
    wide_console().print(table)
