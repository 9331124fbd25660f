"""Parameter importances (Optuna's ``get_param_importances``) for val_bpb.

The complete trials are replayed into an in-memory single-objective study (val_bpb, whatever the
study's objectives), so a multi-objective study has importances too and the database is read
once. Optuna's default evaluator (fANOVA) needs scikit-learn; without it PED-ANOVA is used, which
needs nothing more (the chart says which).

A conditional parameter (``when = "..."``) is set in only some trials. PED-ANOVA ranks it over the
trials that set it; fANOVA ranks only the parameters every trial has. Either way the note names
those parameters and says which were ranked, so a parameter missing from the bars is explained.

Replicates are not parameters: ``seed``, and any field that differs only between replicates
(``sweeps.seeds.replicate_params``), is not ranked, and the complete trials of one
configuration are replayed as one trial at their mean (five seeds are not five points of the
space); the note gives the seeds' spread. Drawn when at least two parameters varied (``applies``):
the importance of a lone parameter is 1 by definition.
"""

from __future__ import annotations

import importlib.util
import warnings

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.distributions import BaseDistribution

from lm import outcomes
from sweeps import replicates as rp
from sweeps import seeds
from sweeps.charts import Chart, esc, style
from sweeps.results import StudyResults

MIN_TRIALS = 2


def evaluator() -> tuple[optuna.importance.BaseImportanceEvaluator, str]:
    if importlib.util.find_spec("sklearn") is not None:
        return optuna.importance.FanovaImportanceEvaluator(seed=0), "fANOVA"
    return optuna.importance.PedAnovaImportanceEvaluator(), "PED-ANOVA"


def configurations(trials: pd.DataFrame) -> pd.DataFrame:
    """The complete trials with a val_bpb as configurations (``sweeps.replicates.replicates``: the
    trials that differ only in replicate fields are one): params, n, mean, sd."""
    done = trials[(trials["outcome"] == outcomes.COMPLETE) & trials["val_bpb"].notna()]
    return rp.replicates(done, "val_bpb")


def varied(trials: pd.DataFrame) -> list[str]:
    """The parameters (replicate fields left out) with more than one value among the
    configurations."""
    configs = configurations(trials)
    values: dict[str, set[str]] = {}
    for params in configs["params"]:
        for name, value in params.items():
            values.setdefault(name, set()).add(repr(value))
    return [name for name, seen in values.items() if len(seen) > 1]


def applies(results: StudyResults) -> bool:
    """At least two parameters varied among the complete trials: something to rank."""
    return len(varied(results.trials)) >= 2


def _spread(configs: pd.DataFrame) -> str:
    """What the note says of the replicates ('' when every configuration ran once)."""
    several = configs[configs["n"] > 1]
    if several.empty:
        return ""
    return (
        f" Replicates averaged: {len(several)} configuration(s) ran more than once, the "
        f"median sd of their seeds {several['sd'].median():.4f} bits per byte."
    )


def data(
    trials: pd.DataFrame, distributions: dict[str, BaseDistribution]
) -> tuple[dict[str, float] | None, str]:
    """(importances by parameter, most important first; or None) and a note: the evaluator used,
    or why there are no importances (fewer than 2 complete configurations, nothing varied...).
    Replicate fields are not ranked; a configuration's replicates count once, at their mean."""
    configs = configurations(trials)
    if len(configs) < MIN_TRIALS:
        return None, (
            f"Parameter importances need at least {MIN_TRIALS} complete "
            f"configurations with a val_bpb; this study has {len(configs)}."
        )
    replicate = {c.removeprefix("param_") for c in seeds.replicate_params(trials)}
    distributions = {n: d for n, d in distributions.items() if n not in replicate}
    if not distributions:
        return None, "The study has no sampled parameters, so there is nothing to rank."
    frozen = []
    for params_of, mean in zip(configs["params"], configs["mean"], strict=True):
        params = {n: v for n, v in params_of.items() if n in distributions}
        try:
            frozen.append(
                optuna.trial.create_trial(
                    params=params,
                    distributions={n: distributions[n] for n in params},
                    value=float(mean),
                )
            )
        except ValueError:
            continue  # a value outside the recorded distribution (the space changed): skip
    if len(frozen) < MIN_TRIALS:
        return None, "Too few complete trials fit the recorded search space to rank parameters."
    method, name = evaluator()
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line
    try:
        study = optuna.create_study(direction="minimize")
        study.add_trials(frozen)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importances = optuna.importance.get_param_importances(study, evaluator=method)
    except (ValueError, RuntimeError) as exc:
        return None, f"Optuna could not rank the parameters: {exc}"
    finally:
        optuna.logging.set_verbosity(verbosity)
    partial = partly_set(frozen)
    if not importances:
        return None, "No parameter was varied across the complete trials." + partial_note(
            partial, importances
        )
    n_trials = int(configs["n"].sum())
    over = (
        f"{len(frozen)} complete trials"
        if n_trials == len(frozen)
        else f"{len(frozen)} configurations of {n_trials} complete trials"
    )
    return dict(importances), (
        f"{name} over {over} (target: val_bpb)."
        + partial_note(partial, importances)
        + _spread(configs)
    )


def partly_set(frozen: list[optuna.trial.FrozenTrial]) -> dict[str, int]:
    """{parameter: trials that set it} of the parameters some trials do not set (conditional)."""
    counts: dict[str, int] = {}
    for trial in frozen:
        for name in trial.params:
            counts[name] = counts.get(name, 0) + 1
    return {n: c for n, c in counts.items() if c < len(frozen)}


def partial_note(partial: dict[str, int], ranked: dict[str, float]) -> str:
    """What the note says of the parameters set in only some trials ('' when there are none)."""
    if not partial:
        return ""
    shown = ", ".join(f"{n} ({c})" for n, c in partial.items())
    out = [n for n in partial if n not in ranked]
    return f" Set in only some trials (conditional): {shown}" + (
        f"; not ranked: {', '.join(out)}." if out else "; ranked over the trials that set them."
    )


def chart(results: StudyResults) -> Chart:
    title = "Parameter importances"
    about = "How much of the variation in val_bpb each sampled parameter explains (Optuna)."
    importances, note = data(results.trials, results.distributions)
    if importances is None:
        return Chart("importance", title, about, note=note)
    names = list(importances)[::-1]  # most important on top
    fig = go.Figure(
        go.Bar(
            x=[importances[n] for n in names],
            y=[esc(n) for n in names],
            orientation="h",
            marker={"color": "#1f77b4"},
            hovertemplate="%{y}: %{x:.3f}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="importance")
    return Chart(
        "importance",
        title,
        f"{about} {note}",
        figure=style(fig, height=max(260, 60 + 40 * len(names))),
    )
