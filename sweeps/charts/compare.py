"""Several studies on the same axes (``sweeps report A B C``): Pareto fronts, the vocabulary
curve and learning curves, the study as the colour.

Each data function runs the single-study chart module's own ``data`` on each study's part of the
combined frames (``sweeps.results.combine``: a ``study`` column) and stacks the results with a
``study`` column, so a front, a best-per-size line or a curve means exactly what it means in one
study's report.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sweeps.charts import Chart, curves, esc, pareto, style, vocab
from sweeps.results import StudyResults

#: One colour per study, in the order the studies were named (plotly's default cycle).
STUDY_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
TOKENIZER_DASH = {"bpe": "solid", "word": "dash", "byte": "dot"}


def study_color(i: int) -> str:
    return STUDY_COLORS[i % len(STUDY_COLORS)]


def _parts(frame: pd.DataFrame, studies: list[str]) -> list[tuple[str, pd.DataFrame]]:
    return [(name, frame[frame["study"] == name].drop(columns="study")) for name in studies]


def _stack(parts: list[pd.DataFrame], studies: list[str]) -> pd.DataFrame:
    frames = [p.assign(study=name) for p, name in zip(parts, studies, strict=True)]
    frame = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)
    return frame[["study", *(c for c in frame.columns if c != "study")]]


def pareto_data(trials: pd.DataFrame, studies: list[str], x: str) -> pd.DataFrame:
    """``pareto.data`` per study (each study's own front), stacked with a ``study`` column."""
    return _stack([pareto.data(part, x) for _, part in _parts(trials, studies)], studies)


def vocab_data(trials: pd.DataFrame, studies: list[str]) -> pd.DataFrame:
    """Per study, ``vocab.data``'s best trial per tokenizer and vocabulary size."""
    return _stack([vocab.data(part)[1] for _, part in _parts(trials, studies)], studies)


def curves_data(evals: pd.DataFrame, trials: pd.DataFrame, studies: list[str]) -> pd.DataFrame:
    """Per study, ``curves.data``'s drawn curves (every trial's, or the best few of a big study),
    stacked with a ``study`` column."""
    parts = []
    for (_, ev), (_, tr) in zip(_parts(evals, studies), _parts(trials, studies), strict=True):
        parts.append(curves.data(ev, tr)[0])
    return _stack(parts, studies)


def pareto_chart(results: StudyResults, studies: list[str]) -> Chart:
    title = "Pareto fronts by study: quality against memory and time"
    about = (
        "Each study's complete trials in its colour, its non-dominated ones joined by its "
        "front. Lower-left is better: the study whose front lies lower-left wins."
    )
    panels = [
        (label, scale, pareto_data(results.trials, studies, col))
        for col, label, scale in pareto.AXES
    ]
    if all(p[2].empty for p in panels):
        return Chart(
            "compare-pareto",
            title,
            about,
            note="No trial has both a val_bpb and a measured peak memory or wall time.",
        )
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=[f"val_bpb vs {p[0]}" for p in panels],
        horizontal_spacing=0.08,
    )
    for col_i, (label, scale, frame) in enumerate(panels, start=1):
        for i, name in enumerate(studies):
            part = frame[frame["study"] == name]
            color = study_color(i)
            fig.add_trace(
                go.Scatter(
                    x=part["x"].to_numpy() / scale,
                    y=part["val_bpb"].to_numpy(),
                    mode="markers",
                    name=name,
                    legendgroup=name,
                    showlegend=col_i == 1,
                    marker={
                        "color": color,
                        "size": 7,
                        "opacity": np.where(part["on_front"], 1.0, pareto.FADED),
                    },
                    customdata=part["number"].to_numpy(),
                    hovertemplate=f"{esc(name)} trial %{{customdata}}<br>val_bpb %{{y:.4f}}"
                    f"<br>{label} %{{x:,.1f}}<extra></extra>",
                ),
                row=1,
                col=col_i,
            )
            front = part[part["on_front"]].sort_values("x")
            if len(front):
                fig.add_trace(
                    go.Scatter(
                        x=front["x"].to_numpy() / scale,
                        y=front["val_bpb"].to_numpy(),
                        mode="lines",
                        line={"shape": "hv", "color": color, "width": 2},
                        name=f"{name} front",
                        legendgroup=name,
                        showlegend=False,
                        hoverinfo="skip",
                    ),
                    row=1,
                    col=col_i,
                )
        fig.update_xaxes(title_text=label, type="log", row=1, col=col_i)
        fig.update_yaxes(title_text="val_bpb (bits per byte)", row=1, col=col_i)
    return Chart("compare-pareto", title, about, figure=style(fig, height=460))


def vocab_chart(results: StudyResults, studies: list[str]) -> Chart:
    title = "Vocabulary by study: the best val_bpb per vocabulary size"
    about = (
        "One line per study and tokenizer (colour: study; dash: tokenizer), through the "
        "best complete trial at each vocabulary size."
    )
    best = vocab_data(results.trials, studies)
    if best.empty:
        return Chart(
            "compare-vocab", title, about, note="No trial has a vocabulary size and a val_bpb."
        )
    fig = go.Figure()
    for i, name in enumerate(studies):
        for tokenizer, line in best[best["study"] == name].groupby("tokenizer", sort=True):
            fig.add_trace(
                go.Scatter(
                    x=line["vocab_size"].to_numpy(),
                    y=line["val_bpb"].to_numpy(),
                    mode="lines+markers",
                    name=f"{name}: {tokenizer}",
                    legendgroup=name,
                    line={
                        "color": study_color(i),
                        "dash": TOKENIZER_DASH.get(str(tokenizer), "dashdot"),
                    },
                    customdata=line["number"].to_numpy(),
                    hovertemplate=f"{esc(name)} ({esc(tokenizer)}) trial %{{customdata}}<br>"
                    "V=%{x:,}<br>val_bpb %{y:.4f}<extra></extra>",
                )
            )
    fig.update_xaxes(title_text="vocab size", type="log")
    fig.update_yaxes(title_text="val_bpb (bits per byte)")
    return Chart("compare-vocab", title, about, figure=style(fig, height=460))


def curves_chart(results: StudyResults, studies: list[str]) -> Chart:
    title = "Learning curves by study"
    about = (
        f"val_bpb at each evaluation, coloured by study (a study of more than "
        f"{curves.ALL_BELOW} trials shows its {curves.BEST} best complete trials)."
    )
    lines = curves_data(results.evals, results.trials, studies)
    if lines.empty:
        return Chart("compare-curves", title, about, note="No evaluation has been recorded yet.")
    fig = go.Figure()
    for i, name in enumerate(studies):
        shown = False
        for number, part in lines[lines["study"] == name].groupby("trial_number", sort=True):
            fig.add_trace(
                go.Scatter(
                    x=part["tokens"].to_numpy(dtype=float),
                    y=part["val_bpb"].to_numpy(dtype=float),
                    mode="lines",
                    name=name,
                    legendgroup=name,
                    showlegend=not shown,
                    line={"color": study_color(i), "width": 1.5},
                    opacity=0.75,
                    hovertemplate=f"{esc(name)} trial {number} ({esc(part['outcome'].iloc[0])})"
                    "<br>%{x:,} tokens<br>val_bpb %{y:.4f}<extra></extra>",
                )
            )
            shown = True
    fig.update_xaxes(title_text="tokens seen")
    fig.update_yaxes(title_text="val_bpb (bits per byte)")
    return Chart("compare-curves", title, about, figure=style(fig, height=480))


#: The cross-study report's sections, in order (each ``make(results, studies)``, drawn by
#: ``sweeps.report.draw``).
CHARTS = (pareto_chart, vocab_chart, curves_chart)
