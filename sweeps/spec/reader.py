"""The TOML reader: one file (or its parsed dict) -> a ``StudySpec``, every problem one line.

The reader knows the TOML layout: which tables exist, shorthands (``sampler = "tpe"``,
``[space] d_ff = [64, 256]``, ``collapse = false``), defaults that depend on other sections
(the sampler, ``n_trials``) and paths relative to the file. Each table's keys are the fields of
the type it becomes, so an unknown key gets a did-you-mean hint from those fields, and values are
checked by the types themselves; a ``FieldError`` from a type gets the table's key in front and
the file name before that: ``spec.toml: limits.max_retries: must be >= 0, got max_retries=-1``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from lm.config import with_default_vocab
from lm.errors import FieldError, SweepsError, closest
from sweeps.spec.checks import (
    TRAIN_FIELDS,
    check_ablation,
    check_bounds,
    check_enqueue,
    check_fixed,
    check_literals,
    normalise,
)
from sweeps.spec.designs import Ablation, Scaling, Transfer, check_transfer_fixed
from sweeps.spec.engine import ENGINE_KEYS
from sweeps.spec.limits import CollapseLimits, DivergenceLimits, Limits
from sweeps.spec.rules import (
    check_fixed_and_space,
    check_grid,
    check_scaling_fixed,
    check_search,
)
from sweeps.spec.types import (
    CorpusSpec,
    Objective,
    ParamSpec,
    PrunerSpec,
    SamplerSpec,
    StudySection,
    StudySpec,
)
from sweeps.spec.values import (
    DEFAULT_OBJECTIVES,
    GRID_SAMPLERS,
    MAX_GRID_POINTS,
    METRICS,
    PRUNERS,
    SAMPLERS,
    train_defaults,
)
from sweeps.spec.walk import iter_grid, order

_TOP_KEYS = (
    "study",
    "corpus",
    "fixed",
    "space",
    "limits",
    "enqueue",
    "ablation",
    "scaling",
    "transfer",
    "engine",
)
_CORPUS_KEYS = ("dir", "source", "format", "synthetic", "out", "val_fraction")
_PARAM_KEYS = ("type", "low", "high", "log", "step", "choices", "when")


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
    return read_spec(data, source=path, check_paths=check_paths)


def read_spec(
    data: Mapping[str, Any],
    *,
    source: str | Path | None = None,
    base_dir: Path | None = None,
    check_paths: bool = True,
) -> StudySpec:
    """A parsed spec (TOML data) -> a validated ``StudySpec``: the one way to build one from
    data. ``source`` names the file in errors and anchors relative paths (else ``base_dir``, else
    the working directory); ``check_paths=False`` skips checks that the corpus paths exist (a spec
    read back from a database on another machine)."""
    parser = _Parser(data, source=source, base_dir=base_dir, check_paths=check_paths)
    try:
        return parser.parse()
    except FieldError as exc:
        raise SweepsError(_one_line(f"{parser.label}: {exc.field}: {exc.problem}")) from None


def _keys(cls: type) -> tuple[str, ...]:
    """A type's TOML keys: its fields, less bookkeeping ones (``compare=False``)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.compare)


_T = TypeVar("_T")


def _make(
    cls: type[_T], key: str, values: Mapping[str, Any], rename: Mapping[str, str] | None = None
) -> _T:
    """``cls(**values)``, a ``FieldError`` keyed by where the field sits in the file (``rename``
    maps a field to its TOML key, "" for the table itself: ``sampler = "tpe"``)."""
    try:
        return cls(**values)
    except FieldError as exc:
        field = (rename or {}).get(exc.field, exc.field)
        raise FieldError(".".join(k for k in (key, field) if k), exc.problem) from None


def _table(value: Any, key: str, allowed: Iterable[str]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise FieldError(key, f"must be a table, got {value!r}")
    allowed = tuple(allowed)
    for k in value:
        if k not in allowed:
            hint = closest(k, allowed)
            raise FieldError(
                f"{key}.{k}" if key else k,
                f"unknown key {k!r} in [{key or 'top level'}]"
                + (f" (did you mean {hint!r}?)" if hint else "")
                + f"; allowed: {', '.join(allowed)}",
            )
    return dict(value)


class _Parser:
    """One pass over a spec dict: sections in dependency order, then the cross-checks."""

    def __init__(
        self,
        data: Mapping[str, Any],
        *,
        source: str | Path | None,
        base_dir: Path | None,
        check_paths: bool,
    ) -> None:
        self.data = data
        self.label = str(source) if source is not None else "study spec"
        if base_dir is None:
            base_dir = Path(source).parent if source is not None else Path.cwd()
        self.base_dir = base_dir
        self.check_paths = check_paths

    def parse(self) -> StudySpec:
        top = _table(self.data, "", _TOP_KEYS)
        if "engine" in top:  # its values are checked by the engine that reads them
            _table(top["engine"], "engine", ENGINE_KEYS)
        if "study" not in top:
            raise FieldError("study", "the [study] table is missing; add [study] with name = ...")
        if "corpus" not in top:
            raise FieldError(
                "corpus",
                "the [corpus] table is missing; add [corpus] with "
                "dir = a prepared corpus, or source/synthetic with out",
            )
        # corpus is allowed here (and last) only to be told it belongs in [corpus].
        allowed = [*(n for n in TRAIN_FIELDS if n != "corpus"), "corpus"]
        fixed = {k: normalise(v) for k, v in _table(top.get("fixed", {}), "fixed", allowed).items()}
        defaults = with_default_vocab({**train_defaults(), **fixed})
        space = self.parse_space(top.get("space", {}), fixed)
        check_search(
            space=bool(space),
            ablation="ablation" in top,
            enqueue=bool(top.get("enqueue")),
            scaling="scaling" in top,
            transfer="transfer" in top,
        )
        ablation = scaling = transfer = None
        if "ablation" in top:
            ablation = self.parse_ablation(top["ablation"], defaults)
            check_ablation(ablation, fixed)
        elif "scaling" in top:
            scaling = self.parse_scaling(top["scaling"], fixed, defaults)
        elif "transfer" in top:
            transfer = self.parse_transfer(top["transfer"], fixed, defaults)
        else:
            check_fixed(fixed, space)
            check_bounds(space, fixed)
        enqueue = check_enqueue(self.enqueue_entries(top.get("enqueue", [])), space, fixed)
        limits = self.parse_limits(top.get("limits", {}))
        design = ablation or scaling or transfer
        study = self.parse_study(top["study"], space, design, enqueue, defaults)
        corpus = self.parse_corpus(top["corpus"])
        # StudySpec checks the rules between sections (fixed vs limits, grid vs space, ...).
        return StudySpec(
            study=study,
            corpus=corpus,
            fixed=fixed,
            space=space,
            limits=limits,
            enqueue=enqueue,
            ablation=ablation,
            scaling=scaling,
            transfer=transfer,
            source=Path(self.label) if self.label != "study spec" else None,
            raw=_plain(self.data),
        )

    # --- [study] ---

    def parse_study(
        self,
        value: Any,
        space: tuple[ParamSpec, ...],
        design: Ablation | Scaling | Transfer | None,
        enqueue: tuple[dict[str, Any], ...],
        defaults: dict[str, Any],
    ) -> StudySection:
        t = _table(value, "study", _keys(StudySection))
        if "name" not in t:
            raise FieldError("study.name", 'missing; give the study a name, e.g. name = "vocab"')
        objectives = self.parse_objectives(t.get("objectives", list(DEFAULT_OBJECTIVES)))
        multi = len(objectives) > 1
        sampler = self.parse_sampler(t.get("sampler"), multi, design)
        check_grid(space, sampler.name)  # before counting the grid's points
        pruner = self.parse_pruner(t.get("pruner"), multi, design)
        if "n_trials" in t:
            n_trials = t["n_trials"]
        elif design is not None:
            n_trials = len(design.expand())
        elif sampler.name in GRID_SAMPLERS:
            n_trials = sum(
                1 for _ in itertools.islice(iter_grid(space, defaults), MAX_GRID_POINTS + 1)
            )
            if n_trials > MAX_GRID_POINTS:
                raise FieldError(
                    "study.n_trials",
                    f"missing, and the {sampler.name} grid has "
                    f"more than {MAX_GRID_POINTS} points; set n_trials or coarsen "
                    "the space (step, fewer choices)",
                )
        elif space:
            raise FieldError(
                "study.n_trials", "missing; say how many trials to run, e.g. n_trials = 20"
            )
        else:
            n_trials = len(enqueue)
        return _make(
            StudySection,
            "study",
            {
                "storage": None,
                "seed": None,
                "timeout": None,
                **t,
                "objectives": objectives,
                "sampler": sampler,
                "pruner": pruner,
                "n_trials": n_trials,
            },
        )

    def parse_objectives(self, value: Any) -> tuple[Objective, ...]:
        key = "study.objectives"
        if isinstance(value, (str, Mapping)):
            value = [value]
        if not isinstance(value, list) or not value:
            raise FieldError(key, f'must be a non-empty list such as ["val_bpb"], got {value!r}')
        out = []
        for i, item in enumerate(value):
            where = f"{key}[{i}]"
            rename = {"metric": ""} if isinstance(item, str) else {}
            if isinstance(item, str):
                item = {"metric": item}
            elif not isinstance(item, Mapping):
                raise FieldError(
                    where, f"must be a metric name or {{metric, direction}}, got {item!r}"
                )
            t = _table(item, where, _keys(Objective))
            if "metric" not in t:
                raise FieldError(where, 'missing metric; write {metric = "val_bpb"}')
            metric = t["metric"]
            default = METRICS.get(metric) if isinstance(metric, str) else None
            out.append(_make(Objective, where, {"direction": default, **t}, rename))
        return tuple(out)

    def parse_sampler(
        self, value: Any, multi: bool, design: Ablation | Scaling | Transfer | None
    ) -> SamplerSpec:
        if value is None:
            # Ablation and IsoFLOP trials are all enqueued: the sampler never chooses anything.
            return SamplerSpec("random" if design is not None else "nsga2" if multi else "tpe")
        return self.named("study.sampler", value, SamplerSpec, SAMPLERS)

    def parse_pruner(
        self, value: Any, multi: bool, design: Ablation | Scaling | Transfer | None
    ) -> PrunerSpec:
        if value is None:
            # Optuna's pruners compare one intermediate value; with several objectives only the
            # project's own rules (OOM, collapse, divergence) stop trials early. An IsoFLOP cell
            # is worth its loss at its whole budget, and so is an ablation's arm (a pruner would
            # cut one arm by another's speed): never pruned; the verdicts still stop failures.
            return PrunerSpec("none" if multi or design is not None else "median")
        return self.named("study.pruner", value, PrunerSpec, PRUNERS)

    def named(self, key: str, value: Any, cls: type[_T], names: tuple[str, ...]) -> _T:
        """A sampler or pruner: ``"name"`` or ``{name = "...", option = ...}``."""
        rename = {"name": ""} if isinstance(value, str) else {}
        if isinstance(value, str):
            value = {"name": value}
        t = _table(value, key, _keys(cls))
        if "name" not in t:
            raise FieldError(f"{key}.name", f"missing; use one of: {', '.join(names)}")
        return _make(cls, key, t, rename)

    # --- [corpus] ---

    def parse_corpus(self, value: Any) -> CorpusSpec:
        t = _table(value, "corpus", _CORPUS_KEYS)
        given = [k for k in ("dir", "source", "synthetic") if k in t]
        if len(given) != 1:
            raise FieldError(
                "corpus",
                "give exactly one of dir (a prepared corpus), source (a "
                "Posts.xml or text files) or synthetic = {size, seed}"
                + (f"; got {', '.join(given)}" if given else ""),
            )
        if "dir" in t:
            for k in ("out", "format", "val_fraction"):
                if k in t:
                    raise FieldError(
                        f"corpus.{k}",
                        "only applies with source or synthetic; "
                        "a prepared corpus dir is used as it is",
                    )
            path = self.path(t["dir"], "corpus.dir")
            if self.check_paths and not path.is_dir():
                raise FieldError(
                    "corpus.dir",
                    f"{path} is not a directory; run `sweeps prepare "
                    "... --out DIR` first, or give source and out to prepare it",
                )
            return CorpusSpec(dir=path)
        if "out" not in t:
            raise FieldError(
                "corpus.out",
                'missing; say where to write the prepared corpus, e.g. out = "corpora/history"',
            )
        out = self.path(t["out"], "corpus.out")
        if self.check_paths and out.exists() and not out.is_dir():
            raise FieldError(
                "corpus.out", f"{out} is a file; give a directory for the prepared corpus"
            )
        options: dict[str, Any] = {k: t[k] for k in ("format", "val_fraction") if k in t}
        if "synthetic" in t:
            s = _table(t["synthetic"], "corpus.synthetic", ("size", "seed"))
            if "size" not in s:
                raise FieldError("corpus.synthetic.size", 'missing; e.g. size = "5MB"')
            values = {
                "dir": out,
                "synthetic_size": s["size"],
                "synthetic_seed": s.get("seed", 0),
                **options,
            }
            return _make(
                CorpusSpec,
                "corpus",
                values,
                {"synthetic_size": "synthetic.size", "synthetic_seed": "synthetic.seed"},
            )
        return self.parse_sources(t["source"], out, options)

    def parse_sources(self, value: Any, out: Path, options: dict[str, Any]) -> CorpusSpec:
        raw = [value] if isinstance(value, str) else value
        if not isinstance(raw, list) or not raw:
            raise FieldError("corpus.source", f"must be a path or a list of paths, got {value!r}")
        keys = [
            "corpus.source" if len(raw) == 1 else f"corpus.source[{i}]" for i in range(len(raw))
        ]
        paths = [self.path(s, key) for s, key in zip(raw, keys, strict=True)]
        corpus = _make(
            CorpusSpec, "corpus", {"dir": out, "source": [str(p) for p in paths], **options}
        )
        if self.check_paths:
            for s, key, path in zip(raw, keys, paths, strict=True):
                is_glob = any(c in s for c in "*?[")
                if not is_glob and not path.is_file():
                    raise FieldError(
                        key,
                        f"{path} does not exist; give the path of a "
                        + ("Posts.xml dump" if corpus.format == "posts" else "text file"),
                    )
        return corpus

    def path(self, value: Any, key: str) -> Path:
        if not isinstance(value, str) or not value.strip():
            raise FieldError(key, f"must be a non-empty string, got {value!r}")
        path = Path(value).expanduser()
        # Absolute and normalised: trial children and remote workers may run elsewhere.
        return Path(os.path.abspath(path if path.is_absolute() else self.base_dir / path))

    # --- [space], [[enqueue]], [ablation] ---

    def parse_space(self, value: Any, fixed: dict[str, Any]) -> tuple[ParamSpec, ...]:
        if not isinstance(value, Mapping):
            raise FieldError("space", f"must be tables [space.<field>], got {value!r}")
        params: list[ParamSpec] = []
        for name, body in value.items():
            if name not in TRAIN_FIELDS:
                hint = closest(name, TRAIN_FIELDS)
                raise FieldError(
                    f"space.{name}",
                    f"{name!r} is not a TrainConfig field"
                    + (f" (did you mean {hint!r}?)" if hint else "")
                    + "; search only training config fields",
                )
            params.append(self.parse_param(name, body))
        check_fixed_and_space(fixed, params)
        ordered = order(params)
        check_literals(ordered, fixed)
        return ordered

    def parse_param(self, name: str, body: Any) -> ParamSpec:
        key = f"space.{name}"
        if isinstance(body, list):  # ``[space] d_ff = [64, 256]`` as a shorthand for choices
            body = {"choices": body}
        t = _table(body, key, _PARAM_KEYS)
        if "type" not in t:
            if "choices" in t:
                t["type"] = "categorical"
            elif "low" in t and "high" in t:
                ints = all(
                    isinstance(t[k], int) and not isinstance(t[k], bool) for k in ("low", "high")
                )
                t["type"] = "int" if ints and not isinstance(t.get("step", 1), float) else "float"
            else:
                raise FieldError(
                    key, 'give choices = [...], or low and high (with type = "int" or "float")'
                )
        return _make(ParamSpec, key, {"name": name, **t})

    def enqueue_entries(self, value: Any) -> list[Any]:
        if isinstance(value, Mapping):
            value = [value]
        if not isinstance(value, list):
            raise FieldError("enqueue", f"must be [[enqueue]] tables, got {value!r}")
        return value

    def parse_ablation(self, value: Any, defaults: dict[str, Any]) -> Ablation:
        t = _table(value, "ablation", _keys(Ablation))
        baseline = _table(t.get("baseline", {}), "ablation.baseline", TRAIN_FIELDS)
        if "vary" not in t:
            raise FieldError("ablation.vary", "missing; e.g. vary = {d_ff = [1, 64, 256]}")
        vary = _table(t["vary"], "ablation.vary", TRAIN_FIELDS)
        return _make(
            Ablation,
            "ablation",
            {
                "baseline": {k: normalise(v) for k, v in baseline.items()},
                "vary": tuple(
                    (k, [normalise(x) for x in v] if isinstance(v, list) else v)
                    for k, v in vary.items()
                ),
                "seeds": t.get("seeds"),
                "equal": t.get("equal"),
                "defaults": {**defaults},
            },
        )

    def parse_scaling(self, value: Any, fixed: dict[str, Any], defaults: dict[str, Any]) -> Scaling:
        t = _table(value, "scaling", _keys(Scaling))
        for key in ("budgets", "sizes"):
            if key not in t:
                raise FieldError(
                    f"scaling.{key}",
                    "missing; e.g. budgets = [1e12, 3e12, 1e13] "
                    "and sizes = [{d_model = 32, n_layers = 1}, ...]",
                )
        check_scaling_fixed(t, fixed)
        return _make(Scaling, "scaling", {**t, "defaults": {**defaults}})

    def parse_transfer(
        self, value: Any, fixed: dict[str, Any], defaults: dict[str, Any]
    ) -> Transfer:
        t = _table(value, "transfer", _keys(Transfer))
        for key in ("widths", "lrs"):
            if key not in t:
                raise FieldError(
                    f"transfer.{key}",
                    "missing; e.g. widths = [32, 64, 128, 256] "
                    "and lrs = [0.001, 0.002, 0.004, 0.008]",
                )
        check_transfer_fixed(t, fixed)
        return _make(Transfer, "transfer", {**t, "defaults": {**defaults}})

    # --- [limits] ---

    def parse_limits(self, value: Any) -> Limits:
        t = _table(value, "limits", _keys(Limits))
        for name, cls in (("collapse", CollapseLimits), ("divergence", DivergenceLimits)):
            if name in t and not isinstance(t[name], bool):  # true/false: Limits turns it on/off
                key = f"limits.{name}"
                for old in ("warmup_evals", "warmup_tokens"):
                    if name == "collapse" and isinstance(t[name], dict) and old in t[name]:
                        raise FieldError(
                            f"{key}.{old}",
                            "the verdicts' warm-up is now counted "
                            "in optimizer steps: write min_steps = N instead "
                            "(default 200)",
                        )
                t[name] = _make(cls, key, _table(t[name], key, _keys(cls)))
        return _make(Limits, "limits", t)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _plain(value: Any) -> Any:
    """TOML data as plain JSON-ready values (tomllib gives dates for date literals)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # Scalars kept without a call each: a list of choices may hold 100,000.
        return [v if v.__class__ in _SCALARS else _plain(v) for v in value]
    if value is None or isinstance(value, _SCALARS):
        return value
    return str(value)


_SCALARS = (str, int, float, bool)
