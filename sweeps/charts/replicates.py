"""Replicates in the scatter charts: a configuration run with several seeds is drawn as its mean
with a 95 % interval (error bars) on top of its single-seed points, so a reader sees how far
apart two configurations must be before the difference is more than seed noise."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sweeps import replicates as rp
from sweeps.charts import esc

COLUMNS = ["config", "n", "x", "mean", "low", "high"]


def data(trials: pd.DataFrame, x: str, metric: str = "val_bpb") -> pd.DataFrame:
    """Configurations with two or more complete replicates: config, n, x (the replicates' mean
    ``x``), mean, low, high (the t interval of the mean, ``sweeps.replicates.rank``)."""
    if x not in trials or metric not in trials:
        return pd.DataFrame(columns=COLUMNS)
    ranked = rp.rank(trials, metric=metric).rows
    ranked = ranked[ranked["n"] >= 2]
    xs = pd.to_numeric(trials.set_index("number")[x], errors="coerce").astype(float)
    rows = []
    for _, r in ranked.iterrows():
        values = xs.reindex(r["trials"]).to_numpy()
        values = values[np.isfinite(values) & (values > 0)]
        if len(values) and math.isfinite(r["low"]):
            rows.append(
                {
                    "config": r["config"],
                    "n": int(r["n"]),
                    "x": float(values.mean()),
                    "mean": r["mean"],
                    "low": r["low"],
                    "high": r["high"],
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def trace(frame: pd.DataFrame, scale: float = 1.0, *, showlegend: bool = True) -> go.Scatter:
    """The means with their intervals, one legend entry shared by every panel."""
    return go.Scatter(
        x=frame["x"].to_numpy() / scale,
        y=frame["mean"].to_numpy(),
        mode="markers",
        name="mean of seeds (95 % CI)",
        legendgroup="replicates",
        showlegend=showlegend,
        marker={"symbol": "diamond", "size": 9, "color": "#000"},
        error_y={
            "type": "data",
            "symmetric": False,
            "array": (frame["high"] - frame["mean"]).to_numpy(),
            "arrayminus": (frame["mean"] - frame["low"]).to_numpy(),
            "thickness": 1.5,
        },
        customdata=np.stack([frame["config"].map(esc), frame["n"]], axis=-1),
        hovertemplate="%{customdata[0]}<br>mean of %{customdata[1]} seeds %{y:.4f}<extra></extra>",
    )
