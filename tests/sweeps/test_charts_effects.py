"""The report's ablation section (effects table, forest plot) and the replicate error bars,
tested on their data; the sections in a built report."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeps import report, results
from sweeps.charts import effects as effects_chart
from sweeps.charts import pareto, replicates
from tests.sweeps.ablation import FFN_WIDTH, store_ablation, table


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('charts') / 'e.db'}"
    rng = np.random.default_rng(0)
    seed_effect = 0.02 * rng.standard_normal(3)
    points = dict(FFN_WIDTH)
    points[64] = list(2.30 + seed_effect + 0.001 * rng.standard_normal(3))  # clearly worse
    points[256] = list(2.20 + seed_effect)
    store_ablation(url, "ffn", points)
    return url


def test_forest_data_has_one_interval_per_level(url: str) -> None:
    data = results.load(url, "ffn")
    result, why = effects_chart.data(data)
    assert result is not None and why == ""
    forest = effects_chart.forest_data(result).set_index("label")
    assert sorted(forest.index) == ["d_ff=1", "d_ff=128", "d_ff=192", "d_ff=64"]
    assert (forest["low"] <= forest["diff"]).all() and (forest["diff"] <= forest["high"]).all()
    assert forest.loc["d_ff=64", "verdict"] == "worse"
    assert forest.loc["d_ff=64", "colour"] == effects_chart.VERDICT_COLORS["worse"]
    assert forest.loc["d_ff=64", "low"] > 0  # the interval clear of zero
    assert forest.loc["d_ff=1", "colour"] == effects_chart.UNDECIDED


def test_the_report_shows_the_effects_first(url: str) -> None:
    text, charts, _ = report.build(url, "ffn")
    keys = [c.key for c in charts]
    # first; then what applies to trials that recorded only val_bpb (no memory, no curves)
    assert keys == ["effects", "forest", "parallel", "timeline"]
    assert charts[0].html is not None and "cannot tell apart with n = 3" in charts[0].html
    assert charts[1].figure is not None
    assert '<section id="forest">' in text and 'class="effects"' in text


def test_a_study_without_ablation_has_no_effects_sections(url: str) -> None:
    data = results.StudyResults(
        name="s",
        storage="x",
        directions=["minimize"],
        objectives=["val_bpb"],
        user_attrs={},
        trials=table({1: [2.0]}),
        evals=pd.DataFrame(),
        samples=pd.DataFrame(),
    )
    assert not effects_chart.applies(data)
    assert report.draw(effects_chart.table_chart, data) is None
    assert report.draw(effects_chart.forest_chart, data) is None
    assert effects_chart.applies(results.load(url, "ffn"))


def test_replicates_become_a_mean_with_an_interval() -> None:
    trials = table({1: [2.0, 2.1, 2.2], 2: [2.5]})
    trials["peak_mem_bytes"] = [100.0, 110.0, 120.0, 50.0]
    frame = replicates.data(trials, "peak_mem_bytes")
    assert list(frame["config"]) == ["d_ff=1"]  # d_ff=2 has one seed: no interval
    row = frame.iloc[0]
    assert (row["n"], row["x"], row["mean"]) == (3, 110.0, pytest.approx(2.1))
    half = 4.302653 * 0.1 / math.sqrt(3)  # t(0.975, 2) x sd / sqrt(n)
    assert (row["low"], row["high"]) == pytest.approx((2.1 - half, 2.1 + half), abs=1e-5)
    assert replicates.data(trials.drop(columns="peak_mem_bytes"), "peak_mem_bytes").empty


def test_pareto_draws_the_replicate_means(tmp_path: Path) -> None:
    trials = table({1: [2.0, 2.1, 2.2], 2: [2.5, 2.4, 2.45]})
    trials["peak_mem_bytes"] = 2.0**20 * np.arange(1, 7)
    trials["wall_s"] = np.arange(1.0, 7.0)
    trials["reason"] = None
    data = results.StudyResults(
        name="s",
        storage="x",
        directions=["minimize"],
        objectives=["val_bpb"],
        user_attrs={},
        trials=trials,
        evals=pd.DataFrame(),
        samples=pd.DataFrame(),
    )
    fig = pareto.chart(data).figure
    means = [t for t in fig.data if t.name == "mean of seeds (95 % CI)"]
    assert len(means) == 2  # one per panel
    assert sorted(means[0].y) == pytest.approx([2.1, 2.45])
    assert all(v > 0 for v in means[0].error_y.array)


def test_compute_and_vocabulary_charts_draw_the_replicate_means() -> None:
    from sweeps.charts import compute, vocab

    trials = table({1: [2.0, 2.1, 2.2], 2: [2.5, 2.4, 2.45]})
    trials["flops"] = 1e12 * np.arange(1, 7)
    trials["vocab_size"] = [512] * 3 + [2048] * 3
    trials["tokenizer"] = "bpe"
    for column in (
        "reason",
        "params_non_embedding",
        "tokens_seen",
        "val_loss",
        "bytes_per_token",
        "unk_rate",
        "unk_rate_targets",
        "tokens_per_s",
        "under_trained",
    ):
        trials[column] = None
    data = results.StudyResults(
        name="s",
        storage="x",
        directions=["minimize"],
        objectives=["val_bpb"],
        user_attrs={},
        trials=trials,
        evals=pd.DataFrame(),
        samples=pd.DataFrame(),
    )
    for chart in (compute.chart(data), vocab.chart(data)):
        means = [t for t in chart.figure.data if t.name == "mean of seeds (95 % CI)"]
        assert len(means) == 1, chart.key
        assert sorted(means[0].y) == pytest.approx([2.1, 2.45])
