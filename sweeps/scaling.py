"""Scaling-law fits on plain frames (numpy, scipy; no torch, no Optuna): Chinchilla's IsoFLOP
approach, with the uncertainty a handful of small runs deserves.

1. ``assign_budgets``: the compute budget each trial was planned for: its ``flops_budget``
   (a trial attribute a planned grid records) when there is one, else its training FLOPs
   grouped with the trials within ``tolerance`` (log distance) of them; whole optimizer steps
   make a planned budget come out a few per cent off, never a factor. A chain of trials wider
   than ``2 x tolerance`` is a continuum (a random search), not a planned budget: no budget.
2. ``fit_isoflops``: per budget C, loss against log size is fitted by a parabola whose minimum
   is N_opt(C); D_opt(C) is read off the budget's own trials (log tokens against log size is a
   line at a fixed budget: interpolated at N_opt), else C / (6 N_opt) when the frame has no
   tokens. Then log N_opt and log D_opt against log C are fitted by straight lines: N_opt ~
   C^a, D_opt ~ C^b. Bootstrap intervals (seeded, percentile): the trials of each budget are
   resampled with replacement and everything refitted.
3. ``notes`` say when a result rests on too little: fewer than ``MIN_SIZES`` sizes in a budget,
   or sizes spanning less than ``MIN_SIZE_RATIO`` (no parabola); fewer than ``MIN_BUDGETS``
   budgets (no power law); a parabola that opens downwards (no minimum); a minimum at the edge
   of the sampled sizes (the optimum may lie outside them: extend the grid).

Size is ``params_non_embedding`` by default (Kaplan's N; Chinchilla counts every parameter:
pass ``size="params_total"``). The two give different exponents at small sizes, where the
embeddings are a large share: say which one a result used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

#: A parabola needs three sizes; a line through the optima needs three budgets to say anything.
MIN_SIZES = 3
MIN_BUDGETS = 3
#: An IsoFLOP curve's sizes must span at least this factor: a parabola fitted over a narrower
#: range is curvature of the noise (Chinchilla's grids span over a decade).
MIN_SIZE_RATIO = 4.0
#: Trials whose FLOPs are within this log10 distance share a budget (about +-26%).
BUDGET_TOLERANCE = 0.1
BOOTSTRAP = 1000
CONFIDENCE = 0.9


def assign_budgets(trials: pd.DataFrame, tolerance: float = BUDGET_TOLERANCE) -> pd.Series:
    """The budget of each trial (NaN when it has no FLOPs): ``flops_budget`` when the column
    has a value, else the geometric mean of its FLOPs group. A group is a run of sorted
    log10 FLOPs with no gap wider than ``tolerance``."""
    flops = pd.to_numeric(
        trials.get("flops", pd.Series(np.nan, index=trials.index)), errors="coerce"
    ).astype(float)
    given = pd.to_numeric(
        trials.get("flops_budget", pd.Series(np.nan, index=trials.index)), errors="coerce"
    ).astype(float)
    out = pd.Series(np.nan, index=trials.index, dtype=float)
    ok = np.isfinite(flops) & (flops > 0) & ~np.isfinite(given)
    logs = np.log10(flops[ok]).sort_values()
    groups: list[list[object]] = []
    for i, value in logs.items():
        if not groups or value - logs[groups[-1][-1]] > tolerance:
            groups.append([])
        groups[-1].append(i)
    for group in groups:
        if logs[group[-1]] - logs[group[0]] <= 2 * tolerance:
            out[group] = 10 ** float(np.mean(logs[group]))
    return out.where(~np.isfinite(given), given)


@dataclass(frozen=True)
class Parabola:
    """One budget's fit: loss = a x^2 + b x + c with x = log10 size."""

    budget: float
    sizes: np.ndarray
    losses: np.ndarray
    coef: tuple[float, float, float] | None  # (a, b, c); None when not fitted
    n_opt: float | None
    d_opt: float | None
    loss_opt: float | None
    note: str | None = None


@dataclass(frozen=True)
class PowerLaw:
    """y = k C^exponent, fitted in log-log; the exponent's bootstrap interval."""

    exponent: float
    coefficient: float
    interval: tuple[float, float]

    def __call__(self, compute: np.ndarray | float) -> np.ndarray:
        return self.coefficient * np.asarray(compute, dtype=float) ** self.exponent


@dataclass(frozen=True)
class ScalingFit:
    """Everything the chart draws and a user quotes."""

    size: str
    loss: str
    parabolas: list[Parabola]
    n_opt: PowerLaw | None = None
    d_opt: PowerLaw | None = None
    tokens_per_param: list[float] = field(default_factory=list)  # D_opt / N_opt per budget
    notes: list[str] = field(default_factory=list)


Group = tuple[float, np.ndarray, np.ndarray, np.ndarray]  # budget, sizes, losses, tokens


def fit_parabola(
    budget: float, sizes: np.ndarray, losses: np.ndarray, tokens: np.ndarray | None = None
) -> Parabola:
    """The loss-vs-log-size parabola of one budget and its minimum, or a note why not."""
    sizes, losses = np.asarray(sizes, dtype=float), np.asarray(losses, dtype=float)
    tokens = np.full(len(sizes), np.nan) if tokens is None else np.asarray(tokens, dtype=float)
    order = np.argsort(sizes)
    sizes, losses, tokens = sizes[order], losses[order], tokens[order]
    x = np.log10(sizes)
    label = f"budget {budget:.3g} FLOPs"
    if len(np.unique(x)) < MIN_SIZES:
        return Parabola(
            budget,
            sizes,
            losses,
            None,
            None,
            None,
            None,
            f"{label}: {len(np.unique(x))} sizes, a parabola needs {MIN_SIZES}",
        )
    if sizes.max() < MIN_SIZE_RATIO * sizes.min():
        return Parabola(
            budget,
            sizes,
            losses,
            None,
            None,
            None,
            None,
            f"{label}: sizes span only x{sizes.max() / sizes.min():.2g}, a parabola "
            f"needs x{MIN_SIZE_RATIO:g}",
        )
    a, b, c = _polyfit(x, losses)
    if a <= 0:
        return Parabola(
            budget,
            sizes,
            losses,
            (a, b, c),
            None,
            None,
            None,
            f"{label}: the loss does not curve up around a minimum",
        )
    x_opt = -b / (2 * a)
    n_opt = 10**x_opt
    note = None
    if not x.min() < x_opt < x.max():
        note = (
            f"{label}: the minimum (N = {n_opt:.3g}) is at the edge of the sampled sizes "
            f"{sizes.min():.3g}..{sizes.max():.3g}; extend the grid"
        )
    return Parabola(
        budget,
        sizes,
        losses,
        (a, b, c),
        n_opt,
        _d_opt(budget, x, tokens, x_opt),
        a * x_opt**2 + b * x_opt + c,
        note,
    )


def _d_opt(budget: float, x: np.ndarray, tokens: np.ndarray, x_opt: float) -> float:
    """The tokens at the optimum: the budget's trials' log tokens against log size, a line
    (D = C / (k N) with k nearly constant), at ``x_opt``; C / (6 N) without tokens."""
    ok = np.isfinite(tokens) & (tokens > 0)
    if len(np.unique(x[ok])) < 2:
        return budget / (6 * 10**x_opt)
    slope, intercept = _line(x[ok], np.log10(tokens[ok]))
    return float(10 ** (intercept + slope * x_opt))


def _polyfit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    a, b, c = np.polyfit(x, y, 2)
    return float(a), float(b), float(c)


def _line(log_c: np.ndarray, log_y: np.ndarray) -> tuple[float, float]:
    slope, intercept = np.polyfit(log_c, log_y, 1)
    return float(slope), float(intercept)


def _optima(groups: list[Group]) -> np.ndarray:
    """(budget, N_opt, D_opt) rows of the budgets whose parabola has an inner minimum."""
    rows = []
    for group in groups:
        p = fit_parabola(*group)
        if p.n_opt is not None and p.note is None:
            rows.append((p.budget, p.n_opt, p.d_opt))
    return np.array(rows, dtype=float).reshape(-1, 3)


def _column(trials: pd.DataFrame, name: str) -> pd.Series:
    if name not in trials:
        return pd.Series(np.nan, index=trials.index, dtype=float)
    return pd.to_numeric(trials[name], errors="coerce").astype(float)


def fit_isoflops(
    trials: pd.DataFrame,
    *,
    size: str = "params_non_embedding",
    loss: str = "val_bpb",
    tokens: str = "tokens_seen",
    seed: int = 0,
    n_boot: int = BOOTSTRAP,
    confidence: float = CONFIDENCE,
) -> ScalingFit:
    """IsoFLOP fits of the trials with a budget (``assign_budgets``), a size and a loss (the
    caller picks the trials: usually the complete ones)."""
    frame = pd.DataFrame(
        {
            "budget": assign_budgets(trials),
            "size": _column(trials, size),
            "loss": _column(trials, loss),
            "tokens": _column(trials, tokens),
        }
    )
    keep = np.isfinite(frame[["budget", "size", "loss"]]).all(axis=1) & (frame["size"] > 0)
    groups = [
        (
            float(b),
            g["size"].to_numpy(float),
            g["loss"].to_numpy(float),
            g["tokens"].to_numpy(float),
        )
        for b, g in frame[keep].groupby("budget", sort=True)
    ]
    parabolas = [fit_parabola(*g) for g in groups]
    notes = [p.note for p in parabolas if p.note]
    usable = [p for p in parabolas if p.n_opt is not None and p.note is None]
    # A usable parabola has its n_opt and its d_opt (fit_parabola gives both or neither).
    ratios = [p.d_opt / p.n_opt for p in usable]  # type: ignore[operator]
    fit = ScalingFit(size, loss, parabolas, notes=notes, tokens_per_param=ratios)
    if len(usable) < MIN_BUDGETS:
        notes.append(
            f"{len(usable)} budgets with an inner minimum; the power laws need {MIN_BUDGETS}"
        )
        return fit
    optima = np.log10(_optima(groups))
    n_slope, n_intercept = _line(optima[:, 0], optima[:, 1])
    d_slope, d_intercept = _line(optima[:, 0], optima[:, 2])
    boot = _bootstrap(groups, seed, n_boot)
    if len(boot) < n_boot // 2:
        notes.append(
            f"only {len(boot)} of {n_boot} bootstrap resamples gave {MIN_BUDGETS} "
            "inner minima: the intervals are unreliable"
        )
    n_law = PowerLaw(n_slope, 10**n_intercept, _interval(boot[:, 0], confidence))
    d_law = PowerLaw(d_slope, 10**d_intercept, _interval(boot[:, 1], confidence))
    return ScalingFit(size, loss, parabolas, n_law, d_law, fit.tokens_per_param, notes)


def _bootstrap(groups: list[Group], seed: int, n_boot: int) -> np.ndarray:
    """(N_opt, D_opt) exponents of resampled studies (each budget's trials drawn with
    replacement); a resample with fewer than ``MIN_BUDGETS`` inner minima is dropped."""
    rng = np.random.default_rng(seed)
    slopes = []
    for _ in range(n_boot):
        resampled = []
        for budget, sizes, losses, tokens in groups:
            pick = rng.integers(0, len(sizes), len(sizes))
            resampled.append((budget, sizes[pick], losses[pick], tokens[pick]))
        optima = _optima(resampled)
        if len(optima) >= MIN_BUDGETS:
            logs = np.log10(optima)
            slopes.append((_line(logs[:, 0], logs[:, 1])[0], _line(logs[:, 0], logs[:, 2])[0]))
    return np.array(slopes, dtype=float).reshape(-1, 2)


def _interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    if not len(samples):
        return (math.nan, math.nan)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(samples, [tail, 100 - tail])
    return float(lo), float(hi)
