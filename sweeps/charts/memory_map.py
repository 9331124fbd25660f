"""Where memory runs out: sequence length x micro-batch, one panel per attention implementation
(or d_ff group), every trial counted in its cell and coloured by outcome.

Trials are aggregated per (panel, seq_len, batch_size, outcome), so thousands of trials stay
readable: the outcomes of one cell are rings of one marker at the cell's own x and y (never
offset, which would read as another seq_len), the first outcome of the legend the outer ring,
each ring's size the count of its outcome and those drawn inside it. Drawn only when the
sequence length or the micro-batch varied (``applies``): one cell has nothing to map.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sweeps.charts import Chart, esc, outcome_color, outcome_order, style
from sweeps.results import StudyResults

MAX_PANELS = 4


def facet(trials: pd.DataFrame) -> tuple[str | None, pd.Series]:
    """The panel of each trial: by attention when it varies, else by d_ff (grouped into at most
    ``MAX_PANELS`` ranges), else one panel (name None)."""
    if trials["attention"].nunique() > 1:
        return "attention", trials["attention"].fillna("?").astype(str).map(
            lambda a: f"attention={a}"
        )
    d_ff = pd.to_numeric(trials["d_ff"], errors="coerce").astype(float)
    values = sorted(d_ff.dropna().unique())
    if len(values) > 1:
        if len(values) <= MAX_PANELS:
            return "d_ff", d_ff.map(lambda v: "d_ff=?" if math.isnan(v) else f"d_ff={v:g}")
        groups = np.array_split(np.array(values), MAX_PANELS)
        labels = {v: f"d_ff {g[0]:g}-{g[-1]:g}" for g in groups for v in g}
        return "d_ff", d_ff.map(lambda v: labels.get(v, "d_ff=?"))
    return None, pd.Series("all trials", index=trials.index)


def data(trials: pd.DataFrame) -> tuple[str | None, pd.DataFrame]:
    """(facet name, cells): one row per (panel, seq_len, batch_size, outcome) with count,
    trials (up to 5 numbers, text), an example reason and ring (the count of this outcome and
    of the cell's outcomes after it in the legend order: the ring's size)."""
    frame = trials[
        ["number", "outcome", "reason", "seq_len", "batch_size", "attention", "d_ff"]
    ].copy()
    for col in ("seq_len", "batch_size"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame = frame[np.isfinite(frame["seq_len"]) & np.isfinite(frame["batch_size"])]
    name, panels = facet(frame)
    frame["panel"] = panels
    columns = ["panel", "seq_len", "batch_size", "outcome", "count", "trials", "reason", "ring"]
    if frame.empty:
        return name, pd.DataFrame(columns=columns)
    cells = (
        frame.groupby(["panel", "seq_len", "batch_size", "outcome"], sort=True)
        .agg(
            count=("number", "size"),
            trials=(
                "number",
                lambda s: (
                    ", ".join(str(n) for n in sorted(s)[:5]) + (", ..." if len(s) > 5 else "")
                ),
            ),
            reason=("reason", "first"),
        )
        .reset_index()
    )
    order = {o: i for i, o in enumerate(outcome_order(cells["outcome"]))}
    cells = cells.assign(_order=cells["outcome"].map(order)).sort_values(
        ["panel", "seq_len", "batch_size", "_order"], ascending=[True, True, True, False]
    )
    cells["ring"] = cells.groupby(["panel", "seq_len", "batch_size"])["count"].cumsum()
    cells = cells.sort_values(["panel", "seq_len", "batch_size", "_order"])
    return name, cells[columns].reset_index(drop=True)


def applies(results: StudyResults) -> bool:
    """The sequence length or the micro-batch size varied among the trials that record both."""
    _, cells = data(results.trials)
    return bool(cells["seq_len"].nunique() > 1 or cells["batch_size"].nunique() > 1)


def chart(results: StudyResults) -> Chart:
    title = "Where memory runs out: sequence length x micro-batch"
    about = (
        "Each cell counts the trials with that sequence length and micro-batch size (after "
        "fitting), coloured by outcome: oom and predicted_oom mark the infeasible region."
    )
    name, cells = data(results.trials)
    if cells.empty:
        return Chart(
            "memory_map",
            title,
            about,
            note="No trial records its sequence length and micro-batch size.",
        )
    if name is not None:
        about += f" One panel per {name} value."
    panels = sorted(cells["panel"].unique())
    fig = make_subplots(
        rows=1,
        cols=len(panels),
        subplot_titles=[esc(p) for p in panels],
        shared_yaxes=True,
        horizontal_spacing=0.04,
    )
    outcomes = outcome_order(cells["outcome"])
    for col, panel in enumerate(panels, start=1):
        for outcome in outcomes:
            part = cells[(cells["panel"] == panel) & (cells["outcome"] == outcome)]
            if part.empty:
                continue
            hover = [
                f"{esc(outcome)}: {c} trial(s) ({esc(t)})<br>{esc(r or '')}"
                for c, t, r in zip(part["count"], part["trials"], part["reason"], strict=True)
            ]
            fig.add_trace(
                go.Scatter(
                    x=part["seq_len"].to_numpy(),
                    y=part["batch_size"].to_numpy(),
                    mode="markers",
                    name=outcome,
                    legendgroup=outcome,
                    showlegend=col == 1
                    or outcome not in set(cells[cells["panel"].isin(panels[: col - 1])]["outcome"]),
                    marker={
                        "color": outcome_color(outcome),
                        "opacity": 0.85,
                        "size": np.minimum(7 + 4 * np.sqrt(part["ring"].to_numpy()), 30),
                        "line": {"width": 0.5, "color": "#333"},
                    },
                    text=hover,
                    hovertemplate="T=%{customdata[0]:.0f}, B=%{y}<br>%{text}<extra></extra>",
                    customdata=part[["seq_len"]].to_numpy(),
                ),
                row=1,
                col=col,
            )
        seqs = sorted(cells["seq_len"].unique())
        fig.update_xaxes(
            type="log",
            tickvals=seqs,
            ticktext=[f"{v:g}" for v in seqs],
            title_text="seq_len (tokens)",
            row=1,
            col=col,
        )
    batches = sorted(cells["batch_size"].unique())
    fig.update_yaxes(type="log", tickvals=batches, ticktext=[f"{v:g}" for v in batches])
    fig.update_yaxes(title_text="micro-batch (sequences)", row=1, col=1)
    return Chart("memory_map", title, about, figure=style(fig, height=440))
