"""The report's charts: one module per chart, each a ``data(...)`` function (tested on data) and a
``chart(results) -> Chart`` that draws it. Charts read only ``sweeps.results`` frames.

Thousands of trials: every chart stays readable and the file small. Scatter charts keep one
marker per trial (SVG handles a few thousand); the memory map aggregates trials per cell; the
learning curves draw the best few trials and a quantile band of the rest; the samples table
shows a selection. Text that reaches plotly (token strings, reasons) is HTML-escaped first:
plotly renders a small set of tags inside labels, and ``<Q>`` must show as ``<Q>``; its control
characters are escaped as on the terminal (``sweeps.text.escape_controls``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from lm import outcomes
from sweeps.text import escape_controls

TOKENIZER_COLORS = {"bpe": "#1f77b4", "word": "#ff7f0e", "byte": "#2ca02c"}
MIB = 2**20


@dataclass
class Chart:
    """One report section: a figure, or a note saying why there is none, or ready HTML; or
    ``error``: the one line of what went wrong when the chart could not be drawn at all (the
    report leaves it out with that line, and draws the rest: ``sweeps.report.draw``)."""

    key: str
    title: str
    about: str  # one or two sentences: what to look for
    figure: go.Figure | None = None
    note: str | None = None
    html: str | None = None  # a non-plotly section (the samples table), already escaped
    error: str | None = None


#: One colour per outcome, the same in every chart; outcomes in the fixed legend order.
outcome_color = outcomes.color
outcome_order = outcomes.display_order


def esc(text: Any) -> str:
    """Text for a plotly label or hover: escaped, so ``<Q>`` or ``<script>`` shows as typed,
    and control characters shown as the terminal shows them (``sweeps.text``)."""
    return html.escape(escape_controls("" if text is None else str(text)), quote=False)


def style(fig: go.Figure, *, height: int = 420, **layout: Any) -> go.Figure:
    """The report's common look (white template, compact margins, legend on the right)."""
    settings: dict[str, Any] = {
        "template": "plotly_white",
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {"itemsizing": "constant"},
    }
    fig.update_layout(**{**settings, **layout})
    return fig


def settled(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials whose result stands, for fronts and axis ranges: not ``interrupted`` (a partial
    run, stopped from outside and queued again) and not a run that was re-queued (a later trial
    of its ``retry_of`` chain holds its parameters)."""
    keep = trials["outcome"] != outcomes.INTERRUPTED
    if "retry_of" in trials and len(trials):
        root = pd.to_numeric(trials["retry_of"], errors="coerce").fillna(trials["number"])
        keep &= trials["number"] == trials["number"].groupby(root).transform("max")
    return trials[keep]
