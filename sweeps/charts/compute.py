"""Quality against training compute: val_bpb against FLOPs (``lm.flops``), Pareto front
highlighted. The fair comparison of trials that trained different sizes for different token
counts: at equal compute, which one is better.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sweeps.charts import Chart, esc, outcome_color, outcome_order, pareto, replicates, style
from sweeps.results import StudyResults

FADED = pareto.FADED


def data(trials: pd.DataFrame) -> pd.DataFrame:
    """Trials with a val_bpb and FLOPs: number, outcome, reason, val_bpb, x (FLOPs), on_front
    (non-dominated among complete trials), and the sizes shown on hover."""
    frame = pareto.data(trials, "flops")
    extra = trials.set_index("number")[["params_non_embedding", "tokens_seen"]]
    return frame.join(extra, on="number")


def applies(results: StudyResults) -> bool:
    """Some trial has a val_bpb and recorded FLOPs."""
    return not data(results.trials).empty


def chart(results: StudyResults) -> Chart:
    title = "Quality against compute"
    about = (
        "val_bpb against the training FLOPs each trial spent (6ND plus attention; "
        "evaluation not counted). Highlighted points are the best val_bpb for their "
        "compute among complete trials; a flat front means more compute bought nothing."
    )
    frame = data(results.trials)
    if frame.empty:
        return Chart(
            "compute", title, about, note="No trial has both a val_bpb and recorded FLOPs."
        )
    fig = go.Figure()
    for outcome in outcome_order(frame["outcome"]):
        part = frame[frame["outcome"] == outcome]
        fig.add_trace(
            go.Scatter(
                x=part["x"].to_numpy(),
                y=part["val_bpb"].to_numpy(),
                mode="markers",
                name=outcome,
                marker={
                    "color": outcome_color(outcome),
                    "size": 7,
                    "opacity": np.where(part["on_front"], 1.0, FADED),
                    "line": {"width": np.where(part["on_front"], 1.0, 0.0), "color": "#000"},
                },
                customdata=np.stack(
                    [
                        part["number"].to_numpy(),
                        part["params_non_embedding"].to_numpy(dtype=float),
                        part["tokens_seen"].to_numpy(dtype=float),
                    ],
                    axis=-1,
                ),
                hovertemplate=f"trial %{{customdata[0]}} ({esc(outcome)})<br>val_bpb %{{y:.4f}}"
                "<br>FLOPs %{x:.3g}<br>N (non-embedding) %{customdata[1]:,.0f}"
                "<br>tokens %{customdata[2]:,.0f}<extra></extra>",
            )
        )
    front = frame[frame["on_front"]].sort_values("x")
    if len(front):
        fig.add_trace(
            go.Scatter(
                x=front["x"].to_numpy(),
                y=front["val_bpb"].to_numpy(),
                mode="lines",
                line={"shape": "hv", "color": "#000", "width": 1.5},
                name="Pareto front",
                hoverinfo="skip",
            )
        )
    means = replicates.data(results.trials, "flops")
    if len(means):  # configurations run with several seeds: their mean and interval
        fig.add_trace(replicates.trace(means))
    fig.update_xaxes(title_text="training FLOPs", type="log", exponentformat="power")
    fig.update_yaxes(title_text="val_bpb (bits per byte)")
    return Chart("compute", title, about, figure=style(fig, height=460))
