"""``sweeps transfer``: whether hyperparameters transfer across widths.

- ``coord``: the coordinate check (``lm.coord``): a few training steps at each width under SP
  and µP, the RMS of each layer's activations and of the updates, as a table (and, with
  ``--out``, a chart and the rows as JSON). µP's rows should stay flat across widths.
- ``drift``: a finished ``[transfer]`` study (``sweeps.transfer``): each parametrization and
  width's optimal learning rate with its bootstrap interval over seeds, and the drift in octaves
  from the narrowest width to the widest with its verdict (transfers / does not / cannot tell).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps.cli.options import (
    ConfigFileOption,
    StorageOption,
    flag_checks,
    read_config_file,
    with_config_options,
)
from sweeps.console import err_console, plain, wide_console

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from lm.coord import CoordRow
    from sweeps.transfer import TransferFit

app = typer.Typer()
transfer_app = typer.Typer(
    help="Whether hyperparameters transfer across widths (µP): the coordinate check, and the "
    "drift of the optimal learning rate in a [transfer] study.",
    no_args_is_help=True,
)
app.add_typer(transfer_app, name="transfer")

#: The built-in synthetic corpus the check trains on when neither a spec nor --corpus names one.
SYNTHETIC_BYTES = 300_000
COORD_JSON = "coord.json"
COORD_HTML = "coord.html"


@transfer_app.command("coord")
@with_config_options(TrainConfig, panel="Model and training")
def coord(
    overrides: dict[str, Any],
    spec: Annotated[
        Path | None,
        typer.Argument(
            metavar="[SPEC]",
            help="A study spec: its corpus and [fixed] fields (the flags win) [default: the "
            "flags alone, on the built-in synthetic corpus].",
        ),
    ] = None,
    config: ConfigFileOption = None,
    widths: Annotated[
        str, typer.Option("--widths", help="Widths (d_model) to compare, comma-separated.")
    ] = "32,64,128,256",
    steps: Annotated[int, typer.Option("--steps", help="Training steps at each width.")] = 5,
    out: Annotated[
        Path | None,
        typer.Option("--out", help=f"Write {COORD_HTML} (a chart) and {COORD_JSON} (the rows)."),
    ] = None,
) -> None:
    """Train a few steps at each width under SP and µP; print each layer's RMS per width (heads
    scaled to keep d_head, d_ff to keep d_ff / d_model; rates constant at --lr)."""
    from lm import coord as cc

    sizes = cc.parse_widths(widths)
    values = _base_values(spec, config, overrides)
    with _corpus(values) as values:
        cfg = TrainConfig.from_dict(values)
        from lm.tokens import load_tokens

        assert cfg.vocab_size is not None  # TrainConfig sets it
        cache = load_tokens(
            Path(cfg.corpus), cfg.tokenizer, cfg.vocab_size, lowercase=cfg.lowercase
        )
        if len(cache.train) < cfg.seq_len + 1:
            raise SweepsError(
                f"the training split has {len(cache.train):,} tokens, fewer than seq_len + 1 = "
                f"{cfg.seq_len + 1}; use a smaller --seq-len or a bigger corpus"
            )
        rows = cc.coord_check(cfg, cache.train, int(cache.tokenizer.vocab_size), sizes, steps=steps)
    _print(cc.table(rows), cfg, steps)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / COORD_JSON).write_text(
            json.dumps([r.to_dict() for r in rows], indent=1) + "\n", encoding="utf-8"
        )
        coord_figure(rows).write_html(out / COORD_HTML, include_plotlyjs=True)
        err_console.print(f"wrote {out / COORD_HTML} and {out / COORD_JSON}", highlight=False)


@transfer_app.command("drift")
def drift(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="A [transfer] study.")],
    metric: Annotated[
        str | None,
        typer.Option("--metric", help="The loss to read optima from [default: the objective]."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    storage: StorageOption = None,
) -> None:
    """Per parametrization and width: the optimal learning rate (a parabola in log2 lr through
    the best rate and its neighbours) with its bootstrap interval over seeds; per
    parametrization: the drift in octaves from the narrowest width to the widest, and whether
    the rate transfers (interval within ±1 octave), does not (wholly beyond) or cannot tell."""
    from sweeps import transfer as tr
    from sweeps.storage import resolve_storage_url

    fit = tr.study_transfer(resolve_storage_url(storage, None), study, metric=metric)
    if as_json:
        typer.echo(json.dumps(fit.to_dict(), indent=2))
        return
    if not fit.curves:
        raise SweepsError(f"study {study!r} has no finished trial to fit yet; run it first")
    _print_drift(study, fit)


#: A verdict as a line says it.
VERDICT_WORDS = {"does not": "does not transfer"}


def optimum_rows(fit: TransferFit) -> list[dict[str, str]]:
    """The table of ``sweeps transfer drift``: one row per parametrization and width."""
    drifts = {d.parametrization: d for d in fit.drifts}
    rows = []
    for c in fit.curves:
        d = drifts.get(c.parametrization)
        last = d is not None and c.width == d.wide
        shown = "-" if c.lr_opt is None else f"{c.lr_opt:.3g}"
        if c.interval is not None:
            shown += f" [{c.interval[0]:.3g}, {c.interval[1]:.3g}]"
        drift_text = verdict = ""
        if last and d is not None:
            drift_text = "-" if d.octaves is None else f"{d.octaves:+.2f}"
            if d.interval is not None:
                drift_text += f" [{d.interval[0]:+.2f}, {d.interval[1]:+.2f}]"
            verdict = d.verdict
        rows.append(
            {
                "parametrization": c.parametrization,
                "width": str(c.width),
                "optimum lr": shown,
                fit.metric: "-" if c.loss_opt is None else f"{c.loss_opt:.4f}",
                "trials": f"{c.complete} ok, {c.diverged} diverged, {c.failed} failed"
                + (f", {c.pending} pending" if c.pending else ""),
                "drift (octaves)": drift_text,
                "verdict": verdict,
            }
        )
    return rows


def _print_drift(study: str, fit: TransferFit) -> None:
    from rich.table import Table

    from sweeps.transfer import TOLERANCE_OCTAVES

    typer.echo(
        plain(
            f"learning-rate transfer in study {study}: optima on {fit.metric}, "
            f"{fit.confidence:.0%} bootstrap intervals over seeds"
        )
    )
    rows = optimum_rows(fit)
    table = Table(box=None, padding=(0, 2))
    for col in rows[0]:
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(plain(v) for v in r.values()))
    wide_console().print(table)
    for d in fit.drifts:
        typer.echo(
            plain(f"{d.parametrization}: {VERDICT_WORDS.get(d.verdict, d.verdict)} ({d.why})")
        )
    for note in [
        *fit.notes,
        *(f"{c.parametrization} {c.width}: {c.note}" for c in fit.curves if c.note),
    ]:
        typer.echo(plain(note))
    typer.echo(
        plain(
            f"drift: log2(optimum at the widest width / at the narrowest); transfers: its "
            f"interval within ±{TOLERANCE_OCTAVES:g} octave; does not: wholly beyond; a "
            "diverged rate counts as worse than any loss"
        )
    )


def _base_values(
    spec: Path | None, config: Path | None, overrides: dict[str, Any]
) -> dict[str, Any]:
    """The fields before the widths: a spec's base values (or ``--config``'s), then the flags."""
    values: dict[str, Any] = {}
    if spec is not None:
        from sweeps.spec import load_spec
        from sweeps.study import corpus_to_prepare, prepare_corpus

        loaded = load_spec(spec)
        if corpus_to_prepare(loaded):
            prepare_corpus(loaded)
        values = loaded.base_values()
    if config is not None:
        values.update(read_config_file(config))
    if "tokenizer" in overrides and "vocab_size" not in overrides:
        values.pop("vocab_size", None)  # follows the flag's tokenizer, not the spec's
    flag_checks(values, overrides)
    values.update(overrides)
    return values


@contextmanager
def _corpus(values: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``values`` with a corpus: the one given, else the synthetic one in a temporary dir."""
    if values.get("corpus"):
        yield values
        return
    from lm.corpus import prepare_synthetic

    with tempfile.TemporaryDirectory(prefix="sweeps-coord-") as tmp:
        corpus = Path(tmp) / "synthetic"
        prepare_synthetic(corpus, size_bytes=SYNTHETIC_BYTES, seed=0)
        yield {**values, "corpus": str(corpus)}


def _print(rows: list[dict[str, Any]], cfg: TrainConfig, steps: int) -> None:
    from rich.table import Table

    title = (
        f"coordinate check: RMS at step {steps} (step 1: at init), lr {cfg.lr:g} constant, "
        f"base_width {cfg.base_width}, d_head {cfg.d_model // cfg.n_heads}"
    )
    typer.echo(plain(title))  # one line, whatever the terminal's width
    table = Table(box=None, padding=(0, 2))
    for col in rows[0]:
        table.add_column(
            col, overflow="fold", justify="left" if col in ("parametrization", "layer") else "right"
        )
    for r in rows:
        table.add_row(*(v if isinstance(v, str) else f"{v:.4g}" for v in r.values()))
    wide_console().print(table)
    typer.echo(
        plain(
            "growth: the widest width's RMS over the narrowest's; spread: max / min over widths. "
            "µP's rows should stay near 1 (flat), SP's logits, attention and updates grow."
        )
    )


def coord_figure(rows: list[CoordRow]) -> go.Figure:
    """One panel per layer (``lm.coord.LAYERS``): RMS against width, log-log, a line per
    parametrization and step (later steps darker)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from lm.coord import LAYERS
    from sweeps.charts import style

    steps = sorted({r.step for r in rows})
    colours = {"sp": "rgba(214, 39, 40, {a})", "mup": "rgba(31, 119, 180, {a})"}
    fig = make_subplots(rows=1, cols=len(LAYERS), subplot_titles=LAYERS, shared_xaxes=True)
    for col, layer in enumerate(LAYERS, start=1):
        for p in dict.fromkeys(r.parametrization for r in rows):
            for step in steps:
                points = sorted(
                    (r.width, r.rms)
                    for r in rows
                    if r.layer == layer and r.parametrization == p and r.step == step
                )
                alpha = 0.25 + 0.75 * step / steps[-1]
                fig.add_trace(
                    go.Scatter(
                        x=[w for w, _ in points],
                        y=[v for _, v in points],
                        mode="lines+markers",
                        name=f"{p} step {step}",
                        legendgroup=f"{p}-{step}",
                        showlegend=col == 1,
                        line={"color": colours.get(p, "rgba(0,0,0,{a})").format(a=alpha)},
                    ),
                    row=1,
                    col=col,
                )
    widths = sorted({r.width for r in rows})
    fig.update_xaxes(type="log", title_text="d_model", tickvals=widths, ticktext=widths)
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="RMS", col=1)
    return style(
        fig,
        height=380,
        width=260 * len(LAYERS) + 200,
        title="coordinate check: flat rows across widths mean the parametrization is right",
    )
