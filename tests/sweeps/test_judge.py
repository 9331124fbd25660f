"""The judge (``sweeps.judge``) on synthetic evaluation sequences: no training, no child process,
no database. Each mechanism fires on its own, the stated order holds when two would fire, and a
healthy sequence goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from optuna.trial import FrozenTrial, TrialState

from lm import outcomes
from sweeps import fidelity
from sweeps.judge import Judge
from sweeps.space import trial_config
from sweeps.spec import StudySpec, read_spec
from tests.sweeps.helpers import spec_dict

HALVING = {"name": "successive_halving", "min_tokens": 2000, "reduction_factor": 2, "min_trials": 3}
LR = {"lr": {"choices": [0.03, 0.01]}}


class FakeTrial:
    """An Optuna trial as the judge sees it: what it was told, and a pruner that says prune
    from its ``prune_from``-th report on (never: None)."""

    def __init__(self, number: int = 0, prune_from: int | None = None) -> None:
        self.number = number
        self.prune_from = prune_from
        self.reports: list[tuple[int, float]] = []
        self.asked = 0

    def report(self, value: float, step: int) -> None:
        self.reports.append((step, value))

    def should_prune(self) -> bool:
        self.asked += 1
        return self.prune_from is not None and len(self.reports) > self.prune_from


class FakeBoard:
    """The study's rungs: what the trial posted, and rivals given by the test."""

    def __init__(self, rivals: list[FrozenTrial] | None = None) -> None:
        self.rivals = rivals or []
        self.posted: list[dict[str, list[float]]] = []

    def post(
        self, rung_values: dict[str, list[float]], rung_tokens: dict[str, int] | None = None
    ) -> None:
        self.posted.append(dict(rung_values))
        self.tokens = dict(rung_tokens or {})

    def trials(self) -> list[FrozenTrial]:
        return self.rivals


def rival(number: int, value_at_2000: float) -> FrozenTrial:
    return FrozenTrial(
        number=number,
        state=TrialState.COMPLETE,
        value=None,
        datetime_start=None,
        datetime_complete=None,
        params={},
        distributions={},
        user_attrs={fidelity.RUNGS_ATTR: {"2000": [value_at_2000]}},
        system_attrs={},
        intermediate_values={},
        trial_id=number + 1,
    )


def row(tokens: int, val_loss: float, step: int | None = None) -> dict[str, Any]:
    """An evaluation of a model that learns (it uses its context, it beats the unigram)."""
    return {
        "step": step if step is not None else tokens // 100,
        "tokens": tokens,
        "val_loss": val_loss,
        "val_bpb": val_loss / 2,
        "mean_kl_to_mean": 1.0,
        "kl_mean_to_unigram": 1.0,
        "unigram_gap": 1.0,
    }


def make(corpus: Path, pruner: Any = "median", **study: Any) -> StudySpec:
    return read_spec(
        spec_dict(
            "judge",
            corpus,
            fixed={"max_tokens": 8000, "eval_every_tokens": 1000},
            space=LR,
            study={"pruner": pruner, **study},
        )
    )


def judged(
    spec: StudySpec, rows: list[dict[str, Any]], trial: FakeTrial, board: FakeBoard | None = None
) -> tuple[Any, list[dict[str, Any]]]:
    """Feed ``rows`` one by one, as the monitor does; the first verdict and the history."""
    judge = Judge(spec, trial, board or FakeBoard())
    judge.start(trial_config(spec, {"lr": 0.03}))
    history: list[dict[str, Any]] = []
    for r in rows:
        history.append(r)
        verdict = judge(r, history)
        if verdict is not None:
            return verdict, history
    return None, history


HEALTHY = [row(1000, 5.0), row(2000, 4.0), row(3000, 3.5), row(4000, 3.2)]


def test_a_healthy_sequence_goes_on_and_each_evaluation_is_reported_once(corpus: Path) -> None:
    trial = FakeTrial()
    verdict, history = judged(make(corpus), HEALTHY, trial)
    assert verdict is None and len(history) == 4
    assert trial.reports == [(i, r["val_bpb"]) for i, r in enumerate(HEALTHY)]
    assert trial.asked == 4


def test_a_healthy_sequence_under_halving_is_ranked_and_goes_on(corpus: Path) -> None:
    board = FakeBoard([rival(1, 9.0), rival(2, 8.0)])  # both worse at the rung
    verdict, _ = judged(make(corpus, HALVING), HEALTHY, FakeTrial(), board)
    assert verdict is None
    # val_bpb at each rung passed (2,000 and 4,000 tokens), posted for the other workers.
    assert board.posted == [
        {"2000": [pytest.approx(2.0)]},
        {"2000": [pytest.approx(2.0)], "4000": [pytest.approx(1.6)]},
    ]


def test_the_projects_verdict_fires(corpus: Path) -> None:
    rows = [row(1000, 3.0), row(2000, 4.6), row(3000, 5.0)]  # above 1.5 x the best, twice
    verdict, history = judged(make(corpus), rows, FakeTrial())
    assert verdict.outcome == outcomes.DIVERGED and len(history) == 3


def test_optunas_pruner_fires_on_the_reported_evaluation(corpus: Path) -> None:
    trial = FakeTrial(prune_from=0)
    verdict, history = judged(make(corpus), HEALTHY, trial)
    assert verdict.outcome == outcomes.PRUNED and len(history) == 1
    assert verdict.reason.startswith("median pruner: val_bpb 2.5000 at evaluation 1")
    assert trial.reports == [(0, 2.5)]  # the value Optuna keeps for a PRUNED trial: this one


def test_halving_fires_at_a_rung(corpus: Path) -> None:
    board = FakeBoard([rival(1, 1.0), rival(2, 1.5)])  # both better at the rung
    verdict, history = judged(make(corpus, HALVING), HEALTHY, FakeTrial(), board)
    assert verdict.outcome == outcomes.PRUNED and history[-1]["tokens"] == 2000
    assert verdict.reason.startswith("successive halving: at rung 1 (2,000 tokens")
    assert board.posted == [{"2000": [pytest.approx(2.0)]}]


DIVERGING = [row(1000, 3.0), row(2000, 4.6), row(3000, 5.0)]  # diverged at the third


def test_the_projects_verdict_comes_before_optunas_pruner(corpus: Path) -> None:
    trial = FakeTrial(prune_from=2)  # the pruner would stop it at the third evaluation too
    verdict, history = judged(make(corpus), DIVERGING, trial)
    assert verdict.outcome == outcomes.DIVERGED and len(history) == 3
    # Reported first (Optuna's last value is this evaluation's), then the rules: the pruner was
    # asked at the first two evaluations only.
    assert trial.reports == [(0, 1.5), (1, 2.3), (2, 2.5)] and trial.asked == 2


def test_the_projects_verdict_comes_before_halving(corpus: Path) -> None:
    board = FakeBoard([rival(1, 0.5), rival(2, 0.6)])  # halving would stop it at 2,000
    spec = read_spec(
        spec_dict(
            "judge",
            corpus,
            fixed={"max_tokens": 8000, "eval_every_tokens": 1000},
            space=LR,
            study={"pruner": HALVING},
            limits={"divergence": {"patience": 1}},
        )
    )
    verdict, history = judged(spec, DIVERGING, FakeTrial(), board)
    assert verdict.outcome == outcomes.DIVERGED and len(history) == 2
    assert board.posted == []  # stopped by a rule: no value at the rung, no rank


def test_optunas_pruner_comes_before_halving(corpus: Path) -> None:
    board = FakeBoard([rival(1, 0.5), rival(2, 0.6)])  # halving would stop it at 2,000
    verdict, history = judged(make(corpus, HALVING), HEALTHY, FakeTrial(prune_from=1), board)
    assert verdict.reason.startswith("successive_halving pruner: val_bpb 2.0000 at evaluation 2")
    assert len(history) == 2 and board.posted == []


def test_a_fitted_retry_is_judged_at_its_rungs_afresh(corpus: Path) -> None:
    spec = make(corpus, HALVING)
    board = FakeBoard([rival(1, 9.0), rival(2, 8.0)])
    trial = FakeTrial()
    judge = Judge(spec, trial, board)
    for _attempt in range(2):
        judge.start(trial_config(spec, {"lr": 0.03}))
        history: list[dict[str, Any]] = []
        for r in HEALTHY:
            history.append(r)
            assert judge(r, history) is None
    # Each attempt posts its own values, from the first rung on.
    assert len(board.posted) == 4 and board.posted[2] == {"2000": [pytest.approx(2.0)]}
    # Optuna takes one value per step: the retry's evaluations are not reported again.
    assert [step for step, _ in trial.reports] == [0, 1, 2, 3]


def test_a_multi_objective_study_reports_nothing_to_optuna(corpus: Path) -> None:
    spec = make(corpus, "none", objectives=["val_bpb", "peak_mem"])
    trial = FakeTrial(prune_from=0)
    verdict, _ = judged(spec, DIVERGING, trial)
    assert trial.reports == [] and trial.asked == 0
    assert verdict.outcome == outcomes.DIVERGED  # the project's verdicts apply all the same
