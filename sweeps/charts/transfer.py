"""Learning-rate transfer (``[transfer]`` studies, ``sweeps.transfer``): loss against learning
rate, one curve per width, SP beside µP (the figure µP papers lead with), each width's optimum
marked with its bootstrap interval, and each parametrization's drift from the narrowest width to
the widest stated as transfers / does not / cannot tell.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from sweeps import transfer as tr
from sweeps.charts import Chart, style
from sweeps.results import StudyResults


def data(results: StudyResults, seed: int = 0) -> tr.TransferFit:
    """The fit of the study's trials on its objective (``sweeps.transfer.metric_of``)."""
    trials = results.trials
    metric = tr.metric_of(results.objectives, results.directions, trials)
    return tr.fit_transfer(trials, metric, seed=seed)


def applies(results: StudyResults) -> bool:
    """The study's spec has a ``[transfer]`` table."""
    return tr.is_transfer_study(results.user_attrs)


def drift_line(d: tr.Drift) -> str:
    """``sp: does not transfer: -2.5 octaves [-2.6, -2.4] from d_model 32 to 256 (...)``."""
    said = {tr.TRANSFERS: "transfers", tr.DOES_NOT: "does not transfer"}.get(d.verdict, d.verdict)
    shown = "no optimum" if d.octaves is None else f"{d.octaves:+.2f} octaves"
    if d.interval is not None:
        shown += f" [{d.interval[0]:+.2f}, {d.interval[1]:+.2f}]"
    return f"{d.parametrization}: {said}: {shown} from d_model {d.narrow} to {d.wide} ({d.why})"


def panel_title(parametrization: str, d: tr.Drift | None) -> str:
    """``sp: does not transfer, -1.69 octaves`` (the panel's parametrization and its drift)."""
    if d is None or d.octaves is None:
        return parametrization
    said = {tr.TRANSFERS: "transfers", tr.DOES_NOT: "does not transfer"}.get(d.verdict, d.verdict)
    return f"{parametrization}: {said}, {d.octaves:+.2f} octaves from {d.narrow} to {d.wide}"


def lr_label(lr: float) -> str:
    """A learning rate as a tick: ``2^-7`` for a power of two, else three digits."""
    k = math.log2(lr)
    return f"2<sup>{round(k)}</sup>" if abs(k - round(k)) < 1e-9 else f"{lr:.3g}"


def chart(results: StudyResults) -> Chart:
    title = "Learning-rate transfer across widths"
    fit = data(results)
    about = (
        f"{fit.metric} against the learning rate, one curve per width (the mean over seeds), "
        "SP beside µP; a star marks each width's optimum (a parabola in log2 lr through the "
        f"best rate and its neighbours) with its {fit.confidence:.0%} bootstrap interval over "
        "seeds; an x marks a rate where a seed diverged (worse than any loss). The drift is "
        "the octaves from the narrowest width's optimum to the widest's; it transfers when its "
        f"interval lies within ±{tr.TOLERANCE_OCTAVES:g} octave, does not when it lies wholly "
        "beyond. " + " ".join(drift_line(d) + "." for d in fit.drifts)
    )
    if not fit.curves:
        return Chart("transfer", title, about, note="No finished trial to fit yet.")
    params = list(dict.fromkeys(c.parametrization for c in fit.curves))
    drifts = {d.parametrization: d for d in fit.drifts}
    titles = [panel_title(p, drifts.get(p)) for p in params]
    fig = make_subplots(
        rows=1, cols=len(params), shared_yaxes=True, horizontal_spacing=0.06, subplot_titles=titles
    )
    widths = sorted({c.width for c in fit.curves})
    colors = dict(
        zip(
            widths,
            sample_colorscale("Viridis", list(np.linspace(0, 0.9, len(widths)))),
            strict=True,
        )
    )
    finite = [v for c in fit.curves for v in c.means if math.isfinite(v)]
    top = max(finite) if finite else 1.0
    for col, p in enumerate(params, start=1):
        for c in (c for c in fit.curves if c.parametrization == p):
            _curve(fig, c, colors[c.width], top, col)
    grid = sorted({lr for c in fit.curves for lr in c.lrs})
    fig.update_xaxes(
        type="log", title_text="learning rate", tickvals=grid, ticktext=[lr_label(v) for v in grid]
    )
    fig.update_yaxes(title_text=fit.metric, col=1)
    if fit.notes:
        about += " Notes: " + "; ".join(fit.notes) + "."
    notes = [f"{c.parametrization} d_model {c.width}: {c.note}" for c in fit.curves if c.note]
    if notes:
        about += " " + "; ".join(notes) + "."
    return Chart("transfer", title, about, figure=style(fig, height=460))


def _curve(fig: go.Figure, c: tr.Curve, color: str, top: float, col: int) -> None:
    means = c.means
    ok = np.isfinite(means)
    name = f"d_model {c.width}"
    fig.add_trace(
        go.Scatter(
            x=np.array(c.lrs)[ok],
            y=means[ok],
            mode="lines+markers",
            name=name,
            legendgroup=name,
            showlegend=col == 1,
            line={"color": color},
            hovertemplate=f"{c.parametrization} {name}<br>lr %{{x:.3g}}<br>"
            "%{y:.4f}<extra></extra>",
        ),
        row=1,
        col=col,
    )
    bad = np.isinf(means)
    if bad.any():
        fig.add_trace(
            go.Scatter(
                x=np.array(c.lrs)[bad],
                y=[top] * int(bad.sum()),
                mode="markers",
                legendgroup=name,
                showlegend=False,
                marker={"symbol": "x", "size": 9, "color": color},
                hovertemplate=f"{name}: diverged at lr %{{x:.3g}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
    if c.lr_opt is None or c.loss_opt is None:
        return
    error = None
    if c.interval is not None:
        error = {
            "type": "data",
            "symmetric": False,
            "array": [c.interval[1] - c.lr_opt],
            "arrayminus": [c.lr_opt - c.interval[0]],
            "color": color,
        }
    fig.add_trace(
        go.Scatter(
            x=[c.lr_opt],
            y=[c.loss_opt],
            mode="markers",
            legendgroup=name,
            showlegend=False,
            error_x=error,
            marker={"symbol": "star", "size": 13, "color": color, "line": {"width": 1}},
            hovertemplate=f"{name}: optimum lr %{{x:.3g}}<extra></extra>",
        ),
        row=1,
        col=col,
    )
