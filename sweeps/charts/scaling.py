"""Scaling laws from IsoFLOP trials (``sweeps.scaling``): per budget, val_bpb against model
size with the fitted parabola and its minimum; across budgets, N_opt(C) and D_opt(C) with their
power laws and bootstrap intervals. Drawn when trials carry budgets (``flops_budget``, or FLOPs
that group into budgets) with enough sizes to fit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from lm import outcomes
from sweeps import scaling
from sweeps.charts import Chart, style
from sweeps.results import StudyResults

CURVE_POINTS = 50


def data(trials: pd.DataFrame, seed: int = 0) -> scaling.ScalingFit:
    """The fit of the complete trials (a pruned or failed trial's loss is not its budget's)."""
    done = trials[trials["outcome"] == outcomes.COMPLETE]
    return scaling.fit_isoflops(done, seed=seed)


def curve(p: scaling.Parabola) -> tuple[np.ndarray, np.ndarray]:
    """The fitted parabola over the sampled sizes, for drawing."""
    x = np.linspace(np.log10(p.sizes.min()), np.log10(p.sizes.max()), CURVE_POINTS)
    a, b, c = p.coef  # type: ignore[misc]
    return 10**x, a * x**2 + b * x + c


def fitted(fit: scaling.ScalingFit) -> list[scaling.Parabola]:
    """The budgets whose parabola could be fitted."""
    return [p for p in fit.parabolas if p.coef is not None]


def applies(results: StudyResults) -> bool:
    """Trials planned at compute budgets (``flops_budget``: the section then says what the fit
    still needs), or a fit found in the trials' FLOPs."""
    trials = results.trials
    if "flops_budget" in trials and bool(trials["flops_budget"].notna().any()):
        return True
    return bool(fitted(data(trials)))


def chart(results: StudyResults) -> Chart:
    title = "Scaling laws: IsoFLOP curves"
    fit = data(results.trials)
    about = (
        f"Each colour is one compute budget: val_bpb against N ({fit.size}) with the "
        "fitted parabola in log N; its minimum is N_opt for that budget. Right: N_opt and "
        "D_opt against the budget, power laws with "
        f"{scaling.CONFIDENCE:.0%} bootstrap intervals of the exponents."
    )
    if not fitted(fit):
        why = "; ".join(fit.notes) or "no complete trial has FLOPs, a size and a val_bpb"
        return Chart(
            "scaling",
            title,
            about,
            note=f"No IsoFLOP curve to fit ({why}). Plan trials at a few budgets "
            f"with at least {scaling.MIN_SIZES} sizes each.",
        )
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.1,
        subplot_titles=["val_bpb vs size, per budget", "optimum vs budget"],
    )
    colors = sample_colorscale("Viridis", list(np.linspace(0, 0.9, len(fit.parabolas))))
    for color, p in zip(colors, fit.parabolas, strict=True):
        name = f"C = {p.budget:.2g}"
        fig.add_trace(
            go.Scatter(
                x=p.sizes,
                y=p.losses,
                mode="markers",
                name=name,
                legendgroup=name,
                marker={"color": color, "size": 7},
            ),
            row=1,
            col=1,
        )
        if p.coef is not None:
            x, y = curve(p)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines",
                    line={"color": color},
                    legendgroup=name,
                    showlegend=False,
                    hoverinfo="skip",
                ),
                row=1,
                col=1,
            )
        if p.n_opt is not None:
            fig.add_trace(
                go.Scatter(
                    x=[p.n_opt],
                    y=[p.loss_opt],
                    mode="markers",
                    legendgroup=name,
                    showlegend=False,
                    marker={
                        "symbol": "star",
                        "size": 13,
                        "color": color,
                        "line": {"width": 1, "color": "#000"},
                    },
                    hovertemplate="N_opt %{x:.3g}<extra></extra>",
                ),
                row=1,
                col=1,
            )
    _optima_panel(fig, fit)
    fig.update_xaxes(title_text=f"N ({fit.size})", type="log", row=1, col=1)
    fig.update_yaxes(title_text="val_bpb", row=1, col=1)
    fig.update_xaxes(title_text="compute budget (FLOPs)", type="log", row=1, col=2)
    fig.update_yaxes(title_text="N_opt (parameters), D_opt (tokens)", type="log", row=1, col=2)
    # A section with a figure shows no note: what the fit rests on too little goes in the text.
    if fit.notes:
        about += " Notes: " + "; ".join(fit.notes) + "."
    return Chart("scaling", title, about, figure=style(fig, height=480))


def _optima_panel(fig: go.Figure, fit: scaling.ScalingFit) -> None:
    usable = [p for p in fit.parabolas if p.n_opt is not None and p.note is None]
    c = np.array([p.budget for p in usable])
    for key, law, values in (
        ("N_opt", fit.n_opt, [p.n_opt for p in usable]),
        ("D_opt", fit.d_opt, [p.d_opt for p in usable]),
    ):
        fig.add_trace(
            go.Scatter(
                x=c, y=values, mode="markers", name=key, marker={"size": 9, "symbol": "diamond"}
            ),
            row=1,
            col=2,
        )
        if law is None:
            continue
        lo, hi = law.interval
        grid = np.logspace(np.log10(c.min()), np.log10(c.max()), CURVE_POINTS)
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=law(grid),
                mode="lines",
                name=f"{key} ~ C^{law.exponent:.3f} [{lo:.3f}, {hi:.3f}]",
            ),
            row=1,
            col=2,
        )
