"""Replicates: trials that differ only in ``seed`` (and fields that differ only with it:
``sweeps.seeds``) are one configuration.

- ``replicates``: one row per configuration (n, mean, sd, min, max, the seeds, the trials) for
  any study, sampled or enqueued; ``replicates_frame`` of a stored study.
- ``rank``: configurations by mean with intervals, and whether the best is distinguishable from
  the runner-up (``sweeps confirm``).
- ``values_by_seed`` and ``metric_of``: what ``sweeps.effects`` pairs by seed, and the trial
  column of an objective.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lm import outcomes
from lm.errors import SweepsError
from sweeps import record as rc
from sweeps.plain import plain_value
from sweeps.seeds import config_params, seeds_of
from sweeps.stats import CONFIDENCE, Comparison, compare

# --- replicates (what tells them apart: ``sweeps.seeds``) -----------------------------------


def scored(trials: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The trials a comparison may use: ``complete``, with a finite ``metric``."""
    if metric not in trials or metric not in rc.METRIC_COLUMNS:
        raise SweepsError(
            f"metric {metric!r} is not a metric of the study's trials; use one of "
            "val_bpb, val_loss, accuracy, peak_mem_bytes, wall_s, tokens_per_s, "
            "flops, ..."
        )
    values = pd.to_numeric(trials[metric], errors="coerce")
    keep = (trials["outcome"] == outcomes.COMPLETE) & np.isfinite(values.astype(float))
    return trials[keep]


def params_of(row: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """The set parameters of one trial row, by name (``param_`` dropped; unset ones left out,
    as a conditional parameter is)."""
    out = {}
    for c in columns:
        v = plain_value(row[c])
        if v is not None:
            out[c.removeprefix("param_")] = v
    return out


def label(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(no parameters)"


def replicates(
    trials: pd.DataFrame, metric: str = "val_bpb", direction: str = "minimize"
) -> pd.DataFrame:
    """One row per configuration among the complete trials with a ``metric``: config (a label),
    params (dict), n, mean, sd (NaN with one trial), min, max, seeds and trials (lists), best
    first by ``direction``."""
    columns = ["config", "params", "n", "mean", "sd", "min", "max", "seeds", "trials"]
    done = scored(trials, metric)
    if "copy_of" in done:  # a repeated point's copied result is not another replicate
        done = done[done["copy_of"].isna()]
    names = config_params(done)
    groups: dict[str, dict[str, Any]] = {}
    for (_, row), seed in zip(done.iterrows(), seeds_of(done), strict=True):
        params = params_of(row, names)
        key = json.dumps(params, sort_keys=True, default=str)
        group = groups.setdefault(key, {"params": params, "values": [], "seeds": [], "trials": []})
        group["values"].append(float(row[metric]))
        group["seeds"].append(seed)
        group["trials"].append(int(row["number"]))
    rows = []
    for g in groups.values():
        order = sorted(
            range(len(g["seeds"])), key=lambda i: (str(type(g["seeds"][i])), g["seeds"][i])
        )
        g["seeds"] = [g["seeds"][i] for i in order]
        g["trials"] = [g["trials"][i] for i in order]
        values = np.asarray(g["values"])
        rows.append(
            {
                "config": label(g["params"]),
                "params": g["params"],
                "n": len(values),
                "mean": values.mean(),
                "sd": values.std(ddof=1) if len(values) > 1 else math.nan,
                "min": values.min(),
                "max": values.max(),
                "seeds": g["seeds"],
                "trials": g["trials"],
            }
        )
    frame = pd.DataFrame(rows, columns=columns)
    ascending = direction != "maximize"
    return frame.sort_values("mean", ascending=ascending, kind="stable").reset_index(drop=True)


def values_by_seed(done: pd.DataFrame, metric: str) -> dict[str, dict[Any, float]]:
    """config label -> {seed: metric}; a seed run twice for one configuration counts once (the
    later trial: a rerun replaces what it repeats)."""
    names = config_params(done)
    out: dict[str, dict[Any, float]] = {}
    for (_, row), seed in zip(done.iterrows(), seeds_of(done), strict=True):
        key = seed if seed is not None else f"trial {int(row['number'])}"
        out.setdefault(label(params_of(row, names)), {})[key] = float(row[metric])
    return out


# --- ranking (``sweeps confirm``) ---------------------------------------------------------------


@dataclass(frozen=True)
class Ranking:
    """Configurations by mean, each with its interval, and best against runner-up."""

    metric: str
    direction: str
    level: float
    rows: pd.DataFrame  # replicates() plus low, high (interval of the mean)
    comparison: Comparison | None  # runner-up minus best, by seed
    distinguishable: bool | None  # None: fewer than two configurations, or no test possible

    def sentence(self) -> str:
        if len(self.rows) < 2:
            return "only one configuration has results; nothing to rank against"
        best, second = self.rows.iloc[0], self.rows.iloc[1]
        c = self.comparison
        if c is None or c.test == "none":
            return (
                f"the best ({best['config']}) cannot be tested against the runner-up "
                f"({second['config']}): fewer than 2 seeds on a side"
            )
        verb = "is" if self.distinguishable else "is not"
        return (
            f"the best ({best['config']}, {best['mean']:.4f}) {verb} distinguishable from "
            f"the runner-up ({second['config']}, {second['mean']:.4f}) at level "
            f"{self.level:g}: difference {c.diff:+.4f} [{c.low:+.4f}, {c.high:+.4f}], "
            f"p = {c.p:.3g} ({c.test}, n = {c.n_pairs or len(best['seeds'])})"
        )


def rank(
    trials: pd.DataFrame,
    *,
    metric: str = "val_bpb",
    direction: str = "minimize",
    level: float = 0.05,
) -> Ranking:
    """The configurations of ``trials`` by mean, with t intervals of each mean
    (``scipy.stats.t.interval``), and the best compared with the runner-up by seed."""
    from scipy import stats

    if not 0.0 < level < 1.0:
        raise SweepsError(f"--level must be between 0 and 1, got {level}")
    reps = replicates(trials, metric, direction)
    lows, highs = [], []
    for _, r in reps.iterrows():
        if r["n"] >= 2 and r["sd"] > 0:
            low, high = stats.t.interval(
                CONFIDENCE, r["n"] - 1, loc=r["mean"], scale=r["sd"] / math.sqrt(r["n"])
            )
        else:
            low = high = r["mean"] if r["n"] >= 2 else math.nan
        lows.append(float(low))
        highs.append(float(high))
    reps = reps.assign(low=lows, high=highs)
    if len(reps) < 2:
        return Ranking(metric, direction, level, reps, None, None)
    by_config = values_by_seed(scored(trials, metric), metric)
    c = compare(by_config[reps["config"].iloc[1]], by_config[reps["config"].iloc[0]])
    decided = None if c.test == "none" else bool(c.p < level)
    return Ranking(metric, direction, level, reps, c, decided)


# --- from a database ---------------------------------------------------------------------------

#: Objective names whose trial column has another name.
_COLUMN = {"peak_mem": "peak_mem_bytes", "params": "params_total"}


def metric_of(data: Any, metric: str | None) -> tuple[str, str]:
    """(trial column, direction): ``metric``, else the study's first objective."""
    from sweeps.spec.values import METRICS

    names = [_COLUMN.get(o, o) for o in data.objectives]
    if metric is None:
        metric = names[0] if names and names[0] in data.trials else "val_bpb"
    metric = _COLUMN.get(metric, metric)
    if metric in names and len(data.directions) == len(names):
        return metric, data.directions[names.index(metric)]
    by_column = {_COLUMN.get(k, k): v for k, v in METRICS.items()}
    return metric, by_column.get(metric, "maximize" if metric == "accuracy" else "minimize")


def replicates_frame(storage: Any, study_name: str, metric: str = "val_bpb") -> pd.DataFrame:
    """One row per configuration of a stored study (``replicates``): n, mean, sd, min, max of
    ``metric``, the seeds and the trials."""
    from sweeps import results

    data = results.load(storage, study_name)
    column, direction = metric_of(data, metric)
    return replicates(data.trials, column, direction)
