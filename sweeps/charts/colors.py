"""Colour by what varied: the field whose values colour the learning curves, the vocabulary
chart's points and the Pareto points, so a reader sees which vocabulary (or width, or rate) is
which without hovering; the outcome is shown by the marker's symbol instead.

The field (``field_of``): the one asked for (``sweeps report --color-by FIELD``, checked by
``choose``: a parameter of the study or a field of the trained config), else an ``[ablation]``'s
first varied factor, else the parameter Optuna's importances rank first (``importance.data``,
the seed left out: replicates are not what varied), else the first parameter that took more than
one value, else none (every trial one colour).

Groups (``groups``): one per value when there are at most ``MAX_LEVELS``; a numeric field with
more is cut into ``BINS`` quantile bins (log-spaced values read as ranges, ``lr 1e-4 to 3e-4``).
A trial that does not set the field (a conditional parameter) is ``(not set)``, in grey.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.colors

from lm import outcomes
from lm.errors import SweepsError
from sweeps import record as rc
from sweeps.charts import TOKENIZER_COLORS
from sweeps.plain import plain_value
from sweeps.results import CONFIG_COLUMNS, StudyResults

SEED = "seed"
MAX_LEVELS = 10
BINS = 6
NOT_SET = "(not set)"
NOT_SET_COLOR = "#bbbbbb"
ONE_COLOR = "#1f77b4"
PALETTE = plotly.colors.qualitative.D3
#: A symbol per outcome (complete a filled circle; every other ending its own shape), in the
#: order of ``lm.outcomes.ORDER``.
_SYMBOLS = (
    "circle",
    "triangle-down",
    "square",
    "pentagon",
    "x",
    "diamond",
    "star",
    "hexagon",
    "cross",
    "triangle-up",
    "star-square",
    "bowtie",
    "circle-open",
    "square-open",
)
SYMBOLS: dict[str, str] = dict(zip(outcomes.ORDER, _SYMBOLS, strict=False))
#: How a learning curve is dashed by outcome: solid when complete, dotted when stopped early
#: (the unigram baseline beside it is dashed).
COMPLETE_DASH, STOPPED_DASH, BASELINE_DASH = "solid", "dot", "dash"


def symbol(outcome: str) -> str:
    return SYMBOLS.get(outcome, "circle-open")


def fields(results: StudyResults) -> list[str]:
    """What ``--color-by`` accepts: the study's parameters, then the trained config's fields
    that any trial recorded."""
    trials = results.trials
    params = [c.removeprefix("param_") for c in trials.columns if c.startswith("param_")]
    config = [
        c for c in CONFIG_COLUMNS if c in trials and c not in params and trials[c].notna().any()
    ]
    return params + config


def values(trials: pd.DataFrame, field: str) -> pd.Series:
    """Each trial's value of ``field``: its parameter, else the trained config's field (a
    parameter a trial did not set falls back to its config, as trained)."""
    out = pd.Series([None] * len(trials), index=trials.index, dtype=object)
    for column in (f"param_{field}", field):
        if column in trials:
            out = out.where(out.notna(), trials[column].astype(object))
    return out.map(plain_value)


def varied(results: StudyResults) -> list[str]:
    """The fields (``fields``) that took more than one value across the trials."""
    return [f for f in fields(results) if values(results.trials, f).dropna().nunique() > 1]


def ablation_factor(results: StudyResults) -> str | None:
    """An ``[ablation]`` study's first varied factor (None: not an ablation)."""
    from sweeps.effects import spec_baseline

    try:
        baseline = spec_baseline(results.user_attrs.get(rc.STUDY_SPEC))
    except SweepsError:
        return None
    return next(iter(baseline), None) if baseline else None


def default_field(results: StudyResults) -> str | None:
    """The field to colour by when none is asked for (see the module docstring)."""
    factor = ablation_factor(results)
    if factor is not None:
        return factor
    changed = [f for f in varied(results) if f != SEED]
    if not changed:
        return None
    from sweeps.charts import importance

    ranked, _ = importance.data(results.trials, results.distributions)
    best = next((n for n in (ranked or {}) if n in changed), None)
    return best or changed[0]


def choose(results: StudyResults, asked: str | None) -> str | None:
    """The field to colour by: ``asked`` (``SweepsError`` naming the fields when it is not
    one), else ``default_field``."""
    if asked is None:
        return default_field(results)
    known = fields(results)
    if asked not in known:
        raise SweepsError(
            f"--color-by {asked!r} is not a field of study {results.name!r}; use "
            f"one of {', '.join(known) or '(none: the study has no trials)'}"
        )
    return asked


def field_of(results: StudyResults) -> str | None:
    """The field the charts colour by: the one the report chose (``StudyResults.color_by``,
    set by ``sweeps.report.build``), else ``default_field``."""
    return results.color_by if results.color_by is not None else default_field(results)


def _label(value: Any) -> str:
    value = plain_value(value)
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def groups(trials: pd.DataFrame, field: str | None) -> tuple[pd.DataFrame, dict[str, str]]:
    """(one row per trial: number, group; {group: colour} in legend order). ``field`` None:
    every trial in one group, ``"all trials"``."""
    if field is None or trials.empty:
        frame = pd.DataFrame({"number": trials["number"].to_numpy(), "group": "all trials"})
        return frame, {"all trials": ONE_COLOR} if len(trials) else {}
    raw = values(trials, field)
    known = raw.dropna()
    numeric = len(known) > 0 and all(
        isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_))
        for v in known
    )
    levels = sorted(known.unique(), key=lambda v: (not numeric, v if numeric else str(v)))
    binned = numeric and len(levels) > MAX_LEVELS
    if binned:
        labels, order = _bins(raw, field)
    else:
        labels = raw.map(lambda v: NOT_SET if pd.isna(v) else f"{field}={_label(v)}")
        order = [f"{field}={_label(v)}" for v in levels]
    colors = _colors(field, order, levels, binned)
    if bool((labels == NOT_SET).any()):
        colors[NOT_SET] = NOT_SET_COLOR
    return pd.DataFrame({"number": trials["number"].to_numpy(), "group": labels.to_numpy()}), colors


def _bins(raw: pd.Series, field: str) -> tuple[pd.Series, list[str]]:
    numbers = pd.to_numeric(raw, errors="coerce").astype(float)
    known = numbers.dropna()
    log = bool((known > 0).all() and known.max() / known.min() > 100)
    scale = np.log10(known) if log else known
    edges = np.unique(np.quantile(scale, np.linspace(0, 1, BINS + 1)))
    shown = [10**e if log else e for e in edges]
    names = [f"{field} {shown[i]:.3g} to {shown[i + 1]:.3g}" for i in range(len(edges) - 1)]
    names = names or [f"{field} {shown[0]:.3g}"]

    def name(v: float) -> str:
        if math.isnan(v):
            return NOT_SET
        x = math.log10(v) if log else v
        i = int(np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(names) - 1))
        return names[i]

    return numbers.map(name), names


def _colors(field: str, order: list[str], levels: list[Any], binned: bool) -> dict[str, str]:
    if field == "tokenizer":  # the colours every chart gives a tokenizer
        return {
            g: TOKENIZER_COLORS.get(str(v), PALETTE[i % len(PALETTE)])
            for i, (g, v) in enumerate(zip(order, levels, strict=True))
        }
    if binned or len(order) > len(PALETTE):
        # ordered bins: a sequential scale, low to high
        scale = plotly.colors.sample_colorscale("Viridis", np.linspace(0, 0.9, len(order)))
        return dict(zip(order, scale, strict=True))
    return {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(order)}
