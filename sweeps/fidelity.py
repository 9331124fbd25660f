"""Multi-fidelity: successive halving and Hyperband with training as the resource.

A small model's loss after a ninth of its tokens says much about its loss at the end, and
nothing is cheaper than a trial stopped early. Both pruners (``PrunerSpec.by_tokens``) run here,
asynchronously (ASHA: no trial waits for others), on top of the project's own rules:

- **Rungs** are amounts of training in the unit of the study's budget (tokens, bytes of text or
  FLOPs: ``lm.budget``), the same for every trial: ``min_<unit> x reduction_factor**k`` below
  the largest budget (``sweeps.spec.halving.rungs``, checked when the spec is read). Not steps
  or evaluations: two trials with different ``batch_size x grad_accum x seq_len`` are compared
  after the same data; and under a budget in bytes, two vocabularies after the same text (each
  trial reaches a rung at its own token count, ``halving.rung_tokens``).
- When a trial's evaluation passes a rung below its own ``max_tokens``, the runner records the
  trial's objective values at that rung (``rung_vector``: the loss interpolated in log-tokens
  between the evaluations either side, so every trial is read at exactly the rung) in its user
  attribute ``rungs``, then ranks it among the trials that have reached the rung
  (``competitors``): with one objective by value, with several by non-dominated sorting and then
  crowding distance (NSGA-II's order). It goes on if it is among the best
  ``max(1, n // reduction_factor)`` of the ``n``, and always while fewer than ``min_trials``
  have reached the rung (``judge``); else it is ``pruned`` with a reason that gives the numbers.
- **The project's verdicts first**: a trial that diverged, ran out of memory or was judged
  collapsed, stalled or ``<unk>``-dominated is no competitor (its values say nothing about a
  configuration that trains, and counting it would let worse trials through). Running,
  complete and halving-pruned trials are. Failed trials (crashed, interrupted and re-queued)
  are not: their configuration runs again.
- **Hyperband** splits trials into brackets by trial number (``bracket``): bracket ``s`` is
  judged from rung ``s`` on, the last bracket never (plain random search at full budget), so a
  first rung too early to rank configurations cannot stop everything good. Trials are ranked
  only against their own bracket.

Everything here is a pure function of plain values and frozen trials; the runner does the
reading, the recording and the stopping.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from lm import budget, outcomes
from lm.config import TrainConfig
from sweeps import record as rc
from sweeps.spec import Objective, StudySpec, halving
from sweeps.spec.halving import n_brackets
from sweeps.verdicts import Verdict
from sweeps.verdicts import finite as _finite

#: The trial user attribute holding its objective values at each rung it passed:
#: ``{"<tokens>": [value per objective]}``.
RUNGS_ATTR = rc.RUNGS
#: The trial user attribute holding the training tokens at which it reached each of those
#: rungs (``{"<rung>": tokens}``): under a budget in bytes or FLOPs, each trial's own.
RUNG_TOKENS_ATTR = rc.RUNG_TOKENS
#: Endings whose values are no competitor at a rung (the project's verdicts).
NOT_COMPETING = (*outcomes.PREDICTION_VERDICTS, outcomes.DIVERGED, outcomes.OOM)
#: Trial states that compete at a rung.
COMPETING_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
Row = Mapping[str, Any]


def bracket(spec: StudySpec, study_rungs: Sequence[float], number: int) -> int:
    """The bracket of trial ``number``: round robin over trial numbers."""
    return number % n_brackets(spec, study_rungs)


def decision_rungs(
    spec: StudySpec, study_rungs: Sequence[float], number: int, max_amount: float
) -> tuple[float, ...]:
    """The rungs trial ``number`` is judged at: its bracket's, below its own budget
    ``max_amount`` (in the rungs' unit; a trial's last evaluation is its result, not a rung)."""
    first = bracket(spec, study_rungs, number)
    return tuple(r for r in study_rungs[first:] if r < max_amount)


def bracket_reads(spec: StudySpec, number: int, cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with its cooldown reads (``space.cooldown_values``: one per rung below its
    ``max_tokens``) narrowed to the rungs trial ``number`` is judged at: a read at a rung its
    Hyperband bracket skips would be compute spent for nothing."""
    if not cfg.cooldown_reads or spec.study.pruner.read != "cooldown":
        return cfg
    keep = decision_rungs(
        spec, halving.rungs(spec), number, budget.max_amount(cfg, halving.unit(spec))
    )
    tokens = {halving.rung_tokens(cfg, r) for r in keep}
    return dataclasses.replace(
        cfg, cooldown_reads=tuple(r for r in cfg.cooldown_reads if r in tokens)
    )


def at_tokens(before: Row | None, row: Row, tokens: int, key: str) -> float | None:
    """``key`` at exactly ``tokens``: interpolated linearly in log-tokens between the evaluation
    ``before`` and ``row`` when they straddle it, else ``row``'s own value."""
    value = row.get(key)
    if not _finite(value):
        return None
    t1 = row.get("tokens")
    t0 = before.get("tokens") if before is not None else None
    v0 = before.get(key) if before is not None else None
    if not (_finite(t0) and _finite(t1) and _finite(v0) and 0 < t0 < tokens <= t1):
        return float(value)
    w = (math.log(tokens) - math.log(t0)) / (math.log(t1) - math.log(t0))
    return float(v0 + w * (value - v0))


def rung_vector(
    objectives: Sequence[Objective],
    before: Row | None,
    row: Row,
    tokens: int,
    static: Mapping[str, float],
) -> list[float] | None:
    """The objective values of a trial at a rung, or None when one is unknown. The losses and
    the wall time (``elapsed_s``) are read at exactly ``tokens``; throughput and peak memory
    as measured so far; parameters and FLOPs are the values it will end with (``static``)."""
    out = []
    for o in objectives:
        if o.metric in ("val_bpb", "val_loss"):
            value = at_tokens(before, row, tokens, o.metric)
        elif o.metric == "wall_s":
            value = at_tokens(before, row, tokens, "elapsed_s")
        elif o.metric == "peak_mem":
            value = row.get("peak_mem_bytes") or None  # 0: not measured
        elif o.metric == "tokens_per_s":
            value = row.get("tokens_per_s")
        else:
            value = static.get(o.metric)
        if not _finite(value):
            return None
        out.append(float(value))
    return out


def competitors(
    trials: Iterable[FrozenTrial],
    spec: StudySpec,
    study_rungs: Sequence[float],
    number: int,
    rung: float,
) -> list[list[float]]:
    """The values at ``rung`` of the other trials of ``number``'s bracket that compete."""
    mine = bracket(spec, study_rungs, number)
    out = []
    for t in trials:
        if (
            t.number == number
            or t.state not in COMPETING_STATES
            or rc.outcome_of(t) in NOT_COMPETING
            or bracket(spec, study_rungs, t.number) != mine
        ):
            continue
        values = (rc.value_of(t, rc.RUNGS) or {}).get(halving.rung_key(rung))
        if (
            isinstance(values, list)
            and len(values) == len(spec.study.objectives)
            and all(_finite(v) for v in values)
        ):
            out.append([float(v) for v in values])
    return out


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True)
    )


def _fronts(points: Sequence[Sequence[float]]) -> list[list[int]]:
    """Non-dominated fronts (indices), best first; every value to minimise."""
    left, fronts = list(range(len(points))), []
    while left:
        front = [i for i in left if not any(_dominates(points[j], points[i]) for j in left)]
        fronts.append(front)
        left = [i for i in left if i not in front]
    return fronts


def _crowding(points: Sequence[Sequence[float]], front: Sequence[int]) -> dict[int, float]:
    distance = dict.fromkeys(front, 0.0)
    for m in range(len(points[front[0]])):
        ordered = sorted(front, key=lambda i: points[i][m])
        low, high = points[ordered[0]][m], points[ordered[-1]][m]
        distance[ordered[0]] = distance[ordered[-1]] = math.inf
        if high > low:
            for a, i, b in zip(ordered, ordered[1:], ordered[2:], strict=False):
                distance[i] += (points[b][m] - points[a][m]) / (high - low)
    return distance


def ranking(vectors: Sequence[Sequence[float]], directions: Sequence[str]) -> list[int]:
    """Indices of ``vectors``, best first: by value with one objective, else by non-dominated
    front then crowding distance (larger first). Ties keep the earlier index first."""
    signs = [1.0 if d == "minimize" else -1.0 for d in directions]
    points = [[s * v for s, v in zip(signs, vec, strict=True)] for vec in vectors]
    if len(signs) == 1:
        return sorted(range(len(points)), key=lambda i: points[i][0])
    order = []
    for front in _fronts(points):
        crowd = _crowding(points, front)
        order += sorted(front, key=lambda i: -crowd[i])
    return order


def judge(
    spec: StudySpec,
    study_rungs: Sequence[float],
    number: int,
    rung: float,
    own: Sequence[float],
    others: Sequence[Sequence[float]],
    row: Row,
    tokens: int | None = None,
) -> Verdict | None:
    """Stop trial ``number`` at ``rung`` (reached at ``tokens`` training tokens, default the
    rung itself: a budget in tokens) unless it is among the best of its rung."""
    p = spec.study.pruner
    n = len(others) + 1
    if n < (p.min_trials or p.reduction_factor):
        return None
    keep = max(1, n // p.reduction_factor)
    order = ranking([own, *others], spec.study.directions)
    place = order.index(0)
    if place < keep:
        return None
    return Verdict(
        outcomes.PRUNED, _reason(spec, study_rungs, number, rung, own, place, n, keep, row, tokens)
    )


def _reason(
    spec: StudySpec,
    study_rungs: Sequence[float],
    number: int,
    rung: float,
    own: Sequence[float],
    place: int,
    n: int,
    keep: int,
    row: Row,
    tokens: int | None,
) -> str:
    p = spec.study.pruner
    where = p.name.replace("_", " ")
    if p.name == "hyperband":
        where += (
            f" (bracket {bracket(spec, study_rungs, number) + 1} of "
            f"{n_brackets(spec, study_rungs)})"
        )
    values = ", ".join(f"{m} {v:.4g}" for m, v in zip(spec.study.metrics, own, strict=True))
    how = "" if len(own) == 1 else " by non-dominated sorting"
    step = row.get("step")
    steps = f", {step:,} optimizer steps" if isinstance(step, int) else ""
    unit = halving.unit(spec)
    amount = f"{rung:.3g} FLOPs" if unit == "flops" else f"{rung:,} {unit}"
    if unit != "tokens" and tokens is not None:
        amount += f", {tokens:,} tokens"
    return (
        f"{where}: at rung {study_rungs.index(rung) + 1} ({amount}{steps}) "
        f"{values} ranks {place + 1} of {n} trials{how}; only the best {keep} "
        f"(1/{p.reduction_factor}) go on"
    )
