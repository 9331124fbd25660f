"""Learning curves: val_bpb against tokens seen. Trials stopped early (pruned, collapsed,
diverged, out of memory, ...) end where they stopped, marked with their reason.

Up to ``ALL_BELOW`` trials every curve is drawn; beyond, the ``BEST`` best complete trials are
drawn over a quantile band (10-90%, median) of all evaluations, plus every early stop's marker.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lm import outcomes
from sweeps.charts import Chart, esc, outcome_color, outcome_order, style
from sweeps.results import StudyResults

ALL_BELOW = 40
BEST = 15
BAND_BINS = 30


def data(evals: pd.DataFrame, trials: pd.DataFrame, *, all_below: int = ALL_BELOW,
         best: int = BEST) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(lines, band, stops):

    - lines: the evaluations (trial_number, tokens, val_bpb, outcome) of the drawn trials;
    - band: tokens, p10, p50, p90 of val_bpb over all trials per tokens bin (empty when every
      curve is drawn);
    - stops: the last evaluation of each trial that did not complete (trial_number, tokens,
      val_bpb, outcome, reason).
    """
    points = evals[["trial_number", "tokens", "val_bpb"]].copy()
    points = points[np.isfinite(points["val_bpb"].astype(float))
                    & np.isfinite(points["tokens"].astype(float))]
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
    return (lines[["trial_number", "tokens", "val_bpb", "outcome"]].reset_index(drop=True), band,
            stops[["trial_number", "tokens", "val_bpb", "outcome", "reason"]])


def _band(points: pd.DataFrame) -> pd.DataFrame:
    tokens = points["tokens"].astype(float)
    edges = np.linspace(tokens.min(), tokens.max() * (1 + 1e-9), BAND_BINS + 1)
    binned = points.assign(bin=np.digitize(tokens, edges))
    band = binned.groupby("bin").agg(
        tokens=("tokens", "median"),
        p10=("val_bpb", lambda s: s.quantile(0.1)),
        p50=("val_bpb", "median"),
        p90=("val_bpb", lambda s: s.quantile(0.9)))
    return band.reset_index(drop=True)


def applies(results: StudyResults) -> bool:
    """Some trial recorded an evaluation with a val_bpb."""
    evals = results.evals
    if evals.empty or not {"tokens", "val_bpb"} <= set(evals.columns):
        return False
    return bool((np.isfinite(evals["val_bpb"].astype(float))
                 & np.isfinite(evals["tokens"].astype(float))).any())


def chart(results: StudyResults) -> Chart:
    title = "Learning curves"
    about = ("val_bpb at each evaluation. A curve that stops early ends with an x: hover it for "
             "the reason (pruned, collapsed, diverged, out of memory, ...).")
    lines, band, stops = data(results.evals, results.trials)
    if lines.empty and stops.empty:
        return Chart("curves", title, about, note="No evaluation has been recorded yet.")
    if len(band):
        about += (f" {results.evals['trial_number'].nunique():,} trials: the {BEST} best complete"
                  " trials are drawn over the 10-90% band of all evaluations.")
    fig = go.Figure()
    if len(band):
        x = band["tokens"].to_numpy(dtype=float)
        fig.add_trace(go.Scatter(x=np.concatenate([x, x[::-1]]),
                                 y=np.concatenate([band["p90"].to_numpy(dtype=float),
                                                   band["p10"].to_numpy(dtype=float)[::-1]]),
                                 mode="lines", fill="toself",
                                 fillcolor="rgba(120,120,120,0.18)",
                                 line={"width": 0}, name="all trials, 10-90%",
                                 hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=x, y=band["p50"].to_numpy(dtype=float), mode="lines",
                                 line={"color": "#888", "dash": "dash"}, name="all trials, median",
                                 hovertemplate="median %{y:.4f}<extra></extra>"))
    shown: set[str] = set()
    for number, part in lines.groupby("trial_number", sort=True):
        outcome = str(part["outcome"].iloc[0])
        fig.add_trace(go.Scatter(
            x=part["tokens"].to_numpy(dtype=float), y=part["val_bpb"].to_numpy(dtype=float),
            mode="lines+markers", name=outcome, legendgroup=outcome,
            showlegend=outcome not in shown, line={"color": outcome_color(outcome), "width": 1.5},
            marker={"size": 4}, opacity=0.8,
            hovertemplate=f"trial {number} ({esc(outcome)})<br>%{{x:,}} tokens<br>val_bpb "
                          "%{y:.4f}<extra></extra>"))
        shown.add(outcome)
    for outcome in outcome_order(stops["outcome"]):
        part = stops[stops["outcome"] == outcome]
        fig.add_trace(go.Scatter(
            x=part["tokens"].to_numpy(dtype=float), y=part["val_bpb"].to_numpy(dtype=float),
            mode="markers", name=f"{outcome} (stopped)", legendgroup=outcome,
            marker={"symbol": "x", "size": 9, "color": outcome_color(outcome)},
            text=[f"trial {n}: {esc(outcome)}<br>{esc(r or '')}"
                  for n, r in zip(part["trial_number"], part["reason"], strict=True)],
            hovertemplate="%{text}<br>%{x:,} tokens, val_bpb %{y:.4f}<extra></extra>"))
    fig.update_xaxes(title_text="tokens seen")
    fig.update_yaxes(title_text="val_bpb (bits per byte)")
    return Chart("curves", title, about, figure=style(fig, height=480))
