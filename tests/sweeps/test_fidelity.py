"""Multi-fidelity on tokens (``sweeps.fidelity``): rungs, ranking, who competes, and real studies
stopped by successive halving with one and with two objectives."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from optuna.trial import FrozenTrial, TrialState

from lm import flops, outcomes
from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import fidelity, records
from sweeps import storage as st
from sweeps.forkserver import ForkServer
from sweeps.runner import RunnerContext, run_trial
from sweeps.space import trial_config
from sweeps.spec import StudySpec, halving, read_spec
from sweeps.workers import create_or_resume, load_for_workers
from tests.sweeps.helpers import CPU, spec_dict

HALVING = {"name": "successive_halving", "min_tokens": 2000, "reduction_factor": 2, "min_trials": 3}


def make(
    corpus: Path,
    pruner: Any,
    *,
    fixed: dict | None = None,
    space: dict | None = None,
    objectives: list[str] | None = None,
) -> StudySpec:
    study = {"pruner": pruner, **({"objectives": objectives} if objectives else {})}
    fixed = {"max_tokens": 8000, "eval_every_tokens": 1000, **(fixed or {})}
    space = space if space is not None else {"lr": {"choices": [0.03, 0.01, 1e-6]}}
    return read_spec(spec_dict("fid", corpus, fixed=fixed, space=space, study=study))


def frozen(
    number: int,
    state: TrialState,
    rungs: dict[str, list[float]] | None = None,
    outcome: str | None = None,
) -> FrozenTrial:
    attrs: dict[str, Any] = {} if rungs is None else {fidelity.RUNGS_ATTR: rungs}
    if outcome is not None:
        attrs["outcome"] = outcome
    return FrozenTrial(
        number=number,
        state=state,
        value=None,
        datetime_start=None,
        datetime_complete=None,
        params={},
        distributions={},
        user_attrs=attrs,
        system_attrs={},
        intermediate_values={},
        trial_id=number + 1,
    )


# --- rungs and brackets -------------------------------------------------------------------------


def test_rungs_explicit_default_and_refused(corpus: Path) -> None:
    assert halving.rungs(make(corpus, HALVING)) == (2000, 4000)
    # Default: max_tokens / reduction_factor**2 in whole evaluations: 8000 / 9 -> 1000.
    assert halving.rungs(make(corpus, "successive_halving")) == (1000, 3000)
    with pytest.raises(SweepsError, match="before the first evaluation"):
        make(corpus, {**HALVING, "min_tokens": 500})
    with pytest.raises(SweepsError, match="not below max_tokens = 8,000"):
        make(corpus, {**HALVING, "min_tokens": 8000})
    with pytest.raises(SweepsError, match="max_tokens varies between trials"):
        make(corpus, "successive_halving", space={"max_tokens": {"choices": [4000, 8000]}})
    # A searched max_tokens: rungs below the largest; a short trial is judged at fewer.
    spec = make(corpus, HALVING, space={"max_tokens": {"choices": [4000, 8000]}})
    assert halving.rungs(spec) == (2000, 4000)
    assert fidelity.decision_rungs(spec, (2000, 4000), 0, 4000) == (2000,)


def test_hyperband_brackets_judge_from_their_own_rung(corpus: Path) -> None:
    spec = make(corpus, {"name": "hyperband", "min_tokens": 1000, "reduction_factor": 2})
    study_rungs = halving.rungs(spec)
    assert study_rungs == (1000, 2000, 4000)
    assert halving.n_brackets(spec, study_rungs) == 4
    assert [fidelity.decision_rungs(spec, study_rungs, n, 8000) for n in range(5)] == [
        (1000, 2000, 4000),
        (2000, 4000),
        (4000,),
        (),
        (1000, 2000, 4000),
    ]
    # Competitors come from the same bracket only.
    trials = [frozen(n, TrialState.COMPLETE, {"4000": [float(n)]}) for n in range(8)]
    assert fidelity.competitors(trials, spec, study_rungs, 6, 4000) == [[2.0]]


def test_interpolation_reads_every_trial_at_exactly_the_rung() -> None:
    before = {"tokens": 1000, "val_bpb": 4.0}
    row = {"tokens": 4000, "val_bpb": 2.0}
    assert fidelity.at_tokens(before, row, 2000, "val_bpb") == pytest.approx(3.0)  # log-middle
    assert fidelity.at_tokens(before, row, 4000, "val_bpb") == 2.0
    assert fidelity.at_tokens(None, row, 2000, "val_bpb") == 2.0  # nothing before: its own
    assert (
        fidelity.at_tokens(before, {"tokens": 4000, "val_bpb": math.nan}, 2000, "val_bpb") is None
    )


# --- who competes, and the decision -------------------------------------------------------------


def test_competitors_leave_out_verdicts_failures_and_other_rungs(corpus: Path) -> None:
    spec = make(corpus, HALVING)
    trials = [
        frozen(0, TrialState.COMPLETE, {"2000": [3.0]}, outcomes.COMPLETE),
        frozen(1, TrialState.RUNNING, {"2000": [3.5]}),
        frozen(2, TrialState.PRUNED, {"2000": [4.0]}, outcomes.PRUNED),
        frozen(3, TrialState.PRUNED, {"2000": [1.0]}, outcomes.UNIGRAM_COLLAPSE),
        frozen(4, TrialState.PRUNED, {"2000": [1.0]}, outcomes.DIVERGED),
        frozen(5, TrialState.FAIL, {"2000": [1.0]}, outcomes.CRASHED),
        frozen(6, TrialState.COMPLETE, {"4000": [1.0]}, outcomes.COMPLETE),
        frozen(7, TrialState.RUNNING, {"2000": [2.0]}),  # itself
    ]
    assert fidelity.competitors(trials, spec, (2000, 4000), 7, 2000) == [[3.0], [3.5], [4.0]]


def test_judge_keeps_the_best_share_and_says_why(corpus: Path) -> None:
    spec = make(corpus, HALVING)
    row = {"step": 15, "tokens": 2048}
    # Fewer than min_trials (3) at the rung: nobody is stopped.
    assert fidelity.judge(spec, (2000, 4000), 9, 2000, [9.0], [[1.0]], row) is None
    # 4 at the rung, reduction_factor 2: the best 2 go on.
    assert fidelity.judge(spec, (2000, 4000), 9, 2000, [2.0], [[1.0], [3.0], [4.0]], row) is None
    verdict = fidelity.judge(spec, (2000, 4000), 9, 2000, [3.5], [[1.0], [3.0], [4.0]], row)
    assert verdict is not None and verdict.outcome == outcomes.PRUNED
    assert verdict.reason == (
        "successive halving: at rung 1 (2,000 tokens, 15 optimizer "
        "steps) val_bpb 3.5 ranks 3 of 4 trials; only the best 2 (1/2) "
        "go on"
    )


def test_ranking_by_fronts_then_crowding() -> None:
    directions = ["minimize", "maximize"]
    vectors = [[2.0, 5.0], [1.0, 1.0], [3.0, 9.0], [2.5, 4.0], [1.5, 3.0]]
    order = fidelity.ranking(vectors, directions)
    # Front 1: 1 (best bpb), 4, 0, 2 (best second objective); 3 is dominated by 0.
    assert order[-1] == 3 and set(order[:4]) == {0, 1, 2, 4}
    assert set(order[:2]) == {1, 2}  # the ends of the front are the least crowded
    assert fidelity.ranking([[2.0], [1.0], [2.0]], ["minimize"]) == [1, 0, 2]


@settings(max_examples=200, deadline=None)
@given(hs.lists(hs.tuples(hs.integers(0, 5), hs.integers(0, 5)), min_size=1, max_size=12))
def test_a_dominated_point_never_ranks_above_its_dominator(points: list[tuple[int, int]]) -> None:
    vectors = [[float(a), float(b)] for a, b in points]
    order = fidelity.ranking(vectors, ["minimize", "minimize"])
    assert sorted(order) == list(range(len(vectors)))
    place = {i: k for k, i in enumerate(order)}
    for i, a in enumerate(vectors):
        for j, b in enumerate(vectors):
            if all(x <= y for x, y in zip(a, b, strict=True)) and a != b:
                assert place[i] < place[j], (vectors, order)


# --- real studies -------------------------------------------------------------------------------


def run_study(
    tmp: Path, spec: StudySpec, numbers: list[dict[str, Any]], server: ForkServer
) -> list[FrozenTrial]:
    storage = st.open_storage(
        f"sqlite:///{tmp / 'sweeps.db'}", heartbeat_interval=1, grace_period=5, max_retries=0
    )
    create_or_resume(spec, storage)
    study = load_for_workers(spec, storage)
    for params in numbers:
        study.enqueue_trial(params)
    ctx = RunnerContext(
        spec=spec,
        study=study,
        storage=storage,
        study_dir=tmp / "runs",
        launcher=server,
        budget_bytes=4 * 2**30,
        poll_s=0.02,
        term_grace_s=5.0,
    )
    for _ in numbers:
        run_trial(ctx, CPU, study.ask())
    return study.get_trials()


@pytest.mark.parametrize("objectives", [["val_bpb"], ["val_bpb", "params"]])
@pytest.mark.study
def test_halving_stops_a_trial_that_ranks_low_at_a_rung(
    corpus: Path, tmp_path: Path, fork_server: ForkServer, objectives: list[str]
) -> None:
    """Two learning rates that train, then one that learns nothing: at the first rung (2,000
    tokens) the third ranks last of three and only the best 1 of 3 may go on. With params as a
    second objective (the same for all three) it is dominated: the same verdict."""
    spec = make(corpus, HALVING, objectives=objectives)
    trials = run_study(tmp_path, spec, [{"lr": 0.03}, {"lr": 0.01}, {"lr": 1e-6}], fork_server)
    ends = [t.user_attrs["outcome"] for t in trials]
    assert ends == ["complete", "complete", "pruned"], [t.user_attrs["reason"] for t in trials]
    for t in trials[:2]:  # both ran past every rung and recorded their values there
        assert sorted(t.user_attrs[fidelity.RUNGS_ATTR], key=int) == ["2000", "4000"]
        assert len(t.user_attrs[fidelity.RUNGS_ATTR]["2000"]) == len(objectives)
    stopped = trials[2]
    assert stopped.state == TrialState.PRUNED
    reason = stopped.user_attrs["reason"]
    assert reason.startswith("successive halving: at rung 1 (2,000 tokens, ")
    assert "ranks 3 of 3 trials" in reason and "only the best 1 (1/2) go on" in reason
    assert ("by non-dominated sorting" in reason) == (len(objectives) > 1)
    assert list(stopped.user_attrs[fidelity.RUNGS_ATTR]) == ["2000"]
    assert stopped.user_attrs["tokens_seen"] < 8000


def test_cooldown_reads_need_a_wsd_schedule_and_place_themselves(corpus: Path) -> None:
    cooldown = {**HALVING, "read": "cooldown"}
    with pytest.raises(SweepsError, match='needs lr_schedule = "wsd"'):
        make(corpus, cooldown)
    with pytest.raises(SweepsError, match="set by the pruner"):
        make(corpus, cooldown, fixed={"lr_schedule": "wsd", "cooldown_reads": [2000]})
    with pytest.raises(SweepsError, match="applies to successive_halving and hyperband"):
        make(corpus, {"name": "median", "read": "cooldown"})
    spec = make(corpus, {**cooldown, "cooldown_fraction": 0.5}, fixed={"lr_schedule": "wsd"})
    cfg = fidelity.bracket_reads(spec, 0, trial_config(spec, {"lr": 0.01}))
    assert cfg.cooldown_reads == (2000, 4000) and cfg.cooldown_fraction == 0.5


@pytest.mark.study
def test_cooldown_reads_are_what_a_rung_ranks(
    corpus: Path, tmp_path: Path, fork_server: ForkServer
) -> None:
    """With read = "cooldown", each rung's value is the trial's cooldown read there (its
    metrics.jsonl line marked "read"), not the running loss; the reads are charged in its
    FLOPs and kept out of its learning curve (the sweeps_evals rows)."""
    spec = make(corpus, {**HALVING, "read": "cooldown"}, fixed={"lr_schedule": "wsd"})
    trials = run_study(tmp_path, spec, [{"lr": 0.03}, {"lr": 0.01}, {"lr": 1e-6}], fork_server)
    assert [t.user_attrs["outcome"] for t in trials] == ["complete", "complete", "pruned"]
    for t in trials[:2]:
        rows = [
            json.loads(line)
            for line in (Path(t.user_attrs["run_dir"]) / "metrics.jsonl").read_text().splitlines()
        ]
        reads = [r for r in rows if r.get("read") == "cooldown"]
        assert len(reads) == 2
        for r, rung in zip(reads, (2000, 4000), strict=True):
            assert rung <= r["tokens"] < rung + 1000  # the first step boundary past the rung
            assert t.user_attrs[fidelity.RUNGS_ATTR][str(rung)] == [r["val_bpb"]]
        plain = [r for r in rows if "read" not in r]
        cfg = TrainConfig.from_dict(t.user_attrs["config"])
        without_reads = flops.count(
            cfg, t.user_attrs["tokens_seen"], n_evals=len(plain), cooldown_tokens=0
        )
        assert t.user_attrs["flops"] > without_reads.flops
        engine = st.open_storage(f"sqlite:///{tmp_path / 'sweeps.db'}").engine
        stored = [e for e in records.read_evals(engine, spec.name) if e["trial_number"] == t.number]
        assert sorted(e["tokens"] for e in stored) == [r["tokens"] for r in plain]
