"""``sweeps transfer drift``: a stored ``[transfer]`` study's optima and drift as a table and as
JSON, one-line errors, and one tiny real study through ``sweeps run`` then ``drift``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from sweeps import record as rc
from sweeps import storage as st
from sweeps.record import TrialRecord
from tests.sweeps.cli import assert_user_error, sweeps_here
from tests.sweeps.helpers import spec_dict, sweeps_run, toml_text

optuna.logging.set_verbosity(optuna.logging.WARNING)
WIDTHS = (32, 64, 128)
LRS = tuple(2.0**-k for k in range(11, 4, -1))  # 2^-11 .. 2^-5


def store_transfer(
    url: str, name: str, optima: dict[tuple[str, int], float], seeds: int = 3
) -> None:
    """A transfer study as the runner records it (``sweeps.record``): a parabola in log2 lr
    around each (parametrization, width)'s optimum, seed noise, a diverged rate far above."""
    rng = np.random.default_rng(0)
    storage = st.open_storage(url)
    try:
        study = optuna.create_study(study_name=name, storage=storage, directions=["minimize"])
        spec = {
            "study": {"name": name},
            "transfer": {"widths": list(WIDTHS), "lrs": list(LRS), "seeds": list(range(seeds))},
        }
        study.set_user_attr(rc.STUDY_SPEC, spec)
        dists = {
            "parametrization": CategoricalDistribution(["sp", "mup"]),
            "d_model": CategoricalDistribution(list(WIDTHS)),
            "lr": CategoricalDistribution(list(LRS)),
            "seed": CategoricalDistribution(list(range(seeds))),
        }
        trials = []
        for (p, width), opt in optima.items():
            for lr in LRS:
                for seed in range(seeds):
                    x = math.log2(lr) - opt
                    params: dict[str, Any] = {
                        "parametrization": p,
                        "d_model": width,
                        "lr": lr,
                        "seed": seed,
                    }
                    config = {**params, "n_heads": width // 16, "d_ff": 4 * width}
                    if x > 3:
                        rec = TrialRecord(outcome="diverged", reason="loss is nan", config=config)
                        state, values = TrialState.PRUNED, None
                    else:
                        loss = 2.0 + 0.05 * x**2 + float(rng.normal(0, 0.01))
                        rec = TrialRecord(outcome="complete", config=config)
                        rec.update(val_bpb=loss)
                        state, values = TrialState.COMPLETE, [loss]
                    trials.append(
                        optuna.trial.create_trial(
                            state=state,
                            values=values,
                            params=params,
                            distributions=dists,
                            user_attrs=rec.to_attrs(),
                        )
                    )
        study.add_trials(trials)
    finally:
        storage.engine.dispose()


@pytest.fixture
def transfer_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 't.db'}"
    optima = {("sp", w): -7.0 - 0.9 * i for i, w in enumerate(WIDTHS)}
    optima |= {("mup", w): -7.5 for w in WIDTHS}
    store_transfer(url, "tr", optima)
    return url


def test_drift_prints_the_table_and_the_verdicts(transfer_url: str) -> None:
    proc = sweeps_here("transfer", "drift", "tr", "--storage", transfer_url)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "learning-rate transfer in study tr" in lines[0] and "val_bpb" in lines[0]
    header = lines[1].split()
    assert header[:3] == ["parametrization", "width", "optimum"]
    rows = [line.split() for line in lines[2:8]]
    assert [(r[0], r[1]) for r in rows] == [(p, str(w)) for p in ("sp", "mup") for w in WIDTHS]
    assert "sp: does not transfer (the 95% interval lies beyond +-1 octave)" in proc.stdout
    assert "mup: transfers (the 95% interval lies within +-1 octave)" in proc.stdout
    assert "18 ok, 3 diverged, 0 failed" in lines[4]  # sp at 128: 2^-5 diverged, 3 seeds


def test_drift_as_json(transfer_url: str) -> None:
    proc = sweeps_here("transfer", "drift", "tr", "--storage", transfer_url, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["metric"] == "val_bpb" and data["tolerance_octaves"] == 1.0
    assert [(c["parametrization"], c["width"]) for c in data["curves"]] == [
        (p, w) for p in ("sp", "mup") for w in WIDTHS
    ]
    sp, mup = data["drifts"]
    assert sp["verdict"] == "does not" and mup["verdict"] == "transfers"
    assert sp["octaves"] == pytest.approx(-1.8, abs=0.3)
    assert sp["interval"][0] <= sp["octaves"] <= sp["interval"][1]
    widest = data["curves"][2]
    assert widest["diverged"] == 3 and widest["mean_losses"][-1] == "inf"


def test_drift_one_line_errors(transfer_url: str, tmp_path: Path) -> None:
    assert_user_error(sweeps_here("transfer", "drift", "nope", "--storage", transfer_url), "nope")
    assert_user_error(
        sweeps_here("transfer", "drift", "tr", "--storage", transfer_url, "--metric", "x"),
        "--metric 'x' is not a column",
    )
    assert_user_error(
        sweeps_here("confirm", "tr", "--storage", transfer_url),
        "study 'tr' is a transfer study; `sweeps transfer drift tr` reads its answer",
    )
    other = f"sqlite:///{tmp_path / 'o.db'}"
    storage = st.open_storage(other)
    optuna.create_study(study_name="plain", storage=storage)
    storage.engine.dispose()
    assert_user_error(
        sweeps_here("transfer", "drift", "plain", "--storage", other),
        "study 'plain' is not a transfer study",
    )


@pytest.mark.study
def test_a_tiny_transfer_study_end_to_end(corpus: Path, tmp_path: Path) -> None:
    """2 widths x 3 learning rates x 1 seed under SP, a few thousand tokens each: ``sweeps
    run`` enqueues and trains the grid, ``sweeps transfer drift`` reads it back."""
    data = spec_dict("tr_e2e", corpus, space={}, fixed={"tokenizer": "word", "vocab_size": 300})
    del data["space"]
    data["fixed"].pop("lr", None)
    for key in ("sampler", "pruner", "n_trials"):
        data["study"].pop(key)
    data["fixed"].update(eval_every_tokens=100_000, sample_tokens=2)
    data["limits"]["collapse"] = False  # a few steps: the verdicts are not the point here
    data["transfer"] = {
        "widths": [16, 32],
        "parametrizations": ["sp"],
        "lrs": [0.003, 0.01, 0.03],
        "seeds": [0],
    }
    (tmp_path / "tr.toml").write_text(toml_text(data))
    proc = sweeps_run("run", "tr.toml", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    from sweeps import results

    frame = results.load(url, "tr_e2e").trials
    assert len(frame) == 6 and set(frame["outcome"]) == {"complete"}
    assert set(frame["parametrization"]) == {"sp"} and set(frame["base_width"]) == {16}
    assert (
        sorted(zip(frame["d_model"], frame["n_heads"], strict=True))
        == [(16, 2)] * 3 + [(32, 4)] * 3
    )
    proc = sweeps_run("transfer", "drift", "tr_e2e", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    fit = json.loads(proc.stdout)
    assert [(c["width"], c["complete"]) for c in fit["curves"]] == [(16, 3), (32, 3)]
    assert all(c["lr_opt"] is not None for c in fit["curves"])
    [drift] = fit["drifts"]
    assert drift["verdict"] == "cannot tell"  # one seed: no interval
    table = sweeps_run("transfer", "drift", "tr_e2e", cwd=tmp_path)
    assert table.returncode == 0 and "sp: cannot tell" in table.stdout
