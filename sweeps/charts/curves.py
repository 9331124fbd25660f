"""Learning curves: val_bpb against tokens seen. Trials stopped early (pruned, collapsed,
diverged, out of memory, ...) end where they stopped, marked with their reason.

Curves are coloured by what varied (``sweeps.charts.colors``: the ablation's factor, the
``--color-by`` field, else the most important parameter); the outcome is the line's dash (solid:
complete, dotted: stopped early) and the stop's marker. Beside each curve its trial's unigram
baseline (``unigram_bpb``: the bits per byte of predicting the training split's token
frequencies, whatever the context), dashed in the curve's colour: a curve that never goes below
its own line has learned nothing the unigram does not know.

Up to ``ALL_BELOW`` trials every curve is drawn; beyond, the ``BEST`` best complete trials are
drawn over a quantile band (10-90%, median) of all evaluations, plus every early stop's marker.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lm import outcomes
from sweeps.charts import Chart, colors, esc, outcome_order, style
from sweeps.results import StudyResults

ALL_BELOW = 40
BEST = 15
BAND_BINS = 30


def data(
    evals: pd.DataFrame, trials: pd.DataFrame, *, all_below: int = ALL_BELOW, best: int = BEST
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(lines, band, stops):

    - lines: the evaluations (trial_number, tokens, val_bpb, outcome) of the drawn trials;
    - band: tokens, p10, p50, p90 of val_bpb over all trials per tokens bin (empty when every
      curve is drawn);
    - stops: the last evaluation of each trial that did not complete (trial_number, tokens,
      val_bpb, outcome, reason).
    """
    points = evals[["trial_number", "tokens", "val_bpb"]].copy()
    points = points[
        np.isfinite(points["val_bpb"].astype(float)) & np.isfinite(points["tokens"].astype(float))
    ]
    info = trials[["number", "outcome", "reason"]].rename(columns={"number": "trial_number"})
    points = points.merge(info, on="trial_number", how="left")
    points["outcome"] = points["outcome"].fillna(outcomes.RUNNING)
    points = points.sort_values(["trial_number", "tokens"]).reset_index(drop=True)
    numbers = points["trial_number"].unique()
    band = pd.DataFrame(columns=["tokens", "p10", "p50", "p90"])
    if len(numbers) <= all_below:
        lines = points
    else:
        last = points.groupby("trial_number").tail(1)
        done = last[last["outcome"] == outcomes.COMPLETE]
        chosen = (done if len(done) else last).nsmallest(best, "val_bpb")["trial_number"]
        lines = points[points["trial_number"].isin(set(chosen))]
        band = _band(points)
    last = points.groupby("trial_number").tail(1)
    stops = last[last["outcome"] != outcomes.COMPLETE].reset_index(drop=True)
    return (
        lines[["trial_number", "tokens", "val_bpb", "outcome"]].reset_index(drop=True),
        band,
        stops[["trial_number", "tokens", "val_bpb", "outcome", "reason"]],
    )


def _band(points: pd.DataFrame) -> pd.DataFrame:
    tokens = points["tokens"].astype(float)
    edges = np.linspace(tokens.min(), tokens.max() * (1 + 1e-9), BAND_BINS + 1)
    binned = points.assign(bin=np.digitize(tokens, edges))
    band = binned.groupby("bin").agg(
        tokens=("tokens", "median"),
        p10=("val_bpb", lambda s: s.quantile(0.1)),
        p50=("val_bpb", "median"),
        p90=("val_bpb", lambda s: s.quantile(0.9)),
    )
    return band.reset_index(drop=True)


def styles(lines: pd.DataFrame, results: StudyResults) -> pd.DataFrame:
    """One row per drawn curve: trial_number, outcome, group, color, dash, symbol, and its
    unigram baseline (unigram_bpb; NaN when the trial recorded none) over the curve's tokens
    (tokens_min, tokens_max)."""
    columns = [
        "trial_number",
        "outcome",
        "group",
        "color",
        "dash",
        "symbol",
        "unigram_bpb",
        "tokens_min",
        "tokens_max",
    ]
    if lines.empty:
        return pd.DataFrame(columns=columns)
    groups, palette = colors.groups(results.trials, colors.field_of(results))
    curves = (
        lines.groupby("trial_number", sort=True)
        .agg(
            outcome=("outcome", "first"), tokens_min=("tokens", "min"), tokens_max=("tokens", "max")
        )
        .reset_index()
    )
    curves = curves.merge(
        groups.rename(columns={"number": "trial_number"}), how="left", on="trial_number"
    )
    curves["group"] = curves["group"].fillna(colors.NOT_SET)
    curves["color"] = curves["group"].map(lambda g: palette.get(g, colors.NOT_SET_COLOR))
    curves["dash"] = np.where(
        curves["outcome"] == outcomes.COMPLETE, colors.COMPLETE_DASH, colors.STOPPED_DASH
    )
    curves["symbol"] = curves["outcome"].map(colors.symbol)
    curves["unigram_bpb"] = curves["trial_number"].map(_unigram(results)).astype(float)
    return curves[columns]


def _unigram(results: StudyResults) -> dict[int, float]:
    """Each trial's unigram_bpb: as the trial recorded it, else its last evaluation's."""
    found: dict[int, float] = {}
    evals = results.evals
    if "unigram_bpb" in evals:
        last = (
            evals.dropna(subset=["unigram_bpb"])
            .sort_values("tokens")
            .groupby("trial_number")["unigram_bpb"]
            .last()
        )
        found.update({int(k): float(v) for k, v in last.items()})
    if "unigram_bpb" in results.trials:
        recorded = results.trials.dropna(subset=["unigram_bpb"])
        found.update(
            {
                int(n): float(v)
                for n, v in zip(recorded["number"], recorded["unigram_bpb"], strict=True)
            }
        )
    return found


def applies(results: StudyResults) -> bool:
    """Some trial recorded an evaluation with a val_bpb."""
    evals = results.evals
    if evals.empty or not {"tokens", "val_bpb"} <= set(evals.columns):
        return False
    return bool(
        (
            np.isfinite(evals["val_bpb"].astype(float)) & np.isfinite(evals["tokens"].astype(float))
        ).any()
    )


def chart(results: StudyResults) -> Chart:
    title = "Learning curves"
    about = (
        "val_bpb at each evaluation, coloured by what varied; dashed beside each curve, "
        "in its colour, its trial's unigram baseline. A curve that stops early is dotted "
        "and ends with its outcome's marker: hover it for the reason (pruned, collapsed, "
        "diverged, out of memory, ...)."
    )
    lines, band, stops = data(results.evals, results.trials)
    if lines.empty and stops.empty:
        return Chart("curves", title, about, note="No evaluation has been recorded yet.")
    if len(band):
        about += (
            f" {results.evals['trial_number'].nunique():,} trials: the {BEST} best complete"
            " trials are drawn over the 10-90% band of all evaluations."
        )
    fig = go.Figure()
    if len(band):
        x = band["tokens"].to_numpy(dtype=float)
        fig.add_trace(
            go.Scatter(
                x=np.concatenate([x, x[::-1]]),
                y=np.concatenate(
                    [band["p90"].to_numpy(dtype=float), band["p10"].to_numpy(dtype=float)[::-1]]
                ),
                mode="lines",
                fill="toself",
                fillcolor="rgba(120,120,120,0.18)",
                line={"width": 0},
                name="all trials, 10-90%",
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=band["p50"].to_numpy(dtype=float),
                mode="lines",
                line={"color": "#888", "dash": "dash"},
                name="all trials, median",
                hovertemplate="median %{y:.4f}<extra></extra>",
            )
        )
    curves = styles(lines, results).set_index("trial_number")
    shown: set[str] = set()
    for number, part in lines.groupby("trial_number", sort=True):
        style_ = curves.loc[number]
        outcome, group = str(style_["outcome"]), str(style_["group"])
        fig.add_trace(
            go.Scatter(
                x=part["tokens"].to_numpy(dtype=float),
                y=part["val_bpb"].to_numpy(dtype=float),
                mode="lines+markers",
                name=esc(group),
                legendgroup=group,
                showlegend=group not in shown,
                line={"color": style_["color"], "width": 1.5, "dash": style_["dash"]},
                marker={"size": 4, "symbol": style_["symbol"]},
                opacity=0.8,
                hovertemplate=f"trial {number} ({esc(group)}, {esc(outcome)})<br>%{{x:,}} tokens"
                "<br>val_bpb %{y:.4f}<extra></extra>",
            )
        )
        shown.add(group)
    _add_baselines(fig, curves)
    for outcome in outcome_order(stops["outcome"]):
        part = stops[stops["outcome"] == outcome]
        color = [curves["color"].get(n, colors.NOT_SET_COLOR) for n in part["trial_number"]]
        fig.add_trace(
            go.Scatter(
                x=part["tokens"].to_numpy(dtype=float),
                y=part["val_bpb"].to_numpy(dtype=float),
                mode="markers",
                name=f"{outcome} (stopped)",
                legendgroup=f"stopped {outcome}",
                marker={
                    "symbol": colors.symbol(outcome),
                    "size": 10,
                    "color": color,
                    "line": {"width": 1, "color": "#000"},
                },
                text=[
                    f"trial {n}: {esc(outcome)}<br>{esc(r or '')}"
                    for n, r in zip(part["trial_number"], part["reason"], strict=True)
                ],
                hovertemplate="%{text}<br>%{x:,} tokens, val_bpb %{y:.4f}<extra></extra>",
            )
        )
    field = colors.field_of(results)
    about += f" Colour: {field}." if field else ""
    fig.update_xaxes(title_text="tokens seen")
    fig.update_yaxes(title_text="val_bpb (bits per byte)")
    return Chart("curves", title, about, figure=style(fig, height=480))


def _add_baselines(fig: go.Figure, curves: pd.DataFrame) -> None:
    """Each curve's unigram baseline, a dashed segment over its tokens in its colour: one trace
    per colour (segments apart by a gap), so 40 curves add a handful of traces, not 40."""
    known = curves[np.isfinite(curves["unigram_bpb"].astype(float))]
    for (group, color), part in known.groupby(["group", "color"], sort=False):
        x: list[float | None] = []
        y: list[float | None] = []
        for _, r in part.iterrows():
            x += [float(r["tokens_min"]), float(r["tokens_max"]), None]
            y += [float(r["unigram_bpb"])] * 2 + [None]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                name=f"{esc(group)}: unigram baseline",
                legendgroup=group,
                showlegend=False,
                line={"color": color, "width": 1, "dash": colors.BASELINE_DASH},
                opacity=0.7,
                hovertemplate=f"unigram baseline ({esc(group)}) %{{y:.4f}}<extra></extra>",
            )
        )
