"""A configuration the corpus cannot support (issue 24, item 1): a ``seq_len`` longer than a
split holds tokens with its tokenizer. Caught at planning where the corpus is known (dry run,
run), and otherwise counted as its own outcome ``too_little_data``, told to the sampler as
infeasible, never an environment failure that is re-queued and replayed on every resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from lm import outcomes
from lm.tokens import load_tokens, token_ceiling
from sweeps import workers as wk
from sweeps.spec import read_spec
from tests.shared import shared_corpus
from tests.sweeps.cli import assert_user_error
from tests.sweeps.helpers import spec_dict, sweeps_run, toml_text, worker_study

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")


def write_spec(tmp: Path, data: dict[str, Any]) -> Path:
    path = tmp / "spec.toml"
    path.write_text(toml_text(data), encoding="utf-8")
    return path


def test_the_dry_run_and_run_refuse_a_seq_len_no_split_can_hold(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    corpus = shared_corpus(tmp_path_factory)
    val_bytes = (corpus / "val.txt").stat().st_size
    too_long = val_bytes + 10  # more than the split's bytes: no tokenizer can make it fit
    spec = write_spec(
        tmp_path, spec_dict("long", corpus, space={"seq_len": {"choices": [16, too_long]}})
    )
    for extra in (["--dry-run"], []):
        proc = sweeps_run(
            "run",
            str(spec),
            "--storage",
            f"sqlite:///{tmp_path / 'db.sqlite'}",
            *extra,
            cwd=tmp_path,
        )
        assert_user_error(proc, f"seq_len={too_long}", "validation split", "bigger corpus")
    assert not (tmp_path / "db.sqlite").exists()  # refused before anything was written


def test_an_exact_count_from_the_token_cache_is_used_at_planning(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    corpus = shared_corpus(tmp_path_factory)
    cache = load_tokens(corpus, "word", 300)
    assert token_ceiling(corpus, "word", 300).val_tokens == len(cache.val)
    spec = write_spec(
        tmp_path,
        spec_dict(
            "long",
            corpus,
            fixed={"tokenizer": "word", "vocab_size": 300},
            space={"seq_len": {"choices": [16, len(cache.val)]}},
        ),
    )
    proc = sweeps_run("run", str(spec), "--dry-run", cwd=tmp_path)
    assert_user_error(proc, f"holds at most {len(cache.val):,} tokens", "'word'")


def test_a_config_the_corpus_cannot_support_is_counted_as_its_own_outcome(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(shared_corpus(tmp_path_factory), corpus)
    shutil.rmtree(corpus / "cache", ignore_errors=True)  # planning sees only the byte bound
    val_bytes = (corpus / "val.txt").stat().st_size
    # Fewer word tokens than that in the split, but not fewer bytes: passes planning.
    seq_len = val_bytes // 2
    spec = read_spec(
        spec_dict(
            "short",
            corpus,
            fixed={"tokenizer": "word", "vocab_size": 300},
            study={"n_trials": 2},
            space={"seq_len": {"choices": [16, seq_len]}},
            enqueue=[{"seq_len": seq_len}, {"seq_len": 16}],
        )
    )
    wk_storage, study = worker_study(spec, tmp_path / "db.sqlite")
    monkeypatch.setenv("SWEEPS_NUM_THREADS", "1")
    options = wk.RunOptions(n_workers=1, launcher="subprocess", poll_s=0.05)
    [result] = wk.run_workers(spec, wk_storage, study, tmp_path / "runs", options)
    assert result.error is None, result.error
    trials = study.get_trials()
    state = wk.budget_state(trials, 2)
    assert state.done and state.finished == 2, [(t.state, t.user_attrs) for t in trials]
    [bad] = [t for t in trials if t.params["seq_len"] == seq_len]
    assert bad.state == TrialState.PRUNED
    assert bad.user_attrs["outcome"] == outcomes.TOO_LITTLE_DATA
    assert bad.user_attrs["constraint"] == 1.0  # the sampler learns to avoid it
    assert not bad.user_attrs.get("environment_failure")
    assert "fewer than seq_len + 1" in bad.user_attrs["reason"]
    result_json = json.loads((Path(bad.user_attrs["run_dir"]) / "result.json").read_text())
    assert result_json["exit_code"] == outcomes.EXIT_CODES[outcomes.TOO_LITTLE_DATA]
