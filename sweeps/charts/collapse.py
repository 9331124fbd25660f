"""Unigram collapse: for collapsed trials, the model's mean predicted distribution beside the
corpus token frequencies over their likeliest tokens (from each evaluation's ``top_tokens``).

A collapsed model reproduces the corpus bars token for token (its prediction ignores the
context); the best complete trial is drawn last for contrast.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lm import outcomes
from sweeps.charts import Chart, esc, style
from sweeps.results import StudyResults

MAX_TRIALS = 4
MAX_TOKENS = 30
COLLAPSED = outcomes.UNIGRAM_COLLAPSE


def shown_token(token: str) -> str:
    """Whitespace made visible (a leading space is a different token), then escaped."""
    visible = token.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5")
    return esc(visible or "\u2205")


def _last_top_tokens(evals: pd.DataFrame, number: int) -> dict | None:
    if "top_tokens" not in evals:
        return None
    rows = evals[(evals["trial_number"] == number)]
    for value in reversed(rows["top_tokens"].tolist()):
        if isinstance(value, dict) and value.get("tokens"):
            return value
    return None


def data(trials: pd.DataFrame, evals: pd.DataFrame, *,
         max_trials: int = MAX_TRIALS) -> pd.DataFrame:
    """Long rows (trial_number, label, rank, token, corpus, model) for up to ``max_trials``
    collapsed trials (lowest number first), then the best complete trial; empty when no trial
    collapsed or none recorded ``top_tokens``."""
    columns = ["trial_number", "label", "rank", "token", "corpus", "model"]
    collapsed = trials[trials["outcome"] == COLLAPSED].sort_values("number")
    picked = []
    for row in collapsed.itertuples(index=False):
        top = _last_top_tokens(evals, row.number)
        if top is not None:
            picked.append((row, top, f"trial {row.number} ({COLLAPSED})"))
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
                zip(top["tokens"], top["corpus"], top["model"], strict=False)):
            if rank == MAX_TOKENS:
                break
            rows.append((number, label, rank, str(token), float(p_corpus), float(p_model)))
    return pd.DataFrame(rows, columns=columns)


def chart(results: StudyResults) -> Chart:
    title = "Unigram collapse: mean prediction against corpus frequencies"
    about = ("For trials ended as unigram_collapse: the model's mean predicted probability of "
             "each token beside its corpus frequency. Matching bars mean the model predicts the "
             "corpus unigram whatever the context.")
    frame = data(results.trials, results.evals)
    if frame.empty:
        n = int((results.trials["outcome"] == COLLAPSED).sum())
        note = ("No trial ended as unigram_collapse." if n == 0 else
                f"{n} trial(s) collapsed but none recorded top_tokens in its evaluations.")
        return Chart("collapse", title, about, note=note)
    labels = list(dict.fromkeys(frame["label"]))
    stats = results.trials.set_index("number")
    titles = []
    for label in labels:
        number = int(frame.loc[frame["label"] == label, "trial_number"].iloc[0])
        row = stats.loc[number] if number in stats.index else None
        extra = ""
        if row is not None and pd.notna(row.get("top20_overlap")):
            extra = (f": top-20 overlap {row['top20_overlap']:.2f}, KL(mean||unigram) "
                     f"{row['kl_mean_to_unigram']:.3f}, "
                     f"mean KL to mean {row['mean_kl_to_mean']:.3f}")
        titles.append(esc(label + extra))
    fig = make_subplots(rows=len(labels), cols=1, subplot_titles=titles, vertical_spacing=0.12)
    for i, label in enumerate(labels, start=1):
        part = frame[frame["label"] == label]
        x = [shown_token(t) for t in part["token"]]
        for name, color, col in (("corpus", "#7f7f7f", "corpus"), ("model mean", "#9467bd",
                                                                     "model")):
            fig.add_trace(go.Bar(x=np.arange(len(x)), y=part[col].to_numpy(), name=name,
                                 marker={"color": color}, legendgroup=name, showlegend=i == 1,
                                 customdata=x,
                                 hovertemplate=f"%{{customdata}}: {name} p=%{{y:.4f}}"
                                               "<extra></extra>"), row=i, col=1)
        fig.update_xaxes(tickvals=list(range(len(x))), ticktext=x, tickangle=-45, row=i, col=1)
        fig.update_yaxes(title_text="probability", row=i, col=1)
    fig.update_layout(barmode="group")
    return Chart("collapse", title, about, figure=style(fig, height=260 * len(labels) + 80))
