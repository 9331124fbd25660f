"""Predicted (calibrated) against measured peak memory, with the y = x line and the budget."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sweeps.charts import MIB, Chart, esc, outcome_color, outcome_order, style
from sweeps.results import StudyResults


def data(trials: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """(points, summary): trials with both a prediction and a measurement (number, outcome,
    predicted, measured, raw_predicted in bytes, ratio = measured / predicted); summary has n,
    median_ratio and within_20 (share of trials within +-20% of the prediction)."""
    frame = trials[
        ["number", "outcome", "predicted_mem_bytes", "peak_mem_bytes", "predicted_mem_raw_bytes"]
    ].copy()
    frame.columns = ["number", "outcome", "predicted", "measured", "raw_predicted"]
    for col in ("predicted", "measured", "raw_predicted"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame = frame[(frame["predicted"] > 0) & (frame["measured"] > 0)].reset_index(drop=True)
    frame["ratio"] = frame["measured"] / frame["predicted"]
    summary = {
        "n": float(len(frame)),
        "median_ratio": float(frame["ratio"].median()) if len(frame) else float("nan"),
        "within_20": float((abs(frame["ratio"] - 1) <= 0.2).mean()) if len(frame) else float("nan"),
    }
    return frame, summary


def applies(results: StudyResults) -> bool:
    """Some trial has both a predicted and a measured peak memory."""
    return not data(results.trials)[0].empty


def chart(results: StudyResults) -> Chart:
    title = "Predicted against measured peak memory"
    frame, summary = data(results.trials)
    about = (
        "Points on the dashed y = x line were predicted exactly; above it the estimate was "
        "too low (the dangerous side)."
    )
    if frame.empty:
        return Chart(
            "memory_pred",
            title,
            about,
            note="No trial has both a predicted and a measured peak memory.",
        )
    about += (
        f" Median measured/predicted: {summary['median_ratio']:.2f}; "
        f"{summary['within_20']:.0%} of {int(summary['n'])} trials within 20%."
    )
    fig = go.Figure()
    for outcome in outcome_order(frame["outcome"]):
        part = frame[frame["outcome"] == outcome]
        fig.add_trace(
            go.Scatter(
                x=part["predicted"].to_numpy() / MIB,
                y=part["measured"].to_numpy() / MIB,
                mode="markers",
                name=outcome,
                marker={"color": outcome_color(outcome), "size": 7, "opacity": 0.7},
                customdata=np.stack(
                    [
                        part["number"].to_numpy(),
                        part["ratio"].to_numpy(),
                        part["raw_predicted"].to_numpy() / MIB,
                    ],
                    axis=-1,
                ),
                hovertemplate=f"trial %{{customdata[0]:.0f}} ({esc(outcome)})<br>predicted "
                "%{x:,.1f} MiB (raw %{customdata[2]:,.1f})<br>measured %{y:,.1f} MiB"
                "<br>ratio %{customdata[1]:.2f}<extra></extra>",
            )
        )
    low = min(frame["predicted"].min(), frame["measured"].min()) / MIB / 1.2
    high = max(frame["predicted"].max(), frame["measured"].max()) / MIB * 1.2
    budget = pd.to_numeric(results.trials["memory_budget_bytes"], errors="coerce").dropna()
    budget_mib = float(budget.iloc[-1]) / MIB if len(budget) else None
    if budget_mib is not None and budget_mib <= 4 * high:  # far above the data: left out
        high = max(high, budget_mib * 1.1)
        fig.add_hline(
            y=budget_mib,
            line_dash="dot",
            line_color="#d62728",
            annotation_text="memory budget",
            annotation_position="top left",
        )
    fig.add_trace(
        go.Scatter(
            x=[low, high],
            y=[low, high],
            mode="lines",
            name="y = x",
            line={"dash": "dash", "color": "#000"},
            hoverinfo="skip",
        )
    )
    # The same range on both axes, so y = x is the diagonal.
    span = [float(np.log10(low)), float(np.log10(high))]
    fig.update_xaxes(type="log", range=span, title_text="predicted peak (MiB, calibrated)")
    fig.update_yaxes(type="log", range=span, title_text="measured peak (MiB)")
    return Chart("memory_pred", title, about, figure=style(fig, height=460))
