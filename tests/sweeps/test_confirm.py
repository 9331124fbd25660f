"""``sweeps confirm``: the confirmation spec, and end to end on tiny trials (SQLite and
PostgreSQL): SIGKILL in the middle, then resume, ends with exactly K x S confirmation trials,
linked to the trials they confirm, and a ranking."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from lm.errors import SweepsError
from sweeps import confirm as cf
from tests.sweeps import pg
from tests.sweeps.cli import assert_user_error
from tests.sweeps.helpers import (
    lm_processes,
    spec_dict,
    study_trials,
    sweeps_popen,
    sweeps_run,
    toml_text,
    wait_for,
)

TOP, SEEDS = 2, 3


def source_spec(corpus: Path) -> dict:
    """Three distinct tiny configurations, one seed each (a search's single-seed winners)."""
    return spec_dict(
        "src",
        corpus,
        fixed={"tokenizer": "word", "vocab_size": 300, "seed": 0},
        space={"d_ff": {"choices": [8, 16, 32]}},
        enqueue=[{"d_ff": 8}, {"d_ff": 16}, {"d_ff": 32}],
        study={"n_trials": 3},
    )


def test_the_confirmation_spec_enqueues_each_configuration_per_fresh_seed(corpus: Path) -> None:
    stored = source_spec(corpus)
    spec = cf.confirm_spec(stored, "src-confirm", [{"d_ff": 16}, {"d_ff": 8}], (1, 2, 3))
    assert spec.name == "src-confirm" and spec.study.n_trials == 6
    assert spec.initial_trials() == [
        {"d_ff": 16, "seed": 1},
        {"d_ff": 8, "seed": 1},
        {"d_ff": 16, "seed": 2},
        {"d_ff": 8, "seed": 2},
        {"d_ff": 16, "seed": 3},
        {"d_ff": 8, "seed": 3},
    ]
    assert "seed" not in spec.fixed and spec.fixed["vocab_size"] == 300
    assert spec.study.pruner.name == "none"


def test_options_and_plan_check_their_rules() -> None:
    with pytest.raises(SweepsError, match="--top must be >= 1"):
        cf.check_options(0, 3)
    with pytest.raises(SweepsError, match="--seeds must be >= 2"):
        cf.check_options(2, 1)
    with pytest.raises(ValueError, match="two or more distinct seeds"):
        cf.Plan("s", "val_bpb", "minimize", ({"config": "x"},), (1, 1), None)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'db.sqlite'}"
        return
    with pg.fresh_database("sweeps_confirm") as pg_url:
        yield pg_url.render_as_string(hide_password=False)


def completed(url: str, name: str) -> int:
    try:
        return sum(t.state == TrialState.COMPLETE for t in study_trials(url, name))
    except KeyError:  # the study is not created yet
        return 0


@pytest.mark.study
def test_confirm_killed_then_resumed_runs_exactly_k_times_s(
    tmp_path: Path, corpus: Path, url: str
) -> None:
    spec = tmp_path / "src.toml"
    spec.write_text(toml_text(source_spec(corpus)))
    first = sweeps_run("run", str(spec), "--storage", url, "--workers", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    source = {t.number: t for t in study_trials(url, "src")}
    assert all(t.state == TrialState.COMPLETE for t in source.values())

    args = (
        "confirm",
        "src",
        "--top",
        str(TOP),
        "--seeds",
        str(SEEDS),
        "--storage",
        url,
        "--max-concurrent",
        "1",
    )
    proc = sweeps_popen(*args, cwd=tmp_path)
    try:
        # Killed once a trial has finished and before the last could: mid-way.
        wait_for(
            lambda: completed(url, "src-confirm") >= 1 or proc.poll() is not None,
            240,
            "a first confirmation trial",
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done_before = completed(url, "src-confirm")
    assert 1 <= done_before < TOP * SEEDS
    wait_for(lambda: not lm_processes(tmp_path) or None, 20, "no orphan children")

    again = sweeps_run(*args, cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr
    trials = study_trials(url, "src-confirm")
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == TOP * SEEDS  # a trial the kill interrupted was re-run, none twice
    pairs = Counter((t.params["d_ff"], t.params["seed"]) for t in done)
    assert set(pairs.values()) == {1} and {s for _, s in pairs} == {1, 2, 3}  # fresh seeds
    # The two best single-seed configurations, each linked to the trial it confirms.
    best = sorted(source.values(), key=lambda t: t.values[0])[:TOP]
    assert {d for d, _ in pairs} == {t.params["d_ff"] for t in best}
    by_d_ff = {t.params["d_ff"]: f"src#{t.number}" for t in best}
    assert all(t.user_attrs["confirms"] == by_d_ff[t.params["d_ff"]] for t in done)
    link = optuna.load_study(study_name="src-confirm", storage=url).user_attrs["confirms"]
    assert link["study"] == "src" and link["seeds"] == [1, 2, 3]
    # The ranking: both configurations with intervals, and the verdict on the best.
    assert "confirmation of src (val_bpb, minimize)" in again.stdout
    assert "src's best (d_ff=" in again.stdout and " with fresh seeds" in again.stdout
    assert (
        "distinguishable from the runner-up" in again.stdout or "cannot be tested" in again.stdout
    ), again.stdout
    # Run again: nothing more to do, the same K x S.
    third = sweeps_run(*args, cwd=tmp_path, timeout=300)
    assert third.returncode == 0, third.stderr
    assert completed(url, "src-confirm") == TOP * SEEDS


def test_confirm_errors_are_one_line(tmp_path: Path) -> None:
    from tests.sweeps.cli import sweeps

    url = f"sqlite:///{tmp_path / 'e.db'}"
    optuna.create_study(study_name="bare", storage=url)
    assert_user_error(sweeps("confirm", "nope", "--storage", url), "study 'nope' is not in")
    assert_user_error(sweeps("confirm", "bare", "--storage", url), "has no stored spec")
    assert_user_error(
        sweeps("confirm", "bare", "--top", "0", "--storage", url), "--top must be >= 1"
    )
    assert_user_error(
        sweeps("confirm", "bare", "--level", "1.5", "--storage", url),
        "--level must be between 0 and 1",
    )


def test_confirm_takes_seeds_the_source_never_used(tmp_path: Path) -> None:
    """An ablation over seeds 0, 1, 2: its confirmation's seeds are 3 and 4. The seeds leave the
    trial table as Python ints (``plain.plain_values``); as numpy integers ``isinstance(s,
    int)`` refused them all and the confirmation reused seeds 1 and 2 (issue 34, item 1)."""
    from tests.sweeps.ablation import FFN_WIDTH, store_ablation

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    store_ablation(url, "ffn", FFN_WIDTH)
    plan = cf.plan(url, "ffn", top=5, seeds=2)
    assert plan.seeds == (3, 4)
    enqueued = {e["seed"] for e in plan.spec.initial_trials()}
    assert enqueued == {3, 4}
