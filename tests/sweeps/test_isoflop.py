"""IsoFLOP studies (``[scaling]``): the spec validates itself and expands into enqueued cells whose
``max_tokens`` spends their budget, the dry run shows the grid and flags the cells that cannot be
trained honestly, and a tiny grid runs end to end on the synthetic corpus with every trial's
``flops_budget`` recorded and the report's IsoFLOP section drawn from it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from lm import flops
from lm.errors import SweepsError
from sweeps import plan
from sweeps.space import distributions, trial_config
from sweeps.spec import FLOPS_BUDGET, Scaling, budget_tokens, read_spec
from tests.sweeps.helpers import spec_dict, sweeps_run, toml_text

SIZES = [
    {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 64},
    {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 128},
    {"d_model": 64, "n_layers": 1, "n_heads": 4, "d_ff": 256},
]
#: About 4,000 to 40,000 tokens a cell: the tiny grid trains in seconds.
BUDGETS = [6e8, 1.2e9, 2.4e9]


def scaling_dict(name: str, corpus: Path, **scaling: Any) -> dict[str, Any]:
    """A ``[scaling]`` spec: TINY's settings less what the grid sets, no [space]."""
    data = spec_dict(
        name, corpus, space={}, fixed={"tokenizer": "word", "vocab_size": 300, "lr": 3e-2}
    )
    for key in ("d_model", "n_layers", "n_heads", "d_ff", "max_tokens"):
        data["fixed"].pop(key)
    del data["space"]
    for key in ("sampler", "pruner", "n_trials"):
        data["study"].pop(key)
    data["scaling"] = {"budgets": BUDGETS, "sizes": SIZES, **scaling}
    return data


def test_a_grid_expands_into_cells_that_spend_their_budget(corpus: Path) -> None:
    spec = read_spec(scaling_dict("iso", corpus, seeds=[0, 1]))
    assert spec.study.n_trials == 18 and spec.study.sampler.name == "random"
    assert spec.study.pruner.name == "none"  # a pruned cell has no loss at its budget
    trials = spec.initial_trials()
    assert len(trials) == 18
    assert [t["seed"] for t in trials] == [0] * 9 + [1] * 9  # seed-major: a whole grid first
    assert spec.param_names == [
        FLOPS_BUDGET,
        "d_model",
        "n_layers",
        "n_heads",
        "d_ff",
        "max_tokens",
        "seed",
    ]
    for point in trials:
        cfg = trial_config(spec, point)  # the budget is the trial's, not a config field
        per_step = flops.count(cfg, 0, n_evals=0).flops_per_token * cfg.tokens_per_step
        trained = flops.count(cfg).flops
        assert cfg.max_tokens % cfg.tokens_per_step == 0
        assert abs(trained - point[FLOPS_BUDGET]) <= per_step / 2
    # Bigger models get fewer tokens at a budget; a bigger budget gives each size more.
    first = [t["max_tokens"] for t in trials[:3]]
    assert first == sorted(first, reverse=True)
    assert trials[3]["max_tokens"] > trials[0]["max_tokens"]
    assert set(distributions(spec)) == set(spec.param_names)


def test_budget_tokens_is_whole_steps_nearest_the_budget(corpus: Path) -> None:
    spec = read_spec(scaling_dict("iso", corpus))
    cfg = trial_config(spec, spec.initial_trials()[0])
    per_token = flops.count(cfg, 0, n_evals=0).flops_per_token
    step = per_token * cfg.tokens_per_step
    assert budget_tokens(cfg, 10 * step) == 10 * cfg.tokens_per_step
    assert budget_tokens(cfg, 10.4 * step) == 10 * cfg.tokens_per_step
    assert budget_tokens(cfg, 10.6 * step) == 11 * cfg.tokens_per_step
    assert budget_tokens(cfg, 0.4 * step) == 0


def test_the_spec_round_trips_and_types_check_themselves(corpus: Path) -> None:
    spec = read_spec(scaling_dict("iso", corpus))
    again = read_spec(spec.to_dict(), check_paths=False)
    assert again.initial_trials() == spec.initial_trials()
    with pytest.raises(SweepsError, match="budgets"):
        Scaling(budgets=(), sizes=({"d_model": 16},))
    scaling = Scaling(budgets=[1e12], sizes=[{"d_model": 64}])  # TrainConfig's other defaults
    assert scaling.budgets == (1e12,) and scaling.expand()[0]["max_tokens"] > 0


MALFORMED: list[tuple[str, dict[str, Any], list[str]]] = [
    ("budgets missing", {"budgets": None}, ["scaling.budgets", "missing"]),
    ("sizes missing", {"sizes": None}, ["scaling.sizes", "missing"]),
    ("budgets empty", {"budgets": []}, ["scaling.budgets", "non-empty"]),
    ("budget negative", {"budgets": [1e9, -1e9]}, ["scaling.budgets[1]", "> 0"]),
    ("budget infinite", {"budgets": [math.inf]}, ["scaling.budgets[0]", "finite"]),
    ("budget nan", {"budgets": [math.nan]}, ["scaling.budgets[0]", "finite"]),
    ("budget a string", {"budgets": ["1e9"]}, ["scaling.budgets[0]"]),
    ("budget a boolean", {"budgets": [True]}, ["scaling.budgets[0]"]),
    ("budget twice", {"budgets": [1e9, 1e9]}, ["scaling.budgets", "twice"]),
    ("budget under a step", {"budgets": [1e3]}, ["scaling.budgets[0]", "half an optimizer step"]),
    ("sizes empty", {"sizes": []}, ["scaling.sizes", "non-empty"]),
    ("size not a table", {"sizes": [64]}, ["scaling.sizes[0]"]),
    (
        "size unknown key",
        {"sizes": [{"d_model": 64, "vocab_size": 300}]},
        ["scaling.sizes[0].vocab_size", "[fixed]"],
    ),
    (
        "sizes differ in keys",
        {"sizes": [{"d_model": 64}, {"d_model": 32, "n_layers": 2}]},
        ["scaling.sizes[1]", "same keys"],
    ),
    ("size twice", {"sizes": [{"d_model": 64}, {"d_model": 64}]}, ["scaling.sizes[1]", "twice"]),
    (
        "size not a valid config",
        {"sizes": [{"d_model": 30, "n_heads": 4}]},
        ["scaling.sizes[0]", "divisible"],
    ),
    ("size not an integer", {"sizes": [{"d_model": 64.5}]}, ["scaling.sizes[0]", "d_model"]),
    ("seeds twice", {"seeds": [0, 0]}, ["scaling.seeds", "twice"]),
    ("seeds negative", {"seeds": [-1]}, ["scaling.seeds[0]"]),
    ("unknown key", {"repeats": 2}, ["scaling.repeats", "allowed"]),
]


@pytest.mark.parametrize(
    ("change", "expected"),
    [(c, e) for _, c, e in MALFORMED],
    ids=[name for name, _, _ in MALFORMED],
)
def test_malformed_scaling(corpus: Path, change: dict[str, Any], expected: list[str]) -> None:
    data = scaling_dict("iso", corpus)
    for key, value in change.items():
        if value is None:
            del data["scaling"][key]
        else:
            data["scaling"][key] = value
    with pytest.raises(SweepsError) as info:
        read_spec(data, source="iso.toml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("iso.toml: ")
    for needle in expected:
        assert needle in message, message


CLASHES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("max_tokens fixed", {"fixed": {"max_tokens": 4000}}, ["fixed.max_tokens", "derived"]),
    ("size field fixed", {"fixed": {"d_model": 16}}, ["fixed.d_model", "scaling.sizes"]),
    ("seed fixed with seeds", {"fixed": {"seed": 1}, "seeds": [0]}, ["fixed.seed"]),
    ("with a space", {"space": {"dropout": {"choices": [0.0, 0.1]}}}, ["scaling", "[space]"]),
    ("with an ablation", {"ablation": {"vary": {"lr": [0.01]}}}, ["scaling", "[ablation]"]),
    ("with enqueue", {"enqueue": [{"lr": 0.01}]}, ["enqueue", "[scaling]"]),
    ("with a sampler", {"study": {"sampler": "tpe"}}, ["study.sampler", "never be used"]),
    ("with a pruner", {"study": {"pruner": "median"}}, ["study.pruner", "budget"]),
    ("more trials than cells", {"study": {"n_trials": 10}}, ["study.n_trials", "9 cells"]),
]


@pytest.mark.parametrize(
    ("change", "expected"), [(c, e) for _, c, e in CLASHES], ids=[name for name, _, _ in CLASHES]
)
def test_scaling_clashes_with_other_sections(
    corpus: Path, change: dict[str, Any], expected: list[str]
) -> None:
    data, change = scaling_dict("iso", corpus), dict(change)
    for key in ("fixed", "study"):
        data[key].update(change.pop(key, {}))
    for key in ("space", "ablation", "enqueue"):
        if key in change:
            data[key] = change.pop(key)
    data["scaling"].update(change)
    with pytest.raises(SweepsError) as info:
        read_spec(data, source="iso.toml")
    message = str(info.value)
    assert "\n" not in message
    for needle in expected:
        assert needle in message, message


def test_fewer_trials_than_cells_is_a_partial_grid(corpus: Path) -> None:
    data = scaling_dict("iso", corpus)
    data["study"]["n_trials"] = 3
    assert read_spec(data).study.n_trials == 3


def test_the_dry_run_shows_the_grid_and_flags_untrainable_cells(corpus: Path) -> None:
    data = scaling_dict("iso", corpus, budgets=[2e8, 2.4e9])
    data["limits"] = {"memory_budget": "300MiB", "collapse": {"min_steps": 40}}
    spec = read_spec(data)
    cells = plan.scaling_cells(spec, "cpu", 300 * 2**20)
    assert [(c.budget, c.size["d_model"]) for c in cells] == [
        (b, d) for b in (2e8, 2.4e9) for d in (16, 32, 64)
    ]
    for cell, point in zip(cells, spec.initial_trials(), strict=True):
        assert cell.tokens == point["max_tokens"]
        assert cell.steps == -(-cell.tokens // 128)
        assert (
            cell.params_non_embedding
            == flops.count(trial_config(spec, point), 0).params_non_embedding
        )
    short = [c for c in cells if any("min_steps = 40" in f for f in c.flags)]
    assert short and all(c.steps < 40 for c in short)
    assert all(c.steps >= 40 for c in cells if c not in short)
    assert all(any("warmup_tokens" in f for f in c.flags) for c in cells if c.tokens <= 500)
    row = plan.grid_summary(spec, cells)
    assert row[0] == "IsoFLOP grid" and f"{len([c for c in cells if c.flags])} of 6" in row[1]
    tight = plan.scaling_cells(spec, "cpu", 2**20)  # 1 MiB: nothing fits
    assert all("over the memory budget" in "; ".join(c.flags) for c in tight)


def test_the_dry_run_prints_the_grid(corpus: Path, tmp_path: Path) -> None:
    data = scaling_dict("iso", corpus, budgets=[2e8, 1.2e9, 2.4e9])
    data["limits"]["collapse"] = {"min_steps": 40}
    (tmp_path / "iso.toml").write_text(toml_text(data))
    proc = sweeps_run(
        "run",
        "iso.toml",
        "--dry-run",
        cwd=tmp_path,
        env={"COLUMNS": "200", "SWEEPS_STORAGE": "sqlite:///sweeps.db"},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "IsoFLOP grid" in out and "3 budgets x 3 sizes x 1 seed(s) = 9 trials" in out
    for column in plan.GRID_COLUMNS:
        assert column in out
    assert "d_model=64 n_layers=1 n_heads=4 d_ff=256" in out
    assert "< limits.collapse.min_steps = 40" in out  # 2e8 FLOPs is a few steps of d_model 64
    assert not (tmp_path / "sweeps.db").exists()
    # More trials than cells on the command line is refused like in the spec: one line, exit 2.
    proc = sweeps_run(
        "run",
        "iso.toml",
        "--dry-run",
        "--n-trials",
        "10",
        cwd=tmp_path,
        env={"SWEEPS_STORAGE": "sqlite:///sweeps.db"},
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "--n-trials is 10, but the [scaling] grid has 9 cells" in proc.stderr
    assert not (tmp_path / "sweeps.db").exists()


@pytest.mark.study
def test_a_tiny_grid_end_to_end(corpus: Path, tmp_path: Path) -> None:
    from sweeps import report, results
    from sweeps.charts import scaling as scaling_chart

    data = scaling_dict("iso_e2e", corpus)
    data["fixed"].update(eval_every_tokens=100_000, sample_tokens=2)
    data["limits"]["collapse"] = False  # 30 to 300 steps: the verdicts are not the point here
    (tmp_path / "iso.toml").write_text(toml_text(data))
    proc = sweeps_run("run", "iso.toml", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    frame = results.load(url, "iso_e2e").trials
    assert len(frame) == 9 and set(frame["outcome"]) == {"complete"}
    assert (frame["flops_budget"] == frame[f"param_{FLOPS_BUDGET}"]).all()
    assert sorted(set(frame["flops_budget"])) == BUDGETS
    # Whole steps: each trial's training FLOPs are its budget within half a step (a few %).
    assert ((frame["flops"] / frame["flops_budget"] - 1).abs() < 0.1).all()
    fit = scaling_chart.data(frame)
    assert [p.budget for p in fit.parabolas] == BUDGETS
    assert all(len(p.sizes) == 3 and p.coef is not None for p in fit.parabolas)
    _, charts, _ = report.build(url, "iso_e2e")
    [section] = [c for c in charts if c.key == "scaling"]
    assert section.figure is not None and section.note is None


def test_the_shipped_isoflop_study_can_be_fitted() -> None:
    """studies/isoflop.toml: enough budgets and a wide enough span of sizes for the fit, and
    every cell long enough to be judged and to leave its warm-up."""
    from sweeps import scaling
    from sweeps.spec import load_spec
    from sweeps.verdicts import planned_steps

    spec = load_spec(Path(__file__).parents[2] / "studies" / "isoflop.toml", check_paths=False)
    assert spec.scaling is not None and len(spec.scaling.budgets) >= scaling.MIN_BUDGETS
    sizes = {
        flops.count(trial_config(spec, p), 0).params_non_embedding for p in spec.initial_trials()
    }
    assert len(sizes) >= scaling.MIN_SIZES and max(sizes) >= scaling.MIN_SIZE_RATIO * min(sizes)
    for point in spec.initial_trials():
        cfg = trial_config(spec, point)
        assert planned_steps(cfg.max_tokens, cfg.tokens_per_step) >= spec.limits.collapse.min_steps
        assert cfg.max_tokens > 4 * cfg.warmup_tokens


def test_a_study_resumed_with_another_grid_is_refused(corpus: Path, tmp_path: Path) -> None:
    """The cells are enqueued once, when the study is created: a changed [scaling] under the
    same name would run the old grid while the spec said another."""
    from sweeps import storage as st
    from sweeps import workers as wk

    storage = st.open_storage(f"sqlite:///{tmp_path / 'sweeps.db'}")
    try:
        spec = read_spec(scaling_dict("iso", corpus))
        study, created = wk.create_or_resume(spec, storage)
        assert created and len(study.get_trials()) == 9
        assert [t.system_attrs["fixed_params"] for t in study.get_trials()] == spec.initial_trials()
        assert wk.create_or_resume(spec, storage)[1] is False
        other = read_spec(scaling_dict("iso", corpus, budgets=BUDGETS[:2]))
        with pytest.raises(SweepsError, match=r"different \[scaling\]"):
            wk.create_or_resume(other, storage)
    finally:
        storage.engine.dispose()
