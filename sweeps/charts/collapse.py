"""The verdicts on predictions (``unigram_collapse``, ``stalled``, ``unk_dominated``): for each
such trial, the model's mean predicted distribution beside the corpus token frequencies over
their likeliest tokens (from its last evaluation's ``top_tokens``).

A collapsed model reproduces the corpus bars token for token (its prediction ignores the
context); a stalled one matches neither; an ``<unk>``-dominated one puts its mass on ``<unk>``.
Each title gives the verdict, the optimizer steps it was judged at and both KL numbers; the best
complete trial is drawn last for contrast.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lm import outcomes
from sweeps.charts import Chart, esc, style
from sweeps.results import StudyResults

MAX_TRIALS = 4
MAX_TOKENS = 30
VERDICTS = outcomes.PREDICTION_VERDICTS


def shown_token(token: str) -> str:
    """Whitespace made visible (a leading space is a different token), then escaped."""
    visible = token.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5")
    return esc(visible or "\u2205")


def _last_top_tokens(evals: pd.DataFrame, number: int) -> dict[str, Any] | None:
    if "top_tokens" not in evals:
        return None
    rows = evals[(evals["trial_number"] == number)]
    for value in reversed(rows["top_tokens"].tolist()):
        if isinstance(value, dict) and value.get("tokens"):
            return value
    return None


def data(
    trials: pd.DataFrame, evals: pd.DataFrame, *, max_trials: int = MAX_TRIALS
) -> pd.DataFrame:
    """Long rows (trial_number, label, rank, token, corpus, model) for up to ``max_trials``
    trials with a verdict on their predictions (lowest number first), then the best complete
    trial; empty when no trial has one or none recorded ``top_tokens``."""
    columns = ["trial_number", "label", "rank", "token", "corpus", "model"]
    judged = trials[trials["outcome"].isin(VERDICTS)].sort_values("number")
    picked = []
    for row in judged.itertuples(index=False):
        top = _last_top_tokens(evals, row.number)
        if top is not None:
            picked.append((row, top, f"trial {row.number} ({row.outcome})"))
        if len(picked) == max_trials:
            break
    if not picked:
        return pd.DataFrame(columns=columns)
    done = trials[(trials["outcome"] == outcomes.COMPLETE) & trials["val_bpb"].notna()]
    if len(done):
        best = done.loc[done["val_bpb"].idxmin()]
        top = _last_top_tokens(evals, int(best["number"]))
        if top is not None:
            picked.append((best, top, f"trial {int(best['number'])} (best complete, contrast)"))
    rows = []
    for trial, top, label in picked:
        number = int(trial["number"] if isinstance(trial, pd.Series) else trial.number)
        for rank, (token, p_corpus, p_model) in enumerate(
            zip(top["tokens"], top["corpus"], top["model"], strict=False)
        ):
            if rank == MAX_TOKENS:
                break
            rows.append((number, label, rank, str(token), float(p_corpus), float(p_model)))
    return pd.DataFrame(rows, columns=columns)


def _stats_text(row: pd.Series | None) -> str:
    """``: after N steps, KL(mean||unigram) x, mean KL to mean y`` from what the row has."""
    if row is None:
        return ""
    parts = []
    step = row.get("last_eval_step")
    if pd.isna(step):
        step = row.get("steps")
    if pd.notna(step):
        parts.append(f"after {int(step):,} steps")
    for key, name in (
        ("kl_mean_to_unigram", "KL(mean||unigram)"),
        ("mean_kl_to_mean", "mean KL to mean"),
        ("top20_overlap", "top-20 overlap"),
    ):
        if pd.notna(row.get(key)):
            parts.append(f"{name} {row[key]:.3f}")
    return (": " + ", ".join(parts)) if parts else ""


def applies(results: StudyResults) -> bool:
    """Some trial got a verdict on its predictions (its section says so even when it recorded
    no ``top_tokens`` to draw)."""
    return bool(results.trials["outcome"].isin(VERDICTS).any())


def chart(results: StudyResults) -> Chart:
    title = "Verdicts on predictions: mean prediction against corpus frequencies"
    about = (
        "For trials ended as unigram_collapse, stalled or unk_dominated: the model's mean "
        "predicted probability of each token beside its corpus frequency, with the steps "
        "it was judged at and both KL numbers. Matching bars (unigram_collapse) mean the "
        "model predicts the corpus unigram whatever the context; a stalled model matches "
        "neither; an unk_dominated one piles its mass on <unk>."
    )
    frame = data(results.trials, results.evals)
    if frame.empty:
        n = int(results.trials["outcome"].isin(VERDICTS).sum())
        note = (
            "No trial ended as unigram_collapse, stalled or unk_dominated."
            if n == 0
            else f"{n} trial(s) got a verdict but none recorded top_tokens in its evaluations."
        )
        return Chart("collapse", title, about, note=note)
    labels = list(dict.fromkeys(frame["label"]))
    stats = results.trials.set_index("number")
    titles = []
    for label in labels:
        number = int(frame.loc[frame["label"] == label, "trial_number"].iloc[0])
        row = stats.loc[number] if number in stats.index else None
        titles.append(esc(label + _stats_text(row)))
    fig = make_subplots(rows=len(labels), cols=1, subplot_titles=titles, vertical_spacing=0.12)
    for i, label in enumerate(labels, start=1):
        part = frame[frame["label"] == label]
        x = [shown_token(t) for t in part["token"]]
        for name, color, col in (
            ("corpus", "#7f7f7f", "corpus"),
            ("model mean", "#9467bd", "model"),
        ):
            fig.add_trace(
                go.Bar(
                    x=np.arange(len(x)),
                    y=part[col].to_numpy(),
                    name=name,
                    marker={"color": color},
                    legendgroup=name,
                    showlegend=i == 1,
                    customdata=x,
                    hovertemplate=f"%{{customdata}}: {name} p=%{{y:.4f}}<extra></extra>",
                ),
                row=i,
                col=1,
            )
        fig.update_xaxes(tickvals=list(range(len(x))), ticktext=x, tickangle=-45, row=i, col=1)
        fig.update_yaxes(title_text="probability", row=i, col=1)
    fig.update_layout(barmode="group")
    return Chart("collapse", title, about, figure=style(fig, height=260 * len(labels) + 80))
