"""Study specs: one TOML file -> a validated, frozen ``StudySpec``.

A spec says what to search (``[space]``, ``[ablation]``, ``[[enqueue]]``), what is held constant
(``[fixed]``), on which data (``[corpus]``), how to judge and stop trials (``[study]``,
``[limits]``). Everything a user can get wrong is caught here, before a database row or a run
directory exists, with a one-line ``SweepsError`` that names the file, the key and the value:

    studies/vocab.toml: space.d_ff.low: must be <= high, got low=512, high=64; swap them

Field names are ``lm.config.TrainConfig``'s, so a spec, a CLI flag and a ``config.json`` agree.
Values are checked by building real ``TrainConfig`` objects (fixed values alone, then each bound
of each searched field), so a spec that could only produce invalid configs fails now, not after an
hour of trials. Conditions (``when = "tokenizer == 'word'"``) are parsed with ``ast`` into a tiny
expression language and evaluated by walking the tree: never ``eval``.

Example::

    [study]
    name = "vocab"
    objectives = ["val_bpb", {metric = "peak_mem", direction = "minimize"}]
    sampler = "nsga2"
    seed = 0
    n_trials = 12

    [corpus]
    source = "../../shared/data/stackexchange/history.Posts.xml"   # relative to this file
    out = "../corpora/history"

    [fixed]
    d_model = 64
    max_tokens = 200_000

    [space.tokenizer]
    choices = ["word", "bpe"]

    [space.vocab_size]
    type = "int"
    low = 512
    high = 8192
    log = true

    [limits]
    memory_budget = "4GiB"
    collapse = {min_unigram_gap = 0.05, warmup_evals = 2}
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import math
import os
import re
import tomllib
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lm.config import TrainConfig
from lm.errors import SweepsError, closest
from lm.units import size_in_bytes
from sweeps.conditions import Condition, parse_condition

#: Metrics a study can optimise, with the direction that is "better" unless the spec says so.
METRICS: dict[str, str] = {
    "val_bpb": "minimize",
    "val_loss": "minimize",
    "peak_mem": "minimize",
    "wall_s": "minimize",
    "tokens_per_s": "maximize",
    "params": "minimize",
}
SAMPLERS = ("tpe", "nsga2", "random", "qmc", "grid", "bruteforce")
PRUNERS = ("median", "hyperband", "none")
PARAM_TYPES = ("int", "float", "categorical")
OOM_POLICIES = ("prune", "fit")
#: Samplers that enumerate a finite grid: every searched field needs a finite set of values.
GRID_SAMPLERS = ("grid", "bruteforce")
#: The most points a grid may have (a bigger one is a typo in a step, or a job for a sampler).
MAX_GRID_POINTS = 100_000

_TRAIN_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(TrainConfig)}
_TRAIN_HINTS = typing.get_type_hints(TrainConfig)
#: A stand-in corpus path, only for validating configs before the corpus is known to exist.
_PROBE_CORPUS = "<corpus>"
#: How many combinations of other fields' bounds to try before calling a bound impossible.
_PROBE_LIMIT = 512
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


# --- the spec -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Objective:
    """One optimisation target: a metric name from ``METRICS`` and its direction."""

    metric: str
    direction: Literal["minimize", "maximize"]


@dataclass(frozen=True)
class SamplerSpec:
    """Which Optuna sampler, with the few options worth exposing."""

    name: str
    n_startup_trials: int | None = None  # tpe: random trials before the model kicks in
    multivariate: bool = True  # tpe: model parameters jointly (with group=True for conditions)
    population_size: int | None = None  # nsga2
    qmc_type: str = "sobol"  # qmc: sobol or halton
    scramble: bool = False  # qmc


@dataclass(frozen=True)
class PrunerSpec:
    """Optuna's pruner. Steps are evaluation indices (0, 1, 2, ...), the same for every trial.

    Evaluations are indexed rather than counted in tokens because trials with different
    ``batch_size * grad_accum * seq_len`` reach a token count at different exact numbers, and the
    median pruner only compares values reported at the same step.
    """

    name: str
    n_startup_trials: int = 5  # median: trials that finish before anything is pruned
    n_warmup_evals: int = 1  # median: evaluations of a trial before it can be pruned
    min_resource: int = 1  # hyperband, in evaluations
    max_resource: int | Literal["auto"] = "auto"  # hyperband
    reduction_factor: int = 3  # hyperband


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

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def metrics(self) -> list[str]:
        return [o.metric for o in self.objectives]

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1


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

    @property
    def needs_prepare(self) -> bool:
        return bool(self.source) or self.synthetic_size is not None


@dataclass(frozen=True)
class ParamSpec:
    """One searched field: ``[space.<name>]``."""

    name: str
    type: Literal["int", "float", "categorical"]
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] | None = None
    when: Condition | None = None

    @property
    def finite(self) -> bool:
        """Whether the parameter has a finite set of values (a grid can enumerate it)."""
        return self.type != "float" or self.step is not None

    def values(self) -> list[Any]:
        """Every value, for a grid; a float range without ``step`` has none (SweepsError)."""
        if self.type == "categorical":
            return list(self.choices or ())
        if self.type == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            raise SweepsError(
                f"space.{self.name}: a float range has no grid; give step or use choices")
        n = round((self.high - self.low) / self.step)
        # Rounded so 0.1 + 2 * 0.1 prints as 0.3, matching what a user wrote in choices.
        return [round(self.low + i * self.step, 12) for i in range(n + 1)]

    def probe_values(self) -> list[Any]:
        """A few values to validate: the bounds (and the choices) of the range."""
        if self.type == "categorical":
            return list(self.choices or ())
        return [self.low] if self.low == self.high else [self.low, self.high]

    def contains(self, value: Any) -> bool:
        if self.type == "categorical":
            return any(_same(value, c) for c in self.choices or ())
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.type == "int" and not isinstance(value, int):
            return False
        if not self.low <= value <= self.high:
            return False
        if self.step is not None:
            k = (value - self.low) / self.step
            return math.isclose(k, round(k), abs_tol=1e-9)
        return True


@dataclass(frozen=True)
class CollapseLimits:
    """Unigram collapse: the model predicts the corpus unigram and ignores its context.

    A trial is collapsed when, after the warm-up, ``unigram_gap < min_unigram_gap`` (nats/token)
    and ``mean_kl_to_mean < max_context_kl`` (nats) hold for ``patience`` evaluations in a row.
    """

    enabled: bool = True
    min_unigram_gap: float = 0.05
    max_context_kl: float = 0.05
    warmup_evals: int | None = 2
    warmup_tokens: int | None = None
    patience: int = 1


@dataclass(frozen=True)
class DivergenceLimits:
    """Divergence: a non-finite loss, or ``val_loss`` above ``ratio`` x the best so far for
    ``patience`` evaluations in a row."""

    enabled: bool = True
    ratio: float = 1.5
    patience: int = 2


@dataclass(frozen=True)
class Limits:
    """``[limits]``: what a trial may use and when it is stopped early."""

    memory_budget: int | Literal["auto"] | None = "auto"
    max_wall_s: float | None = None
    collapse: CollapseLimits = field(default_factory=CollapseLimits)
    divergence: DivergenceLimits = field(default_factory=DivergenceLimits)
    max_retries: int = 2
    oom_policy: Literal["prune", "fit"] = "prune"


@dataclass(frozen=True)
class Ablation:
    """``[ablation]``: one factor at a time around a baseline, each point once per seed."""

    baseline: dict[str, Any]
    vary: tuple[tuple[str, tuple[Any, ...]], ...]
    seeds: tuple[int, ...] | None = None
    #: Values of fields the baseline leaves out: ``[fixed]`` over ``TrainConfig``'s defaults.
    defaults: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def choices(self, name: str) -> tuple[Any, ...]:
        """Every value ``name`` takes in the expansion (the baseline's first)."""
        if name == "seed" and self.seeds is not None:
            return self.seeds
        for field_name, values in self.vary:
            if field_name == name:
                return _unique((self._base_value(name), *values))
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
                if _same(value, base[name]):
                    continue  # the baseline already covers it
                points.append({**base, name: value})
        if self.seeds is None:
            return points
        return [{**point, "seed": seed} for seed in self.seeds for point in points]

    @staticmethod
    def label(params: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
        """"baseline" or the one field that differs from it (``d_ff=64``)."""
        changed = [f"{k}={v!r}" for k, v in params.items()
                   if k != "seed" and k in baseline and not _same(v, baseline[k])]
        return ", ".join(changed) or "baseline"


@dataclass(frozen=True)
class StudySpec:
    """A validated study spec. ``space`` is in suggestion order (a condition's inputs first)."""

    study: StudySection
    corpus: CorpusSpec
    fixed: dict[str, Any]
    space: tuple[ParamSpec, ...]
    limits: Limits
    enqueue: tuple[dict[str, Any], ...] = ()
    ablation: Ablation | None = None
    source: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | Path | None = None,
                  base_dir: Path | None = None, check_paths: bool = True) -> StudySpec:
        """Validate a parsed spec. ``source`` names the file in errors and anchors relative paths
        (else ``base_dir``, else the working directory); ``check_paths=False`` skips checks that
        the corpus paths exist (a spec read back from a database on another machine)."""
        return _Parser(data, source=source, base_dir=base_dir, check_paths=check_paths).parse()

    # --- conveniences for the runner, the CLI and the space module ---

    @property
    def name(self) -> str:
        return self.study.name

    @property
    def param_names(self) -> list[str]:
        if self.ablation is not None:
            return self.ablation.param_names
        return [p.name for p in self.space]

    def param(self, name: str) -> ParamSpec:
        for p in self.space:
            if p.name == name:
                return p
        raise SweepsError(f"{name!r} is not a searched parameter of study {self.name!r}; "
                          f"searched: {', '.join(self.param_names) or 'none'}")

    def base_values(self) -> dict[str, Any]:
        """Every ``TrainConfig`` field before a trial's parameters: defaults, then ``[fixed]``,
        then the ablation baseline, and the corpus directory."""
        values = _defaults()
        values.update(self.fixed)
        if self.ablation is not None:
            values.update(self.ablation.baseline)
        values["corpus"] = str(self.corpus.dir)
        if self.limits.max_wall_s is not None:
            values["max_wall_s"] = self.limits.max_wall_s
        return values

    def initial_trials(self) -> list[dict[str, Any]]:
        """Parameter sets to enqueue before sampling: ``[[enqueue]]``, or the ablation."""
        if self.ablation is not None:
            return self.ablation.expand()
        return [dict(e) for e in self.enqueue]

    def to_dict(self) -> dict[str, Any]:
        """The spec as TOML-shaped data (corpus paths absolute): ``from_dict`` reads it back, so
        a worker on another machine can rebuild the spec from the study's stored copy. Without
        ``study.storage``: a URL may hold a password, and a joining worker has its own URL."""
        import copy

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


def load_spec(path: Path | str, *, check_paths: bool = True) -> StudySpec:
    """Read and validate a TOML study spec; every problem is a one-line ``SweepsError``."""
    path = Path(path)
    if not path.exists():
        raise SweepsError(f"study spec {path} does not exist; give the path of a .toml file")
    if path.is_dir():
        raise SweepsError(f"study spec {path} is a directory; give the path of a .toml file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SweepsError(f"{path}: not valid TOML: {_one_line(str(exc))}") from None
    except UnicodeDecodeError:
        raise SweepsError(f"{path}: not UTF-8 text; save the spec as UTF-8 TOML") from None
    return StudySpec.from_dict(data, source=path, check_paths=check_paths)


def parse_bytes(value: Any, *, key: str = "memory_budget") -> int:
    """``8GiB``, ``512MB``, ``1.5G`` or an integer -> bytes (KB/MB are 1000s, KiB/MiB 1024s)."""
    number = size_in_bytes(value)
    if number is None:
        raise SweepsError(
            f"{key} must be a size such as 8GiB, 512MB or a number of bytes, got {key}={value!r}")
    return number


def iter_grid(params: Iterable[ParamSpec], base: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every point of a finite space, conditions respected: a parameter whose condition does not
    hold (given ``base`` and the parameters before it) is left out of that point, so no point
    repeats. ``params`` must be in suggestion order (``StudySpec.space`` is)."""
    params = list(params)

    def walk(i: int, env: dict[str, Any], point: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(params):
            yield dict(point)
            return
        p = params[i]
        if p.when is not None and not p.when.holds(env):
            yield from walk(i + 1, env, point)
            return
        for value in p.values():
            env[p.name] = point[p.name] = value
            yield from walk(i + 1, env, point)
        env[p.name] = base.get(p.name)
        point.pop(p.name, None)

    yield from walk(0, dict(base), {})


# --- the parser ---------------------------------------------------------------------------------


class _Parser:
    """One pass over a spec dict, keeping the file name for every error."""

    def __init__(self, data: Mapping[str, Any], *, source: str | Path | None,
                 base_dir: Path | None, check_paths: bool) -> None:
        self.data = data
        self.label = str(source) if source is not None else "study spec"
        if base_dir is None:
            base_dir = Path(source).parent if source is not None else Path.cwd()
        self.base_dir = base_dir
        self.check_paths = check_paths

    def error(self, key: str, message: str) -> SweepsError:
        return SweepsError(_one_line(f"{self.label}: {key}: {message}"))

    # --- generic checks ---

    def table(self, value: Any, key: str, allowed: Iterable[str]) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(key, f"must be a table, got {value!r}")
        allowed = tuple(allowed)
        for k in value:
            if k not in allowed:
                hint = closest(k, allowed)
                raise self.error(f"{key}.{k}" if key else k,
                                 f"unknown key {k!r} in [{key or 'top level'}]"
                                 + (f" (did you mean {hint!r}?)" if hint else "")
                                 + f"; allowed: {', '.join(allowed)}")
        return dict(value)

    def int_(self, value: Any, key: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        return value

    def number(self, value: Any, key: str, *, positive: bool = False,
               minimum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise self.error(key, f"must be a number, got {value!r}")
        if positive and value <= 0:
            raise self.error(key, f"must be > 0, got {value}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        return float(value)

    def bool_(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def str_(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"must be a non-empty string, got {value!r}")
        return value

    def choice(self, value: Any, key: str, choices: Iterable[str]) -> str:
        choices = tuple(choices)
        if value not in choices:
            hint = closest(str(value), choices)
            raise self.error(key, f"unknown value {value!r}"
                             + (f" (did you mean {hint!r}?)" if hint else "")
                             + f"; use one of: {', '.join(choices)}")
        return value

    # --- sections ---

    def parse(self) -> StudySpec:
        top = self.table(self.data, "", ("study", "corpus", "fixed", "space", "limits",
                                         "enqueue", "ablation"))
        if "study" not in top:
            raise self.error("study", "the [study] table is missing; add [study] with name = ...")
        if "corpus" not in top:
            raise self.error("corpus", "the [corpus] table is missing; add [corpus] with "
                             "dir = a prepared corpus, or source/synthetic with out")
        fixed = self.parse_fixed(top.get("fixed", {}))
        defaults = {**_defaults(), **fixed}
        space = self.parse_space(top.get("space", {}), fixed)
        ablation = None
        if "ablation" in top:
            if space:
                raise self.error("ablation", "[ablation] and [space] cannot be combined; an "
                                 "ablation's trial list is its expansion: remove one of them")
            if "enqueue" in top:
                raise self.error("enqueue", "[[enqueue]] and [ablation] cannot be combined; the "
                                 "ablation runs its baseline first: remove [[enqueue]]")
            ablation = self.parse_ablation(top["ablation"], fixed, defaults)
        else:
            self.check_fixed(fixed, space)
            self.check_bounds(space, fixed)
        enqueue = self.parse_enqueue(top.get("enqueue", []), space, fixed)
        if not space and ablation is None and not enqueue:
            raise self.error("space", "nothing to search: add [space.<field>] tables, an "
                             "[ablation], or [[enqueue]] configs")
        limits = self.parse_limits(top.get("limits", {}))
        if limits.max_wall_s is not None and "max_wall_s" in fixed:
            raise self.error("fixed.max_wall_s", "also set as limits.max_wall_s; keep the one "
                             "in [limits]")
        study = self.parse_study(top["study"], space, ablation, enqueue, defaults)
        corpus = self.parse_corpus(top["corpus"])
        raw = _plain(self.data)
        return StudySpec(study=study, corpus=corpus, fixed=fixed, space=space, limits=limits,
                         enqueue=enqueue, ablation=ablation,
                         source=Path(self.label) if self.label != "study spec" else None,
                         raw=raw)

    def parse_study(self, value: Any, space: tuple[ParamSpec, ...], ablation: Ablation | None,
                    enqueue: tuple[dict[str, Any], ...],
                    defaults: dict[str, Any]) -> StudySection:
        t = self.table(value, "study", ("name", "storage", "objectives", "sampler", "seed",
                                        "pruner", "n_trials", "timeout"))
        if "name" not in t:
            raise self.error("study.name", "missing; give the study a name, e.g. name = \"vocab\"")
        name = self.str_(t["name"], "study.name")
        if not _NAME.fullmatch(name):
            raise self.error("study.name", f"{name!r} may use only letters, digits, '_', '.' "
                             "and '-' (it names run directories); rename it")
        storage = None
        if t.get("storage") is not None:
            storage = self.str_(t["storage"], "study.storage")
            if "://" not in storage:
                raise self.error("study.storage", f"{storage!r} is not a database URL; use e.g. "
                                 "sqlite:///sweeps.db or postgresql://user@host/dbname")
        objectives = self.parse_objectives(t.get("objectives", ["val_bpb"]))
        multi = len(objectives) > 1
        seed = None if t.get("seed") is None else self.int_(t["seed"], "study.seed", 0)

        sampler = self.parse_sampler(t.get("sampler"), multi, ablation)
        if sampler.name in GRID_SAMPLERS:
            for p in space:
                if not p.finite:
                    raise self.error(f"space.{p.name}", f"sampler {sampler.name} needs a finite "
                                     "set of values, but this float range has no step; add step "
                                     "or use choices")
            if sampler.name == "grid":
                for p in space:
                    if p.when is not None:
                        raise self.error(f"space.{p.name}.when", "the grid sampler cannot skip "
                                         "conditional parameters (points would repeat); use "
                                         "sampler = \"bruteforce\", which walks conditions")
        pruner = self.parse_pruner(t.get("pruner"), multi)

        if "n_trials" in t:
            n_trials = self.int_(t["n_trials"], "study.n_trials", 1)
        elif ablation is not None:
            n_trials = len(ablation.expand())
        elif sampler.name in GRID_SAMPLERS:
            n_trials = sum(1 for _ in itertools.islice(iter_grid(space, defaults),
                                                       MAX_GRID_POINTS + 1))
            if n_trials > MAX_GRID_POINTS:
                raise self.error("study.n_trials", f"missing, and the {sampler.name} grid has "
                                 f"more than {MAX_GRID_POINTS} points; set n_trials or coarsen "
                                 "the space (step, fewer choices)")
        elif space:
            raise self.error("study.n_trials", "missing; say how many trials to run, e.g. "
                             "n_trials = 20")
        else:
            n_trials = len(enqueue)
        timeout = None
        if t.get("timeout") is not None:
            timeout = self.number(t["timeout"], "study.timeout", positive=True)
        return StudySection(name=name, storage=storage, objectives=objectives, sampler=sampler,
                            seed=seed, pruner=pruner, n_trials=n_trials, timeout=timeout)

    def parse_objectives(self, value: Any) -> tuple[Objective, ...]:
        key = "study.objectives"
        if isinstance(value, (str, Mapping)):
            value = [value]
        if not isinstance(value, list) or not value:
            raise self.error(key, f"must be a non-empty list such as [\"val_bpb\"], got {value!r}")
        out: list[Objective] = []
        for i, item in enumerate(value):
            where = f"{key}[{i}]"
            if isinstance(item, str):
                metric = self.choice(item, where, METRICS)
                direction = METRICS[metric]
            elif isinstance(item, Mapping):
                t = self.table(item, where, ("metric", "direction"))
                if "metric" not in t:
                    raise self.error(where, "missing metric; write {metric = \"val_bpb\"}")
                metric = self.choice(t["metric"], f"{where}.metric", METRICS)
                direction = self.choice(t.get("direction", METRICS[metric]),
                                        f"{where}.direction", ("minimize", "maximize"))
            else:
                raise self.error(where, f"must be a metric name or {{metric, direction}}, "
                                 f"got {item!r}")
            if any(o.metric == metric for o in out):
                raise self.error(where, f"metric {metric!r} is listed twice; list it once")
            out.append(Objective(metric, direction))  # type: ignore[arg-type]
        return tuple(out)

    def parse_sampler(self, value: Any, multi: bool, ablation: Ablation | None) -> SamplerSpec:
        key = "study.sampler"
        if value is None:
            # Ablation trials are all enqueued: the sampler never chooses anything.
            default = "random" if ablation is not None else ("nsga2" if multi else "tpe")
            return SamplerSpec(default)
        name_key = key if isinstance(value, str) else f"{key}.name"
        if isinstance(value, str):
            value = {"name": value}
        t = self.table(value, key, ("name", "n_startup_trials", "multivariate",
                                    "population_size", "qmc_type", "scramble"))
        if "name" not in t:
            raise self.error(name_key, f"missing; use one of: {', '.join(SAMPLERS)}")
        name = self.choice(t["name"], name_key, SAMPLERS)
        if name == "qmc" and importlib.util.find_spec("scipy") is None:
            raise self.error(name_key, "sampler 'qmc' needs scipy, which is not installed; "
                             "`pip install scipy`, or use sampler = \"random\" or \"tpe\"")
        if ablation is not None and name != "random":
            raise self.error(key, f"an ablation enqueues every trial, so sampler {name!r} would "
                             "never be used; remove study.sampler")
        options: dict[str, Any] = {"name": name}
        if "n_startup_trials" in t:
            options["n_startup_trials"] = self.int_(t["n_startup_trials"],
                                                    f"{key}.n_startup_trials", 0)
        if "multivariate" in t:
            options["multivariate"] = self.bool_(t["multivariate"], f"{key}.multivariate")
        if "population_size" in t:
            options["population_size"] = self.int_(t["population_size"],
                                                   f"{key}.population_size", 2)
        if "qmc_type" in t:
            options["qmc_type"] = self.choice(t["qmc_type"], f"{key}.qmc_type",
                                              ("sobol", "halton"))
        if "scramble" in t:
            options["scramble"] = self.bool_(t["scramble"], f"{key}.scramble")
        return SamplerSpec(**options)

    def parse_pruner(self, value: Any, multi: bool) -> PrunerSpec:
        key = "study.pruner"
        if value is None:
            # Optuna's pruners compare one intermediate value; with several objectives only the
            # project's own rules (OOM, collapse, divergence) stop trials early.
            return PrunerSpec("none" if multi else "median")
        name_key = key if isinstance(value, str) else f"{key}.name"
        if isinstance(value, str):
            value = {"name": value}
        t = self.table(value, key, ("name", "n_startup_trials", "n_warmup_evals",
                                    "min_resource", "max_resource", "reduction_factor"))
        if "name" not in t:
            raise self.error(name_key, f"missing; use one of: {', '.join(PRUNERS)}")
        name = self.choice(t["name"], name_key, PRUNERS)
        if multi and name != "none":
            raise self.error(key, f"pruner {name!r} needs a single objective; use pruner = "
                             "\"none\" (OOM, collapse and divergence rules still apply)")
        options: dict[str, Any] = {"name": name}
        for k in ("n_startup_trials", "n_warmup_evals"):
            if k in t:
                options[k] = self.int_(t[k], f"{key}.{k}", 0)
        for k in ("min_resource", "reduction_factor"):
            if k in t:
                options[k] = self.int_(t[k], f"{key}.{k}", 1 if k == "min_resource" else 2)
        if "max_resource" in t:
            v = t["max_resource"]
            options["max_resource"] = v if v == "auto" else self.int_(
                v, f"{key}.max_resource", 1)
        return PrunerSpec(**options)

    def parse_corpus(self, value: Any) -> CorpusSpec:
        t = self.table(value, "corpus", ("dir", "source", "format", "synthetic", "out",
                                         "val_fraction"))
        given = [k for k in ("dir", "source", "synthetic") if k in t]
        if len(given) != 1:
            raise self.error("corpus", "give exactly one of dir (a prepared corpus), source (a "
                             "Posts.xml or text files) or synthetic = {size, seed}"
                             + (f"; got {', '.join(given)}" if given else ""))
        if "dir" in t:
            for k in ("out", "format", "val_fraction"):
                if k in t:
                    raise self.error(f"corpus.{k}", "only applies with source or synthetic; "
                                     "a prepared corpus dir is used as it is")
            path = self.path(t["dir"], "corpus.dir")
            if self.check_paths and not path.is_dir():
                raise self.error("corpus.dir", f"{path} is not a directory; run `sweeps prepare "
                                 "... --out DIR` first, or give source and out to prepare it")
            return CorpusSpec(dir=path)
        if "out" not in t:
            raise self.error("corpus.out", "missing; say where to write the prepared corpus, "
                             "e.g. out = \"corpora/history\"")
        out = self.path(t["out"], "corpus.out")
        if self.check_paths and out.exists() and not out.is_dir():
            raise self.error("corpus.out", f"{out} is a file; give a directory for the prepared "
                             "corpus")
        val_fraction = 0.05
        if "val_fraction" in t:
            val_fraction = self.number(t["val_fraction"], "corpus.val_fraction")
            if not 0.0 < val_fraction < 1.0:
                raise self.error("corpus.val_fraction",
                                 f"must be between 0 and 1, got {val_fraction}")
        if "synthetic" in t:
            if "format" in t:
                raise self.error("corpus.format", "only applies with source")
            s = self.table(t["synthetic"], "corpus.synthetic", ("size", "seed"))
            if "size" not in s:
                raise self.error("corpus.synthetic.size", "missing; e.g. size = \"5MB\"")
            size = self.size(s["size"], "corpus.synthetic.size")
            seed = self.int_(s.get("seed", 0), "corpus.synthetic.seed", 0)
            return CorpusSpec(dir=out, synthetic_size=size, synthetic_seed=seed,
                              val_fraction=val_fraction)
        raw_sources = t["source"]
        if isinstance(raw_sources, str):
            raw_sources = [raw_sources]
        if not isinstance(raw_sources, list) or not raw_sources:
            raise self.error("corpus.source", f"must be a path or a list of paths, got "
                             f"{t['source']!r}")
        fmt = self.choice(t.get("format", "posts"), "corpus.format", ("posts", "text"))
        if fmt == "posts" and len(raw_sources) != 1:
            raise self.error("corpus.source", f"format posts takes one Posts.xml, got "
                             f"{len(raw_sources)} paths; use format = \"text\" for text files")
        sources = []
        for i, s in enumerate(raw_sources):
            key = "corpus.source" if len(raw_sources) == 1 else f"corpus.source[{i}]"
            path = self.path(s, key)
            is_glob = any(c in str(s) for c in "*?[")
            if self.check_paths and not is_glob and not path.is_file():
                raise self.error(key, f"{path} does not exist; give the path of a "
                                 + ("Posts.xml dump" if fmt == "posts" else "text file"))
            sources.append(str(path))
        return CorpusSpec(dir=out, source=tuple(sources), format=fmt,  # type: ignore[arg-type]
                          val_fraction=val_fraction)

    def path(self, value: Any, key: str) -> Path:
        text = self.str_(value, key)
        path = Path(text).expanduser()
        # Absolute and normalised: trial children and remote workers may run elsewhere.
        return Path(os.path.abspath(path if path.is_absolute() else self.base_dir / path))

    def size(self, value: Any, key: str) -> int:
        number = size_in_bytes(value)
        if number is None:
            raise self.error(key, f"must be a size such as 8GiB, 512MB or a number of bytes, "
                             f"got {value!r}")
        return number

    def parse_fixed(self, value: Any) -> dict[str, Any]:
        t = self.table(value, "fixed", [n for n in _TRAIN_FIELDS if n != "corpus"]
                       + ["corpus"])
        if "corpus" in t:
            raise self.error("fixed.corpus", "set the corpus in [corpus] (dir = ...), not in "
                             "[fixed]")
        return {k: _normalise(v) for k, v in t.items()}

    def parse_space(self, value: Any, fixed: dict[str, Any]) -> tuple[ParamSpec, ...]:
        if not isinstance(value, Mapping):
            raise self.error("space", f"must be tables [space.<field>], got {value!r}")
        params: list[ParamSpec] = []
        for name, body in value.items():
            key = f"space.{name}"
            if name not in _TRAIN_FIELDS:
                hint = closest(name, _TRAIN_FIELDS)
                raise self.error(key, f"{name!r} is not a TrainConfig field"
                                 + (f" (did you mean {hint!r}?)" if hint else "")
                                 + "; search only training config fields")
            if name == "corpus":
                raise self.error(key, "the corpus cannot be searched; run one study per corpus")
            if name in fixed:
                raise self.error(key, f"{name} is also in [fixed]; remove it from one of them")
            params.append(self.parse_param(name, body))
        ordered = self.order(params)
        self.check_literals(ordered, fixed)
        return ordered

    def parse_param(self, name: str, body: Any) -> ParamSpec:
        key = f"space.{name}"
        if isinstance(body, list):  # ``[space] d_ff = [64, 256]`` as a shorthand for choices
            body = {"choices": body}
        t = self.table(body, key, ("type", "low", "high", "log", "step", "choices", "when"))
        if "type" in t:
            kind = self.choice(t["type"], f"{key}.type", PARAM_TYPES)
        elif "choices" in t:
            kind = "categorical"
        elif "low" in t and "high" in t:
            ints = all(isinstance(t[k], int) and not isinstance(t[k], bool)
                       for k in ("low", "high"))
            kind = "int" if ints and not isinstance(t.get("step", 1), float) else "float"
        else:
            raise self.error(key, "give choices = [...], or low and high (with type = \"int\" "
                             "or \"float\")")
        when = None
        if "when" in t:
            try:
                when = parse_condition(t["when"])
            except SweepsError as exc:
                raise self.error(f"{key}.when", str(exc)) from None
            if name in when.fields:
                raise self.error(f"{key}.when", f"the condition of {name} refers to {name} "
                                 "itself; condition it on other fields")
        if kind == "categorical":
            for k in ("low", "high", "log", "step"):
                if k in t:
                    raise self.error(f"{key}.{k}", "does not apply to a categorical parameter; "
                                     "remove it or use type = \"int\"/\"float\"")
            choices = t.get("choices")
            if not isinstance(choices, list) or not choices:
                raise self.error(f"{key}.choices", f"must be a non-empty list, got {choices!r}")
            for i, c in enumerate(choices):
                if not (c is None or isinstance(c, (str, int, float, bool))):
                    raise self.error(f"{key}.choices[{i}]", f"must be a string, number or "
                                     f"boolean, got {c!r}")
            if len(_unique(choices)) != len(choices):
                raise self.error(f"{key}.choices", f"lists a value twice: {choices!r}")
            return ParamSpec(name, "categorical",
                             choices=tuple(_normalise(c) for c in choices), when=when)
        if "choices" in t:
            raise self.error(f"{key}.choices", f"does not apply to type {kind!r}; use "
                             "type = \"categorical\" or low/high")
        for k in ("low", "high"):
            if k not in t:
                raise self.error(f"{key}.{k}", f"missing; an {kind} range needs low and high")
        if kind == "int":
            low = self.int_(t["low"], f"{key}.low")
            high = self.int_(t["high"], f"{key}.high")
            step = self.int_(t["step"], f"{key}.step", 1) if "step" in t else None
        else:
            low = self.number(t["low"], f"{key}.low")
            high = self.number(t["high"], f"{key}.high")
            step = self.number(t["step"], f"{key}.step", positive=True) if "step" in t else None
        log = self.bool_(t.get("log", False), f"{key}.log")
        if low > high:
            raise self.error(f"{key}.low", f"must be <= high, got low={low}, high={high}; "
                             "swap them")
        if log and low <= 0:
            raise self.error(f"{key}.low", f"a log range needs low > 0, got low={low}; raise "
                             "low or set log = false")
        if log and step is not None and step != 1:
            raise self.error(f"{key}.step", f"cannot be combined with log = true (got step="
                             f"{step}); drop step or log")
        if step is not None:
            span = (high - low) / step
            if not math.isclose(span, round(span), rel_tol=0, abs_tol=1e-9):
                raise self.error(f"{key}.step", f"step={step} does not divide high - low = "
                                 f"{high - low}; adjust high to low + k * step")
        return ParamSpec(name, kind, low=low, high=high, log=log,  # type: ignore[arg-type]
                         step=step, when=when)

    def order(self, params: list[ParamSpec]) -> tuple[ParamSpec, ...]:
        """Suggestion order: a parameter after every searched field its condition reads."""
        by_name = {p.name: p for p in params}
        deps = {p.name: (p.when.fields & by_name.keys()) if p.when else set() for p in params}
        done: list[ParamSpec] = []
        placed: set[str] = set()
        while len(done) < len(params):
            ready = [p for p in params if p.name not in placed and deps[p.name] <= placed]
            if not ready:
                stuck = [p.name for p in params if p.name not in placed]
                raise self.error(f"space.{stuck[0]}.when", "conditions form a cycle among "
                                 f"{', '.join(stuck)}; make one of them unconditional")
            done.append(ready[0])
            placed.add(ready[0].name)
        return tuple(done)

    def check_literals(self, params: tuple[ParamSpec, ...], fixed: dict[str, Any]) -> None:
        """``tokenizer == 'wrod'`` would silently switch a parameter off: catch it."""
        by_name = {p.name: p for p in params}
        for p in params:
            if p.when is None:
                continue
            for field_name, values in p.when.literals:
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
                    if not any(_same(v, c) for c in possible):
                        raise self.error(f"space.{p.name}.when", f"condition {p.when.text!r}: "
                                         f"{field_name} is never {v!r} (its values: "
                                         f"{', '.join(map(repr, possible))})")

    def check_fixed(self, fixed: dict[str, Any], params: tuple[ParamSpec, ...]) -> None:
        """``[fixed]`` must make a valid TrainConfig with some values of the searched fields
        (``n_heads = 3`` is fine when ``d_model`` is searched over multiples of 3)."""
        first_error: SweepsError | None = None
        combos = itertools.product(*(p.probe_values() for p in params))
        for combo in itertools.islice(combos, _PROBE_LIMIT):
            try:
                _build({**fixed, **{p.name: v for p, v in zip(params, combo, strict=True)}})
                return
            except SweepsError as exc:
                first_error = first_error or exc
        # TrainConfig's messages start with the field they are about: name it when it is fixed.
        field_name = re.match(r"\w*", str(first_error)).group(0)  # type: ignore[union-attr]
        key = f"fixed.{field_name}" if field_name in fixed else "fixed"
        raise self.error(key, f"no valid config: {first_error}")

    def check_bounds(self, params: tuple[ParamSpec, ...], fixed: dict[str, Any]) -> None:
        """Every bound of every parameter must make a valid TrainConfig with *some* values of
        the other parameters (``d_model`` 96 may need ``n_heads`` 3 from the same space)."""
        for p in params:
            for value in p.probe_values():
                others = [q for q in params if q is not p]
                first_error: SweepsError | None = None
                combos = itertools.product(*(q.probe_values() for q in others))
                for combo in itertools.islice(combos, _PROBE_LIMIT):
                    values = {**fixed, p.name: value,
                              **{q.name: v for q, v in zip(others, combo, strict=True)}}
                    try:
                        _build(values)
                        break
                    except SweepsError as exc:
                        first_error = first_error or exc
                else:
                    assert first_error is not None
                    bound = ("choice" if p.type == "categorical"
                             else "low" if value == p.low else "high")
                    raise self.error(f"space.{p.name}", f"{bound} {p.name}={value!r} cannot "
                                     f"make a valid config with [fixed]: {first_error}")

    def parse_limits(self, value: Any) -> Limits:
        t = self.table(value, "limits", ("memory_budget", "max_wall_s", "collapse",
                                         "divergence", "max_retries", "oom_policy"))
        options: dict[str, Any] = {}
        if "memory_budget" in t:
            v = t["memory_budget"]
            if v == "auto" or v is None:
                options["memory_budget"] = v
            else:
                options["memory_budget"] = self.size(v, "limits.memory_budget")
        if "max_wall_s" in t:
            options["max_wall_s"] = self.number(t["max_wall_s"], "limits.max_wall_s",
                                                positive=True)
        if "max_retries" in t:
            options["max_retries"] = self.int_(t["max_retries"], "limits.max_retries", 0)
        if "oom_policy" in t:
            options["oom_policy"] = self.choice(t["oom_policy"], "limits.oom_policy",
                                                OOM_POLICIES)
        if "collapse" in t:
            options["collapse"] = self.parse_collapse(t["collapse"])
        if "divergence" in t:
            options["divergence"] = self.parse_divergence(t["divergence"])
        return Limits(**options)

    def parse_collapse(self, value: Any) -> CollapseLimits:
        key = "limits.collapse"
        if value is False or value is True:
            return CollapseLimits(enabled=value)
        t = self.table(value, key, ("enabled", "min_unigram_gap", "max_context_kl",
                                    "warmup_evals", "warmup_tokens", "patience"))
        options: dict[str, Any] = {}
        if "enabled" in t:
            options["enabled"] = self.bool_(t["enabled"], f"{key}.enabled")
        for k in ("min_unigram_gap", "max_context_kl"):
            if k in t:
                options[k] = self.number(t[k], f"{key}.{k}", minimum=0.0)
        if "warmup_evals" in t and "warmup_tokens" in t:
            raise self.error(f"{key}.warmup_tokens", "give warmup_evals or warmup_tokens, "
                             "not both")
        if "warmup_tokens" in t:
            options["warmup_tokens"] = self.int_(t["warmup_tokens"], f"{key}.warmup_tokens", 0)
            options["warmup_evals"] = None
        if "warmup_evals" in t:
            options["warmup_evals"] = self.int_(t["warmup_evals"], f"{key}.warmup_evals", 0)
        if "patience" in t:
            options["patience"] = self.int_(t["patience"], f"{key}.patience", 1)
        return CollapseLimits(**options)

    def parse_divergence(self, value: Any) -> DivergenceLimits:
        key = "limits.divergence"
        if value is False or value is True:
            return DivergenceLimits(enabled=value)
        t = self.table(value, key, ("enabled", "ratio", "patience"))
        options: dict[str, Any] = {}
        if "enabled" in t:
            options["enabled"] = self.bool_(t["enabled"], f"{key}.enabled")
        if "ratio" in t:
            options["ratio"] = self.number(t["ratio"], f"{key}.ratio")
            if options["ratio"] <= 1.0:
                raise self.error(f"{key}.ratio", f"must be > 1, got {options['ratio']}")
        if "patience" in t:
            options["patience"] = self.int_(t["patience"], f"{key}.patience", 1)
        return DivergenceLimits(**options)

    def parse_enqueue(self, value: Any, space: tuple[ParamSpec, ...],
                      fixed: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        if isinstance(value, Mapping):
            value = [value]
        if not isinstance(value, list):
            raise self.error("enqueue", f"must be [[enqueue]] tables, got {value!r}")
        by_name = {p.name: p for p in space}
        out = []
        for i, item in enumerate(value):
            key = f"enqueue[{i}]"
            if not isinstance(item, Mapping) or not item:
                raise self.error(key, f"must be a non-empty table of parameter values, got "
                                 f"{item!r}")
            entry = {}
            for name, v in item.items():
                if name not in by_name:
                    what = ("is in [fixed]" if name in fixed
                            else "is not a searched field ([space.<field>])")
                    raise self.error(f"{key}.{name}", f"{name!r} {what}; an enqueued config "
                                     "sets searched parameters only")
                v = _normalise(v)
                if not by_name[name].contains(v):
                    raise self.error(f"{key}.{name}", f"{v!r} is outside space.{name}; use a "
                                     "value the space can produce")
                entry[name] = v
            env = {**_defaults(), **fixed, **entry}
            for p in space:
                if p.name in entry and p.when is not None and not p.when.holds(env):
                    raise self.error(f"{key}.{p.name}", f"set, but its condition "
                                     f"{p.when.text!r} does not hold; remove it")
            try:
                _build({**fixed, **entry})
            except SweepsError as exc:
                raise self.error(key, str(exc)) from None
            out.append(entry)
        return tuple(out)

    def parse_ablation(self, value: Any, fixed: dict[str, Any],
                       defaults: dict[str, Any]) -> Ablation:
        t = self.table(value, "ablation", ("baseline", "vary", "seeds"))
        baseline_raw = self.table(t.get("baseline", {}), "ablation.baseline",
                                  [n for n in _TRAIN_FIELDS])
        baseline = {}
        for k, v in baseline_raw.items():
            if k == "corpus":
                raise self.error("ablation.baseline.corpus", "set the corpus in [corpus]")
            if k in fixed:
                raise self.error(f"ablation.baseline.{k}", f"{k} is also in [fixed]; keep it "
                                 "in one place")
            baseline[k] = _normalise(v)
        if "vary" not in t:
            raise self.error("ablation.vary", "missing; e.g. vary = {d_ff = [1, 64, 256]}")
        vary_raw = self.table(t["vary"], "ablation.vary", list(_TRAIN_FIELDS))
        if not vary_raw:
            raise self.error("ablation.vary", "is empty; name at least one field to vary")
        vary = []
        for k, values in vary_raw.items():
            if k in ("corpus",):
                raise self.error(f"ablation.vary.{k}", "the corpus cannot be varied")
            if k in fixed:
                raise self.error(f"ablation.vary.{k}", f"{k} is also in [fixed]; move its "
                                 "baseline value to ablation.baseline")
            if not isinstance(values, list) or not values:
                raise self.error(f"ablation.vary.{k}", f"must be a non-empty list, got "
                                 f"{values!r}")
            for i, v in enumerate(values):
                # Each value becomes an Optuna categorical choice: scalars only.
                if not (v is None or isinstance(v, (str, int, float, bool))):
                    raise self.error(f"ablation.vary.{k}[{i}]", f"must be a string, number or "
                                     f"boolean, got {v!r}")
            vary.append((k, tuple(_normalise(v) for v in values)))
        seeds = None
        if "seeds" in t:
            s = t["seeds"]
            if not isinstance(s, list) or not s:
                raise self.error("ablation.seeds", f"must be a non-empty list of integers, "
                                 f"got {s!r}")
            seeds = tuple(self.int_(x, f"ablation.seeds[{i}]", 0) for i, x in enumerate(s))
            if len(set(seeds)) != len(seeds):
                raise self.error("ablation.seeds", f"lists a seed twice: {list(seeds)}")
            for where in ("seed" in fixed and "fixed", "seed" in baseline and
                          "ablation.baseline", "seed" in vary_raw and "ablation.vary"):
                if where:
                    raise self.error(f"{where}.seed", "conflicts with ablation.seeds; "
                                     "remove one")
        ablation = Ablation(baseline=baseline, vary=tuple(vary), seeds=seeds,
                            defaults={**defaults})
        for i, point in enumerate(ablation.expand()):
            changed = Ablation.label(point, {**defaults, **baseline})
            try:
                _build({**fixed, **baseline, **point})
            except SweepsError as exc:
                where = "ablation.baseline" if changed == "baseline" else \
                    f"ablation.vary.{changed.split('=', 1)[0]}"
                raise self.error(where, f"{changed} (trial {i}): {exc}") from None
        return ablation


# --- helpers ------------------------------------------------------------------------------------


def _defaults() -> dict[str, Any]:
    """``TrainConfig``'s defaults (the required ``corpus`` has none)."""
    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _literal_choices(name: str) -> tuple[Any, ...] | None:
    hint = _TRAIN_HINTS.get(name)
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    if hint is bool:
        return (True, False)
    return None


def _normalise(value: Any) -> Any:
    """TOML arrays become tuples where TrainConfig holds tuples (``sample_prompts``)."""
    if isinstance(value, list):
        return tuple(value)
    return value


def _build(values: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from partial values (defaults fill the rest), tokenizer args included."""
    values = {"corpus": _PROBE_CORPUS, **values}
    cfg = TrainConfig.from_dict(values)
    validate_tokenizer(cfg)
    return cfg


def validate_tokenizer(cfg: TrainConfig) -> None:
    """SweepsError when the tokenizer cannot have this vocab_size (checked by lm.tokenizers)."""
    try:
        from lm.tokenizers import validate_tokenizer_args
    except ImportError:  # the tokenizer module is optional for validation
        return
    validate_tokenizer_args(cfg.tokenizer, cfg.vocab_size, cfg.lowercase)


def _same(a: Any, b: Any) -> bool:
    """Equality that keeps ``True`` apart from ``1`` (TOML booleans are not numbers)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _unique(values: Iterable[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for v in values:
        if not any(_same(v, o) for o in out):
            out.append(v)
    return tuple(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _plain(value: Any) -> Any:
    """TOML data as plain JSON-ready values (tomllib gives dates for date literals)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
