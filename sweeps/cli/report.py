"""``sweeps report`` and ``sweeps export``: a study, from the database alone, as one HTML file of
trade-off charts, or as a table (CSV, Parquet, JSON) with one row per trial.

pandas and plotly are imported inside the commands, so ``sweeps --help`` stays fast.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lm.errors import SweepsError
from lm.files import output_target, write_output
from sweeps.cli.options import StorageOption
from sweeps.console import human_bytes, print_summary
from sweeps.text import escape_controls

if TYPE_CHECKING:
    from sweeps.charts import Chart
    from sweeps.results import StudyResults

app = typer.Typer()

FORMATS = ("csv", "parquet", "json")

StudyArgument = Annotated[str, typer.Argument(help="The study's name.")]


@app.command()
def report(
    studies: Annotated[
        list[str],
        typer.Argument(
            metavar="STUDY...",
            help="The study's name; several: one report with the studies on the same axes.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="The HTML file to write [default: STUDY.html, or A_vs_B.html]."),
    ] = None,
    storage: StorageOption = None,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            help="Also write each chart as DIR/<chart>.png (needs `pip install kaleido`) "
            "[default: none].",
        ),
    ] = None,
    color_by: Annotated[
        str | None,
        typer.Option(
            "--color-by",
            metavar="FIELD",
            help="Colour learning curves, the vocabulary chart and the Pareto points by this field "
            "(a parameter or a config field) [default: the ablation's factor; in a search, the "
            "most important parameter].",
        ),
    ] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Serve the report on 127.0.0.1 instead of writing it, rebuilt as trials "
            "finish; the page refreshes itself; Ctrl-C stops.",
        ),
    ] = False,
    port: Annotated[
        int, typer.Option("--port", help="The port of --serve [default: 0, a free one, printed].")
    ] = 0,
) -> None:
    """Write the study's trade-off report: one self-contained HTML file that works offline
    (several studies: their Pareto fronts, vocabulary and learning curves overlaid); or, with
    --serve, a live view of it."""
    from sweeps import report as report_mod
    from sweeps.storage import resolve_storage_url

    if color_by is not None and len(studies) > 1:
        raise SweepsError(
            "--color-by colours one study's report; a report of several studies "
            "is coloured by study (leave out --color-by, or name one study)"
        )
    if serve:
        from sweeps import serve as serve_mod

        if out is not None or png is not None:
            raise SweepsError(
                "--serve serves the report instead of writing it; leave out --out "
                "and --png (or run `sweeps report` again without --serve)"
            )
        live = serve_mod.live_report(resolve_storage_url(storage, None), studies, color_by=color_by)
        serve_mod.serve(live, port=serve_mod.check_port(port), say=typer.echo)
        return
    if png is not None and importlib.util.find_spec("kaleido") is None:
        raise SweepsError(
            "--png needs the kaleido package, which is not installed; "
            "run `pip install kaleido` or leave out --png"
        )
    out = out or Path("_vs_".join(studies) + ".html")
    started = time.perf_counter()
    url = resolve_storage_url(storage, None)
    charts, data = (
        report_mod.write(url, studies[0], out, color_by=color_by)
        if len(studies) == 1
        else report_mod.write_many(url, studies, out)
    )
    pngs = report_mod.write_pngs(charts, png) if png is not None else []
    rows = _summary_rows(charts, data)
    if pngs:
        rows.append(("images", f"{len(pngs)} in {png}"))
    rows += [
        ("size", human_bytes(out.stat().st_size)),
        ("time", f"{time.perf_counter() - started:.2f} s"),
    ]
    print_summary(f"report {out}", rows)


def _summary_rows(charts: list[Chart], data: StudyResults) -> list[tuple[str, object]]:
    """What a written report holds, for its summary: the study, its trials by outcome, the
    charts drawn, the notes shown instead, and the charts left out with why."""
    counts = data.trials["outcome"].value_counts()
    rows: list[tuple[str, object]] = [
        ("study", data.name),
        ("storage", data.storage),
        ("trials", ", ".join(f"{o} {n}" for o, n in counts.items()) or "none"),
        ("charts", ", ".join(c.key for c in charts if c.figure is not None or c.html)),
    ]
    notes = [c.key for c in charts if c.note and c.error is None]
    if notes:
        rows.append(("notes instead of charts", ", ".join(notes)))
    # A chart that raised: the report is written without it, and says why (sweeps.report.draw).
    rows += [
        ("left out, could not be drawn", f"{c.key}: {c.error}")
        for c in charts
        if c.error is not None
    ]
    return rows


@app.command()
def export(
    study: StudyArgument,
    format: Annotated[str, typer.Option("--format", help="csv, parquet or json.")] = "csv",
    out: Annotated[
        Path | None,
        typer.Option("--out", help="The file to write [default: stdout; parquet: STUDY.parquet]."),
    ] = None,
    storage: StorageOption = None,
) -> None:
    """Export the study's trials, one row per trial (the table the report's charts read)."""
    if format not in FORMATS:
        raise SweepsError(f"--format {format!r} is not supported; use one of {', '.join(FORMATS)}")
    if format == "parquet" and not any(
        importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet")
    ):
        raise SweepsError(
            "--format parquet needs the pyarrow package, which is not installed; "
            "run `pip install pyarrow` or use --format csv"
        )
    from sweeps.results import study_frame
    from sweeps.storage import resolve_storage_url

    if format == "parquet" and out is None:
        out = Path(f"{study}.parquet")
    if out is not None:
        output_target(out)  # a bad --out is refused before any work
    frame = study_frame(resolve_storage_url(storage, None), study)
    if format == "csv":
        text = frame.to_csv(index=False)
    elif format == "json":
        # ISO dates; NaN/NA as null: strict JSON, one object per trial.
        text = frame.to_json(orient="records", date_format="iso", double_precision=15) + "\n"
    if out is None:
        # To a pipe or a file the data go as stored; to a terminal, a reason's ESC would drive
        # it (retitle, clear): escaped there, as everything else the CLI shows.
        sys.stdout.write(escape_controls(text, keep_newlines=True) if sys.stdout.isatty() else text)
        return
    if format == "parquet":
        write_output(out, lambda f: frame.to_parquet(f, index=False))
    else:
        write_output(out, lambda f: f.write(text.encode("utf-8")))
    typer.echo(
        f"wrote {len(frame)} trials x {frame.shape[1]} columns to {out} "
        f"({human_bytes(out.stat().st_size)})",
        err=True,
    )
