"""What vocabulary size is worth: val_bpb beside per-token loss against vocab size, by tokenizer,
with bytes per token and the ``<unk>`` rate.

Per-token loss falls as tokens carry less (a byte, or an ``<unk>`` standing for any rare word is
easy to predict); bits per byte charges every byte of text, so only it compares tokenizers.

The x axis is the vocabulary the model trained with (``results.vocab_actual``): a word tokenizer
on a small corpus can have fewer words than the trial asked for, and the requested size would
place it where it never was. A trial that recorded no model (never launched) keeps its requested
size.

Each trial's point is coloured by what varied (``sweeps.charts.colors``), its outcome its
marker's symbol; the lines (the best trial per size, bytes per token, the ``<unk>`` rate) are one
per tokenizer, told apart by their dash, and in the tokenizer's colour when the colour is the
tokenizer (else dark grey, so the points' colours stay the only legend of colour).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lm import outcomes
from sweeps.charts import TOKENIZER_COLORS, Chart, colors, esc, replicates, style
from sweeps.effects import text_warning
from sweeps.results import StudyResults

#: Per tokenizer, exact vocab sizes up to this many distinct values; log-spaced bins beyond.
MAX_EXACT = 40
BINS = 24
#: Above this many trials, individual points are left out (the best-per-size lines remain).
MAX_POINTS = 600
TOKENIZER_DASH = {"bpe": "solid", "word": "dash", "byte": "dot"}
LINE_COLOR = "#444"


def size_bins(sizes: pd.Series) -> pd.Series:
    """A bin label per row: the size itself when there are few distinct sizes, else the index of
    a log-spaced bin."""
    sizes = sizes.astype(float)
    if sizes.nunique() <= MAX_EXACT:
        return sizes
    edges = np.geomspace(sizes.min(), sizes.max() * (1 + 1e-9), BINS + 1)
    return pd.Series(np.digitize(sizes, edges), index=sizes.index).astype(float)


def vocab_sizes(trials: pd.DataFrame) -> pd.Series:
    """Each trial's vocabulary size as trained (``vocab_actual``), else as requested."""
    requested = pd.to_numeric(trials["vocab_size"], errors="coerce").astype(float)
    if "vocab_actual" not in trials:
        return requested
    return pd.to_numeric(trials["vocab_actual"], errors="coerce").astype(float).fillna(requested)


def _trained_fully(trials: pd.DataFrame) -> pd.Series:
    """Complete trials, and trials judged (``lm.outcomes.PREDICTION_VERDICTS``) after training
    their whole ``max_tokens``."""
    judged = trials["outcome"].isin(outcomes.PREDICTION_VERDICTS)
    if {"tokens_seen", "max_tokens"} <= set(trials.columns):
        seen = pd.to_numeric(trials["tokens_seen"], errors="coerce")
        budget = pd.to_numeric(trials["max_tokens"], errors="coerce")
        judged &= (seen >= budget).fillna(False)
    else:
        judged &= False
    return (trials["outcome"] == outcomes.COMPLETE) | judged


def data(trials: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(points, best, tokens):

    - points: trials with val_bpb and a vocab size: number, outcome, tokenizer, vocab_size (as
      trained: ``vocab_sizes``), val_bpb, val_loss;
    - best: per tokenizer and vocab size (or size bin), the trial with the lowest val_bpb among
      trials that trained their whole budget (complete, or given a verdict on their predictions
      at their last evaluation: a 300-word model's bits per byte is the point of this chart);
      all trials when none did; sorted by size;
    - tokens: per tokenizer and vocab size (or bin), mean bytes_per_token and unk_rate.
    """
    cols = [
        "number",
        "outcome",
        "tokenizer",
        "vocab_size",
        "val_bpb",
        "val_loss",
        "bytes_per_token",
        "unk_rate",
    ]
    frame = trials[cols].copy()
    frame["full"] = _trained_fully(trials)
    frame["vocab_size"] = vocab_sizes(trials)
    frame = frame[frame["tokenizer"].notna() & np.isfinite(frame["vocab_size"])]
    points = frame[np.isfinite(frame["val_bpb"])].reset_index(drop=True)
    pool = points[points["full"]]
    pool = pool if len(pool) else points
    best_rows = []
    for _, part in pool.groupby("tokenizer", sort=True):
        part = part.assign(bin=size_bins(part["vocab_size"]))
        best_rows.append(part.loc[part.groupby("bin")["val_bpb"].idxmin()])
    best = pd.concat(best_rows) if best_rows else pool.assign(bin=[])
    best = best.drop(columns="bin").sort_values(["tokenizer", "vocab_size"]).reset_index(drop=True)
    tok_rows = []
    measured = frame[np.isfinite(frame["bytes_per_token"].astype(float))]
    for tokenizer, part in measured.groupby("tokenizer", sort=True):
        part = part.assign(bin=size_bins(part["vocab_size"]))
        agg = part.groupby("bin").agg(
            vocab_size=("vocab_size", "median"),
            bytes_per_token=("bytes_per_token", "mean"),
            unk_rate=("unk_rate", "mean"),
        )
        tok_rows.append(agg.assign(tokenizer=tokenizer))
    tokens = (
        pd.concat(tok_rows).reset_index(drop=True)
        if tok_rows
        else pd.DataFrame(columns=["vocab_size", "bytes_per_token", "unk_rate", "tokenizer"])
    )
    tokens = tokens.sort_values(["tokenizer", "vocab_size"]).reset_index(drop=True)
    return points[cols[:6]], best[cols[:6]], tokens


def unk_shares(trials: pd.DataFrame) -> str:
    """Each word vocabulary's ``<unk>`` share of the validation targets and of their bytes (the
    trials' evaluations: ``unk_rate_targets``, ``unk_byte_rate``), as one line; "" when none."""
    if not {"tokenizer", "unk_rate_targets", "unk_byte_rate"} <= set(trials.columns):
        return ""
    words = trials[(trials["tokenizer"] == "word") & trials["unk_rate_targets"].notna()]
    parts = []
    for size, group in words.assign(size=vocab_sizes(words)).groupby("size"):
        in_bytes = group["unk_byte_rate"].dropna()
        parts.append(
            f"{int(size):,} words: {group['unk_rate_targets'].mean():.1%} of the "
            "validation tokens"
            + (f", {in_bytes.mean():.1%} of their bytes" if len(in_bytes) else "")
        )
    return "; ".join(parts)


def point_styles(results: StudyResults, points: pd.DataFrame) -> pd.DataFrame:
    """``points`` (``data``'s) with each trial's group and color (what varied) and symbol (its
    outcome)."""
    groups, palette = colors.groups(results.trials, colors.field_of(results))
    frame = points.merge(groups, on="number", how="left")
    frame["group"] = frame["group"].fillna(colors.NOT_SET)
    frame["color"] = frame["group"].map(lambda g: palette.get(g, colors.NOT_SET_COLOR))
    frame["symbol"] = frame["outcome"].map(colors.symbol)
    order = {g: i for i, g in enumerate(palette)}
    return (
        frame.assign(order=frame["group"].map(order))
        .sort_values(["order", "number"], kind="stable")
        .drop(columns="order")
        .reset_index(drop=True)
    )


def line_color(results: StudyResults, tokenizer: str) -> str:
    """A tokenizer's lines: its colour when the points are coloured by tokenizer, else grey."""
    if colors.field_of(results) in (None, "tokenizer"):
        return TOKENIZER_COLORS.get(tokenizer, "#17becf")
    return LINE_COLOR


def applies(results: StudyResults) -> bool:
    """More than one vocabulary (tokenizer and size) among the trials: something to compare."""
    columns = [c for c in ("tokenizer", "vocab_size") if c in results.trials]
    return len(results.trials[columns].dropna().drop_duplicates()) > 1 if columns else False


def has_words(trials: pd.DataFrame) -> bool:
    """Whether a word tokenizer is among the trials: the only kind with ``<unk>`` targets, so
    the only reason for the ``<unk>`` panel (always 0 for BPE and bytes)."""
    return "tokenizer" in trials and bool((trials["tokenizer"] == "word").any())


def panels(trials: pd.DataFrame) -> list[tuple[int, int, str, str]]:
    """(row, col, metric, title) of each panel drawn: the ``<unk>`` rate only with words."""
    out = [
        (1, 1, "val_bpb", "val_bpb (bits per byte)"),
        (1, 2, "val_loss", "val loss (nats per token)"),
        (2, 1, "bytes_per_token", "bytes per token"),
    ]
    if has_words(trials):
        out.append((2, 2, "unk_rate", "<unk> rate"))
    return out


def chart(results: StudyResults) -> Chart:
    title = "Vocabulary: what a bigger vocabulary buys"
    shown = panels(results.trials)
    about = _about(results, shown)
    points, best, tokens = data(results.trials)
    if points.empty and tokens.empty:
        return Chart("vocab", title, about, note="No trial has a vocabulary size and a val_bpb.")
    fig = make_subplots(
        rows=2,
        cols=2,
        vertical_spacing=0.16,
        horizontal_spacing=0.08,
        shared_xaxes="all",
        subplot_titles=[esc(title) for *_, title in shown],
        specs=[[{}, {}], [{}, {} if len(shown) == 4 else None]],
    )
    if len(points) <= MAX_POINTS:
        _add_points(fig, results, points)
    for tokenizer in sorted(set(points["tokenizer"]) | set(tokens["tokenizer"])):
        _add_tokenizer_lines(fig, results, tokenizer, best, tokens, shown)
    means = replicates.data(
        results.trials.assign(vocab_size=vocab_sizes(results.trials)), "vocab_size"
    )
    if len(means):  # configurations run with several seeds: their mean and interval
        fig.add_trace(replicates.trace(means), row=1, col=1)
    fig.update_xaxes(type="log")
    fig.update_xaxes(title_text="vocab size", row=2)
    if len(shown) == 4:
        fig.update_yaxes(tickformat=".0%", row=2, col=2)
    return Chart("vocab", title, about, figure=style(fig, height=640))


def _about(results: StudyResults, shown: list[tuple[int, int, str, str]]) -> str:
    """What the chart shows, and the warnings its trials call for (unequal text, <unk>)."""
    about = (
        "Left: bits per byte, comparable across tokenizers. Right: per-token loss, which "
        "rewards tokens that carry little (bytes, <unk>) and so misleads. Bottom: bytes per "
        "token"
        + (" and the share of targets that are <unk>" if len(shown) == 4 else "")
        + ". Lines join the best trial per size (dash: the tokenizer); points are coloured "
        "by what varied, their outcome the marker."
    )
    field = colors.field_of(results)
    about += f" Colour: {field}." if field else ""
    unequal = text_warning(results.trials)
    if unequal:
        about += f" Warning: {unequal}."
    dropped = unk_shares(results.trials)
    if dropped:
        about += f" What each word vocabulary drops to <unk>: {dropped}."
    return about


def _add_points(fig: go.Figure, results: StudyResults, points: pd.DataFrame) -> None:
    """Every trial in the top panels (bits per byte, per-token loss), one trace per group."""
    styled = point_styles(results, points)
    for group, part in styled.groupby("group", sort=False):
        for col, metric in ((1, "val_bpb"), (2, "val_loss")):
            fig.add_trace(
                go.Scatter(
                    x=part["vocab_size"].to_numpy(),
                    y=part[metric].to_numpy(),
                    mode="markers",
                    marker={
                        "color": part["color"].iloc[0],
                        "size": 7,
                        "opacity": 0.6,
                        "symbol": part["symbol"].to_numpy(),
                    },
                    name=esc(group),
                    legendgroup=f"group {group}",
                    showlegend=col == 1,
                    customdata=np.stack(
                        [part["number"].to_numpy(), part["outcome"].map(esc).to_numpy()],
                        axis=-1,
                    ),
                    hovertemplate=f"trial %{{customdata[0]}} ({esc(group)}, "
                    "%{customdata[1]})<br>V=%{x:,}<br>%{y:.4f}<extra></extra>",
                ),
                row=1,
                col=col,
            )


def _add_tokenizer_lines(
    fig: go.Figure,
    results: StudyResults,
    tokenizer: object,
    best: pd.DataFrame,
    tokens: pd.DataFrame,
    shown: list[tuple[int, int, str, str]],
) -> None:
    """One tokenizer's lines: its best trial per size in the top panels, its token statistics
    (bytes per token, the <unk> rate) in the bottom ones; one colour and dash for all."""
    color = line_color(results, str(tokenizer))
    dash = TOKENIZER_DASH.get(str(tokenizer), "dashdot")
    name = f"best per size: {esc(tokenizer)}"
    first = True
    for col, metric in ((1, "val_bpb"), (2, "val_loss")):
        line = best[best["tokenizer"] == tokenizer]
        fig.add_trace(
            go.Scatter(
                x=line["vocab_size"].to_numpy(),
                y=line[metric].to_numpy(),
                mode="lines+markers",
                line={"color": color, "dash": dash},
                marker={"size": 5},
                name=name,
                legendgroup=str(tokenizer),
                showlegend=first,
                customdata=line["number"].to_numpy(),
                hovertemplate=f"best: trial %{{customdata}}<br>V=%{{x:,}}<br>{metric} "
                "%{y:.4f}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        first = False
    part = tokens[tokens["tokenizer"] == tokenizer]
    for _, col, metric, _ in shown[2:]:
        fig.add_trace(
            go.Scatter(
                x=part["vocab_size"].to_numpy(),
                y=part[metric].astype(float).to_numpy(),
                mode="lines+markers",
                line={"color": color, "dash": dash},
                name=name,
                legendgroup=str(tokenizer),
                showlegend=False,
                hovertemplate=f"{esc(tokenizer)}: V=%{{x:,.0f}}<br>{metric} %{{y:.3f}}"
                "<extra></extra>",
            ),
            row=2,
            col=col,
        )
