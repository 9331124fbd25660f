"""Parallel coordinates over the sampled parameters, each line a trial coloured by val_bpb.

Categorical parameters become integer axes labelled with their choices; a numeric parameter
spanning two orders of magnitude or more (vocab size, learning rate) gets a log10 axis.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sweeps.charts import Chart, esc, style
from sweeps.results import StudyResults

LOG_SPAN = 100.0


def dimension(label: str, values: pd.Series) -> dict[str, Any]:
    """A plotly parcoords dimension for one parameter column (no missing values)."""
    numeric = pd.to_numeric(values, errors="coerce")
    is_bool = values.map(lambda v: isinstance(v, (bool, np.bool_))).any()
    if numeric.notna().all() and not is_bool:
        v = numeric.astype(float).to_numpy()
        if v.min() > 0 and v.max() / v.min() >= LOG_SPAN:
            ticks = [10.0 ** e for e in range(math.floor(math.log10(v.min())),
                                               math.ceil(math.log10(v.max())) + 1)]
            return {"label": f"{label} (log)", "values": np.log10(v),
                    "tickvals": [math.log10(t) for t in ticks],
                    "ticktext": [f"{t:g}" for t in ticks]}
        return {"label": label, "values": v}
    choices = sorted({str(x) for x in values}, key=lambda c: (len(c), c))
    codes = {c: i for i, c in enumerate(choices)}
    return {"label": label, "values": np.array([codes[str(x)] for x in values], dtype=float),
            "tickvals": list(range(len(choices))), "ticktext": [esc(c) for c in choices]}


def data(trials: pd.DataFrame) -> tuple[list[dict[str, Any]], np.ndarray, int]:
    """(dimensions, val_bpb colour values, trials left out for a missing parameter) over the
    trials with a val_bpb; the last dimension is val_bpb itself."""
    params = [c for c in trials.columns if c.startswith("param_")]
    frame = trials[trials["val_bpb"].notna()]
    if not params or frame.empty:
        return [], np.array([]), 0
    complete = frame.dropna(subset=params)
    dims = [dimension(c.removeprefix("param_"), complete[c]) for c in params]
    bpb = complete["val_bpb"].to_numpy(dtype=float)
    dims.append({"label": "val_bpb", "values": bpb})
    return dims, bpb, len(frame) - len(complete)


def chart(results: StudyResults) -> Chart:
    title = "Parallel coordinates over the sampled parameters"
    about = ("One line per trial with a val_bpb, coloured by it (darker is better); drag along "
             "an axis to filter.")
    dims, bpb, dropped = data(results.trials)
    if len(bpb) == 0:
        return Chart("parallel", title, about,
                     note="No trial with a val_bpb has sampled parameters.")
    if dropped:
        about += f" {dropped} trial(s) without every parameter (conditional ones) are left out."
    fig = go.Figure(go.Parcoords(
        dimensions=dims,
        line={"color": bpb, "colorscale": "Viridis", "showscale": True,
              "colorbar": {"title": {"text": "val_bpb"}}}))
    return Chart("parallel", title, about, figure=style(fig, height=460,
                                                         margin={"l": 60, "r": 40, "t": 70,
                                                                 "b": 30}))
