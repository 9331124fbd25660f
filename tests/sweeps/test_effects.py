"""``sweeps.effects`` on synthetic trial tables of known effects: replicates, paired effects with
Holm's correction, verdicts, unpaired seeds, and the confirm ranking."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lm.errors import SweepsError
from sweeps import effects as fx
from sweeps import replicates as rp
from tests.sweeps.ablation import noisy, table

# --- replicates ------------------------------------------------------------------------------


def test_replicates_group_trials_that_differ_only_in_seed() -> None:
    trials = table({256: [2.193, 2.203, 2.248], 1: [2.235, 2.210, 2.198]})
    trials.loc[len(trials)] = {
        "number": 99,
        "outcome": "oom",
        "param_d_ff": 64,
        "param_seed": 0,
        "seed": 0,
        "val_bpb": float("nan"),
    }
    reps = rp.replicates(trials)
    assert list(reps["config"]) == ["d_ff=1", "d_ff=256"]  # best (lowest mean) first
    base = reps.set_index("config").loc["d_ff=256"]
    assert base["n"] == 3
    assert base["mean"] == pytest.approx(2.2147, abs=1e-4)
    assert base["sd"] == pytest.approx(0.0293, abs=1e-4)
    assert (base["min"], base["max"]) == (2.193, 2.248)
    assert base["seeds"] == [0, 1, 2] and base["trials"] == [0, 1, 2]
    assert base["params"] == {"d_ff": 256}


def test_replicates_of_a_sampled_study_without_seed_parameter() -> None:
    # A TPE study: the seed is fixed, so every configuration is its own (n = 1, sd NaN),
    # unless the sampler proposed the same point twice.
    trials = pd.DataFrame(
        {
            "number": [0, 1, 2],
            "outcome": ["complete"] * 3,
            "param_lr": [0.01, 0.003, 0.01],
            "seed": [0, 0, 0],
            "val_bpb": [2.0, 2.2, 2.1],
        }
    )
    reps = rp.replicates(trials).set_index("config")
    assert reps.loc["lr=0.003", "n"] == 1 and math.isnan(reps.loc["lr=0.003", "sd"])
    assert reps.loc["lr=0.01", "n"] == 2 and reps.loc["lr=0.01", "mean"] == pytest.approx(2.05)


def test_replicates_maximize_puts_the_highest_first() -> None:
    trials = table({1: [0.5, 0.6], 2: [0.7, 0.8]}).rename(columns={"val_bpb": "accuracy"})
    assert rp.replicates(trials, "accuracy", "maximize")["config"].iloc[0] == "d_ff=2"


# --- Holm ------------------------------------------------------------------------------------


def test_holm_matches_a_hand_count() -> None:
    # m = 4: sorted 0.01, 0.02, 0.03, 0.04 -> 4 x 0.01 = 0.04, 3 x 0.02 = 0.06,
    # 2 x 0.03 = 0.06 (max with 0.06), 1 x 0.04 = 0.04 -> 0.06 (monotone).
    assert fx.holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert fx.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    got = fx.holm([0.2, float("nan"), 0.01])
    assert got[0] == pytest.approx(0.2) and math.isnan(got[1]) and got[2] == pytest.approx(0.02)


# --- comparisons -----------------------------------------------------------------------------


def test_paired_comparison_is_scipys_ttest_rel() -> None:
    a = {0: 2.20, 1: 2.25, 2: 2.19, 3: 2.30}
    b = {0: 2.10, 1: 2.20, 2: 2.15, 3: 2.21}
    c = fx.compare(a, b)
    res = stats.ttest_rel(list(a.values()), list(b.values()))
    assert c.test == "paired t" and c.n_pairs == 4 and c.unpaired == ()
    assert c.p == pytest.approx(res.pvalue)
    d = np.array(list(a.values())) - np.array(list(b.values()))
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert (c.low, c.high) == pytest.approx((d.mean() - half, d.mean() + half))


def test_unpaired_seeds_are_left_out_and_named() -> None:
    c = fx.compare({0: 2.0, 1: 2.1, 2: 2.05, 5: 9.0}, {0: 2.2, 1: 2.25, 2: 2.3, 7: 0.0})
    assert c.test == "paired t" and c.n_pairs == 3 and c.unpaired == (5, 7)
    # Seed 5's 9.0 would dominate the mean; left out, the difference is the paired one.
    assert c.diff == pytest.approx(np.mean([-0.2, -0.15, -0.25]))


def test_too_few_shared_seeds_fall_back_to_welch() -> None:
    c = fx.compare({0: 2.0, 1: 2.1, 2: 2.05}, {3: 2.3, 4: 2.35, 5: 2.4})
    res = stats.ttest_ind([2.0, 2.1, 2.05], [2.3, 2.35, 2.4], equal_var=False)
    assert c.test == "Welch t" and c.n_pairs == 0 and c.p == pytest.approx(res.pvalue)
    none = fx.compare({0: 2.0}, {1: 2.3})
    assert none.test == "none" and math.isnan(none.p)


def test_comparison_checks_its_own_rules() -> None:
    with pytest.raises(ValueError, match="test must be"):
        fx.Comparison(2, (), "z test", 0.1, 0.0, 0.2, 0.5, 0.1)
    with pytest.raises(ValueError, match="p must be"):
        fx.Comparison(2, (), "paired t", 0.1, 0.0, 0.2, 1.5, 0.1)


def test_seeds_needed_is_the_noncentral_t_power() -> None:
    n = fx.seeds_needed(0.01, 0.02, 0.05, paired=True)
    assert n is not None

    # At n the power reaches 80 %; at n - 1 it does not.
    def power(k: int) -> float:
        crit = stats.t.ppf(0.975, k - 1)
        return stats.nct.sf(crit, k - 1, 0.5 * math.sqrt(k)) + stats.nct.cdf(
            -crit, k - 1, 0.5 * math.sqrt(k)
        )

    assert power(n) >= 0.8 > power(n - 1)
    assert fx.seeds_needed(0.0, 0.02, 0.05, paired=True) is None
    assert fx.seeds_needed(1e-9, 1.0, 0.05, paired=True) is None  # beyond MAX_SEEDS


# --- effects: the acceptance cases -------------------------------------------------------------


def test_a_real_three_sd_difference_with_five_seeds_is_better() -> None:
    rng = np.random.default_rng(0)
    sd = 0.02
    seed_effect = sd * rng.standard_normal(5)  # shared by both arms: what pairing removes
    base = list(2.20 + seed_effect + 0.3 * sd * rng.standard_normal(5))
    wider = list(2.20 - 3 * sd + seed_effect + 0.3 * sd * rng.standard_normal(5))
    result = fx.effects(table({256: base, 512: wider}), study="s", baseline={"d_ff": 256})
    row = result.rows[1]
    assert (row.factor, row.level, row.n) == ("d_ff", "512", 5)
    assert row.verdict == "better"
    assert row.comparison.high < 0  # the whole interval below the baseline
    worse = fx.effects(table({256: wider, 512: base}), study="s", baseline={"d_ff": 256})
    assert worse.rows[1].verdict == "worse"


def test_a_three_sd_difference_unpaired_noise_is_still_better() -> None:
    rng = np.random.default_rng(1)
    result = fx.effects(
        table({256: noisy(2.20, 5, 0.02, rng), 512: noisy(2.14, 5, 0.02, rng)}),
        study="s",
        baseline={"d_ff": 256},
    )
    assert result.rows[1].verdict == "better"


def test_a_null_effect_cannot_be_told_apart() -> None:
    rng = np.random.default_rng(2)
    result = fx.effects(
        table(
            {
                256: noisy(2.2, 3, 0.02, rng),
                1: noisy(2.2, 3, 0.02, rng),
                64: noisy(2.2, 3, 0.02, rng),
            }
        ),
        study="s",
        baseline={"d_ff": 256},
    )
    for row in result.rows[1:]:
        assert row.verdict.startswith("cannot tell apart with n = 3; about "), row.verdict
        assert "seeds per arm would resolve a difference of" in row.verdict
        assert row.seeds_needed is None or row.seeds_needed > 3


def test_holm_is_applied_across_the_studys_comparisons() -> None:
    rng = np.random.default_rng(3)
    points = {
        256: noisy(2.2, 4, 0.02, rng),
        1: noisy(2.21, 4, 0.02, rng),
        64: noisy(2.19, 4, 0.02, rng),
        128: noisy(2.2, 4, 0.02, rng),
    }
    result = fx.effects(table(points), study="s", baseline={"d_ff": 256})
    raw = [r.comparison.p for r in result.rows[1:]]
    assert [r.p_holm for r in result.rows[1:]] == pytest.approx(fx.holm(raw))
    assert all(r.p_holm >= r.comparison.p for r in result.rows[1:])


def test_effects_with_unpaired_seeds_say_so() -> None:
    trials = table({256: [2.20, 2.21, 2.19, 2.22], 1: [2.30, 2.33, 2.29]})
    # d_ff = 1 lost seed 3 (say it ran out of time): 3 pairs, seed 3 named.
    result = fx.effects(trials, study="s", baseline={"d_ff": 256})
    row = result.rows[1]
    assert row.comparison.n_pairs == 3 and row.comparison.unpaired == (3,)
    assert "left out of the pairs: seed 3: not run here" in row.verdict


def test_baseline_errors_are_one_line() -> None:
    trials = table({256: [2.2, 2.3], 1: [2.1, 2.2]})
    with pytest.raises(SweepsError, match="matches no configuration"):
        fx.effects(trials, study="s", baseline={"d_ff": 999})
    with pytest.raises(SweepsError, match="has no parameter 'lr'"):
        fx.effects(trials, study="s", baseline={"lr": 0.1})
    assert fx.parse_baseline("d_ff=256, tokenizer=bpe") == {"d_ff": 256, "tokenizer": "bpe"}
    for bad in ("d_ff", "=3", ""):
        with pytest.raises(SweepsError, match="--baseline"):
            fx.parse_baseline(bad)


def test_markdown_and_json_rows() -> None:
    trials = table({256: [2.193, 2.203, 2.248], 1: [2.235, 2.210, 2.198]})
    result = fx.effects(trials, study="ffn", baseline={"d_ff": 256})
    text = fx.markdown(result)
    assert "| d_ff | 1 | 3 | 2.214 ± 0.019 |" in text
    assert "| baseline | d_ff=256 | 3 | 2.215 ± 0.029 |" in text
    frame = result.frame().set_index("level")
    assert frame.loc["1", "n_pairs"] == 3 and frame.loc["1", "test"] == "paired t"
    assert frame.loc["1", "diff"] == pytest.approx(np.mean([0.042, 0.007, -0.05]))
    data = result.as_dict()
    assert data["rows"][0]["comparison"] is None
    assert data["rows"][1]["comparison"]["n_pairs"] == 3


# --- ranking ---------------------------------------------------------------------------------


def test_rank_says_whether_the_best_beats_the_runner_up() -> None:
    rng = np.random.default_rng(4)
    seed_effect = 0.02 * rng.standard_normal(6)
    clear = table(
        {1: list(2.10 + seed_effect), 2: list(2.20 + seed_effect + 0.002 * rng.standard_normal(6))}
    )
    ranking = rp.rank(clear, level=0.01)
    assert ranking.rows["config"].iloc[0] == "d_ff=1" and ranking.distinguishable is True
    assert "is distinguishable" in ranking.sentence()
    assert (ranking.rows["low"] < ranking.rows["mean"]).all()
    tied = table({1: noisy(2.2, 3, 0.02, rng), 2: noisy(2.2, 3, 0.02, rng)})
    assert rp.rank(tied).distinguishable is False


def test_a_configuration_with_no_complete_trial_is_named_not_dropped() -> None:
    trials = table({256: [2.193, 2.203], 64: [2.214, 2.219]})
    for number, seed in ((10, 0), (11, 1)):
        trials.loc[len(trials)] = {
            "number": number,
            "outcome": "unigram_collapse",
            "param_d_ff": 1,
            "param_seed": seed,
            "seed": seed,
            "val_bpb": 2.77,
        }
    result = fx.effects(trials, study="s", baseline={"d_ff": 256})
    # A row of its own, with no value and both seeds named with their outcome.
    assert [e.level for e in result.rows] == ["d_ff=256", "64", "1"]
    row = result.rows[2]
    assert row.n == 0 and [(s.seed, s.outcome) for s in row.stopped] == [
        (0, "unigram_collapse"),
        (1, "unigram_collapse"),
    ]
    assert result.not_compared == (("d_ff=1", "unigram_collapse: seeds 0, 1"),)
    text = fx.markdown(result)
    assert "seed 0: unigram_collapse, seed 1: unigram_collapse" in text
    assert result.as_dict()["not_compared"] == [
        {"config": "d_ff=1", "trials": "unigram_collapse: seeds 0, 1"}
    ]
    assert [s["seed"] for s in result.as_dict()["stopped"]] == [0, 1]
