"""Issue 38, items 1, 3 and 7: each chart says whether it applies, from the study's data, and the
report leaves out those that do not (no empty section, no placeholder); replicates are not
parameters; interrupted and re-queued runs are no points of a front or an axis range; units a
person reads; no two navigation links alike."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from sweeps import report, results, seeds
from sweeps.charts import (
    MIB,
    Chart,
    collapse,
    compute,
    curves,
    effects,
    importance,
    memory_map,
    memory_pred,
    parallel,
    pareto,
    samples,
    scaling,
    settled,
    timeline,
    transfer,
    vocab,
)
from tests.sweeps import report_kinds
from tests.sweeps.ablation import FFN_WIDTH, STUDIES, store_ablation, table

NAN = float("nan")


def frame(rows: list[dict]) -> pd.DataFrame:
    """A study frame with every column, from a few hand-written rows."""
    columns = results._columns({})
    extra = [k for r in rows for k in r if k not in columns]
    return pd.DataFrame(
        [{c: r.get(c, NAN) for c in columns} | r for r in rows],
        columns=columns + list(dict.fromkeys(extra)),
    )


def study(
    rows: list[dict],
    *,
    evals: pd.DataFrame | None = None,
    texts: pd.DataFrame | None = None,
    spec: dict | None = None,
) -> results.StudyResults:
    return results.StudyResults(
        name="s",
        storage="x",
        directions=["minimize"],
        objectives=["val_bpb"],
        user_attrs={"spec": spec} if spec else {},
        trials=frame(rows),
        evals=pd.DataFrame() if evals is None else evals,
        samples=pd.DataFrame() if texts is None else texts,
    )


def _done(i: int, **values: object) -> dict:
    return {"number": i, "outcome": "complete", "val_bpb": 2.0 + i / 10, **values}


def _ablation_spec() -> dict:
    import tomllib

    from sweeps.spec import read_spec

    spec = tomllib.loads((STUDIES / "ffn_width.toml").read_text())
    return read_spec(spec, source=STUDIES / "ffn_width.toml", check_paths=False).to_dict()


_EVALS = pd.DataFrame([{"trial_number": 0, "tokens": 1000, "val_bpb": 3.0}])
_TOP = {"tokens": ["the"], "corpus": [1.0], "model": [1.0]}
#: Per chart: (a study it applies to, one it does not), by what each chart reads.
CASES: dict[
    Callable[..., Chart],
    tuple[Callable[[], results.StudyResults], Callable[[], results.StudyResults]],
] = {
    effects.table_chart: (
        lambda: study([_done(0)], spec=_ablation_spec()),
        lambda: study([_done(0)]),
    ),
    effects.forest_chart: (
        lambda: study([_done(0)], spec=_ablation_spec()),
        lambda: study([_done(0)]),
    ),
    pareto.chart: (
        lambda: study([_done(0, peak_mem_bytes=2**20)]),
        lambda: study([_done(0)]),
    ),  # nothing measured to trade against
    compute.chart: (lambda: study([_done(0, flops=1e12)]), lambda: study([_done(0)])),
    scaling.chart: (
        lambda: study([_done(0, flops_budget=1e12)]),
        lambda: study([_done(0, flops=1e12), _done(1, flops=2e12)]),
    ),
    vocab.chart: (
        lambda: study(
            [_done(0, tokenizer="bpe", vocab_size=512), _done(1, tokenizer="bpe", vocab_size=2048)]
        ),
        lambda: study(
            [_done(0, tokenizer="bpe", vocab_size=512), _done(1, tokenizer="bpe", vocab_size=512)]
        ),
    ),
    memory_map.chart: (
        lambda: study([_done(0, seq_len=64, batch_size=8), _done(1, seq_len=64, batch_size=16)]),
        lambda: study(
            [
                _done(0, seq_len=64, batch_size=8),
                {"number": 1, "outcome": "oom", "seq_len": 64, "batch_size": 8},
            ]
        ),
    ),  # one cell, two outcomes
    memory_pred.chart: (
        lambda: study([_done(0, predicted_mem_bytes=9, peak_mem_bytes=10)]),
        lambda: study([_done(0, predicted_mem_bytes=9)]),
    ),
    curves.chart: (
        lambda: study([_done(0)], evals=_EVALS),
        lambda: study([_done(0)], evals=_EVALS.assign(val_bpb=NAN)),
    ),
    parallel.chart: (
        lambda: study([_done(0, param_d_ff=64), _done(1, param_d_ff=128)]),
        lambda: study(
            [
                _done(0, param_d_ff=64, param_seed=0, seed=0),
                _done(1, param_d_ff=64, param_seed=1, seed=1),
            ]
        ),
    ),
    importance.chart: (
        lambda: study([_done(i, param_d_ff=64 * (1 + i % 2), param_lr=i / 10) for i in range(4)]),
        lambda: study(
            [
                _done(i, param_d_ff=64 * (1 + i % 2), param_seed=i // 2, seed=i // 2)
                for i in range(4)
            ]
        ),
    ),
    collapse.chart: (
        lambda: study(
            [_done(0), {"number": 1, "outcome": "unigram_collapse", "val_bpb": 4.0}],
            evals=pd.DataFrame([{"trial_number": 1, "tokens": 1, "top_tokens": _TOP}]),
        ),
        lambda: study([_done(0), {"number": 1, "outcome": "pruned"}]),
    ),
    samples.chart: (
        lambda: study(
            [_done(0)],
            texts=pd.DataFrame(
                [{"trial_number": 0, "step": 1, "tokens": 1, "prompt": "<Q>", "text": "why"}]
            ),
        ),
        lambda: study([_done(0)]),
    ),
    transfer.chart: (
        lambda: study(
            [_done(i, parametrization="sp", d_model=32, lr=2.0**-i) for i in range(3)],
            spec={"transfer": {"widths": [32, 64], "lrs": [0.25, 0.5, 1.0]}},
        ),
        lambda: study([_done(0, parametrization="sp", d_model=32, lr=0.01)]),
    ),
    timeline.chart: (
        lambda: study([_done(0, started_at=1.7e9, placed_on="cpu 0")]),
        lambda: study([{"number": 0, "outcome": "waiting"}]),
    ),  # queued: not run
}


def test_every_chart_of_the_report_has_its_applies() -> None:
    assert set(report.CHARTS) == set(CASES) and set(CASES) <= set(report.APPLIES)


@pytest.mark.parametrize("make", list(CASES), ids=[report.CHART_NAMES[m][0] for m in CASES])
def test_a_chart_is_drawn_where_it_applies_and_left_out_where_not(
    make: Callable[..., Chart],
) -> None:
    yes, no = (f() for f in CASES[make])
    assert report.applies(make, yes)
    chart = report.draw(make, yes)
    assert chart is not None and chart.error is None
    assert not report.applies(make, no)
    assert report.draw(make, no) is None
    page = report.render(no, [c for c in (report.draw(m, no) for m in report.CHARTS) if c])
    assert f'<section id="{report.CHART_NAMES[make][0]}">' not in page


@pytest.mark.parametrize("kind", list(report_kinds.SECTIONS))
def test_each_kind_of_study_gets_the_sections_that_apply(kind: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    name = report_kinds.store(url, kind)
    text, charts, _ = report.build(url, name)
    assert [c.key for c in charts] == report_kinds.SECTIONS[kind]
    assert re.findall(r'<section id="([\w-]+)">', text) == report_kinds.SECTIONS[kind]
    assert all(c.error is None and c.note is None for c in charts)  # no empty section
    assert "Not an [ablation] study" not in text
    labels = re.findall(r'<a href="#[\w-]+">([^<]*)</a>', text.split("<nav>")[1])
    assert len(labels) == len(charts) == len(set(labels))


# --- where memory runs out; the vocabulary's <unk> panel ---------------------------------------


def test_the_memory_map_draws_each_cells_outcomes_at_its_own_x() -> None:
    rows = [
        {"number": i, "outcome": o, "seq_len": t, "batch_size": 8, "attention": "sdpa", "d_ff": 64}
        for i, (o, t) in enumerate(
            [("complete", 64), ("complete", 64), ("oom", 64), ("pruned", 64), ("complete", 128)]
        )
    ]
    data = study(rows)
    fig = memory_map.chart(data).figure
    xs = {t.name: list(t.x) for t in fig.data}
    assert xs == {"complete": [64.0, 128.0], "pruned": [64.0], "oom": [64.0]}  # no offset
    _, cells = memory_map.data(data.trials)
    at_64 = cells[cells["seq_len"] == 64].set_index("outcome")
    # rings: the first outcome of the legend outermost, each ring its count and those inside it
    assert at_64["count"].to_dict() == {"complete": 2, "pruned": 1, "oom": 1}
    assert at_64["ring"].to_dict() == {"complete": 4, "pruned": 2, "oom": 1}
    sizes = {t.name: list(t.marker.size) for t in fig.data}
    assert sizes["complete"][0] > sizes["pruned"][0] > sizes["oom"][0]


def test_the_unk_panel_only_with_a_word_tokenizer() -> None:
    bpe = [
        _done(i, tokenizer="bpe", vocab_size=v, val_loss=3.0, bytes_per_token=3.0, unk_rate=0.0)
        for i, v in enumerate([512, 2048])
    ]
    word = [
        _done(2, tokenizer="word", vocab_size=300, val_loss=2.0, bytes_per_token=5.0, unk_rate=0.3)
    ]
    titles = [a.text for a in vocab.chart(study(bpe)).figure.layout.annotations]
    assert "&lt;unk&gt; rate" not in titles and "bytes per token" in titles
    assert [m for _, _, m, _ in vocab.panels(frame(bpe))] == [
        "val_bpb",
        "val_loss",
        "bytes_per_token",
    ]
    assert not any(t.yaxis == "y4" for t in vocab.chart(study(bpe)).figure.data)
    with_words = vocab.chart(study(bpe + word)).figure
    assert "&lt;unk&gt; rate" in [a.text for a in with_words.layout.annotations]
    assert any(t.yaxis == "y4" for t in with_words.data)


# --- replicates are not parameters --------------------------------------------------------------


@pytest.fixture(scope="module")
def ablation_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('seeds') / 'ffn.db'}"
    store_ablation(url, "ffn", FFN_WIDTH)
    return url


def test_a_one_factor_ablation_with_seeds_has_no_seed_axis(ablation_url: str) -> None:
    data = results.load(ablation_url, "ffn")
    assert "param_seed" in data.trials and data.trials["param_seed"].nunique() == 3
    dims, bpb, _ = parallel.data(data.trials)
    assert not [d["label"] for d in dims if d["label"].startswith("seed")]
    assert [d["label"] for d in dims] == ["d_ff (log)", parallel.SPREAD, "val_bpb"]
    # one line per d_ff, at the mean of its three seeds, their sd beside it
    by_d_ff = dict(
        zip(
            np.round(10 ** dims[0]["values"]), zip(bpb, dims[1]["values"], strict=True), strict=True
        )
    )
    assert by_d_ff[256.0] == pytest.approx(
        (np.mean(FFN_WIDTH[256]), np.std(FFN_WIDTH[256], ddof=1))
    )
    assert len(bpb) == len(FFN_WIDTH)
    got, _ = importance.data(data.trials, data.distributions)
    assert got is not None and list(got) == ["d_ff"]
    # one factor: nothing for importances to rank against, so no section
    assert importance.varied(data.trials) == ["d_ff"] and not importance.applies(data)
    _, charts, _ = report.build(ablation_url, "ffn")
    chart = next(c for c in charts if c.key == "parallel")
    assert not [d.label for d in chart.figure.data[0].dimensions if d.label.startswith("seed")]


def test_importances_rank_configurations_not_seeds() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):  # 10 configurations x 4 seeds; the seed moves val_bpb a little
        x, seed = i // 4 / 10, i % 4
        rows.append(
            _done(
                i,
                param_x=x,
                param_y=str(i // 4 % 2),
                param_seed=seed,
                seed=seed,
                param_data_seed=100 + seed,
                val_bpb=2 + 3 * x + 0.05 * seed + 0.01 * rng.standard_normal(),
            )
        )
    trials = frame(rows)
    dists = {
        "x": optuna.distributions.FloatDistribution(0, 1),
        "y": optuna.distributions.CategoricalDistribution(["0", "1"]),
        "seed": optuna.distributions.CategoricalDistribution([0, 1, 2, 3]),
        "data_seed": optuna.distributions.CategoricalDistribution([100, 101, 102, 103]),
    }
    got, note = importance.data(trials, dists)
    assert set(got) == {"x", "y"} and got["x"] > 0.8
    assert "10 configurations of 40 complete trials" in note and "Replicates averaged" in note
    assert seeds.replicate_params(trials) == ["param_seed", "param_data_seed"]


def test_a_factor_is_not_a_replicate_field() -> None:
    ablation = table({1: [2.0, 2.1], 64: [2.2, 2.3]})  # d_ff under each seed: a factor
    assert seeds.replicate_params(ablation) == ["param_seed"]
    # a factor confounded with the seed (each d_ff its own seed) is still a factor
    confounded = table({1: [2.0], 64: [2.2]}, seeds=[0]).assign(seed=[0, 1], param_seed=[0, 1])
    assert seeds.replicate_params(confounded) == ["param_seed"]
    assert seeds.config_params(confounded) == ["param_d_ff"]


# --- interrupted and re-queued runs --------------------------------------------------------------


def _with_partial_runs() -> pd.DataFrame:
    return frame(
        [
            _done(0, peak_mem_bytes=100 * MIB, param_d_ff=64),
            _done(1, peak_mem_bytes=200 * MIB, param_d_ff=128, val_bpb=1.9),
            {
                "number": 2,
                "outcome": "interrupted",
                "val_bpb": 9.0,
                "peak_mem_bytes": 50 * MIB,
                "param_d_ff": 256,
            },  # stopped from outside: a partial run
            {
                "number": 3,
                "outcome": "crashed",
                "val_bpb": 8.0,
                "peak_mem_bytes": 60 * MIB,
                "param_d_ff": 1024,
            },  # re-queued as trial 4, which completed
            _done(4, peak_mem_bytes=300 * MIB, param_d_ff=1024, val_bpb=1.8, retry_of=3),
        ]
    )


def test_interrupted_and_requeued_runs_are_no_points_of_a_front() -> None:
    trials = _with_partial_runs()
    assert pareto.data(trials, "peak_mem_bytes")["number"].tolist() == [0, 1, 4]
    assert compute.data(trials.assign(flops=1e12))["number"].tolist() == [0, 1, 4]
    assert settled(trials)["number"].tolist() == [0, 1, 4]


def test_interrupted_and_requeued_runs_are_no_part_of_an_axis_range() -> None:
    dims, bpb, _ = parallel.data(_with_partial_runs())
    assert bpb.max() < 3 and sorted(bpb) == pytest.approx([1.8, 1.9, 2.0])
    assert [d["label"] for d in dims] == ["d_ff", "val_bpb"]
    assert max(dims[0]["values"]) == 1024  # the re-queued run's copy


# --- units and links -----------------------------------------------------------------------------


def test_the_best_trials_peak_memory_is_in_mib() -> None:
    data = study([_done(0, peak_mem_bytes=290_603_008, wall_s=12.5)])
    page = report.summary(data)
    assert "<th>peak memory</th><td>277.1 MiB</td>" in page and "290,603,008" not in page
    assert "<th>wall time</th><td>12.5 s</td>" in page
    # no trial measured its memory: no count of a front that cannot be drawn
    assert "Pareto-optimal" not in report.summary(study([_done(0)]))
    assert "Pareto-optimal trials (val_bpb, memory)</th><td>1</td>" in page


def test_no_two_navigation_links_read_the_same(ablation_url: str) -> None:
    text, charts, _ = report.build(ablation_url, "ffn")
    labels = re.findall(r'<a href="#[\w-]+">([^<]*)</a>', text.split("<nav>")[1])
    assert labels[:2] == ["Ablation effects", "Ablation effects: forest plot"]
    assert len(labels) == len(set(labels)) == len(charts)
    names = [name for _, name in report.CHART_NAMES.values()]
    assert len(names) == len(set(names))
