"""sweeps.loss_fit on points drawn from L(N, D) = E + A/N^alpha + B/D^beta with noise: the fit
recovers the parameters inside its intervals, the allocation is the closed form, and a point it
cannot fit is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sweeps import loss_fit as lf

# Chinchilla's fitted law (Hoffmann et al. 2022, eq. 10).
TRUE = lf.LossLaw(E=1.69, A=406.4, alpha=0.34, B=410.7, beta=0.28)


def points(n_points: int = 40, noise: float = 0.01, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Sizes and tokens log-uniform over three decades each, the loss with log-normal noise."""
    rng = np.random.default_rng(seed)
    n = 10 ** rng.uniform(6, 9, n_points)
    d = 10 ** rng.uniform(8, 11, n_points)
    return n, d, TRUE(n, d) * np.exp(rng.normal(0, noise, n_points))


@pytest.fixture(scope="module")
def fit() -> lf.LossFit:
    return lf.fit_loss(*points(), seed=0, n_boot=40)


def test_the_fit_recovers_the_parameters_inside_their_intervals(fit: lf.LossFit) -> None:
    for name in lf.PARAMETERS:
        lo, hi = fit.interval(name)
        true, got = getattr(TRUE, name), getattr(fit.law, name)
        print(f"{name}: true {true:.4g}, fitted {got:.4g}, interval {lo:.4g} to {hi:.4g}")
        assert lo <= true <= hi, name
        assert lo <= got <= hi, name
    assert abs(fit.law.alpha - TRUE.alpha) < 0.03 and abs(fit.law.beta - TRUE.beta) < 0.03
    assert fit.n_trials == 40 and len(fit.boots) == 40
    assert 0.005 < fit.residual_sd < 0.02  # the noise drawn: sd 0.01 in log space


def test_a_prediction_beyond_the_points_is_inside_its_interval(fit: lf.LossFit) -> None:
    n, d = 3e9, 6e10  # larger than every fitted size
    point, band, run_band = fit.prediction(n, d)
    assert band[0] <= float(TRUE(n, d)) <= band[1]
    assert run_band[0] <= band[0] <= point <= band[1] <= run_band[1]  # a run adds its scatter


def test_more_noise_gives_wider_intervals(fit: lf.LossFit) -> None:
    noisy = lf.fit_loss(*points(noise=0.04), seed=0, n_boot=30)
    quiet, loud = (np.subtract(*f.interval("alpha")[::-1]) for f in (fit, noisy))
    assert loud > quiet


def test_the_huber_loss_shrugs_off_an_outlier() -> None:
    n, d, loss = points(noise=0.002)
    loss[0] *= 3  # one diverged run
    robust = lf.fit_loss(n, d, loss, n_boot=10)
    assert abs(robust.law.alpha - TRUE.alpha) < 0.02 and abs(robust.law.beta - TRUE.beta) < 0.02


def test_the_allocation_is_the_closed_form() -> None:
    for compute in (1e18, 1e21, 5.76e23):
        n_opt, d_opt = TRUE.optimal_6nd(compute)
        s = TRUE.alpha + TRUE.beta
        g = (TRUE.alpha * TRUE.A / (TRUE.beta * TRUE.B)) ** (1 / s)
        assert math.isclose(n_opt, g * (compute / 6) ** (TRUE.beta / s), rel_tol=1e-12)
        assert math.isclose(6 * n_opt * d_opt, compute, rel_tol=1e-12)
        # The numeric minimum of L subject to C = 6ND lands on it ...
        n_num, d_num = TRUE.allocate(compute)
        assert math.isclose(n_num, n_opt, rel_tol=1e-3) and math.isclose(d_num, d_opt, rel_tol=1e-3)
        # ... and no size on a fine grid around it does better.
        sizes = n_opt * np.logspace(-1, 1, 401)
        assert float(TRUE(n_opt, d_opt)) <= TRUE(sizes, compute / (6 * sizes)).min() + 1e-12
    # Chinchilla's own numbers: at Gopher's budget, about 40B parameters (the paper's Table 3
    # lists 40.6B for approach 3 at 5.76e23 FLOPs).
    assert 3e10 < TRUE.optimal_6nd(5.76e23)[0] < 5e10


def test_another_count_of_compute_moves_the_optimum() -> None:
    """FLOPs per token of 6N plus a head's fixed cost: tokens cost more, so the optimum moves
    to a larger model trained on fewer tokens, and spends the budget exactly."""
    compute = 1e20

    def per_token(n: float) -> float:
        return 6 * n + 6 * 50_000 * 1024

    n_head, d_head = TRUE.allocate(compute, per_token)
    n_6nd, d_6nd = TRUE.optimal_6nd(compute)
    assert n_head > n_6nd and d_head < d_6nd
    assert math.isclose(d_head * per_token(n_head), compute, rel_tol=1e-12)


def test_too_few_points_are_refused() -> None:
    n, d, loss = points(n_points=lf.MIN_TRIALS - 1)
    with pytest.raises(ValueError, match=f"{lf.MIN_TRIALS - 1} usable trials"):
        lf.fit_loss(n, d, loss)
    n, d, loss = points()
    with pytest.raises(ValueError, match="two sizes"):
        lf.fit_loss(np.full_like(n, 1e6), d, loss)
    nan_loss = loss.copy()
    nan_loss[: len(loss) - lf.MIN_TRIALS + 1] = np.nan  # unfinished trials are left out
    with pytest.raises(ValueError, match="usable trials"):
        lf.fit_loss(n, d, nan_loss)
