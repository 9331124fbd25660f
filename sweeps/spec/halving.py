"""Successive halving's rungs and Hyperband's brackets: arithmetic on a spec's values.

The spec checks that its rungs can work when it is built (``sweeps.spec.rules``); the runner
ranks trials at them (``sweeps.fidelity``), which reads them from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from lm import budget
from lm.config import BUDGET_DEFAULTS, BUDGET_UNITS, BUDGETS, TrainConfig
from lm.errors import FieldError

if TYPE_CHECKING:
    from sweeps.spec.types import StudySpec

#: The pruner's first rung in each unit of a budget (``PrunerSpec``'s fields).
RUNG_FIELDS = {"tokens": "min_tokens", "bytes": "min_bytes", "flops": "min_flops"}


def unit(spec: StudySpec) -> str:
    """The unit of the study's budgets, in which its rungs are counted: the unit its
    ``max_*`` is given in (searched, designed or fixed), tokens by default. An ablation compared
    at equal text or compute (``Ablation.equal_unit``) counts in that unit."""
    names = set(spec.param_names)
    base = spec.base_values()
    for u, name in zip(BUDGET_UNITS[1:], BUDGETS["max"][1:], strict=True):
        if name in names or base.get(name) is not None:  # type: ignore[arg-type]  # max_* is in every unit
            return u
    if spec.ablation is not None:
        return spec.ablation.equal_unit
    return "tokens"


def _largest(spec: StudySpec, name: str) -> float | None:
    """The largest value ``name`` takes in the study (searched, designed or fixed); None when no
    trial sets it."""
    if spec.design is not None and name in spec.design.param_names:
        return cast(float, max(spec.design.choices(name)))  # a budget's values are numbers
    if name in spec.param_names:
        return cast(float, max(spec.param(name).probe_values()))  # as above
    value = spec.base_values().get(name)
    if value is None and name in (fields[0] for fields in BUDGETS.values()):
        return next(v for q, v in BUDGET_DEFAULTS.items() if BUDGETS[q][0] == name)
    return value


def rungs(spec: StudySpec) -> tuple[float, ...]:
    """The study's rungs, in its budget's ``unit``, ascending; a ``FieldError`` when they
    cannot work."""
    p = spec.study.pruner
    u = unit(spec)
    index = BUDGET_UNITS.index(u)
    max_name, every_name = BUDGETS["max"][index], BUDGETS["eval_every"][index]
    assert max_name is not None and every_name is not None
    rung_name = RUNG_FIELDS[u]
    key = f"study.pruner.{rung_name}"
    for other in RUNG_FIELDS.values():
        if other != rung_name and getattr(p, other) is not None:
            raise FieldError(
                f"study.pruner.{other}",
                f"the study's budget is in {u} ({max_name}); give the first rung as {rung_name}",
            )
    top = _largest(spec, max_name)
    if top is None:
        raise FieldError(
            key,
            f"the study compares its arms at equal {u} from a budget in "
            f"tokens; give {max_name} and {rung_name} (successive halving ranks "
            f"trials at the same {u})",
        )
    every = None if every_name in spec.param_names else spec.base_values().get(every_name)
    if every is None and u == "tokens" and "eval_every_tokens" not in spec.param_names:
        every = BUDGET_DEFAULTS["eval_every"]
    first = p.first_rung(u)
    if first is None:
        if max_name in spec.param_names:
            raise FieldError(
                key,
                f"is missing, and {max_name} varies between trials: give the "
                f"first rung in {u}, e.g. {rung_name} = {_example(u)}",
            )
        first = top / p.reduction_factor**2
        if every:
            first = max(every, round(first / every) * every)
        first = first if u == "flops" else int(first)
    if every and first < every:
        raise FieldError(
            key,
            f"is {first:,} {u}, before the first evaluation "
            f"({every_name} = {every:,}): rungs are read from evaluations; "
            f"use {rung_name} >= {every:,} or evaluate more often",
        )
    out, rung = [], first
    while rung < top:
        out.append(rung)
        rung *= p.reduction_factor
    if not out:
        raise FieldError(
            key,
            f"is {first:,} {u}, not below {max_name} = {top:,}: no trial "
            "would ever be ranked; lower it (or evaluate more often)",
        )
    return tuple(out)


def _example(u: str) -> str:
    return {"tokens": "100_000", "bytes": "400_000", "flops": "1e12"}[u]


def rung_key(rung: float) -> str:
    """A rung as the key of a trial's ``rungs`` attribute (``sweeps.fidelity``): its amount,
    as an integer where it is one."""
    return str(int(rung)) if float(rung).is_integer() else repr(float(rung))


def rung_tokens(cfg: TrainConfig, rung: float) -> int:
    """The training tokens at which trial ``cfg`` reaches ``rung`` (in its budget's unit): the
    same text or compute for every trial, at each one's own bytes or FLOPs per token."""
    return max(1, round(budget.to_tokens(cfg, rung)))


def n_brackets(spec: StudySpec, study_rungs: Sequence[float]) -> int:
    """Hyperband's brackets (one per rung, plus one that stops nothing); 1 otherwise."""
    p = spec.study.pruner
    if p.name != "hyperband":
        return 1
    return p.n_brackets if p.n_brackets is not None else len(study_rungs) + 1
