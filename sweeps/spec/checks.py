"""Cross-checks that build trial configs: a spec that could only produce invalid ``TrainConfig``
objects fails when it is read, not after an hour of trials.

``[fixed]`` alone, then each bound of each searched field (with some values of the others), each
``[[enqueue]]`` entry and each point of an ablation are turned into real ``TrainConfig`` objects
(tokenizer arguments included). Each check raises a ``FieldError`` whose field is the spec key
(``space.d_ff``, ``enqueue[0].d_ff``); the reader puts the file name in front.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal

from lm.config import TrainConfig, with_default_vocab
from lm.errors import FieldError, SweepsError
from sweeps.spec.designs import Ablation
from sweeps.spec.types import ParamSpec
from sweeps.spec.values import same, shown_values, train_defaults
from sweeps.spec.walk import walk_one

TRAIN_FIELDS: dict[str, dataclasses.Field[Any]] = {
    f.name: f for f in dataclasses.fields(TrainConfig)
}
_TRAIN_HINTS = typing.get_type_hints(TrainConfig)
#: A stand-in corpus path, only for validating configs before the corpus is known to exist.
_PROBE_CORPUS = "<corpus>"
#: How many combinations of other fields' bounds to try before calling a bound impossible.
_PROBE_LIMIT = 512


def normalise(value: Any) -> Any:
    """TOML arrays become tuples where TrainConfig holds tuples (``sample_prompts``)."""
    if isinstance(value, list):
        return tuple(value)
    return value


def build(values: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from partial values (defaults fill the rest); its ``__post_init__`` also
    checks the tokenizer's arguments (``lm.tokenizers.validate_tokenizer_args``)."""
    return TrainConfig.from_dict({"corpus": _PROBE_CORPUS, **values})


def _literal_choices(name: str) -> tuple[Any, ...] | None:
    hint = _TRAIN_HINTS.get(name)
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    if hint is bool:
        return (True, False)
    return None


def check_literals(params: tuple[ParamSpec, ...], fixed: dict[str, Any]) -> None:
    """``tokenizer == 'wrod'`` would silently switch a parameter off: catch it."""
    by_name = {p.name: p for p in params}
    for p in params:
        if p.when is None:
            continue
        for field_name, values in p.when.literals:
            possible: tuple[Any, ...] | None
            if field_name in by_name and by_name[field_name].type == "categorical":
                possible = by_name[field_name].choices or ()
            elif field_name in by_name:
                continue  # a numeric range: equality with a literal may hold
            elif field_name in fixed:
                possible = (fixed[field_name],)
            else:
                possible = _literal_choices(field_name)
                if possible is None:
                    continue
            for v in values:
                if not any(same(v, c) for c in possible):
                    raise FieldError(
                        f"space.{p.name}.when",
                        f"condition {p.when.text!r}: "
                        f"{field_name} is never {v!r} (its values: "
                        f"{shown_values(possible, repr)})",
                    )


def check_fixed(fixed: dict[str, Any], params: tuple[ParamSpec, ...]) -> None:
    """``[fixed]`` must make a valid TrainConfig with some values of the searched fields
    (``n_heads = 3`` is fine when ``d_model`` is searched over multiples of 3)."""
    first_error: SweepsError | None = None
    combos = itertools.product(*(p.probe_values() for p in params))
    for combo in itertools.islice(combos, _PROBE_LIMIT):
        try:
            build({**fixed, **{p.name: v for p, v in zip(params, combo, strict=True)}})
            return
        except SweepsError as exc:
            first_error = first_error or exc
    # TrainConfig's messages start with the field they are about: name it when it is fixed.
    field_name = re.match(r"\w*", str(first_error)).group(0)  # type: ignore[union-attr]
    key = f"fixed.{field_name}" if field_name in fixed else "fixed"
    raise FieldError(key, f"no valid config: {first_error}")


def check_bounds(params: tuple[ParamSpec, ...], fixed: dict[str, Any]) -> None:
    """Every bound of every parameter must make a valid TrainConfig with *some* values of
    the other parameters (``d_model`` 96 may need ``n_heads`` 3 from the same space)."""
    for p in params:
        for value in p.probe_values():
            others = [q for q in params if q is not p]
            first_error: SweepsError | None = None
            combos = itertools.product(*(q.probe_values() for q in others))
            for combo in itertools.islice(combos, _PROBE_LIMIT):
                values = {
                    **fixed,
                    p.name: value,
                    **{q.name: v for q, v in zip(others, combo, strict=True)},
                }
                try:
                    build(values)
                    break
                except SweepsError as exc:
                    first_error = first_error or exc
            else:
                assert first_error is not None
                bound = "choice" if p.type == "categorical" else "low" if value == p.low else "high"
                raise FieldError(
                    f"space.{p.name}",
                    f"{bound} {p.name}={value!r} cannot "
                    f"make a valid config with [fixed]: {first_error}",
                )


def check_enqueue(
    entries: list[Mapping[str, Any]], space: tuple[ParamSpec, ...], fixed: dict[str, Any]
) -> tuple[dict[str, Any], ...]:
    """Each ``[[enqueue]]`` entry sets searched parameters to values their space can produce,
    only where their conditions hold, and makes a valid config."""
    by_name = {p.name: p for p in space}
    out = []
    for i, item in enumerate(entries):
        key = f"enqueue[{i}]"
        if not isinstance(item, Mapping) or not item:
            raise FieldError(key, f"must be a non-empty table of parameter values, got {item!r}")
        entry = {}
        for name, v in item.items():
            if name not in by_name:
                what = (
                    "is in [fixed]"
                    if name in fixed
                    else "is not a searched field ([space.<field>])"
                )
                raise FieldError(
                    f"{key}.{name}",
                    f"{name!r} {what}; an enqueued config sets searched parameters only",
                )
            v = normalise(v)
            if not by_name[name].contains(v):
                raise FieldError(
                    f"{key}.{name}",
                    f"{v!r} is outside space.{name}; use a value the space can produce",
                )
            entry[name] = v
        base = with_default_vocab({**train_defaults(), **fixed})
        given = {**base, **entry}
        # mypy cannot infer a lambda with a default; the default binds this entry's values
        used = walk_one(space, base, lambda p, given=given: given.get(p.name))  # type: ignore[misc]
        for p in space:
            if p.name in entry and p.name not in used:
                assert p.when is not None  # only a condition leaves a parameter out
                raise FieldError(
                    f"{key}.{p.name}",
                    f"set, but its condition {p.when.text!r} does not hold; remove it",
                )
        try:
            build({**fixed, **entry})
        except SweepsError as exc:
            raise FieldError(key, str(exc)) from None
        out.append(entry)
    return tuple(out)


def check_ablation(ablation: Ablation, fixed: dict[str, Any]) -> None:
    """Baseline and varied fields are not also ``[fixed]``, and every point of the expansion
    makes a valid config."""
    for k in ablation.baseline:
        if k in fixed:
            raise FieldError(
                f"ablation.baseline.{k}", f"{k} is also in [fixed]; keep it in one place"
            )
    for k, _ in ablation.vary:
        if k in fixed:
            raise FieldError(
                f"ablation.vary.{k}",
                f"{k} is also in [fixed]; move its baseline value to ablation.baseline",
            )
    if ablation.seeds is not None and "seed" in fixed:
        raise FieldError("fixed.seed", "conflicts with ablation.seeds; remove one")
    baseline = {**ablation.defaults, **ablation.baseline}
    for i, point in enumerate(ablation.expand()):
        changed = Ablation.label(point, baseline)
        try:
            build({**fixed, **ablation.baseline, **point})
        except SweepsError as exc:
            where = (
                "ablation.baseline"
                if changed == "baseline"
                else f"ablation.vary.{changed.split('=', 1)[0]}"
            )
            raise FieldError(where, f"{changed} (trial {i}): {exc}") from None
