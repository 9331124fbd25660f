"""The rules between a spec's sections, which ``StudySpec`` checks on itself (``check_spec``)
and the reader checks early on partly read TOML (``check_search``, ``check_fixed_and_space``,
``check_scaling_fixed``, ``check_grid``), so its errors name the key before a type is built.

Each rule reads a ``StudySpec`` (or its parts) without building one, so the types import this
module and not the other way. Rules that build trial configs from the sections are the reader's
(``sweeps.spec.checks``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lm import flops
from lm.config import MAX_COOLDOWN_FRACTION, TrainConfig
from lm.errors import FieldError, SweepsError
from sweeps.spec import halving
from sweeps.spec.designs import check_transfer_fixed
from sweeps.spec.values import GRID_SAMPLERS, SIZE_FIELDS, unique

if TYPE_CHECKING:
    from sweeps.spec.types import ParamSpec, StudySpec


def check_spec(spec: StudySpec) -> None:
    """Every rule between the sections of ``spec``: a ``FieldError`` naming the key."""
    check_fixed_and_space(spec.fixed, spec.space)
    check_search(
        space=bool(spec.space),
        ablation=spec.ablation is not None,
        enqueue=bool(spec.enqueue),
        scaling=spec.scaling is not None,
        transfer=spec.transfer is not None,
    )
    if spec.scaling is not None:
        check_scaling_fixed(spec.scaling, spec.fixed)
    if spec.transfer is not None:
        check_transfer_fixed(spec.transfer, spec.fixed)
    check_design(spec)
    check_grid(spec.space, spec.study.sampler.name)
    if spec.limits.max_wall_s is not None and "max_wall_s" in spec.fixed:
        raise FieldError(
            "fixed.max_wall_s", "also set as limits.max_wall_s; keep the one in [limits]"
        )
    if spec.limits.max_flops is not None:
        check_compute_limit(spec)
    if spec.study.pruner.by_tokens:
        halving.rungs(spec)  # a FieldError when the rungs cannot work
    if spec.study.pruner.read == "cooldown":
        check_cooldown_reads(spec)


def check_cooldown_reads(spec: StudySpec) -> None:
    """``read = "cooldown"`` branches a decay from each rung, which only a WSD schedule can end
    (a cosine run is already decaying), and places the reads itself."""
    if spec.fixed.get("lr_schedule") != "wsd":
        raise FieldError(
            "study.pruner.read",
            '"cooldown" needs lr_schedule = "wsd" '
            "in [fixed] (a cosine run cannot be cooled down from a rung)",
        )
    if "cooldown_reads" in spec.fixed or any(p.name == "cooldown_reads" for p in spec.space):
        raise FieldError(
            "cooldown_reads",
            "is set by the pruner (one read per rung) with "
            'study.pruner.read = "cooldown"; remove it',
        )
    if spec.study.pruner.cooldown_fraction is None and "cooldown_fraction" not in spec.fixed:
        # The reads' decay follows decay_fraction (d / (1 - d)): bounded as cooldown_fraction
        # is (lm.config.MAX_COOLDOWN_FRACTION), said here rather than by every trial.
        searched = {p.name: p for p in spec.space}
        fractions = (
            searched["decay_fraction"].probe_values()
            if "decay_fraction" in searched
            else [spec.base_values()["decay_fraction"]]
        )
        d = max(fractions)
        c = d / (1 - d)
        if c > MAX_COOLDOWN_FRACTION:
            raise FieldError(
                "study.pruner.cooldown_fraction",
                f"is missing, so each read "
                f"decays over decay_fraction / (1 - decay_fraction) = {c:.3g}"
                f" x the tokens before it (decay_fraction = {d:g}), more than "
                f"{MAX_COOLDOWN_FRACTION:g}; set cooldown_fraction = 0.25, or "
                "decay_fraction <= 0.5",
            )


def check_scaling_fixed(scaling: Any, fixed: Mapping[str, Any]) -> None:
    """What a ``[scaling]`` grid sets (sizes, ``max_tokens``, seeds) is not also ``[fixed]``;
    ``scaling`` is the ``[scaling]`` table (a ``Scaling`` or its TOML data)."""
    get: Callable[[str], Any] = (
        (lambda k: scaling.get(k))
        if isinstance(scaling, Mapping)
        else (lambda k: getattr(scaling, k, None))
    )
    if "max_tokens" in fixed:
        raise FieldError(
            "fixed.max_tokens",
            "each [scaling] cell's max_tokens is derived from "
            "its budget and model size; remove it from [fixed]",
        )
    sizes = get("sizes")
    for size in sizes if isinstance(sizes, (list, tuple)) else ():
        for k in size if isinstance(size, Mapping) else ():
            if k in fixed and k in SIZE_FIELDS:  # another key is Scaling's to refuse
                raise FieldError(
                    f"fixed.{k}", f"{k} is set by scaling.sizes; remove it from [fixed]"
                )
    if get("seeds") is not None and "seed" in fixed:
        raise FieldError("fixed.seed", "conflicts with scaling.seeds; remove one")


#: How many combinations of searched values ``check_compute_limit`` tries before giving up.
_COMPUTE_PROBES = 512


def _compute_points(spec: StudySpec) -> list[dict[str, Any]] | None:
    """Parameter sets that bound the spec's compute from below: the ablation's points, else
    the corners of the space (each bound and choice; a conditional field also at its base
    value), else the enqueued points; None when there are too many corners to try."""
    if spec.design is not None:
        return spec.design.expand()
    if not spec.space:
        return [dict(e) for e in spec.enqueue]
    base = spec.base_values()
    axes = []
    for p in spec.space:
        values = p.probe_values()
        if p.when is not None and p.name in base:
            values = [*values, base[p.name]]  # the field may keep its base value
        axes.append([(p.name, v) for v in unique(values)])
    if math.prod(len(a) for a in axes) > _COMPUTE_PROBES:
        return None
    return [dict(point) for point in itertools.product(*axes)]


def check_compute_limit(spec: StudySpec) -> None:
    """Refuse a spec whose every trial would be over ``limits.max_flops``.

    Training FLOPs rise with every model size, ``seq_len`` and ``max_tokens`` and a run trains
    at least ``max_tokens``, so ``flops_per_token x max_tokens`` at the corners of the space
    bounds every point from below; a corner that is not a valid config is skipped."""
    points = _compute_points(spec)
    if not points:
        return
    cheapest = None
    for point in points:
        try:
            cfg = TrainConfig.from_dict(spec.trial_values(point))
        except SweepsError:
            continue
        bound = flops.count(cfg, cfg.max_tokens, n_evals=0).flops
        if cheapest is None or bound < cheapest[0]:
            cheapest = (bound, point)
    limit = spec.limits.max_flops
    if cheapest is not None and limit is not None and cheapest[0] > limit:
        shown = ", ".join(f"{k}={v!r}" for k, v in cheapest[1].items()) or "the fixed config"
        raise FieldError(
            "limits.max_flops",
            f"every trial is over the limit of {limit:.3g} "
            f"training FLOPs: the cheapest ({shown}) needs {cheapest[0]:.3g}; "
            "raise max_flops or lower max_tokens or the model sizes",
        )


def check_fixed_and_space(fixed: Mapping[str, Any], space: Iterable[ParamSpec]) -> None:
    """A field is fixed or searched, not both; the corpus is neither (it is ``[corpus]``)."""
    if "corpus" in fixed:
        raise FieldError("fixed.corpus", "set the corpus in [corpus] (dir = ...), not in [fixed]")
    for p in space:
        if p.name == "corpus":
            raise FieldError(
                f"space.{p.name}", "the corpus cannot be searched; run one study per corpus"
            )
        if p.name in fixed:
            raise FieldError(
                f"space.{p.name}", f"{p.name} is also in [fixed]; remove it from one of them"
            )


def check_design(spec: StudySpec) -> None:
    """An ablation's or IsoFLOP grid's trials are all enqueued: no sampler chooses anything, and
    a grid's cells are compared at their whole budgets, never pruned on the way, nor added to."""
    design = spec.design
    if design is None:
        return
    what = (
        "an ablation"
        if spec.ablation is not None
        else "an IsoFLOP grid"
        if spec.scaling is not None
        else "a transfer study"
    )
    if spec.study.sampler.name != "random":
        raise FieldError(
            "study.sampler",
            f"{what} enqueues every trial, so sampler "
            f"{spec.study.sampler.name!r} would never be used; remove "
            "study.sampler",
        )
    if spec.transfer is not None:
        check_transfer_design(spec)
    if spec.scaling is None:
        return
    if spec.study.pruner.name != "none":
        raise FieldError(
            "study.pruner",
            f"pruner {spec.study.pruner.name!r} would stop IsoFLOP "
            "cells before their budget is spent (a stopped cell has no loss at its "
            'budget); use pruner = "none" or leave it out',
        )
    problem = too_many_cells(spec, spec.study.n_trials)
    if problem is not None:
        raise FieldError(
            "study.n_trials", f"is {spec.study.n_trials}, but {problem}; remove n_trials"
        )


def check_transfer_design(spec: StudySpec) -> None:
    """A transfer study's trials are compared at their whole budget (a pruner would cut a
    learning rate by another's early losses), and all of them run: no more, no fewer."""
    assert spec.transfer is not None
    if spec.study.pruner.name != "none":
        raise FieldError(
            "study.pruner",
            f"pruner {spec.study.pruner.name!r} would stop "
            "transfer trials before their budget (a stopped learning rate has no final loss); "
            'use pruner = "none" or leave it out',
        )
    trials = len(spec.transfer.expand())
    if spec.study.n_trials > trials:
        raise FieldError(
            "study.n_trials",
            f"is {spec.study.n_trials}, but the [transfer] grid has "
            f"{trials} trials and more would be random mixes; remove n_trials",
        )


def too_many_cells(spec: StudySpec, n_trials: int) -> str | None:
    """Why ``n_trials`` is too many for the spec's IsoFLOP grid (its spec or ``--n-trials``),
    or None."""
    if spec.scaling is None:
        return None
    cells = len(spec.scaling.expand())
    if n_trials <= cells:
        return None
    return (
        f"the [scaling] grid has {cells} cells and more trials would be random mixes of "
        "budgets and sizes"
    )


def check_grid(space: Iterable[ParamSpec], sampler: str) -> None:
    """A grid sampler enumerates every value: each parameter needs a finite set, and ``grid``
    (unlike ``bruteforce``) cannot leave conditional parameters out of a point."""
    if sampler not in GRID_SAMPLERS:
        return
    space = tuple(space)
    for p in space:
        if not p.finite:
            raise FieldError(
                f"space.{p.name}",
                f"sampler {sampler} needs a finite set of "
                "values, but this float range has no step; add step or use choices",
            )
    if sampler == "grid":
        for p in space:
            if p.when is not None:
                raise FieldError(
                    f"space.{p.name}.when",
                    "the grid sampler cannot skip "
                    "conditional parameters (points would repeat); use sampler = "
                    '"bruteforce", which walks conditions',
                )


def check_search(
    *, space: bool, ablation: bool, enqueue: bool, scaling: bool = False, transfer: bool = False
) -> None:
    """What to search comes from ``[space]`` (with ``[[enqueue]]``), from ``[ablation]``, from
    ``[scaling]`` or from ``[transfer]``."""
    if transfer and (space or ablation or scaling or enqueue):
        other = next(
            name
            for name, given in (
                ("[space]", space),
                ("[ablation]", ablation),
                ("[scaling]", scaling),
                ("[[enqueue]]", enqueue),
            )
            if given
        )
        raise FieldError(
            "transfer",
            f"[transfer] and {other} cannot be combined; a transfer "
            f"study's trials are its grid of widths and learning rates: remove one of them",
        )
    if scaling and (space or ablation):
        other = "[space]" if space else "[ablation]"
        raise FieldError(
            "scaling",
            f"[scaling] and {other} cannot be combined; an IsoFLOP "
            f"grid's trials are its cells: remove one of them",
        )
    if scaling and enqueue:
        raise FieldError(
            "enqueue",
            "[[enqueue]] and [scaling] cannot be combined; the grid "
            "enqueues its own cells: remove [[enqueue]]",
        )
    if ablation and space:
        raise FieldError(
            "ablation",
            "[ablation] and [space] cannot be combined; an ablation's "
            "trial list is its expansion: remove one of them",
        )
    if ablation and enqueue:
        raise FieldError(
            "enqueue",
            "[[enqueue]] and [ablation] cannot be combined; the "
            "ablation runs its baseline first: remove [[enqueue]]",
        )
    if not space and not ablation and not enqueue and not scaling and not transfer:
        raise FieldError(
            "space",
            "nothing to search: add [space.<field>] tables, an "
            "[ablation], a [scaling] grid, a [transfer] grid, or [[enqueue]] configs",
        )
