"""The spec's designs, the tables that enqueue a trial list instead of sampling one:
``[ablation]`` (one factor at a time around a baseline), ``[scaling]`` (an IsoFLOP grid of
compute budgets x model sizes) and ``[transfer]`` (parametrizations x widths x learning rates:
does the best learning rate stay put as the model widens?). Frozen dataclasses that check
their own rules, like every spec type (``sweeps.spec.types``, whose ``StudySpec`` holds them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lm import flops
from lm.checks import check_choice, require_int
from lm.config import BUDGET_UNITS, PARAMETRIZATIONS, TrainConfig
from lm.errors import FieldError, SweepsError
from sweeps.spec.values import (
    FLOPS_BUDGET,
    SIZE_FIELDS,
    as_tuple,
    check_scalars,
    same,
    train_defaults,
    unique,
)

#: The fields that change what a token is: arms that differ in them see different text per token.
VOCABULARY_FIELDS = ("tokenizer", "vocab_size", "lowercase")


def _check_seed_list(obj: Ablation | Scaling | Transfer) -> None:
    """``obj.seeds``: a non-empty list of distinct integers >= 0 (every design)."""
    as_tuple(obj, "seeds")
    seeds = obj.seeds
    if not isinstance(seeds, tuple) or not seeds:
        raise FieldError("seeds", f"must be a non-empty list of integers, got {seeds!r}")
    for i, seed in enumerate(seeds):
        require_int(seed, f"seeds[{i}]", 0)
    if len(set(seeds)) != len(seeds):
        raise FieldError("seeds", f"lists a seed twice: {list(seeds)}")


# --- [ablation] ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ablation:
    """``[ablation]``: one factor at a time around a baseline, each point once per seed."""

    baseline: dict[str, Any]
    vary: tuple[tuple[str, tuple[Any, ...]], ...]
    seeds: tuple[int, ...] | None = None
    #: The unit the arms are compared at equal amounts of (``lm.config.BUDGET_UNITS``): a
    #: budget given in tokens is re-expressed in it at the baseline's rate (``sweeps.space``).
    #: None: bytes of text when the vocabulary varies (``VOCABULARY_FIELDS``), else tokens.
    equal: str | None = None
    #: Values of fields the baseline leaves out: ``[fixed]`` over ``TrainConfig``'s defaults.
    defaults: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if "corpus" in self.baseline:
            raise FieldError("baseline.corpus", "set the corpus in [corpus]")
        as_tuple(self, "vary")
        if not self.vary:
            raise FieldError("vary", "is empty; name at least one field to vary")
        for name, values in self.vary:
            if name == "corpus":
                raise FieldError("vary.corpus", "the corpus cannot be varied")
            if not isinstance(values, (list, tuple)) or not values:
                raise FieldError(f"vary.{name}", f"must be a non-empty list, got {values!r}")
            check_scalars(tuple(values), f"vary.{name}")
        object.__setattr__(self, "vary", tuple((n, tuple(v)) for n, v in self.vary))
        if self.seeds is not None:
            self._check_seeds()
        if self.equal is not None:
            check_choice(self, "equal", BUDGET_UNITS)

    @property
    def varies_vocabulary(self) -> bool:
        """Whether arms differ in what a token is (tokenizer, size, case folding)."""
        return any(name in VOCABULARY_FIELDS for name, _ in self.vary)

    @property
    def equal_unit(self) -> str:
        """The unit the arms are compared at (``equal``, or its default: equal text when the
        vocabulary varies, since at equal tokens a larger vocabulary reads more text)."""
        if self.equal is not None:
            return self.equal
        return "bytes" if self.varies_vocabulary else "tokens"

    def _check_seeds(self) -> None:
        _check_seed_list(self)
        if "seed" in self.baseline:
            raise FieldError("baseline.seed", "conflicts with ablation.seeds; remove one")
        if "seed" in dict(self.vary):
            raise FieldError("vary.seed", "conflicts with ablation.seeds; remove one")

    def choices(self, name: str) -> tuple[Any, ...]:
        """Every value ``name`` takes in the expansion (the baseline's first)."""
        if name == "seed" and self.seeds is not None:
            return self.seeds
        for field_name, values in self.vary:
            if field_name == name:
                return unique((self._base_value(name), *values))
        raise KeyError(name)

    @property
    def param_names(self) -> list[str]:
        names = [name for name, _ in self.vary]
        return [*names, "seed"] if self.seeds is not None else names

    def _base_value(self, name: str) -> Any:
        if name in self.baseline:
            return self.baseline[name]
        return self.defaults[name]

    def expand(self) -> list[dict[str, Any]]:
        """The trial list: the baseline, then each value of each varied field with every other
        field at its baseline; seed-major, so the first pass over the seeds is a whole ablation."""
        base = {name: self._base_value(name) for name, _ in self.vary}
        points = [dict(base)]
        for name, values in self.vary:
            for value in values:
                if same(value, base[name]):
                    continue  # the baseline already covers it
                points.append({**base, name: value})
        if self.seeds is None:
            return points
        return [{**point, "seed": seed} for seed in self.seeds for point in points]

    @staticmethod
    def label(params: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
        """ "baseline" or the one field that differs from it (``d_ff=64``)."""
        changed = [
            f"{k}={v!r}"
            for k, v in params.items()
            if k != "seed" and k in baseline and not same(v, baseline[k])
        ]
        return ", ".join(changed) or "baseline"


# --- [scaling] ----------------------------------------------------------------------------------


def budget_tokens(cfg: TrainConfig, budget: float) -> int:
    """The ``max_tokens`` that spends ``budget`` training FLOPs on ``cfg``'s model: the whole
    number of optimizer steps (each ``flops_per_token x tokens_per_step``, ``lm.flops``) nearest
    to the budget, so a cell trains within half a step of it; 0 when not even half a step fits.
    Evaluation is not counted (the compute axis is training compute, as in ``lm.flops``)."""
    per_step = flops.count(cfg, 0, n_evals=0).flops_per_token * cfg.tokens_per_step
    return round(budget / per_step) * cfg.tokens_per_step


@dataclass(frozen=True)
class Scaling:
    """``[scaling]``: an IsoFLOP grid. Every compute budget x every model size (x every seed) is
    one trial, enqueued as an ablation's points are; its ``max_tokens`` is ``budget_tokens`` of
    its budget and its model, and its ``flops_budget`` parameter is the budget the fit groups by.

    Every size sets the same ``SIZE_FIELDS`` (so every trial has the same parameters); the rest
    of the config is ``defaults`` (``[fixed]`` over ``TrainConfig``'s defaults).
    """

    budgets: tuple[float, ...]
    sizes: tuple[dict[str, Any], ...]
    seeds: tuple[int, ...] | None = None
    defaults: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: (budget, size, max_tokens) per cell, budget-major: worked out once, here.
    cells: tuple[tuple[float, dict[str, Any], int], ...] = field(
        default=(), init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self._check_budgets()
        self._check_sizes()
        if self.seeds is not None:
            _check_seed_list(self)
        configs = [self.config(size, i) for i, size in enumerate(self.sizes)]
        cells = []
        for j, budget in enumerate(self.budgets):
            for size, cfg in zip(self.sizes, configs, strict=True):
                tokens = budget_tokens(cfg, budget)
                if tokens < 1:
                    shown = ", ".join(f"{k}={v}" for k, v in size.items())
                    raise FieldError(
                        f"budgets[{j}]",
                        f"{budget:.3g} FLOPs is less than half an "
                        f"optimizer step of the size {shown} ({cfg.tokens_per_step}"
                        " tokens); raise the budget or shrink the model or batch",
                    )
                cells.append((budget, dict(size), tokens))
        object.__setattr__(self, "cells", tuple(cells))

    def _check_budgets(self) -> None:
        as_tuple(self, "budgets")
        if not isinstance(self.budgets, tuple) or not self.budgets:
            raise FieldError(
                "budgets",
                "must be a non-empty list of training FLOPs such as "
                f"[1e12, 3e12, 1e13], got {self.budgets!r}",
            )
        for i, b in enumerate(self.budgets):
            if (
                not isinstance(b, (int, float))
                or isinstance(b, bool)
                or not math.isfinite(b)
                or b <= 0
            ):
                raise FieldError(
                    f"budgets[{i}]", f"must be a finite number of FLOPs > 0, got {b!r}"
                )
        object.__setattr__(self, "budgets", tuple(float(b) for b in self.budgets))
        if len(set(self.budgets)) != len(self.budgets):
            raise FieldError("budgets", f"lists a budget twice: {list(self.budgets)}")

    def _check_sizes(self) -> None:
        as_tuple(self, "sizes")
        if not isinstance(self.sizes, tuple) or not self.sizes:
            raise FieldError(
                "sizes",
                "must be a non-empty list of model shapes such as "
                f"[{{d_model = 64, n_layers = 2}}], got {self.sizes!r}",
            )
        for i, size in enumerate(self.sizes):
            if not isinstance(size, Mapping) or not size:
                raise FieldError(
                    f"sizes[{i}]", f"must be a table of {', '.join(SIZE_FIELDS)}, got {size!r}"
                )
            for k in size:
                if k not in SIZE_FIELDS:
                    raise FieldError(
                        f"sizes[{i}].{k}",
                        f"a size sets only {', '.join(SIZE_FIELDS)}; put {k} in [fixed]",
                    )
            if set(size) != set(self.sizes[0]):
                raise FieldError(
                    f"sizes[{i}]",
                    f"sets {', '.join(sorted(size))} but sizes[0] "
                    f"sets {', '.join(sorted(self.sizes[0]))}; give every size the "
                    "same keys",
                )
            if any(dict(size) == dict(other) for other in self.sizes[:i]):
                raise FieldError(f"sizes[{i}]", f"{dict(size)} is listed twice; list it once")
        object.__setattr__(self, "sizes", tuple(dict(s) for s in self.sizes))

    def config(self, size: Mapping[str, Any], index: int) -> TrainConfig:
        """The config of one size (any budget: ``max_tokens`` does not change FLOPs per token)."""
        values = {**(self.defaults or train_defaults()), **size}
        values.pop("corpus", None)
        try:
            return TrainConfig.from_dict({"corpus": "<corpus>", **values})
        except SweepsError as exc:
            raise FieldError(f"sizes[{index}]", f"not a valid config: {exc}") from None

    @property
    def size_fields(self) -> list[str]:
        return [k for k in SIZE_FIELDS if k in self.sizes[0]]

    @property
    def param_names(self) -> list[str]:
        names = [FLOPS_BUDGET, *self.size_fields, "max_tokens"]
        return [*names, "seed"] if self.seeds is not None else names

    def choices(self, name: str) -> tuple[Any, ...]:
        """Every value ``name`` takes in the expansion, in order of first appearance."""
        if name not in self.param_names:
            raise KeyError(name)
        return unique(point[name] for point in self.expand())

    def expand(self) -> list[dict[str, Any]]:
        """The trial list: each budget's sizes, budget by budget; seed-major, so the first pass
        over the seeds is a whole grid."""
        points = [
            {FLOPS_BUDGET: budget, **{k: size[k] for k in self.size_fields}, "max_tokens": tokens}
            for budget, size, tokens in self.cells
        ]
        if self.seeds is None:
            return points
        return [{**point, "seed": seed} for seed in self.seeds for point in points]


# --- [transfer] ---------------------------------------------------------------------------------

#: The ``TrainConfig`` fields a ``[transfer]`` trial's parameters set, in order (then ``seed``).
TRANSFER_FIELDS = ("parametrization", "d_model", "n_heads", "d_ff", "base_width", "lr")
#: What ``[transfer]`` sets that ``[fixed]`` must leave to it (d_model, n_heads and d_ff stay:
#: ``[fixed]``'s are the reference shape whose d_head and d_ff / d_model every width keeps).
_TRANSFER_OWNS = {
    "lr": "transfer.lrs",
    "parametrization": "transfer.parametrizations",
    "base_width": "transfer.base_width",
}


def check_transfer_fixed(transfer: Any, fixed: Mapping[str, Any]) -> None:
    """What a ``[transfer]`` grid sets (learning rate, parametrization, base width, seeds) is
    not also ``[fixed]``; ``transfer`` is the table (a ``Transfer`` or its TOML data)."""
    for k, where in _TRANSFER_OWNS.items():
        if k in fixed:
            raise FieldError(f"fixed.{k}", f"{k} is set by {where}; remove it from [fixed]")
    seeds = transfer.get("seeds") if isinstance(transfer, Mapping) else transfer.seeds
    if seeds is not None and "seed" in fixed:
        raise FieldError("fixed.seed", "conflicts with transfer.seeds; remove one")


@dataclass(frozen=True)
class Transfer:
    """``[transfer]``: does the best learning rate stay put as the model widens? Every
    parametrization x width x learning rate (x seed) is one enqueued trial.

    A width is ``d_model``; heads are scaled to keep ``d_head`` (``n_heads = width / d_head``,
    ``d_head`` given here or the reference shape's ``d_model / n_heads``) and ``d_ff`` to keep
    the reference's ``d_ff / d_model``. The reference shape is ``defaults`` (``[fixed]`` over
    ``TrainConfig``'s defaults). ``base_width`` (µP's width at which it equals SP) defaults to
    the narrowest width, so the narrowest model is the same under both parametrizations.
    """

    widths: tuple[int, ...]
    lrs: tuple[float, ...]
    parametrizations: tuple[str, ...] = ("sp", "mup")
    seeds: tuple[int, ...] | None = None
    d_head: int | None = None
    base_width: int | None = None
    defaults: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._check_widths()
        self._check_lrs()
        as_tuple(self, "parametrizations")
        if not isinstance(self.parametrizations, tuple) or not self.parametrizations:
            raise FieldError(
                "parametrizations",
                f'must be a non-empty list such as ["sp", "mup"], got {self.parametrizations!r}',
            )
        for i, p in enumerate(self.parametrizations):
            if p not in PARAMETRIZATIONS:
                raise FieldError(
                    f"parametrizations[{i}]",
                    f"must be one of {', '.join(PARAMETRIZATIONS)}, got {p!r}",
                )
        if len(set(self.parametrizations)) != len(self.parametrizations):
            raise FieldError("parametrizations", f"lists one twice: {list(self.parametrizations)}")
        if self.seeds is not None:
            _check_seed_list(self)
        if self.base_width is not None:
            require_int(self.base_width, "base_width", 1)
        if self.d_head is not None:
            require_int(self.d_head, "d_head", 1)
        for i, width in enumerate(self.widths):
            self._check_width(i, width)

    def _check_widths(self) -> None:
        as_tuple(self, "widths")
        if not isinstance(self.widths, tuple) or len(self.widths) < 2:
            raise FieldError(
                "widths",
                f"must list two or more widths (d_model) such as [32, 64, 128], got "
                f"{self.widths!r}",
            )
        for i, w in enumerate(self.widths):
            require_int(w, f"widths[{i}]", 1)
        if list(self.widths) != sorted(set(self.widths)):
            raise FieldError("widths", f"must increase, each width once, got {list(self.widths)}")

    def _check_lrs(self) -> None:
        as_tuple(self, "lrs")
        if not isinstance(self.lrs, tuple) or len(self.lrs) < 3:
            raise FieldError(
                "lrs",
                "must list three or more learning rates (a fit near the minimum needs the "
                f"minimum and a neighbour on each side), got {self.lrs!r}",
            )
        for i, lr in enumerate(self.lrs):
            if (
                not isinstance(lr, (int, float))
                or isinstance(lr, bool)
                or not math.isfinite(lr)
                or lr <= 0
            ):
                raise FieldError(f"lrs[{i}]", f"must be a finite learning rate > 0, got {lr!r}")
        object.__setattr__(self, "lrs", tuple(float(lr) for lr in self.lrs))
        if list(self.lrs) != sorted(set(self.lrs)):
            raise FieldError("lrs", f"must increase, each rate once, got {list(self.lrs)}")

    @property
    def reference(self) -> dict[str, Any]:
        """The fields before a width: ``[fixed]`` over ``TrainConfig``'s defaults."""
        return {**(self.defaults or train_defaults())}

    @property
    def head_width(self) -> int:
        """``d_head``: the one given, else the reference shape's ``d_model / n_heads``."""
        if self.d_head is not None:
            return self.d_head
        ref = self.reference
        return int(ref["d_model"]) // int(ref["n_heads"])

    @property
    def base(self) -> int:
        """µP's ``base_width``: the one given, else the narrowest width."""
        return self.base_width if self.base_width is not None else self.widths[0]

    def shape(self, width: int) -> dict[str, int]:
        """``d_model``, ``n_heads`` and ``d_ff`` at ``width`` (checked by ``_check_width``)."""
        ref = self.reference
        return {
            "d_model": width,
            "n_heads": width // self.head_width,
            "d_ff": int(ref["d_ff"]) * width // int(ref["d_model"]),
        }

    def _check_width(self, i: int, width: int) -> None:
        d_head, ref = self.head_width, self.reference
        where = "transfer.d_head" if self.d_head is not None else "d_model / n_heads in [fixed]"
        if width % d_head:
            raise FieldError(
                f"widths[{i}]",
                f"{width} is not a multiple of d_head={d_head} ({where}), which every width "
                f"keeps; use multiples of {d_head} or set transfer.d_head to a divisor of "
                "every width",
            )
        d_ff, d_model = int(ref["d_ff"]), int(ref["d_model"])
        if (d_ff * width) % d_model:
            raise FieldError(
                f"widths[{i}]",
                f"{width} x d_ff / d_model ({d_ff} / {d_model} in [fixed]) is not a whole "
                "d_ff; choose a reference d_ff and d_model whose ratio every width keeps whole",
            )
        values = {**ref, **self.shape(width), "base_width": self.base, "lr": self.lrs[0]}
        values.pop("corpus", None)
        for p in self.parametrizations:
            try:
                TrainConfig.from_dict({"corpus": "<corpus>", **values, "parametrization": p})
            except SweepsError as exc:
                raise FieldError(f"widths[{i}]", f"not a valid {p} config: {exc}") from None

    @property
    def param_names(self) -> list[str]:
        return [*TRANSFER_FIELDS, "seed"] if self.seeds is not None else list(TRANSFER_FIELDS)

    def choices(self, name: str) -> tuple[Any, ...]:
        """Every value ``name`` takes in the expansion, in order of first appearance."""
        if name not in self.param_names:
            raise KeyError(name)
        return unique(point[name] for point in self.expand())

    def expand(self) -> list[dict[str, Any]]:
        """The trial list: each parametrization's widths, each width's learning rates;
        seed-major, so the first pass over the seeds is a whole study."""
        points = [
            {"parametrization": p, **self.shape(w), "base_width": self.base, "lr": lr}
            for p in self.parametrizations
            for w in self.widths
            for lr in self.lrs
        ]
        if self.seeds is None:
            return points
        return [{**point, "seed": seed} for seed in self.seeds for point in points]
