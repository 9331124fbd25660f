"""An ablation's effects: the table of ``sweeps effects`` and a forest plot (each level's
difference to the baseline, paired by seed, with its 95 % interval). Drawn for an ``[ablation]``
study only (``applies``): another study's report leaves both sections out. The statistics
are ``sweeps.effects``; ``data`` and ``forest_data`` are what tests read.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from lm.errors import SweepsError
from sweeps import effects as fx
from sweeps import record as rc
from sweeps.charts import Chart, esc, style
from sweeps.replicates import metric_of
from sweeps.results import StudyResults

VERDICT_COLORS = {"better": "#2ca02c", "worse": "#d62728"}
UNDECIDED = "#7f7f7f"
ABOUT_TABLE = (
    "Each level of each varied field against the baseline: the difference is the "
    "level minus the baseline, paired by seed, with a 95 % t interval; the p-value is "
    "a paired t-test's, Holm-corrected across the study's comparisons. \"Cannot tell "
    'apart" says how many seeds would settle it.'
)
ABOUT_FOREST = (
    "Difference to the baseline per level with its 95 % interval. An interval that "
    "crosses zero cannot be told apart from the baseline; green is better, red worse "
    "(after Holm's correction)."
)


def data(results: StudyResults) -> tuple[fx.Effects | None, str]:
    """(the effects of an ``[ablation]`` study, else None; why not, when None)."""
    baseline = fx.spec_baseline(results.user_attrs.get(rc.STUDY_SPEC))
    if baseline is None:
        return (
            None,
            "Not an [ablation] study (`sweeps effects STUDY --baseline FIELD=VALUE` "
            "compares any study's configurations).",
        )
    metric, direction = metric_of(results, None)
    try:
        return fx.effects(
            results.trials,
            study=results.name,
            baseline=baseline,
            metric=metric,
            direction=direction,
        ), ""
    except SweepsError as exc:  # no complete trial yet, the baseline not run yet
        return None, str(exc)


def forest_data(result: fx.Effects) -> pd.DataFrame:
    """One row per compared level: label, diff, low, high, verdict, colour (baseline left out,
    levels in the table's order)."""
    rows = []
    for e in result.rows[1:]:
        c = e.comparison
        assert c is not None  # only the baseline, rows[0], has none
        colour = next((v for k, v in VERDICT_COLORS.items() if e.verdict.startswith(k)), UNDECIDED)
        if e.n == 0:
            continue  # every seed stopped: named in the table, nothing to draw
        rows.append(
            {
                "label": f"{e.factor}={e.level}",
                "diff": c.diff,
                "low": c.low,
                "high": c.high,
                "n": e.n,
                "verdict": e.verdict,
                "colour": colour,
            }
        )
    return pd.DataFrame(rows, columns=["label", "diff", "low", "high", "n", "verdict", "colour"])


def applies(results: StudyResults) -> bool:
    """An ``[ablation]`` study (its spec names a baseline): the table and the forest plot are its
    answer, and say so while no result is in yet."""
    return fx.spec_baseline(results.user_attrs.get(rc.STUDY_SPEC)) is not None


def table_chart(results: StudyResults) -> Chart:
    title = "Ablation effects: each level against the baseline"
    result, why = data(results)
    if result is None:
        return Chart("effects", title, ABOUT_TABLE, note=why)
    return Chart("effects", title, ABOUT_TABLE, html=render(result))


def render(result: fx.Effects) -> str:
    e = html.escape
    rows = fx.table_rows(result)
    head = "".join(f"<th>{e(h)}</th>" for h in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in r.values()) + "</tr>" for r in rows)
    notes = "".join(f"<p>{e(line)}</p>" for line in fx.footer_lines(result))
    return f'<table class="effects"><tr>{head}</tr>{body}</table>{notes}'


def forest_chart(results: StudyResults) -> Chart:
    title = "Ablation effects: forest plot"
    result, why = data(results)
    frame = forest_data(result) if result is not None else pd.DataFrame()
    if result is None or frame.empty:
        return Chart(
            "forest", title, ABOUT_FOREST, note=why or "Only the baseline has results so far."
        )
    frame = frame.iloc[::-1]  # plotly draws the first category at the bottom
    fig = go.Figure(
        go.Scatter(
            x=frame["diff"],
            y=frame["label"].map(esc),
            mode="markers",
            marker={"color": frame["colour"], "size": 10},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": frame["high"] - frame["diff"],
                "arrayminus": frame["diff"] - frame["low"],
                "thickness": 2,
            },
            customdata=frame["verdict"].map(esc),
            hovertemplate="%{y}: %{x:+.4f}<br>%{customdata}<extra></extra>",
            showlegend=False,
        )
    )
    fig.add_vline(x=0, line={"color": "#000", "width": 1, "dash": "dash"})
    fig.update_xaxes(
        title_text=f"{result.metric} difference to the baseline "
        f"({'lower' if result.direction == 'minimize' else 'higher'} "
        "is better)"
    )
    return Chart(
        "forest", title, ABOUT_FOREST, figure=style(fig, height=max(260, 60 + 40 * len(frame)))
    )
