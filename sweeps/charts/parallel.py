"""Parallel coordinates over the sampled parameters, each line a trial coloured by val_bpb.

Categorical parameters become integer axes labelled with their choices; a numeric parameter
spanning two orders of magnitude or more (vocab size, learning rate) gets a log10 axis. A
conditional parameter (``when = "..."``) is not set in a trial whose condition is false: that
trial is drawn all the same, through a ``(not set)`` tick at the bottom of the axis, so a space
where every trial lacks one parameter or another (``d_ff`` only with sdpa, ``lr`` only with naive)
still has its lines.

Replicates are not parameters: ``seed``, and any field that differs only between replicates
(``sweeps.seeds.replicate_params``), gets no axis; the complete trials of one configuration are
one line at their mean val_bpb, with a ``val_bpb sd`` axis for the spread of their seeds when some
configuration ran more than one. Interrupted and re-queued runs are left out
(``sweeps.charts.settled``), so a partial run's val_bpb does not stretch the axis.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lm import outcomes
from sweeps import seeds
from sweeps.charts import Chart, esc, settled, style
from sweeps.plain import plain_value
from sweeps.results import StudyResults

LOG_SPAN = 100.0
#: The axis of the spread of a configuration's replicates (0 for a single run).
SPREAD = "val_bpb sd"
#: The tick of a trial in which the parameter is not set (its condition was false).
NOT_SET = "(not set)"


def nice_ticks(low: float, high: float, n: int = 5) -> list[float]:
    """About ``n`` round ticks (steps of 1, 2 or 5 times a power of ten) covering [low, high]."""
    if not high > low:
        return [low]
    raw = (high - low) / (n - 1)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first, last = math.floor(low / step), math.ceil(high / step)
    # round(): 0.1 + 0.2 is 0.30000000000000004, and a tick's text should read 0.3
    return [round(k * step, 12) for k in range(first, last + 1)]


def dimension(label: str, values: pd.Series) -> dict[str, Any]:
    """A plotly parcoords dimension for one parameter column; a missing value (the parameter
    not set in that trial) sits at the ``(not set)`` tick, below every value."""
    missing = values.isna().to_numpy()
    present = values[~missing]
    numeric = pd.to_numeric(present, errors="coerce")
    is_bool = present.map(lambda v: isinstance(v, (bool, np.bool_))).any()
    if len(present) and numeric.notna().all() and not is_bool:
        v = numeric.astype(float).to_numpy()
        log = v.min() > 0 and v.max() / v.min() >= LOG_SPAN
        if log:
            ticks = [
                10.0**e
                for e in range(math.floor(math.log10(v.min())), math.ceil(math.log10(v.max())) + 1)
            ]
            label, v = f"{label} (log)", np.log10(v)
            tickvals, ticktext = [math.log10(t) for t in ticks], [f"{t:g}" for t in ticks]
        elif not missing.any():
            return {"label": label, "values": v}
        else:
            tickvals = nice_ticks(float(v.min()), float(v.max()))
            ticktext = [f"{t:g}" for t in tickvals]
        if not missing.any():
            return {"label": label, "values": v, "tickvals": tickvals, "ticktext": ticktext}
        # One step of the axis's ticks below its lowest (a lone tick: one unit below it).
        gap = (tickvals[-1] - tickvals[0]) / (len(tickvals) - 1) if len(tickvals) > 1 else 1.0
        at = min(tickvals[0], float(v.min())) - gap
        out = np.full(len(values), at)
        out[~missing] = v
        top = max(tickvals[-1], float(v.max()))
        return {
            "label": label,
            "values": out,
            "range": [at, top],
            "tickvals": [at, *tickvals],
            "ticktext": [NOT_SET, *ticktext],
        }
    choices = sorted({str(x) for x in present}, key=lambda c: (len(c), c))
    if missing.any():
        choices.insert(0, NOT_SET)  # at the bottom, as on a numeric axis
    codes = {c: i for i, c in enumerate(choices)}
    shown = [NOT_SET if gone else str(x) for x, gone in zip(values, missing, strict=True)]
    return {
        "label": label,
        "values": np.array([codes[s] for s in shown], dtype=float),
        "tickvals": list(range(len(choices))),
        "ticktext": [esc(c) for c in choices],
    }


def lines(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per line, in trial order: the configuration's parameters (``param_*``, replicate
    fields left out), val_bpb, n and sd. The complete trials of a configuration are one line (the
    mean of their seeds, n of them, their sample sd; 0 for one); every other trial with a
    val_bpb is a line of its own (n 1). Interrupted and re-queued runs: none."""
    frame = settled(trials)
    frame = frame[frame["val_bpb"].notna()]
    params = seeds.config_params(frame)
    if frame.empty:
        return pd.DataFrame(columns=[*params, "val_bpb", "n", "sd"])
    key = (
        frame[params].map(lambda v: repr(plain_value(v))).agg("|".join, axis=1)
        if params
        else pd.Series("", index=frame.index)
    )
    alone = frame["outcome"] != outcomes.COMPLETE
    key = key.where(~alone, "trial " + frame["number"].astype(str))
    grouped = frame.assign(_line=key).groupby("_line", sort=False)
    out = grouped.agg(
        **{c: (c, "first") for c in params},
        val_bpb=("val_bpb", "mean"),
        n=("val_bpb", "size"),
        sd=("val_bpb", "std"),
    )
    return out.assign(sd=out["sd"].fillna(0.0)).reset_index(drop=True)


def data(trials: pd.DataFrame) -> tuple[list[dict[str, Any]], np.ndarray, dict[str, int]]:
    """(dimensions, val_bpb colour values, {parameter: lines in which it is not set}) over
    ``lines``; the last dimension is val_bpb itself, after ``SPREAD`` when a configuration ran
    more than one replicate."""
    frame = lines(trials)
    params = [c for c in frame.columns if c.startswith("param_")]
    if not params or frame.empty:
        return [], np.array([]), {}
    dims = [dimension(c.removeprefix("param_"), frame[c]) for c in params]
    bpb = frame["val_bpb"].to_numpy(dtype=float)
    if (frame["n"] > 1).any():
        dims.append({"label": SPREAD, "values": frame["sd"].to_numpy(dtype=float)})
    dims.append({"label": "val_bpb", "values": bpb})
    unset = {c.removeprefix("param_"): int(n) for c in params if (n := frame[c].isna().sum())}
    return dims, bpb, unset


def applies(results: StudyResults) -> bool:
    """Some parameter other than a replicate field varied among the trials with a val_bpb."""
    frame = lines(results.trials)
    return any(
        frame[c].map(lambda v: repr(plain_value(v))).nunique() > 1
        for c in frame.columns
        if c.startswith("param_")
    )


def chart(results: StudyResults) -> Chart:
    title = "Parallel coordinates over the sampled parameters"
    about = (
        "One line per configuration with a val_bpb, coloured by it (darker is better); drag "
        "along an axis to filter. Replicates are not parameters: a configuration's seeds are "
        "one line at their mean, the val_bpb sd axis their spread (0: one run); interrupted "
        "and re-queued runs are left out."
    )
    dims, bpb, unset = data(results.trials)
    if len(bpb) == 0:
        return Chart(
            "parallel", title, about, note="No trial with a val_bpb has sampled parameters."
        )
    if unset:
        counts = ", ".join(f"{name} in {n}" for name, n in unset.items())
        about += (
            f" Conditional parameters not set (their condition was false): {counts} "
            f"line(s); those lines pass through the {NOT_SET} tick."
        )
    fig = go.Figure(
        go.Parcoords(
            dimensions=dims,
            line={
                "color": bpb,
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": {"text": "val_bpb"}},
            },
        )
    )
    return Chart(
        "parallel",
        title,
        about,
        figure=style(fig, height=460, margin={"l": 60, "r": 40, "t": 70, "b": 30}),
    )
