"""sweeps.scaling on synthetic IsoFLOP grids with known exponents (Chinchilla's loss form)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sweeps import scaling

# L(N, D) = E + A / N^alpha + B / D^beta: at C = 6 N D the optimum is N_opt ~ C^(beta /
# (alpha + beta)) and D_opt ~ C^(alpha / (alpha + beta)).
E, A, B, ALPHA, BETA = 1.69, 406.4, 410.7, 0.34, 0.28
A_TRUE = BETA / (ALPHA + BETA)  # 0.4516
B_TRUE = ALPHA / (ALPHA + BETA)  # 0.5484


def loss(n: np.ndarray, d: np.ndarray) -> np.ndarray:
    return E + A / n**ALPHA + B / d**BETA


def isoflop_grid(
    budgets: list[float],
    sizes_per_budget: int = 9,
    noise: float = 0.005,
    seed: int = 0,
    span: float = 1.0,
) -> pd.DataFrame:
    """Trials at each budget: sizes log-spaced +-``span`` decades around a rough guess of the
    optimum (C^0.5 / 10, off the truth by a factor that changes with C, as a real plan is)."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in budgets:
        centre = np.log10(np.sqrt(c) / 10)
        for x in np.linspace(centre - span, centre + span, sizes_per_budget):
            n = 10**x
            d = c / (6 * n)
            rows.append(
                {
                    "flops": c * rng.uniform(0.98, 1.02),
                    "params_non_embedding": n,
                    "tokens_seen": d,
                    "val_bpb": loss(n, d) + rng.normal(0, noise),
                }
            )
    return pd.DataFrame(rows)


BUDGETS = [1e17, 1e18, 1e19, 1e20, 1e21]


def test_recovers_the_optimal_size_exponent_within_its_interval() -> None:
    fit = scaling.fit_isoflops(isoflop_grid(BUDGETS), seed=0, n_boot=300)
    assert fit.n_opt is not None and fit.d_opt is not None, fit.notes
    lo, hi = fit.n_opt.interval
    print(
        f"\nN_opt exponent {fit.n_opt.exponent:.4f} in [{lo:.4f}, {hi:.4f}] "
        f"(true {A_TRUE:.4f}); D_opt {fit.d_opt.exponent:.4f} in "
        f"[{fit.d_opt.interval[0]:.4f}, {fit.d_opt.interval[1]:.4f}] (true {B_TRUE:.4f})"
    )
    assert lo <= A_TRUE <= hi
    assert lo <= fit.n_opt.exponent <= hi
    assert hi - lo < 0.1  # an informative interval, not "anything from 0 to 1"
    dlo, dhi = fit.d_opt.interval
    assert dlo <= B_TRUE <= dhi and dhi - dlo < 0.1
    # 6 N D = C: the two exponents add up to one.
    assert fit.n_opt.exponent + fit.d_opt.exponent == pytest.approx(1.0, abs=0.01)
    assert len(fit.tokens_per_param) == len(BUDGETS) and fit.notes == []
    # The true optimum of each budget, against the fitted one: within a few per cent in log.
    for p in fit.parabolas:
        n_true = _true_n_opt(p.budget)
        assert abs(np.log10(p.n_opt) - np.log10(n_true)) < 0.1


def _true_n_opt(c: float) -> float:
    n = np.logspace(0, 15, 30001)
    return float(n[np.argmin(loss(n, c / (6 * n)))])


def test_the_bootstrap_is_seeded() -> None:
    grid = isoflop_grid(BUDGETS, noise=0.02)
    a = scaling.fit_isoflops(grid, seed=3, n_boot=100)
    b = scaling.fit_isoflops(grid, seed=3, n_boot=100)
    c = scaling.fit_isoflops(grid, seed=4, n_boot=100)
    assert a.n_opt.interval == b.n_opt.interval != c.n_opt.interval


def test_more_noise_gives_a_wider_interval() -> None:
    quiet = scaling.fit_isoflops(isoflop_grid(BUDGETS, noise=0.002), n_boot=200)
    loud = scaling.fit_isoflops(isoflop_grid(BUDGETS, noise=0.03), n_boot=200)
    width = [f.n_opt.interval[1] - f.n_opt.interval[0] for f in (quiet, loud)]
    assert width[0] < width[1]


def test_too_few_points_are_noted_not_fitted() -> None:
    grid = isoflop_grid(BUDGETS[:2], sizes_per_budget=5)
    two_sizes = isoflop_grid([1e22], sizes_per_budget=2)
    fit = scaling.fit_isoflops(pd.concat([grid, two_sizes], ignore_index=True), n_boot=50)
    assert fit.n_opt is None and fit.d_opt is None
    assert any("2 sizes, a parabola needs 3" in n for n in fit.notes)
    assert any("2 budgets with an inner minimum; the power laws need 3" in n for n in fit.notes)


def test_a_narrow_range_of_sizes_is_noted() -> None:
    grid = isoflop_grid([1e19], sizes_per_budget=5, span=0.2)
    [p] = scaling.fit_isoflops(grid, n_boot=10).parabolas
    assert p.coef is None and "sizes span only x2.5, a parabola needs x4" in p.note


def test_a_minimum_at_the_edge_of_the_sizes_is_noted() -> None:
    # Sizes all far above the optimum: the loss only rises, the minimum falls off the grid.
    c = 1e19
    n = np.logspace(np.log10(_true_n_opt(c)) + 1, np.log10(_true_n_opt(c)) + 2, 5)
    frame = pd.DataFrame(
        {
            "flops": c,
            "params_non_embedding": n,
            "tokens_seen": c / (6 * n),
            "val_bpb": loss(n, c / (6 * n)),
        }
    )
    [p] = scaling.fit_isoflops(frame, n_boot=10).parabolas
    assert p.note is not None and (
        "edge of the sampled sizes" in p.note or "does not curve up" in p.note
    )


def test_budgets_from_the_attribute_or_grouped_by_flops() -> None:
    frame = pd.DataFrame(
        {
            "flops": [1.00e15, 1.05e15, 0.97e15, 1.0e16, 1.1e16, 3e17, np.nan, 5e15],
            "flops_budget": [np.nan] * 7 + [1e16],
        }
    )
    got = scaling.assign_budgets(frame)
    assert got[0] == got[1] == got[2] == pytest.approx(1.0067e15, rel=1e-3)
    assert got[3] == got[4] != got[0]
    assert got[5] == pytest.approx(3e17)
    assert np.isnan(got[6])
    # A continuum of FLOPs (a random search) has no budgets.
    spread = scaling.assign_budgets(pd.DataFrame({"flops": np.logspace(14, 16, 40)}))
    assert spread.isna().all()
    assert got[7] == 1e16  # the planned budget wins over the FLOPs it came out at
