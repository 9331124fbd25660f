"""Pareto fronts: val_bpb against peak memory and against wall time (both minimised).

The front is drawn among ``complete`` trials (the ones a user could pick); every trial with a
val_bpb is shown, coloured by what varied (``sweeps.charts.colors``), its outcome its marker's
symbol, dominated ones faded, but for interrupted and re-queued runs (``sweeps.charts.settled``: a
partial run is not a point of the trade-off).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lm import outcomes
from sweeps.charts import (
    MIB,
    Chart,
    colors,
    esc,
    outcome_order,
    replicates,
    settled,
    style,
)
from sweeps.results import StudyResults

#: (column, axis title, divisor for display)
AXES = (("peak_mem_bytes", "peak memory (MiB)", MIB), ("wall_s", "wall time (s)", 1.0))
FADED = 0.25


def front_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-dominated points when minimising both ``x`` and ``y`` (ties: the first is kept)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    mask = np.zeros(len(x), dtype=bool)
    best = np.inf
    for i in np.lexsort((y, x)):  # by x, then y
        if y[i] < best:
            mask[i] = True
            best = y[i]
    return mask


def data(trials: pd.DataFrame, x: str) -> pd.DataFrame:
    """Trials with a val_bpb and a positive ``x`` (interrupted and re-queued runs left out:
    ``settled``): number, outcome, reason, val_bpb, x, on_front (non-dominated among complete
    trials)."""
    frame = settled(trials)[["number", "outcome", "reason", "val_bpb", x]].copy()
    frame[x] = pd.to_numeric(frame[x], errors="coerce").astype(float)
    frame = frame[np.isfinite(frame["val_bpb"]) & (frame[x] > 0)].reset_index(drop=True)
    frame["on_front"] = False
    complete = frame.index[frame["outcome"] == outcomes.COMPLETE]
    if len(complete):
        mask = front_mask(
            frame.loc[complete, x].to_numpy(), frame.loc[complete, "val_bpb"].to_numpy()
        )
        frame.loc[complete[mask], "on_front"] = True
    return frame.rename(columns={x: "x"})


def styled(results: StudyResults, x: str) -> pd.DataFrame:
    """``data`` with each point's group, color (what varied: ``colors.field_of``) and symbol
    (its outcome)."""
    frame = data(results.trials, x)
    groups, palette = colors.groups(results.trials, colors.field_of(results))
    frame = frame.merge(groups, on="number", how="left")
    frame["group"] = frame["group"].fillna(colors.NOT_SET)
    frame["color"] = frame["group"].map(lambda g: palette.get(g, colors.NOT_SET_COLOR))
    frame["symbol"] = frame["outcome"].map(colors.symbol)
    frame.attrs["order"] = [g for g in palette if g in set(frame["group"])]
    return frame


def applies(results: StudyResults) -> bool:
    """Some trial has a val_bpb and a measured peak memory or wall time."""
    return any(len(data(results.trials, col)) for col, _, _ in AXES)


def chart(results: StudyResults) -> Chart:
    title = "Pareto fronts: quality against memory and time"
    about = (
        "Lower-left is better. Highlighted points are the non-dominated complete trials "
        "(the best val_bpb for their memory or time); faded points are dominated. Marker: "
        "the outcome."
    )
    field = colors.field_of(results)
    about += f" Colour: {field}." if field else ""
    panels = [(col, label, scale, styled(results, col)) for col, label, scale in AXES]
    if all(p[3].empty for p in panels):
        return Chart(
            "pareto",
            title,
            about,
            note="No trial has both a val_bpb and a measured peak memory or wall time.",
        )
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=[f"val_bpb vs {p[1]}" for p in panels],
        horizontal_spacing=0.08,
    )
    shown: set[str] = set()
    for col_i, (_, label, scale, frame) in enumerate(panels, start=1):
        for group in frame.attrs.get("order", []):
            part = frame[frame["group"] == group]
            fig.add_trace(
                go.Scatter(
                    x=part["x"].to_numpy() / scale,
                    y=part["val_bpb"].to_numpy(),
                    mode="markers",
                    name=esc(group),
                    legendgroup=group,
                    showlegend=group not in shown,
                    marker={
                        "color": part["color"].iloc[0],
                        "size": 8,
                        "symbol": part["symbol"].to_numpy(),
                        "opacity": np.where(part["on_front"], 1.0, FADED),
                        "line": {"width": np.where(part["on_front"], 1.0, 0.0), "color": "#000"},
                    },
                    customdata=np.stack(
                        [part["number"].to_numpy(), part["outcome"].map(esc).to_numpy()], axis=-1
                    ),
                    hovertemplate=f"trial %{{customdata[0]}} ({esc(group)}, %{{customdata[1]}})"
                    f"<br>val_bpb %{{y:.4f}}<br>{label} %{{x:,.1f}}<extra></extra>",
                ),
                row=1,
                col=col_i,
            )
            shown.add(group)
        if col_i == 1:
            _outcome_legend(fig, frame)
        front = frame[frame["on_front"]].sort_values("x")
        if len(front):
            fig.add_trace(
                go.Scatter(
                    x=front["x"].to_numpy() / scale,
                    y=front["val_bpb"].to_numpy(),
                    mode="lines",
                    line={"shape": "hv", "color": "#000", "width": 1.5},
                    name="Pareto front",
                    legendgroup="front",
                    showlegend=col_i == 1,
                    hoverinfo="skip",
                ),
                row=1,
                col=col_i,
            )
        means = replicates.data(results.trials, panels[col_i - 1][0])
        if len(means):  # configurations run with several seeds: their mean and interval
            fig.add_trace(replicates.trace(means, scale, showlegend=col_i == 1), row=1, col=col_i)
        fig.update_xaxes(title_text=label, type="log", row=1, col=col_i)
        fig.update_yaxes(title_text="val_bpb (bits per byte)", row=1, col=col_i)
    return Chart("pareto", title, about, figure=style(fig, height=460))


def _outcome_legend(fig: go.Figure, frame: pd.DataFrame) -> None:
    """One legend entry per outcome shown, its marker in grey: what each symbol means."""
    for outcome in outcome_order(frame["outcome"]):
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=esc(outcome),
                legendgroup=f"outcome {outcome}",
                marker={"symbol": colors.symbol(outcome), "size": 8, "color": "#666"},
                hoverinfo="skip",
            ),
            row=1,
            col=1,
        )
