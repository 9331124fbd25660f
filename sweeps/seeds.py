"""What tells replicates apart, not configurations: the seed (the trained config's, else the
sampled ``seed`` parameter), and any parameter that differs only where the seed does. Read by
``sweeps.effects`` (a configuration is its other parameters) and by the report's importances and
parallel coordinates (replicates are no axis of theirs)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from sweeps.plain import plain_value, plain_values

SEED = "seed"


def config_params(trials: pd.DataFrame) -> list[str]:
    """The parameter columns that tell configurations apart: every ``param_*`` but the fields
    that tell replicates apart (``replicate_params``)."""
    replicate = set(replicate_params(trials))
    return [c for c in trials.columns if c.startswith("param_") and c not in replicate]


def replicate_params(trials: pd.DataFrame) -> list[str]:
    """The parameter columns that tell replicates apart, not configurations: ``param_seed``, and
    any parameter that differs only where the seed does (a ``data_seed`` set to the seed): one
    value per seed, several in all, while one seed ran several configurations (so it is not a
    factor confounded with the seed, which the data could not tell from one)."""
    columns = [c for c in trials.columns if c.startswith("param_")]
    seed_column = f"param_{SEED}"
    out = [c for c in columns if c == seed_column]
    seeds = pd.Series(seeds_of(trials), index=trials.index, dtype=object)
    known = seeds.notna()
    frame, seeds = trials[known], seeds[known].map(repr)
    candidates = [c for c in columns if c != seed_column]
    shown = frame[candidates].map(lambda v: repr(plain_value(v)))
    for c in candidates:
        others = [o for o in candidates if o != c]
        if not others or shown[c].nunique() < 2:
            continue
        if shown[c].groupby(seeds).nunique().max() > 1:
            continue  # differs under one seed: a factor
        configs = shown[others].agg("|".join, axis=1)
        if configs.groupby(seeds).nunique().max() > 1:
            out.append(c)
    return out


def seeds_of(trials: pd.DataFrame) -> list[Any]:
    """Each trial's seed, as a plain Python value (``plain.plain_values``: an ``int``, never
    a numpy integer that ``isinstance(s, int)`` would refuse): the trained config's, else the
    sampled parameter."""
    seeds = trials[SEED] if SEED in trials else pd.Series([None] * len(trials), trials.index)
    if f"param_{SEED}" in trials:
        seeds = seeds.astype(object).where(seeds.notna(), trials[f"param_{SEED}"])
    return plain_values(seeds)
