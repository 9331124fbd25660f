"""``sweeps train`` and ``sweeps generate``: one training run outside any study (``lm.train.run``)
and text from a finished run's best checkpoint."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from lm import flops
from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps.cli.options import ConfigFileOption, train_config, warn, with_config_options
from sweeps.console import err_console, escape_controls, human_bytes, print_summary, progress_bar

app = typer.Typer()


@app.command()
@with_config_options(TrainConfig, panel="Model and training")
def train(
    overrides: dict[str, Any],
    config: ConfigFileOption = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="The run directory [default: runs/run-YYYYmmdd-HHMMSS]."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Train one model and report bits per byte, the unigram gap and collapse statistics."""
    cfg = train_config(config, overrides)
    run_dir = out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise SweepsError(f"--out {run_dir} is not empty; choose a new run directory")
    if not cfg.resolved:  # a budget in bytes or FLOPs: its tokens, from the token cache
        from lm import budget

        rate = budget.corpus_rate(cfg, build=budget.needs_text(cfg))
        cfg = budget.resolve(cfg, rate)
        err_console.print(f"budget: {budget.describe(cfg, rate)}", highlight=False, markup=False)
    warn(cfg.budget_warnings())
    result = _train_with_progress(cfg, run_dir, quiet=as_json)
    summary = result.to_dict()
    # The number a study records for a trial (the tokens it trained, its reads' included).
    summary["flops"] = flops.trained(cfg, summary).flops
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        _print_run_summary(summary, run_dir)
    raise typer.Exit(summary["exit_code"])


def _train_with_progress(cfg: TrainConfig, run_dir: Path, *, quiet: bool) -> Any:
    from lm.train import run

    def on_eval(metrics: dict[str, Any]) -> None:
        if not quiet:
            what = "cooldown read" if metrics.get("read") else "eval"
            err_console.print(
                f"{what} @ {metrics['tokens']:>11,} tokens  val_loss {metrics['val_loss']:.4f}  "
                f"val_bpb {metrics['val_bpb']:.4f}  unigram_gap {metrics['unigram_gap']:+.4f}  "
                f"{metrics['tokens_per_s']:,.0f} tok/s"
            )

    with progress_bar("training", unit="tokens") as progress:
        return run(cfg, run_dir, progress=progress, on_eval=on_eval)


_SUMMARY_METRICS = (
    ("val_loss", "val loss (nats/token)"),
    ("val_bpb", "val bits per byte"),
    ("unigram_bpb", "unigram baseline (bits per byte)"),
    ("unigram_entropy", "unigram baseline (nats/token)"),
    ("unigram_gap", "unigram gap"),
    ("kl_mean_to_unigram", "KL(mean || unigram)"),
    ("mean_kl_to_mean", "mean KL to mean prediction"),
    ("top20_overlap", "top-20 overlap with corpus"),
    ("unk_rate_targets", "<unk> rate (targets)"),
)


def _print_run_summary(summary: dict[str, Any], run_dir: Path) -> None:
    final = summary.get("final_metrics") or {}
    params = summary.get("params") or {}
    reason = f" ({summary['reason']})" if summary.get("reason") else ""
    rows: list[tuple[str, object]] = [("outcome", summary["outcome"] + reason)]
    for key, label in _SUMMARY_METRICS:
        if key in final:
            rows.append((label, final[key]))
    if summary.get("best_val_bpb") is not None:
        rows.append(("best val bits per byte", summary["best_val_bpb"]))
    if params:
        rows.append(("parameters", ", ".join(f"{k} {v:,}" for k, v in params.items())))
    rows += [
        ("tokens seen", summary.get("tokens_seen", 0)),
        (
            "training text",
            f"{summary['train_bytes']:,} bytes" if summary.get("train_bytes") is not None else "-",
        ),
        ("training FLOPs", f"{summary['flops']:.3g}"),
    ]
    if summary.get("n_reads"):
        rows.append(
            (
                "cooldown reads",
                f"{summary['n_reads']} ({summary.get('cooldown_tokens_total', 0):,} tokens)",
            )
        )
    rows += [
        ("tokens/s", summary.get("tokens_per_s", 0.0)),
        ("peak memory", human_bytes(summary.get("peak_mem_bytes") or 0)),
        ("wall time", f"{summary.get('wall_s', 0.0):.1f} s"),
        ("run dir", str(run_dir)),
    ]
    samples = final.get("samples") or []
    if samples:
        rows.append(("sample", f"{samples[0]['prompt']} -> {samples[0]['text']!r}"))
    print_summary("run", rows)


@app.command()
def generate(
    run_dir: Annotated[Path, typer.Argument(help="A run directory from `sweeps train`.")],
    prompt: Annotated[
        str, typer.Option(help="Text to continue; <Q>, <A>, <D> are markers.")
    ] = "<Q>",
    max_new_tokens: Annotated[int, typer.Option(help="Tokens to generate.")] = 100,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).")] = 0.8,
    top_k: Annotated[
        int | None, typer.Option(help="Sample among the k likeliest [default: none: all].")
    ] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
) -> None:
    """Continue a prompt with a trained run's best checkpoint."""
    from lm.generate import generate as generate_text

    text = generate_text(
        run_dir,
        prompt,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        seed=seed,
    )
    # Written as it is, never wrapped (rich would break it at 80 columns into a file or a
    # pipe, splitting words); control characters escaped, as for all text shown.
    sys.stdout.write(escape_controls(text, keep_newlines=True) + "\n")
