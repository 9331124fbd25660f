"""The spec's vocabulary (metrics, samplers, pruners, IsoFLOP grid parameters, study names) and
the value helpers the types (``sweeps.spec.types``) share with the rules between sections
(``sweeps.spec.rules``): a module below both, since the types check those rules on themselves.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from lm.config import TrainConfig
from lm.errors import FieldError
from lm.units import size_in_bytes

#: Metrics a study can optimise, with the direction that is "better" unless the spec says so.
METRICS: dict[str, str] = {
    "val_bpb": "minimize",
    "val_loss": "minimize",
    "peak_mem": "minimize",
    "wall_s": "minimize",
    "tokens_per_s": "maximize",
    "params": "minimize",
    "flops": "minimize",
}
DIRECTIONS = ("minimize", "maximize")
SAMPLERS = ("tpe", "gp", "nsga2", "random", "qmc", "grid", "bruteforce")
QMC_TYPES = ("sobol", "halton")
PRUNERS = ("median", "successive_halving", "hyperband", "none")
#: ``[study] objectives`` when the spec gives none.
DEFAULT_OBJECTIVES = ("val_bpb",)
#: Pruners whose resource is tokens trained (``sweeps.fidelity``): the project's own, for any
#: number of objectives.
FIDELITY_PRUNERS = ("successive_halving", "hyperband")
#: How a halving rung is read (``PrunerSpec.read``): the loss as it is there ("loss", interpolated
#: between the evaluations either side), or after a cooldown branched from there ("cooldown").
RUNG_READS = ("loss", "cooldown")
PARAM_TYPES = ("int", "float", "categorical")
OOM_POLICIES = ("prune", "fit")
CORPUS_FORMATS = ("posts", "text")
#: Samplers that enumerate a finite grid: every searched field needs a finite set of values.
GRID_SAMPLERS = ("grid", "bruteforce")
#: A categorical list longer than this is probed at its extremes, not choice by choice
#: (``ParamSpec.probe_values``): every list a person types is probed whole.
MAX_PROBED_CHOICES = 64
#: The most points a grid may have (a bigger one is a typo in a step, or a job for a sampler).
MAX_GRID_POINTS = 100_000
#: The trial parameter that carries an IsoFLOP cell's compute budget. Not a ``TrainConfig``
#: field: ``StudySpec.trial_values`` leaves it out of the config, and the runner records it as
#: the trial's ``flops_budget`` attribute, which ``sweeps.scaling`` groups the fit by.
FLOPS_BUDGET = "flops_budget"
#: The ``TrainConfig`` fields one model size of ``[scaling] sizes`` may set.
SIZE_FIELDS = ("d_model", "n_layers", "n_heads", "d_ff")

STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: A study name is a run directory's name (at most 255 bytes) and a database key (Optuna's column
#: holds 512): 200 characters leave room for both.
MAX_NAME_LENGTH = 200
#: Optuna's samplers seed numpy's RandomState, which takes 0 .. 2**32 - 1; a resumed or joining
#: process adds an offset to the spec's seed modulo 2**32 (``sweeps.workers.load_for_workers``).
MAX_SAMPLER_SEED = 2**32 - 1


def parse_bytes(value: Any, *, key: str = "memory_budget") -> int:
    """``8GiB``, ``512MB``, ``1.5G`` or an integer -> bytes (``lm.units``), or a ``FieldError``
    naming ``key`` (a spec field, or a CLI flag such as ``--budget``)."""
    number = size_in_bytes(value)
    if number is None:
        raise FieldError(
            key, f"must be a size such as 8GiB, 512MB or a number of bytes, got {key}={value!r}"
        )
    return number


def train_defaults() -> dict[str, Any]:
    """``TrainConfig``'s defaults (the required ``corpus`` has none)."""
    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def same(a: Any, b: Any, *, rel_tol: float = 0.0) -> bool:
    """Equality that keeps ``True`` apart from ``1`` (TOML booleans are not numbers); numbers
    within ``rel_tol`` of each other when it is given (a value typed by a person against one a
    stepped distribution computed: 0.3 and 0.1 * 3), else exactly (``same_key``'s equality)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if rel_tol and isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0)
    return bool(a == b)


def same_key(value: Any) -> Any:
    """A hashable key for which ``same`` is equality: ``1`` and ``1.0`` share one (they are
    equal and hash alike), ``True`` and ``1`` do not (the flag keeps booleans apart). Raises
    ``TypeError`` for an unhashable value."""
    key = (isinstance(value, bool), value)
    hash(key)
    return key


def unique(values: Iterable[Any]) -> tuple[Any, ...]:
    """``values`` without repeats (``same``), first occurrences in order. Linear: a choice list
    can hold 100,000 values, where comparing each with every one kept took minutes; only
    unhashable values (never a TOML scalar) are compared one by one."""
    out: list[Any] = []
    for _, v in _firsts(values):
        out.append(v)
    return tuple(out)


def repeated(values: Iterable[Any]) -> tuple[int, int] | None:
    """The indices (first, second) of the first value listed twice (``same``), or None; linear,
    as ``unique``."""
    for i, (j, _) in enumerate(_firsts(values, repeats=True)):
        if j is not None:
            return j, i
    return None


def _firsts(values: Iterable[Any], *, repeats: bool = False) -> Iterator[tuple[Any, Any]]:
    """Each value's first occurrence as ``(None, value)``; with ``repeats``, each later one as
    ``(index of its first occurrence, value)`` too. Values are keyed by ``same_key``: a set
    lookup each, not a comparison with every value kept."""
    first: dict[Any, int] = {}
    unhashable: list[tuple[int, Any]] = []
    for i, v in enumerate(values):
        try:
            key = same_key(v)
            earlier = first.get(key)
        except TypeError:
            earlier = next((j for j, o in unhashable if same(v, o)), None)
            if earlier is None:
                unhashable.append((i, v))
        else:
            if v != v:  # NaN is the same as nothing, not even itself (as ``same`` says)
                earlier = None
            elif earlier is None:
                first[key] = i
        if earlier is None:
            yield None, v
        elif repeats:
            yield earlier, v


#: How many values a message or the dry run shows of a long list (the first few, then the last).
SHOWN_VALUES = 5


def shown_values(values: Sequence[Any], show: Callable[[Any], str] = str) -> str:
    """A list of values for a person: all of a short one; of a long one the first
    ``SHOWN_VALUES``, "...", the last, and how many (``1e-05, ..., 0.1 (100,000 choices)``)."""
    if len(values) <= SHOWN_VALUES + 2:
        return ", ".join(show(v) for v in values)
    head = ", ".join(show(v) for v in values[:SHOWN_VALUES])
    return f"{head}, ..., {show(values[-1])} ({len(values):,} choices)"


def as_tuple(obj: object, name: str) -> None:
    """TOML arrays arrive as lists; the frozen types hold tuples (hashable, compare equal)."""
    if isinstance(getattr(obj, name), list):
        object.__setattr__(obj, name, tuple(getattr(obj, name)))


def check_scalars(values: tuple[Any, ...], name: str) -> None:
    """Each value becomes an Optuna categorical choice: scalars only."""
    for i, v in enumerate(values):
        if not (v is None or isinstance(v, (str, int, float, bool))):
            raise FieldError(f"{name}[{i}]", f"must be a string, number or boolean, got {v!r}")


def objective_names(spec: Any, n: int) -> list[str]:
    """Metric names of the ``n`` objectives, from the spec dict a study stores
    (``sweeps.record.STUDY_SPEC``), else placeholders."""
    try:
        objectives = spec["study"].get("objectives", DEFAULT_OBJECTIVES)
        names = [o if isinstance(o, str) else o["metric"] for o in objectives]
    except (TypeError, KeyError, AttributeError):
        names = []
    return names if len(names) == n else [f"objective {i}" for i in range(n)]
