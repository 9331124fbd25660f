"""``sweeps estimate``: a run's predicted peak memory term by term, or which points of a study fit.

    sweeps estimate --vocab-size 300 --tokenizer word --d-model 200 --n-layers 1 --d-ff 800 \\
        --seq-len 254 --batch-size 1000 --precision fp32 [--device cpu|cuda] [--budget 16GiB]
    sweeps estimate studies/attention_memory.toml --budget 16GiB

No corpus is needed (the estimate is arithmetic); when ``--corpus`` names a prepared corpus
whose token cache exists, its token counts refine the small data term. The memory model is
documented in ``lm/memory.py``; what a budget means in bytes in ``sweeps/spec/limits.py``
(``MemoryBudget``); fitting and calibration in ``sweeps/preflight.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from lm import host
from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import plan
from sweeps.cli.options import ConfigFileOption, train_config, warn, with_config_options
from sweeps.console import console, human_bytes, wide_console

app = typer.Typer()

#: The exit code when the configuration does not fit the budget (or no point of a study does):
#: not 2, which is a mistake in the input, so a script can tell "too big" from "malformed".
NO_FIT_EXIT_CODE = 1

#: Placeholder corpus for a config that names none (the estimate does not read data).
NO_CORPUS = "(no corpus)"


@app.command()
@with_config_options(TrainConfig, panel="Model and training")
def estimate(
    overrides: dict[str, Any],
    spec_path: Annotated[
        Path | None,
        typer.Argument(metavar="[SPEC]", help="A study spec: a feasibility table of its space."),
    ] = None,
    config: ConfigFileOption = None,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            help="Memory budget: a size (16GiB), auto or none "
            "[default: the spec's limits.memory_budget, else auto].",
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers", help="Trials sharing the device: an auto budget is its room split N ways."
        ),
    ] = 1,
    launcher: Annotated[
        str, typer.Option("--launcher", help="How CPU children start: subprocess or fork.")
    ] = "subprocess",
    samples: Annotated[
        int, typer.Option("--samples", help="Points sampled when the space has no small grid.")
    ] = 50,
    sample_seed: Annotated[int, typer.Option("--sample-seed", help="Seed of that sample.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Predict peak training memory, every term with its formula, against a budget. Exits 1
    when the configuration does not fit the budget (a study: when none of its points does)."""
    if workers < 1:
        raise SweepsError(f"--workers must be >= 1, got {workers}")
    if samples < 1:
        raise SweepsError(f"--samples must be >= 1, got {samples}")
    if launcher not in ("subprocess", "fork"):
        raise SweepsError(f"--launcher must be subprocess or fork, got {launcher!r}")
    if spec_path is not None:
        if config is not None:
            raise SweepsError("give either a study spec or --config, not both")
        from sweeps.spec import load_spec
        from sweeps.study import budget_warnings

        spec = load_spec(spec_path, check_paths=False)  # once: a spec may list 100,000 choices
        table = plan.feasibility(spec, overrides, budget, workers, launcher, samples, sample_seed)
        warn(budget_warnings(spec, overrides))
        if as_json:
            typer.echo(json.dumps(table, indent=2))
        else:
            _print_feasibility(table)
        if table["rows"] and not table["fit"]:
            raise typer.Exit(NO_FIT_EXIT_CODE)  # not one trial of this study could run
        return
    from sweeps import preflight

    cfg = train_config(config, overrides, corpus=NO_CORPUS)
    warn(cfg.budget_warnings())
    device = host.device_kind(cfg.device)
    est = preflight.memory_estimate(cfg, device, launcher=launcher)
    budget_bytes = plan.budget_bytes(budget, None, device, workers)
    fits = budget_bytes is None or est.total <= budget_bytes
    if as_json:
        out = est.to_dict()
        out.update(budget_bytes=budget_bytes, fits=fits)
        typer.echo(json.dumps(out, indent=2))
    else:
        _print_estimate(est, cfg, budget_bytes, fits)
    if not fits:
        raise typer.Exit(NO_FIT_EXIT_CODE)


def _print_estimate(est: Any, cfg: TrainConfig, budget_bytes: int | None, fits: bool) -> None:
    from rich.table import Table
    from rich.text import Text

    p = est.params
    console.print(
        f"[bold]{cfg.tokenizer} V={est.vocab_size:,}[/] d_model={cfg.d_model} "
        f"n_layers={cfg.n_layers} n_heads={cfg.n_heads} d_ff={cfg.d_ff} seq_len={cfg.seq_len} "
        f"batch_size={cfg.batch_size} grad_accum={cfg.grad_accum} {cfg.precision} "
        f"{cfg.attention}{' checkpointing' if cfg.checkpointing else ''} on {est.device}",
        highlight=False,
    )
    console.print(
        f"parameters {p['total']:,} (embedding {p['embedding']:,}, attention/layer "
        f"{p['attention_per_layer']:,}, ffn/layer {p['ffn_per_layer']:,}"
        + (", untied head" if cfg.tie_weights is False else ", tied head")
        + ")",
        highlight=False,
    )
    table = Table(box=None, padding=(0, 1), title_justify="left")
    table.add_column("term", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("at peak", justify="right", no_wrap=True)
    table.add_column("formula [inputs]", overflow="fold")
    for t in est.terms:
        inputs = " ".join(
            f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}"
            for k, v in t.inputs.items()
            if v is not None
        )
        cell = Text(t.formula)
        cell.append(f"  [{inputs}]", style="dim")
        table.add_row(t.name, human_bytes(t.bytes), human_bytes(t.at_peak), cell)
    table.add_row(
        "activations",
        human_bytes(est.activations),
        "",
        "embeddings + residual + norms + attention + attention_scores + ffn",
    )
    console.print(table)
    console.print(
        f"peak at: {est.peak_moment}; tensors at the peak (allocated): "
        f"{human_bytes(est.allocated)}",
        highlight=False,
    )
    verdict = ""
    if budget_bytes is not None:
        verdict = (
            f" {'<=' if fits else '>'} budget {human_bytes(budget_bytes)}: "
            f"{'fits' if fits else 'does NOT fit'}"
        )
    console.print(
        f"[bold]total {human_bytes(est.total)}[/] ({est.total:,} bytes){verdict}", highlight=False
    )


# --- a study's feasibility table ----------------------------------------------------------------


def _print_feasibility(t: dict[str, Any]) -> None:
    from rich.table import Table

    rows, budget_bytes = t["rows"], t["budget_bytes"]
    table = Table(
        box=None,
        padding=(0, 2),
        title_justify="left",
        title=f"study {t['study']}: {t['points']} of its space; budget "
        f"{human_bytes(budget_bytes) if budget_bytes else 'none'}, "
        f"oom_policy {t['oom_policy']}",
    )
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("point", overflow="fold")
    table.add_column("predicted", justify="right", no_wrap=True)
    table.add_column("steps", justify="right", no_wrap=True)
    table.add_column("fits", overflow="fold")
    for i, r in enumerate(rows):
        point = " ".join(
            f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["params"].items()
        )
        if not r["valid"]:
            table.add_row(str(i), point, "", "", f"invalid: {r['reason']}")
            continue
        fits = "yes" if r["fits"] else "no"
        if r["fitted"]:
            fits = (
                f"yes, fitted to batch_size {r['fitted']['batch_size']} x grad_accum "
                f"{r['fitted']['grad_accum']}"
            )
        steps = (
            "-"
            if r["steps"] is None
            else f"{r['steps']:,}" + (" (unjudged)" if r["under_trained"] else "")
        )
        table.add_row(str(i), point, human_bytes(r["predicted_bytes"]), steps, fits)
    wide_console().print(table)
    console.print(f"{t['fit']} of {len(rows)} points fit", highlight=False)
    if t["under_trained"]:
        console.print(
            f"{t['under_trained']} of {len(rows)} points get fewer than "
            f"limits.collapse.min_steps = {t['min_steps']} optimizer steps, or a "
            "learning rate summed over them below limits.collapse.min_lr_sum = "
            f"{t['min_lr_sum']:g}: they run unjudged, marked under_trained",
            highlight=False,
        )
