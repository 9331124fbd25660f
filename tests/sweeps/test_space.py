"""The search space in Optuna: conditional suggestion, grids, samplers, pruners, configs."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import space
from sweeps.spec import StudySpec, read_spec


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    path = tmp_path / "corpus"
    path.mkdir()
    return path


def make_spec(corpus_dir: Path, **study: Any) -> StudySpec:
    data: dict[str, Any] = {
        "study": {"name": "t", "n_trials": 10, "seed": 0, **study},
        "corpus": {"dir": str(corpus_dir)},
        "fixed": {"d_model": 64, "n_heads": 4, "max_tokens": 10_000},
        "space": {
            # Listed before its input on purpose: suggestion order must put tokenizer first.
            "lowercase": {"choices": [False, True], "when": "tokenizer == 'word'"},
            "tokenizer": {"choices": ["word", "bpe"]},
            "vocab_size": {"type": "int", "low": 512, "high": 4096, "log": True},
            "d_ff": {"type": "int", "low": 64, "high": 256, "step": 64},
            "lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
        },
    }
    return read_spec(data, source="spec.toml")


def finite_spec(corpus_dir: Path, sampler: str, **extra: Any) -> StudySpec:
    space_table: dict[str, Any] = {
        "tokenizer": {"choices": ["word", "bpe"]},
        "d_ff": {"type": "int", "low": 64, "high": 192, "step": 64},
        "dropout": {"type": "float", "low": 0.0, "high": 0.2, "step": 0.1},
    }
    if sampler != "grid":
        space_table["lowercase"] = {"choices": [False, True], "when": "tokenizer == 'word'"}
    data = {
        "study": {"name": "g", "sampler": sampler, "seed": 0, **extra},
        "corpus": {"dir": str(corpus_dir)},
        "space": space_table,
    }
    return read_spec(data, source="grid.toml")


def test_distributions(corpus_dir: Path) -> None:
    spec = make_spec(corpus_dir)
    dists = space.distributions(spec)
    assert list(dists) == ["tokenizer", "lowercase", "vocab_size", "d_ff", "lr"]
    assert dists["tokenizer"] == CategoricalDistribution(["word", "bpe"])
    assert dists["vocab_size"] == IntDistribution(512, 4096, log=True)
    assert dists["d_ff"] == IntDistribution(64, 256, step=64)
    assert dists["lr"] == FloatDistribution(1e-4, 1e-2, log=True)


def test_suggest_respects_conditions(corpus_dir: Path) -> None:
    spec = make_spec(corpus_dir, sampler="random")
    study = optuna.create_study(sampler=space.make_sampler(spec))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        params = space.suggest(trial, spec)
        # Only active parameters are suggested, so Optuna records exactly what the trial uses.
        assert ("lowercase" in params) == (params["tokenizer"] == "word")
        assert params == trial.params
        assert 512 <= params["vocab_size"] <= 4096 and params["d_ff"] % 64 == 0
        cfg = space.trial_config(spec, params)
        assert cfg.d_model == 64 and cfg.corpus == str(corpus_dir)
        assert cfg.lowercase == params.get("lowercase", False)
        seen.add(params["tokenizer"])
        study.tell(trial, float(params["vocab_size"]))
    assert seen == {"word", "bpe"}


def test_enqueued_params_come_back_from_suggest(corpus_dir: Path) -> None:
    spec = make_spec(corpus_dir)
    study = optuna.create_study(sampler=space.make_sampler(spec))
    wanted = {"tokenizer": "word", "lowercase": True, "vocab_size": 1000, "d_ff": 128, "lr": 0.001}
    study.enqueue_trial(wanted)
    trial = study.ask()
    assert space.suggest(trial, spec) == wanted


def test_trial_config_merges_and_validates(corpus_dir: Path) -> None:
    spec = make_spec(corpus_dir)
    cfg = space.trial_config(
        spec, {"tokenizer": "bpe", "vocab_size": 1024, "d_ff": 64, "lr": 0.002}
    )
    assert isinstance(cfg, TrainConfig)
    assert (cfg.tokenizer, cfg.vocab_size, cfg.d_ff, cfg.lr) == ("bpe", 1024, 64, 0.002)
    assert (cfg.d_model, cfg.n_heads, cfg.max_tokens) == (64, 4, 10_000)
    with pytest.raises(SweepsError, match="'n_layers' is not in its space"):
        space.trial_config(spec, {"n_layers": 3})
    with pytest.raises(SweepsError, match=r"params d_ff=0.*d_ff must be >= 1") as err:
        space.trial_config(spec, {"d_ff": 0})
    assert "\n" not in str(err.value)


def test_max_wall_s_limit_reaches_the_config(corpus_dir: Path) -> None:
    data = make_spec(corpus_dir).to_dict()
    data["limits"] = {"max_wall_s": 90}
    spec = read_spec(data)
    assert space.trial_config(spec, {}).max_wall_s == 90.0


def test_grid_points_with_conditions(corpus_dir: Path) -> None:
    spec = finite_spec(corpus_dir, "bruteforce")
    points = space.grid_points(spec)
    # word: 2 lowercase x 3 d_ff x 3 dropout; bpe: 3 x 3
    assert len(points) == 18 + 9 == spec.study.n_trials
    assert {p["dropout"] for p in points} == {0.0, 0.1, 0.2}
    assert all(("lowercase" in p) == (p["tokenizer"] == "word") for p in points)
    assert len({tuple(sorted(p.items())) for p in points}) == len(points)
    with pytest.raises(SweepsError, match="more than 10"):
        space.grid_points(spec, limit=10)


def test_grid_points_need_finite_ranges(corpus_dir: Path) -> None:
    spec = make_spec(corpus_dir)
    with pytest.raises(SweepsError, match=r"space\.lr.*step"):
        space.grid_points(spec)


def test_grid_sampler_covers_the_grid_once(corpus_dir: Path) -> None:
    spec = finite_spec(corpus_dir, "grid")
    assert spec.study.n_trials == 2 * 3 * 3
    study = optuna.create_study(sampler=space.make_sampler(spec))
    seen = []
    for _ in range(spec.study.n_trials):
        trial = study.ask()
        seen.append(tuple(sorted(space.suggest(trial, spec).items())))
        study.tell(trial, 0.0)
    assert len(set(seen)) == spec.study.n_trials
    assert {dict(s)["dropout"] for s in seen} == {0.0, 0.1, 0.2}


def test_bruteforce_sampler_walks_the_conditional_grid(corpus_dir: Path) -> None:
    spec = finite_spec(corpus_dir, "bruteforce")
    study = optuna.create_study(sampler=space.make_sampler(spec))
    study.optimize(lambda t: (space.suggest(t, spec), 0.0)[1], n_trials=spec.study.n_trials + 5)
    seen = {tuple(sorted(t.params.items())) for t in study.trials}
    expected = {tuple(sorted(p.items())) for p in space.grid_points(spec)}
    assert seen == expected
    assert len(study.trials) == len(expected)  # the sampler stops the study when done


def test_ablation_space(corpus_dir: Path) -> None:
    data = {
        "study": {"name": "abl"},
        "corpus": {"dir": str(corpus_dir)},
        "fixed": {"d_model": 64},
        "ablation": {"baseline": {"d_ff": 256}, "vary": {"d_ff": [1, 64]}, "seeds": [0, 1]},
    }
    spec = read_spec(data)
    assert space.distributions(spec) == {
        "d_ff": CategoricalDistribution([256, 1, 64]),
        "seed": CategoricalDistribution([0, 1]),
    }
    study = optuna.create_study(sampler=space.make_sampler(spec))
    for params in spec.initial_trials():
        study.enqueue_trial(params)
    configs = []
    for _ in range(spec.study.n_trials):
        trial = study.ask()
        configs.append(space.trial_config(spec, space.suggest(trial, spec)))
        study.tell(trial, 0.0)
    assert [(c.d_ff, c.seed) for c in configs] == [
        (256, 0),
        (1, 0),
        (64, 0),
        (256, 1),
        (1, 1),
        (64, 1),
    ]
    assert all(c.d_model == 64 for c in configs)
    assert space.grid_points(spec) == spec.initial_trials()


@pytest.mark.parametrize(
    ("sampler", "kind"),
    [
        ("tpe", optuna.samplers.TPESampler),
        ("nsga2", optuna.samplers.NSGAIISampler),
        ("random", optuna.samplers.RandomSampler),
        ("qmc", optuna.samplers.QMCSampler),
        ("gp", optuna.samplers.GPSampler),
    ],
)
def test_make_sampler(corpus_dir: Path, sampler: str, kind: type) -> None:
    spec = make_spec(corpus_dir, sampler=sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no experimental-feature noise from our own choices
        made = space.make_sampler(spec)
    assert isinstance(made, kind)
    study = optuna.create_study(sampler=made)
    for _ in range(3):
        trial = study.ask()
        space.suggest(trial, spec)
        study.tell(trial, 1.0)


def test_grid_samplers_are_made(corpus_dir: Path) -> None:
    assert isinstance(
        space.make_sampler(finite_spec(corpus_dir, "grid")), optuna.samplers.GridSampler
    )
    assert isinstance(
        space.make_sampler(finite_spec(corpus_dir, "bruteforce")), optuna.samplers.BruteForceSampler
    )


def test_sampler_seed_makes_suggestions_reproducible(corpus_dir: Path) -> None:
    spec = make_spec(corpus_dir, sampler="random", seed=7)

    def run() -> list[dict[str, Any]]:
        study = optuna.create_study(sampler=space.make_sampler(spec))
        out = []
        for _ in range(5):
            trial = study.ask()
            out.append(space.suggest(trial, spec))
            study.tell(trial, 0.0)
        return out

    assert run() == run()


def test_constraints_func_reaches_samplers_that_support_it(corpus_dir: Path) -> None:
    def constraints(trial: FrozenTrial) -> Sequence[float]:
        return [float(trial.user_attrs.get("constraint", 0.0))]

    tpe = space.make_sampler(make_spec(corpus_dir), constraints_func=constraints)
    assert tpe._constraints_func is constraints
    nsga = space.make_sampler(
        make_spec(corpus_dir, objectives=["val_bpb", "peak_mem"]), constraints_func=constraints
    )
    assert isinstance(nsga, optuna.samplers.NSGAIISampler)
    assert nsga._constraints_func is constraints
    # A sampler without constraint support still builds.
    assert isinstance(
        space.make_sampler(make_spec(corpus_dir, sampler="random"), constraints_func=constraints),
        optuna.samplers.RandomSampler,
    )


def _feasible_share(spec: StudySpec, constraints: Any) -> float:
    """Trials 20..39 of a study where bigger vocab_size looks better but > 2048 is "OOM"."""
    study = optuna.create_study(sampler=space.make_sampler(spec, constraints_func=constraints))
    late = []
    for i in range(40):
        trial = study.ask()
        v = space.suggest(trial, spec)["vocab_size"]
        trial.set_user_attr("constraint", 1.0 if v > 2048 else -1.0)
        study.tell(trial, float(-v))
        if i >= 20:
            late.append(v <= 2048)
    return sum(late) / len(late)


def test_tpe_learns_to_avoid_infeasible_trials(corpus_dir: Path) -> None:
    """The runner marks OOM trials with user attr ``constraint`` > 0: with the hook, TPE keeps
    proposing the feasible region; without it, it chases the (infeasible) large values."""
    data = make_spec(corpus_dir, sampler={"name": "tpe", "n_startup_trials": 10}).to_dict()
    data["space"] = {"vocab_size": {"type": "int", "low": 512, "high": 8192}}
    spec = read_spec(data)

    def constraints(trial: FrozenTrial) -> Sequence[float]:
        return [float(trial.user_attrs.get("constraint", 0.0))]

    with_hook = _feasible_share(spec, constraints)
    without = _feasible_share(spec, None)
    assert with_hook >= without + 0.25, (with_hook, without)


def test_make_pruner(corpus_dir: Path) -> None:
    median = space.make_pruner(
        make_spec(corpus_dir, pruner={"name": "median", "n_startup_trials": 2, "n_warmup_evals": 3})
    )
    assert isinstance(median, optuna.pruners.MedianPruner)
    assert median._n_startup_trials == 2 and median._n_warmup_steps == 3
    # The pruners on tokens are the runner's own (sweeps.fidelity): nothing for Optuna to do.
    data = make_spec(corpus_dir).to_dict()
    data["study"]["pruner"] = {"name": "successive_halving", "min_tokens": 1000}
    data["fixed"]["eval_every_tokens"] = 1000
    assert isinstance(space.make_pruner(read_spec(data)), optuna.pruners.NopPruner)
    assert isinstance(
        space.make_pruner(make_spec(corpus_dir, pruner="none")), optuna.pruners.NopPruner
    )
    multi = make_spec(corpus_dir, objectives=["val_bpb", "wall_s"])
    assert isinstance(space.make_pruner(multi), optuna.pruners.NopPruner)


def test_median_pruner_prunes_on_eval_index(corpus_dir: Path) -> None:
    spec = make_spec(
        corpus_dir, pruner={"name": "median", "n_startup_trials": 2, "n_warmup_evals": 0}
    )
    study = optuna.create_study(sampler=space.make_sampler(spec), pruner=space.make_pruner(spec))
    for _ in range(3):
        trial = study.ask()
        for step in range(3):
            trial.report(1.0, step)
        study.tell(trial, 1.0)
    bad = study.ask()
    bad.report(5.0, 0)
    assert bad.should_prune()
