"""What a study would do, worked out without running anything: the ``sweeps run --dry-run`` plan
(devices, budget, the space, the largest point's predicted peak, an IsoFLOP study's grid) and the
feasibility table of ``sweeps estimate SPEC`` (which points of the space fit the budget). Data
only; the CLI prints it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lm import host
from lm.config import TrainConfig
from lm.corpus import MANIFEST_NAME
from lm.errors import SweepsError
from sweeps import arms
from sweeps.console import human_bytes

if TYPE_CHECKING:
    from sweeps.spec import Limits, StudySpec

#: A grid with more points than this is sampled instead (``samples`` points, seeded).
MAX_TABLE_POINTS = 500


# --- the dry-run plan ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where a run's trials would go, as its engine says for the dry run
    (``sweeps.engines.base.Engine.describe``): the device kind the plan predicts for, the
    workers row, the per-trial budget in bytes (None: none, or decided where the trials run)
    with its row, and the engine's other rows (a CPU trial's threads, a Slurm task's requests)."""

    device: str  # cpu | cuda
    workers: str
    budget: int | None
    budget_text: str
    rows: tuple[tuple[str, object], ...] = ()


@dataclass
class DryRunPlan:
    """The plan of ``sweeps run --dry-run``: summary rows, the space, the largest point."""

    rows: list[tuple[str, object]]
    space: list[tuple[str, str, str, str]]  # parameter, type, values, when
    largest: list[tuple[str, object]] | None = field(default=None)
    grid: list[tuple[str, ...]] | None = field(default=None)  # [scaling]: GRID_COLUMNS per cell
    #: Each vocabulary's tokens, text and FLOPs (``sweeps.arms.TABLE_COLUMNS``), when they vary.
    arms: list[tuple[str, ...]] | None = field(default=None)


def dry_run(
    spec: StudySpec,
    url: str,
    workers: int | None,
    n_trials: int | None,
    from_study: str | None = None,
    *,
    placement: Placement | None = None,
    engine: str = "local",
) -> DryRunPlan:
    """The plan; ``workers``: the run's cap on trials at once (None: what the devices hold);
    ``placement``: where the run's engine would put its trials (``Engine.describe``; default:
    this host's pools, the local engine's)."""
    from sweeps.storage import mask_url

    if placement is None:
        placement = host_placement(
            spec, workers, n_trials if n_trials is not None else spec.study.n_trials
        )
    device, budget = placement.device, placement.budget
    corpus = spec.corpus
    corpus_state = (
        "prepared"
        if (corpus.dir / MANIFEST_NAME).is_file()
        else (
            "to prepare from "
            + (
                ", ".join(corpus.source)
                if corpus.source
                else f"synthetic {human_bytes(corpus.synthetic_size or 0)}"
            )
        )
    )
    rows: list[tuple[str, object]] = [
        ("study", spec.name),
        (
            "storage",
            f"{mask_url(url)} ("
            + ("opened read-only for --from" if from_study else "not opened: dry run")
            + ")",
        ),
        ("objectives", ", ".join(f"{o.metric} ({o.direction})" for o in spec.study.objectives)),
        ("sampler / pruner", f"{spec.study.sampler.name} / {spec.study.pruner.name}"),
        ("trials", n_trials if n_trials is not None else spec.study.n_trials),
        ("enqueued first", len(spec.initial_trials())),
        ("timeout", f"{spec.study.timeout:g} s" if spec.study.timeout else "none"),
        *((("engine", engine),) if engine != "local" else ()),
        ("workers", placement.workers),
        *placement.rows,
        ("memory budget", placement.budget_text),
        ("oom policy", spec.limits.oom_policy),
        (
            "max wall per trial",
            f"{spec.limits.max_wall_s:g} s" if spec.limits.max_wall_s else "none",
        ),
        ("corpus", f"{corpus.dir} ({corpus_state})"),
    ]
    found = arms.arms(spec, arms.known)
    rows += arms.rows(spec, found)
    rows += steps_rows(spec)
    rows += fidelity_rows(spec)
    rows += reads_rows(spec)
    if from_study is not None:
        rows += carry_rows(spec, url, from_study)
    grid = None
    if spec.scaling is not None:
        cells = scaling_cells(spec, device, budget)
        rows.append(grid_summary(spec, cells))
        grid = [cell.row() for cell in cells]
    return DryRunPlan(
        rows,
        space_rows(spec),
        _largest_rows(spec, device, budget),
        grid,
        [a.row() for a in found] if arms.worth_showing(spec, found) else None,
    )


def host_placement(
    spec: StudySpec,
    cap: int | None,
    n_trials: int,
    pool_of: Callable[[StudySpec, int | None], Any] | None = None,
) -> Placement:
    """The pools, worker threads, budget and CPU threads ``sweeps run`` takes on this host
    (``admission.host_pool``, or ``pool_of``'s pool; ``workers.worker_threads``;
    ``admission.trial_budget``; ``threads_rows``)."""
    from sweeps import admission
    from sweeps import workers as wk

    try:
        pool = (pool_of or admission.host_pool)(spec, cap)
    except SweepsError:
        if host.visible_gpus():
            raise  # this host has GPUs, not the one asked for (cuda:7): `run` would refuse it
        # A GPU spec is often checked on a laptop before it goes to a cluster: without a GPU
        # here, plan for the spec's device kind and leave an "auto" budget to each worker.
        budget = spec.limits.budget.per_trial(None)
        return Placement(
            "cuda",
            f"{cap or 'as many as fit'} at a time on GPUs (none visible on this host)",
            budget,
            "auto: decided on each worker's GPU (none visible here)"
            if spec.limits.budget.auto
            else budget_text(budget, spec.limits.memory_budget),
        )
    budget = admission.trial_budget(spec.limits, pool)
    first = pool.devices[0]
    return Placement(
        first.kind,
        admission.describe(pool, wk.worker_threads(pool, cap, n_trials)),
        budget,
        budget_text(budget, spec.limits.memory_budget),
        tuple(threads_rows(spec, first.cores[: first.threads])) if first.kind == "cpu" else (),
    )


def threads_rows(
    spec: StudySpec, cores: tuple[int, ...], samples: int = 200, busy: float | None = None
) -> list[tuple[str, object]]:
    """The dry run's line on a CPU trial's threads (``lm.host.trial_threads``, chosen again at
    each launch): how many the points of the space would use on ``cores`` (a trial's cores), and
    the other work on them now (``busy``: measured here when not given)."""
    override = host.num_threads_override()
    if override is not None:
        return [
            (
                "threads per trial",
                f"{min(override, len(cores))} ({host.NUM_THREADS_ENV}={override})",
            )
        ]
    from lm import flops

    points, how = sample_points(spec, samples, 0)
    steps = [
        flops.step_flops(cfg) for p in points or [{}] if (cfg := point_config(spec, p)) is not None
    ]
    if not steps:
        return []
    useful = [min(host.useful_threads(f), len(cores)) for f in steps]
    rule = (
        f"one per {host.FLOPS_PER_THREAD / 1e9:g} GFLOP of a micro-step, at most the "
        f"{len(cores)} core{'s' * (len(cores) > 1)} a trial has less those other work keeps "
        "busy, chosen at each launch"
    )
    span = f"micro-steps of {min(steps) / 1e9:.3g} to {max(steps) / 1e9:.3g} GFLOP"
    more = sum(1 for n in useful if n > 1)
    if not more:
        return [("threads per trial", f"1 for every point of the {how} ({span}); {rule}")]
    if busy is None:
        busy = host.busy_cores(cores)
    free = len(cores) if busy is None else max(1, len(cores) - round(busy))
    now = (
        ""
        if busy is None
        else f"; now {busy:.1f} of them are busy, so those would get {min(max(useful), free)}"
    )
    return [
        (
            "threads per trial",
            f"{more} of {len(useful)} points of the {how} would use up to "
            f"{max(useful)}, the rest 1 ({span}){now}; {rule}",
        )
    ]


def budget_text(budget: int | None, given: object) -> str:
    """The dry run's memory budget row."""
    return "none" if budget is None else f"{human_bytes(budget)} per trial ({given})"


# --- an IsoFLOP grid ([scaling]) ---------------------------------------------------------------

GRID_COLUMNS = ("budget", "size", "N (non-emb.)", "tokens", "tokens/N", "steps", "memory", "flags")


@dataclass
class GridCell:
    """One budget x size of a ``[scaling]`` grid, as planned (each seed trains the same cell)."""

    budget: float
    size: dict[str, Any]
    params_non_embedding: int
    tokens: int
    steps: int
    predicted_bytes: int
    flags: list[str]

    def row(self) -> tuple[str, ...]:
        return (
            f"{self.budget:.3g}",
            " ".join(f"{k}={v}" for k, v in self.size.items()),
            f"{self.params_non_embedding:,}",
            f"{self.tokens:,}",
            f"{self.tokens / self.params_non_embedding:.3g}",
            f"{self.steps:,}",
            human_bytes(self.predicted_bytes),
            "; ".join(self.flags) or "-",
        )


def scaling_cells(spec: StudySpec, device: str, budget: int | None) -> list[GridCell]:
    """Each cell of the grid with what makes it untrainable, flagged before anything runs: fewer
    optimizer steps than ``limits.collapse.min_steps`` or a learning rate summed over them
    below ``min_lr_sum`` (its verdicts cannot be judged), a
    warm-up as long as the run (the learning rate never peaks), or a predicted peak over the
    memory budget (never launched; with ``oom_policy = "fit"`` a fitted batch or checkpointing,
    which changes its FLOPs per token, so it misses its budget)."""
    from lm import flops
    from sweeps import preflight
    from sweeps.space import trial_config
    from sweeps.verdicts import planned_steps, unreachable

    assert spec.scaling is not None
    collapse, out = spec.limits.collapse, []
    cells = spec.scaling.cells
    # expand() is seed-major: its first len(cells) points are the cells, each seed once.
    for point, (cell_budget, size, tokens) in zip(
        spec.scaling.expand()[: len(cells)], cells, strict=True
    ):
        cfg = trial_config(spec, point)
        assert cfg.max_tokens is not None and cfg.warmup_tokens is not None  # resolved
        steps = planned_steps(cfg.max_tokens, cfg.tokens_per_step)
        plan = preflight.plan_trial(cfg, spec.limits, device=device, budget_bytes=budget)
        flags = []
        short = unreachable(cfg, collapse)
        if short is not None:
            flags.append(
                f"{steps} steps < limits.collapse.min_steps = {collapse.min_steps}"
                if short[0] == "min_steps"
                else f"lr summed over its steps {short[1]:.3g} < limits.collapse.min_lr_sum "
                f"= {collapse.min_lr_sum:g}"
            )
        if cfg.max_tokens <= cfg.warmup_tokens:
            flags.append(f"max_tokens <= warmup_tokens = {cfg.warmup_tokens:,}")
        if not plan.fits:
            flags.append("over the memory budget: never launched")
        elif plan.fitted:
            flags.append(
                f"fitted ({', '.join(f'{k}={v}' for k, v in plan.fitted.items())}): off its budget"
            )
        n = flops.count(cfg, 0, n_evals=0).params_non_embedding
        out.append(GridCell(cell_budget, size, n, tokens, steps, plan.predicted_bytes, flags))
    return out


def grid_summary(spec: StudySpec, cells: list[GridCell]) -> tuple[str, object]:
    """The plan's line on the grid: its shape and how many cells are flagged."""
    assert spec.scaling is not None
    s = spec.scaling
    seeds = len(s.seeds) if s.seeds is not None else 1
    flagged = sum(1 for c in cells if c.flags)
    text = (
        f"{len(s.budgets)} budgets x {len(s.sizes)} sizes x {seeds} seed(s) = "
        f"{len(s.budgets) * len(s.sizes) * seeds} trials; "
    )
    text += (
        f"{flagged} of {len(cells)} cells flagged (see the grid): they cannot be trained "
        "honestly, change the budgets, sizes or batch"
        if flagged
        else "no cell flagged"
    )
    return ("IsoFLOP grid", text)


def carry_rows(spec: StudySpec, url: str, from_study: str) -> list[tuple[str, object]]:
    """The plan's lines on ``--from``: how many trials carry over, and why the others do not
    (the database is opened read-only)."""
    from sweeps import warm_start
    from sweeps.storage import read_only_storage

    storage = read_only_storage(url)
    try:
        return warm_start.read(storage, spec, from_study, url).rows()
    finally:
        storage.engine.dispose()


# --- optimizer steps ------------------------------------------------------------------------------


def point_config(spec: StudySpec, point: dict[str, Any]) -> TrainConfig | None:
    """The config one point of the space makes, or None when it makes no valid one."""
    from sweeps.space import trial_config

    try:
        return trial_config(spec, point)
    except SweepsError:
        return None


def point_steps(spec: StudySpec, point: dict[str, Any]) -> int | None:
    """The optimizer steps one point of the space gets from its ``max_tokens``, or None when the
    point makes no valid config."""
    from sweeps.verdicts import planned_steps

    cfg = point_config(spec, point)
    if cfg is None:
        return None
    assert cfg.max_tokens is not None  # resolved (space.trial_config)
    return planned_steps(cfg.max_tokens, cfg.tokens_per_step)


def steps_rows(spec: StudySpec, samples: int = 200) -> list[tuple[str, object]]:
    """The dry run's lines on optimizer steps: their range over the space (its grid, or a
    seeded sample), and the points that cannot be judged: fewer than ``min_steps``, or a
    learning rate summed over their steps below ``min_lr_sum``."""
    from sweeps.verdicts import planned_steps, unreachable

    points, how = sample_points(spec, samples, 0)
    steps = [
        # a trial's config is resolved (space.trial_config): its max_tokens is set
        (p, planned_steps(cfg.max_tokens, cfg.tokens_per_step), cfg)  # type: ignore[arg-type]
        for p in points or [{}]
        if (cfg := point_config(spec, p)) is not None
    ]
    if not steps:
        return []
    low, high = min(n for _, n, _ in steps), max(n for _, n, _ in steps)
    rows: list[tuple[str, object]] = [
        (
            "optimizer steps",
            f"{low:,} to {high:,} per trial over the {how} "
            "(max_tokens / (batch_size x seq_len x grad_accum))",
        )
    ]
    limits = spec.limits.collapse
    unjudged = [(p, short) for p, _, cfg in steps if (short := unreachable(cfg, limits))]
    for limit, title, says in _UNJUDGED:
        hit = [(p, value) for p, (which, value) in unjudged if which == limit]
        if hit:
            point, value = min(hit, key=lambda pv: pv[1])
            rows.append(
                (
                    title,
                    says.format(
                        k=len(hit), n=len(steps), point=_shown(point), value=value, limits=limits
                    ),
                )
            )
    return rows


#: The dry run's line for the points that never reach each limit (``verdicts.unreachable``).
_UNJUDGED = (
    (
        "min_steps",
        "too few steps to judge",
        "{k} of {n} points get fewer than limits.collapse.min_steps = {limits.min_steps} (fewest: "
        "{point}: {value:.0f} steps); they run unjudged, marked under_trained: raise max_tokens or "
        "shrink the batch",
    ),
    (
        "min_lr_sum",
        "too small a rate to judge",
        "{k} of {n} points sum their learning rate over their steps to less than "
        "limits.collapse.min_lr_sum = {limits.min_lr_sum:g} (smallest: {point}: {value:.3g}); "
        "their weights cannot move far enough to tell a collapse from a slow start, so they run "
        "unjudged, marked under_trained: raise lr or max_tokens",
    ),
)


def _shown(point: dict[str, Any]) -> str:
    return (
        " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items())
        or "(fixed only)"
    )


def fidelity_rows(spec: StudySpec, samples: int = 200) -> list[tuple[str, object]]:
    """The dry run's lines on successive halving / Hyperband: the rungs, who goes on, and how
    many optimizer steps the first rung comes after (over the space's grid or a sample)."""
    from sweeps.spec import halving

    p = spec.study.pruner
    if not p.by_tokens:
        return []
    study_rungs = halving.rungs(spec)
    unit = halving.unit(spec)
    shown = ", ".join(f"{r:.3g}" if unit == "flops" else f"{r:,}" for r in study_rungs)
    rows: list[tuple[str, object]] = [
        (
            "rungs",
            f"{shown} {unit}: at each, a trial goes on only among the best "
            f"1/{p.reduction_factor} of the trials that reached it (once "
            f"{p.min_trials or p.reduction_factor} have)",
        )
    ]
    if p.name == "hyperband":
        n = halving.n_brackets(spec, study_rungs)
        rows.append(
            (
                "brackets",
                f"{n}, by trial number (number mod {n}): the k-th bracket is "
                "judged from the k-th rung on, the last one never",
            )
        )
    points, how = sample_points(spec, samples, 0)
    steps = []
    for point in points or [{}]:
        cfg = point_config(spec, point)
        if cfg is not None:
            steps.append(
                max(1, round(halving.rung_tokens(cfg, study_rungs[0]) / cfg.tokens_per_step))
            )
    if steps:
        rows.append(
            ("first rung", f"after {min(steps):,} to {max(steps):,} optimizer steps over the {how}")
        )
    return rows


def reads_rows(spec: StudySpec, samples: int = 200) -> list[tuple[str, object]]:
    """The dry run's line on cooldown reads (a halving study's ``read = "cooldown"``, or
    ``cooldown_reads`` in [fixed]): what each read of the costliest point (over the space's
    grid or a sample) trains, and all of them against the run's own tokens; a read whose
    branch is longer than what its run has left is named (finishing the run costs less)."""
    from lm import flops, schedule

    if (
        spec.study.pruner.read != "cooldown"
        and not spec.sets("cooldown_reads", {})
        and "cooldown_reads" not in spec.param_names
    ):
        return []  # no point reads: not worth a sample
    points, how = sample_points(spec, samples, 0)
    costliest: tuple[int, TrainConfig] | None = None
    for point in points or [{}]:
        cfg = point_config(spec, point)
        if cfg is None or not cfg.cooldown_reads:
            continue
        total = flops.planned_reads(cfg)[1]
        if costliest is None or total > costliest[0]:
            costliest = (total, cfg)
    if costliest is None:
        return []
    total, cfg = costliest
    reads = schedule.read_points(cfg)
    each = ", ".join(f"at {p:,}: {schedule.branch_tokens(cfg, p):,}" for p in reads)
    run = flops.planned_tokens(cfg)
    text = (
        f"{each} tokens (cooldown_fraction {cfg.read_cooldown_fraction:.3g} of the tokens "
        f"before each, whole steps): {total:,} read tokens, {total / run:.0%} on top of the "
        f"run's {run:,}, for the costliest point of the {how}"
    )
    if spec.study.pruner.name == "hyperband":
        text += " (at most: a bracket reads only the rungs it judges)"
    longer = [p for p in reads if schedule.branch_tokens(cfg, p) > run - p]
    if longer:
        text += (
            f"; the read at {longer[0]:,} trains more than the {run - longer[0]:,} tokens "
            "the run has left: finishing the run costs less than that read"
        )
    return [("cooldown reads", text)]


def space_rows(spec: StudySpec) -> list[tuple[str, str, str, str]]:
    """(parameter, type, values, when) for each searched parameter, an ablation's or IsoFLOP
    grid's first; a long list of choices shown by its first few and last (``shown_values``)."""
    from sweeps.spec import shown_values

    out = []
    if spec.design is not None:
        kind = next(k for k in ("ablation", "scaling", "transfer") if getattr(spec, k) is not None)
        for name in spec.design.param_names:
            out.append((name, kind, shown_values(spec.design.choices(name)), ""))
    for p in spec.space:
        if p.type == "categorical":
            values = shown_values(p.choices or ())
        else:
            values = (
                f"{p.low} .. {p.high}"
                + (" log" if p.log else "")
                + (f" step {p.step}" if p.step is not None else "")
            )
        out.append((p.name, p.type, values, p.when.text if p.when else ""))
    return out


def _largest_rows(
    spec: StudySpec, device: str, budget: int | None
) -> list[tuple[str, object]] | None:
    from sweeps import preflight

    point, cfg = largest_point(spec, device)
    if cfg is None:
        return None
    est = preflight.memory_estimate(cfg, device)
    plan = preflight.plan_trial(cfg, spec.limits, device=device, budget_bytes=budget)
    verdict = (
        "fits"
        if plan.fits and not plan.fitted
        else f"fitted: {plan.fitted}"
        if plan.fits
        else "predicted_oom: never launched"
    )
    return [
        ("params", ", ".join(f"{k}={v}" for k, v in point.items()) or "(fixed only)"),
        (
            "predicted peak",
            f"{human_bytes(est.total)} ({device}, peak at {getattr(est, 'peak_moment', '?')})",
        ),
        ("against the budget", f"{verdict}: {plan.reason}"),
    ]


def largest_point(spec: StudySpec, device: str) -> tuple[dict[str, Any], Any]:
    """The point with the largest predicted memory among ``candidate_points``."""
    from sweeps import preflight
    from sweeps.space import trial_config

    best: tuple[int, dict[str, Any], Any] = (-1, {}, None)
    for point in candidate_points(spec):
        try:
            cfg = trial_config(spec, point)
        except SweepsError:
            continue
        total = preflight.memory_estimate(cfg, device).total
        if total > best[0]:
            best = (total, point, cfg)
    return best[1], best[2]


def candidate_points(spec: StudySpec) -> list[dict[str, Any]]:
    """The points a memory bound is taken over: the grid (or the ablation) when it is small,
    else every combination of each parameter's bounds and choices (``[{}]``: fixed only)."""
    import dataclasses
    import itertools

    from sweeps.space import grid_points
    from sweeps.spec import iter_grid

    try:
        points = grid_points(spec, limit=2048)
    except SweepsError:
        corners = [
            dataclasses.replace(
                p,
                type="categorical",
                choices=tuple(p.probe_values()),
                low=None,
                high=None,
                step=None,
                log=False,
            )
            for p in spec.space
        ]
        points = list(itertools.islice(iter_grid(corners, spec.base_values()), 4096))
    return points or [{}]


# --- budgets and the feasibility table -----------------------------------------------------------


def budget_bytes(text: str | None, limits: Limits | None, device: str, workers: int) -> int | None:
    """A ``--budget`` (a size, ``auto`` or ``none``), else the spec's budget, in bytes per trial
    on this host's ``device`` with ``workers`` trials sharing it (``admission.device_budget``)."""
    from sweeps import admission
    from sweeps.spec import Limits, parse_bytes
    from sweeps.spec.limits import MemoryBudget

    if text is None:
        budget = (limits or Limits()).budget
    elif text.lower() in ("none", "auto"):
        budget = MemoryBudget(None if text.lower() == "none" else "auto")
    else:
        budget = MemoryBudget(parse_bytes(text, key="--budget"))
    return admission.device_budget(budget, device, workers)


def sample_points(spec: StudySpec, samples: int, seed: int) -> tuple[list[dict[str, Any]], str]:
    """The space's grid when it is small and finite, else a seeded sample of it."""
    from sweeps.space import grid_points
    from sweeps.spec import walk_one

    try:
        return grid_points(spec, limit=MAX_TABLE_POINTS), "grid"
    except SweepsError:
        pass
    rng = random.Random(seed)
    seen: list[dict[str, Any]] = []
    base = spec.base_values()
    for _ in range(samples * 20):
        if len(seen) >= samples:
            break
        point = walk_one(spec.space, base, lambda p: _draw(p, rng))
        if point not in seen:
            seen.append(point)
    return seen, f"sample of {len(seen)} (seed {seed})"


def _draw(p: Any, rng: random.Random) -> Any:
    if p.type == "categorical":
        return rng.choice(p.choices)  # not list(p.choices): a copy of 100,000 per draw
    if p.finite and p.type == "int" and not p.log:
        return rng.choice(p.values())
    low, high = float(p.low), float(p.high)
    x = math.exp(rng.uniform(math.log(low), math.log(high))) if p.log else rng.uniform(low, high)
    if p.type == "int":
        step = int(p.step or 1)
        return min(int(p.high), int(p.low) + step * round((x - int(p.low)) / step))
    if p.step is not None:
        return round(low + p.step * round((x - low) / p.step), 12)
    return x


def feasibility(
    spec: StudySpec,
    overrides: dict[str, Any],
    budget: str | None,
    workers: int,
    launcher: str,
    samples: int,
    seed: int,
) -> dict[str, Any]:
    """Which points of a spec's space fit its budget: one row per point (its parameters,
    predicted peak, whether it fits or is fitted, or why it is not a valid config)."""
    from sweeps import preflight
    from sweeps.space import trial_config
    from sweeps.verdicts import planned_steps, under_trained_note

    points, how = sample_points(spec, samples, seed)
    rows: list[dict[str, Any]] = []
    budget_b: int | None = None
    for params in points:
        row: dict[str, Any] = {"params": params}
        try:
            cfg = trial_config(spec, params)
            if overrides:
                cfg = overridden(spec, params, cfg, overrides)
        except SweepsError as exc:
            row.update(valid=False, reason=str(exc))
            rows.append(row)
            continue
        device = host.device_kind(cfg.device)
        assert cfg.max_tokens is not None  # resolved (space.trial_config)
        if budget_b is None:
            budget_b = budget_bytes(budget, spec.limits, device, workers)
        plan = preflight.plan_trial(
            cfg, spec.limits, device=device, budget_bytes=budget_b, launcher=launcher
        )
        row.update(
            valid=True,
            device=device,
            predicted_bytes=plan.predicted_bytes,
            fits=plan.fits,
            fitted=plan.fitted,
            reason=plan.reason,
            steps=planned_steps(cfg.max_tokens, cfg.tokens_per_step),
            under_trained=under_trained_note(cfg, spec.limits.collapse) is not None,
        )
        rows.append(row)
    return {
        "study": spec.name,
        "points": how,
        "budget_bytes": budget_b,
        "oom_policy": spec.limits.oom_policy,
        "fit": sum(1 for r in rows if r.get("fits")),
        "min_steps": spec.limits.collapse.min_steps,
        "min_lr_sum": spec.limits.collapse.min_lr_sum,
        "under_trained": sum(1 for r in rows if r.get("under_trained")),
        "rows": rows,
    }


def overridden(
    spec: StudySpec, params: dict[str, Any], cfg: TrainConfig, overrides: dict[str, Any]
) -> TrainConfig:
    """A point's config with ``sweeps estimate SPEC``'s ``--<field>`` flags: a ``--vocab-size``
    checked as the flag it is (its fix names the flag), and a ``vocab_size`` that neither the
    spec, the point nor a flag sets following a ``--tokenizer`` flag, as everywhere."""
    from lm.tokenizers import validate_tokenizer_args

    values = {**cfg.to_dict(), **overrides}
    if "vocab_size" in overrides:
        validate_tokenizer_args(
            values["tokenizer"], values["vocab_size"], values["lowercase"], key="--vocab-size"
        )
    elif not spec.sets("vocab_size", params):
        values["vocab_size"] = None
    return TrainConfig.from_dict(values)
