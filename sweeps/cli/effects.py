"""``sweeps effects`` and ``sweeps confirm``: the answers with error bars, computed by the tool.

- ``effects`` (``sweeps.effects``): per factor and level, mean ± sd, the difference to the
  baseline paired by seed with its interval, a Holm-corrected p-value and a plain verdict;
- ``confirm`` (``sweeps.confirm``): the best configurations of a finished study re-run with
  fresh seeds through the same run pipeline and engines as ``sweeps run`` (``sweeps.pipeline``:
  the same checks; ``--engine slurm`` runs them as Slurm jobs), then ranked with intervals.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lm.errors import SweepsError
from sweeps.cli.options import (
    AddressOption,
    EngineOption,
    GraceOption,
    HeartbeatOption,
    LauncherOption,
    MaxConcurrentOption,
    RunsDirOption,
    StorageOption,
)
from sweeps.cli.slurm import (
    AccountOption,
    GpusPerJobOption,
    JobsOption,
    PartitionOption,
    QosOption,
    SbatchArgOption,
    TimeOption,
)
from sweeps.console import plain, wide_console
from sweeps.heartbeats import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S

if TYPE_CHECKING:
    from sweeps.confirm import Plan
    from sweeps.replicates import Ranking

app = typer.Typer()

MetricOption = Annotated[
    str | None,
    typer.Option(
        "--metric", help="The trial metric to compare [default: the study's first objective]."
    ),
]


@app.command()
def effects(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="The study's name.")],
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            metavar="FIELD=VALUE[,...]",
            help="The configuration to compare against [default: an ablation study's baseline].",
        ),
    ] = None,
    metric: MetricOption = None,
    level: Annotated[
        float,
        typer.Option(
            "--level", help="Significance level of the verdicts, after Holm's correction."
        ),
    ] = 0.05,
    stopped: Annotated[
        str,
        typer.Option(
            "--stopped",
            metavar="apart|as-value",
            help="Stopped seeds: counted apart (named, tested as a failure rate, left out of the "
            "paired test), or compared on their last evaluation.",
        ),
    ] = "apart",
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
    result = fx.study_effects(
        resolve_storage_url(storage, None),
        study,
        baseline=baseline,
        metric=metric,
        level=level,
        stopped=stopped,
    )
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2))
    elif markdown:
        typer.echo(fx.markdown(result), nl=False)
    else:
        print_table(
            f"effects on {result.metric} in study {study} ({result.direction})",
            fx.table_rows(result),
        )
        for line in fx.footer_lines(result):
            typer.echo(plain(line))


def print_table(title: str, rows: list[dict[str, str]]) -> None:
    from rich.table import Table

    table = Table(box=None, padding=(0, 2), title=plain(title), title_justify="left")
    for col in rows[0]:
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(plain(v) for v in r.values()))
    wide_console().print(table)


@app.command()
def confirm(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="The finished study.")],
    top: Annotated[int, typer.Option("--top", help="How many of its best configurations.")] = 3,
    seeds: Annotated[int, typer.Option("--seeds", help="Fresh seeds per configuration.")] = 5,
    level: Annotated[
        float, typer.Option("--level", help="Significance level of best against runner-up.")
    ] = 0.05,
    metric: MetricOption = None,
    storage: StorageOption = None,
    max_concurrent: MaxConcurrentOption = None,
    engine: EngineOption = None,
    address: AddressOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    launcher: LauncherOption = "auto",
    heartbeat: HeartbeatOption = HEARTBEAT_INTERVAL_S,
    grace: GraceOption = GRACE_PERIOD_S,
    partition: PartitionOption = None,
    time_limit: TimeOption = None,
    jobs: JobsOption = None,
    gpus_per_job: GpusPerJobOption = None,
    account: AccountOption = None,
    qos: QosOption = None,
    sbatch_arg: SbatchArgOption = None,
) -> None:
    """Re-run the best configurations of STUDY with fresh seeds (study STUDY-confirm, resumable),
    then rank them with intervals: is the best distinguishable from the runner-up?"""
    from sweeps import confirm as cf
    from sweeps import pipeline
    from sweeps import study as service
    from sweeps.cli import slurm as slurm_cli
    from sweeps.cli.progress import drive
    from sweeps.console import err_console
    from sweeps.engines import EngineOptions
    from sweeps.storage import mask_url, resolve_storage_url

    cf.check_options(top, seeds, level)
    args = pipeline.RunArgs(max_concurrent, None, runs_dir, launcher, heartbeat, grace)
    args.check()
    slurm_values = slurm_cli.cli_values(
        partition, time_limit, jobs, gpus_per_job, account, qos, sbatch_arg
    )
    url = resolve_storage_url(storage, None)
    plan = cf.plan(url, study, top=top, seeds=seeds, metric=metric)
    spec = plan.spec
    # As `sweeps run`: --engine, else the source spec's [engine] name, else this machine.
    _, chosen = pipeline.engine_for(engine, spec, EngineOptions(address, slurm_values))
    pipeline.prepare(spec, chosen, args)
    st, opened, created = service.open_study(
        spec, url, n_trials=None, heartbeat=heartbeat, grace=grace
    )
    cf.link(st, opened, plan)
    err_console.print(
        f"{'created' if created else 'resuming'} study {plan.name!r} in "
        f"{mask_url(url)}: {len(plan.configs)} configurations x seeds "
        f"{', '.join(map(str, plan.seeds))}",
        highlight=False,
        markup=False,
    )
    drive(chosen, pipeline.job(spec, st, opened, url, args))
    for ranking in cf.rankings(url, plan.name, metric=plan.metric, level=level):
        print_ranking(plan, ranking)


def print_ranking(plan: Plan, ranking: Ranking) -> None:
    rows = [
        {
            "rank": str(i + 1),
            "config": r["config"],
            "n": str(r["n"]),
            f"{ranking.metric} mean [95% CI]": f"{r['mean']:.4f} [{r['low']:.4f}, {r['high']:.4f}]",
            "seeds": ", ".join(map(str, r["seeds"])),
        }
        for i, r in ranking.rows.iterrows()
    ]
    if rows:
        print_table(f"confirmation of {plan.source} ({ranking.metric}, {ranking.direction})", rows)
    typer.echo(ranking.sentence())
    if ranking.metric == plan.metric and len(ranking.rows):
        # Did the source study's winner (often one lucky seed) stay the winner?
        winner = plan.configs[0]["config"]
        place = (
            list(ranking.rows["config"]).index(winner) + 1
            if winner in set(ranking.rows["config"])
            else None
        )
        typer.echo(
            f"{plan.source}'s best ({winner}) ranks {place} of {len(ranking.rows)} with fresh seeds"
            if place
            else f"{plan.source}'s best ({winner}) has no complete confirmation trial yet"
        )
