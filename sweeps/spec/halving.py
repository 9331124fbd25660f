"""Successive halving's rungs and Hyperband's brackets: arithmetic on a spec's values.

The spec checks that its rungs can work when it is built (``sweeps.spec.rules``); the runner
ranks trials at them (``sweeps.fidelity``), which reads them from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lm.errors import FieldError

if TYPE_CHECKING:
    from sweeps.spec.types import StudySpec


def _largest(spec: StudySpec, name: str) -> int:
    """The largest value ``name`` takes in the study (searched, designed or fixed)."""
    if spec.design is not None and name in spec.design.param_names:
        return int(max(spec.design.choices(name)))
    if name in spec.param_names:
        return int(max(spec.param(name).probe_values()))
    return int(spec.base_values()[name])


def rungs(spec: StudySpec) -> tuple[int, ...]:
    """The study's rungs, in tokens, ascending; a ``FieldError`` when they cannot work."""
    p = spec.study.pruner
    key = "study.pruner.min_tokens"
    top = _largest(spec, "max_tokens")
    every = None if "eval_every_tokens" in spec.param_names \
        else int(spec.base_values()["eval_every_tokens"])
    first = p.min_tokens
    if first is None:
        if "max_tokens" in spec.param_names:
            raise FieldError(key, "is missing, and max_tokens varies between trials: give the "
                             "first rung in tokens, e.g. min_tokens = 100_000")
        first = top // p.reduction_factor ** 2
        if every:
            first = max(every, round(first / every) * every)
    if every and first < every:
        raise FieldError(key, f"is {first:,} tokens, before the first evaluation "
                         f"(eval_every_tokens = {every:,}): rungs are read from evaluations; "
                         f"use min_tokens >= {every:,} or evaluate more often")
    out, rung = [], first
    while rung < top:
        out.append(rung)
        rung *= p.reduction_factor
    if not out:
        raise FieldError(key, f"is {first:,} tokens, not below max_tokens = {top:,}: no trial "
                         "would ever be ranked; lower min_tokens (or evaluate more often)")
    return tuple(out)


def n_brackets(spec: StudySpec, study_rungs: Sequence[int]) -> int:
    """Hyperband's brackets (one per rung, plus one that stops nothing); 1 otherwise."""
    p = spec.study.pruner
    if p.name != "hyperband":
        return 1
    return p.n_brackets if p.n_brackets is not None else len(study_rungs) + 1
