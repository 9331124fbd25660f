"""One judge of a trial's evaluations: ``Judge(row, history) -> Verdict | None``, like Optuna's
pruner, composed of the three mechanisms that may stop a trial early.

For each new evaluation (``row``, the newest of ``history``), in this order:

1. **report** the objective to Optuna (one objective, ``val_bpb`` or ``val_loss``, finite, and
   an evaluation index not reported before). Before the rules: Optuna's value of a trial told
   PRUNED is its last intermediate value, which must be this evaluation's, not the one before.
2. **the project's verdicts** (``sweeps.verdicts.project_rules``: divergence, then the verdicts
   on what the model predicts), in single- and multi-objective studies alike. They come first
   because they say what is wrong with the configuration, which a prune does not.
3. **Optuna's pruner** (``trial.should_prune``), asked only when step 1 reported.
4. **successive halving / Hyperband** on tokens (``sweeps.fidelity``): at each of the trial's
   rungs this evaluation passed, its values there are posted (other workers rank against them)
   and it is ranked among its bracket's competitors.

The first that fires is the verdict; the later ones are not asked (a trial stopped by a rule
posts no rung value). ``start`` begins an attempt: a fitted retry trains from token 0 again and
is judged at its rungs afresh.

The judge reads no files and launches nothing: the runner gives it the rows (``sweeps.monitor``)
and a ``RungBoard`` (the study: ``StudyBoard``), so it can be tested on synthetic histories.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial

from lm import budget, flops, outcomes
from lm.config import TrainConfig
from lm.run_files import READ_COOLDOWN
from sweeps import fidelity, optuna_compat, verdicts
from sweeps.record import TrialRecord
from sweeps.spec import StudySpec, halving
from sweeps.verdicts import Verdict

Row = dict[str, Any]
#: The metrics Optuna's pruner can compare across trials (intermediate values are losses).
REPORTED_METRICS = ("val_bpb", "val_loss")


class ReportingTrial(Protocol):
    """What the judge needs of an ``optuna.Trial``: its number, ``report`` and
    ``should_prune`` (the study's configured pruner)."""

    @property
    def number(self) -> int: ...

    def report(self, value: float, step: int) -> None: ...

    def should_prune(self) -> bool: ...


class RungBoard(Protocol):
    """Where a trial's values at the rungs it passed are posted, and its rivals' are read."""

    def post(
        self, rung_values: dict[str, list[float]], rung_tokens: dict[str, int] | None = None
    ) -> None: ...

    def trials(self) -> Sequence[FrozenTrial]: ...


class StudyBoard:
    """The study as a ``RungBoard``: the trial's user attribute ``rungs``, and the study's trials
    in the states that compete at a rung."""

    def __init__(self, storage: RDBStorage, study: optuna.Study, trial_id: int) -> None:
        self.storage, self.study, self.trial_id = storage, study, trial_id

    def post(
        self, rung_values: dict[str, list[float]], rung_tokens: dict[str, int] | None = None
    ) -> None:
        rec = TrialRecord(rungs=dict(rung_values), rung_tokens=dict(rung_tokens or {}) or None)
        optuna_compat.write_user_attrs(self.storage, self.trial_id, rec.to_attrs())

    def trials(self) -> Sequence[FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=fidelity.COMPETING_STATES)


class Judge:
    """The verdict on each new evaluation of one trial (see the module docstring for the order)."""

    def __init__(self, spec: StudySpec, trial: ReportingTrial, board: RungBoard) -> None:
        self.spec, self.trial, self.board = spec, trial, board
        objective = spec.study.metrics[0]
        # Intermediate values go to Optuna only with one objective it can compare.
        self.report_metric = (
            objective
            if (not spec.study.multi_objective and objective in REPORTED_METRICS)
            else None
        )
        #: Evaluation indices reported to Optuna, over all attempts (Optuna takes one value per
        #: step: a retry's evaluations at indices already reported are not reported again).
        self.reported: set[int] = set()
        # Multi-fidelity on tokens: the study's rungs, the ones this attempt is judged at, and
        # its values at those it passed.
        self.study_rungs = halving.rungs(spec) if spec.study.pruner.by_tokens else ()
        self.my_rungs: tuple[float, ...] = ()
        #: Each of its rungs' training tokens for this attempt (``halving.rung_tokens``).
        self.rung_at: dict[float, int] = {}
        self.rung_values: dict[str, list[float]] = {}
        self.judged: set[float] = set()
        self.static: dict[str, float] = {}
        self.max_tokens = 0  # the attempt's budget: its last evaluation is its final one

    def start(self, cfg: TrainConfig) -> None:
        """An attempt's budget and rungs: judged afresh (a fitted retry trains from token 0
        again)."""
        assert cfg.max_tokens is not None  # resolved (lm.budget)
        self.max_tokens = cfg.max_tokens
        if not self.study_rungs:
            return
        self.my_rungs = fidelity.decision_rungs(
            self.spec,
            self.study_rungs,
            self.trial.number,
            budget.max_amount(cfg, halving.unit(self.spec)),
        )
        self.rung_at = {r: halving.rung_tokens(cfg, r) for r in self.my_rungs}
        self.rung_values, self.judged = {}, set()
        estimate = flops.count(cfg)
        self.static = {"params": float(estimate.params), "flops": float(estimate.flops)}

    def __call__(self, row: Row, history: Sequence[Row]) -> Verdict | None:
        """The verdict on ``row``, the newest evaluation of ``history``; None: it goes on. A
        cooldown read (``lm.cooldown``: ``row["read"]``, never in ``history``) is where its
        rung is read with ``pruner.read = "cooldown"``, and nothing else: the run it branched
        from goes on at its stable rate, and that run's evaluations are what the rules judge."""
        if row.get("read") == READ_COOLDOWN:
            return self.halving(row, (row,))
        index = len(history) - 1
        tokens = row.get("tokens")
        final = isinstance(tokens, int) and tokens >= self.max_tokens
        metric = self.report_metric
        value = row.get(metric) if metric else None
        reported = False
        if (
            metric
            and isinstance(value, (int, float))
            and math.isfinite(value)
            and index not in self.reported
        ):
            self.reported.add(index)
            self.trial.report(float(value), step=index)
            reported = True
        verdict = verdicts.project_rules(history, self.spec.limits, final=final)
        if verdict is not None:
            return verdict
        if reported and self.trial.should_prune():
            return Verdict(
                outcomes.PRUNED,
                verdicts.optuna_prune_reason(
                    self.spec.study.pruner.name, str(metric), value, index, row
                ),
            )
        if self.spec.study.pruner.read == "cooldown":
            return None  # its rungs are read by its cooldown reads
        return self.halving(row, history)

    def halving(self, row: Row, history: Sequence[Row]) -> Verdict | None:
        """Successive halving / Hyperband at the rungs this evaluation passed: post the trial's
        values there (other workers rank against them), then rank it."""
        tokens = row.get("tokens")
        if not self.my_rungs or not isinstance(tokens, int):
            return None
        before = history[-2] if len(history) > 1 else None
        spec, number = self.spec, self.trial.number
        for rung in (
            r for r in self.my_rungs if self.rung_at[r] <= tokens and r not in self.judged
        ):
            self.judged.add(rung)
            at = self.rung_at[rung]
            own = fidelity.rung_vector(spec.study.objectives, before, row, at, self.static)
            if own is None:
                continue  # an objective it cannot be ranked on: not judged at this rung
            key = halving.rung_key(rung)
            self.rung_values[key] = own
            self.board.post(
                self.rung_values,
                {
                    k: self.rung_at[r]
                    for r in self.judged
                    if (k := halving.rung_key(r)) in self.rung_values
                },
            )
            others = fidelity.competitors(self.board.trials(), spec, self.study_rungs, number, rung)
            verdict = fidelity.judge(
                spec, self.study_rungs, number, rung, own, others, row, tokens=at
            )
            if verdict is not None:
                return verdict
        return None
