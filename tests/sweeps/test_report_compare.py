"""The cross-study report's data (``results.combine``, ``charts.compare``): each study keeps its
own trial numbers, fronts, best-per-size lines and curves; one study's report is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pandas as pd
import pytest

from sweeps import optuna_compat, report, results
from sweeps import storage as st
from sweeps.charts import compare, curves, pareto, vocab
from tests.sweeps import fake_study


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    found = f"sqlite:///{tmp_path_factory.mktemp('compare') / 'two.db'}"
    fake_study.fabricate(found, "alpha", 20, seed=1)
    fake_study.fabricate(found, "beta", 30, seed=2)
    return found


def test_combined_frames_carry_the_study(url: str) -> None:
    alpha, beta = results.load_many(url, ["alpha", "beta"])
    both = results.combine([alpha, beta])
    for frame, parts in (
        (both.trials, (alpha.trials, beta.trials)),
        (both.evals, (alpha.evals, beta.evals)),
    ):
        assert frame.columns[0] == "study"
        assert list(frame["study"]) == ["alpha"] * len(parts[0]) + ["beta"] * len(parts[1])
        mine = frame[frame["study"] == "beta"].drop(columns="study").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, parts[1], check_dtype=False)
    assert both.directions == alpha.directions and both.name == "alpha vs beta"
    with pytest.raises(Exception, match="named twice"):
        results.load_many(url, ["alpha", "alpha"])


def test_each_study_keeps_its_own_front_lines_and_curves(url: str) -> None:
    alpha, beta = results.load_many(url, ["alpha", "beta"])
    both = results.combine([alpha, beta])
    names = ["alpha", "beta"]
    fronts = compare.pareto_data(both.trials, names, "peak_mem_bytes")
    for one in (alpha, beta):
        mine = fronts[fronts["study"] == one.name].drop(columns="study").reset_index(drop=True)
        pd.testing.assert_frame_equal(
            mine, pareto.data(one.trials, "peak_mem_bytes"), check_dtype=False
        )
        lines = compare.curves_data(both.evals, both.trials, names)
        mine = lines[lines["study"] == one.name].drop(columns="study").reset_index(drop=True)
        pd.testing.assert_frame_equal(
            mine, curves.data(one.evals, one.trials)[0], check_dtype=False
        )
        best = compare.vocab_data(both.trials, names)
        mine = best[best["study"] == one.name].drop(columns="study").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, vocab.data(one.trials)[1], check_dtype=False)
    # trial 0 exists in both studies, each with its own curve
    zero = lines[lines["trial_number"] == 0]
    assert set(zero["study"]) == {"alpha", "beta"}


def test_the_two_study_report_and_the_one_study_report(url: str) -> None:
    text, charts, _ = report.build_many(url, ["alpha", "beta"])
    assert [c.key for c in charts] == ["compare-pareto", "compare-vocab", "compare-curves"]
    assert all(c.figure is not None for c in charts)
    assert "<h1>Studies <code>alpha</code>, <code>beta</code></h1>" in text
    one, charts, _ = report.build(url, "alpha")
    alpha = results.load(url, "alpha")
    assert [c.key for c in charts] == [
        make(alpha).key for make in report.CHARTS if report.applies(make, alpha)
    ]
    assert "scaling" not in [c.key for c in charts]  # no trial planned at a compute budget
    assert "<h1>Study <code>alpha</code></h1>" in one and "compare-" not in one


def test_a_forked_studys_summary_names_its_carried_trials(tmp_path: Path) -> None:
    found = f"sqlite:///{tmp_path / 'fork.db'}"
    fake_study.fabricate(found, "child", 4, seed=1)
    storage = st.open_storage(found)
    attrs = optuna_compat.TRIAL_USER_ATTRS_TABLE
    trials = optuna.load_study(study_name="child", storage=storage).get_trials()[:2]
    with storage.engine.begin() as conn:  # finished trials: Optuna's API refuses new attributes
        conn.execute(
            attrs.insert(),
            [
                {
                    "trial_id": optuna_compat.trial_id(t),
                    "key": "carried_from",
                    "value_json": json.dumps(f"parent#{t.number}"),
                }
                for t in trials
            ],
        )
    storage.engine.dispose()
    data = results.load(found, "child")
    assert list(data.trials["carried_from"].fillna("")) == ["parent#0", "parent#1", "", ""]
    assert "2 trials carried from parent (not run here)" in report.summary(data)


def test_studies_on_different_corpora_or_tokenizers_are_flagged(url: str) -> None:
    import dataclasses

    alpha, beta = results.load_many(url, ["alpha", "beta"])
    assert report.comparison_warnings([alpha, beta]) == []  # same (unknown) corpus, tokenizers

    def on(data: results.StudyResults, corpus: str) -> results.StudyResults:
        spec = {**(data.user_attrs.get("spec") or {}), "corpus": {"dir": corpus}}
        return dataclasses.replace(data, user_attrs={**data.user_attrs, "spec": spec})

    [warning] = report.comparison_warnings([on(alpha, "/d/history"), on(beta, "/d/parenting")])
    assert "different corpora (alpha: /d/history; beta: /d/parenting)" in warning
    assert report.comparison_warnings([on(alpha, "/d/x"), on(beta, "/d/x")]) == []
    bytes_only = dataclasses.replace(beta, trials=beta.trials.assign(tokenizer="byte"))
    [warning] = report.comparison_warnings([alpha, bytes_only])
    assert "different tokenizers" in warning and "beta: byte" in warning
    page = report.summary_many([on(alpha, "/d/history"), on(beta, "/d/parenting")])
    assert 'class="note warning"' in page and "different corpora" in page
