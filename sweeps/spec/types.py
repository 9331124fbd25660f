"""The spec's types: frozen dataclasses that check their own rules in ``__post_init__``.

Like Optuna's ``IntDistribution``, a type refuses a value however it is built (by the TOML reader,
by a test, by a worker reading a spec back from the database), with a ``FieldError`` naming the
field and the value: ``max_retries must be >= 0, got max_retries=-1``. The reader puts the key of
the enclosing table in front (``limits.max_retries``). Rules between sections (a grid sampler
needs a finite space, an ablation excludes ``[space]``) are ``StudySpec``'s, written in
``sweeps.spec.rules``; rules that need trial configs built are the reader's
(``sweeps.spec.checks``). Only the reader builds a ``StudySpec`` from TOML data
(``sweeps.spec.reader.read_spec``). The designs that enqueue a trial list, ``[ablation]``,
``[scaling]`` and ``[transfer]``, are ``sweeps.spec.designs``.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from lm.checks import check_bool, check_choice, check_int, check_number, check_str
from lm.config import check_cooldown_fraction, with_default_vocab
from lm.errors import FieldError, SweepsError
from sweeps.conditions import Condition, parse_condition
from sweeps.spec.designs import Ablation, Scaling, Transfer
from sweeps.spec.halving import RUNG_FIELDS
from sweeps.spec.limits import Limits
from sweeps.spec.rules import check_spec
from sweeps.spec.values import (
    CORPUS_FORMATS,
    DIRECTIONS,
    FIDELITY_PRUNERS,
    FLOPS_BUDGET,
    MAX_NAME_LENGTH,
    MAX_PROBED_CHOICES,
    MAX_SAMPLER_SEED,
    METRICS,
    PARAM_TYPES,
    PRUNERS,
    QMC_TYPES,
    RUNG_READS,
    SAMPLERS,
    STUDY_NAME,
    as_tuple,
    check_scalars,
    parse_bytes,
    repeated,
    same,
    train_defaults,
    unique,
)


def _optional_int(obj: object, name: str, minimum: int) -> None:
    if getattr(obj, name) is not None:
        check_int(obj, name, minimum)


# --- [study] ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Objective:
    """One optimisation target: a metric name from ``METRICS`` and its direction."""

    metric: str
    direction: Literal["minimize", "maximize"]

    def __post_init__(self) -> None:
        check_choice(self, "metric", METRICS)
        check_choice(self, "direction", DIRECTIONS)


@dataclass(frozen=True)
class SamplerSpec:
    """Which Optuna sampler, with the few options worth exposing."""

    name: str
    n_startup_trials: int | None = None  # tpe, gp: random trials before the model kicks in
    multivariate: bool = True  # tpe: model parameters jointly (with group=True for conditions)
    population_size: int | None = None  # nsga2
    qmc_type: str = "sobol"  # qmc: sobol or halton
    scramble: bool = False  # qmc

    def __post_init__(self) -> None:
        check_choice(self, "name", SAMPLERS)
        if self.name in ("qmc", "gp") and importlib.util.find_spec("scipy") is None:
            raise FieldError(
                "name",
                f"sampler {self.name!r} needs scipy, which is not installed; "
                '`pip install scipy`, or use sampler = "random" or "tpe"',
            )
        _optional_int(self, "n_startup_trials", 0)
        check_bool(self, "multivariate")
        _optional_int(self, "population_size", 2)
        check_choice(self, "qmc_type", QMC_TYPES)
        check_bool(self, "scramble")


@dataclass(frozen=True)
class PrunerSpec:
    """When a trial is stopped before its budget (besides the project's own rules).

    - ``median``: Optuna's median pruner on the evaluations. Its steps are evaluation indices,
      the same for every trial: trials with different ``batch_size * grad_accum * seq_len``
      reach a token count at different exact numbers, and it only compares values reported at
      the same step. One objective only.
    - ``successive_halving`` and ``hyperband``: multi-fidelity with tokens trained as the
      resource (``sweeps.fidelity``), any number of objectives. Rungs at ``min_tokens x
      reduction_factor**k`` tokens below a trial's ``max_tokens``; at each rung a trial goes on
      only if it is among the best ``1/reduction_factor`` of the trials that reached that rung
      (asynchronously: no trial waits for others), once ``min_trials`` have. ``hyperband``
      splits the trials into ``n_brackets`` brackets by trial number, bracket ``s`` stopping
      trials from rung ``s`` on (the last bracket stops none): hedging against a first rung too
      early to rank configurations.
    """

    name: str
    n_startup_trials: int = 5  # median: trials that finish before anything is pruned
    n_warmup_evals: int = 1  # median: evaluations of a trial before it can be pruned
    # Halving: the first rung, in the unit of the study's budget (tokens, bytes of text or
    # FLOPs: ``lm.config.BUDGETS``, so rungs fall at the same text or compute for every arm).
    # None: the largest budget / reduction_factor**2 (two rungs), rounded to a whole number of
    # evaluations (``sweeps.spec.halving.rungs``).
    min_tokens: int | None = None
    min_bytes: int | None = None
    min_flops: float | None = None
    reduction_factor: int = 3  # halving: the best 1/reduction_factor go on at each rung
    # Halving: trials that must have reached a rung before one is stopped there (ranking two
    # trials says little). None: reduction_factor.
    min_trials: int | None = None
    # Hyperband: None: one per rung, plus one that stops nothing.
    n_brackets: int | None = None
    # Halving: "cooldown" reads each rung after a short decay branched from it (``lm.cooldown``;
    # needs lr_schedule = "wsd"): where the trial would end, not how fast it still moves.
    read: str = "loss"
    cooldown_fraction: float | None = None  # the read's decay; None: TrainConfig's default

    def __post_init__(self) -> None:
        check_choice(self, "name", PRUNERS)
        check_int(self, "n_startup_trials", 0)
        check_int(self, "n_warmup_evals", 0)
        check_int(self, "reduction_factor", 2)
        check_choice(self, "read", RUNG_READS)
        given = [k for k in RUNG_FIELDS.values() if getattr(self, k) is not None]
        if len(given) > 1:
            raise FieldError(
                given[1],
                f"give the first rung once ({' or '.join(given)}), in "
                "the unit of the study's budget",
            )
        if self.min_flops is not None:
            if self.name not in FIDELITY_PRUNERS:
                raise FieldError(
                    "min_flops",
                    f"applies to {' and '.join(FIDELITY_PRUNERS)}, "
                    f"not to pruner {self.name!r}; remove it",
                )
            check_number(self, "min_flops", positive=True)
        for key, low in (
            ("min_tokens", 1),
            ("min_bytes", 1),
            ("min_trials", 1),
            ("n_brackets", 1),
            ("read", None),
            ("cooldown_fraction", None),
        ):
            if getattr(self, key) in (None, "loss"):
                continue
            if self.name not in FIDELITY_PRUNERS:
                raise FieldError(
                    key,
                    f"applies to {' and '.join(FIDELITY_PRUNERS)}, not to "
                    f"pruner {self.name!r}; remove it",
                )
            if low is not None:
                check_int(self, key, low)
        if self.cooldown_fraction is not None:
            if self.read != "cooldown":
                raise FieldError("cooldown_fraction", 'applies to read = "cooldown" only')
            check_number(self, "cooldown_fraction", positive=True)
            check_cooldown_fraction(self.cooldown_fraction)  # lm.config: why a read's is bounded
        if self.n_brackets is not None and self.name != "hyperband":
            raise FieldError(
                "n_brackets", 'applies to hyperband only; remove it or use name = "hyperband"'
            )

    def first_rung(self, unit: str) -> float | None:
        """The first rung given in ``unit`` (None: not given in it)."""
        return cast("float | None", getattr(self, RUNG_FIELDS[unit]))  # a rung field

    @property
    def by_tokens(self) -> bool:
        """Multi-fidelity on tokens trained (``sweeps.fidelity``), not an Optuna pruner."""
        return self.name in FIDELITY_PRUNERS


@dataclass(frozen=True)
class StudySection:
    """``[study]``: identity, objectives, sampler, pruner and the trial budget."""

    name: str
    storage: str | None
    objectives: tuple[Objective, ...]
    sampler: SamplerSpec
    seed: int | None
    pruner: PrunerSpec
    n_trials: int
    timeout: float | None

    def __post_init__(self) -> None:
        check_str(self, "name")
        if len(self.name) > MAX_NAME_LENGTH:
            raise FieldError(
                "name",
                f"is {len(self.name):,} characters long; it names a run "
                f"directory and a database key: use at most {MAX_NAME_LENGTH}",
            )
        if not STUDY_NAME.fullmatch(self.name):
            raise FieldError(
                "name",
                f"{self.name!r} may use only letters, digits, '_', '.' "
                "and '-' (it names run directories); rename it",
            )
        if self.storage is not None:
            check_str(self, "storage")
            if "://" not in self.storage:
                raise FieldError(
                    "storage",
                    f"{self.storage!r} is not a database URL; use e.g. "
                    "sqlite:///sweeps.db or postgresql://user@host/dbname",
                )
        as_tuple(self, "objectives")
        if not self.objectives:
            raise FieldError(
                "objectives",
                f'must be a non-empty list such as ["val_bpb"], got objectives={self.objectives!r}',
            )
        for i, objective in enumerate(self.objectives):
            if any(o.metric == objective.metric for o in self.objectives[:i]):
                raise FieldError(
                    f"objectives[{i}]", f"metric {objective.metric!r} is listed twice; list it once"
                )
        if self.multi_objective and self.pruner.name == "median":
            raise FieldError(
                "pruner",
                "pruner 'median' needs a single objective; use pruner = "
                '"successive_halving" (any number of objectives) or "none" '
                "(OOM, collapse and divergence rules still apply)",
            )
        if self.seed is not None:
            check_int(self, "seed", 0, MAX_SAMPLER_SEED)
        check_int(self, "n_trials", 1)
        if self.timeout is not None:
            check_number(self, "timeout", positive=True)

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def metrics(self) -> list[str]:
        return [o.metric for o in self.objectives]

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1


# --- [corpus] -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusSpec:
    """``[corpus]``: a prepared corpus directory, or what to prepare into ``dir``.

    ``dir`` is always the directory trials train on (``TrainConfig.corpus``); when ``source`` or
    ``synthetic_size`` is set, the runner prepares it there first (``needs_prepare``) unless it
    already holds a corpus.
    """

    dir: Path
    source: tuple[str, ...] = ()
    format: Literal["posts", "text"] | None = None
    synthetic_size: int | None = None
    synthetic_seed: int = 0
    val_fraction: float = 0.05

    def __post_init__(self) -> None:
        object.__setattr__(self, "dir", Path(self.dir))
        source: object = self.source  # as given: one path or a list of them
        if isinstance(source, str):
            object.__setattr__(self, "source", (source,))
        as_tuple(self, "source")
        if self.source and self.synthetic_size is not None:
            raise FieldError("source", "give source or synthetic_size, not both")
        if self.format is not None:
            if not self.source:
                raise FieldError("format", "only applies with source")
            check_choice(self, "format", CORPUS_FORMATS)
        elif self.source:
            object.__setattr__(self, "format", "posts")
        if self.format == "posts" and len(self.source) != 1:
            raise FieldError(
                "source",
                f"format posts takes one Posts.xml, got "
                f'{len(self.source)} paths; use format = "text" for text files',
            )
        if self.synthetic_size is not None:
            object.__setattr__(
                self, "synthetic_size", parse_bytes(self.synthetic_size, key="synthetic_size")
            )
        check_int(self, "synthetic_seed", 0)
        check_number(self, "val_fraction", positive=True, below=1.0)

    @property
    def needs_prepare(self) -> bool:
        return bool(self.source) or self.synthetic_size is not None


# --- [space] ------------------------------------------------------------------------------------


class _FloatSteps(Sequence[float]):
    """``low + i * step`` for ``i`` in ``range(n)``, computed when asked (see ``values``)."""

    def __init__(self, low: float, step: float, n: int) -> None:
        self.low, self.step, self.n = low, step, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        # Rounded so 0.1 + 2 * 0.1 prints as 0.3, matching what a user wrote in choices.
        return round(self.low + (i % self.n) * self.step, 12)


@dataclass(frozen=True)
class ParamSpec:
    """One searched field: ``[space.<name>]``. ``when`` may be given as text; it is parsed."""

    name: str
    type: Literal["int", "float", "categorical"]
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] | None = None
    when: Condition | None = None

    def __post_init__(self) -> None:
        check_choice(self, "type", PARAM_TYPES)
        when: object = self.when  # as given: a condition's text, or a Condition
        if when is not None and not isinstance(when, Condition):
            try:
                object.__setattr__(self, "when", parse_condition(when))
            except SweepsError as exc:
                raise FieldError("when", str(exc)) from None
        if self.when is not None and self.name in self.when.fields:
            raise FieldError(
                "when",
                f"the condition of {self.name} refers to {self.name} "
                "itself; condition it on other fields",
            )
        if self.type == "categorical":
            self._check_choices()
        else:
            self._check_range()

    def _check_choices(self) -> None:
        for k in ("low", "high", "log", "step"):
            if getattr(self, k) is not (False if k == "log" else None):
                raise FieldError(
                    k,
                    "does not apply to a categorical parameter; remove it or "
                    'use type = "int"/"float"',
                )
        if not isinstance(self.choices, (list, tuple)) or not self.choices:
            raise FieldError("choices", f"must be a non-empty list, got choices={self.choices!r}")
        as_tuple(self, "choices")
        check_scalars(self.choices, "choices")
        twice = repeated(self.choices)
        if twice is not None:
            i, j = twice
            raise FieldError(
                "choices",
                f"lists {self.choices[j]!r} twice (choices[{i}] and "
                f"choices[{j}]); list each value once",
            )

    def _check_range(self) -> None:
        if self.choices is not None:
            raise FieldError(
                "choices",
                f'does not apply to type {self.type!r}; use type = "categorical" or low/high',
            )
        for k in ("low", "high"):
            if getattr(self, k) is None:
                raise FieldError(k, f"missing; an {self.type} range needs low and high")
        if self.type == "int":
            check_int(self, "low")
            check_int(self, "high")
            _optional_int(self, "step", 1)
        else:
            check_number(self, "low")
            check_number(self, "high")
            if self.step is not None:
                check_number(self, "step", positive=True)
        check_bool(self, "log")
        low, high, step = self.low, self.high, self.step
        assert low is not None and high is not None  # checked above
        if low > high:
            raise FieldError("low", f"must be <= high, got low={low}, high={high}; swap them")
        if self.log and low <= 0:
            raise FieldError(
                "low", f"a log range needs low > 0, got low={low}; raise low or set log = false"
            )
        if self.log and step is not None and step != 1:
            raise FieldError(
                "step", f"cannot be combined with log = true (got step={step}); drop step or log"
            )
        if step is not None:
            span = (high - low) / step
            if not math.isclose(span, round(span), rel_tol=0, abs_tol=1e-9):
                raise FieldError(
                    "step",
                    f"step={step} does not divide high - low = "
                    f"{high - low}; adjust high to low + k * step",
                )

    @property
    def finite(self) -> bool:
        """Whether the parameter has a finite set of values (a grid can enumerate it)."""
        return self.type != "float" or self.step is not None

    def values(self) -> Sequence[Any]:
        """Every value, for a grid; a float range without ``step`` has none (SweepsError).

        A range is a lazy sequence, never a list: ``seed`` 0 to 4294967295 has 2**32 values
        (a MemoryError as a list), and a grid or a draw needs only its length and a few items."""
        if self.type == "categorical":
            return list(self.choices or ())
        assert self.low is not None and self.high is not None  # a range has both
        if self.type == "int":
            return range(int(self.low), int(self.high) + 1, int(self.step or 1))
        if self.step is None:
            raise SweepsError(
                f"space.{self.name}: a float range has no grid; give step or use choices"
            )
        return _FloatSteps(
            float(self.low), float(self.step), round((self.high - self.low) / self.step) + 1
        )

    def probe_values(self) -> list[Any]:
        """A few values to validate: the bounds of the range, or the choices. A list of more
        than ``MAX_PROBED_CHOICES`` is probed as a range is, at its smallest and largest number
        (and its first non-numbers): each probe builds configs (37 us each) and bounds memory
        (170 us), so probing 100,000 choices took minutes. The rules a number breaks are bounds
        (``lr > 0``, ``vocab_size >= 260``), which its extremes find; a middle value that breaks
        another (``d_model % n_heads``) ends its trial as an invalid configuration, as a
        range's does."""
        if self.type != "categorical":
            return [self.low] if self.low == self.high else [self.low, self.high]
        return list(self._probed_choices)

    @functools.cached_property
    def _probed_choices(self) -> tuple[Any, ...]:
        """``probe_values`` of a categorical, worked out once (a pass over every choice)."""
        choices = self.choices or ()
        if len(choices) <= MAX_PROBED_CHOICES:
            return tuple(choices)
        numbers: list[int | float] = []
        others: list[Any] = []
        for v in choices:
            (numbers if isinstance(v, (int, float)) and v.__class__ is not bool else others).append(
                v
            )
        ends = unique((min(numbers), max(numbers))) if numbers else ()
        return (*ends, *others[:MAX_PROBED_CHOICES])

    def contains(self, value: Any) -> bool:
        if self.type == "categorical":
            return any(same(value, c) for c in self.choices or ())
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.type == "int" and not isinstance(value, int):
            return False
        assert self.low is not None and self.high is not None  # a range has both
        if not self.low <= value <= self.high:
            return False
        if self.step is not None:
            k = (value - self.low) / self.step
            return math.isclose(k, round(k), abs_tol=1e-9)
        return True


# --- the whole spec -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StudySpec:
    """A validated study spec. ``space`` is in suggestion order (a condition's inputs first).

    Built directly, it checks the rules between its sections (``sweeps.spec.rules``); the TOML
    reader (``read_spec``) also builds trial configs from it (``sweeps.spec.checks``) and
    resolves corpus paths.
    """

    study: StudySection
    corpus: CorpusSpec
    fixed: dict[str, Any]
    space: tuple[ParamSpec, ...]
    limits: Limits
    enqueue: tuple[dict[str, Any], ...] = ()
    ablation: Ablation | None = None
    source: Path | None = None
    scaling: Scaling | None = None
    transfer: Transfer | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        as_tuple(self, "space")
        as_tuple(self, "enqueue")
        check_spec(self)

    # --- conveniences for the runner, the CLI and the space module ---

    @property
    def name(self) -> str:
        return self.study.name

    @property
    def design(self) -> Ablation | Scaling | Transfer | None:
        """The enqueued trial list, when the spec has one: ``[ablation]``, ``[scaling]`` or
        ``[transfer]``. Each gives ``param_names``, ``choices(name)`` and ``expand()``."""
        if self.ablation is not None:
            return self.ablation
        return self.scaling if self.scaling is not None else self.transfer

    @property
    def param_names(self) -> list[str]:
        if self.design is not None:
            return self.design.param_names
        return [p.name for p in self.space]

    def param(self, name: str) -> ParamSpec:
        for p in self.space:
            if p.name == name:
                return p
        raise SweepsError(
            f"{name!r} is not a searched parameter of study {self.name!r}; "
            f"searched: {', '.join(self.param_names) or 'none'}"
        )

    def base_values(self) -> dict[str, Any]:
        """Every ``TrainConfig`` field before a trial's parameters: defaults, then ``[fixed]``,
        then the ablation baseline, and the corpus directory."""
        values = train_defaults()
        values.update(self.fixed)
        if self.ablation is not None:
            values.update(self.ablation.baseline)
        values["corpus"] = str(self.corpus.dir)
        if self.limits.max_wall_s is not None:
            values["max_wall_s"] = self.limits.max_wall_s
        return with_default_vocab(values)  # a vocab_size left out follows the tokenizer

    def trial_values(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's ``TrainConfig`` values: ``base_values`` then its parameters, less
        ``FLOPS_BUDGET`` (a grid cell's budget is the trial's, not the config's). A
        ``vocab_size`` nothing sets follows the trial's own tokenizer."""
        values = {**self.base_values(), **{k: v for k, v in params.items() if k != FLOPS_BUDGET}}
        if not self.sets("vocab_size", params):
            values["vocab_size"] = None
        return with_default_vocab(values)

    def sets(self, name: str, params: Mapping[str, Any]) -> bool:
        """Whether ``[fixed]``, the ablation baseline or a trial's ``params`` give ``name`` (not
        a default)."""
        baseline = self.ablation.baseline if self.ablation is not None else {}
        return any(name in where for where in (self.fixed, baseline, params))

    def initial_trials(self) -> list[dict[str, Any]]:
        """Parameter sets to enqueue before sampling: ``[[enqueue]]``, the ablation or the
        IsoFLOP grid."""
        if self.design is not None:
            return self.design.expand()
        return [dict(e) for e in self.enqueue]

    def to_dict(self) -> dict[str, Any]:
        """The spec as TOML-shaped data (corpus paths absolute): ``read_spec`` reads it back, so
        a worker on another machine can rebuild the spec from the study's stored copy. Without
        ``study.storage``: a URL may hold a password, and a joining worker has its own URL."""
        out = copy.deepcopy(self.raw)
        out.get("study", {}).pop("storage", None)
        corpus = dict(out.get("corpus", {}))
        if "dir" in corpus:
            corpus["dir"] = str(self.corpus.dir)
        if "out" in corpus:
            corpus["out"] = str(self.corpus.dir)
        if "source" in corpus and self.corpus.source:
            corpus["source"] = list(self.corpus.source)
        out["corpus"] = corpus
        return out
