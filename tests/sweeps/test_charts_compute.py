"""Compute as an axis: what the runner records (flops of the tokens trained, MFU on a known GPU),
flops as an objective, ``limits.max_flops``, the columns, and the two charts on their data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from lm import flops, host
from lm.config import TrainConfig
from lm.errors import SweepsError
from sweeps import attempt_record, results
from sweeps.charts import compute
from sweeps.charts import scaling as scaling_chart
from sweeps.monitor import Attempt, StartTimes
from sweeps.record import TrialRecord
from sweeps.spec import read_spec
from tests.sweeps import fake_study
from tests.sweeps.helpers import spec_dict

CFG = TrainConfig.from_dict(
    {
        "corpus": "/c",
        "tokenizer": "word",
        "vocab_size": 300,
        "d_model": 200,
        "n_layers": 1,
        "d_ff": 800,
        "seq_len": 254,
        "batch_size": 4,
    }
)


def attempt(result: dict[str, Any] | None, history: list[dict[str, Any]] | None = None) -> Attempt:
    return Attempt(
        "complete",
        "ok",
        result,
        history or [],
        10.0,
        StartTimes(Path("/nonexistent"), 0.0),
        None,
        1,
        0,
    )


def trials(rows: list[dict]) -> pd.DataFrame:
    """A study frame with every column, from a few hand-written rows."""
    columns = results._columns({})
    return pd.DataFrame([{c: r.get(c, np.nan) for c in columns} | r for r in rows], columns=columns)


BUDGETS = [1e17, 1e18, 1e19, 1e20, 1e21]


def isoflop_grid(budgets: list[float], seed: int = 0) -> pd.DataFrame:
    """Complete trials at 9 sizes per budget, Chinchilla's loss (N_opt ~ C^0.45) with noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in budgets:
        for n in np.logspace(-1, 1, 9) * np.sqrt(c) / 10:
            d = c / (6 * n)
            rows.append(
                {
                    "outcome": "complete",
                    "number": len(rows),
                    "flops": c,
                    "params_non_embedding": n,
                    "tokens_seen": d,
                    "val_bpb": 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28 + rng.normal(0, 0.005),
                }
            )
    return pd.DataFrame(rows)


# --- the runner ----------------------------------------------------------------------------------


def test_flops_are_of_the_tokens_actually_trained() -> None:
    a = attempt(
        {
            "tokens_seen": 8128,
            "n_evals": 2,
            "tokens_per_s": 1000.0,
            "device": "cpu",
            "vocab_size": 280,
        }
    )
    got = attempt_record.compute_fields(CFG, a).to_attrs()
    want = flops.count(CFG, 8128, n_evals=2, vocab_size=280)
    assert got == {
        "flops": want.flops,
        "flops_per_token": want.flops_per_token,
        "params_non_embedding": 483_000,
        "params_embedding": 280 * 200 + 254 * 200,
        "eval_flops": want.eval_flops,
    }  # no mfu on the CPU
    assert attempt_record.compute_fields(CFG, attempt(None)).to_attrs() == {}


def test_mfu_on_a_known_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(host, "gpu_name", lambda gpu: asked.append(gpu) or "NVIDIA H100 80GB HBM3")
    cfg = TrainConfig.from_dict({**CFG.to_dict(), "precision": "bf16"})
    env = {host.VISIBLE_DEVICES_ENV: "3"}
    a = attempt(
        {"tokens_seen": 1_000_000, "n_evals": 1, "tokens_per_s": 50_000.0, "device": "cuda:0"}
    )
    got = attempt_record.compute_fields(cfg, a, "cuda", env)
    assert asked == ["3"] and got.gpu_name == "NVIDIA H100 80GB HBM3"
    assert got.mfu == pytest.approx(got.flops / 20.0 / 989e12)


def test_flops_is_an_objective() -> None:
    spec = read_spec(
        spec_dict("o", Path("/c"), study={"objectives": ["val_bpb", "flops"]}), check_paths=False
    )
    a = attempt({"final_metrics": {"val_bpb": 1.5}})
    assert attempt_record.objective_values(spec, a, TrialRecord(flops=3e12)) == ([1.5, 3e12], None)
    assert attempt_record.objective_values(spec, a, TrialRecord()) == ([], "flops")


def test_a_trial_over_the_compute_limit_is_not_launched() -> None:
    spec = read_spec(spec_dict("o", Path("/c"), limits={"max_flops": 1e13}), check_paths=False)
    assert attempt_record.over_compute_limit(9e12, spec.limits) is None
    reason = attempt_record.over_compute_limit(2e13, spec.limits)
    assert reason == (
        "over the compute limit, not launched: 2e+13 training FLOPs predicted > "
        "limits.max_flops = 1e+13"
    )


def test_a_spec_whose_every_trial_is_over_the_limit_is_refused() -> None:
    data = spec_dict(
        "o",
        Path("/c"),
        fixed={"max_tokens": 100_000},
        space={"d_ff": {"type": "int", "low": 64, "high": 1024}},
        limits={"max_flops": 1.0},
    )
    with pytest.raises(
        SweepsError,
        match=r"limits\.max_flops.*every trial is over the limit "
        r"of 1 training FLOPs: the cheapest \(d_ff=64\)",
    ):
        read_spec(data, check_paths=False)
    cheapest = TrainConfig.from_dict(
        {**read_spec({**data, "limits": {}}, check_paths=False).base_values(), "d_ff": 64}
    )
    bound = flops.count(cheapest, cheapest.max_tokens).flops
    # Just above the cheapest corner: accepted (the others are pruned one by one).
    read_spec({**data, "limits": {"max_flops": bound * 1.01}}, check_paths=False)
    with pytest.raises(SweepsError, match="max_flops"):
        read_spec({**data, "limits": {"max_flops": bound * 0.99}}, check_paths=False)
    with pytest.raises(SweepsError, match=r"limits\.max_flops: must be > 0"):
        read_spec({**data, "limits": {"max_flops": -1}}, check_paths=False)


def test_columns_from_the_recorded_attributes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    fake_study.fabricate(url, "s", 12, seed=1, bulk=False)
    frame = results.study_frame(url, "s")
    ran = frame[frame["outcome"] != "predicted_oom"]
    assert ran["flops"].notna().all() and (ran["flops"] > 0).all()
    assert (ran["flops"] == ran["flops_per_token"] * ran["tokens_seen"]).all()
    assert str(frame["params_non_embedding"].dtype) == "Int64"
    assert frame["flops"].dtype == np.float64  # past int64 for big runs


# --- the charts ---------------------------------------------------------------------------------


def test_compute_front_among_complete_trials() -> None:
    frame = trials(
        [
            {
                "number": 0,
                "outcome": "complete",
                "val_bpb": 2.0,
                "flops": 1e12,
                "params_non_embedding": 10,
                "tokens_seen": 5,
            },
            {
                "number": 1,
                "outcome": "complete",
                "val_bpb": 1.5,
                "flops": 1e13,
                "params_non_embedding": 20,
                "tokens_seen": 5,
            },
            {
                "number": 2,
                "outcome": "complete",
                "val_bpb": 1.8,
                "flops": 2e13,
                "params_non_embedding": 30,
                "tokens_seen": 5,
            },
            {"number": 3, "outcome": "pruned", "val_bpb": 1.0, "flops": 1e11},
            {"number": 4, "outcome": "complete", "val_bpb": 1.2, "flops": np.nan},
        ]
    )
    got = compute.data(frame)
    assert list(got["number"]) == [0, 1, 2, 3]
    assert dict(zip(got["number"], got["on_front"], strict=True)) == {
        0: True,
        1: True,
        2: False,
        3: False,
    }
    assert list(got["x"]) == [1e12, 1e13, 2e13, 1e11]
    assert got.loc[got["number"] == 2, "params_non_embedding"].item() == 30


def _results(frame: pd.DataFrame) -> results.StudyResults:
    return results.StudyResults(
        "s", "sqlite://", ["minimize"], ["val_bpb"], {}, frame, pd.DataFrame(), pd.DataFrame()
    )


def test_scaling_chart_draws_curves_minima_and_laws() -> None:
    grid = isoflop_grid(BUDGETS)
    # A pruned trial's loss is not its budget's: left out of the fit.
    frame = pd.concat(
        [
            grid,
            pd.DataFrame(
                [
                    {
                        "outcome": "pruned",
                        "number": 99,
                        "flops": 1e19,
                        "params_non_embedding": 1e8,
                        "val_bpb": 0.1,
                        "tokens_seen": 1e10,
                    }
                ]
            ),
        ],
        ignore_index=True,
    )
    fit = scaling_chart.data(frame)
    assert [len(p.sizes) for p in fit.parabolas] == [9] * len(BUDGETS)
    chart = scaling_chart.chart(_results(frame))
    assert chart.figure is not None and "Notes" not in chart.about
    names = [t.name for t in chart.figure.data if t.name]
    assert sum(n.startswith("C = ") for n in names) == len(BUDGETS)
    assert any(n.startswith("N_opt ~ C^0.4") for n in names)
    assert any(n.startswith("D_opt ~ C^0.5") for n in names)
    stars = [t for t in chart.figure.data if t.marker.symbol == "star"]
    assert len(stars) == len(BUDGETS)


def test_scaling_chart_without_budgets_says_why() -> None:
    frame = isoflop_grid(BUDGETS[:2])
    chart = scaling_chart.chart(_results(frame))
    assert chart.figure is not None and "2 budgets with an inner minimum" in chart.about
    empty = scaling_chart.chart(_results(trials([])))
    assert empty.figure is None and "No IsoFLOP curve" in empty.note
