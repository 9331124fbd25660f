"""Learning-rate transfer across widths (``[transfer]`` studies) on plain frames: does the best
learning rate stay put as the model widens (µP's promise), or drift (SP's habit)?

1. ``curves``: per parametrization and width, each learning rate's losses by seed (the study's
   objective, val_bpb by default). A **diverged** trial is a result, not a gap: its loss is
   ``+inf``, worse than any finite loss, so a learning rate where any seed diverged is never the
   optimum and is never interpolated through (a complete trial with a non-finite loss counts the
   same). Other endings (OOM, collapse, timeout, crash, ...) have no loss at the budget: counted
   as failed and left out; queued and running trials are counted as pending.
2. ``optimum_log2``: the grid point with the lowest mean loss, refined by a parabola in log2(lr)
   through it and its two neighbours (its vertex, kept between them). A minimum at the grid's
   edge, or beside a diverged neighbour, stays at its grid point: at the edge it is *unbracketed*
   (the optimum may lie beyond the grid), beside a divergence it is bracketed by it.
3. The interval: a percentile bootstrap over seeds (``scipy.stats.bootstrap``; each learning
   rate's seeds resampled with replacement, independently, and the optimum refitted). The
   **drift** is log2(optimum at the widest width) - log2(optimum at the narrowest), in octaves,
   with the same bootstrap over both widths' seeds.
4. The verdict (``verdict``), at ``stats.CONFIDENCE``: **transfers** when the drift's interval
   lies within +-``TOLERANCE_OCTAVES`` (one octave, a factor 2 in lr); **does not** when it lies
   wholly beyond it (above +1 or below -1); else **cannot tell** (too wide an interval, one seed,
   an optimum missing or unbracketed at either end: extend the grid or add seeds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lm import outcomes
from lm.errors import SweepsError
from sweeps import record as rc
from sweeps.stats import CONFIDENCE

#: The drift, in octaves, within which a learning rate is said to transfer.
TOLERANCE_OCTAVES = 1.0
#: Bootstrap resamples for each interval.
BOOTSTRAP = 1000
#: Endings that are results: the learning rate is too high (loss taken as +inf).
DIVERGED_OUTCOMES = (outcomes.DIVERGED,)
PENDING_OUTCOMES = (outcomes.RUNNING, outcomes.WAITING)
#: Trials that do not count at all: stopped from outside and queued again.
IGNORED_OUTCOMES = (outcomes.INTERRUPTED,)
TRANSFERS, DOES_NOT, CANNOT_TELL = "transfers", "does not", "cannot tell"
#: What a curve counts of its trials (``Curve``'s fields of the same names).
COUNTS = ("trials", outcomes.COMPLETE, outcomes.DIVERGED, "failed", "pending")


@dataclass(frozen=True)
class Curve:
    """One parametrization at one width: the losses by learning rate and their optimum."""

    parametrization: str
    width: int
    lrs: tuple[float, ...]
    #: Per learning rate, its seeds' losses (``inf``: diverged).
    losses: tuple[tuple[float, ...], ...]
    trials: int = 0
    complete: int = 0
    diverged: int = 0
    failed: int = 0
    pending: int = 0
    lr_opt: float | None = None
    interval: tuple[float, float] | None = None  # of lr_opt
    loss_opt: float | None = None
    #: The optimum is a grid point at the grid's edge: the true one may lie beyond.
    unbracketed: bool = False
    note: str | None = None

    @property
    def means(self) -> np.ndarray:
        """Each learning rate's mean loss over its seeds (``inf`` when any seed diverged)."""
        return np.array([_mean(s) for s in self.losses], dtype=float)

    def to_dict(self) -> dict[str, Any]:
        return {
            "parametrization": self.parametrization,
            "width": self.width,
            "lrs": list(self.lrs),
            "mean_losses": [_json_number(v) for v in self.means],
            "lr_opt": self.lr_opt,
            "interval": list(self.interval) if self.interval is not None else None,
            "loss_opt": self.loss_opt,
            "unbracketed": self.unbracketed,
            **{k: getattr(self, k) for k in COUNTS},
            "note": self.note,
        }


@dataclass(frozen=True)
class Drift:
    """One parametrization's drift: octaves from the narrowest width's optimum to the widest's."""

    parametrization: str
    narrow: int
    wide: int
    octaves: float | None
    interval: tuple[float, float] | None
    verdict: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "parametrization": self.parametrization,
            "narrow": self.narrow,
            "wide": self.wide,
            "octaves": self.octaves,
            "interval": list(self.interval) if self.interval is not None else None,
            "verdict": self.verdict,
            "why": self.why,
        }


@dataclass(frozen=True)
class TransferFit:
    """Everything the chart draws and ``sweeps transfer drift`` prints."""

    metric: str
    curves: list[Curve]
    drifts: list[Drift]
    confidence: float = CONFIDENCE
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "confidence": self.confidence,
            "tolerance_octaves": TOLERANCE_OCTAVES,
            "curves": [c.to_dict() for c in self.curves],
            "drifts": [d.to_dict() for d in self.drifts],
            "notes": list(self.notes),
        }


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def _json_number(value: float) -> float | str | None:
    if math.isnan(value):
        return None
    return value if math.isfinite(value) else "inf"


# --- the optimum of one curve -------------------------------------------------------------------


def optimum_log2(x: np.ndarray, means: np.ndarray) -> tuple[float | None, bool]:
    """(log2 of the optimal learning rate, unbracketed) from the grid ``x`` (log2 lr, sorted)
    and each point's mean loss (``inf``: diverged; ``nan``: no result, skipped). None when no
    point has a finite loss."""
    keep = ~np.isnan(means)
    x, means = x[keep], means[keep]
    if not np.isfinite(means).any():
        return None, False
    i = int(np.argmin(means))  # inf is never the minimum while a finite loss exists
    if i == 0 or i == len(x) - 1:
        return float(x[i]), True
    xs, ys = x[i - 1 : i + 2], means[i - 1 : i + 2]
    if not np.isfinite(ys).all():
        return float(x[i]), False  # bracketed by a divergence: nothing to interpolate through
    a, b, _ = np.polyfit(xs, ys, 2)
    if not a > 0:  # ties: a flat or degenerate parabola has no vertex worth quoting
        return float(x[i]), False
    return float(np.clip(-b / (2 * a), xs[0], xs[-1])), False


def _bootstrap(
    samples: list[np.ndarray], statistic: Any, resamples: int, seed: int
) -> tuple[float, float] | None:
    """The percentile interval of ``statistic(*samples)`` with each sample resampled on its own
    (``scipy.stats.bootstrap``); None when a sample has fewer than two seeds."""
    from scipy import stats

    if any(len(s) < 2 for s in samples):
        return None
    result = stats.bootstrap(
        tuple(samples),
        statistic,
        n_resamples=resamples,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=False,
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    return float(low), float(high)


def _statistic(x: np.ndarray) -> Any:
    """The optimum (log2 lr) of resampled seeds; an unresolvable resample gives nan."""

    def stat(*samples: np.ndarray) -> float:
        value, _ = optimum_log2(x, np.array([np.mean(s) for s in samples], dtype=float))
        return math.nan if value is None else value

    return stat


def fit_curve(
    parametrization: str,
    width: int,
    by_lr: dict[float, list[float]],
    counts: dict[str, int] | None = None,
    *,
    resamples: int = BOOTSTRAP,
    seed: int = 0,
) -> Curve:
    """One curve's optimum and its interval from each learning rate's seed losses."""
    lrs = tuple(sorted(lr for lr, v in by_lr.items() if v))
    losses = tuple(tuple(by_lr[lr]) for lr in lrs)
    n = counts or {}
    base = _with(Curve(parametrization, width, lrs, losses), **{k: n.get(k, 0) for k in COUNTS})
    if len(lrs) < 3:
        return _with(base, note=f"{len(lrs)} learning rate(s) with a result: a fit needs three")
    x = np.log2(np.array(lrs))
    value, unbracketed = optimum_log2(x, base.means)
    if value is None:
        return _with(base, note="every learning rate diverged")
    samples = [np.array(s, dtype=float) for s in losses]
    interval = _bootstrap(samples, _statistic(x), resamples, seed)
    note = None
    if unbracketed:
        note = "the optimum is at the edge of the learning-rate grid: extend lrs past it"
    elif interval is None:
        note = "one seed at some learning rate: no interval (add seeds)"
    finite = base.means[np.isfinite(base.means)]
    return _with(
        base,
        lr_opt=2.0**value,
        interval=None if interval is None else (2.0 ** interval[0], 2.0 ** interval[1]),
        loss_opt=float(finite.min()),
        unbracketed=unbracketed,
        note=note,
    )


def _with(curve: Curve, **changes: Any) -> Curve:
    import dataclasses

    return dataclasses.replace(curve, **changes)


# --- the drift and its verdict ------------------------------------------------------------------


def verdict(interval: tuple[float, float] | None) -> str:
    """The rule: the drift's interval (octaves) within +-``TOLERANCE_OCTAVES``: transfers;
    wholly beyond it: does not; otherwise (or no interval): cannot tell."""
    if interval is None:
        return CANNOT_TELL
    low, high = interval
    if low >= -TOLERANCE_OCTAVES and high <= TOLERANCE_OCTAVES:
        return TRANSFERS
    if low > TOLERANCE_OCTAVES or high < -TOLERANCE_OCTAVES:
        return DOES_NOT
    return CANNOT_TELL


def drift(narrow: Curve, wide: Curve, *, resamples: int = BOOTSTRAP, seed: int = 0) -> Drift:
    """Octaves from ``narrow``'s optimum to ``wide``'s (positive: the wide model wants a larger
    learning rate), its bootstrap interval over both widths' seeds, and the verdict."""
    p = narrow.parametrization
    for c in (narrow, wide):
        if c.lr_opt is None:
            why = f"no optimum at width {c.width} ({c.note})"
            return Drift(p, narrow.width, wide.width, None, None, CANNOT_TELL, why)
    assert narrow.lr_opt is not None and wide.lr_opt is not None
    octaves = math.log2(wide.lr_opt) - math.log2(narrow.lr_opt)
    edge = [c.width for c in (narrow, wide) if c.unbracketed]
    if edge:
        why = (
            f"the optimum at width {edge[0]} is at the edge of the learning-rate grid "
            "(it may lie beyond): extend lrs"
        )
        return Drift(p, narrow.width, wide.width, octaves, None, CANNOT_TELL, why)
    xw, xn = np.log2(np.array(wide.lrs)), np.log2(np.array(narrow.lrs))
    k = len(wide.lrs)

    def stat(*samples: np.ndarray) -> float:
        a, _ = optimum_log2(xw, np.array([np.mean(s) for s in samples[:k]], dtype=float))
        b, _ = optimum_log2(xn, np.array([np.mean(s) for s in samples[k:]], dtype=float))
        return math.nan if a is None or b is None else a - b

    samples = [np.array(s, dtype=float) for s in (*wide.losses, *narrow.losses)]
    interval = _bootstrap(samples, stat, resamples, seed)
    said = verdict(interval)
    if interval is None:
        why = "one seed at some learning rate: no interval (add seeds)"
    else:
        rule = f"+-{TOLERANCE_OCTAVES:g} octave"
        why = {
            TRANSFERS: f"the {CONFIDENCE:.0%} interval lies within {rule}",
            DOES_NOT: f"the {CONFIDENCE:.0%} interval lies beyond {rule}",
            CANNOT_TELL: f"the {CONFIDENCE:.0%} interval straddles {rule}: add seeds or widths",
        }[said]
    return Drift(p, narrow.width, wide.width, octaves, interval, said, why)


# --- a study's trials ---------------------------------------------------------------------------


def curves(
    trials: pd.DataFrame, metric: str = "val_bpb", *, resamples: int = BOOTSTRAP, seed: int = 0
) -> list[Curve]:
    """Every (parametrization, width) curve of a study's trials (columns ``parametrization``,
    ``d_model``, ``lr``, ``outcome`` and ``metric``), parametrizations in order of appearance,
    widths increasing."""
    need = ("parametrization", "d_model", "lr", "outcome", metric)
    missing = [c for c in need if c not in trials]
    if missing or trials.empty:
        return []
    frame = trials[~trials["outcome"].isin(IGNORED_OUTCOMES)]
    frame = frame.assign(parametrization=frame["parametrization"].fillna("sp"))
    frame = frame[frame["d_model"].notna() & frame["lr"].notna()]
    out = []
    for (p, width), group in frame.groupby(["parametrization", "d_model"], sort=False):
        by_lr: dict[float, list[float]] = {float(lr): [] for lr in group["lr"]}
        counts = {**dict.fromkeys(COUNTS, 0), "trials": len(group)}
        for lr, ending, loss in zip(group["lr"], group["outcome"], group[metric], strict=True):
            value = float(loss) if pd.notna(loss) else math.nan
            if ending in PENDING_OUTCOMES:
                counts["pending"] += 1
            elif ending in DIVERGED_OUTCOMES or (
                ending == outcomes.COMPLETE and not math.isfinite(value)
            ):
                counts[outcomes.DIVERGED] += 1
                by_lr[float(lr)].append(math.inf)
            elif ending == outcomes.COMPLETE:
                counts[outcomes.COMPLETE] += 1
                by_lr[float(lr)].append(value)
            else:
                counts["failed"] += 1
        out.append(fit_curve(str(p), int(width), by_lr, counts, resamples=resamples, seed=seed))
    order = {p: i for i, p in enumerate(dict.fromkeys(c.parametrization for c in out))}
    return sorted(out, key=lambda c: (order[c.parametrization], c.width))


def fit_transfer(
    trials: pd.DataFrame, metric: str = "val_bpb", *, resamples: int = BOOTSTRAP, seed: int = 0
) -> TransferFit:
    """The curves and, per parametrization with two widths or more, the drift from its
    narrowest width to its widest."""
    found = curves(trials, metric, resamples=resamples, seed=seed)
    drifts, notes = [], []
    for p in dict.fromkeys(c.parametrization for c in found):
        mine = [c for c in found if c.parametrization == p]
        if len(mine) < 2:
            notes.append(f"{p}: one width only, no drift")
            continue
        drifts.append(drift(mine[0], mine[-1], resamples=resamples, seed=seed))
    if not found:
        notes.append(f"no trial has a parametrization, d_model, lr and {metric}")
    return TransferFit(metric, found, drifts, notes=notes)


def metric_of(objectives: Sequence[str], directions: Sequence[str], trials: pd.DataFrame) -> str:
    """The loss the optima are read from: the study's first objective when it is a minimised
    column of the trials, else val_bpb."""
    if objectives and directions and directions[0] == "minimize" and objectives[0] in trials:
        return objectives[0]
    return "val_bpb"


def is_transfer_study(user_attrs: dict[str, Any]) -> bool:
    """Whether the study's stored spec has a ``[transfer]`` table."""
    spec = user_attrs.get(rc.STUDY_SPEC)
    return isinstance(spec, dict) and "transfer" in spec


def study_transfer(
    storage: Any, name: str, *, metric: str | None = None, seed: int = 0
) -> TransferFit:
    """The transfer fit of a stored study (``sweeps transfer drift``); ``SweepsError`` when it
    is no transfer study or has no trial to fit yet."""
    from sweeps import results

    data = results.load(storage, name)
    if not is_transfer_study(data.user_attrs):
        raise SweepsError(
            f"study {name!r} is not a transfer study (its spec has no [transfer] table); "
            "run one such as studies/transfer.toml"
        )
    if metric is not None and metric not in data.trials:
        raise SweepsError(
            f"--metric {metric!r} is not a column of study {name!r}; use val_bpb or val_loss"
        )
    chosen = metric or metric_of(data.objectives, data.directions, data.trials)
    return fit_transfer(data.trials, chosen, seed=seed)
