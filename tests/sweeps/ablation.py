"""Synthetic ablation trials for the effects tests: trial tables of known effects, and an
``[ablation]`` study stored as ``sweeps run`` leaves it (the ffn_width table's values)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeps import storage as st
from sweeps.spec import read_spec

STUDIES = Path(__file__).resolve().parents[2] / "studies"
#: studies/README.md's ffn_width table: val_bpb by d_ff, seeds 0 / 1 / 2.
FFN_WIDTH = {
    256: [2.193, 2.203, 2.248],
    192: [2.252, 2.221, 2.229],
    128: [2.222, 2.225, 2.190],
    64: [2.214, 2.219, 2.190],
    1: [2.235, 2.210, 2.198],
}


def table(
    points: dict[int, list[float]], seeds: list[int] | None = None, outcome: str = "complete"
) -> pd.DataFrame:
    """Trials of an ablation over d_ff, one per (d_ff, seed), as ``results.study_frame`` has
    them: parameters as ``param_*``, the trained seed in ``seed``."""
    rows = []
    for d_ff, values in points.items():
        for i, v in enumerate(values):
            seed = seeds[i] if seeds is not None else i
            rows.append(
                {
                    "number": len(rows),
                    "outcome": outcome,
                    "param_d_ff": d_ff,
                    "param_seed": seed,
                    "seed": seed,
                    "val_bpb": v,
                }
            )
    return pd.DataFrame(rows)


def noisy(mean: float, n: int, sd: float, rng: np.random.Generator) -> list[float]:
    return list(mean + sd * rng.standard_normal(n))


def store_ablation(url: str, name: str, points: dict[int, list[float]]) -> None:
    """An ablation study as ``sweeps run`` leaves it: ffn_width's spec stored, one complete
    trial per point and seed with its parameters and recorded metrics."""
    spec = tomllib.loads((STUDIES / "ffn_width.toml").read_text())
    spec["study"]["name"] = name
    stored = read_spec(spec, source=STUDIES / "ffn_width.toml", check_paths=False).to_dict()
    study = optuna.create_study(study_name=name, storage=st.open_storage(url))
    study.set_user_attr("spec", stored)
    seeds = sorted({s for values in points.values() for s in range(len(values))})
    dists = {"d_ff": CategoricalDistribution(list(points)), "seed": CategoricalDistribution(seeds)}
    for d_ff, values in points.items():
        for seed, v in enumerate(values):
            study.add_trial(
                create_trial(
                    state=TrialState.COMPLETE,
                    value=v,
                    params={"d_ff": d_ff, "seed": seed},
                    distributions=dists,
                    user_attrs={
                        "outcome": "complete",
                        "val_bpb": v,
                        "config": {"d_ff": d_ff, "seed": seed},
                    },
                )
            )
