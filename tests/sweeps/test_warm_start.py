"""``sweeps run SPEC --from STUDY``: a study, then a warm-started one with a narrowed range and an
added parameter. The right trials carry over (and the plan says why the others do not), the
sampler sees them, the new study still runs exactly its n_trials, and results and report mark
them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from sweeps import records, warm_start
from sweeps import storage as st
from sweeps.results import study_frame
from sweeps.spec import read_spec
from tests.sweeps.helpers import spec_dict, study_trials, sweeps_run, toml_text

LR = {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}
#: Four trials the base study runs in this order (enqueued: no randomness).
BASE_POINTS = [
    {"vocab_size": 300, "lr": 0.01},
    {"vocab_size": 600, "lr": 0.01},
    {"vocab_size": 300, "lr": 0.05},
    {"vocab_size": 600, "lr": 0.002},
]


def base_spec(corpus: Path, **changes: dict) -> dict:
    return spec_dict(
        "base",
        corpus,
        fixed={"tokenizer": "word"},
        space={"vocab_size": {"choices": [300, 600]}, "lr": LR},
        study={"n_trials": 4},
        enqueue=BASE_POINTS,
        **changes,
    )


def warm_spec(corpus: Path, name: str = "warm", fixed: dict | None = None) -> dict:
    """lr narrowed (0.002 falls out), d_ff added (the base study trained with TINY's 32)."""
    return spec_dict(
        name,
        corpus,
        fixed={"tokenizer": "word", **(fixed or {})},
        space={
            "vocab_size": {"choices": [300, 600]},
            "lr": {**LR, "low": 5e-3},
            "d_ff": {"choices": [32, 64]},
        },
        study={"n_trials": 2, "sampler": {"name": "tpe", "n_startup_trials": 1}},
    )


@pytest.fixture(scope="module")
def base_db(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("warm_start")
    (root / "base.toml").write_text(toml_text(base_spec(corpus)))
    url = f"sqlite:///{root / 'sweeps.db'}"
    proc = sweeps_run("run", "base.toml", "--storage", url, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, url


def test_the_plan_says_what_carries_over_and_why_not(
    base_db: tuple[Path, str], corpus: Path
) -> None:
    root, url = base_db
    (root / "warm.toml").write_text(toml_text(warm_spec(corpus)))
    proc = sweeps_run("run", "warm.toml", "--storage", url, "--from", "base", "--dry-run", cwd=root)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "carried from base 3 of 4 trials" in text
    assert "not carried outside the new range of lr: 1" in text
    assert [s.study_name for s in optuna.get_all_study_summaries(st.read_only_storage(url))] == [
        "base"
    ]
    missing = sweeps_run(
        "run", "warm.toml", "--storage", url, "--from", "nope", "--dry-run", cwd=root
    )
    assert missing.returncode == 2 and "--from nope: no such study" in missing.stderr


def test_a_bigger_budget_carries_nothing_and_says_which_field(
    base_db: tuple[Path, str], corpus: Path
) -> None:
    _, url = base_db
    spec = read_spec(warm_spec(corpus, fixed={"max_tokens": 8000}))
    storage = st.read_only_storage(url)
    carry = warm_start.read(storage, spec, "base", url)
    assert carry.templates == []
    assert carry.skipped == {
        "different fixed field max_tokens": 3,
        "outside the new range of lr": 1,
    }


def test_reasons_for_choices_fitted_values_and_unfinished_trials(corpus: Path) -> None:
    from sweeps.space import distributions

    spec = read_spec(warm_spec(corpus))
    space = distributions(spec)
    base = read_spec(base_spec(corpus)).base_values()
    old = {
        "vocab_size": optuna.distributions.CategoricalDistribution([300, 600, 900]),
        "lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True),
    }

    def why(state: TrialState, vocab: int, old_base: dict | None = None) -> str:
        params = {"vocab_size": vocab, "lr": 0.01}
        config = {**base, **params}
        t = create_trial(
            state=state,
            values=[1.0] if state == TrialState.COMPLETE else None,
            params=params,
            distributions=old,
            user_attrs={"config": config},
        )
        found, reason = warm_start.carried_params(spec, space, old_base or base, t)
        assert (found is None) == bool(reason)
        return reason

    assert why(TrialState.COMPLETE, 300) == ""
    assert why(TrialState.PRUNED, 600) == ""
    assert why(TrialState.FAIL, 300) == "not finished (FAIL)"
    assert why(TrialState.COMPLETE, 900) == "vocab_size not in the new choices"
    # d_ff is newly searched: the old trial must have trained with the old study's fixed value
    assert (
        why(TrialState.COMPLETE, 300, {**base, "d_ff": 48})
        == "d_ff was not searched and trained other than its fixed value"
    )


def test_a_warm_started_study_runs_exactly_its_trials_on_top_of_the_carried_ones(
    base_db: tuple[Path, str], corpus: Path
) -> None:
    root, url = base_db
    (root / "warm.toml").write_text(toml_text(warm_spec(corpus)))
    proc = sweeps_run("run", "warm.toml", "--storage", url, "--from", "base", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "finished    2/2" in proc.stdout
    trials = sorted(study_trials(url, "warm"), key=lambda t: t.number)
    carried = [t for t in trials if warm_start.is_carried(t)]
    own = [t for t in trials if not warm_start.is_carried(t)]
    assert [t.user_attrs["carried_from"] for t in carried] == ["base#0", "base#1", "base#2"]
    assert [t.params for t in carried] == [{**p, "d_ff": 32} for p in BASE_POINTS[:3]]
    assert all(t.state == TrialState.COMPLETE and t.values for t in carried)
    assert len(own) == 2 and all(t.state.is_finished() for t in own)
    # running it again resumes: nothing carried twice, nothing more run
    again = sweeps_run("run", "warm.toml", "--storage", url, "--from", "base", cwd=root)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(study_trials(url, "warm")) == 5
    # the evaluations came along (learning curves), and the frame marks the carried trials
    frame = study_frame(url, "warm")
    assert list(frame["carried_from"].fillna("")) == ["base#0", "base#1", "base#2", "", ""]
    engine = st.read_only_engine(url)
    assert {r["trial_number"] for r in records.read_evals(engine, "warm")} == {0, 1, 2, 3, 4}
    engine.dispose()
    status = sweeps_run("status", "--storage", url, "--json", cwd=root)
    rows = {r["study"]: r for r in json.loads(status.stdout)}
    assert (rows["warm"]["finished"], rows["warm"]["n_trials"]) == (2, 2)
    theirs = subprocess.run(
        [
            str(Path(sys.executable).parent / "optuna"),
            "trials",
            "--study-name",
            "warm",
            "--storage",
            url,
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert theirs.returncode == 0, theirs.stderr
    assert [r["state"] for r in json.loads(theirs.stdout)] == ["COMPLETE"] * 5


def test_the_sampler_sees_the_carried_trials(
    base_db: tuple[Path, str], corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With n_startup_trials = 3, TPE leaves its random start-up only because the three carried
    trials count as history: its random fallback is never called."""
    _, url = base_db
    from sweeps import workers as wk

    spec = read_spec(warm_spec(corpus, name="probe"))
    storage = st.open_storage(url)
    try:
        wk.create_or_resume(spec, storage, carry=warm_start.read(storage, spec, "base", url))
        sampler = optuna.samplers.TPESampler(n_startup_trials=3, seed=0)

        def no_random(*args: object, **kwargs: object) -> None:
            raise AssertionError("TPE fell back to random sampling: it saw no history")

        monkeypatch.setattr(sampler._random_sampler, "sample_independent", no_random)
        study = optuna.load_study(study_name="probe", storage=storage, sampler=sampler)
        trial = study.ask()
        assert 5e-3 <= trial.suggest_float("lr", 5e-3, 1e-1, log=True) <= 1e-1
        state = wk.budget_state(study.get_trials(deepcopy=False), 2)
        assert [t.number for t in state.counted] == [trial.number]
    finally:
        storage.engine.dispose()
