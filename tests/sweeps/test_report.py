"""The report's charts, tested on their data; the HTML file; a 2,000-trial study in seconds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution

from sweeps import report, results
from sweeps import storage as st
from sweeps.charts import (
    collapse,
    curves,
    importance,
    memory_map,
    memory_pred,
    parallel,
    pareto,
    samples,
    vocab,
)
from tests.sweeps import fake_study

NAN = float("nan")


def trials(rows: list[dict]) -> pd.DataFrame:
    """A study frame with every column, from a few hand-written rows."""
    columns = results._columns({})
    extra = [k for r in rows for k in r if k not in columns]
    return pd.DataFrame(
        [{c: r.get(c, NAN) for c in columns} | r for r in rows],
        columns=columns + list(dict.fromkeys(extra)),
    )


# --- Pareto -------------------------------------------------------------------------------------


def test_front_mask_minimises_both() -> None:
    x = np.array([1.0, 2.0, 3.0, 2.0, 4.0, 1.0])
    y = np.array([5.0, 3.0, 1.0, 4.0, 1.0, 6.0])
    # (2,4) is dominated by (2,3); (4,1) by (3,1); (1,6) by (1,5)
    assert pareto.front_mask(x, y).tolist() == [True, True, True, False, False, False]


def test_pareto_front_is_drawn_among_complete_trials_only() -> None:
    frame = trials(
        [
            {"number": 0, "outcome": "complete", "val_bpb": 2.0, "peak_mem_bytes": 100},
            {"number": 1, "outcome": "complete", "val_bpb": 1.5, "peak_mem_bytes": 300},
            {"number": 2, "outcome": "complete", "val_bpb": 2.5, "peak_mem_bytes": 200},
            {"number": 3, "outcome": "pruned", "val_bpb": 1.0, "peak_mem_bytes": 50},
            {"number": 4, "outcome": "predicted_oom", "val_bpb": NAN, "peak_mem_bytes": NAN},
        ]
    )
    got = pareto.data(frame, "peak_mem_bytes")
    assert list(got["number"]) == [0, 1, 2, 3]  # no val_bpb or no memory: not drawn
    assert dict(zip(got["number"], got["on_front"], strict=True)) == {
        0: True,
        1: True,
        2: False,
        3: False,
    }  # the pruned trial cannot be picked


# --- vocabulary ---------------------------------------------------------------------------------


def test_vocab_best_per_size_and_token_statistics() -> None:
    frame = trials(
        [
            {
                "number": 0,
                "outcome": "complete",
                "tokenizer": "word",
                "vocab_size": 300,
                "val_bpb": 3.0,
                "val_loss": 2.0,
                "bytes_per_token": 5.0,
                "unk_rate": 0.4,
            },
            {
                "number": 1,
                "outcome": "complete",
                "tokenizer": "word",
                "vocab_size": 300,
                "val_bpb": 2.8,
                "val_loss": 2.1,
                "bytes_per_token": 5.0,
                "unk_rate": 0.4,
            },
            {
                "number": 2,
                "outcome": "complete",
                "tokenizer": "bpe",
                "vocab_size": 1024,
                "val_bpb": 1.8,
                "val_loss": 3.5,
                "bytes_per_token": 3.0,
                "unk_rate": 0.0,
            },
            {
                "number": 3,
                "outcome": "pruned",
                "tokenizer": "bpe",
                "vocab_size": 1024,
                "val_bpb": 1.5,
                "val_loss": 3.0,
                "bytes_per_token": 3.0,
                "unk_rate": 0.0,
            },
            {"number": 4, "outcome": "predicted_oom", "tokenizer": "bpe", "vocab_size": 8192},
        ]
    )
    points, best, tokens = vocab.data(frame)
    assert sorted(points["number"]) == [0, 1, 2, 3]
    # the best line uses complete trials only: trial 3 was stopped early
    assert best[["tokenizer", "vocab_size", "number"]].values.tolist() == [
        ["bpe", 1024.0, 2],
        ["word", 300.0, 1],
    ]
    assert tokens[["tokenizer", "vocab_size", "bytes_per_token", "unk_rate"]].values.tolist() == [
        ["bpe", 1024.0, 3.0, 0.0],
        ["word", 300.0, 5.0, 0.4],
    ]


def test_vocab_best_line_keeps_a_judged_trial_that_trained_its_whole_budget() -> None:
    frame = trials(
        [
            {
                "number": 0,
                "outcome": "unk_dominated",
                "tokenizer": "word",
                "vocab_size": 300,
                "val_bpb": 4.8,
                "val_loss": 2.0,
                "tokens_seen": 401_408,
                "max_tokens": 400_000,
            },
            {
                "number": 1,
                "outcome": "unigram_collapse",
                "tokenizer": "bpe",
                "vocab_size": 2048,
                "val_bpb": 2.7,
                "val_loss": 6.0,
                "tokens_seen": 150_016,
                "max_tokens": 200_000,
            },
            {
                "number": 2,
                "outcome": "complete",
                "tokenizer": "bpe",
                "vocab_size": 4096,
                "val_bpb": 2.2,
                "val_loss": 5.0,
                "tokens_seen": 401_408,
                "max_tokens": 400_000,
            },
        ]
    )
    _, best, _ = vocab.data(frame)
    # The 300-word model was judged at its last evaluation: its bits per byte is a full-budget
    # point; the collapsed BPE model stopped at 150k of 200k tokens is not.
    assert best[["tokenizer", "number"]].values.tolist() == [["bpe", 2], ["word", 0]]


def test_vocab_sizes_are_binned_when_continuous() -> None:
    few = pd.Series([300, 600, 300, 1200])
    assert vocab.size_bins(few).tolist() == [300.0, 600.0, 300.0, 1200.0]
    many = pd.Series(np.geomspace(260, 8192, 500).round())
    bins = vocab.size_bins(many)
    assert bins.nunique() <= vocab.BINS and bins.is_monotonic_increasing


# --- memory -------------------------------------------------------------------------------------


def test_memory_map_counts_trials_per_cell_and_facets_by_attention() -> None:
    rows = [
        {
            "number": i,
            "outcome": o,
            "reason": f"r{i}",
            "seq_len": t,
            "batch_size": b,
            "attention": a,
            "d_ff": 64,
        }
        for i, (o, t, b, a) in enumerate(
            [
                ("complete", 128, 8, "sdpa"),
                ("complete", 128, 8, "sdpa"),
                ("oom", 512, 64, "naive"),
                ("predicted_oom", 512, 64, "naive"),
                ("predicted_oom", 512, 64, "naive"),
                ("complete", 128, 8, "naive"),
            ]
        )
    ]
    name, cells = memory_map.data(trials(rows))
    assert name == "attention"
    got = {
        (p, t, b, o): c
        for p, t, b, o, c in cells[
            ["panel", "seq_len", "batch_size", "outcome", "count"]
        ].values.tolist()
    }
    assert got == {
        ("attention=naive", 128.0, 8.0, "complete"): 1,
        ("attention=naive", 512.0, 64.0, "oom"): 1,
        ("attention=naive", 512.0, 64.0, "predicted_oom"): 2,
        ("attention=sdpa", 128.0, 8.0, "complete"): 2,
    }
    assert cells.loc[cells["outcome"] == "predicted_oom", "trials"].item() == "3, 4"


def test_memory_map_facets_by_d_ff_groups_when_attention_is_fixed() -> None:
    rows = [
        {
            "number": i,
            "outcome": "complete",
            "seq_len": 64,
            "batch_size": 4,
            "attention": "sdpa",
            "d_ff": d,
        }
        for i, d in enumerate([1, 16, 64, 256, 1024, 4096])
    ]
    name, cells = memory_map.data(trials(rows))
    assert name == "d_ff" and cells["panel"].nunique() == memory_map.MAX_PANELS
    assert cells["count"].sum() == 6
    name, _ = memory_map.data(trials(rows[:1]))
    assert name is None


def test_predicted_against_measured() -> None:
    frame = trials(
        [
            {
                "number": 0,
                "outcome": "complete",
                "predicted_mem_bytes": 100,
                "peak_mem_bytes": 110,
                "predicted_mem_raw_bytes": 90,
            },
            {"number": 1, "outcome": "oom", "predicted_mem_bytes": 100, "peak_mem_bytes": 200},
            {"number": 2, "outcome": "predicted_oom", "predicted_mem_bytes": 900},
        ]
    )
    points, summary = memory_pred.data(frame)
    assert points["number"].tolist() == [0, 1]
    assert points["ratio"].tolist() == pytest.approx([1.1, 2.0])
    assert summary == {"n": 2.0, "median_ratio": pytest.approx(1.55), "within_20": 0.5}


# --- learning curves ----------------------------------------------------------------------------


def _evals(spec: dict[int, list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"trial_number": n, "tokens": (i + 1) * 1000, "val_bpb": v}
            for n, values in spec.items()
            for i, v in enumerate(values)
        ]
    )


def test_curves_end_where_trials_stopped_with_their_reason() -> None:
    frame = trials(
        [
            {"number": 0, "outcome": "complete", "reason": "done"},
            {"number": 1, "outcome": "pruned", "reason": "median pruner: worse than the median"},
            {"number": 2, "outcome": "unigram_collapse", "reason": "predicts corpus frequencies"},
        ]
    )
    lines, band, stops = curves.data(_evals({0: [3, 2, 1.5], 1: [3.5, 3.2], 2: [4.0]}), frame)
    assert len(lines) == 6 and band.empty  # few trials: every curve
    assert stops[["trial_number", "tokens", "outcome"]].values.tolist() == [
        [1, 2000, "pruned"],
        [2, 1000, "unigram_collapse"],
    ]
    assert stops["reason"].tolist()[0].startswith("median pruner")


def test_many_curves_become_the_best_few_over_a_band() -> None:
    rng = np.random.default_rng(0)
    n = 200
    frame = trials([{"number": i, "outcome": "complete" if i % 4 else "pruned"} for i in range(n)])
    spec = {
        i: list(3 - np.arange(1, (5 if i % 4 else 2) + 1) * 0.1 * rng.uniform(0.5, 1.5))
        for i in range(n)
    }
    lines, band, stops = curves.data(_evals(spec), frame, all_below=40, best=5)
    last = _evals(spec).groupby("trial_number").tail(1).set_index("trial_number")["val_bpb"]
    best = last[[i for i in range(n) if i % 4]].nsmallest(5).index
    assert set(lines["trial_number"]) == set(best)
    assert len(band) > 0
    assert (band["p10"] <= band["p50"]).all() and (band["p50"] <= band["p90"]).all()
    assert len(stops) == n // 4 and set(stops["outcome"]) == {"pruned"}


# --- parallel coordinates and importances -------------------------------------------------------


def test_parallel_coordinates_dimensions() -> None:
    frame = trials(
        [
            {
                "number": 0,
                "param_tokenizer": "bpe",
                "param_lr": 1e-4,
                "param_d_ff": 64,
                "val_bpb": 2.0,
            },
            {
                "number": 1,
                "param_tokenizer": "word",
                "param_lr": 1e-2,
                "param_d_ff": 128,
                "val_bpb": 2.5,
            },
            {
                "number": 2,
                "param_tokenizer": "bpe",
                "param_lr": 1e-3,
                "param_d_ff": NAN,
                "val_bpb": 3.0,
            },  # a conditional parameter not set: drawn at "(not set)"
            {
                "number": 3,
                "param_tokenizer": "bpe",
                "param_lr": 1e-3,
                "param_d_ff": 64,
                "val_bpb": NAN,
            },  # no val_bpb: not drawn
        ]
    )
    dims, color, unset = parallel.data(frame)
    by = {d["label"]: d for d in dims}
    assert set(by) == {"tokenizer", "lr (log)", "d_ff", "val_bpb"} and unset == {"d_ff": 1}
    assert by["tokenizer"]["ticktext"] == ["bpe", "word"]
    assert by["tokenizer"]["values"].tolist() == [0.0, 1.0, 0.0]
    assert by["lr (log)"]["values"].tolist() == pytest.approx([-4, -2, -3])
    # round ticks over 64..128, and "(not set)" one step below them
    assert by["d_ff"]["ticktext"] == ["(not set)", "60", "80", "100", "120", "140"]
    assert by["d_ff"]["values"].tolist() == [64.0, 128.0, 40.0]
    assert color.tolist() == [2.0, 2.5, 3.0]
    # a categorical parameter not set: "(not set)" is its lowest choice
    dim = parallel.dimension("tokenizer", pd.Series(["word", None, "bpe"]))
    assert dim["ticktext"] == ["(not set)", "bpe", "word"]
    assert dim["values"].tolist() == [2.0, 0.0, 1.0]


def test_importances_need_two_complete_trials() -> None:
    dists = {"x": FloatDistribution(0, 1)}
    one = trials([{"number": 0, "outcome": "complete", "val_bpb": 1.0, "param_x": 0.5}])
    got, note = importance.data(one, dists)
    assert got is None and "at least 2 complete configurations" in note and "has 1" in note


def test_importances_rank_the_parameter_that_matters() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        x, y = float(rng.uniform(0, 1)), str(rng.choice(["a", "b"]))
        rows.append(
            {
                "number": i,
                "outcome": "complete",
                "param_x": x,
                "param_y": y,
                "val_bpb": 2 + 3 * x + 0.01 * (y == "a"),
            }
        )
    rows.append(
        {"number": 60, "outcome": "pruned", "param_x": 0.0, "param_y": "a", "val_bpb": 0.0}
    )  # not complete: ignored
    dists = {"x": FloatDistribution(0, 1), "y": CategoricalDistribution(["a", "b"])}
    got, note = importance.data(trials(rows), dists)
    assert list(got) == ["x", "y"] and got["x"] > 0.8
    assert "60 complete trials" in note


# --- collapse and samples -----------------------------------------------------------------------


def test_collapse_shows_collapsed_trials_and_the_best_for_contrast() -> None:
    top = {"tokens": ["the", " a", "<unk>"], "corpus": [0.5, 0.3, 0.2], "model": [0.5, 0.3, 0.2]}
    good = {"tokens": ["the", " a", "<unk>"], "corpus": [0.5, 0.3, 0.2], "model": [0.1, 0.1, 0.8]}
    frame = trials(
        [
            {"number": 0, "outcome": "complete", "val_bpb": 1.5},
            {"number": 1, "outcome": "unigram_collapse", "val_bpb": 3.0},
            {"number": 2, "outcome": "complete", "val_bpb": 1.2},
        ]
    )
    evals = pd.DataFrame(
        [
            {"trial_number": 0, "tokens": 1, "top_tokens": good},
            {"trial_number": 1, "tokens": 1, "top_tokens": {"tokens": []}},
            {"trial_number": 1, "tokens": 2, "top_tokens": top},
            {"trial_number": 2, "tokens": 1, "top_tokens": good},
        ]
    )
    got = collapse.data(frame, evals)
    assert got.groupby("trial_number").size().to_dict() == {1: 3, 2: 3}
    assert got.loc[got["trial_number"] == 1, "model"].tolist() == [0.5, 0.3, 0.2]
    assert "contrast" in got.loc[got["trial_number"] == 2, "label"].iloc[0]
    assert collapse.shown_token(" a") == "\u2423a"
    assert collapse.shown_token("<unk>") == "&lt;unk&gt;"
    assert collapse.data(frame[frame["outcome"] == "complete"], evals).empty


def test_every_verdict_on_predictions_is_drawn_with_its_steps_and_kls() -> None:
    top = {"tokens": ["the", "<unk>"], "corpus": [0.6, 0.4], "model": [0.1, 0.9]}
    frame = trials(
        [
            {
                "number": 0,
                "outcome": "stalled",
                "val_bpb": 4.0,
                "last_eval_step": 400,
                "kl_mean_to_unigram": 3.26,
                "mean_kl_to_mean": 0.001,
            },
            {"number": 1, "outcome": "unk_dominated", "val_bpb": 3.0, "steps": 288},
            {"number": 2, "outcome": "pruned", "val_bpb": 3.5},
        ]
    )
    evals = pd.DataFrame([{"trial_number": n, "tokens": 1, "top_tokens": top} for n in range(3)])
    got = collapse.data(frame, evals)
    assert list(dict.fromkeys(got["label"])) == ["trial 0 (stalled)", "trial 1 (unk_dominated)"]
    stats = frame.set_index("number")
    assert collapse._stats_text(stats.loc[0]) == (
        ": after 400 steps, KL(mean||unigram) 3.260, mean KL to mean 0.001"
    )
    assert collapse._stats_text(stats.loc[1]) == ": after 288 steps"


def test_samples_are_escaped_and_selected() -> None:
    frame = trials(
        [
            {"number": 0, "outcome": "complete", "val_bpb": 2.0},
            {"number": 1, "outcome": "unigram_collapse", "val_bpb": 3.0},
        ]
    )
    rows = pd.DataFrame(
        [
            {"trial_number": 0, "step": 1, "tokens": 100, "prompt": "<Q>", "text": "old"},
            {
                "trial_number": 0,
                "step": 2,
                "tokens": 200,
                "prompt": "<Q>",
                "text": "<script>alert(1)</script> & <Q>why",
            },
            {"trial_number": 1, "step": 1, "tokens": 100, "prompt": "<Q>", "text": "the the"},
        ]
    )
    got = samples.data(rows, frame)
    assert got["text"].tolist() == ["<script>alert(1)</script> & <Q>why", "the the"]
    page = samples.render(got)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;Q&gt;why" in page
    assert "&lt;Q&gt;</td>" in page
    many = trials(
        [
            {"number": i, "outcome": "complete" if i % 3 else "pruned", "val_bpb": 3 - i / 100}
            for i in range(100)
        ]
    )
    texts = pd.DataFrame(
        [
            {"trial_number": i, "step": 1, "tokens": 1, "prompt": "p", "text": "t"}
            for i in range(100)
        ]
    )
    picked = samples.data(texts, many, best=10, per_outcome=3)
    assert picked["trial_number"].tolist()[:10] == [98, 97, 95, 94, 92, 91, 89, 88, 86, 85]
    assert picked["trial_number"].tolist()[10:] == [0, 3, 6]


# --- the HTML file ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('report') / 'small.db'}"
    fake_study.fabricate(
        url,
        "small",
        40,
        seed=5,
        samples={
            0: [{"prompt": "<Q>How to raise", "text": "<script>document.title='PWNED'</script><A>"}]
        },
    )
    return url


def test_report_is_one_self_contained_file(small_url: str, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    charts, data = report.write(small_url, "small", out)
    page = out.read_text()
    # No trial of this study was planned at a compute budget: no IsoFLOP section at all; not an
    # [ablation]: no effects sections, and no placeholder saying so.
    assert [c.key for c in charts] == [
        "pareto",
        "compute",
        "vocab",
        "memory_map",
        "memory_pred",
        "curves",
        "parallel",
        "importance",
        "collapse",
        "samples",
        "timeline",
    ]
    assert "Not an [ablation] study" not in page
    drawn = [c for c in charts if c.key != "samples"]
    assert all(c.figure is not None for c in drawn)
    assert next(c for c in charts if c.key == "samples").html
    assert "IsoFLOP" not in page
    # plotly.js inlined exactly once; nothing fetched from the network
    header = report.plotly.offline.get_plotlyjs()[:200]
    assert page.count(header) == 1 and page.count("* plotly.js v") == 1
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    assert page.count('class="chart"') == 10
    assert page.count("Plotly.newPlot(") == 10
    # the summary header
    assert "Study <code>small</code>" in page and small_url in page
    counts = data.trials["outcome"].value_counts()
    for outcome, n in counts.items():
        assert f"{outcome}: {n:,}</span>" in page
    best = report.best_trial(data.trials)
    assert f"<td>{best['val_bpb']:.4f}</td>" in page
    assert json.dumps(json.loads(best["config_json"])["vocab_size"]) in page
    # a sample is text, never markup
    assert "document.title='PWNED'" not in page.replace("&#x27;", "'").split("<table")[0]
    assert "&lt;script&gt;document.title=&#x27;PWNED&#x27;&lt;/script&gt;&lt;A&gt;" in page


def test_credentials_are_masked_in_the_header() -> None:
    data = results.StudyResults(
        name="s",
        storage=st.mask_url("postgresql://me:s3cret@db/x"),
        directions=["minimize"],
        objectives=["val_bpb"],
        user_attrs={},
        trials=trials([]),
        evals=pd.DataFrame(),
        samples=pd.DataFrame(),
    )
    page = report.summary(data)
    assert "s3cret" not in page and "postgresql://me:***@db/x" in page


def test_an_empty_study_reports_notes_not_errors(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    optuna.create_study(study_name="empty", storage=st.open_storage(url))
    text, charts, _ = report.build(url, "empty")
    # no chart applies to a study without a trial: no empty sections, one line that says so
    assert charts == [] and "<section" not in text
    assert "No trial has completed yet." in text
    assert text.count('class="note"') == 1 and "No chart applies to this study yet" in text


@pytest.mark.slow
def test_two_thousand_trials_report_stays_small(tmp_path: Path, big_study: str) -> None:
    """How long it takes is tests/bench/bench_reading.py's to print, not a test's to cap (a
    loaded machine took 22 s over a 20 s cap)."""
    url = big_study
    out = tmp_path / "big.html"
    charts, data = report.write(url, "big", out)
    size = out.stat().st_size
    plotly_js = len(report.plotly.offline.get_plotlyjs().encode())
    # Every chart drawn, except the IsoFLOP fit (a random search plans no compute budgets) and
    # the effects and forest sections (not an [ablation] study).
    assert len(data.trials) == 2000 and all(
        c.figure is not None or c.html
        for c in charts
        if c.key not in ("scaling", "effects", "forest")
    )
    assert size - plotly_js < 2 * 2**20  # the data: well under 2 MiB
    page = out.read_text()
    # thinned: 15 best curves drawn, the samples table a selection
    curve = next(c for c in charts if c.key == "curves")
    assert sum(1 for t in curve.figure.data if t.mode == "lines+markers") == curves.BEST
    assert page.count("<tr>") < 200


def test_a_section_that_cannot_apply_is_left_out() -> None:
    from sweeps.charts import scaling

    one_vocab = trials(
        [
            {"number": i, "outcome": "complete", "tokenizer": "bpe", "vocab_size": 4096}
            for i in range(2)
        ]
    )

    def study(frame: pd.DataFrame) -> results.StudyResults:
        return results.StudyResults(
            name="s",
            storage="x",
            directions=["minimize"],
            objectives=["val_bpb"],
            user_attrs={},
            trials=frame,
            evals=pd.DataFrame(),
            samples=pd.DataFrame(),
        )

    assert not report.applies(scaling.chart, study(one_vocab))
    assert report.applies(scaling.chart, study(one_vocab.assign(flops_budget=[1e12, 1e12])))
    assert not report.applies(vocab.chart, study(one_vocab))
    assert report.applies(vocab.chart, study(one_vocab.assign(vocab_size=[4096, 8192])))
    assert report.applies(vocab.chart, study(one_vocab.assign(tokenizer=["bpe", "word"])))
    assert report.draw(vocab.chart, study(one_vocab)) is None


def test_the_report_says_which_slurm_job_ran_a_trial(tmp_path: Path) -> None:
    """Trials run by ``--engine slurm`` carry ``slurm_job`` (ARRAYJOB_TASK): the results frame
    has it, the header names the job array and the best trial's table its task."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="sl", storage=st.open_storage(url))
    for number, (bpb, job) in enumerate([(2.5, "4242_0"), (2.1, "4242_1"), (2.9, None)]):
        attrs = {"outcome": "complete", "val_bpb": bpb, **({"slurm_job": job} if job else {})}
        study.add_trial(optuna.trial.create_trial(value=bpb, user_attrs=attrs))
        assert study.trials[number].user_attrs.get("slurm_job") == job
    data = results.load(url, "sl")
    assert list(data.trials["slurm_job"].fillna("-")) == ["4242_0", "4242_1", "-"]
    text, _, _ = report.build(url, "sl")
    assert "2 trials ran as Slurm jobs of 4242" in text
    assert "<tr><th>Slurm job</th><td>4242_1</td></tr>" in text
    # a study that never ran on Slurm says nothing of it
    optuna.create_study(study_name="local", storage=st.open_storage(url)).add_trial(
        optuna.trial.create_trial(value=2.0, user_attrs={"outcome": "complete", "val_bpb": 2.0})
    )
    assert "Slurm" not in report.build(url, "local")[0]
