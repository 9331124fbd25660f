"""A study spec's search space in Optuna's terms, and a trial's parameters as a ``TrainConfig``.

Parameters are suggested in ``spec.space`` order, which puts every field a condition reads before
the parameter it guards; a conditional parameter is suggested only when its condition holds for
the values known at that point (``[fixed]``, ``TrainConfig`` defaults, earlier parameters), so
Optuna never records a value that the trial does not use. An ablation's or an IsoFLOP grid's
trials are all enqueued (``StudySpec.design``): its "space" is one categorical per parameter of
its expansion (a grid's: ``flops_budget``, the size fields, ``max_tokens`` and ``seed``), so Optuna
can store and show them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial

from lm import budget
from lm.config import BUDGET_UNITS, BUDGETS, TrainConfig
from lm.errors import SweepsError
from lm.tokens import TextRate
from sweeps.spec import MAX_GRID_POINTS, ParamSpec, StudySpec, halving, iter_grid, walk_one

ConstraintsFunc = Callable[[FrozenTrial], Sequence[float]]


def distribution(param: ParamSpec) -> BaseDistribution:
    """The Optuna distribution of one ``[space.<field>]``."""
    if param.type == "categorical":
        return CategoricalDistribution(list(param.choices or ()))
    assert param.low is not None and param.high is not None  # a range has both (ParamSpec)
    if param.type == "int":
        return IntDistribution(
            int(param.low), int(param.high), log=param.log, step=int(param.step or 1)
        )
    return FloatDistribution(
        float(param.low),
        float(param.high),
        log=param.log,
        step=None if param.step is None else float(param.step),
    )


def distributions(spec: StudySpec) -> dict[str, BaseDistribution]:
    """Every parameter's distribution (conditional ones included), for ``enqueue_trial``,
    ``add_trial`` and tables of the space."""
    if spec.design is not None:
        return {
            name: CategoricalDistribution(list(spec.design.choices(name)))
            for name in spec.design.param_names
        }
    return {p.name: distribution(p) for p in spec.space}


def suggest(trial: optuna.Trial, spec: StudySpec) -> dict[str, Any]:
    """Ask ``trial`` for this spec's parameters; returns only those the trial uses.

    Enqueued and re-queued trials get their stored values back from Optuna (``suggest_*``
    returns a fixed or already-set parameter), so the same call serves every kind of trial.
    """
    if spec.design is not None:
        return {
            name: trial.suggest_categorical(name, list(spec.design.choices(name)))
            for name in spec.design.param_names
        }
    return walk_one(spec.space, spec.base_values(), lambda p: suggest_one(trial, p))


def suggest_one(trial: optuna.Trial, p: ParamSpec) -> Any:
    """Ask ``trial`` for the value of one ``[space.<field>]``."""
    if p.type == "categorical":
        return trial.suggest_categorical(p.name, list(p.choices or ()))
    assert p.low is not None and p.high is not None  # a range has both (ParamSpec)
    if p.type == "int":
        return trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
    return trial.suggest_float(p.name, float(p.low), float(p.high), step=p.step, log=p.log)


#: Where a trial's bytes per token come from (``lm.budget``): a function of its config.
Rates = Callable[[TrainConfig], TextRate]


def measured(cfg: TrainConfig) -> TextRate:
    """The trial's rate on the token cache, built if needed (a trial that launches builds it
    anyway): what a run's budget in bytes is worked out with."""
    return budget.corpus_rate(cfg, build=True)


def known(cfg: TrainConfig) -> TextRate:
    """The rate from a token cache that exists, else a guess: for plans and checks, which
    build nothing."""
    return budget.corpus_rate(cfg, build=False)


def trial_config(spec: StudySpec, params: dict[str, Any], rates: Rates = known) -> TrainConfig:
    """``TrainConfig`` of one trial: defaults, ``[fixed]`` (or the ablation baseline), the
    corpus, then ``params`` (``StudySpec.trial_values``: an IsoFLOP cell's ``flops_budget`` is
    not a config field), an ablation's budgets in the unit it compares at (``equal_values``),
    its token counts worked out (``lm.budget.resolve``, with ``rates``: ``measured`` for a trial
    that runs) and a halving study's cooldown reads. Raises ``SweepsError`` for a combination
    the config rejects."""
    known_names = set(spec.param_names)
    unknown = sorted(set(params) - known_names)
    if unknown:
        raise SweepsError(
            f"study {spec.name!r}: parameter {unknown[0]!r} is not in its space "
            f"({', '.join(sorted(known_names)) or 'empty'}); was the spec changed "
            "after the study started?"
        )
    try:
        values = equal_values(spec, spec.trial_values(params), rates)
        # TrainConfig checks the tokenizer's arguments too (lm.tokenizers).
        cfg = TrainConfig.from_dict(values)
        cfg = budget.resolve(cfg, rates(cfg) if budget.needs_text(cfg) else None)
        if spec.study.pruner.read == "cooldown":
            cfg = dataclasses.replace(cfg, **cooldown_values(spec, cfg))
    except SweepsError as exc:
        shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
        raise SweepsError(f"study {spec.name!r}, params {shown or '(none)'}: {exc}") from None
    return cfg


def equal_values(spec: StudySpec, values: dict[str, Any], rates: Rates) -> dict[str, Any]:
    """An ablation's trial values with each budget given in tokens re-expressed in the unit its
    arms are compared at (``Ablation.equal_unit``: bytes of text when it varies the vocabulary),
    at the baseline's rate: the baseline trains what the spec says, and every other arm the
    same text (or compute). Other studies' values are returned as they are."""
    unit = spec.ablation.equal_unit if spec.ablation is not None else "tokens"
    if unit == "tokens":
        return values
    base = TrainConfig.from_dict(spec.base_values())
    base = budget.resolve(base, rates(base) if budget.needs_text(base) else None)
    rate = rates(base) if unit == "bytes" else None
    out = dict(values)
    for quantity, fields in BUDGETS.items():
        target = fields[BUDGET_UNITS.index(unit)]
        tokens = values.get(fields[0])
        if target is None or any(values.get(f) is not None for f in fields[1:] if f):
            continue  # no field in that unit, or given in another unit already
        if tokens is None:
            tokens = getattr(base, fields[0])  # the default, in tokens
        if quantity == "eval":
            assert rate is not None
            converted: float = round(tokens * rate.val)
        else:
            per = budget.tokens_per(base, unit, rate)
            converted = round(tokens * per) if unit == "bytes" else float(tokens * per)
        out[fields[0]] = None
        out[target] = converted
    return out


def cooldown_values(spec: StudySpec, cfg: TrainConfig) -> dict[str, Any]:
    """The config fields of a halving study that reads its rungs after a cooldown: a read at
    every rung below the trial's budget (the runner keeps its bracket's), at the rung's tokens
    for this trial; the pruner's ``cooldown_fraction`` when set."""
    reads = [
        halving.rung_tokens(cfg, r)
        for r in halving.rungs(spec)
        if r < budget.max_amount(cfg, halving.unit(spec))
    ]
    step = cfg.tokens_per_step  # a read is taken at the first step boundary at or past it
    assert cfg.max_tokens is not None  # resolved (lm.budget)
    out: dict[str, Any] = {
        "cooldown_reads": sorted(set(t for t in reads if -(-t // step) * step < cfg.max_tokens))
    }
    if spec.study.pruner.cooldown_fraction is not None:
        out["cooldown_fraction"] = spec.study.pruner.cooldown_fraction
    return out


def grid_points(spec: StudySpec, limit: int | None = None) -> list[dict[str, Any]]:
    """Every point of the space (conditions respected, no repeats), or the ablation's or IsoFLOP
    grid's list.

    For grid/bruteforce samplers and feasibility tables. A float range without ``step`` has no
    grid (SweepsError). ``limit``: more points than this is a SweepsError, not a long wait.
    """
    if spec.design is not None:
        points = spec.design.expand()
    else:
        for p in spec.space:
            if not p.finite:
                raise SweepsError(
                    f"space.{p.name}: a float range has no grid; give step or use choices"
                )
        cap = MAX_GRID_POINTS if limit is None else limit
        points = list(itertools.islice(iter_grid(spec.space, spec.base_values()), cap + 1))
        if len(points) > cap:
            raise SweepsError(
                f"study {spec.name!r}: the space has more than {cap} grid points; "
                "coarsen it (step, fewer choices) or use a sampler"
            )
    if limit is not None and len(points) > limit:
        raise SweepsError(f"study {spec.name!r}: {len(points)} points is more than {limit}")
    return points


def grid_search_space(spec: StudySpec) -> dict[str, list[Any]]:
    """Each parameter's values, the input of ``optuna.samplers.GridSampler``."""
    space = {p.name: p.values() for p in spec.space}  # lazy: only their lengths so far
    size = math.prod(len(v) for v in space.values())
    if size > MAX_GRID_POINTS:
        raise SweepsError(
            f"study {spec.name!r}: the grid has {size} points (more than "
            f"{MAX_GRID_POINTS}); coarsen it or use another sampler"
        )
    return {name: list(values) for name, values in space.items()}


#: What builds a sampler: the spec, and the constraints (trial -> values, > 0 = infeasible) for
#: the samplers that learn from them.
SamplerBuilder = Callable[[StudySpec, ConstraintsFunc | None], optuna.samplers.BaseSampler]


def _startup(spec: StudySpec) -> int:
    """Random trials before a model-based sampler models (Optuna's default, 10, unless set)."""
    n = spec.study.sampler.n_startup_trials
    return 10 if n is None else n


def _tpe(spec: StudySpec, constraints_func: ConstraintsFunc | None) -> optuna.samplers.TPESampler:
    s = spec.study.sampler
    conditional = any(p.when is not None for p in spec.space)
    return optuna.samplers.TPESampler(
        seed=spec.study.seed,
        n_startup_trials=_startup(spec),
        multivariate=s.multivariate,
        # Conditional spaces need group=True for the multivariate model to apply.
        group=s.multivariate and conditional,
        # Parallel workers: count running trials as bad so they spread out.
        constant_liar=True,
        constraints_func=constraints_func,
    )


def _gp(spec: StudySpec, constraints_func: ConstraintsFunc | None) -> optuna.samplers.GPSampler:
    # Gaussian-process Bayesian optimisation (torch and scipy). It models the completed trials
    # (and the running ones, so parallel workers spread out) and nothing else: a trial the
    # verdicts or a pruner stopped is invisible to it, so it can propose the same failing region
    # again (measured: studies/README.md, search efficiency).
    require_scipy("gp")
    return optuna.samplers.GPSampler(
        seed=spec.study.seed,
        n_startup_trials=_startup(spec),
        constraints_func=constraints_func,
        warn_independent_sampling=False,
    )


def _nsga2(
    spec: StudySpec, constraints_func: ConstraintsFunc | None
) -> optuna.samplers.NSGAIISampler:
    # Optuna's default population (50) makes a 12-trial study pure random search.
    population = spec.study.sampler.population_size or max(4, min(50, spec.study.n_trials // 4))
    return optuna.samplers.NSGAIISampler(
        seed=spec.study.seed, population_size=population, constraints_func=constraints_func
    )


def _random(spec: StudySpec, _: ConstraintsFunc | None) -> optuna.samplers.RandomSampler:
    return optuna.samplers.RandomSampler(seed=spec.study.seed)


def _qmc(spec: StudySpec, _: ConstraintsFunc | None) -> optuna.samplers.QMCSampler:
    require_scipy("qmc")
    s = spec.study.sampler
    return optuna.samplers.QMCSampler(
        qmc_type=s.qmc_type,
        scramble=s.scramble,
        seed=spec.study.seed,
        warn_independent_sampling=False,
        warn_asynchronous_seeding=False,
    )


def _grid(spec: StudySpec, _: ConstraintsFunc | None) -> optuna.samplers.GridSampler:
    return _GridSampler(grid_search_space(spec), seed=spec.study.seed)


def _bruteforce(spec: StudySpec, _: ConstraintsFunc | None) -> optuna.samplers.BruteForceSampler:
    # Strict exhaustive search: with several workers the loose criterion can stop early.
    return _BruteForceSampler(seed=spec.study.seed, avoid_premature_stop=True)


#: The samplers by the name a spec gives them (``[study] sampler``), each with what builds it.
#: The spec's vocabulary (``sweeps.spec.values.SAMPLERS``, which the reader, the types and the
#: JSON schema check names against) lists the same names in the same order: the spec sits
#: below Optuna and cannot import this table, so ``tests/sweeps/test_spec.py`` holds the two
#: equal. A new sampler is a builder here and its name there.
SAMPLERS: dict[str, SamplerBuilder] = {
    "tpe": _tpe,
    "gp": _gp,
    "nsga2": _nsga2,
    "random": _random,
    "qmc": _qmc,
    "grid": _grid,
    "bruteforce": _bruteforce,
}


def make_sampler(
    spec: StudySpec, constraints_func: ConstraintsFunc | None = None
) -> optuna.samplers.BaseSampler:
    """The spec's sampler (``SAMPLERS``). ``constraints_func`` (trial -> values, > 0 =
    infeasible) goes to the samplers that learn from it (TPE, NSGA-II, GP), so OOM regions stop
    being proposed."""
    name = spec.study.sampler.name
    build = SAMPLERS.get(name)
    if build is None:  # the spec checked the name: a name there without a builder here
        raise SweepsError(f"unknown sampler {name!r}; use one of: {', '.join(SAMPLERS)}")
    with warnings.catch_warnings():
        # multivariate/group/constant_liar are "experimental" in Optuna and warn on every
        # construction; they are deliberate here. Optuna 5 deprecates constraints_func in favour
        # of ``Trial.set_constraint`` (which TPE and NSGA-II read without any hook); the hook
        # still works and keeps Optuna 4 supported.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message=".*constraints_func", category=FutureWarning)
        return build(spec, constraints_func)


class _StopOutsideOptimize:
    """Grid and brute-force samplers call ``study.stop()`` once the grid is done, which raises
    ``RuntimeError`` outside ``study.optimize``, i.e. in the runner's ask/tell loop (the trial's
    state is stored first, but ``tell`` would still raise). The runner stops at ``n_trials`` (the
    grid size by default), so the stop request can be dropped there."""

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: Any, values: Sequence[float] | None
    ) -> None:
        try:
            super().after_trial(study, trial, state, values)  # type: ignore[misc]
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise


class _GridSampler(_StopOutsideOptimize, optuna.samplers.GridSampler):
    pass


class _BruteForceSampler(_StopOutsideOptimize, optuna.samplers.BruteForceSampler):
    pass


def require_scipy(sampler: str) -> None:
    """Optuna's QMC and GP samplers import scipy."""
    import importlib.util

    if importlib.util.find_spec("scipy") is None:
        raise SweepsError(
            f"sampler {sampler!r} needs scipy, which is not installed; "
            '`pip install scipy`, or use sampler = "random" or "tpe"'
        )


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """The spec's Optuna pruner; steps are evaluation indices. None (``NopPruner``) with several
    objectives (Optuna's pruners compare a single value) and for the pruners on tokens, which
    the runner applies itself (``sweeps.fidelity``); the project's own rules always apply."""
    p = spec.study.pruner
    if spec.study.multi_objective or p.name == "none" or p.by_tokens:
        return optuna.pruners.NopPruner()
    if p.name == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=p.n_startup_trials, n_warmup_steps=p.n_warmup_evals
        )
    raise SweepsError(f"unknown pruner {p.name!r}")  # unreachable: the spec checked it
