"""results: a study (Optuna's tables plus the project's) as tidy frames, read fast and read-only."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from lm.errors import SweepsError
from sweeps import records, results
from sweeps import storage as st
from tests.sweeps import fake_study


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, optuna.Study]:
    """30 trials written through the public APIs (add_trials, record_eval, record_samples)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('results') / 'small.db'}"
    return url, fake_study.fabricate(url, "small", 30, seed=3, bulk=False)


def test_one_row_per_trial_with_the_trial_record(small: tuple[str, optuna.Study]) -> None:
    url, study = small
    frame = results.study_frame(url, "small")
    trials = study.get_trials(deepcopy=False)
    assert list(frame["number"]) == [t.number for t in trials]
    assert set(fake_study.OUTCOMES) <= set(frame["outcome"])  # every outcome is represented
    for t in trials:
        row = frame.set_index("number").loc[t.number]
        attrs = t.user_attrs
        assert row["state"] == t.state.name and row["outcome"] == attrs["outcome"]
        assert row["reason"] == attrs["reason"]
        for name, value in t.params.items():
            assert row[f"param_{name}"] == value
        for key in (
            "val_bpb",
            "peak_mem_bytes",
            "predicted_mem_bytes",
            "tokens_per_s",
            "wall_s",
            "params_total",
            "bytes_per_token",
            "unk_rate",
            "unigram_gap",
            "kl_mean_to_unigram",
            "mean_kl_to_mean",
            "top20_overlap",
        ):
            if key in attrs:
                assert row[key] == pytest.approx(attrs[key]), key
            else:
                assert pd.isna(row[key]), key
        for key in (
            "vocab_size",
            "tokenizer",
            "d_ff",
            "seq_len",
            "batch_size",
            "attention",
            "precision",
        ):
            assert row[key] == attrs["config"][key]
        assert row["fitted"] == ("fitted" in attrs)
        assert row["host"] == attrs["host"]
        assert json.loads(row["config_json"]) == attrs["config"]
    never_run = frame[frame["outcome"] == "predicted_oom"]
    assert never_run["peak_mem_bytes"].isna().all() and never_run["val_bpb"].isna().all()
    assert never_run["predicted_mem_bytes"].notna().all()
    # integers stay integers (4096, not 4096.0, in an export)
    assert frame["vocab_size"].dtype == "Int64" and frame["peak_mem_bytes"].dtype == "Int64"


def test_evaluations_and_samples(small: tuple[str, optuna.Study]) -> None:
    url, _ = small
    evals = results.evals_frame(url, "small")
    stored = records.read_evals(st.open_engine(url), "small")
    assert len(evals) == len(stored) > 30
    assert list(evals.columns[: len(results.EVAL_COLUMNS)]) == list(results.EVAL_COLUMNS)
    assert "samples" not in evals and "top_tokens" in evals
    first = stored[0]["metrics"]
    assert evals.loc[0, "val_bpb"] == pytest.approx(first["val_bpb"])
    assert evals.loc[0, "top_tokens"] == first["top_tokens"]
    samples = results.samples_frame(url, "small")
    assert list(samples.columns) == ["trial_number", "step", "tokens", "prompt", "text"]
    assert set(samples["prompt"]) == set(fake_study.PROMPTS)
    launched = set(evals["trial_number"])
    assert set(samples["trial_number"]) == launched


def test_load_gives_everything_with_directions_and_space(small: tuple[str, optuna.Study]) -> None:
    url, _ = small
    data = results.load(url, "small")
    assert data.name == "small" and data.storage == url
    assert data.directions == ["minimize", "minimize"]
    assert data.objectives == ["val_bpb", "peak_mem"]
    assert data.user_attrs["memory_budget_bytes"] == fake_study.BUDGET
    assert set(data.distributions) == set(fake_study.DISTRIBUTIONS)
    assert len(data.trials) == 30 and len(data.evals) and len(data.samples)


def test_bulk_fabrication_matches_the_public_api(
    small: tuple[str, optuna.Study], tmp_path: Path
) -> None:
    """The 2,000-trial tests write in bulk; the rows must be exactly what the APIs write."""
    url, _ = small
    bulk_url = f"sqlite:///{tmp_path / 'bulk.db'}"
    fake_study.fabricate(bulk_url, "small", 30, seed=3, bulk=True)
    a, b = results.load(url, "small"), results.load(bulk_url, "small")
    when = ["datetime_start", "datetime_complete"]  # written a moment apart
    pd.testing.assert_frame_equal(a.trials.drop(columns=when), b.trials.drop(columns=when))
    pd.testing.assert_frame_equal(a.evals, b.evals)
    pd.testing.assert_frame_equal(a.samples, b.samples)

    # and Optuna itself reads the bulk rows back as the same trials
    def attrs(u: str) -> list[dict]:
        trials = optuna.load_study(study_name="small", storage=u).get_trials()
        return [
            {k: v for k, v in t.user_attrs.items() if k != "started_at"}
            | {
                "_params": t.params,
                "_values": t.values,
                "_state": t.state,
                "_intermediate": t.intermediate_values,
            }
            for t in trials
        ]

    assert attrs(bulk_url) == attrs(url)


def test_unfinished_and_foreign_trials(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    study = optuna.create_study(study_name="plain", storage=st.open_storage(url))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)  # no runner attributes
    study.enqueue_trial({"x": 0.5})
    running = study.ask()  # the enqueued one
    study.enqueue_trial({"x": 0.25})
    frame = results.study_frame(url, "plain")
    assert list(frame["outcome"]) == ["complete", "complete", "running", "waiting"]
    assert running.number == 2
    assert list(frame["param_x"].iloc[2:]) == [0.5, 0.25]  # queued parameters, not yet suggested
    assert frame["val_bpb"].isna().all() and frame["reason"].isna().all()
    assert (frame["retries"] == 0).all()
    # a crashed trial without attributes (an Optuna FAIL) reads as crashed
    study.tell(running, state=TrialState.FAIL)
    assert results.study_frame(url, "plain").loc[2, "outcome"] == "crashed"


def test_empty_study_has_the_columns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    optuna.create_study(study_name="empty", storage=st.open_storage(url))
    data = results.load(url, "empty")
    assert data.trials.empty and data.evals.empty and data.samples.empty
    for column in ("number", "outcome", "val_bpb", "peak_mem_bytes", "vocab_size"):
        assert column in data.trials
    assert "val_bpb" in data.evals and "tokens" in data.evals


def test_unknown_study_names_the_ones_there(small: tuple[str, optuna.Study]) -> None:
    url, _ = small
    with pytest.raises(SweepsError, match=r"'nope' is not in storage .*studies there: small"):
        results.study_frame(url, "nope")


def test_a_missing_sqlite_file_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    with pytest.raises(SweepsError, match="does not exist"):
        results.study_frame(f"sqlite:///{path}", "x")
    assert not path.exists()


def test_a_database_without_studies_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x INTEGER)").connection.commit()
    with pytest.raises(SweepsError, match="holds no Optuna study"):
        results.study_frame(f"sqlite:///{path}", "x")


@pytest.mark.slow
def test_two_thousand_trials_are_read(big_study: str) -> None:
    """In how long: tests/bench/bench_reading.py prints it."""
    data = results.load(big_study, "big")
    assert len(data.trials) == 2000 and len(data.evals) > 5000
