"""A parametric loss fit L(N, D) = E + A / N^alpha + B / D^beta (Hoffmann et al. 2022, "Training
Compute-Optimal Large Language Models", approach 3) on plain frames (numpy, scipy; no torch, no
Optuna), with bootstrap intervals, and the compute-optimal allocation it implies.

The fit is the paper's: in log space, the log of the predicted loss is
``LSE(a - alpha log N, b - beta log D, e)`` (A = e^a, B = e^b, E = e^e), and the Huber loss
(delta ``HUBER_DELTA`` = 1e-3) of its distance to log L is minimised by L-BFGS
(``scipy.optimize.minimize``) from a grid of initialisations (the paper's grid: alpha, beta in
0..2, e in -1..1, a, b in 0..25). Every grid point is scored first (one vectorised pass) and
L-BFGS runs from the ``STARTS`` best: the grid has 4,500 points, most of them far from any
minimum, and a full run from each would take minutes per bootstrap resample. A bootstrap
resample (trials drawn with replacement) restarts from the point fit and the ``BOOT_STARTS``
best grid points; its parameters give each parameter's interval, and its predictions a prediction's.

N and D are whatever the caller passes: ``sweeps.predict`` passes the trials'
``params_non_embedding`` and ``tokens_seen``, as the IsoFLOP fits do (``sweeps.scaling``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

HUBER_DELTA = 1e-3
#: Five parameters: fewer points than this leave the fit nearly interpolating them.
MIN_TRIALS = 8
#: The paper's grid of initialisations (a = log A, b = log B, e = log E).
GRID = {
    "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0),
    "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
    "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
}
STARTS = 16
BOOT_STARTS = 1
BOOTSTRAP = 200
#: Residuals drawn per resample for the interval of one new run.
RUN_DRAWS = 50
CONFIDENCE = 0.9
PARAMETERS = ("E", "A", "alpha", "B", "beta")


@dataclass(frozen=True)
class LossLaw:
    """L(N, D) = E + A / N^alpha + B / D^beta."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float

    def __call__(self, n: np.ndarray | float, d: np.ndarray | float) -> np.ndarray:
        n, d = np.asarray(n, dtype=float), np.asarray(d, dtype=float)
        return self.E + self.A / n**self.alpha + self.B / d**self.beta

    def as_dict(self) -> dict[str, float]:
        return {p: float(getattr(self, p)) for p in PARAMETERS}

    def optimal_6nd(self, compute: float) -> tuple[float, float]:
        """(N_opt, D_opt) minimising L subject to C = 6 N D, in closed form (the paper's eq. 4):
        N_opt = G (C/6)^(beta/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta))."""
        s = self.alpha + self.beta
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1 / s)
        n = g * (compute / 6) ** (self.beta / s)
        return float(n), float(compute / 6 / n)

    def allocate(
        self, compute: float, per_token: Callable[[float], float] | None = None
    ) -> tuple[float, float]:
        """(N, D) minimising L subject to C = D x per_token(N) (FLOPs per token; 6 N when
        None), found numerically over log N: the closed form's check, and any other count's."""
        from scipy.optimize import minimize_scalar

        cost: Callable[[float], float] = (lambda n: 6.0 * n) if per_token is None else per_token

        def loss_at(log_n: float) -> float:
            n = math.exp(log_n)
            return float(self(n, compute / cost(n)))

        guess = math.log(self.optimal_6nd(compute)[0])
        res = minimize_scalar(loss_at, bracket=(guess - 1.0, guess + 1.0))
        n = math.exp(float(res.x))
        return n, float(compute / cost(n))


@dataclass(frozen=True)
class LossFit:
    """The point fit, its bootstrap resamples' laws, and what the data held."""

    law: LossLaw
    boots: tuple[LossLaw, ...]
    n_trials: int
    residual_sd: float  # the sd of log L - log L_fit: the scatter a new run adds
    residuals: np.ndarray
    confidence: float = CONFIDENCE
    notes: tuple[str, ...] = ()

    def interval(self, name: str) -> tuple[float, float]:
        """The bootstrap percentile interval of one parameter (``PARAMETERS``)."""
        return percentile([getattr(b, name) for b in self.boots], self.confidence)

    def prediction(
        self, n: float, d: float, seed: int = 0
    ) -> tuple[float, tuple[float, float], tuple[float, float]]:
        """(L(n, d), the fit's interval of it, the interval a new run lands in): the second
        multiplies each resample's prediction by ``RUN_DRAWS`` of the point fit's residuals
        (in log space), drawn at random, so it holds a single run's own scatter too."""
        point = float(self.law(n, d))
        preds = np.array([float(b(n, d)) for b in self.boots])
        rng = np.random.default_rng(seed)
        draws = rng.choice(self.residuals, size=(len(preds), RUN_DRAWS))
        noisy = preds[:, None] * np.exp(draws)
        return point, percentile(preds, self.confidence), percentile(noisy, self.confidence)


def percentile(samples: object, confidence: float) -> tuple[float, float]:
    values = np.asarray(samples, dtype=float)
    values = values[np.isfinite(values)]
    if not len(values):
        return (math.nan, math.nan)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return float(lo), float(hi)


def _objective(
    theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray
) -> tuple[float, np.ndarray]:
    """The summed Huber loss of the log residuals and its gradient in (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = theta
    t1, t2 = a - alpha * log_n, b - beta * log_d
    top = np.maximum(np.maximum(t1, t2), e)
    w1, w2, w3 = np.exp(t1 - top), np.exp(t2 - top), np.exp(e - top)
    total = w1 + w2 + w3
    r = top + np.log(total) - log_l  # log L_fit - log L (numpy by hand: scipy's is slower)
    size = np.abs(r)
    value = np.where(size <= HUBER_DELTA, 0.5 * r * r, HUBER_DELTA * (size - 0.5 * HUBER_DELTA))
    slope = np.clip(r, -HUBER_DELTA, HUBER_DELTA) / total  # Huber's slope x d LSE / d term
    g1, g2 = slope * w1, slope * w2
    grad = np.array([g1.sum(), g2.sum(), (slope * w3).sum(), -(g1 @ log_n), -(g2 @ log_d)])
    return float(value.sum()), grad


def _grid() -> np.ndarray:
    """(points, 5): every initialisation, columns a, b, e, alpha, beta."""
    return np.array(
        list(itertools.product(GRID["a"], GRID["b"], GRID["e"], GRID["alpha"], GRID["beta"]))
    )


def _scores(
    grid: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray
) -> np.ndarray:
    """The objective at every grid point at once."""
    a, b, e, alpha, beta = (grid[:, i : i + 1] for i in range(5))
    shape = (len(grid), len(log_n))
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.broadcast_to(e, shape)])
    r = logsumexp(terms, axis=0) - log_l  # (points, trials)
    huber = np.where(
        np.abs(r) <= HUBER_DELTA, 0.5 * r**2, HUBER_DELTA * (np.abs(r) - 0.5 * HUBER_DELTA)
    )
    scores: np.ndarray = huber.sum(axis=1)
    return scores


def _fit_from(
    starts: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray
) -> np.ndarray:
    """L-BFGS from each start; the parameters of the lowest objective."""
    best, best_value = starts[0], math.inf
    for start in starts:
        res = minimize(_objective, start, args=(log_n, log_d, log_l), jac=True, method="L-BFGS-B")
        if np.all(np.isfinite(res.x)) and res.fun < best_value:
            best, best_value = res.x, float(res.fun)
    return np.asarray(best, dtype=float)


def _law(theta: np.ndarray) -> LossLaw:
    a, b, e, alpha, beta = (float(v) for v in theta)
    return LossLaw(math.exp(e), math.exp(a), alpha, math.exp(b), beta)


def fit_loss(
    n: np.ndarray,
    d: np.ndarray,
    loss: np.ndarray,
    *,
    seed: int = 0,
    n_boot: int = BOOTSTRAP,
    confidence: float = CONFIDENCE,
) -> LossFit:
    """Fit L(N, D) to the points with a finite, positive N, D and loss; ``ValueError`` when
    fewer than ``MIN_TRIALS`` remain or N or D takes a single value (nothing to fit)."""
    n, d, loss = (np.asarray(v, dtype=float) for v in (n, d, loss))
    ok = np.isfinite(n) & np.isfinite(d) & np.isfinite(loss) & (n > 0) & (d > 0) & (loss > 0)
    log_n, log_d, log_l = np.log(n[ok]), np.log(d[ok]), np.log(loss[ok])
    if len(log_l) < MIN_TRIALS:
        raise ValueError(f"{len(log_l)} usable trials; the loss fit needs {MIN_TRIALS}")
    if len(np.unique(log_n)) < 2 or len(np.unique(log_d)) < 2:
        raise ValueError("the trials need at least two sizes and two token counts")
    grid = _grid()
    order = np.argsort(_scores(grid, log_n, log_d, log_l))
    theta = _fit_from(grid[order[:STARTS]], log_n, log_d, log_l)
    law = _law(theta)
    residuals = log_l - np.log(law(np.exp(log_n), np.exp(log_d)))
    rng = np.random.default_rng(seed)
    starts = np.vstack([theta, grid[order[:BOOT_STARTS]]])
    boots = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(log_l), len(log_l))
        boots.append(_law(_fit_from(starts, log_n[pick], log_d[pick], log_l[pick])))
    notes = []
    if law.alpha <= 0 or law.beta <= 0:
        notes.append(
            f"an exponent is not positive (alpha = {law.alpha:.3g}, beta = {law.beta:.3g}): "
            "the loss does not fall with size or tokens, so no allocation is optimal"
        )
    return LossFit(
        law,
        tuple(boots),
        len(log_l),
        float(np.std(residuals)),
        residuals,
        confidence,
        tuple(notes),
    )
