"""A finished source study for ``sweeps confirm`` (``test_pipeline.py``, ``test_confirm_slurm.py``):
stored as ``sweeps run`` leaves it, without training it."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from sweeps import storage as st
from sweeps.spec import read_spec
from tests.sweeps.helpers import spec_dict


def store_source(url: str, data: dict, values: dict[int, float]) -> None:
    """A finished search over ``d_ff`` as ``sweeps run`` leaves it: its spec stored, one
    complete trial per value (seed 0), so ``sweeps confirm`` has configurations to re-run."""
    study = optuna.create_study(study_name=data["study"]["name"], storage=st.open_storage(url))
    study.set_user_attr("spec", read_spec(data, check_paths=False).to_dict())
    dists = {"d_ff": CategoricalDistribution(list(values))}
    for d_ff, v in values.items():
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                value=v,
                params={"d_ff": d_ff},
                distributions=dists,
                user_attrs={"outcome": "complete", "val_bpb": v, "config": {"d_ff": d_ff}},
            )
        )


def source_spec(corpus: Path, name: str = "src", **fixed: object) -> dict:
    return spec_dict(
        name,
        corpus,
        fixed={"tokenizer": "word", "vocab_size": 300, "seed": 0, **fixed},
        space={"d_ff": {"choices": [8, 16, 32]}},
        study={"n_trials": 3},
    )
