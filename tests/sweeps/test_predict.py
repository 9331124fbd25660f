"""``sweeps predict``: the compute-optimal configuration of a ``[scaling]`` study at a larger
budget, its one-line errors, and ``--verify``: the prediction stored before its trial starts,
the trial trained through the run pipeline, a rerun that reads both and trains nothing."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from lm import flops
from sweeps import loss_fit as lf
from sweeps import predict as pr
from sweeps import record as rc
from sweeps import results
from sweeps.space import distributions, trial_config
from sweeps.spec import FLOPS_BUDGET, budget_tokens, read_spec
from tests.sweeps.helpers import spec_dict, study_trials, sweeps_popen, sweeps_run, wait_for

SIZES = [
    {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 64},
    {"d_model": 24, "n_layers": 1, "n_heads": 2, "d_ff": 96},
    {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 128},
    {"d_model": 48, "n_layers": 1, "n_heads": 3, "d_ff": 192},
]
BUDGETS = [6e8, 1.2e9, 2.4e9]
#: The law the fabricated trials are drawn from (its optimum moves up with the budget).
LAW = lf.LossLaw(E=1.5, A=40.0, alpha=0.4, B=60.0, beta=0.3)


def scaling_dict(name: str, corpus: Path) -> dict[str, Any]:
    data = spec_dict(
        name, corpus, space={}, fixed={"tokenizer": "word", "vocab_size": 300, "lr": 3e-2}
    )
    for key in ("d_model", "n_layers", "n_heads", "d_ff", "max_tokens"):
        data["fixed"].pop(key)
    del data["space"]
    for key in ("sampler", "pruner", "n_trials"):
        data["study"].pop(key)
    data["fixed"].update(eval_every_tokens=100_000, sample_tokens=2)
    data["limits"]["collapse"] = False  # a few hundred steps: the verdicts are not the point
    data["scaling"] = {"budgets": BUDGETS, "sizes": SIZES}
    return data


def fabricate(url: str, data: dict[str, Any], noise: float = 0.005, seed: int = 0) -> None:
    """A finished study of ``data``'s cells, each complete with a val_bpb drawn from ``LAW``."""
    spec = read_spec(data)
    study = optuna.create_study(storage=url, study_name=spec.name)
    study.set_user_attr(rc.STUDY_SPEC, spec.to_dict())
    rng = np.random.default_rng(seed)
    dists = distributions(spec)
    for point in spec.initial_trials():
        cfg = trial_config(spec, point)
        n = flops.count(cfg, 0, n_evals=0).params_non_embedding
        tokens = int(point["max_tokens"])
        value = float(LAW(n, tokens)) * float(np.exp(rng.normal(0, noise)))
        rec = rc.TrialRecord(
            outcome="complete",
            params_non_embedding=n,
            tokens_seen=tokens,
            val_bpb=value,
            flops_budget=float(point[FLOPS_BUDGET]),
        )
        study.add_trial(
            optuna.trial.create_trial(
                params=point,
                distributions={k: dists[k] for k in point},
                value=value,
                user_attrs=rec.to_attrs(),
            )
        )


@pytest.fixture
def fabricated(corpus: Path, tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    fabricate(url, scaling_dict("iso", corpus))
    return url


def test_the_candidates_continue_the_largest_size(corpus: Path) -> None:
    spec = read_spec(scaling_dict("iso", corpus))
    found = pr.candidates(spec)
    assert found[: len(SIZES)] == SIZES  # the study's own sizes first, as they are
    beyond = found[len(SIZES) :]
    assert beyond[0] == {"d_model": 64, "n_layers": 1, "n_heads": 4, "d_ff": 256}
    for size in beyond:  # d_head 16, d_ff 4 x d_model, d_model / n_layers 48 kept
        assert size["d_model"] == 16 * size["n_heads"] and size["d_ff"] == 4 * size["d_model"]
        assert size["n_layers"] == max(1, round(size["d_model"] / 48))
    assert beyond[-1]["d_model"] == pr.MAX_WIDTH_FACTOR * 48


def test_the_verification_spec_is_the_source_with_one_cell(corpus: Path) -> None:
    """Sizes that leave n_heads and d_ff to [fixed]: the cell sets them, the rest is kept."""
    data = scaling_dict("iso", corpus)
    data["scaling"]["sizes"] = [{"d_model": d, "n_layers": 1} for d in (16, 32, 64)]
    data["fixed"].update(n_heads=2, d_ff=128)
    data["scaling"]["seeds"] = [3, 4]
    source = read_spec(data)
    size = pr.candidates(source)[-1]
    assert size == {"d_model": 1024, "n_layers": 16, "n_heads": 32, "d_ff": 2048}
    prediction = {"study": "iso", "budget": 4e12, "size": size, "seed": 3}
    spec = pr.verify_spec(source.to_dict(), prediction)
    [point] = spec.initial_trials()
    assert spec.name == "iso-verify" and spec.study.n_trials == 1
    assert point[FLOPS_BUDGET] == 4e12 and point["seed"] == 3
    cfg = trial_config(spec, point)
    assert {k: getattr(cfg, k) for k in size} == size
    assert point["max_tokens"] == budget_tokens(cfg, 4e12)
    assert (cfg.lr, cfg.tokenizer, cfg.vocab_size) == (3e-2, "word", 300)


def test_the_prediction_is_the_best_candidate_at_the_budget(fabricated: str, corpus: Path) -> None:
    budget = 2e10
    p = pr.predict(results.load(fabricated, "iso"), "iso", budget, n_boot=20).as_dict()
    spec = read_spec(scaling_dict("iso", corpus))
    assert spec.scaling is not None
    law = lf.LossLaw(**p["law"])
    for i, size in enumerate(pr.candidates(spec)):
        cfg = spec.scaling.config(size, i)
        n, tokens = flops.count(cfg, 0, n_evals=0).params_non_embedding, budget_tokens(cfg, budget)
        if tokens:
            assert float(law(n, tokens)) >= p["predicted"] - 1e-12
    chosen = spec.scaling.config(p["size"], 0)
    assert p["tokens"] == budget_tokens(chosen, budget)  # the study's count of compute
    assert p["n"] == flops.count(chosen, 0, n_evals=0).params_non_embedding
    assert p["interval"][0] <= p["predicted"] <= p["interval"][1]
    assert p["run_interval"][0] <= p["interval"][0] and p["interval"][1] <= p["run_interval"][1]
    # At 8x the largest budget, from 12 trials: near the law they were drawn from (whether its
    # interval covers it is the fit's test, test_loss_fit.py; 12 points make narrow intervals).
    assert abs(p["predicted"] / float(LAW(p["n"], p["tokens"])) - 1) < 0.05
    assert set(p["intervals"]) == set(lf.PARAMETERS) and p["n_trials"] == 12
    trained = results.load(fabricated, "iso").trials
    for column, key, start in [("tokens_seen", "tokens", "D is"), (pr.SIZE, "n", "N is")]:
        beyond = p[key] > trained[column].max()
        assert beyond == any(note.startswith(start) for note in p["notes"]), p["notes"]


def test_the_cli_prints_the_prediction(fabricated: str, tmp_path: Path) -> None:
    args = ("predict", "iso", "--budget", "2e10", "--storage", fabricated, "--bootstrap", "20")
    proc = sweeps_run(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "loss fit of study iso (12 complete trials, 20 bootstrap resamples" in out
    assert "N = params_non_embedding" in out and "configuration: d_model=" in out
    assert "predicted val_bpb" in out and "90 % interval of the fit" in out
    assert "under C = 6 N D instead" in out
    proc = sweeps_run(*args, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["budget"] == 2e10 and shown["study"] == "iso" and shown["size"]["d_model"] >= 16
    assert not any(s.endswith(pr.SUFFIX) for s in optuna.get_all_study_names(fabricated))


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ("0", "--budget must be a positive number of FLOPs"),
        ("-1e12", "--budget must be a positive number of FLOPs"),
        ("nan", "--budget must be a positive number of FLOPs"),
        ("10", "less than half an optimizer step of every size"),
    ],
)
def test_a_bad_budget_is_one_line(
    fabricated: str, tmp_path: Path, budget: str, expected: str
) -> None:
    proc = sweeps_run("predict", "iso", "--budget", budget, "--storage", fabricated, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert expected in proc.stderr


def test_not_a_scaling_study_and_too_few_trials_are_one_line(corpus: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    plain = optuna.create_study(storage=url, study_name="search")
    plain.set_user_attr(rc.STUDY_SPEC, read_spec(spec_dict("search", corpus)).to_dict())
    data = scaling_dict("small", corpus)
    data["scaling"]["budgets"] = BUDGETS[:1]  # 4 trials: fewer than the fit needs
    fabricate(url, data)
    for study, expected in [
        ("search", "study 'search' is not a scaling study"),
        ("small", f"4 usable trials; the loss fit needs {lf.MIN_TRIALS}"),
        ("nowhere", "study 'nowhere' is not in storage"),
    ]:
        proc = sweeps_run("predict", study, "--budget", "1e10", "--storage", url, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
        assert expected in proc.stderr


@pytest.mark.study
def test_verify_stores_the_prediction_first_then_trains_it(fabricated: str, tmp_path: Path) -> None:
    args = ("predict", "iso", "--budget", "5e9", "--storage", fabricated, "--verify")
    proc = sweeps_run(*args, "--bootstrap", "20", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "the prediction is stored" in proc.stderr
    assert "verification (trial 0 of iso-verify): measured val_bpb" in proc.stdout
    assert "the prediction was made before the trial started" in proc.stdout
    [trial] = study_trials(fabricated, "iso" + pr.SUFFIX)
    stored = optuna.load_study(study_name="iso-verify", storage=fabricated).user_attrs
    prediction = stored[rc.STUDY_PREDICTION]
    # From the record: the prediction was written before the worker took the trial up.
    assert prediction["made_at"] < rc.TrialRecord.from_trial(trial).started_at
    frame = results.load(fabricated, "iso-verify").trials
    row = frame.iloc[0]
    assert row["outcome"] == "complete" and row["flops_budget"] == 5e9
    assert int(row["params_non_embedding"]) == prediction["n"]
    assert int(row["tokens_seen"]) == prediction["tokens"]
    assert all(int(row[k]) == v for k, v in prediction["size"].items())
    # A rerun reads the stored prediction and the finished trial: no second trial, same verdict.
    again = sweeps_run(*args, "--json", cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr
    verdict = json.loads(again.stdout)
    assert verdict["prediction"] == prediction and verdict["measured"] == row["val_bpb"]
    assert verdict["inside_run"] == (
        prediction["run_interval"][0] <= row["val_bpb"] <= prediction["run_interval"][1]
    )
    assert len(study_trials(fabricated, "iso-verify")) == 1
    other = sweeps_run(
        "predict", "iso", "--budget", "6e9", "--storage", fabricated, "--verify", cwd=tmp_path
    )
    assert other.returncode == 2 and "verifies the prediction at 5e+09 FLOPs" in other.stderr


@pytest.mark.study
def test_a_verification_stopped_mid_run_keeps_its_prediction(
    fabricated: str, tmp_path: Path
) -> None:
    """Ctrl-C while the trial trains: the prediction is already stored; the resumed run trains
    the re-queued trial against that same prediction, not a new one."""
    args = ("predict", "iso", "--budget", "2e10", "--storage", fabricated, "--verify")
    proc = sweeps_popen(*args, "--bootstrap", "10", cwd=tmp_path)
    try:
        wait_for(
            lambda: any(
                t.state == optuna.trial.TrialState.RUNNING
                for t in study_trials(fabricated, "iso-verify")
            ),
            120,
            "the verification trial to start",
        )
        held = optuna.load_study(study_name="iso-verify", storage=fabricated).user_attrs
        prediction = held[rc.STUDY_PREDICTION]
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    stopped, *requeued = study_trials(fabricated, "iso-verify")
    assert rc.TrialRecord.from_trial(stopped).outcome == "interrupted" and len(requeued) == 1
    assert prediction["made_at"] < rc.TrialRecord.from_trial(stopped).started_at
    again = sweeps_run(*args, "--json", "--bootstrap", "10", cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    verdict = json.loads(again.stdout)
    assert verdict["prediction"] == prediction and verdict["measured"] is not None
    assert verdict["made_before_run"] is True and verdict["trial"] == requeued[0].number
